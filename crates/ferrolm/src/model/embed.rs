//! Text embeddings: the final hidden states of a text, pooled into one vector.

use super::Model;
use super::encoder::{self, EncoderWeights, Segment};
use crate::batch::Batch;
use crate::kv::{KvType, SeqId};
use crate::{Error, Result};

/// How the hidden states of a text's tokens become one vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pooling {
    /// The mean over all tokens.
    #[default]
    Mean,
    /// The first token (the BOS/CLS position).
    Cls,
    /// The last token (what a causal model has seen all of the text at).
    Last,
    /// No pooling: every token's hidden state, `[n_tokens, n_embd]` row-major per text
    /// (llama.cpp's `--pooling none`). Never normalised. Not named by [`Pooling::from_name`]: a
    /// caller expecting one vector per text must ask for it explicitly.
    None,
}

impl Pooling {
    /// Parses `mean`, `cls` or `last`.
    pub fn from_name(name: &str) -> Option<Self> {
        match name.to_ascii_lowercase().as_str() {
            "mean" => Some(Pooling::Mean),
            "cls" => Some(Pooling::Cls),
            "last" => Some(Pooling::Last),
            _ => None,
        }
    }

    /// The GGUF `{arch}.pooling_type` code (1 mean, 2 cls, 3 last), if it is one of these.
    pub fn from_gguf_code(code: u64) -> Option<Self> {
        match code {
            1 => Some(Pooling::Mean),
            2 => Some(Pooling::Cls),
            3 => Some(Pooling::Last),
            _ => None,
        }
    }
}

/// Adds the hidden state `h` of position `pos` of a text of `n` tokens to its output `out`
/// (`[n_embd]`, or `[n, n_embd]` without pooling).
fn add_row(pooling: Pooling, out: &mut [f32], pos: usize, n: usize, h: &[f32]) {
    let d = h.len();
    let (dst, wt) = match pooling {
        Pooling::None => (&mut out[pos * d..(pos + 1) * d], 1.0),
        Pooling::Mean => (out, 1.0 / n as f32),
        Pooling::Cls if pos == 0 => (out, 1.0),
        Pooling::Last if pos + 1 == n => (out, 1.0),
        Pooling::Cls | Pooling::Last => return,
    };
    dst.iter_mut().zip(h).for_each(|(o, &x)| *o += wt * x);
}

/// Scales each pooled vector of `out` to unit L2 norm (a zero vector stays zero). Per-token
/// states ([`Pooling::None`]) are left as they are: they are never normalised.
pub fn normalize_embeddings(out: &mut [Vec<f32>], pooling: Pooling) {
    if pooling == Pooling::None {
        return;
    }
    for v in out {
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        if norm > 0.0 {
            v.iter_mut().for_each(|x| *x /= norm);
        }
    }
}

/// Most tokens run through the model in one forward pass while embedding.
const EMBED_BATCH: usize = 512;

impl Model {
    /// The pooling the model file asks for (`{arch}.pooling_type`), if any.
    pub fn default_pooling(&self) -> Option<Pooling> {
        let key = format!("{}.pooling_type", self.gguf.architecture().unwrap_or_default());
        self.gguf.get_u64(&key).ok().and_then(Pooling::from_gguf_code)
    }

    /// Embeds each text: tokenized as a whole prompt (BOS and EOS as the tokenizer adds them),
    /// run through the model, its final hidden states pooled, and L2-normalised if asked.
    ///
    /// Short texts share forward passes (up to 512 tokens at a time, one sequence each); the
    /// result for a text does not depend on which others are embedded with it.
    /// Returns one `[n_embd]` vector per text (`[n_tokens, n_embd]`, never normalised, with
    /// [`Pooling::None`]).
    pub fn embed<S: AsRef<str>>(
        &self,
        texts: &[S],
        pooling: Pooling,
        normalize: bool,
    ) -> Result<Vec<Vec<f32>>> {
        let tok = self.tokenizer();
        let inputs = texts
            .iter()
            .map(|t| Ok(tok.encode(t.as_ref(), true, false)?))
            .collect::<Result<Vec<Vec<u32>>>>()?;
        let mut out = self.embed_tokens(&inputs, pooling)?;
        if normalize {
            normalize_embeddings(&mut out, pooling);
        }
        Ok(out)
    }

    /// The pooled final hidden states (after the output norm of a decoder) of token sequences,
    /// one `[n_embd]` vector each (`[n_tokens, n_embd]` with [`Pooling::None`]), not
    /// normalised; see [`Model::embed`]. An empty sequence is an error.
    pub fn embed_tokens(&self, inputs: &[Vec<u32>], pooling: Pooling) -> Result<Vec<Vec<f32>>> {
        if let Some(i) = inputs.iter().position(Vec::is_empty) {
            return Err(Error::InvalidInput(format!("text {i} has no tokens to embed")));
        }
        let n_vocab = self.tokenizer().n_vocab();
        if let Some(&id) = inputs.iter().flatten().find(|&&id| id as usize >= n_vocab) {
            return Err(Error::InvalidInput(format!(
                "token id {id} is outside the vocabulary (0..{n_vocab})"
            )));
        }
        let d = self.config.n_embd;
        let rows = |t: &Vec<u32>| if pooling == Pooling::None { t.len() } else { 1 };
        let mut out: Vec<Vec<f32>> = inputs.iter().map(|t| vec![0.0f32; rows(t) * d]).collect();
        // Group whole texts into batches of at most EMBED_BATCH tokens; a longer text runs alone,
        // in chunks over its own cache.
        let mut start = 0;
        while start < inputs.len() {
            let mut end = start + 1;
            let mut total = inputs[start].len();
            while end < inputs.len() && total + inputs[end].len() <= EMBED_BATCH {
                total += inputs[end].len();
                end += 1;
            }
            self.embed_group(&inputs[start..end], pooling, &mut out[start..end])?;
            start = end;
        }
        Ok(out)
    }

    /// Embeds a group of texts with an encoder: one pass over all of them, each text attending
    /// to itself only.
    fn encode_group(
        &self,
        enc: &EncoderWeights,
        inputs: &[Vec<u32>],
        pooling: Pooling,
        out: &mut [Vec<f32>],
    ) -> Result<()> {
        self.prepare_weights();
        let d = self.config.n_embd;
        let ids: Vec<u32> = inputs.concat();
        let mut segments = Vec::with_capacity(inputs.len());
        let mut start = 0;
        for t in inputs {
            segments.push(Segment { start, len: t.len() });
            start += t.len();
        }
        let hidden =
            encoder::encode(&self.config, &self.weights.token_embd, enc, &ids, &segments, self.exact_f32)?;
        for ((s, o), t) in segments.iter().zip(out.iter_mut()).zip(inputs) {
            let rows = &hidden[s.start * d..(s.start + s.len) * d]; // [len, d]
            for (pos, h) in rows.chunks_exact(d).enumerate() {
                add_row(pooling, o, pos, t.len(), h);
            }
        }
        Ok(())
    }

    /// Embeds a group of texts, one sequence each, into `out` (one `[n_embd]` row per text).
    fn embed_group(&self, inputs: &[Vec<u32>], pooling: Pooling, out: &mut [Vec<f32>]) -> Result<()> {
        if let Some(enc) = &self.weights.encoder {
            return self.encode_group(enc, inputs, pooling, out);
        }
        let d = self.config.n_embd;
        let longest = inputs.iter().map(Vec::len).max().unwrap_or(0);
        let mut kv = self.new_kv_cache_typed(longest, KvType::F32, KvType::F32)?;
        // (text index, position) of each batch row, filled chunk by chunk.
        let mut rows: Vec<(usize, usize)> = Vec::new();
        let mut batch = Batch::new();
        let mut flush = |batch: &mut Batch, rows: &mut Vec<(usize, usize)>| -> Result<()> {
            if batch.is_empty() {
                return Ok(());
            }
            let hidden = self.forward_hidden(batch, &mut kv)?; // [n, d]
            for (h, &(i, pos)) in hidden.chunks_exact(d).zip(rows.iter()) {
                add_row(pooling, &mut out[i], pos, inputs[i].len(), h);
            }
            batch.clear();
            rows.clear();
            Ok(())
        };
        for (i, toks) in inputs.iter().enumerate() {
            for (pos, &t) in toks.iter().enumerate() {
                batch.push(i as SeqId, pos as u32, t, false);
                rows.push((i, pos));
                if batch.len() == EMBED_BATCH {
                    flush(&mut batch, &mut rows)?;
                }
            }
        }
        flush(&mut batch, &mut rows)
    }
}
