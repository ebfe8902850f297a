//! Python's `json.dumps` over template values: the `tojson` filter of Hugging Face chat templates
//! (`json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`).

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// Options of `json.dumps`.
#[derive(Clone, Debug)]
pub(crate) struct JsonOptions {
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    /// Indentation per level: `None` is one line; `Some("")` (indent 0) puts items on their own
    /// lines without indenting them.
    pub indent: Option<String>,
    /// Between items.
    pub item_sep: String,
    /// Between a key and its value.
    pub key_sep: String,
    /// Order object keys.
    pub sort_keys: bool,
}

impl Default for JsonOptions {
    fn default() -> JsonOptions {
        JsonOptions {
            ensure_ascii: false,
            indent: None,
            item_sep: ", ".into(),
            key_sep: ": ".into(),
            sort_keys: false,
        }
    }
}

impl JsonOptions {
    /// Options from the filter's arguments: `tojson(ensure_ascii, indent, separators, sort_keys)`,
    /// positionally or by name.
    pub fn from_args(positional: &[Value], kwargs: &Kwargs) -> Result<JsonOptions, Error> {
        const NAMES: [&str; 4] = ["ensure_ascii", "indent", "separators", "sort_keys"];
        if positional.len() > NAMES.len() {
            return Err(Error::new(ErrorKind::TooManyArguments, "tojson takes at most 4 arguments"));
        }
        let mut args: [Option<Value>; 4] = Default::default();
        for (slot, v) in args.iter_mut().zip(positional) {
            *slot = Some(v.clone());
        }
        for (slot, name) in args.iter_mut().zip(NAMES) {
            if let Some(v) = kwargs.get::<Option<Value>>(name)? {
                if slot.is_some() {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!("tojson got multiple values for argument '{name}'"),
                    ));
                }
                *slot = Some(v);
            }
        }
        kwargs.assert_all_used()?;
        let [ensure_ascii, indent, separators, sort_keys] = args;
        let mut opts = JsonOptions::default();
        if let Some(v) = ensure_ascii {
            opts.ensure_ascii = v.is_true();
        }
        if let Some(v) = sort_keys {
            opts.sort_keys = v.is_true();
        }
        match indent {
            None => {}
            Some(v) if v.is_none() || v.is_undefined() => {}
            Some(v) => {
                opts.indent = Some(if let Some(s) = v.as_str() {
                    s.to_string()
                } else if let Some(n) = v.as_i64() {
                    " ".repeat(n.max(0) as usize)
                } else {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        format!("tojson: indent must be an integer or a string, not {}", v.kind()),
                    ));
                });
                // Python: with an indent, the default item separator has no trailing space.
                opts.item_sep = ",".into();
            }
        }
        if let Some(v) = separators.filter(|v| !v.is_none() && !v.is_undefined()) {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [item, key] if item.as_str().is_some() && key.as_str().is_some() => {
                    opts.item_sep = item.to_string();
                    opts.key_sep = key.to_string();
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "tojson: separators must be a pair of strings (item_separator, key_separator)",
                    ));
                }
            }
        }
        Ok(opts)
    }
}

/// `json.dumps(value, ...)`.
pub(crate) fn dumps(value: &Value, opts: &JsonOptions) -> Result<String, Error> {
    let mut out = String::new();
    write_value(&mut out, value, opts, 0)?;
    Ok(out)
}

fn newline_indent(out: &mut String, opts: &JsonOptions, level: usize) {
    if let Some(indent) = &opts.indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(indent);
        }
    }
}

fn write_value(out: &mut String, value: &Value, opts: &JsonOptions, level: usize) -> Result<(), Error> {
    if super::env::is_py_none(value) {
        out.push_str("null");
        return Ok(());
    }
    match value.kind() {
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write_number(out, value),
        ValueKind::String => write_string(out, value.as_str().unwrap_or_default(), opts.ensure_ascii),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline_indent(out, opts, level + 1);
                write_value(out, item, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push(']');
        }
        ValueKind::Map => {
            let mut pairs = Vec::new();
            for key in value.try_iter()? {
                let v = value.get_item(&key)?;
                pairs.push((json_key(&key)?, v));
            }
            if pairs.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if opts.sort_keys {
                pairs.sort_by(|a, b| a.0.cmp(&b.0));
            }
            out.push('{');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push_str(&opts.item_sep);
                }
                newline_indent(out, opts, level + 1);
                write_string(out, k, opts.ensure_ascii);
                out.push_str(&opts.key_sep);
                write_value(out, v, opts, level + 1)?;
            }
            newline_indent(out, opts, level);
            out.push('}');
        }
        kind => {
            let name = if kind == ValueKind::Undefined { "Undefined".to_string() } else { kind.to_string() };
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("Object of type {name} is not JSON serializable"),
            ));
        }
    }
    Ok(())
}

/// An object key as Python's `json` writes it: strings as they are, numbers, booleans and `None`
/// converted (`1` → `"1"`, `True` → `"true"`, `None` → `"null"`).
fn json_key(key: &Value) -> Result<String, Error> {
    Ok(match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::None => "null".into(),
        ValueKind::Bool => if key.is_true() { "true" } else { "false" }.into(),
        ValueKind::Number => {
            let mut s = String::new();
            write_number(&mut s, key);
            s
        }
        kind => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("keys must be str, int, float, bool or None, not {kind}"),
            ));
        }
    })
}

fn write_number(out: &mut String, value: &Value) {
    match f64::try_from(value.clone()).ok() {
        Some(f) if !value.is_integer() => out.push_str(&float_repr(f, "NaN", "Infinity")),
        _ => out.push_str(&value.to_string()),
    }
}

/// Python's `repr(float)`: the shortest round-tripping digits, in positional notation when the
/// decimal exponent is in -4..16, else scientific (`1e+16`, `1.5e-05`).
pub(crate) fn float_repr(f: f64, nan: &str, inf: &str) -> String {
    if f.is_nan() {
        return nan.to_string();
    }
    if f.is_infinite() {
        return if f < 0.0 { format!("-{inf}") } else { inf.to_string() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // `{:e}` gives the shortest round-tripping digits: "-1.2345e-7".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let n = digits.len() as i32;
        let s = if exp < 0 {
            format!("0.{}{digits}", "0".repeat((-exp - 1) as usize))
        } else if exp + 1 >= n {
            format!("{digits}{}.0", "0".repeat((exp + 1 - n) as usize))
        } else {
            let (int, frac) = digits.split_at((exp + 1) as usize);
            format!("{int}.{frac}")
        };
        format!("{sign}{s}")
    } else {
        let mantissa = if digits.len() > 1 { format!("{}.{}", &digits[..1], &digits[1..]) } else { digits };
        let esign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{esign}{:02}", exp.abs())
    }
}

/// A JSON string as Python writes it.
fn write_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_repr_matches_python() {
        // Values from Python's repr().
        for (f, want) in [
            (1.0, "1.0"),
            (2.5, "2.5"),
            (-0.5, "-0.5"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e15, "1000000000000000.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (123456789012345678.0, "1.2345678901234568e+17"),
            (0.1, "0.1"),
            (1e300, "1e+300"),
            (-0.0, "-0.0"),
        ] {
            assert_eq!(float_repr(f, "NaN", "Infinity"), want, "{f}");
        }
        assert_eq!(float_repr(f64::NAN, "NaN", "Infinity"), "NaN");
        assert_eq!(float_repr(f64::NEG_INFINITY, "NaN", "Infinity"), "-Infinity");
    }

    #[test]
    fn strings_escape_like_python() {
        let mut s = String::new();
        write_string(&mut s, "é\u{2028}\u{7f}\u{1}\"\\\n\u{1F600}", false);
        assert_eq!(s, "\"é\u{2028}\u{7f}\\u0001\\\"\\\\\\n\u{1F600}\"");
        let mut s = String::new();
        write_string(&mut s, "é\u{1F600}", true);
        assert_eq!(s, "\"\\u00e9\\ud83d\\ude00\"");
    }
}
