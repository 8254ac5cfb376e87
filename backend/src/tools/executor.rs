//! The universal tool executor: every tool call, from the agent loop or any outside
//! caller, goes through `execute`.
//!
//! enabled and configured? → fill each field from the call's arguments, then the
//! conversation's remembered values, then the user's → a required visible field still
//! missing: store a pending request and answer `requires_user_input` → otherwise
//! validate, run, log.

use std::sync::Arc;
use std::time::Instant;

use protocol::api::ToolOutcome;
use protocol::fields::{self, MASKED};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::ToolContext;
use super::kinds::calculator;
use super::registry::{Runner, Tool};
use super::user_input::{self, RequestContext};
use crate::db::input_requests::InputRequestRow;
use crate::db::{self, conversations, input_requests, tool_calls};
use crate::error::{Error, Result};
use crate::state::AppState;

/// One tool call as the executor receives it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    pub conversation_id: Uuid,
    pub run_id: Option<Uuid>,
    pub tool_name: String,
    pub tool_call_id: String,
    pub arguments: Map<String, Value>,
    pub original_user_request: Option<String>,
}

/// Runs one tool call for `user_id`. A failing tool is an outcome, not an error;
/// errors are the caller's mistakes (unknown tool or conversation, reused call id) or
/// the database's.
pub async fn execute(state: &AppState, user_id: &str, call: ToolCall) -> Result<ToolOutcome> {
    let tool = state
        .tools
        .get(&call.tool_name)
        .ok_or(Error::NotFound("tool"))?;
    let started = Instant::now();
    let mut tx = db::begin_as_user(&state.db, user_id).await?;
    if !conversations::exists(&mut tx, call.conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    if let Some(reason) = tool.unavailable_reason() {
        let outcome = ToolOutcome::failed(reason);
        log_call(
            &mut tx, user_id, &tool, &call, &outcome, "rejected", started,
        )
        .await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    let remembered = if tool.fields().is_empty() {
        Map::new()
    } else {
        user_input::remembered_values(&mut tx, &state.vault, user_id, call.conversation_id).await?
    };
    let values = fill_fields(&tool, &call.arguments, &remembered, &Map::new());
    if let Some(spec) = &tool.input_spec
        && !fields::missing_fields(&spec.fields, &values).is_empty()
    {
        let ctx = RequestContext {
            user_id,
            run_id: call.run_id,
            ttl: state.config.input_ttl,
            origin: "executor",
            original_user_request: call.original_user_request.as_deref(),
        };
        let row = user_input::insert_request(
            &mut tx,
            &ctx,
            call.conversation_id,
            &tool.name,
            &call.tool_call_id,
            &call.arguments,
            &spec.reason,
            &spec.fields,
            spec.save_for(),
        )
        .await?;
        let request = row.to_api();
        let outcome = ToolOutcome {
            success: false,
            error: Some(spec.reason.clone()),
            requires_user_input: true,
            user_input_request: Some(request),
            result: None,
        };
        log_call(
            &mut tx,
            user_id,
            &tool,
            &call,
            &outcome,
            "requires_user_input",
            started,
        )
        .await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    // Nothing to ask: no transaction stays open while the tool runs.
    tx.commit().await?;
    let outcome = run_validated(state, user_id, &tool, &call, values).await;
    let mut tx = db::begin_as_user(&state.db, user_id).await?;
    let label = if outcome.success {
        "success"
    } else {
        "failure"
    };
    log_call(&mut tx, user_id, &tool, &call, &outcome, label, started).await?;
    tx.commit().await?;
    Ok(outcome)
}

/// Retries the tool of a request the user has just completed, with its stored
/// arguments plus the submitted values, and keeps the outcome on the request.
pub async fn retry_completed(
    state: &AppState,
    user_id: &str,
    row: &InputRequestRow,
) -> Result<ToolOutcome> {
    let call = ToolCall {
        conversation_id: row.conversation_id,
        run_id: row.run_id,
        tool_name: row.tool_name.clone(),
        tool_call_id: row.tool_call_id.clone(),
        arguments: row.tool_args.0.clone(),
        original_user_request: row.original_user_request.clone(),
    };
    let started = Instant::now();
    let outcome = match state.tools.get(&row.tool_name) {
        None => ToolOutcome::failed(format!("the tool `{}` no longer exists", row.tool_name)),
        Some(tool) => match tool.unavailable_reason() {
            Some(reason) => ToolOutcome::failed(reason),
            None => {
                let submitted = row.open_inputs(&state.vault)?;
                let mut tx = db::begin_as_user(&state.db, user_id).await?;
                let remembered = user_input::remembered_values(
                    &mut tx,
                    &state.vault,
                    user_id,
                    row.conversation_id,
                )
                .await?;
                tx.commit().await?;
                let values = fill_fields(&tool, &call.arguments, &remembered, &submitted);
                let missing = tool
                    .input_spec
                    .as_ref()
                    .map(|spec| fields::missing_fields(&spec.fields, &values))
                    .unwrap_or_default();
                if missing.is_empty() {
                    run_validated(state, user_id, &tool, &call, values).await
                } else {
                    let names: Vec<&str> = missing.iter().map(|f| f.label()).collect();
                    ToolOutcome::failed(format!("still missing: {}", names.join(", ")))
                }
            }
        },
    };
    let mut tx = db::begin_as_user(&state.db, user_id).await?;
    input_requests::set_tool_result(
        &mut tx,
        row.id,
        &serde_json::to_value(&outcome).unwrap_or_default(),
    )
    .await?;
    if let Some(tool) = state.tools.get(&row.tool_name) {
        let label = if outcome.success {
            "success"
        } else {
            "failure"
        };
        log_call(&mut tx, user_id, &tool, &call, &outcome, label, started).await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

/// The values the tool runs with: its arguments, then for each field the first of
/// submitted, argument, remembered. A value that breaks its field's rules is dropped,
/// so the user is asked for it rather than the tool failing.
fn fill_fields(
    tool: &Tool,
    arguments: &Map<String, Value>,
    remembered: &Map<String, Value>,
    submitted: &Map<String, Value>,
) -> Map<String, Value> {
    let mut values = arguments.clone();
    for field in tool.fields() {
        let candidate = [submitted, arguments, remembered]
            .into_iter()
            .filter_map(|source| source.get(&field.name))
            .find(|value| !fields::is_empty(value));
        match candidate.map(|value| fields::validate_field(field, Some(value))) {
            Some(Ok(Some(normal))) => {
                values.insert(field.name.clone(), normal);
            }
            _ => {
                values.remove(&field.name);
            }
        }
    }
    values
}

async fn run_validated(
    state: &AppState,
    user_id: &str,
    tool: &Arc<Tool>,
    call: &ToolCall,
    values: Map<String, Value>,
) -> ToolOutcome {
    let mut values = values;
    if let Some(spec) = &tool.input_spec {
        let field_values: Map<String, Value> = values
            .iter()
            .filter(|(name, _)| spec.fields.iter().any(|f| &f.name == *name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match fields::validate_inputs(&spec.fields, &field_values) {
            Ok(accepted) => values.extend(accepted),
            Err(errors) => {
                let text: Vec<String> = errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                return ToolOutcome::failed(format!("invalid values: {}", text.join("; ")));
            }
        }
    }
    let problems = tool.argument_errors(&Value::Object(call.arguments.clone()));
    if !problems.is_empty() {
        return ToolOutcome::failed(format!("invalid arguments: {}", problems.join("; ")));
    }
    let context = ToolContext {
        user_id: user_id.to_owned(),
        conversation_id: call.conversation_id,
        run_id: call.run_id,
        tool_call_id: call.tool_call_id.clone(),
        original_user_request: call.original_user_request.clone(),
        arguments: call.arguments.clone(),
    };
    let result = match &tool.runner {
        Runner::Http(http) => http.run(&state.http, &values, &context).await,
        Runner::Sql(sql) => sql.run(&values, &context).await,
        Runner::Calculator => calculator::run(&values),
        Runner::ReadSkill(dir) => {
            let name = values
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            crate::agent::skills::read(dir, name)
                .map(|text| serde_json::json!({ "name": name, "instructions": text }))
                .ok_or_else(|| format!("there is no skill named `{name}`"))
        }
    };
    match result {
        Ok(result) => ToolOutcome::ok(result),
        Err(error) => ToolOutcome::failed(error),
    }
}

/// Arguments as they may be stored: values of secret fields masked.
fn redacted(tool: &Tool, arguments: &Map<String, Value>) -> Map<String, Value> {
    arguments
        .iter()
        .map(|(name, value)| {
            let secret = tool
                .fields()
                .iter()
                .any(|f| &f.name == name && f.is_secret());
            let shown = if secret {
                Value::String(MASKED.to_owned())
            } else {
                value.clone()
            };
            (name.clone(), shown)
        })
        .collect()
}

async fn log_call(
    conn: &mut sqlx::PgConnection,
    user_id: &str,
    tool: &Tool,
    call: &ToolCall,
    outcome: &ToolOutcome,
    label: &str,
    started: Instant,
) -> Result<()> {
    let arguments = redacted(tool, &call.arguments);
    tracing::info!(
        tool = %tool.name,
        tool_call_id = %call.tool_call_id,
        conversation_id = %call.conversation_id,
        outcome = label,
        "tool call"
    );
    tool_calls::insert(
        conn,
        tool_calls::ToolCallRecord {
            user_id,
            conversation_id: call.conversation_id,
            run_id: call.run_id,
            tool_name: &tool.name,
            tool_call_id: &call.tool_call_id,
            redacted_arguments: &arguments,
            outcome: label,
            error: outcome.error.as_deref(),
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
        },
    )
    .await?;
    Ok(())
}
