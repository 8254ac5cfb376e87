//! What a tool's outcome must not pass on: the secrets its call carried (the user's
//! secret fields, the operator's environment values) as sent or as a service may echo
//! them back (percent-encoded, form-encoded, JSON-escaped), and NUL characters, which
//! Postgres cannot store. Every outcome of a tool that ran goes through here before it
//! is stored, shown or handed to the model, whatever kind of tool it was.

use protocol::api::ToolOutcome;
use protocol::fields::MASKED;
use serde_json::Value;

use super::template::percent_encode;

/// Shorter secrets are left as they are: replacing two or three characters wherever
/// they occur would garble the rest of the answer and tell the model little less.
const MIN_SECRET_CHARS: usize = 4;

/// What stands in for a NUL character.
const NUL_STAND_IN: &str = "\u{FFFD}";

/// The forms of one call's secrets to replace in its outcome.
#[derive(Debug, Default)]
pub struct Redactions {
    /// Longest first, so a form that contains another is replaced whole.
    forms: Vec<String>,
}

impl Redactions {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let mut forms = Vec::new();
        for secret in secrets {
            if secret.chars().count() < MIN_SECRET_CHARS {
                continue;
            }
            let encoded = percent_encode(secret);
            let json = serde_json::to_string(secret).unwrap_or_default();
            forms.extend([
                secret.to_owned(),
                lowercase_hex(&encoded),
                encoded.replace("%20", "+"),
                json.trim_matches('"').to_owned(),
                encoded,
            ]);
        }
        forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        forms.dedup();
        Redactions { forms }
    }

    /// `outcome` with every form of the secrets masked and every NUL replaced, in its
    /// result (strings and keys, at any depth) and its error.
    pub fn outcome(&self, mut outcome: ToolOutcome) -> ToolOutcome {
        if let Some(result) = &mut outcome.result {
            self.value(result);
        }
        if let Some(error) = &mut outcome.error {
            self.text(error);
        }
        outcome
    }

    fn value(&self, value: &mut Value) {
        match value {
            Value::String(text) => self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(map) => {
                if map.keys().any(|key| self.touches(key)) {
                    for (mut key, mut item) in std::mem::take(map) {
                        self.text(&mut key);
                        self.value(&mut item);
                        map.insert(key, item);
                    }
                } else {
                    map.values_mut().for_each(|item| self.value(item));
                }
            }
            _ => {}
        }
    }

    fn touches(&self, text: &str) -> bool {
        text.contains('\0') || self.forms.iter().any(|form| text.contains(form.as_str()))
    }

    fn text(&self, text: &mut String) {
        if !self.touches(text) {
            return;
        }
        for form in &self.forms {
            if text.contains(form.as_str()) {
                *text = text.replace(form.as_str(), MASKED);
            }
        }
        if text.contains('\0') {
            *text = text.replace('\0', NUL_STAND_IN);
        }
    }
}

/// `encoded` (percent-encoded) with lower-case hex digits, as some services echo it.
fn lowercase_hex(encoded: &str) -> String {
    let mut out = String::with_capacity(encoded.len());
    let mut digits_left = 0;
    for c in encoded.chars() {
        if c == '%' {
            digits_left = 2;
            out.push(c);
        } else if digits_left > 0 {
            digits_left -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn shown(outcome: &ToolOutcome) -> String {
        serde_json::to_string(outcome).unwrap_or_default()
    }

    #[test]
    fn a_secret_echoed_in_any_encoding_is_masked_at_any_depth() {
        let secret = "ab+c/d== key";
        let outcome = ToolOutcome::ok(json!({
            "echo": "token ab+c/d== key",
            "next": "https://api.example.com/v1?key=ab%2Bc%2Fd%3D%3D%20key&page=2",
            "lower": "key=ab%2bc%2fd%3d%3d%20key",
            "form": "key=ab%2Bc%2Fd%3D%3D+key",
            "deep": [{"ab+c/d== key": ["still ab+c/d== key"]}],
        }));
        let redactions = Redactions::new([secret]);
        let masked = redactions.outcome(outcome);
        let text = shown(&masked);
        for form in ["ab+c/d== key", "ab%2Bc", "ab%2bc"] {
            assert!(!text.contains(form), "{form} in {text}");
        }
        assert_eq!(
            masked.result.as_ref().map(|r| r["next"].clone()),
            Some(json!(format!(
                "https://api.example.com/v1?key={MASKED}&page=2"
            )))
        );
    }

    #[test]
    fn a_json_escaped_copy_in_an_error_is_masked() {
        let secret = r#"pa"ss\word"#;
        let outcome = ToolOutcome::failed(r#"HTTP 401: {"sent":"pa\"ss\\word"}"#.to_owned());
        let masked = Redactions::new([secret]).outcome(outcome);
        let error = masked.error.unwrap_or_default();
        assert!(!error.contains("ss\\"), "{error}");
        assert!(error.contains(MASKED), "{error}");
    }

    #[test]
    fn nul_characters_are_replaced_everywhere_and_short_values_kept() {
        let outcome = ToolOutcome::ok(json!({"a\u{0}b": "x\u{0}y", "pin": "id 123"}));
        let masked = Redactions::new(["123"]).outcome(outcome);
        let text = shown(&masked);
        assert!(!text.contains("\\u0000"), "{text}");
        assert!(text.contains("id 123"), "{text}");
        assert_eq!(
            masked.result.as_ref().map(|r| r["a\u{FFFD}b"].clone()),
            Some(json!("x\u{FFFD}y"))
        );
    }
}
