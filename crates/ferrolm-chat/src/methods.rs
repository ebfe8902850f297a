//! Python methods on template values (`text.strip()`, `d.items()`, …): MiniJinja's pycompat set
//! plus the string and list methods chat templates use that it lacks.
//!
//! Values are immutable here, so the methods that change a list or dict in place (`append`,
//! `pop`, `update`, …) are not available: calling one is a render error.

use minijinja::value::{ValueKind, from_args};
use minijinja::{Error, ErrorKind, State, Value};

/// The unknown-method callback: our additions first, then MiniJinja's pycompat methods.
pub(crate) fn call_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    let extra = match value.kind() {
        ValueKind::String => string_method(value.as_str().unwrap_or_default(), method, args),
        ValueKind::Seq => seq_method(value, method, args),
        ValueKind::Map => map_method(value, method, args),
        _ => None,
    };
    match extra {
        Some(result) => result,
        None => minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
            .map_err(|e| name_unknown_method(e, value, method)),
    }
}

/// Names the type and method in an "unknown method" error, as Python's `AttributeError` does.
fn name_unknown_method(err: Error, value: &Value, method: &str) -> Error {
    if err.kind() != ErrorKind::UnknownMethod || err.detail().is_some() {
        return err;
    }
    let ty = match value.kind() {
        ValueKind::String => "str",
        ValueKind::Seq => "list",
        ValueKind::Map => "dict",
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        ValueKind::Undefined => "Undefined",
        _ => "object",
    };
    let hint =
        if matches!(method, "append" | "extend" | "insert" | "pop" | "remove" | "update" | "setdefault") {
            " (templates cannot change lists or dicts in place here)"
        } else {
            ""
        };
    Error::new(ErrorKind::UnknownMethod, format!("'{ty}' object has no attribute '{method}'{hint}"))
}

/// Python's whitespace for `split()` without a separator.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

fn string_method(s: &str, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    Some(match method {
        "rsplit" => {
            from_args(args).and_then(|(sep, maxsplit): (Option<&str>, Option<i64>)| rsplit(s, sep, maxsplit))
        }
        "removeprefix" => from_args(args).map(|(p,): (&str,)| Value::from(s.strip_prefix(p).unwrap_or(s))),
        "removesuffix" => from_args(args).map(|(p,): (&str,)| Value::from(s.strip_suffix(p).unwrap_or(s))),
        "partition" | "rpartition" => from_args(args).and_then(|(sep,): (&str,)| {
            if sep.is_empty() {
                return Err(Error::new(ErrorKind::InvalidOperation, "empty separator"));
            }
            let found = if method == "partition" { s.find(sep) } else { s.rfind(sep) };
            let parts = match found {
                Some(i) => [&s[..i], sep, &s[i + sep.len()..]],
                None if method == "partition" => [s, "", ""],
                None => ["", "", s],
            };
            Ok(Value::from(parts.iter().map(|p| Value::from(*p)).collect::<Vec<_>>()))
        }),
        "index" | "rindex" => from_args(args).and_then(|(sub,): (&str,)| {
            let found = if method == "index" { s.find(sub) } else { s.rfind(sub) };
            found
                .map(|i| Value::from(s[..i].chars().count()))
                .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "substring not found"))
        }),
        "zfill" => from_args(args).map(|(width,): (usize,)| {
            let n = s.chars().count();
            if n >= width {
                return Value::from(s);
            }
            let (sign, digits) = match s.chars().next() {
                Some(c @ ('+' | '-')) => (c.to_string(), &s[1..]),
                _ => (String::new(), s),
            };
            Value::from(format!("{sign}{}{digits}", "0".repeat(width - n)))
        }),
        "ljust" | "rjust" | "center" => {
            from_args(args).and_then(|(width, fill): (usize, Option<&str>)| {
                let fill = match fill {
                    None => ' ',
                    Some(f) if f.chars().count() == 1 => f.chars().next().unwrap_or(' '),
                    Some(_) => {
                        return Err(Error::new(
                            ErrorKind::InvalidOperation,
                            "the fill character must be exactly one character long",
                        ));
                    }
                };
                let pad = width.saturating_sub(s.chars().count());
                let (left, right) = match method {
                    "ljust" => (0, pad),
                    "rjust" => (pad, 0),
                    // Python's center puts the odd extra character on the left when `width` is odd.
                    _ => {
                        let left = pad / 2 + (pad & width & 1);
                        (left, pad - left)
                    }
                };
                let fill = fill.to_string();
                Ok(Value::from(format!("{}{s}{}", fill.repeat(left), fill.repeat(right))))
            })
        }
        "swapcase" => from_args(args).map(|()| {
            Value::from(
                s.chars()
                    .flat_map(|c| {
                        if c.is_uppercase() {
                            c.to_lowercase().collect::<Vec<_>>()
                        } else {
                            c.to_uppercase().collect::<Vec<_>>()
                        }
                    })
                    .collect::<String>(),
            )
        }),
        "casefold" => from_args(args).map(|()| Value::from(s.to_lowercase())),
        "isspace" => from_args(args).map(|()| Value::from(!s.is_empty() && s.chars().all(is_py_space))),
        _ => return None,
    })
}

/// `str.rsplit(sep=None, maxsplit=-1)`.
fn rsplit(s: &str, sep: Option<&str>, maxsplit: Option<i64>) -> Result<Value, Error> {
    let max = maxsplit.filter(|&m| m >= 0).map(|m| m as usize);
    let mut parts: Vec<String> = match sep {
        Some("") => return Err(Error::new(ErrorKind::InvalidOperation, "empty separator")),
        Some(sep) => match max {
            Some(m) => s.rsplitn(m + 1, sep).map(str::to_string).collect(),
            None => s.rsplit(sep).map(str::to_string).collect(),
        },
        None => {
            let mut parts = Vec::new();
            let mut rest = s.trim_end_matches(is_py_space);
            while !rest.is_empty() {
                if max.is_some_and(|m| parts.len() == m) {
                    parts.push(rest.to_string());
                    break;
                }
                let start = rest
                    .rfind(is_py_space)
                    .map_or(0, |i| i + rest[i..].chars().next().map_or(1, char::len_utf8));
                parts.push(rest[start..].to_string());
                rest = rest[..start].trim_end_matches(is_py_space);
            }
            parts
        }
    };
    parts.reverse();
    Ok(Value::from(parts))
}

fn seq_method(value: &Value, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    Some(match method {
        "index" => from_args(args).and_then(|(what,): (&Value,)| {
            let mut found = None;
            for (i, item) in value.try_iter()?.enumerate() {
                if item == *what {
                    found = Some(i);
                    break;
                }
            }
            found
                .map(Value::from)
                .ok_or_else(|| Error::new(ErrorKind::InvalidOperation, format!("{what:?} is not in list")))
        }),
        "copy" => from_args(args).map(|()| value.clone()),
        _ => return None,
    })
}

fn map_method(value: &Value, method: &str, args: &[Value]) -> Option<Result<Value, Error>> {
    Some(match method {
        "copy" => from_args(args).map(|()| value.clone()),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(v: Value) -> Vec<String> {
        v.try_iter().expect("list").map(|x| x.to_string()).collect()
    }

    #[test]
    fn rsplit_like_python() {
        // Python: "a b  c ".rsplit() == ['a', 'b', 'c']; "a,b,c".rsplit(",", 1) == ['a,b', 'c'];
        // "  a b c".rsplit(None, 1) == ['  a b', 'c'].
        assert_eq!(strs(rsplit("a b  c ", None, None).expect("ok")), ["a", "b", "c"]);
        assert_eq!(strs(rsplit("a,b,c", Some(","), Some(1)).expect("ok")), ["a,b", "c"]);
        assert_eq!(strs(rsplit("  a b c", None, Some(1)).expect("ok")), ["  a b", "c"]);
        assert_eq!(strs(rsplit("", None, None).expect("ok")), Vec::<String>::new());
        assert!(rsplit("x", Some(""), None).is_err());
    }

    #[test]
    fn padding_like_python() {
        let call = |s: &str, m: &str, args: &[Value]| {
            string_method(s, m, args).expect("known method").expect("ok").to_string()
        };
        // Python: "ab".center(5, "*") == '**ab*'; "abc".center(6) == ' abc  '; "-42".zfill(6) == '-00042'.
        assert_eq!(call("ab", "center", &[Value::from(5), Value::from("*")]), "**ab*");
        assert_eq!(call("abc", "center", &[Value::from(6)]), " abc  ");
        assert_eq!(call("-42", "zfill", &[Value::from(6)]), "-00042");
        assert_eq!(call("ab", "ljust", &[Value::from(4), Value::from(".")]), "ab..");
        assert_eq!(call("ab", "rjust", &[Value::from(4)]), "  ab");
    }
}
