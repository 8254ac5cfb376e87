//! JSON the database can store and give back. Postgres cannot hold a NUL (U+0000), and
//! what it keeps as jsonb is read back by serde_json, which stops at 128 levels of
//! nesting: a value stored deeper could never be read again, and every read of its
//! conversation would fail. What a model writes and what a tool brings back (a service
//! or a page an attacker controls) pass through here before they are stored.

use serde_json::{Map, Value};

/// What stands for a NUL, here and where tool answers are masked.
pub const NUL_STAND_IN: char = '\u{FFFD}';

/// Deepest nesting kept of a value a tool brings back: the value sits a few levels down
/// in what is stored (a message's content, an event), and further down again in what
/// the web chat reads, all below serde_json's 128.
pub const MAX_RESULT_DEPTH: usize = 64;

/// Replaces each NUL in `text`; whether there was one.
pub fn replace_nul_in_text(text: &mut String) -> bool {
    if !text.contains('\0') {
        return false;
    }
    *text = text.replace('\0', NUL_STAND_IN.encode_utf8(&mut [0; 4]));
    true
}

/// Replaces each NUL in the keys and values of `map`, at any depth; whether there was one.
pub fn replace_nul_in_map(map: &mut Map<String, Value>) -> bool {
    let mut held = false;
    if map.keys().any(|key| key.contains('\0')) {
        held = true;
        *map = std::mem::take(map)
            .into_iter()
            .map(|(mut key, value)| {
                replace_nul_in_text(&mut key);
                (key, value)
            })
            .collect();
    }
    for value in map.values_mut() {
        held |= replace_nul(value);
    }
    held
}

/// Replaces each NUL in `value`, at any depth; whether there was one.
pub fn replace_nul(value: &mut Value) -> bool {
    match value {
        Value::String(text) => replace_nul_in_text(text),
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |held, item| replace_nul(item) | held),
        Value::Object(map) => replace_nul_in_map(map),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// How deep `value` nests: 0 for a plain value, 1 for an array or object of plain
/// values. Iterative, so no value can exhaust the stack; it stops counting past `limit`.
pub fn depth(value: &Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1)];
    while let Some((value, level)) = pending.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => continue,
        };
        deepest = deepest.max(level);
        if deepest > limit {
            break;
        }
        pending.extend(children.map(|child| (child, level + 1)));
    }
    deepest
}

/// Keeps what lies deeper than `max` levels as its JSON text, so `value` nests at most
/// `max` deep and nothing of it is lost; whether anything was so kept.
pub fn flatten_deeper_than(value: &mut Value, max: usize) -> bool {
    fn walk(value: &mut Value, level: usize, max: usize) -> bool {
        match value {
            Value::Array(_) | Value::Object(_) if level > max => {
                *value = Value::String(value.to_string());
                true
            }
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |flat, item| walk(item, level + 1, max) | flat),
            Value::Object(map) => map
                .values_mut()
                .fold(false, |flat, item| walk(item, level + 1, max) | flat),
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => false,
        }
    }
    walk(value, 1, max)
}

/// How many bytes `value` takes as JSON, without writing it anywhere.
pub fn json_size(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a counter cannot fail; a value that cannot be written counts as 0.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!("bottom"), |inner, _| json!({ "d": inner }))
    }

    #[test]
    fn depth_counts_containers_and_stops_past_its_limit() {
        assert_eq!(depth(&json!("plain"), 10), 0);
        assert_eq!(depth(&json!({"a": 1}), 10), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": 2}]}), 10), 3);
        assert_eq!(depth(&nested(40), 100), 40);
        assert_eq!(depth(&nested(400), 10), 11);
    }

    #[test]
    fn what_lies_too_deep_is_kept_as_text() {
        let mut value = nested(70);
        assert!(flatten_deeper_than(&mut value, MAX_RESULT_DEPTH));
        assert_eq!(depth(&value, 1000), MAX_RESULT_DEPTH);
        assert!(value.to_string().contains("bottom"));
        // The 65th object and all it holds, as text.
        let text = value.pointer(&"/d".repeat(MAX_RESULT_DEPTH)).cloned();
        assert_eq!(text, Some(json!(nested(6).to_string())));

        let mut shallow = json!({"a": [1, {"b": "c"}]});
        assert!(!flatten_deeper_than(&mut shallow, MAX_RESULT_DEPTH));
        assert_eq!(shallow, json!({"a": [1, {"b": "c"}]}));
    }

    #[test]
    fn every_nul_is_replaced_in_keys_and_values() {
        let mut value = json!({"k\u{0}": ["a\u{0}", {"b": "\u{0}"}], "n": 1});
        assert!(replace_nul(&mut value));
        assert_eq!(
            value,
            json!({"k\u{fffd}": ["a\u{fffd}", {"b": "\u{fffd}"}], "n": 1})
        );
        assert!(!replace_nul(&mut value));
    }
}
