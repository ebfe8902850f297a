//! The Jinja environment chat templates run in, set up like the one Hugging Face transformers
//! renders them with (`render_jinja_template`): `trim_blocks` and `lstrip_blocks`, jinja2's
//! lenient undefined values, `break`/`continue`, the `{% generation %}` block, Python's string,
//! dict and list methods, a `tojson` that is `json.dumps(..., ensure_ascii=False)`, and the
//! globals `raise_exception(message)` and `strftime_now(format)`.

use std::fmt;
use std::sync::Arc;

use minijinja::filters;
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Object, ObjectRepr, Rest, ValueKind, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind, State, UndefinedBehavior, Value};

use super::date::{self, DateTime};
use super::methods;
use super::pyjson::{self, JsonOptions};

/// Name of the template inside the environment (shows in error messages).
pub(crate) const TEMPLATE_NAME: &str = "chat_template";

/// Context key holding the render's date. Not an identifier, so templates cannot read or shadow it.
pub(crate) const TODAY_KEY: &str = "ferrolm:today";

/// The message of a `raise_exception(...)` call, attached to the render error as its source.
#[derive(Debug)]
pub(crate) struct Raised(pub String);

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Raised {}

/// An environment holding `source` (after [`rewrite_generation_blocks`]) as [`TEMPLATE_NAME`].
pub(crate) fn build(source: &str) -> Result<Environment<'static>, Error> {
    let mut env = Environment::new();
    let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build()?;
    env.set_syntax(syntax);
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    env.set_unknown_method_callback(methods::call_method);
    env.set_formatter(format_value);
    env.add_filter("tojson", tojson);
    env.add_filter("length", length);
    env.add_filter("count", length);
    env.add_filter("int", int_filter);
    env.add_filter("float", float_filter);
    env.add_filter("select", |s: &mut State, v: Value, a: Rest<ValueOrKwargs>| {
        on_sequence(v, |v| filters::select(s, v, first_name(&a), rest_after(a, 1)))
    });
    env.add_filter("reject", |s: &mut State, v: Value, a: Rest<ValueOrKwargs>| {
        on_sequence(v, |v| filters::reject(s, v, first_name(&a), rest_after(a, 1)))
    });
    env.add_filter("selectattr", |s: &mut State, v: Value, attr: String, a: Rest<ValueOrKwargs>| {
        on_sequence(v, |v| filters::selectattr(s, v, attr.into(), first_name(&a), rest_after(a, 1)))
    });
    env.add_filter("rejectattr", |s: &mut State, v: Value, attr: String, a: Rest<ValueOrKwargs>| {
        on_sequence(v, |v| filters::rejectattr(s, v, attr.into(), first_name(&a), rest_after(a, 1)))
    });
    env.add_filter("map", |s: &mut State, v: Value, a: Rest<ValueOrKwargs>| {
        on_sequence(v, |v| filters::map(s, v, a))
    });
    env.add_test("none", is_none);
    env.add_test("iterable", is_iterable);
    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_template_owned(TEMPLATE_NAME, rewrite_generation_blocks(source))?;
    Ok(env)
}

/// jinja2's `select`, `reject`, `selectattr`, `rejectattr` and `map` give nothing for a false
/// value (they start with `if value:`): `none | selectattr(...)` is an empty sequence, which
/// real templates rely on (`{% set tools = none %}` then `tools | selectattr(...)`).
fn on_sequence(
    value: Value,
    f: impl FnOnce(Value) -> Result<Vec<Value>, Error>,
) -> Result<Vec<Value>, Error> {
    if is_py_none(&value) || value.is_undefined() {
        return Ok(Vec::new());
    }
    f(value)
}

/// The test name a `select`-like filter got first, when it is a string.
fn first_name(args: &Rest<ValueOrKwargs>) -> Option<std::borrow::Cow<'static, str>> {
    args.first().and_then(|a| a.as_str().map(|s| std::borrow::Cow::Owned(s.to_string())))
}

/// The arguments after the first `skip`.
fn rest_after(args: Rest<ValueOrKwargs>, skip: usize) -> Rest<ValueOrKwargs> {
    Rest(args.0.into_iter().skip(skip).collect())
}

/// Python's `None` where a template must not be able to iterate over it: `tools` and
/// `documents` when the caller gives none. MiniJinja's own `none` iterates as empty, but in
/// jinja2 `{% for t in tools %}` with `tools = None` fails, and templates meant to be used with
/// tools rely on that. It prints as `None`, is false, passes `is none`, is `null` in `tojson`;
/// unlike a real `None` it is not `== none`.
#[derive(Debug)]
pub(crate) struct PyNone;

impl Object for PyNone {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Plain
    }

    fn is_true(self: &Arc<Self>) -> bool {
        false
    }

    fn render(self: &Arc<Self>, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("None")
    }
}

/// Whether `value` is `None` (MiniJinja's or [`PyNone`]).
pub(crate) fn is_py_none(value: &Value) -> bool {
    value.is_none() || value.downcast_object_ref::<PyNone>().is_some()
}

/// The `none` test, which [`PyNone`] passes too.
fn is_none(value: &Value) -> bool {
    is_py_none(value)
}

/// The `iterable` test as in jinja2: strings, lists, dicts and undefined values (jinja2's
/// `Undefined` iterates as empty) are iterable; `None`, numbers and booleans are not.
fn is_iterable(value: &Value) -> bool {
    match value.kind() {
        ValueKind::Undefined => true,
        ValueKind::None | ValueKind::Bool | ValueKind::Number => false,
        _ => value.try_iter().is_ok(),
    }
}

/// The `length` filter: as MiniJinja's, except that an undefined value has length 0 (jinja2's
/// `Undefined` does).
fn length(value: &Value) -> Result<Value, Error> {
    if value.is_undefined() {
        return Ok(Value::from(0));
    }
    value.len().map(Value::from).ok_or_else(|| {
        let ty = if is_py_none(value) { "NoneType".to_string() } else { value.kind().to_string() };
        Error::new(ErrorKind::InvalidOperation, format!("object of type '{ty}' has no len()"))
    })
}

/// jinja2's `int(value, default=0, base=10)`: `int(value)`, else `int(float(value))`, else the
/// default (MiniJinja's fails instead of falling back).
fn int_filter(
    value: &Value,
    default: Option<Value>,
    base: Option<u32>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let default = match kwargs.get::<Option<Value>>("default")? {
        Some(d) => d,
        None => default.unwrap_or_else(|| Value::from(0)),
    };
    let base = kwargs.get::<Option<u32>>("base")?.or(base).unwrap_or(10);
    kwargs.assert_all_used()?;
    if !(2..=36).contains(&base) {
        return Err(Error::new(ErrorKind::InvalidOperation, "int() base must be >= 2 and <= 36"));
    }
    if let Some(s) = value.as_str() {
        let t = s.trim().replace('_', "");
        let (neg, digits) = match t.strip_prefix('-') {
            Some(d) => (true, d),
            None => (false, t.strip_prefix('+').unwrap_or(&t)),
        };
        let digits = match base {
            16 => digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")).unwrap_or(digits),
            8 => digits.strip_prefix("0o").or_else(|| digits.strip_prefix("0O")).unwrap_or(digits),
            2 => digits.strip_prefix("0b").or_else(|| digits.strip_prefix("0B")).unwrap_or(digits),
            _ => digits,
        };
        if !digits.starts_with(['+', '-'])
            && let Ok(n) = i64::from_str_radix(digits, base)
        {
            return Ok(Value::from(if neg { -n } else { n }));
        }
        // Python's float() and Rust's parse accept the same forms (including "inf" and "nan",
        // which int() then rejects).
        return Ok(match t.parse::<f64>() {
            Ok(f) if f.is_finite() => Value::from(f.trunc() as i64),
            _ => default,
        });
    }
    Ok(match value.kind() {
        ValueKind::Bool => Value::from(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => value.clone(),
        ValueKind::Number => match f64::try_from(value.clone()) {
            Ok(f) if f.is_finite() => Value::from(f.trunc() as i64),
            _ => default,
        },
        _ => default,
    })
}

/// jinja2's `float(value, default=0.0)`: `float(value)`, else the default.
fn float_filter(value: &Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let default = match kwargs.get::<Option<Value>>("default")? {
        Some(d) => d,
        None => default.unwrap_or_else(|| Value::from(0.0)),
    };
    kwargs.assert_all_used()?;
    Ok(match value.kind() {
        ValueKind::String => {
            match value.as_str().unwrap_or_default().trim().replace('_', "").parse::<f64>() {
                Ok(f) => Value::from(f),
                Err(_) => default,
            }
        }
        ValueKind::Bool => Value::from(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone()).map(Value::from).unwrap_or(default),
        _ => default,
    })
}

/// Prints a value as jinja2 does (`str(value)`): floats in Python's `repr` form; everything else
/// as MiniJinja prints it, which already follows Python (`None`, `True`, `['a', 1]`).
fn format_value(out: &mut minijinja::Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if value.kind() == ValueKind::Number
        && !value.is_integer()
        && let Ok(f) = f64::try_from(value.clone())
    {
        return out.write_str(&pyjson::float_repr(f, "nan", "inf")).map_err(Error::from);
    }
    minijinja::escape_formatter(out, state, value)
}

/// `value | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False)`.
fn tojson(value: &Value, args: Rest<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let opts = JsonOptions::from_args(&args, &kwargs)?;
    // jinja2 returns Markup here; with autoescape off it prints the same either way.
    Ok(Value::from_safe_string(pyjson::dumps(value, &opts)?))
}

/// `raise_exception(message)`: fails the render with the template's own message.
fn raise_exception(message: Option<Value>) -> Result<Value, Error> {
    let message = message.map(|m| m.to_string()).unwrap_or_default();
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// `strftime_now(format)`: the render's date (midnight), else the current UTC time, formatted.
fn strftime_now(state: &State, format: &str) -> Result<Value, Error> {
    let now = match state.lookup(TODAY_KEY) {
        Some(v) if !v.is_undefined() && !v.is_none() => {
            let text = v.to_string();
            let day = date::CalendarDate::parse(&text).ok_or_else(|| {
                Error::new(ErrorKind::InvalidOperation, format!("strftime_now: bad date '{text}'"))
            })?;
            DateTime::midnight(day)
        }
        _ => DateTime::now_utc(),
    };
    Ok(Value::from(date::strftime(&now, format)))
}

/// Turns the transformers `{% generation %}…{% endgeneration %}` block (which marks assistant
/// tokens and renders its body unchanged) into `{% if true %}…{% endif %}`, keeping the tags'
/// whitespace-control markers so that trimming is the same.
pub(crate) fn rewrite_generation_blocks(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let Some(end) = tag.find("%}") else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = split_marker(inner, true);
        let (body, trail) = split_marker(body, false);
        let replacement = match body.trim() {
            "generation" => Some("if true"),
            "endgeneration" => Some("endif"),
            _ => None,
        };
        match replacement {
            Some(r) => {
                out.push_str("{%");
                out.push_str(lead);
                out.push(' ');
                out.push_str(r);
                out.push(' ');
                out.push_str(trail);
                out.push_str("%}");
            }
            None => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// Splits a `-` or `+` whitespace-control marker off the start (or end) of a tag's inside.
fn split_marker(inner: &str, leading: bool) -> (&str, &str) {
    if leading {
        match inner.as_bytes().first() {
            Some(b'-' | b'+') => (&inner[..1], &inner[1..]),
            _ => ("", inner),
        }
    } else {
        match inner.as_bytes().last() {
            Some(b'-' | b'+') => (&inner[..inner.len() - 1], &inner[inner.len() - 1..]),
            _ => (inner, ""),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_become_if_blocks() {
        assert_eq!(
            rewrite_generation_blocks(
                "a{%- generation -%}b{% endgeneration %}c{% if x %}{%+endgeneration-%}"
            ),
            "a{%- if true -%}b{% endif %}c{% if x %}{%+ endif -%}"
        );
        assert_eq!(rewrite_generation_blocks("{{ x }}{% generation"), "{{ x }}{% generation");
    }
}
