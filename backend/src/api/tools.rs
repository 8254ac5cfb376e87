use axum::Json;
use axum::extract::State;
use protocol::api::{ExecuteToolParams, ToolList, ToolOutcome};

use super::ids;
use super::json::ApiJson;
use crate::auth::AuthUser;
use crate::error::Result;
use crate::requests;
use crate::state::AppState;
use crate::tools::executor::{self, ToolCall};

/// The tools with their metadata, for building an agent's tool list, and the MCP servers
/// of the tools file with where toolgate stands with each.
#[utoipa::path(get, path = "/api/tools", tag = "tools", security(("bearer" = [])),
    responses((status = 200, body = ToolList), (status = 401, body = protocol::api::ErrorBody)))]
pub async fn list_tools(State(state): State<AppState>, _user: AuthUser) -> Json<ToolList> {
    let (tools, servers) = state.tools.listing();
    Json(ToolList {
        tools: tools.iter().map(|tool| tool.info()).collect(),
        servers,
    })
}

/// Runs a tool call through the universal executor. A tool that needs values only the
/// user has answers `requires_user_input` with the stored request.
#[utoipa::path(post, path = "/api/tools/execute", tag = "tools", request_body = ExecuteToolParams,
    security(("bearer" = [])), responses(
    (status = 200, description = "The outcome: success, failure or requires_user_input", body = ToolOutcome),
    (status = 400, body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 404, description = "Unknown tool or conversation", body = protocol::api::ErrorBody),
    (status = 409, description = "The call would store a request (for input or approval) under a tool_call_id one of the user's requests already has, or too many requests already wait in the conversation (`too_many_pending`)", body = protocol::api::ErrorBody),
    (status = 422, description = "An argument or `original_user_request` holds a NUL (U+0000) character, or the arguments take more than 64 KiB as JSON; `fields` names it", body = protocol::api::ErrorBody)))]
pub async fn execute_tool(
    State(state): State<AppState>,
    user: AuthUser,
    ApiJson(params): ApiJson<ExecuteToolParams>,
) -> Result<Json<ToolOutcome>> {
    ids::check(&[
        ("tool_call_id", &params.tool_call_id),
        ("tool_name", &params.tool_name),
    ])?;
    requests::ensure_arguments_fit(
        "arguments",
        &params.arguments,
        requests::MAX_ARGUMENTS_BYTES,
    )?;
    let call = ToolCall {
        conversation_id: params.conversation_id,
        run_id: None,
        tool_name: params.tool_name,
        tool_call_id: params.tool_call_id,
        arguments: params.arguments,
        original_user_request: params.original_user_request,
    };
    let executor = state.executor();
    let outcome =
        super::to_the_end(async move { executor::execute(&executor, &user.user_id, call).await })
            .await?;
    Ok(Json(outcome))
}
