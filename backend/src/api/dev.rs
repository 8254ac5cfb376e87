use axum::Json;
use axum::extract::State;
use protocol::api::{DevTokenRequest, DevTokenResponse};

use super::json::ApiJson;
use crate::auth::issue_dev_token;
use crate::error::Result;
use crate::state::AppState;

/// Signs a token for any user id. Only mounted when `TOOLGATE_DEV_AUTH=1`.
#[utoipa::path(post, path = "/api/dev/token", tag = "auth", request_body = DevTokenRequest, responses(
    (status = 200, body = DevTokenResponse),
    (status = 422, description = "Invalid user id", body = protocol::api::ErrorBody),
    (status = 404, description = "Dev auth is off", body = protocol::api::ErrorBody)))]
pub async fn create_dev_token(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<DevTokenRequest>,
) -> Result<Json<DevTokenResponse>> {
    let (token, expires_at) = issue_dev_token(&state, &body.user_id)?;
    Ok(Json(DevTokenResponse {
        token,
        user_id: body.user_id.trim().to_owned(),
        expires_at,
    }))
}
