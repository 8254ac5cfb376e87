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
