//! `POST /api/tool-user-input`: the seed's action interface over the input-request
//! service.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use protocol::api::{
    ClearedValues, ConversationParams, CreateRequestParams, DeclineRequestParams,
    DeleteSavedValueParams, InputRequest, PendingRequests, SavedScope, SessionValues,
    SubmitDecisionParams, SubmitResponseParams, SubmitResponseResult, ToolCallParams,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

use super::ids;
use super::json::{ApiJson, from_value};
use crate::auth::AuthUser;
use crate::db::{self, input_requests::InputRequestRow, saved_inputs};
use crate::error::{Error, FieldErrors, Result};
use crate::requests::create::{self, RequestContext};
use crate::requests::endings::{self, Deps};
use crate::requests::{self, describe};
use crate::state::AppState;
use crate::tools::remembered;

/// The body of `POST /api/tool-user-input`: an `action` and its parameters, side by side.
/// The OpenAPI document shows it as a union discriminated by `action` (see `docs.rs`).
#[allow(dead_code)] // Describes the body for the OpenAPI document; parsing is two-step.
#[derive(Deserialize, ToSchema)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum ToolUserInputAction {
    CreateRequest(CreateRequestParams),
    SubmitResponse(SubmitResponseParams),
    SubmitDecision(SubmitDecisionParams),
    DeclineRequest(DeclineRequestParams),
    GetPending(ConversationParams),
    GetSessionValues(ConversationParams),
    CancelRequest(ToolCallParams),
    ClearSessionValues(ConversationParams),
    DeleteSavedValue(DeleteSavedValueParams),
}

/// What `POST /api/tool-user-input` answers with 200, by action.
#[allow(dead_code, clippy::large_enum_variant)] // Only describes the answer, never built.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
pub enum ToolUserInputAnswer {
    /// `submit_response`, `submit_decision`.
    Submitted(SubmitResponseResult),
    /// `get_pending`.
    Pending(PendingRequests),
    /// `get_session_values`.
    Values(SessionValues),
    /// `decline_request`, `cancel_request`.
    Request(InputRequest),
    /// `clear_session_values`, `delete_saved_value`.
    Cleared(ClearedValues),
}

const ACTIONS: &str = "create_request, submit_response, submit_decision, decline_request, get_pending, get_session_values, cancel_request, clear_session_values, delete_saved_value";

enum Action {
    CreateRequest(CreateRequestParams),
    SubmitResponse(SubmitResponseParams),
    SubmitDecision(SubmitDecisionParams),
    DeclineRequest(DeclineRequestParams),
    GetPending(ConversationParams),
    GetSessionValues(ConversationParams),
    CancelRequest(ToolCallParams),
    ClearSessionValues(ConversationParams),
    DeleteSavedValue(DeleteSavedValueParams),
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
    let action = match action.as_str() {
        "create_request" => Action::CreateRequest(from_value(params)?),
        "submit_response" => Action::SubmitResponse(from_value(params)?),
        "submit_decision" => Action::SubmitDecision(from_value(params)?),
        "decline_request" => Action::DeclineRequest(from_value(params)?),
        "get_pending" => Action::GetPending(from_value(params)?),
        "get_session_values" => Action::GetSessionValues(from_value(params)?),
        "cancel_request" => Action::CancelRequest(from_value(params)?),
        "clear_session_values" => Action::ClearSessionValues(from_value(params)?),
        "delete_saved_value" => Action::DeleteSavedValue(from_value(params)?),
        other => return Err(action_error(&format!("unknown action `{other}`"))),
    };
    match &action {
        Action::CreateRequest(p) => {
            ids::check(&[
                ("tool_call_id", &p.tool_call_id),
                ("tool_name", &p.tool_name),
            ])?;
            // Postgres cannot store NUL in text.
            if p.reason.contains('\0') {
                let fields = FieldErrors::from([(
                    "reason".to_owned(),
                    "must not contain NUL characters".to_owned(),
                )]);
                return Err(Error::unprocessable("invalid request", fields));
            }
        }
        Action::SubmitResponse(p) => ids::check(&[("tool_call_id", &p.tool_call_id)])?,
        Action::SubmitDecision(p) => ids::check(&[("tool_call_id", &p.tool_call_id)])?,
        Action::DeclineRequest(p) => ids::check(&[("tool_call_id", &p.tool_call_id)])?,
        Action::CancelRequest(p) => ids::check(&[("tool_call_id", &p.tool_call_id)])?,
        Action::DeleteSavedValue(p) => ids::check(&[("key", &p.key)])?,
        Action::GetPending(_) | Action::GetSessionValues(_) | Action::ClearSessionValues(_) => {}
    }
    Ok(action)
}

fn action_error(problem: &str) -> Error {
    let message = format!("{problem}; expected one of {ACTIONS}");
    Error::BadRequest {
        fields: Some(FieldErrors::from([("action".to_owned(), message.clone())])),
        message,
    }
}

/// Creates, answers, lists and cancels tool user input requests, decides approval
/// requests, and reads or clears remembered values.
#[utoipa::path(post, path = "/api/tool-user-input", tag = "tool user input",
    request_body = ToolUserInputAction, security(("bearer" = [])), responses(
    (status = 200, description = "submit_response, submit_decision → SubmitResponseResult; get_pending → PendingRequests; get_session_values → SessionValues; decline_request, cancel_request → InputRequest; clear_session_values, delete_saved_value → ClearedValues", body = ToolUserInputAnswer),
    (status = 201, description = "create_request: the stored request", body = InputRequest),
    (status = 400, description = "Malformed body, unknown action or missing parameter", body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 404, description = "Unknown, or not the caller's", body = protocol::api::ErrorBody),
    (status = 409, description = "Already answered, cancelled or expired; the wrong kind of request for the action; arguments changed since shown; duplicate tool_call_id; too many requests already wait in the conversation (`too_many_pending`)", body = protocol::api::ErrorBody),
    (status = 422, description = "Values or definitions break the rules, per field", body = protocol::api::ErrorBody)))]
pub async fn dispatch_action(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(body): ApiJson<Value>,
) -> Result<Response> {
    let action = parse_action(body)?;
    let user_id = user.user_id.as_str();
    let deps = Deps {
        vault: &state.vault,
        tools: &state.tools,
    };
    // Each action opens the caller's transaction when it needs one; the two hot reads
    // need none (one round trip each, the identity set for that statement alone).
    let begin = || db::begin_as_user(&state.db, user_id);
    // Endings commit before their follow-up, so an answer is kept even when the retry
    // that follows it fails.
    let (settled, tx) = match action {
        Action::GetPending(params) => {
            let rows = create::get_pending(&state.db, user_id, params.conversation_id).await?;
            let requests = rows.iter().map(|row| describe(row, &state.tools)).collect();
            return Ok(Json(PendingRequests { requests }).into_response());
        }
        Action::GetSessionValues(params) => {
            let values = remembered::list(&state.db, user_id, params.conversation_id).await?;
            return Ok(Json(SessionValues {
                conversation_id: params.conversation_id,
                values,
            })
            .into_response());
        }
        Action::CreateRequest(params) => {
            let ctx = RequestContext {
                user_id,
                run_id: None,
                ttl: state.config.input_ttl,
                max_waiting: state.config.limits.waiting_requests,
                origin: "api",
                original_user_request: None,
            };
            let row = create::create_request(&state.db, &ctx, params).await?;
            return Ok((StatusCode::CREATED, Json(describe(&row, &state.tools))).into_response());
        }
        Action::ClearSessionValues(params) => {
            let mut tx = begin().await?;
            create::ensure_conversation(&mut tx, params.conversation_id).await?;
            let cleared = saved_inputs::clear_conversation(&mut tx, params.conversation_id).await?;
            tx.commit().await?;
            return Ok(Json(ClearedValues {
                conversation_id: params.conversation_id,
                cleared,
            })
            .into_response());
        }
        Action::DeleteSavedValue(params) => {
            let mut tx = begin().await?;
            create::ensure_conversation(&mut tx, params.conversation_id).await?;
            let conversation = match params.scope {
                SavedScope::Session => Some(params.conversation_id),
                SavedScope::User => None,
            };
            let cleared = saved_inputs::delete(&mut tx, conversation, &params.key).await?;
            tx.commit().await?;
            if cleared == 0 {
                return Err(Error::NotFound("remembered value"));
            }
            return Ok(Json(ClearedValues {
                conversation_id: params.conversation_id,
                cleared,
            })
            .into_response());
        }
        Action::SubmitResponse(params) => {
            let answer = endings::check_answer(&state.db, user_id, params).await?;
            let mut tx = begin().await?;
            let row = endings::submit(&mut tx, deps, user_id, answer).await?;
            (Settled::WithResult(row), tx)
        }
        Action::SubmitDecision(params) => {
            let mut tx = begin().await?;
            let row = endings::decide(&mut tx, deps, user_id, params).await?;
            (Settled::WithResult(row), tx)
        }
        Action::DeclineRequest(params) => {
            let mut tx = begin().await?;
            let row = endings::decline(&mut tx, user_id, params).await?;
            (Settled::Request(row), tx)
        }
        Action::CancelRequest(params) => {
            let mut tx = begin().await?;
            let row = endings::cancel(&mut tx, user_id, &params.tool_call_id).await?;
            (Settled::Request(row), tx)
        }
    };
    tx.commit().await?;
    let (row, with_result) = match settled {
        Settled::WithResult(row) => (row, true),
        Settled::Request(row) => (row, false),
    };
    // The ending is committed: what follows it (the tool's run with the answer, its
    // record, the run's resumption) goes on even if the client hangs up meanwhile.
    let (executor, runner, owner, ended) = (
        state.executor(),
        state.runner(),
        user_id.to_owned(),
        row.clone(),
    );
    let tool_result =
        super::to_the_end(
            async move { requests::follow_up(&executor, &runner, &owner, &ended).await },
        )
        .await?;
    let request = describe(&row, &state.tools);
    Ok(if with_result {
        Json(SubmitResponseResult {
            request,
            tool_result,
        })
        .into_response()
    } else {
        Json(request).into_response()
    })
}

/// An ending, and whether its answer carries the tool's result.
enum Settled {
    WithResult(InputRequestRow),
    Request(InputRequestRow),
}
