//! Command-line flags of speculative decoding: a draft model or prompt lookup for `generate` and
//! `bench` ([`SpeculativeArgs`]), the server's draft model for `serve` ([`ServeDraftArgs`]).

use anyhow::{Context, bail};
use ferrolm::engine::DraftSettings;
use ferrolm::model::Model;
use ferrolm::session::{Drafter, MAX_DRAFT, SpeculativeOptions};

/// Speculative decoding: the output stays the model's own, token for token; drafts that the
/// model confirms in one forward pass save decode steps.
#[derive(clap::Args, Debug, Clone)]
pub struct SpeculativeArgs {
    /// Draft model for speculative decoding (GGUF file, Hugging Face folder or catalog name):
    /// a smaller model with the same vocabulary, decoding greedily.
    #[arg(long = "model-draft", visible_alias = "md", conflicts_with = "lookup")]
    model_draft: Option<String>,
    /// Speculative decoding by prompt lookup: draft the tokens that followed the last earlier
    /// occurrence of the context's last n-gram (no draft model; for outputs that copy the
    /// prompt, such as code edits, summaries and extraction).
    #[arg(long)]
    lookup: bool,
    /// Longest n-gram prompt lookup matches.
    #[arg(long = "lookup-ngram", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=16))]
    lookup_ngram: u64,
    /// Most tokens drafted per verification pass (1 to 15).
    #[arg(long = "draft-max", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=MAX_DRAFT as u64))]
    draft_max: u64,
    /// The draft model stops drafting at the first token it gives a probability below this
    /// (0 to 1; 0: always --draft-max tokens).
    #[arg(long = "draft-p-min", default_value_t = 0.75)]
    draft_p_min: f32,
}

impl SpeculativeArgs {
    /// The drafter's short name (`lookup`, `draft`), `None` when speculative decoding is off.
    pub fn drafter_name(&self) -> Option<&'static str> {
        if self.lookup { Some("lookup") } else { self.model_draft.as_ref().map(|_| "draft") }
    }

    /// Loads the draft model, if one was named.
    pub fn load_draft(&self) -> anyhow::Result<Option<Model>> {
        self.model_draft.as_deref().map(load_draft).transpose()
    }

    /// The session's speculative settings (`None`: off); `draft` is [`SpeculativeArgs::load_draft`]'s
    /// model.
    pub fn options<'m>(&self, draft: Option<&'m Model>) -> anyhow::Result<Option<SpeculativeOptions<'m>>> {
        let drafter = match (draft, self.lookup) {
            (Some(m), false) => Drafter::Model(m),
            (None, true) => Drafter::PromptLookup { max_ngram: self.lookup_ngram as usize },
            (None, false) => return Ok(None),
            (Some(_), true) => bail!("--model-draft and --lookup are two drafters: give one"),
        };
        check_p_min(self.draft_p_min)?;
        Ok(Some(SpeculativeOptions { drafter, max_draft: self.draft_max as usize, p_min: self.draft_p_min }))
    }
}

/// The server's draft model: requests speculate with it unless they ask for prompt lookup or set
/// `speculative.n_max` to 0; these flags are the defaults of llama-server's per-request
/// `speculative.n_max`, `speculative.n_min` and `speculative.p_min`.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeDraftArgs {
    /// Draft model for speculative decoding (GGUF file, Hugging Face folder or catalog name): a
    /// smaller model with the same vocabulary. It keeps a cache of --ctx-size tokens per slot.
    #[arg(long = "model-draft", visible_alias = "md", help_heading = "Speculative decoding")]
    model_draft: Option<String>,
    /// Most tokens drafted per verification pass (1 to 15).
    #[arg(long = "draft-max", visible_alias = "draft-n", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=MAX_DRAFT as u64), help_heading = "Speculative decoding")]
    draft_max: u64,
    /// Fewest drafted tokens worth a verification pass: a shorter draft is dropped.
    #[arg(long = "draft-min", default_value_t = 0, help_heading = "Speculative decoding")]
    draft_min: u64,
    /// The draft model stops drafting at the first token it gives a probability below this
    /// (0 to 1).
    #[arg(long = "draft-p-min", default_value_t = 0.75, help_heading = "Speculative decoding")]
    draft_p_min: f32,
}

impl ServeDraftArgs {
    /// The requests' default draft settings (`None` without a draft model); an error for bad
    /// values.
    pub fn settings(&self) -> anyhow::Result<Option<DraftSettings>> {
        if self.model_draft.is_none() {
            return Ok(None);
        }
        check_p_min(self.draft_p_min)?;
        if self.draft_min > self.draft_max {
            bail!("--draft-min ({}) is more than --draft-max ({})", self.draft_min, self.draft_max);
        }
        let d = DraftSettings {
            max_draft: self.draft_max as usize,
            min_draft: self.draft_min as usize,
            p_min: self.draft_p_min,
        };
        d.validate()?;
        Ok(Some(d))
    }

    /// Loads the draft model, if one was named.
    pub fn load_draft(&self) -> anyhow::Result<Option<Model>> {
        self.model_draft.as_deref().map(load_draft).transpose()
    }
}

fn check_p_min(p: f32) -> anyhow::Result<()> {
    if !(0.0..=1.0).contains(&p) {
        bail!("--draft-p-min must be between 0 and 1, not {p}");
    }
    Ok(())
}

/// Loads a draft model by file, folder or catalog name.
fn load_draft(name: &str) -> anyhow::Result<Model> {
    let path = crate::pull::resolve_model(Some(name))?;
    Model::load(&path).with_context(|| format!("loading the draft model {}", path.display()))
}
