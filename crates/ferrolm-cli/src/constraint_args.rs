//! Constrained-output options shared by `generate` and `chat`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::constrain::ConstraintSpec;

/// Constrain the output to a JSON schema, a Lark grammar or a regular expression (at most one).
#[derive(clap::Args, Debug, Default)]
pub struct ConstraintArgs {
    /// Output must be JSON valid against this JSON schema (given inline).
    #[arg(short = 'j', long = "json-schema")]
    json_schema: Option<String>,
    /// Output must be JSON valid against the JSON schema in this file.
    #[arg(long = "json-schema-file")]
    json_schema_file: Option<PathBuf>,
    /// Output must be a JSON object (any).
    #[arg(long = "json")]
    json: bool,
    /// Output must match the Lark grammar in this file (llguidance's Lark dialect; `start` rule).
    #[arg(long = "lark-file")]
    lark_file: Option<PathBuf>,
    /// Output must match this regular expression.
    #[arg(long = "regex")]
    regex: Option<String>,
}

impl ConstraintArgs {
    /// The constraint asked for, if any.
    pub fn to_spec(&self) -> anyhow::Result<Option<ConstraintSpec>> {
        let mut specs = Vec::new();
        if let Some(s) = &self.json_schema {
            specs.push(ConstraintSpec::JsonSchema(
                serde_json::from_str(s).context("--json-schema is not valid JSON")?,
            ));
        }
        if let Some(f) = &self.json_schema_file {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            let schema =
                serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", f.display()))?;
            specs.push(ConstraintSpec::JsonSchema(schema));
        }
        if self.json {
            specs.push(ConstraintSpec::JsonObject);
        }
        if let Some(f) = &self.lark_file {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            specs.push(ConstraintSpec::Lark(text));
        }
        if let Some(r) = &self.regex {
            specs.push(ConstraintSpec::Regex(r.clone()));
        }
        if specs.len() > 1 {
            bail!("give at most one of --json-schema, --json-schema-file, --json, --lark-file, --regex");
        }
        Ok(specs.pop())
    }
}
