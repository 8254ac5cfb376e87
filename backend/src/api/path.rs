use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{Error, FieldErrors};

/// A path parameter that fails with our JSON error (400 naming it) rather than axum's
/// plain text.
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| ApiPath(value))
            .map_err(|rejection| Error::BadRequest {
                message: format!("invalid path: {}", rejection.body_text()),
                fields: Some(FieldErrors::from([(
                    "id".to_owned(),
                    "must be a UUID".to_owned(),
                )])),
            })
    }
}
