//! Query parameters that fail with our error format: 400 naming what was wrong and what
//! the parameters must be, instead of axum's plain-text rejection.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{Error, FieldErrors};

/// A query string's parameters, read as `T`.
pub struct ApiQuery<T>(pub T);

/// What a refused query names: the parameter it blames and what it must be.
pub trait QueryRules {
    /// The key of the 400's field error (a parameter, or `query` for several).
    const FIELD: &'static str;
    /// What the parameters must be, said to the caller.
    const EXPECTED: &'static str;
}

impl<T: DeserializeOwned + QueryRules, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Error> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(query)) => Ok(ApiQuery(query)),
            Err(rejection) => Err(Error::BadRequest {
                message: format!("invalid query: {}", rejection.body_text()),
                fields: Some(FieldErrors::from([(
                    T::FIELD.to_owned(),
                    T::EXPECTED.to_owned(),
                )])),
            }),
        }
    }
}
