//! `edit_file`: exact text replacements, each `old_text` unique in the file and matched
//! against the original content; edits may not overlap. When an `old_text` is only found after
//! normalizing (trailing whitespace, typographic quotes, dashes and spaces), matching runs on the
//! normalized text and only the lines an edit touches are rewritten: every other line is kept
//! byte for byte.

use std::path::Path;

use serde_json::{Value, json};

use super::files::resolve;
use super::{CallError, req_str};

/// One requested replacement.
struct Edit {
    old: String,
    new: String,
}

/// An edit located in the base text: its index in the request, start and length.
#[derive(Clone, Copy)]
struct Located {
    index: usize,
    at: usize,
    len: usize,
}

/// Normalizes one line for fuzzy matching: no trailing spaces, tabs or `\r`; typographic
/// quotes, dashes and spaces as their ASCII forms.
fn normalize_line(line: &str) -> String {
    line.trim_end_matches([' ', '\t', '\r'])
        .chars()
        .map(|c| match c {
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            c => c,
        })
        .collect()
}

/// [`normalize_line`] on every line; the number of lines stays the same.
fn normalize(text: &str) -> String {
    text.split('\n').map(normalize_line).collect::<Vec<_>>().join("\n")
}

/// Non-overlapping occurrences of `needle` in `hay`.
fn count(hay: &str, needle: &str) -> usize {
    if needle.is_empty() { 0 } else { hay.matches(needle).count() }
}

/// The edits of `params.edits`, each with a non-empty `old_text`.
fn parse_edits(params: &Value) -> Result<Result<Vec<Edit>, String>, CallError> {
    let Some(list) = params.get("edits") else {
        return Err(CallError::BadRequest("missing parameter \"edits\"".into()));
    };
    let Some(list) = list.as_array().filter(|l| !l.is_empty()) else {
        return Ok(Err("\"edits\" must be a non-empty array".into()));
    };
    let mut edits = Vec::with_capacity(list.len());
    for (i, e) in list.iter().enumerate() {
        let field = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| CallError::BadRequest(format!("edits[{i}].{k} must be a string")))
        };
        let (old, new) = (field("old_text")?, field("new_text")?);
        if old.is_empty() {
            return Ok(Err(format!("edits[{i}].old_text must not be empty")));
        }
        edits.push(Edit { old, new });
    }
    Ok(Ok(edits))
}

/// `edit_file`: applies every edit of `params.edits` to the file `params.path`.
pub(crate) fn edit_file(params: &Value, cwd: Option<&Path>) -> Result<Value, CallError> {
    let path = req_str(params, "path")?;
    let edits = match parse_edits(params)? {
        Ok(e) => e,
        Err(msg) => return Ok(json!({"error": msg})),
    };
    let full = resolve(&path, cwd);
    let Ok(original) = std::fs::read_to_string(&full) else {
        return Ok(json!({"error": format!("failed to open file: {path}")}));
    };
    let new_content = match plan(&original, &edits, &path) {
        Ok(c) => c,
        Err(msg) => return Ok(json!({"error": msg})),
    };
    if new_content == original {
        return Ok(json!({"error": "no changes made: the replacement(s) produced identical content"}));
    }
    if std::fs::write(&full, new_content.as_bytes()).is_err() {
        return Ok(json!({"error": format!("failed to write file: {path}")}));
    }
    Ok(json!({"result": "file edited successfully", "path": path, "edits_applied": edits.len()}))
}

/// The new content of `original` with `edits` applied, or the reason they cannot be.
fn plan(original: &str, edits: &[Edit], path: &str) -> Result<String, String> {
    let norm_original = normalize(original);
    let mut fuzzy = false;
    for (i, e) in edits.iter().enumerate() {
        if original.contains(&e.old) {
            continue;
        }
        if !norm_original.contains(&normalize(&e.old)) {
            return Err(format!(
                "could not find edits[{i}].old_text in {path}, it must match the file's current content exactly"
            ));
        }
        fuzzy = true;
    }
    let base = if fuzzy { norm_original.as_str() } else { original };
    let mut located = Vec::with_capacity(edits.len());
    for (i, e) in edits.iter().enumerate() {
        // Uniqueness on normalized text: a duplicate that differs in whitespace only counts.
        let n = count(&norm_original, &normalize(&e.old));
        if n > 1 {
            return Err(format!("found {n} occurrences of edits[{i}].old_text in {path}, it must be unique"));
        }
        let needle = if fuzzy { normalize(&e.old) } else { e.old.clone() };
        let at = base.find(&needle).ok_or_else(|| format!("could not find edits[{i}].old_text in {path}"))?;
        located.push(Located { index: i, at, len: needle.len() });
    }
    located.sort_by_key(|l| l.at);
    for w in located.windows(2) {
        if w[0].at + w[0].len > w[1].at {
            return Err(format!(
                "edits[{}] and edits[{}] overlap in {path}; merge them into one edit or target disjoint regions",
                w[0].index, w[1].index
            ));
        }
    }
    Ok(if fuzzy { apply_by_lines(original, base, &located, edits) } else { apply(base, &located, edits) })
}

/// `base` with each located edit replaced by its new text (edits sorted, disjoint).
fn apply(base: &str, located: &[Located], edits: &[Edit]) -> String {
    let mut out = String::with_capacity(base.len());
    let mut pos = 0;
    for l in located {
        out.push_str(&base[pos..l.at]);
        out.push_str(&edits[l.index].new);
        pos = l.at + l.len;
    }
    out.push_str(&base[pos..]);
    out
}

/// Byte ranges of the lines of `text`, each with its `\n`.
fn line_spans(text: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    spans.push((start, text.len()));
    spans
}

/// The fuzzy case: edits located in the normalized `base` are applied to the lines they touch
/// (as normalized), and every other line comes from `original` unchanged. Both texts have the
/// same lines, so a line index names the same line in each.
fn apply_by_lines(original: &str, base: &str, located: &[Located], edits: &[Edit]) -> String {
    let (orig, norm) = (line_spans(original), line_spans(base));
    let line_of = |offset: usize| norm.iter().position(|&(s, e)| offset >= s && offset < e.max(s + 1));
    // Groups of edits whose line ranges touch: (first line, last line, edits).
    let mut groups: Vec<(usize, usize, Vec<Located>)> = Vec::new();
    for l in located {
        let first = line_of(l.at).unwrap_or(norm.len() - 1);
        let last = line_of(l.at + l.len - 1).unwrap_or(norm.len() - 1);
        match groups.last_mut() {
            Some(g) if first <= g.1 => {
                g.1 = g.1.max(last);
                g.2.push(*l);
            }
            _ => groups.push((first, last, vec![*l])),
        }
    }
    let mut out = String::with_capacity(original.len());
    let mut next_line = 0;
    for (first, last, group) in groups {
        for &(s, e) in &orig[next_line..first] {
            out.push_str(&original[s..e]);
        }
        let (start, end) = (norm[first].0, norm[last].1);
        let shifted: Vec<Located> = group.iter().map(|l| Located { at: l.at - start, ..*l }).collect();
        out.push_str(&apply(&base[start..end], &shifted, edits));
        next_line = last + 1;
    }
    for &(s, e) in &orig[next_line..] {
        out.push_str(&original[s..e]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edits(list: &[(&str, &str)]) -> Vec<Edit> {
        list.iter().map(|(o, n)| Edit { old: o.to_string(), new: n.to_string() }).collect()
    }

    #[test]
    fn exact_edits_apply_against_the_original() {
        let out = plan(
            "line1\nline2\nline3\n",
            &edits(&[("line2", "line2-edited"), ("line3\n", "line3\nline4\n")]),
            "f",
        )
        .expect("plan");
        assert_eq!(out, "line1\nline2-edited\nline3\nline4\n");
    }

    #[test]
    fn duplicates_and_overlaps_are_refused() {
        let err = plan("dup\ndup\n", &edits(&[("dup", "x")]), "f").expect_err("dup");
        assert!(err.contains("2 occurrences") && err.contains("unique"), "{err}");
        // A duplicate that differs only in trailing whitespace counts too.
        let err = plan("dup \ndup\n", &edits(&[("dup", "x")]), "f").expect_err("dup");
        assert!(err.contains("unique"), "{err}");
        let err = plan("line1\nline2\n", &edits(&[("line1\nline2", "a"), ("line2", "b")]), "f")
            .expect_err("overlap");
        assert!(err.contains("overlap"), "{err}");
        let err = plan("abc\n", &edits(&[("xyz", "a")]), "f").expect_err("missing");
        assert!(err.contains("could not find edits[0]"), "{err}");
    }

    #[test]
    fn fuzzy_edits_keep_untouched_lines_verbatim() {
        let original = "keep  \nsay \u{201C}hi\u{201D}   \nalso keep\t\n";
        let out = plan(original, &edits(&[("say \"hi\"", "say \"bye\"")]), "f").expect("plan");
        assert_eq!(out, "keep  \nsay \"bye\"\nalso keep\t\n");
    }

    #[test]
    fn edit_file_writes_and_reports() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("t.log"), "a\nb\n").expect("write");
        let p = json!({"path": "t.log", "edits": [{"old_text": "b", "new_text": "c"}]});
        let r = edit_file(&p, Some(dir.path())).expect("edit");
        assert_eq!(r["edits_applied"], 1);
        assert_eq!(std::fs::read_to_string(dir.path().join("t.log")).expect("read"), "a\nc\n");
        let r = edit_file(&json!({"path": "t.log", "edits": []}), Some(dir.path())).expect("edit");
        assert!(r["error"].as_str().expect("error").contains("non-empty"));
        assert!(edit_file(&json!({"path": "t.log"}), Some(dir.path())).is_err());
    }
}
