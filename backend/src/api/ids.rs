//! Identifiers a caller names things by (tool call ids, tool names): printable and
//! short, so one can never forge or colour a log line or a card.

use crate::error::{Error, FieldErrors, Result};

/// Longest identifier accepted.
const MAX_ID_CHARS: usize = 200;

/// Refuses, with 400 naming the field, an identifier that is empty, too long, or holds
/// a control character (newline, escape, …).
pub fn check(named: &[(&str, &str)]) -> Result<()> {
    let mut fields = FieldErrors::new();
    for (field, value) in named {
        let problem = if value.chars().any(char::is_control) {
            Some("must not contain control characters (line breaks, escapes)")
        } else if value.trim().is_empty() {
            Some("must not be empty")
        } else if value.chars().count() > MAX_ID_CHARS {
            Some("must be at most 200 characters")
        } else {
            None
        };
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
