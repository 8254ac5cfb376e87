//! What an identifier a caller or a model names things by (a tool call id, a tool
//! name) may be: printable, visible and short, so it can never forge or colour a log
//! line or a card, and the user can always answer a card by it.

/// Longest identifier accepted, in characters.
pub const MAX_CHARS: usize = 200;

/// Why `value` cannot serve as an identifier, if it cannot: empty, too long, holding a
/// control character (newline, escape, …), or a character a reader cannot see or that
/// reorders the text (line separator, direction override, zero-width space, …), with
/// which two ids would look alike on a card or a log line would read otherwise. One
/// rule for what an API caller sends (as the OpenAPI document's pattern says, for the
/// characters below U+10000) and what a model names a call by.
pub fn problem(value: &str) -> Option<&'static str> {
    if value.chars().any(char::is_control) {
        Some("must not contain control characters (line breaks, escapes)")
    } else if value.chars().any(protocol::unseen::is_unseen) {
        Some("must not contain invisible or direction-changing characters")
    } else if value.trim().is_empty() {
        Some("must not be empty")
    } else if value.chars().count() > MAX_CHARS {
        Some("must be at most 200 characters")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_short_identifiers_pass_and_others_say_why() {
        assert_eq!(problem("call_1"), None);
        assert_eq!(problem(&"é".repeat(MAX_CHARS)), None);
        assert!(problem(&"x".repeat(MAX_CHARS + 1)).is_some());
        assert!(problem("").is_some());
        assert!(problem("   ").is_some());
        for bad in ["call\n1", "call\u{1b}[31m", "call\u{85}", "a\tb"] {
            assert!(problem(bad).is_some(), "{bad:?}");
        }
        for hidden in [
            "a\u{2028}b",
            "call_1\u{202E}lave",
            "a\u{2066}b",
            "a\u{200B}b",
            "a\u{FEFF}",
        ] {
            assert!(problem(hidden).is_some(), "{hidden:?}");
        }
        assert_eq!(problem("server__tool.v2"), None);
    }
}
