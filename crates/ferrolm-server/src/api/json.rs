//! Reading request bodies: JSON syntax, then typed fields whose errors name the field.

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::error::ApiError;

/// Parses a request body as a JSON object.
pub(crate) fn parse_object(body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("the request body is empty: send a JSON object"));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::invalid(format!(
            "the request body must be a JSON object, not {}",
            type_name(&v)
        )));
    }
    Ok(v)
}

/// Reads the typed fields of `T` from a JSON object (unknown fields are ignored); a field of the
/// wrong type is a 400 naming it.
pub(crate) fn fields<T: DeserializeOwned>(v: &Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::invalid(format!("invalid request: {inner}"))
        } else {
            ApiError::invalid_param(path.clone(), format!("invalid value for `{path}`: {inner}"))
        }
    })
}

/// A JSON value's type, for messages.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A list of strings given as one string or an array of strings.
pub(crate) fn string_or_list(param: &str, v: &Value) -> Result<Vec<String>, ApiError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => Err(ApiError::invalid_param(
                    param,
                    format!("`{param}` must be a string or an array of strings, found {}", type_name(other)),
                )),
            })
            .collect(),
        other => Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be a string or an array of strings, not {}", type_name(other)),
        )),
    }
}

/// A token id from a JSON number (non-negative integer below `n_vocab`).
pub(crate) fn token_id(param: &str, v: &Value, n_vocab: usize) -> Result<u32, ApiError> {
    let id = v.as_u64().ok_or_else(|| {
        ApiError::invalid_param(param, format!("`{param}`: token ids are non-negative integers, found {v}"))
    })?;
    if id >= n_vocab as u64 {
        return Err(ApiError::invalid_param(
            param,
            format!("`{param}`: token id {id} is outside the vocabulary (0..{n_vocab})"),
        ));
    }
    Ok(id as u32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Deserialize, Debug)]
    struct T {
        #[allow(dead_code)]
        a: Option<i64>,
    }

    #[test]
    fn errors_name_the_field() {
        assert!(parse_object(b"").is_err());
        assert!(parse_object(b"[1]").is_err());
        assert!(parse_object(b"{\"a\":").is_err());
        let v = parse_object(br#"{"a": "x", "other": 1}"#).expect("object");
        let e = fields::<T>(&v).expect_err("wrong type");
        assert_eq!(e.param.as_deref(), Some("a"));
        let v = parse_object(br#"{"other": 1}"#).expect("object");
        assert!(fields::<T>(&v).is_ok(), "unknown fields are ignored");
    }

    #[test]
    fn lists_and_token_ids() {
        assert_eq!(string_or_list("stop", &Value::from("x")).expect("one"), vec!["x"]);
        assert!(string_or_list("stop", &serde_json::json!([1])).is_err());
        assert_eq!(token_id("t", &Value::from(5), 10).expect("in range"), 5);
        assert!(token_id("t", &Value::from(10), 10).is_err());
        assert!(token_id("t", &Value::from(-1), 10).is_err());
        assert!(token_id("t", &Value::from(1.5), 10).is_err());
    }
}
