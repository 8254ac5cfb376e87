//! Who is calling: a strictly validated HS256 bearer token.

mod dev;
mod jwt;

pub use dev::issue_dev_token;
pub use jwt::{Claims, JwtKeys, Verified};

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;

use crate::error::Error;
use crate::state::AppState;

/// The caller, from `Authorization: Bearer <JWT>`. Extracting it fails with 401 on
/// any problem; there is no anonymous fallback.
#[derive(Clone, Debug)]
pub struct AuthUser {
    pub user_id: String,
    /// When the caller's token expires (`exp`, seconds since the Unix epoch): what it is
    /// used to obtain expires no later.
    pub expires_at: i64,
}

impl FromRequestParts<AppState> for AuthUser {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Error> {
        let Verified {
            user_id,
            expires_at,
        } = bearer(state, &parts.headers)?;
        Ok(AuthUser {
            user_id,
            expires_at,
        })
    }
}

/// The user id of a request's `Authorization: Bearer` token.
pub fn bearer_user(state: &AppState, headers: &HeaderMap) -> Result<String, Error> {
    bearer(state, headers).map(|verified| verified.user_id)
}

/// A request's `Authorization: Bearer` token, checked.
pub fn bearer(state: &AppState, headers: &HeaderMap) -> Result<Verified, Error> {
    {
        let header = headers
            .get(AUTHORIZATION)
            .ok_or_else(|| Error::Unauthorized("missing Authorization header".into()))?;
        // The scheme's name is read without regard to case (RFC 9110, 11.1).
        let token = header
            .to_str()
            .ok()
            .and_then(|value| value.split_once(' '))
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
            .filter(|token| !token.is_empty())
            .ok_or_else(|| {
                Error::Unauthorized("Authorization header must be `Bearer <token>`".into())
            })?;
        state.jwt.verify(token)
    }
}
