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

/// The text log's way of writing an event's fields: `name=value` (the message as it
/// is), with line breaks, control and invisible characters written as escapes. Text
/// from outside that a library logs as it was given (rmcp, at the levels toolgate lets
/// it log, may log a peer's words so) can then add no line of its own to the log. Like the default, it leaves out
/// the `log.*` fields of events that come from the `log` crate.
pub struct OneLineFields;

impl<'w> tracing_subscriber::fmt::FormatFields<'w> for OneLineFields {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: tracing_subscriber::fmt::format::Writer<'w>,
        fields: R,
    ) -> std::fmt::Result {
        let mut line = OneLine {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut line);
        line.result
    }
}

struct OneLine<'w> {
    writer: tracing_subscriber::fmt::format::Writer<'w>,
    first: bool,
    result: std::fmt::Result,
}

impl tracing::field::Visit for OneLine<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let text = if field.name() == "message" {
            format!("{value:?}")
        } else {
            format!("{}={value:?}", field.name())
        };
        let separator = if self.first { "" } else { " " };
        self.first = false;
        self.result = write!(self.writer, "{separator}{}", on_one_line(&text));
    }
}

/// `text` with every character that could break or reorder a line escaped.
fn on_one_line(text: &str) -> std::borrow::Cow<'_, str> {
    let breaks = |c: char| c == '\n' || c == '\t' || protocol::unseen::is_unseen(c);
    if !text.contains(breaks) {
        return text.into();
    }
    text.chars()
        .map(|c| if breaks(c) { escaped(c) } else { c.to_string() })
        .collect::<String>()
        .into()
}

fn escaped(c: char) -> String {
    format!("\\u{{{:04x}}}", u32::from(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a library logs as it was given (as rmcp's `warn!(%id, "response error")`
    /// logs a peer's request id) stays on its own line.
    #[test]
    fn a_field_from_outside_cannot_add_a_line_to_the_text_log() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .map_err(|_| std::io::ErrorKind::Other)?
                    .extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .fmt_fields(OneLineFields)
            .finish();
        let id = "1\n2026-01-01T00:00:00Z  INFO toolgate: approved\u{2028}x";
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(%id, "rejected peer request");
            tracing::warn!(id, "and {} in the message", id);
        });
        let log = String::from_utf8(captured.0.lock().map(|b| b.clone()).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(log.lines().count(), 2, "{log}");
        assert!(!log.contains('\u{2028}'), "{log}");
        assert!(log.contains("id=1\\u{000a}2026-01-01"), "{log}");
        assert!(log.contains("rejected peer request id="), "{log}");
    }

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
