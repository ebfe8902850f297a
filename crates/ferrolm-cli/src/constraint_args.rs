//! Constrained-output options shared by `generate` and `chat`.

use std::path::PathBuf;

use anyhow::{Context, bail};
use ferrolm::constrain::{Constraint, ConstraintSpec};
use ferrolm::model::Model;

/// Constrain the output to a JSON schema, a GBNF or Lark grammar or a regular expression (at most one).
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
    /// Output must match this GBNF grammar (llama.cpp's format; `root` rule), given inline.
    #[arg(long = "grammar")]
    grammar: Option<String>,
    /// Output must match the GBNF grammar in this file (llama.cpp's `--grammar-file`).
    #[arg(long = "grammar-file")]
    grammar_file: Option<PathBuf>,
    /// Output must match this regular expression.
    #[arg(long = "regex")]
    regex: Option<String>,
}

impl ConstraintArgs {
    /// The constraint asked for, if any, compiled once for `model`'s vocabulary so that a schema,
    /// grammar or regex that cannot be used is an error naming its flag before anything is
    /// generated (the session compiles it again when it starts: a few milliseconds).
    pub fn to_spec(&self, model: &Model) -> anyhow::Result<Option<ConstraintSpec>> {
        let Some((flag, spec)) = self.parse()? else { return Ok(None) };
        let env = model.token_env().context("preparing the vocabulary for constrained output")?;
        Constraint::new(&env, &spec).with_context(|| format!("{flag} cannot be used"))?;
        Ok(Some(spec))
    }

    /// The constraint asked for and the flag that gave it, read but not compiled.
    fn parse(&self) -> anyhow::Result<Option<(&'static str, ConstraintSpec)>> {
        let mut specs = Vec::new();
        if let Some(s) = &self.json_schema {
            let schema = serde_json::from_str(s).context("--json-schema is not valid JSON")?;
            specs.push(("--json-schema", ConstraintSpec::JsonSchema(schema)));
        }
        if let Some(f) = &self.json_schema_file {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            let schema =
                serde_json::from_str(&text).with_context(|| format!("{} is not valid JSON", f.display()))?;
            specs.push(("--json-schema-file", ConstraintSpec::JsonSchema(schema)));
        }
        if self.json {
            specs.push(("--json", ConstraintSpec::JsonObject));
        }
        if let Some(f) = &self.lark_file {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            specs.push(("--lark-file", ConstraintSpec::Lark(text)));
        }
        if let Some(g) = &self.grammar {
            specs.push(("--grammar", ConstraintSpec::Gbnf(g.clone())));
        }
        if let Some(f) = &self.grammar_file {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            specs.push(("--grammar-file", ConstraintSpec::Gbnf(text)));
        }
        if let Some(r) = &self.regex {
            specs.push(("--regex", ConstraintSpec::Regex(r.clone())));
        }
        if specs.len() > 1 {
            bail!(
                "give at most one of --json-schema, --json-schema-file, --json, --lark-file, --grammar, \
                 --grammar-file, --regex"
            );
        }
        Ok(specs.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_read_and_checked_for_conflicts() {
        let args = ConstraintArgs { regex: Some("[0-9]+".into()), ..Default::default() };
        assert_eq!(args.parse().expect("parse"), Some(("--regex", ConstraintSpec::Regex("[0-9]+".into()))));
        let args = ConstraintArgs { json_schema: Some("{not json".into()), ..Default::default() };
        assert!(args.parse().expect_err("error").to_string().contains("--json-schema is not valid JSON"));
        let args = ConstraintArgs { json: true, regex: Some("a".into()), ..Default::default() };
        assert!(args.parse().expect_err("error").to_string().contains("at most one"));
        assert_eq!(ConstraintArgs::default().parse().expect("parse"), None);
    }
}
