use chrono::{DateTime, Utc};

use super::jwt::MAX_USER_ID_LEN;
use crate::error::{Error, FieldErrors, Result};
use crate::state::AppState;

/// How long a dev sign-in lasts, unless `TOOLGATE_MAX_TOKEN_LIFETIME` is shorter.
const DEV_TOKEN_HOURS: i64 = 24;

/// Signs a token for any user id: only reachable when `TOOLGATE_DEV_AUTH=1`.
pub fn issue_dev_token(state: &AppState, user_id: &str) -> Result<(String, DateTime<Utc>)> {
    let user_id = user_id.trim();
    let valid_chars = user_id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '@'));
    let problem = if user_id.is_empty() {
        Some("a user id is required".to_owned())
    } else if user_id.len() > MAX_USER_ID_LEN {
        Some(format!("at most {MAX_USER_ID_LEN} characters"))
    } else if !valid_chars {
        Some("use letters, digits and _ - . @ only".to_owned())
    } else {
        None
    };
    if let Some(problem) = problem {
        let fields = FieldErrors::from([("user_id".to_owned(), problem)]);
        return Err(Error::unprocessable("invalid user id", fields));
    }
    let (token, exp) = state
        .jwt
        .sign(user_id, chrono::Duration::hours(DEV_TOKEN_HOURS))?;
    let expires_at = DateTime::from_timestamp(exp, 0).unwrap_or_else(Utc::now);
    Ok((token, expires_at))
}
