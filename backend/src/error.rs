//! The server's one error type, and the one place it becomes an HTTP response.

use std::collections::BTreeMap;

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use protocol::api::{ErrorBody, ErrorDetail};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Field name (or JSON path) → what is wrong with it.
pub type FieldErrors = BTreeMap<String, String>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The request cannot be read: not JSON, wrong shape, unknown action.
    #[error("bad request: {message}")]
    BadRequest {
        message: String,
        fields: Option<FieldErrors>,
    },
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Absent, or owned by somebody else: the two are indistinguishable on purpose.
    /// Known caller, but not allowed here (e.g. dev sign-in from a foreign `Host`).
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("{0}")]
    NotFoundRoute(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("conflict: {message}")]
    Conflict { code: &'static str, message: String },
    #[error("request body is larger than {limit} bytes")]
    PayloadTooLarge { limit: usize },
    /// The body did not arrive in time (a client sending it a byte at a time).
    #[error("request body not received within {seconds} s")]
    BodyTimeout { seconds: u64 },
    /// A body not labelled `application/json`.
    #[error("unsupported media type")]
    UnsupportedMediaType,
    /// Readable, but the values break the rules.
    #[error("validation failed: {message}")]
    Unprocessable {
        message: String,
        fields: FieldErrors,
    },
    /// Over a per-user limit; `retry_after_seconds` goes out as `Retry-After`.
    #[error("too many requests: {message}")]
    TooManyRequests {
        message: String,
        retry_after_seconds: u64,
    },
    #[error("database unavailable")]
    Unavailable(#[source] sqlx::Error),
    /// The database did not answer a readiness check this caller shared with another,
    /// whose answer carried (and logged) the reason.
    #[error("database unavailable (shared check)")]
    NotReady,
    /// The database cancelled a statement that ran, or waited for a lock, longer than
    /// `TOOLGATE_DB_STATEMENT_TIMEOUT`: busy, not broken, so worth another try.
    #[error("database busy: {0}")]
    Busy(String),
    #[error("database error")]
    Database(#[source] sqlx::Error),
    #[error(transparent)]
    Internal(anyhow::Error),
}

/// SQLSTATEs of a statement the database gave up on for time: `query_canceled` (the
/// statement timeout) and `lock_not_available`.
const GAVE_UP_FOR_TIME: [&str; 2] = ["57014", "55P03"];

fn gave_up_for_time(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db)
        if db.code().is_some_and(|code| GAVE_UP_FOR_TIME.contains(&code.as_ref())))
}

impl From<anyhow::Error> for Error {
    fn from(err: anyhow::Error) -> Self {
        // The database's own word, or one already read as busy on the way here.
        let busy = err.chain().any(|cause| {
            cause
                .downcast_ref::<sqlx::Error>()
                .is_some_and(gave_up_for_time)
                || matches!(cause.downcast_ref::<Error>(), Some(Error::Busy(_)))
        });
        if busy {
            Error::Busy(format!("{err:#}"))
        } else {
            Error::Internal(err)
        }
    }
}

impl Error {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Error::BadRequest {
            message: message.into(),
            fields: None,
        }
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Error::Conflict {
            code,
            message: message.into(),
        }
    }

    pub fn unprocessable(message: impl Into<String>, fields: FieldErrors) -> Self {
        Error::Unprocessable {
            message: message.into(),
            fields,
        }
    }

    fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            Error::BadRequest { .. } => (StatusCode::BAD_REQUEST, "bad_request"),
            Error::Unauthorized(_) => (StatusCode::UNAUTHORIZED, "unauthorized"),
            Error::Forbidden(_) => (StatusCode::FORBIDDEN, "forbidden"),
            Error::UnsupportedMediaType => {
                (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
            }
            Error::NotFound(_) | Error::NotFoundRoute(_) => (StatusCode::NOT_FOUND, "not_found"),
            Error::MethodNotAllowed(_) => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            Error::Conflict { code, .. } => (StatusCode::CONFLICT, code),
            Error::PayloadTooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
            Error::BodyTimeout { .. } => (StatusCode::REQUEST_TIMEOUT, "request_timeout"),
            Error::Unprocessable { .. } => (StatusCode::UNPROCESSABLE_ENTITY, "validation_failed"),
            Error::TooManyRequests { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
            Error::Unavailable(_) | Error::NotReady => {
                (StatusCode::SERVICE_UNAVAILABLE, "database_unavailable")
            }
            Error::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, "database_busy"),
            Error::Database(_) | Error::Internal(_) => {
                (StatusCode::INTERNAL_SERVER_ERROR, "internal_error")
            }
        }
    }
}

/// What Postgres answers when a text or JSON value holds a NUL (U+0000), which it cannot
/// store: `character_not_in_repertoire` (text) and `untranslatable_character` (jsonb).
const NUL_IN_TEXT: [&str; 2] = ["22021", "22P05"];

impl From<sqlx::Error> for Error {
    fn from(err: sqlx::Error) -> Self {
        match err {
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::PoolClosed => {
                Error::Unavailable(err)
            }
            err if gave_up_for_time(&err) => Error::Busy(err.to_string()),
            // Only what a caller sent can carry a NUL: their mistake, not ours.
            sqlx::Error::Database(db)
                if db
                    .code()
                    .is_some_and(|code| NUL_IN_TEXT.contains(&code.as_ref())) =>
            {
                Error::unprocessable(
                    "the request holds a NUL (U+0000) character, which cannot be stored",
                    FieldErrors::from([(
                        "body".to_owned(),
                        "must not contain NUL (U+0000) characters".to_owned(),
                    )]),
                )
            }
            other => Error::Database(other),
        }
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let retry_after = match &self {
            Error::TooManyRequests {
                retry_after_seconds,
                ..
            } => Some(retry_after_seconds.max(&1).to_string()),
            Error::Busy(_) => Some("1".to_owned()),
            _ => None,
        };
        // A 401 says how to authenticate (RFC 9110, 11.6.1).
        let challenge = matches!(self, Error::Unauthorized(_));
        let (message, fields) = match self {
            Error::BadRequest { message, fields } => (message, fields),
            Error::Unauthorized(reason) | Error::Forbidden(reason) => (reason, None),
            Error::UnsupportedMediaType => (
                "the request body must be sent with Content-Type: application/json".to_owned(),
                None,
            ),
            Error::NotFound(what) => (format!("{what} not found"), None),
            Error::NotFoundRoute(message) | Error::MethodNotAllowed(message) => (message, None),
            Error::Conflict { message, .. } => (message, None),
            Error::PayloadTooLarge { limit } => {
                (format!("request body is larger than {limit} bytes"), None)
            }
            Error::BodyTimeout { seconds } => (
                format!("the request body did not arrive within {seconds} s"),
                None,
            ),
            Error::Unprocessable { message, fields } => (message, Some(fields)),
            Error::TooManyRequests { message, .. } => (message, None),
            Error::Unavailable(err) => {
                tracing::error!(error = %err, "database unavailable");
                (
                    "the database is unavailable; try again shortly".to_owned(),
                    None,
                )
            }
            Error::NotReady => (
                "the database is unavailable; try again shortly".to_owned(),
                None,
            ),
            Error::Busy(err) => {
                tracing::warn!(error = %err, "a statement ran out of time");
                (
                    "the database took too long to answer; try again shortly".to_owned(),
                    None,
                )
            }
            Error::Database(err) => {
                tracing::error!(error = ?err, "database error");
                ("internal error".to_owned(), None)
            }
            Error::Internal(err) => {
                tracing::error!(error = ?err, "internal error");
                ("internal error".to_owned(), None)
            }
        };
        let body = ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message,
                fields,
            },
        };
        let mut response = (status, Json(body)).into_response();
        if let Some(seconds) = retry_after
            && let Ok(value) = axum::http::HeaderValue::from_str(&seconds)
        {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, value);
        }
        if challenge {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"toolgate\""),
            );
        }
        response
    }
}

/// Turns a unique-constraint violation into a 409, by constraint name.
pub trait ResultExt<T> {
    fn on_constraint(
        self,
        name: &str,
        map: impl FnOnce(Box<dyn sqlx::error::DatabaseError>) -> Error,
    ) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn on_constraint(
        self,
        name: &str,
        map: impl FnOnce(Box<dyn sqlx::error::DatabaseError>) -> Error,
    ) -> Result<T> {
        self.map_err(|err| match err.into() {
            Error::Database(sqlx::Error::Database(db)) if db.constraint() == Some(name) => map(db),
            other => other,
        })
    }
}
