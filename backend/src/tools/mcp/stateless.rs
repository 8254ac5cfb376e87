//! The 2026-07-28 revision's stateless questions: a tool answers `input_required` with
//! its questions and an opaque `requestState`, and is called again with the answers.
//! Each question becomes a card like any other; what calling again needs (the state,
//! the call's values with secrets sealed) is stored with the questions, so any toolgate
//! process answers them, also after a restart. The questions of one round are answered
//! together: the call is made again once the last of them has ended, exactly once.

use std::collections::BTreeMap;
use std::sync::Arc;

use protocol::api::{Elicitation, RequestStatus, ToolOutcome};
use protocol::chat::EventKind;
use protocol::fields::SaveFor;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ElicitResult, InputRequest, InputRequiredResult,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::calls::{
    MAX_QUESTIONS_PER_CALL, Question, answer_of, call_redactions, outcome_of, waiting_for,
};
use super::{CallContext, McpHub};
use crate::db::input_requests::{self, InputRequestRow};
use crate::db::{self, conversations, events};
use crate::error::Result;
use crate::requests::create::{Ask, RequestContext, insert_request};
use crate::tools::redact::Redactions;

/// Most rounds of questions one call may take.
const MAX_ROUNDS: u32 = 10;

/// The largest state a server may have toolgate keep between rounds, in bytes: it is
/// stored with every question of the round and sent back.
const MAX_STATE_BYTES: usize = 64 * 1024;

/// How long an answered round waits for a session while the user's are all in calls.
const BUSY_SESSIONS_WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// How often it looks again meanwhile.
const BUSY_SESSIONS_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

/// What calling again needs, kept with each question of a round.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RetryState {
    /// The server's opaque state, echoed back exactly.
    #[serde(default)]
    pub request_state: Option<String>,
    /// This question's key among the round's questions.
    pub input_key: String,
    /// The questions asked together.
    pub round: Uuid,
    pub round_number: u32,
    pub server: String,
    pub remote_name: String,
    /// The call's values; those named in `secret_fields` sealed by the vault.
    pub arguments: Map<String, Value>,
    #[serde(default)]
    pub secret_fields: Vec<String>,
    /// Secrets the user gave in answer to the call's earlier questions, sealed by the
    /// vault: masked in all the server says in the rounds after.
    #[serde(default)]
    pub answered_secrets: Vec<Value>,
}

/// The vault's name for a secret answer a round keeps for the next.
const ANSWERED_SECRET: &str = "answered_secret";

/// The call a round of questions belongs to.
pub struct Asking<'a> {
    pub server: &'a str,
    pub remote_name: &'a str,
    /// The call's values, in plain text.
    pub arguments: &'a Map<String, Value>,
    /// Which of them are secrets (sealed when stored).
    pub secret_fields: &'a [String],
    pub round_number: u32,
    /// The call's secrets, masked in the questions.
    pub redactions: &'a Redactions,
    /// Secrets the user gave in answer to the call's questions so far, in plain text
    /// (sealed when stored).
    pub answered_secrets: &'a [String],
}

/// A call the server answered with questions: they become cards. The outcome is the
/// first card's `requires_user_input`, or why the questions cannot be asked.
pub async fn park(
    hub: &McpHub,
    context: &CallContext,
    asking: Asking<'_>,
    required: InputRequiredResult,
) -> ToolOutcome {
    let Asking {
        server,
        remote_name,
        arguments,
        secret_fields,
        round_number,
        redactions,
        answered_secrets,
    } = asking;
    if round_number > MAX_ROUNDS {
        return ToolOutcome::failed(format!(
            "the MCP server `{server}` asked more than {MAX_ROUNDS} rounds of questions"
        ));
    }
    let questions = required.input_requests.unwrap_or_default();
    if questions.len() > MAX_QUESTIONS_PER_CALL {
        return ToolOutcome::failed(format!(
            "the MCP server `{server}` asked {} questions at once; at most {MAX_QUESTIONS_PER_CALL}",
            questions.len()
        ));
    }
    let state_bytes = required.request_state.as_deref().map_or(0, str::len);
    if state_bytes > MAX_STATE_BYTES {
        return ToolOutcome::failed(format!(
            "the MCP server `{server}` asked toolgate to keep {state_bytes} bytes of state; at most {MAX_STATE_BYTES}"
        ));
    }
    if let Some(problem) = questions
        .keys()
        .find_map(|key| crate::tools::identifiers::problem(key))
    {
        return ToolOutcome::failed(format!(
            "the MCP server `{server}` named a question by a key that {problem}"
        ));
    }
    // The state and the questions' keys are stored as they are and go back to the server
    // so: a secret of the call in them is neither stored nor kept for the next round.
    let state_carries_secret = required
        .request_state
        .as_deref()
        .is_some_and(|state| redactions.finds(state))
        || questions.keys().any(|key| redactions.finds(key));
    if state_carries_secret {
        tracing::warn!(%server, "a stateless question whose state carries a secret of the call");
        return ToolOutcome::failed(format!(
            "the MCP server `{server}` put a secret of the call into its questions' state"
        ));
    }
    let mut asked = Vec::new();
    for (key, request) in questions {
        let InputRequest::Elicitation(elicitation) = request else {
            return ToolOutcome::failed(format!(
                "the MCP server `{server}` asked for something toolgate does not provide (only questions to the user)"
            ));
        };
        match Question::of(&elicitation.params, server, redactions) {
            Ok(question) => asked.push((key, question)),
            Err(reason) => {
                tracing::warn!(%server, reason = %redactions.logged(&reason), "a stateless question toolgate cannot show");
                return ToolOutcome::failed(format!(
                    "the MCP server `{server}` asked a question toolgate cannot show"
                ));
            }
        }
    }
    if asked.is_empty() {
        return ToolOutcome::failed(format!(
            "the MCP server `{server}` asked for input but named no question"
        ));
    }
    let sealed: Map<String, Value> = arguments
        .iter()
        .map(|(name, value)| {
            let kept = if secret_fields.contains(name) {
                hub.deps.vault.seal(&context.user_id, name, value)
            } else {
                value.clone()
            };
            (name.clone(), kept)
        })
        .collect();
    let answered_secrets: Vec<Value> = answered_secrets
        .iter()
        .map(|secret| {
            hub.deps.vault.seal(
                &context.user_id,
                ANSWERED_SECRET,
                &Value::from(secret.as_str()),
            )
        })
        .collect();
    let round = Uuid::new_v4();
    let stored = store_round(
        hub,
        context,
        server,
        |key| RetryState {
            request_state: required.request_state.clone(),
            input_key: key.to_owned(),
            round,
            round_number,
            server: server.to_owned(),
            remote_name: remote_name.to_owned(),
            arguments: sealed.clone(),
            secret_fields: secret_fields.to_vec(),
            answered_secrets: answered_secrets.clone(),
        },
        &asked,
    )
    .await;
    match stored {
        Ok(rows) => match rows.first() {
            Some(first) => waiting_for(first.to_api()),
            None => ToolOutcome::failed("no question was stored"),
        },
        Err(err) => {
            tracing::error!(%server, error = %err, "could not store an MCP server's questions");
            ToolOutcome::failed(format!(
                "the questions of the MCP server `{server}` could not be stored"
            ))
        }
    }
}

async fn store_round(
    hub: &McpHub,
    context: &CallContext,
    server: &str,
    state_for: impl Fn(&str) -> RetryState,
    asked: &[(String, Question)],
) -> Result<Vec<InputRequestRow>> {
    let call = &context.call;
    let elicitation_timeout = hub
        .servers
        .get(server)
        .map_or(hub.deps.input_ttl, |s| s.config.elicitation_timeout);
    let mut tx = db::begin_as_user(&hub.deps.pool, &context.user_id).await?;
    conversations::lock_for_writing(&mut tx, call.conversation_id).await?;
    let mut rows = Vec::new();
    for (key, question) in asked {
        let request_context = RequestContext {
            user_id: &context.user_id,
            run_id: call.run_id,
            ttl: hub.deps.input_ttl.min(elicitation_timeout),
            max_waiting: hub.deps.max_waiting,
            origin: "mcp",
            original_user_request: None,
        };
        let elicitation = Elicitation {
            server: server.to_owned(),
            mode: question.mode,
            tool_call_id: call.tool_call_id.clone(),
            url: question.url.clone(),
            elicitation_id: question.elicitation_id.clone(),
        };
        let retry = state_for(key);
        let row = insert_request(
            &mut tx,
            &request_context,
            call.conversation_id,
            &call.tool_name,
            &format!("elicitation-{}", Uuid::new_v4()),
            &Map::new(),
            Ask::Stateless {
                reason: &question.message,
                fields: &question.fields,
                save_for: SaveFor::Call,
                elicitation: &elicitation,
                retry: &retry,
            },
        )
        .await?;
        let announced = EventKind::InputRequested {
            request: row.to_api(),
        };
        events::append(
            &mut tx,
            call.conversation_id,
            &context.user_id,
            call.run_id,
            &announced,
        )
        .await?;
        rows.push(row);
    }
    tx.commit().await?;
    Ok(rows)
}

/// After a stateless question ended: once its whole round has, calls the tool again
/// with every answer (exactly once, whoever settled the last question). `None` while
/// questions of the round are still open. A round whose server or tool the operator
/// has switched off since it asked (read from the configuration, which holds from the
/// first moment after a restart, before the server's tools are listed again) ends
/// saying so, the server uncalled and the stored secrets left sealed.
pub async fn answer_round(hub: &Arc<McpHub>, row: &InputRequestRow) -> Result<Option<ToolOutcome>> {
    let Some(state) = row.retry_state.as_ref().map(|s| s.0.clone()) else {
        return Ok(None);
    };
    let call = row.call_ref();
    let mut tx = db::begin_as_user(&hub.deps.pool, &row.user_id).await?;
    conversations::lock_for_writing(&mut tx, row.conversation_id).await?;
    let round = input_requests::round_for_update(&mut tx, state.round).await?;
    let open = round
        .iter()
        .any(|question| question.stored_status() == RequestStatus::Pending);
    if open || !input_requests::claim_round(&mut tx, state.round).await? {
        tx.commit().await?;
        return Ok(None);
    }
    tx.commit().await?;

    let server = match hub.servers.get(&state.server) {
        Some(server) if !server.config.enabled => {
            return Ok(Some(ToolOutcome::failed(format!(
                "the MCP server `{}` is disabled",
                state.server
            ))));
        }
        Some(server)
            if hub
                .config
                .overlay_for(&server.config, &state.remote_name)
                .enabled
                == Some(false) =>
        {
            return Ok(Some(ToolOutcome::failed(format!(
                "the tool `{}` is disabled",
                row.tool_name
            ))));
        }
        Some(server) => server,
        None => {
            return Ok(Some(ToolOutcome::failed(format!(
                "there is no MCP server named `{}` any more",
                state.server
            ))));
        }
    };
    let mut responses = BTreeMap::new();
    // The secrets answered in earlier rounds, and in this one.
    let mut answered_secrets = Vec::new();
    for sealed in &state.answered_secrets {
        let Ok(opened) = hub.deps.vault.open(&row.user_id, ANSWERED_SECRET, sealed) else {
            tracing::error!(request = %row.id, "could not open a secret answer kept from an earlier round");
            return Ok(Some(ToolOutcome::failed(format!(
                "a stored answer of the call to `{}` could not be opened; call the tool again",
                row.tool_name
            ))));
        };
        answered_secrets.extend(opened.as_str().map(str::to_owned));
    }
    for question in &round {
        let Some(question_state) = &question.retry_state else {
            continue;
        };
        let (answer, secrets): (ElicitResult, _) = answer_of(question, &hub.deps.vault);
        for secret in secrets {
            if !answered_secrets.contains(&secret) {
                answered_secrets.push(secret);
            }
        }
        responses.insert(
            question_state.0.input_key.clone(),
            serde_json::to_value(answer).unwrap_or(Value::Null),
        );
    }
    let mut arguments = Map::new();
    for (name, value) in &state.arguments {
        if state.secret_fields.contains(name) {
            // The round is claimed: an error here would leave its run without a result.
            let Ok(opened) = hub.deps.vault.open(&row.user_id, name, value) else {
                tracing::error!(request = %row.id, argument = %name, "could not open a stored argument of an MCP call");
                return Ok(Some(ToolOutcome::failed(format!(
                    "a stored argument of the call to `{}` could not be opened; call the tool again",
                    row.tool_name
                ))));
            };
            arguments.insert(name.clone(), opened);
        } else {
            arguments.insert(name.clone(), value.clone());
        }
    }
    let context = CallContext {
        user_id: row.user_id.clone(),
        call,
    };
    // The round is claimed and the user has answered: a session busy with the user's
    // other calls is waited for a while rather than the answers thrown away.
    let waiting_until = tokio::time::Instant::now() + BUSY_SESSIONS_WAIT;
    let taken = loop {
        match server.take_session(hub, &row.user_id).await {
            Ok(taken) => break taken,
            Err(unreachable) if unreachable.busy && tokio::time::Instant::now() < waiting_until => {
                tokio::time::sleep(BUSY_SESSIONS_RETRY).await;
            }
            Err(unreachable) => return Ok(Some(ToolOutcome::failed(unreachable.public))),
        }
    };
    let mut params =
        CallToolRequestParams::new(state.remote_name.clone()).with_arguments(arguments.clone());
    params = params.with_input_responses(responses);
    if let Some(request_state) = &state.request_state {
        params = params.with_request_state(request_state.clone());
    }
    let own = Arc::new(
        call_redactions(&server.config, &arguments, &state.secret_fields)
            .adding(answered_secrets.iter().map(String::as_str)),
    );
    // Masked with the session's earlier calls' secrets too; carried for later calls,
    // its own alone.
    let earlier = taken.session.shared.carried();
    taken.session.shared.carrying(own.clone());
    let redactions = Arc::new(own.joined(earlier.iter().map(Arc::as_ref)));
    let answered = tokio::time::timeout(
        server.config.call_timeout,
        taken.session.peer.call_tool_once(params),
    )
    .await;
    drop(taken);
    let outcome = match answered {
        Err(_) => ToolOutcome::failed(format!(
            "the MCP server `{}` did not finish the call within {} s",
            state.server,
            server.config.call_timeout.as_secs()
        )),
        Ok(Ok(CallToolResponse::InputRequired(required))) => {
            let asking = Asking {
                server: &state.server,
                remote_name: &state.remote_name,
                arguments: &arguments,
                secret_fields: &state.secret_fields,
                round_number: state.round_number + 1,
                redactions: &redactions,
                answered_secrets: &answered_secrets,
            };
            park(hub, &context, asking, required).await
        }
        Ok(Ok(CallToolResponse::Complete(result))) => {
            outcome_of(&state.server, Ok(result), &redactions)
        }
        Ok(Ok(_)) => ToolOutcome::failed(format!(
            "the MCP server `{}` answered in a way toolgate does not take (a task)",
            state.server
        )),
        Ok(Err(err)) => outcome_of(&state.server, Err(err), &redactions),
    };
    Ok(Some(redactions.outcome(outcome)))
}
