use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::error::Error;

/// Seconds of clock skew tolerated on `exp` and `nbf`.
const LEEWAY_SECONDS: u64 = 5;
/// Longest user id a token may carry.
pub const MAX_USER_ID_LEN: usize = 128;

#[derive(Debug, Serialize, Deserialize)]
pub struct Claims {
    pub sub: String,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<Audience>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    /// `stream:<conversation id>` on stream tokens, which are good for nothing else;
    /// an identity provider's token may carry OAuth scopes here too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// `aud` as RFC 7519 allows it: one audience or a list (identity providers such as
/// Keycloak send a list). `jsonwebtoken` checks it against the configured one.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audience {
    One(String),
    Many(Vec<String>),
}

/// A token that passed every check: whose it is, and until when it is good.
#[derive(Clone, Debug)]
pub struct Verified {
    pub user_id: String,
    /// `exp`, in seconds since the Unix epoch.
    pub expires_at: i64,
}

/// How a stream token's scope begins.
const STREAM_SCOPE_PREFIX: &str = "stream:";

/// Keys and validation rules, built once at start-up.
#[derive(Clone)]
pub struct JwtKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    /// Stream tokens are signed with a key of their own, derived from the secret: a
    /// stream token travels in a URL (proxies log those), and a service that shares the
    /// secret but knows nothing of its scope must not take it as a user's token.
    stream_encoding: EncodingKey,
    stream_decoding: DecodingKey,
    validation: Validation,
    audience: Option<String>,
    issuer: Option<String>,
    /// How far ahead a token's `exp` may lie, in seconds.
    max_lifetime: i64,
    /// Says the limit to a caller whose token goes past it.
    too_long: String,
}

impl JwtKeys {
    pub fn new(config: &Config) -> Self {
        // Pinned to HS256; `exp` and `sub` required; `nbf` checked (it is not by default).
        let mut validation = Validation::new(Algorithm::HS256);
        validation.algorithms = vec![Algorithm::HS256];
        validation.validate_exp = true;
        validation.validate_nbf = true;
        validation.leeway = LEEWAY_SECONDS;
        let mut required = vec!["exp", "sub"];
        match &config.jwt_audience {
            Some(audience) => {
                validation.set_audience(&[audience]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        if let Some(issuer) = &config.jwt_issuer {
            validation.set_issuer(&[issuer]);
            required.push("iss");
        }
        validation.set_required_spec_claims(&required);
        let max_lifetime = i64::try_from(config.max_token_lifetime.as_secs()).unwrap_or(i64::MAX);
        let stream_key = stream_key(&config.jwt_secret);
        JwtKeys {
            max_lifetime,
            too_long: format!(
                "token expires too far ahead; this server accepts at most {} of lifetime",
                describe_seconds(max_lifetime)
            ),
            encoding: EncodingKey::from_secret(&config.jwt_secret),
            decoding: DecodingKey::from_secret(&config.jwt_secret),
            stream_encoding: EncodingKey::from_secret(&stream_key),
            stream_decoding: DecodingKey::from_secret(&stream_key),
            validation,
            audience: config.jwt_audience.clone(),
            issuer: config.jwt_issuer.clone(),
        }
    }

    /// Checks an API token.
    pub fn verify(&self, token: &str) -> Result<Verified, Error> {
        let claims = self.decode(token, &self.decoding).map_err(|refused| {
            // Said plainly to a client that sends its stream token as a bearer token.
            if self.decode(token, &self.stream_decoding).is_ok() {
                Error::Unauthorized(STREAM_TOKEN_ONLY.into())
            } else {
                refused
            }
        })?;
        let is_stream_token = claims.scope.as_deref().is_some_and(|scopes| {
            scopes
                .split_whitespace()
                .any(|scope| scope.starts_with(STREAM_SCOPE_PREFIX))
        });
        if is_stream_token {
            return Err(Error::Unauthorized(STREAM_TOKEN_ONLY.into()));
        }
        Self::subject(claims)
    }

    /// Checks a stream token for `conversation_id`.
    pub fn verify_stream(
        &self,
        token: &str,
        conversation_id: uuid::Uuid,
    ) -> Result<Verified, Error> {
        let claims = self.decode(token, &self.stream_decoding)?;
        if claims.scope.as_deref() != Some(&stream_scope(conversation_id)) {
            return Err(Error::Unauthorized(
                "this token does not open this conversation's stream".into(),
            ));
        }
        Self::subject(claims)
    }

    fn decode(&self, token: &str, key: &DecodingKey) -> Result<Claims, Error> {
        let claims = jsonwebtoken::decode::<Claims>(token, key, &self.validation)
            .map(|data| data.claims)
            .map_err(|err| Error::Unauthorized(describe(err.kind()).to_owned()))?;
        // A leaked token must not stay good for years: the limit is counted from now,
        // whatever `iat` claims.
        let latest = chrono::Utc::now()
            .timestamp()
            .saturating_add(self.max_lifetime)
            .saturating_add(LEEWAY_SECONDS as i64);
        if claims.exp > latest {
            return Err(Error::Unauthorized(self.too_long.clone()));
        }
        Ok(claims)
    }

    /// The user a token names. A subject that could pass for another one in a log
    /// line or on the screen (`alice` with a zero-width space or a space after it) is
    /// refused, as the identifiers a caller names things by are.
    fn subject(claims: Claims) -> Result<Verified, Error> {
        let sub = claims.sub;
        if sub.len() > MAX_USER_ID_LEN
            || sub.trim() != sub
            || crate::tools::identifiers::problem(&sub).is_some()
        {
            return Err(Error::Unauthorized(
                "token subject is empty, too long, or holds spaces at its ends or invisible characters".into(),
            ));
        }
        Ok(Verified {
            user_id: sub,
            expires_at: claims.exp,
        })
    }

    /// Signs a token for `user_id`, valid for `lifetime` but never longer than the
    /// configured maximum.
    pub fn sign(&self, user_id: &str, lifetime: chrono::Duration) -> anyhow::Result<(String, i64)> {
        self.sign_scoped(user_id, lifetime, None, &self.encoding)
    }

    /// A short-lived token that opens one conversation's event stream.
    pub fn sign_stream(
        &self,
        user_id: &str,
        conversation_id: uuid::Uuid,
        lifetime: chrono::Duration,
    ) -> anyhow::Result<(String, i64)> {
        self.sign_scoped(
            user_id,
            lifetime,
            Some(stream_scope(conversation_id)),
            &self.stream_encoding,
        )
    }

    fn sign_scoped(
        &self,
        user_id: &str,
        lifetime: chrono::Duration,
        scope: Option<String>,
        key: &EncodingKey,
    ) -> anyhow::Result<(String, i64)> {
        let now = chrono::Utc::now().timestamp();
        let exp = now + lifetime.num_seconds().min(self.max_lifetime);
        let claims = Claims {
            sub: user_id.to_owned(),
            exp,
            nbf: Some(now),
            iat: Some(now),
            aud: self.audience.clone().map(Audience::One),
            iss: self.issuer.clone(),
            scope,
        };
        let token = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, key)?;
        Ok((token, exp))
    }
}

const STREAM_TOKEN_ONLY: &str = "a stream token only opens an event stream";

/// The stream tokens' key: the secret hashed under a label of its own.
fn stream_key(secret: &[u8]) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(b"toolgate stream token key v1\0");
    hasher.update(secret);
    hasher.finalize().into()
}

fn stream_scope(conversation_id: uuid::Uuid) -> String {
    format!("{STREAM_SCOPE_PREFIX}{conversation_id}")
}

/// `86400` → `24h`: the largest unit that divides evenly, as the settings are written.
fn describe_seconds(seconds: i64) -> String {
    match seconds {
        s if s % 86_400 == 0 && s >= 86_400 * 2 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

fn describe(kind: &ErrorKind) -> &'static str {
    match kind {
        ErrorKind::ExpiredSignature => "token has expired",
        ErrorKind::ImmatureSignature => "token is not valid yet (nbf)",
        ErrorKind::InvalidSignature => "token signature is invalid",
        ErrorKind::InvalidAlgorithm | ErrorKind::InvalidAlgorithmName => {
            "token must be signed with HS256"
        }
        ErrorKind::MissingRequiredClaim(claim) if claim == "exp" => "token has no exp claim",
        ErrorKind::MissingRequiredClaim(claim) if claim == "sub" => "token has no sub claim",
        ErrorKind::MissingRequiredClaim(claim) if claim == "aud" => "token has no aud claim",
        ErrorKind::MissingRequiredClaim(claim) if claim == "iss" => "token has no iss claim",
        ErrorKind::MissingRequiredClaim(_) => "token is missing a required claim",
        ErrorKind::InvalidAudience => "token audience is not accepted",
        ErrorKind::InvalidIssuer => "token issuer is not accepted",
        _ => "token is malformed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    fn keys() -> JwtKeys {
        let config = Config::from_lookup(|name| match name {
            "DATABASE_URL" => Some("postgres://x/y".to_owned()),
            "TOOLGATE_JWT_SECRET" => Some(SECRET.to_owned()),
            "TOOLGATE_SECRET_KEY" => Some("another secret of enough length".to_owned()),
            _ => None,
        })
        .expect("valid");
        JwtKeys::new(&config)
    }

    /// A stream token travels in a URL: a service that shares the secret (and checks
    /// nothing toolgate adds) must not take it for the user's own token, nor must
    /// toolgate's API.
    #[test]
    fn a_stream_token_opens_its_stream_and_passes_nowhere_else() {
        let keys = keys();
        let conversation = uuid::Uuid::new_v4();
        let (stream, _) = keys
            .sign_stream("ann", conversation, chrono::Duration::minutes(10))
            .expect("signed");
        assert_eq!(
            keys.verify_stream(&stream, conversation)
                .expect("opens its stream")
                .user_id,
            "ann"
        );
        assert!(keys.verify_stream(&stream, uuid::Uuid::new_v4()).is_err());
        match keys.verify(&stream) {
            Err(Error::Unauthorized(why)) => assert_eq!(why, STREAM_TOKEN_ONLY),
            other => panic!("taken as an API token: {other:?}"),
        }
        let mut sibling = Validation::new(Algorithm::HS256);
        sibling.validate_aud = false;
        let read = jsonwebtoken::decode::<Claims>(
            &stream,
            &DecodingKey::from_secret(SECRET.as_bytes()),
            &sibling,
        );
        assert!(read.is_err(), "another service of the secret read it");

        // The other way: a token of the secret, scope and all, opens no stream.
        let claims = Claims {
            sub: "ann".to_owned(),
            exp: chrono::Utc::now().timestamp() + 600,
            nbf: None,
            iat: None,
            aud: None,
            iss: None,
            scope: Some(stream_scope(conversation)),
        };
        let forged = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(SECRET.as_bytes()),
        )
        .expect("signed");
        assert!(keys.verify_stream(&forged, conversation).is_err());
    }
}
