//! The digest an approval is bound to: SHA-256 of the tool's name and the exact
//! arguments, in a canonical JSON form (keys sorted at every level), so the same
//! arguments always give the same digest whatever order they were written in.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Hex SHA-256 of `{"arguments": …, "tool": …}` in canonical form.
pub fn of_arguments(tool_name: &str, arguments: &Map<String, Value>) -> String {
    let mut whole = Map::new();
    whole.insert(
        "arguments".to_owned(),
        canonical(&Value::Object(arguments.clone())),
    );
    whole.insert("tool".to_owned(), Value::String(tool_name.to_owned()));
    let text = Value::Object(whole).to_string();
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The value with every object's keys in sorted order, whatever the map type keeps.
fn canonical(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            Value::Object(
                keys.into_iter()
                    .map(|key| (key.clone(), canonical(&map[key])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(canonical).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn order_does_not_matter_but_every_value_does() {
        let a = of_arguments("t", &args(json!({"x": 1, "y": {"b": 2, "a": 1}})));
        let b = of_arguments("t", &args(json!({"y": {"a": 1, "b": 2}, "x": 1})));
        assert_eq!(a, b);
        assert_ne!(
            a,
            of_arguments("t", &args(json!({"x": 2, "y": {"a": 1, "b": 2}})))
        );
        assert_ne!(
            a,
            of_arguments("u", &args(json!({"x": 1, "y": {"a": 1, "b": 2}})))
        );
        assert_eq!(a.len(), 64);
    }
}
