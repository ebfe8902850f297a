//! Reranking: how relevant each document is to a query, from a model with a classifier head.
//!
//! As llama.cpp's rank pooling does for Qwen 3 rerankers: each (query, document) pair becomes a
//! prompt through the model's `rerank` template (`{query}` and `{document}` substituted, special
//! tokens parsed, nothing added), the final hidden state of its last token goes through the
//! classifier head (`cls.output`: the "yes" and "no" rows of the LM head), and the score is
//! the softmax probability of the first label ("yes").

use super::Model;
use super::config::Arch;
use super::embed::Pooling;
use crate::{Error, Result};

/// GGUF key of the template that turns a query and a document into a reranker prompt.
const RERANK_TEMPLATE_KEY: &str = "tokenizer.chat_template.rerank";

/// How relevant one document is to the query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Relevance {
    /// The score: the probability of "relevant" for a two-label head, else the first label's
    /// logit. Higher is more relevant.
    pub score: f32,
    /// Tokens of the prompt the document was scored with.
    pub n_tokens: usize,
}

/// Document indices, most relevant first (equal scores keep the documents' order).
pub fn ranking(scores: &[Relevance]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].score.total_cmp(&scores[a].score));
    order
}

impl Model {
    /// Whether the model can rerank: it has a classifier head and a template for its prompts.
    pub fn is_reranker(&self) -> bool {
        self.weights.cls_out.is_some() && self.rerank_template().is_some()
    }

    /// The template of reranker prompts (`{query}` and `{document}` placeholders), if any.
    pub fn rerank_template(&self) -> Option<&str> {
        self.gguf.opt_str(RERANK_TEMPLATE_KEY).ok().flatten()
    }

    /// The tokens the model scores `document` with for `query`.
    pub fn rerank_tokens(&self, query: &str, document: &str) -> Result<Vec<u32>> {
        let Some(template) = self.rerank_template() else {
            return Err(Error::InvalidInput(format!(
                "the model cannot rerank: it has no `{RERANK_TEMPLATE_KEY}` prompt template"
            )));
        };
        let prompt = template.replace("{query}", query).replace("{document}", document);
        Ok(self.tokenizer().encode(&prompt, false, true)?)
    }

    /// Scores each document's relevance to `query` (one entry per document, in order).
    pub fn rerank<S: AsRef<str>>(&self, query: &str, documents: &[S]) -> Result<Vec<Relevance>> {
        let Some((head, bias)) = &self.weights.cls_out else {
            return Err(Error::InvalidInput(
                "the model cannot rerank: it has no classifier head (cls.output)".into(),
            ));
        };
        let inputs = documents
            .iter()
            .map(|d| self.rerank_tokens(query, d.as_ref()))
            .collect::<Result<Vec<Vec<u32>>>>()?;
        let pooled = self.embed_tokens(&inputs, Pooling::Last)?;
        let mut row = vec![0.0f32; self.config.n_embd];
        let mut out = Vec::with_capacity(pooled.len());
        for (h, toks) in pooled.iter().zip(&inputs) {
            // [n_labels]
            let mut logits: Vec<f32> = (0..head.rows)
                .map(|r| {
                    head.dequantize_row(r, &mut row);
                    row.iter().zip(h).map(|(w, x)| w * x).sum::<f32>()
                })
                .collect();
            if let Some(b) = bias {
                logits.iter_mut().zip(b).for_each(|(l, b)| *l += b);
            }
            out.push(Relevance { score: self.label_score(&logits), n_tokens: toks.len() });
        }
        Ok(out)
    }

    /// The score from a head's logits: llama.cpp takes the first output, after a softmax over
    /// the labels for Qwen 3's two-label ("yes", "no") head.
    fn label_score(&self, logits: &[f32]) -> f32 {
        if self.config.arch != Arch::Qwen3 || logits.len() < 2 {
            return logits.first().copied().unwrap_or(0.0);
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = logits.iter().map(|l| (l - max).exp()).sum();
        (logits[0] - max).exp() / sum
    }
}
