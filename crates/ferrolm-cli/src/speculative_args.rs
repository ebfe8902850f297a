//! Command-line flags of speculative decoding (`generate`, `bench`): a draft model or prompt
//! lookup.

use anyhow::{Context, bail};
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
}

impl SpeculativeArgs {
    /// The drafter's short name (`lookup`, `draft`), `None` when speculative decoding is off.
    pub fn drafter_name(&self) -> Option<&'static str> {
        if self.lookup { Some("lookup") } else { self.model_draft.as_ref().map(|_| "draft") }
    }

    /// Loads the draft model, if one was named.
    pub fn load_draft(&self) -> anyhow::Result<Option<Model>> {
        let Some(name) = &self.model_draft else { return Ok(None) };
        let path = crate::pull::resolve_model(Some(name))?;
        let model =
            Model::load(&path).with_context(|| format!("loading the draft model {}", path.display()))?;
        Ok(Some(model))
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
        Ok(Some(SpeculativeOptions { drafter, max_draft: self.draft_max as usize }))
    }
}
