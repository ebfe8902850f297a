//! llama-server's `POST /infill`: fill-in-the-middle code completion, as editor plugins
//! (llama.vscode, llama.vim) call it.
//!
//! The request is a `/completion` request whose prompt is built from `input_prefix` (the code
//! before the cursor), `input_suffix` (after it), `prompt` (the start of the current line) and
//! `input_extra` (other files' chunks, `[{"filename", "text"}]`) with the model's FIM tokens in
//! llama-server's repository-level layout (prefix-suffix-middle order):
//!
//! ```text
//! [FIM_REP]myproject\n [FIM_SEP]file0\n text0 … [FIM_SEP]filename\n   (extra context)
//! [BOS] [FIM_PRE]prefix prompt [FIM_SUF]suffix [FIM_MID]
//! ```
//!
//! Without `FIM_SEP` the chunks are joined by a "--- snippet ---" line. The prefix keeps its last
//! `3/4` of a batch of tokens, the suffix its first `1/4` less the prompt, and the extra context
//! the tokens the context has left after a batch and twice the generation limit (its newest
//! tokens). The answer is `/completion`'s.

use axum::body::Bytes;
use axum::response::Response;
use serde_json::Value;

use super::AppState;
use super::backend::Backend;
use super::completions::PromptIn;
use super::error::ApiError;
use super::json::{parse_object, token_id, type_name};
use super::native;

/// llama-server's default `--batch-size`, which sizes the prefix and suffix it keeps.
const N_BATCH: usize = 2048;

/// The separator of extra chunks for models without a file-separator token.
const SNIPPET_SEPARATOR: &str = "\n\n--- snippet ---\n\n";

/// A model's fill-in-the-middle tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FimTokens {
    /// Before the prefix.
    pub pre: u32,
    /// Before the suffix.
    pub suf: u32,
    /// Where the middle starts (the last prompt token).
    pub mid: u32,
    /// Before the repository name, if the model has it.
    pub rep: Option<u32>,
    /// Before each file name, if the model has it.
    pub sep: Option<u32>,
}

/// The tokenized parts of an infill prompt.
#[derive(Debug, Default)]
pub(crate) struct FimParts {
    /// The code before the cursor.
    pub prefix: Vec<u32>,
    /// The code after the cursor.
    pub suffix: Vec<u32>,
    /// The start of the line being completed (it goes after the prefix).
    pub prompt: Vec<u32>,
    /// The extra context, separators and file names included, in order.
    pub extra: Vec<u32>,
    /// The BOS token, when the model adds one.
    pub bos: Option<u32>,
}

/// The infill prompt of `parts` (see the module doc). `n_predict`: the generation limit (`None`:
/// unlimited, counted as nothing), `n_ctx`: the context of a slot.
pub(crate) fn fim_prompt(
    fim: &FimTokens,
    parts: FimParts,
    n_predict: Option<usize>,
    n_ctx: usize,
) -> Vec<u32> {
    let FimParts { mut prefix, mut suffix, prompt, extra, bos } = parts;
    let n_prefix = prefix.len().min(3 * (N_BATCH / 4));
    let n_suffix = suffix.len().min((N_BATCH / 4).saturating_sub(2 + prompt.len()));
    let n_extra = n_ctx.saturating_sub(N_BATCH + 2 * n_predict.unwrap_or(0)).min(extra.len());
    prefix.drain(..prefix.len() - n_prefix);
    suffix.truncate(n_suffix);
    let mut out = Vec::with_capacity(n_extra + n_prefix + n_suffix + prompt.len() + 4);
    out.extend_from_slice(&extra[extra.len() - n_extra..]);
    out.extend(bos);
    out.push(fim.pre);
    out.extend(prefix);
    out.extend(prompt);
    out.push(fim.suf);
    out.extend(suffix);
    out.push(fim.mid);
    out
}

/// `input_prefix` / `input_suffix`: a string, or an array of strings and token ids.
fn mixed(b: &dyn Backend, param: &str, v: Option<&Value>) -> Result<Vec<u32>, ApiError> {
    let tok = |s: &str| b.tokenize(s, false, false).map_err(ApiError::invalid);
    match v {
        Some(Value::String(s)) => tok(s),
        Some(Value::Array(items)) => {
            let mut out = Vec::new();
            for (i, item) in items.iter().enumerate() {
                match item {
                    Value::String(s) => out.extend(tok(s)?),
                    other => out.push(token_id(&format!("{param}[{i}]"), other, b.n_vocab())?),
                }
            }
            Ok(out)
        }
        Some(other) => Err(ApiError::invalid_param(
            param,
            format!(
                "\"{param}\" must be a string or an array of strings and token ids, not {}",
                type_name(other)
            ),
        )),
        None => Err(ApiError::invalid_param(param, format!("\"{param}\" is required"))),
    }
}

/// `input_extra` tokenized: each chunk `{"text": string, "filename"?: string}` after its file
/// separator and name (or the snippet separator), the repository marker first and the current
/// file's separator last when the model has those tokens.
fn extra_context(b: &dyn Backend, fim: &FimTokens, v: Option<&Value>) -> Result<Vec<u32>, ApiError> {
    let chunks = match v {
        None => &[][..],
        Some(Value::Array(c)) => c.as_slice(),
        Some(_) => {
            return Err(ApiError::invalid_param(
                "input_extra",
                "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}",
            ));
        }
    };
    let tok = |s: &str| b.tokenize(s, false, false).map_err(ApiError::invalid);
    let mut out = Vec::new();
    if let Some(rep) = fim.rep {
        out.push(rep);
        out.extend(tok("myproject\n")?);
    }
    for (i, chunk) in chunks.iter().enumerate() {
        let param = format!("input_extra[{i}]");
        let Some(Value::String(text)) = chunk.get("text") else {
            return Err(ApiError::invalid_param(
                param,
                "extra_context chunk must contain a \"text\" field with a string value",
            ));
        };
        let filename = match chunk.get("filename") {
            None => "tmp",
            Some(Value::String(f)) => f.as_str(),
            Some(_) => {
                return Err(ApiError::invalid_param(
                    param,
                    "extra_context chunk's \"filename\" field must be a string",
                ));
            }
        };
        match fim.sep {
            Some(sep) => {
                out.push(sep);
                out.extend(tok(&format!("{filename}\n"))?);
            }
            None => out.extend(tok(SNIPPET_SEPARATOR)?),
        }
        out.extend(tok(text)?);
    }
    if let Some(sep) = fim.sep {
        out.push(sep);
        out.extend(tok("filename\n")?);
    }
    Ok(out)
}

/// The handler.
pub(crate) async fn handle(state: AppState, body: Bytes) -> Result<Response, ApiError> {
    let v = parse_object(&body)?;
    let b = state.backend.as_ref();
    let Some(fim) = b.fim_tokens() else {
        return Err(ApiError::not_supported(
            "Infill is not supported by this model: it has no fill-in-the-middle prefix, suffix and middle tokens",
        ));
    };
    let prompt_text = match v.get("prompt") {
        None => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(ApiError::invalid_param("prompt", "\"prompt\" must be a string")),
    };
    let prefix = mixed(b, "input_prefix", v.get("input_prefix"))?;
    let suffix = mixed(b, "input_suffix", v.get("input_suffix"))?;
    let extra = extra_context(b, &fim, v.get("input_extra"))?;
    let prompt = b.tokenize(&prompt_text, false, true).map_err(ApiError::invalid)?;
    let bos = b.tokenize("", true, false).map_err(ApiError::invalid)?.first().copied();
    let n_ctx = b.n_ctx();
    let job = native::prepare_with(&state, &v, |n_predict| {
        let parts = FimParts { prefix, suffix, prompt, extra, bos };
        Ok(vec![PromptIn { tokens: fim_prompt(&fim, parts, n_predict, n_ctx), text: prompt_text }])
    })?;
    native::run(state, job).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIM: FimTokens = FimTokens { pre: 900, suf: 901, mid: 902, rep: None, sep: None };

    fn parts(prefix: usize, suffix: usize, prompt: usize, extra: usize) -> FimParts {
        FimParts {
            prefix: (10_000..10_000 + prefix as u32).collect(),
            suffix: (20_000..20_000 + suffix as u32).collect(),
            prompt: (30_000..30_000 + prompt as u32).collect(),
            extra: (40_000..40_000 + extra as u32).collect(),
            bos: None,
        }
    }

    #[test]
    fn a_short_request_is_prefix_prompt_suffix_middle() {
        let p = FimParts { bos: Some(1), ..parts(2, 2, 1, 0) };
        assert_eq!(
            fim_prompt(&FIM, p, Some(16), 4096),
            [1, 900, 10_000, 10_001, 30_000, 901, 20_000, 20_001, 902]
        );
    }

    #[test]
    fn the_prefix_keeps_its_end_and_the_suffix_its_start() {
        let out = fim_prompt(&FIM, parts(2000, 1000, 10, 0), None, 8192);
        // 3/4 of a 2048-token batch of prefix (its last tokens), 512 - 2 - 10 of suffix.
        assert_eq!(out[0], 900);
        assert_eq!(out[1], 10_000 + 2000 - 1536);
        let suf = out.iter().position(|&t| t == 901).expect("suffix marker");
        assert_eq!(suf, 1 + 1536 + 10);
        assert_eq!(out.len(), suf + 1 + 500 + 1);
        assert_eq!(out[suf + 1], 20_000);
        assert_eq!(*out.last().expect("mid"), 902);
    }

    #[test]
    fn extra_context_fills_what_the_context_leaves_newest_first() {
        // 4096 - 2048 - 2 * 100 = 1848 tokens of extra context, its last ones, before the FIM.
        let out = fim_prompt(&FIM, parts(1, 1, 0, 5000), Some(100), 4096);
        assert_eq!(out.len(), 1848 + 5);
        assert_eq!(out[0], 40_000 + 5000 - 1848);
        assert_eq!(out[1847], 40_000 + 4999);
        assert_eq!(out[1848], 900);
        // No room at all: none of it.
        assert_eq!(fim_prompt(&FIM, parts(1, 1, 0, 5000), None, 2048).len(), 5);
    }
}
