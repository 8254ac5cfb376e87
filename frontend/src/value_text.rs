//! JSON values as a person reads them.

use leptos::prelude::*;
use protocol::unseen;
use serde_json::Value;

/// A JSON value as a person reads it: strings bare, the rest as JSON.
pub fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        other => compact(other),
    }
}

/// A JSON value as JSON text on one line. (Through `serde_json::to_string`, as request
/// bodies are written, rather than `Display`, which would bring a second writer.)
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Indented JSON, for a value shown whole.
pub fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `text` as a person deciding on it must read it ([`unseen::written_out`]), when that
/// differs from what an input shows of it: hidden or reordering characters act there,
/// and look-alike letters pass for the letters they imitate. A one-line input shows no
/// line break (browsers drop them from what it shows), so there they are written out
/// too.
pub fn revealed(text: &str, one_line: bool) -> Option<String> {
    let mut shown = unseen::written_out(text);
    // A carriage return is written out already, as every control character is.
    if one_line && shown.contains('\n') {
        shown = shown.replace('\n', "⟨U+000A⟩");
    }
    (shown != text).then_some(shown)
}

/// The note beneath an input whose text [`revealed`] writes out: what will be sent.
/// `id` is the note's, which the input names among what describes it.
#[component]
pub fn RevealedNote(text: String, id: String, testid: &'static str) -> impl IntoView {
    view! {
        <p class="help revealed" id=id data-testid=testid>
            "Holds characters that cannot be seen, or letters that only look Latin; it reads: "
            <code>{text}</code>
        </p>
    }
}

#[cfg(test)]
mod tests {
    use super::revealed;

    #[test]
    fn a_text_is_revealed_only_where_its_input_would_not_show_it_as_it_is() {
        assert_eq!(revealed("acme.com", true), None);
        assert_eq!(revealed("two\nlines", false), None);
        assert_eq!(
            revealed("alice@corp.com\nbob@evil.com", true).as_deref(),
            Some("alice@corp.com⟨U+000A⟩bob@evil.com")
        );
        assert_eq!(revealed("a\r\nb", false).as_deref(), Some("a⟨U+000D⟩\nb"));
        assert_eq!(
            revealed("invoice-\u{202E}fdp.exe", false).as_deref(),
            Some("invoice-⟨U+202E⟩fdp.exe")
        );
    }
}
