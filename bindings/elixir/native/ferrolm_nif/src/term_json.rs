//! Elixir terms to JSON values (JSON schemas, chat messages, template arguments).

use rustler::{Term, TermType};
use serde_json::{Map, Number, Value};

/// Converts maps (atom or string keys), lists, binaries, numbers, booleans and `nil`.
pub(crate) fn to_json(term: Term) -> Result<Value, String> {
    Ok(match term.get_type() {
        TermType::Atom => match term.atom_to_string().map_err(|_| "bad atom")?.as_str() {
            "nil" => Value::Null,
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            other => Value::String(other.to_string()),
        },
        TermType::Binary => Value::String(term.decode::<String>().map_err(|_| "a binary that is not UTF-8")?),
        TermType::Integer => {
            Value::Number(Number::from(term.decode::<i64>().map_err(|_| "an integer out of range")?))
        }
        TermType::Float => {
            let f: f64 = term.decode().map_err(|_| "a bad float")?;
            Value::Number(Number::from_f64(f).ok_or("a float that JSON cannot hold")?)
        }
        TermType::List => {
            let items: Vec<Term> = term.decode().map_err(|_| "an improper list")?;
            Value::Array(items.into_iter().map(to_json).collect::<Result<_, _>>()?)
        }
        TermType::Map => {
            let mut out = Map::new();
            let iter = rustler::types::map::MapIterator::new(term).ok_or("a bad map")?;
            for (k, v) in iter {
                let key = match k.get_type() {
                    TermType::Atom => k.atom_to_string().map_err(|_| "bad atom")?,
                    TermType::Binary => k.decode::<String>().map_err(|_| "a key that is not UTF-8")?,
                    _ => return Err("map keys must be atoms or strings".into()),
                };
                out.insert(key, to_json(v)?);
            }
            Value::Object(out)
        }
        other => return Err(format!("a {other:?} cannot be converted to JSON")),
    })
}
