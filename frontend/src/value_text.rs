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
/// and look-alike letters pass for the letters they imitate.
pub fn revealed(text: &str) -> Option<String> {
    let shown = unseen::written_out(text);
    (shown != text).then_some(shown)
}

/// The note beneath an input whose text [`revealed`] writes out: what will be sent.
#[component]
pub fn RevealedNote(text: String, testid: &'static str) -> impl IntoView {
    view! {
        <p class="help revealed" data-testid=testid>
            "Holds characters that cannot be seen, or letters that only look Latin; it reads: "
            <code>{text}</code>
        </p>
    }
}
