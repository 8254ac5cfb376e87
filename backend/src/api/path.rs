use axum::extract::{FromRequestParts, Path, RawPathParams};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use uuid::Uuid;

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
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => {
                // Every path parameter of the API is a UUID: name the first that is not.
                let field = RawPathParams::from_request_parts(parts, state)
                    .await
                    .ok()
                    .and_then(|params| {
                        params
                            .iter()
                            .find(|(_, value)| value.parse::<Uuid>().is_err())
                            .map(|(name, _)| name.to_owned())
                    })
                    .unwrap_or_else(|| "id".to_owned());
                Err(Error::BadRequest {
                    message: format!("invalid path: {}", rejection.body_text()),
                    fields: Some(FieldErrors::from([(field, "must be a UUID".to_owned())])),
                })
            }
        }
    }
}
