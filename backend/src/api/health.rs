use std::time::Duration;

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::error::{Error, Result};
use crate::state::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "Up")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "Database unreachable", body = protocol::api::ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>> {
    let ping = sqlx::query_scalar!(r#"select 1 as "one!""#).fetch_one(&state.db);
    match tokio::time::timeout(Duration::from_secs(3), ping).await {
        Ok(Ok(_)) => Ok(Json(json!({ "status": "ready" }))),
        Ok(Err(err)) => Err(Error::Unavailable(err)),
        Err(_) => Err(Error::Unavailable(sqlx::Error::PoolTimedOut)),
    }
}
