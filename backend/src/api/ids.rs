//! Identifiers a caller names things by (tool call ids, tool names), checked by the
//! rule of [`identifiers`] with a 400 naming the field.

use crate::error::{Error, FieldErrors, Result};
use crate::tools::identifiers;

/// Refuses, with 400 naming the field, an identifier that is empty, too long, or holds
/// a control, invisible or direction-changing character.
pub fn check(named: &[(&str, &str)]) -> Result<()> {
    let mut fields = FieldErrors::new();
    for (field, value) in named {
        let problem = identifiers::problem(value);
        if let Some(problem) = problem {
            fields.insert((*field).to_owned(), problem.to_owned());
        }
    }
    if fields.is_empty() {
        Ok(())
    } else {
        Err(Error::BadRequest {
            message: "an identifier is not acceptable".to_owned(),
            fields: Some(fields),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// Every pattern the OpenAPI document gives an identifier (`tool_call_id`,
    /// `tool_name`, `key`).
    fn identifier_patterns(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    for name in ["tool_call_id", "tool_name", "key"] {
                        if let Some(pattern) = properties
                            .get(name)
                            .and_then(|p| p.get("pattern"))
                            .and_then(Value::as_str)
                            && !found.iter().any(|f| f == pattern)
                        {
                            found.push(pattern.to_owned());
                        }
                    }
                }
                map.values().for_each(|v| identifier_patterns(v, found));
            }
            Value::Array(items) => items.iter().for_each(|v| identifier_patterns(v, found)),
            _ => {}
        }
    }

    /// The document's patterns say what the server takes, character by character, for
    /// every character below U+10000 (above it the document says so in words).
    #[test]
    fn the_documented_patterns_refuse_what_the_rule_refuses() {
        let mut patterns = Vec::new();
        identifier_patterns(&crate::api::docs::document(), &mut patterns);
        assert!(!patterns.is_empty());
        for pattern in patterns {
            let documented = regex_lite::Regex::new(&pattern).expect("a pattern Rust reads too");
            for c in (0..=0xFFFF).filter_map(char::from_u32) {
                let id = format!("id{c}");
                assert_eq!(
                    documented.is_match(&id),
                    crate::tools::identifiers::problem(&id).is_none(),
                    "U+{:04X} against {pattern}",
                    u32::from(c)
                );
            }
        }
    }
}
