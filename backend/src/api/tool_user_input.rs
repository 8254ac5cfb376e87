//! `POST /api/tool-user-input`: the seed's action interface over the input-request
//! service.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use protocol::api::{
    ClearedValues, ConversationParams, CreateRequestParams, InputRequest, PendingRequests,
    SessionValues, SubmitResponseParams, SubmitResponseResult, ToolCallParams,
};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use super::json::{ApiJson, from_value};
use crate::agent::{self, RequestResolution};
use crate::auth::AuthUser;
use crate::db;
use crate::error::{Error, FieldErrors, Result};
use crate::state::AppState;
use crate::tools::executor;
use crate::tools::user_input::{self, RequestContext};

/// The body of `POST /api/tool-user-input`: an `action` and its parameters, side by side.
#[allow(dead_code)] // Describes the body for the OpenAPI document; parsing is two-step.
#[derive(Deserialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ToolUserInputAction {
    CreateRequest(CreateRequestParams),
    SubmitResponse(SubmitResponseParams),
    GetPending(ConversationParams),
    GetSessionValues(ConversationParams),
    CancelRequest(ToolCallParams),
    ClearSessionValues(ConversationParams),
}

const ACTIONS: &str = "create_request, submit_response, get_pending, get_session_values, cancel_request, clear_session_values";

enum Action {
    CreateRequest(CreateRequestParams),
    SubmitResponse(SubmitResponseParams),
    GetPending(ConversationParams),
    GetSessionValues(ConversationParams),
    CancelRequest(ToolCallParams),
    ClearSessionValues(ConversationParams),
}

/// Reads the action name first, then its parameters, so every error names its field.
fn parse_action(body: Value) -> Result<Action> {
    let Value::Object(mut body) = body else {
        return Err(Error::bad_request(
            "the body must be a JSON object with an `action`",
        ));
    };
    let action = match body.remove("action") {
        Some(Value::String(action)) => action,
        Some(_) => return Err(action_error("`action` must be a string")),
        None => return Err(action_error("`action` is missing")),
    };
    let params = Value::Object(body);
    Ok(match action.as_str() {
        "create_request" => Action::CreateRequest(from_value(params)?),
        "submit_response" => Action::SubmitResponse(from_value(params)?),
        "get_pending" => Action::GetPending(from_value(params)?),
        "get_session_values" => Action::GetSessionValues(from_value(params)?),
        "cancel_request" => Action::CancelRequest(from_value(params)?),
        "clear_session_values" => Action::ClearSessionValues(from_value(params)?),
        other => return Err(action_error(&format!("unknown action `{other}`"))),
    })
}

fn action_error(problem: &str) -> Error {
    let message = format!("{problem}; expected one of {ACTIONS}");
    Error::BadRequest {
        fields: Some(FieldErrors::from([("action".to_owned(), message.clone())])),
        message,
    }
}

/// Creates, answers, lists and cancels tool user input requests, and reads or clears
/// remembered values.
#[utoipa::path(post, path = "/api/tool-user-input", tag = "tool user input",
    request_body = ToolUserInputAction, security(("bearer" = [])), responses(
    (status = 200, description = "submit_response → SubmitResponseResult; get_pending → PendingRequests; get_session_values → SessionValues; cancel_request → InputRequest; clear_session_values → ClearedValues"),
    (status = 201, description = "create_request: the stored request", body = InputRequest),
    (status = 400, description = "Malformed body, unknown action or missing parameter", body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 404, description = "Unknown, or not the caller's", body = protocol::api::ErrorBody),
    (status = 409, description = "Already completed, cancelled or expired; duplicate tool_call_id", body = protocol::api::ErrorBody),
    (status = 413, body = protocol::api::ErrorBody),
    (status = 422, description = "Values or definitions break the rules, per field", body = protocol::api::ErrorBody)))]
pub async fn dispatch_action(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response> {
    let action = parse_action(body)?;
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let response = match action {
        Action::CreateRequest(params) => {
            let ctx = RequestContext {
                user_id: &user.user_id,
                run_id: None,
                ttl: state.config.input_ttl,
                origin: "api",
                original_user_request: None,
            };
            let row = user_input::create_request(&mut tx, &ctx, params).await?;
            (StatusCode::CREATED, Json(row.to_api())).into_response()
        }
        Action::SubmitResponse(params) => {
            let row =
                user_input::submit_response(&mut tx, &state.vault, &user.user_id, params).await?;
            agent::announce_resolved(&mut tx, &row).await?;
            // The values are committed before the retry, so a failing retry loses nothing.
            tx.commit().await?;
            let tool_result = if row.origin == "executor" {
                let outcome = executor::retry_completed(&state, &user.user_id, &row).await?;
                let resolution = RequestResolution::Completed(Box::new(outcome.clone()));
                agent::resolve_request(&state, &user.user_id, &row, resolution).await?;
                Some(outcome)
            } else {
                None
            };
            return Ok(Json(SubmitResponseResult {
                request: row.to_api(),
                tool_result,
            })
            .into_response());
        }
        Action::GetPending(params) => {
            let rows = user_input::get_pending(&mut tx, params.conversation_id).await?;
            let requests = rows.iter().map(|row| row.to_api()).collect();
            Json(PendingRequests { requests }).into_response()
        }
        Action::GetSessionValues(params) => {
            let values = user_input::get_session_values(&mut tx, params.conversation_id).await?;
            Json(SessionValues {
                conversation_id: params.conversation_id,
                values,
            })
            .into_response()
        }
        Action::CancelRequest(params) => {
            let row = user_input::cancel_request(&mut tx, &params.tool_call_id).await?;
            agent::announce_resolved(&mut tx, &row).await?;
            tx.commit().await?;
            agent::resolve_request(&state, &user.user_id, &row, RequestResolution::Cancelled)
                .await?;
            return Ok(Json(row.to_api()).into_response());
        }
        Action::ClearSessionValues(params) => {
            let cleared = user_input::clear_session_values(&mut tx, params.conversation_id).await?;
            Json(ClearedValues {
                conversation_id: params.conversation_id,
                cleared,
            })
            .into_response()
        }
    };
    tx.commit().await?;
    Ok(response)
}
