//! Reranking: how relevant each document is to a query, from a model with a classifier head.
//!
//! As llama.cpp's rank pooling does:
//! - Qwen 3 rerankers (decoders): each (query, document) pair becomes a prompt through the
//!   model's `rerank` template (`{query}` and `{document}` substituted, special tokens parsed,
//!   nothing added), the final hidden state of its last token goes through the classifier head
//!   (`cls.output`: the "yes" and "no" rows of the LM head), and the score is the softmax
//!   probability of the first label ("yes").
//! - Cross-encoders (BERT and XLM-RoBERTa sequence classifiers: bge-reranker, ms-marco
//!   MiniLM): without a template the pair is `[BOS] query [EOS] [SEP] document [EOS]`, each
//!   special token where the vocabulary adds it (BERT: `[CLS] query [SEP] document`), the first
//!   token's final hidden state goes through the dense layer `cls` and tanh when the model has
//!   one, then `cls.output`, and the score is the first output, a logit.

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

/// `w · x + b` for a head `w` (`[rows, x.len()]`, any stored type).
fn dense(w: &crate::ops::Weight, b: Option<&[f32]>, x: &[f32]) -> Vec<f32> {
    let mut row = vec![0.0f32; x.len()];
    let mut out: Vec<f32> = (0..w.rows)
        .map(|r| {
            w.dequantize_row(r, &mut row);
            row.iter().zip(x).map(|(a, b)| a * b).sum::<f32>()
        })
        .collect();
    if let Some(b) = b {
        out.iter_mut().zip(b).for_each(|(o, b)| *o += b);
    }
    out
}

/// Document indices, most relevant first (equal scores keep the documents' order).
pub fn ranking(scores: &[Relevance]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].score.total_cmp(&scores[a].score));
    order
}

impl Model {
    /// Whether the model can rerank: it has a classifier head, and a template for its prompts
    /// unless it is an encoder (a cross-encoder reads the pair as two segments).
    pub fn is_reranker(&self) -> bool {
        self.weights.cls_out.is_some() && (self.rerank_template().is_some() || self.config.arch.is_encoder())
    }

    /// The template of reranker prompts (`{query}` and `{document}` placeholders), if any.
    pub fn rerank_template(&self) -> Option<&str> {
        self.gguf.opt_str(RERANK_TEMPLATE_KEY).ok().flatten()
    }

    /// The tokens the model scores `document` with for `query`.
    pub fn rerank_tokens(&self, query: &str, document: &str) -> Result<Vec<u32>> {
        let Some(template) = self.rerank_template() else {
            if self.config.arch.is_encoder() {
                return self.pair_tokens(query, document);
            }
            return Err(Error::InvalidInput(format!(
                "the model cannot rerank: it has no `{RERANK_TEMPLATE_KEY}` prompt template"
            )));
        };
        let prompt = template.replace("{query}", query).replace("{document}", document);
        Ok(self.tokenizer().encode(&prompt, false, true)?)
    }

    /// A cross-encoder's input for a pair, as llama.cpp's server builds it without a template:
    /// `[BOS] query [EOS] [SEP] document [EOS]`, each special token where the vocabulary adds
    /// it (the separator where there is no EOS).
    fn pair_tokens(&self, query: &str, document: &str) -> Result<Vec<u32>> {
        let tok = self.tokenizer();
        let special = tok.special_ids();
        let eos = special.eos.or(special.sep);
        let mut out = Vec::new();
        if tok.add_bos() {
            out.extend(tok.bos());
        }
        out.extend(tok.encode(query, false, false)?);
        if tok.add_eos() {
            out.extend(eos);
        }
        if tok.add_sep() {
            out.extend(special.sep);
        }
        out.extend(tok.encode(document, false, false)?);
        if tok.add_eos() {
            out.extend(eos);
        }
        Ok(out)
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
        // A cross-encoder reads its first token ([CLS]), a decoder its last.
        let pooling = if self.config.arch.is_encoder() { Pooling::Cls } else { Pooling::Last };
        let pooled = self.embed_tokens(&inputs, pooling)?;
        let mut out = Vec::with_capacity(pooled.len());
        for (h, toks) in pooled.iter().zip(&inputs) {
            let h = match &self.weights.cls {
                Some((w, b)) => dense(w, b.as_deref(), h).into_iter().map(f32::tanh).collect(),
                None => h.clone(),
            };
            let logits = dense(head, bias.as_deref(), &h); // [n_labels]
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
