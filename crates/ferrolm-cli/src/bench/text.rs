//! Generation tests on a real text (`--prompt-file`): the greedy continuation of the file's
//! tokens, plainly and with speculative decoding (`--lookup`, `--model-draft`). Random tokens,
//! which the other tests feed, never repeat a prompt or agree with a draft model, so a drafter's
//! gain can only be measured on text. The prompt is prefilled before the clock starts; the time
//! of a repetition is its decode time (forward passes and sampling after the prompt).

use anyhow::Context as _;
use ferrolm::model::Model;
use ferrolm::session::{GenerateParams, Session, SessionOptions, SpeculativeOptions};

/// How a text test decodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextMode {
    /// One token per forward pass.
    Plain,
    /// With the drafter of the command line (one verification pass per draft).
    Speculative,
}

/// The repetitions of one text test.
#[derive(Debug, Default)]
pub struct TextRun {
    /// Nanoseconds of each repetition's decoding.
    pub samples_ns: Vec<u64>,
    /// Tokens drafted, over all repetitions.
    pub n_drafted: usize,
    /// Drafted tokens kept, over all repetitions.
    pub n_accepted: usize,
}

/// Generates `n_gen` tokens after `prompt`, greedily and past end-of-generation tokens, once
/// unrecorded (unless `warmup` is false) and then `reps` times, with speculative decoding
/// when `spec` is given. The session keeps the prompt cached between repetitions, and every
/// repetition produces the same tokens.
pub fn run(
    model: &Model,
    opts: SessionOptions,
    prompt: &[u32],
    n_gen: usize,
    spec: Option<SpeculativeOptions<'_>>,
    reps: usize,
    warmup: bool,
) -> anyhow::Result<TextRun> {
    let mut session = Session::new(model, opts)?;
    session.set_speculative(spec).context("speculative decoding")?;
    let greedy = |n| GenerateParams { ignore_eos: true, ..GenerateParams::greedy(n) };
    if warmup {
        session.generate_tokens(prompt, &greedy(1)).context("warm-up run on the prompt file")?;
    }
    let mut run = TextRun::default();
    for rep in 0..reps {
        let done = session
            .generate_tokens(prompt, &greedy(n_gen))
            .with_context(|| format!("repetition {}", rep + 1))?;
        let stats = &done.stats;
        if stats.n_generated < n_gen {
            anyhow::bail!(
                "the continuation ended after {} of {n_gen} tokens ({:?})",
                stats.n_generated,
                stats.finish
            );
        }
        run.samples_ns.push(u64::try_from(stats.decode_time.as_nanos()).unwrap_or(u64::MAX).max(1));
        run.n_drafted += stats.n_drafted;
        run.n_accepted += stats.n_draft_accepted;
    }
    Ok(run)
}
