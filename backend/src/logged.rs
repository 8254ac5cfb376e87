//! Text from outside the server (what an MCP server or a model endpoint said) as a log
//! line may hold it: the outsider may have written it to read as lines, fields or
//! directions of its own.

/// Most characters of outside text that one log line keeps.
const MOST_CHARS: usize = 500;

/// `said` quoted, with quotes, backslashes, line breaks, control and invisible
/// characters written as escapes (`\u{000a}`), so it can add neither a line nor a field
/// to the log, nor reorder one; cut after [`MOST_CHARS`] characters.
pub fn outside(said: impl std::fmt::Display) -> String {
    let said = said.to_string();
    let mut logged = String::with_capacity(said.len().min(MOST_CHARS) + 2);
    logged.push('"');
    for (count, c) in said.chars().enumerate() {
        if count == MOST_CHARS {
            logged.push('…');
            break;
        }
        match c {
            '"' | '\\' => {
                logged.push('\\');
                logged.push(c);
            }
            '\n' | '\t' => logged.push_str(&escaped(c)),
            c if protocol::unseen::is_unseen(c) => logged.push_str(&escaped(c)),
            c => logged.push(c),
        }
    }
    logged.push('"');
    logged
}

fn escaped(c: char) -> String {
    format!("\\u{{{:04x}}}", u32::from(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outside_text_is_logged_on_one_line_as_it_reads() {
        let forged = "tool\n2026-01-01T00:00:00Z  INFO toolgate: approved\r\u{202E}x\u{2028}y";
        let logged = outside(forged);
        assert!(
            !logged.contains(['\n', '\r', '\u{202E}', '\u{2028}']),
            "{logged:?}"
        );
        assert_eq!(
            logged,
            "\"tool\\u{000a}2026-01-01T00:00:00Z  INFO toolgate: approved\\u{000d}\\u{202e}x\\u{2028}y\""
        );
        // A field of its own, or an escape written out, stays inside the quotes.
        assert_eq!(
            outside(r#"a" outcome="approved \u{000a}"#),
            r#""a\" outcome=\"approved \\u{000a}""#
        );
        let long = outside("é".repeat(MOST_CHARS + 10));
        assert_eq!(long.chars().count(), MOST_CHARS + 3);
        assert!(long.ends_with("…\""));
        assert_eq!(outside("plain words"), "\"plain words\"");
    }
}
