//! JSON values as a person reads them.

use protocol::unseen::is_unseen;
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

/// `text` with every character a reader cannot see, or that reorders what they see,
/// written out as `⟨U+XXXX⟩`: zero-width and joining characters, direction marks,
/// embeddings, overrides and isolates, invisible operators, tags, the byte order mark,
/// line and paragraph separators and control characters other than a newline or a tab.
/// For what a user approves: a value must read as what will run.
pub fn revealed(text: &str) -> String {
    if !text.chars().any(is_unseen) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unseen(c) {
            out.push_str(&format!("⟨U+{:04X}⟩", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_reader_cannot_see_is_written_out() {
        // An override that shows `exe.txt` for `txt.exe`, a zero-width space in a host,
        // an isolate, a line separator, a tag character.
        assert_eq!(revealed("report\u{202E}txt.exe"), "report⟨U+202E⟩txt.exe");
        assert_eq!(revealed("pay\u{200B}pal.com"), "pay⟨U+200B⟩pal.com");
        assert_eq!(
            revealed("a\u{2066}b\u{2069}\u{2028}c\u{E0041}\u{7}"),
            "a⟨U+2066⟩b⟨U+2069⟩⟨U+2028⟩c⟨U+E0041⟩⟨U+0007⟩"
        );
        // What a reader sees is left alone: new lines, tabs, accents, other scripts.
        let plain = "select *\n\tfrom t -- café, שלום, 日本";
        assert_eq!(revealed(plain), plain);
    }
}
