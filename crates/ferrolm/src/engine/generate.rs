//! Single-sequence generation: prefill the prompt as one batch, then decode token by token.

use std::ops::ControlFlow;
use std::time::{Duration, Instant};

use super::Batch;
use crate::kv::{KvCache, SeqId};
use crate::model::Model;
use crate::sampling::{Sampler, SamplerParams};
use crate::{Error, Result};

/// Options of [`generate`].
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// Maximum tokens to generate.
    pub max_tokens: usize,
    /// Sampling parameters.
    pub sampler: SamplerParams,
    /// Largest prompt chunk processed in one forward pass.
    pub n_batch: usize,
    /// Stop at the model's end-of-generation tokens.
    pub stop_at_eog: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        Self { max_tokens: 256, sampler: SamplerParams::default(), n_batch: 512, stop_at_eog: true }
    }
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// `max_tokens` were generated.
    Length,
    /// The model produced an end-of-generation token.
    EndOfGeneration,
    /// The KV cache is full.
    ContextFull,
    /// The callback asked to stop.
    Cancelled,
}

/// Timings and counts of one generation.
#[derive(Clone, Debug)]
pub struct GenerationStats {
    /// Prompt tokens processed.
    pub n_prompt: usize,
    /// Time spent on the prompt.
    pub prompt_time: Duration,
    /// Tokens generated (sampled), including a final end-of-generation token.
    pub n_generated: usize,
    /// Forward passes over generated tokens.
    pub n_decode: usize,
    /// Time spent decoding (forward passes and sampling after the prompt).
    pub decode_time: Duration,
    /// Why it stopped.
    pub finish: FinishReason,
}

impl GenerationStats {
    /// Prompt tokens per second.
    pub fn prompt_tps(&self) -> f64 {
        rate(self.n_prompt, self.prompt_time)
    }

    /// Decoded tokens per second.
    pub fn decode_tps(&self) -> f64 {
        rate(self.n_decode, self.decode_time)
    }
}

fn rate(n: usize, t: Duration) -> f64 {
    if t.is_zero() { 0.0 } else { n as f64 / t.as_secs_f64() }
}

/// Generates a continuation of `prompt` in sequence `seq` of `kv`, calling `on_token` with each
/// sampled token id; the callback returns [`ControlFlow::Break`] to stop early.
pub fn generate(
    model: &Model,
    kv: &mut KvCache,
    seq: SeqId,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32) -> ControlFlow<()>,
) -> Result<GenerationStats> {
    if prompt.is_empty() {
        return Err(Error::InvalidInput("the prompt is empty".into()));
    }
    let start_pos = kv.seq(seq).map_or(0, |s| s.next_position());
    let used = kv.seq(seq).map_or(0, |s| s.len());
    if used + prompt.len() > kv.capacity() {
        return Err(Error::InvalidInput(format!(
            "prompt of {} tokens does not fit the context of {} tokens",
            prompt.len(),
            kv.capacity() - used
        )));
    }
    let mut sampler = Sampler::new(opts.sampler.clone(), model.tokenizer())?;
    prompt.iter().for_each(|&t| sampler.accept(t));
    let t0 = Instant::now();
    let mut logits = None;
    let n_batch = opts.n_batch.max(1);
    for (i, chunk) in prompt.chunks(n_batch).enumerate() {
        let b = Batch::from_prompt(seq, start_pos + (i * n_batch) as u32, chunk);
        logits = Some(model.forward(&b, kv)?);
    }
    let prompt_time = t0.elapsed();
    let mut last = logits.and_then(|l| l.last().map(<[f32]>::to_vec)).unwrap_or_default();
    let mut pos = start_pos + prompt.len() as u32;

    let t1 = Instant::now();
    let (mut n_generated, mut n_decode) = (0, 0);
    let finish = loop {
        if n_generated >= opts.max_tokens {
            break FinishReason::Length;
        }
        let tok = sampler.sample(&last);
        sampler.accept(tok);
        n_generated += 1;
        let is_eog = opts.stop_at_eog && model.tokenizer().is_eog(tok);
        if on_token(tok).is_break() {
            break FinishReason::Cancelled;
        }
        if is_eog {
            break FinishReason::EndOfGeneration;
        }
        if n_generated >= opts.max_tokens {
            break FinishReason::Length;
        }
        if kv.seq(seq).map_or(0, |s| s.len()) >= kv.capacity() {
            break FinishReason::ContextFull;
        }
        let b = Batch::from_prompt(seq, pos, &[tok]);
        let out = model.forward(&b, kv)?;
        n_decode += 1;
        pos += 1;
        last.clear();
        last.extend_from_slice(out.last().unwrap_or(&[]));
    };
    Ok(GenerationStats {
        n_prompt: prompt.len(),
        prompt_time,
        n_generated,
        n_decode,
        decode_time: t1.elapsed(),
        finish,
    })
}
