//! The run loop: build the model request → middleware → model (streamed) → tool calls,
//! in parallel, through the executor → repeat, up to the step limit. Every message,
//! status change and event is stored as it happens; a step whose tool calls need the
//! user's input leaves the run `waiting_for_input`, and answering the last open request
//! resumes it (see [`deliver_outcome`]).

use std::time::Duration;

use futures::future::join_all;
use protocol::api::ToolOutcome;
use protocol::chat::{ContentBlock, EventKind, Message, Role, Run, RunStatus};
use sqlx::PgConnection;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::commands::{COMMAND_MODEL, is_command};
use super::middleware::Ctx;
use super::model::{ChatMessage, ModelError, ModelRequest, Purpose, RunContext, ToolSpec};
use crate::db::input_requests::{self, InputRequestRow};
use crate::db::messages::{self, NewMessage};
use crate::db::{self, conversations, events, runs};
use crate::error::{Error, Result, ResultExt};
use crate::requests::{self, endings};
use crate::state::AppState;
use crate::tools::executor::ToolCall;

const SYSTEM_PROMPT: &str = "You are toolgate's assistant. Answer the user's request, calling tools when they help. Be brief and concrete, and base answers on tool results.";

pub struct StartedRun {
    pub run: Run,
    pub message: Message,
}

fn lease(state: &AppState) -> chrono::Duration {
    chrono::Duration::from_std(state.config.run_lease).unwrap_or(chrono::Duration::seconds(30))
}

async fn emit(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    user_id: &str,
    run_id: Option<Uuid>,
    kind: EventKind,
) -> Result<()> {
    events::append(conn, conversation_id, user_id, run_id, &kind).await?;
    Ok(())
}

/// Stores the user's message, starts a run for it and drives the run in the
/// background. Refused with 409 while another run of the conversation is active.
pub async fn start_run(
    state: &AppState,
    user_id: &str,
    conversation_id: Uuid,
    content: Vec<ContentBlock>,
) -> Result<StartedRun> {
    let mut tx = db::begin_as_user(&state.db, user_id).await?;
    if !conversations::exists(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    if runs::active_for_conversation(&mut tx, conversation_id)
        .await?
        .is_some()
    {
        return Err(run_active());
    }
    let most = state.config.limits.active_runs;
    if runs::count_active(&mut tx).await? >= i64::from(most) {
        return Err(Error::TooManyRequests {
            message: format!(
                "at most {most} runs may be in progress or waiting at once; finish or answer one first"
            ),
            retry_after_seconds: 10,
        });
    }
    let run_id = Uuid::new_v4();
    let message = messages::append(
        &mut tx,
        NewMessage {
            conversation_id,
            user_id,
            role: Role::User,
            content: &content,
            model: None,
            run_id: Some(run_id),
        },
    )
    .await?;
    let model = state.agent.default_model();
    let run = runs::insert(
        &mut tx,
        run_id,
        conversation_id,
        user_id,
        message.id,
        &model,
        lease(state),
    )
    .await
    .on_constraint("agent_runs_one_active", |_| run_active())?;
    emit(
        &mut tx,
        conversation_id,
        user_id,
        Some(run_id),
        EventKind::MessageAdded {
            message: message.clone(),
        },
    )
    .await?;
    emit(
        &mut tx,
        conversation_id,
        user_id,
        Some(run_id),
        EventKind::RunStarted { model },
    )
    .await?;
    tx.commit().await?;
    spawn_drive(state.clone(), user_id.to_owned(), run_id);
    Ok(StartedRun {
        run: run.to_api(),
        message,
    })
}

fn run_active() -> Error {
    Error::conflict(
        "run_active",
        "a run is already in progress in this conversation; wait for it, or answer its pending input",
    )
}

fn spawn_drive(state: AppState, user_id: String, run_id: Uuid) {
    tokio::spawn(async move {
        let keeper = tokio::spawn(keep_lease(state.clone(), user_id.clone(), run_id));
        let result = drive(&state, &user_id, run_id).await;
        keeper.abort();
        if let Err(err) = result {
            tracing::warn!(%run_id, error = ?err, "run failed");
            let message = public_failure(&err);
            if let Err(err) = fail_run(&state, &user_id, run_id, &message).await {
                tracing::error!(%run_id, error = %err, "could not mark the run failed");
            }
        }
    });
}

/// A run that gave up after its step limit.
#[derive(Debug, thiserror::Error)]
#[error("stopped after {0} model steps without a final answer")]
struct StepLimit(i32);

/// The words a failed run shows its user: one of a fixed few. What the provider, the
/// vault or the database said stays in the server's log.
fn public_failure(err: &Error) -> String {
    match err {
        Error::Internal(inner) => {
            if let Some(model) = inner.downcast_ref::<ModelError>() {
                model.public_message()
            } else if let Some(limit) = inner.downcast_ref::<StepLimit>() {
                limit.to_string()
            } else {
                "the run stopped on an internal error".to_owned()
            }
        }
        Error::Database(_) | Error::Unavailable(_) => {
            "the run stopped on a database error".to_owned()
        }
        _ => "the run stopped on an internal error".to_owned(),
    }
}

/// Renews the run's lease while this server drives it.
async fn keep_lease(state: AppState, user_id: String, run_id: Uuid) {
    let every = (state.config.run_lease / 3).max(Duration::from_millis(200));
    loop {
        tokio::time::sleep(every).await;
        let renewed = async {
            let mut tx = db::begin_as_user(&state.db, &user_id).await?;
            runs::renew_lease(&mut tx, run_id, lease(&state), None).await?;
            tx.commit().await
        }
        .await;
        if let Err(err) = renewed {
            tracing::warn!(%run_id, error = %err, "could not renew the run's lease");
        }
    }
}

/// Moves a run to `to` if it is in one of `from`, and tells the stream.
#[allow(clippy::too_many_arguments)]
async fn move_run(
    conn: &mut PgConnection,
    user_id: &str,
    run_id: Uuid,
    from: &[RunStatus],
    to: RunStatus,
    step: Option<i32>,
    error: Option<&str>,
    lease: Option<chrono::Duration>,
) -> Result<Option<runs::RunRow>> {
    let moved = runs::transition(conn, run_id, from, to, step, error, lease).await?;
    if let Some(run) = &moved {
        let kind = EventKind::RunStatus { run: run.to_api() };
        emit(conn, run.conversation_id, user_id, Some(run_id), kind).await?;
    }
    Ok(moved)
}

async fn fail_run(state: &AppState, user_id: &str, run_id: Uuid, message: &str) -> Result<()> {
    let mut tx = db::begin_as_user(&state.db, user_id).await?;
    let failed = move_run(
        &mut tx,
        user_id,
        run_id,
        &[RunStatus::Running, RunStatus::WaitingForInput],
        RunStatus::Failed,
        None,
        Some(message),
        None,
    )
    .await?;
    if failed.is_some() {
        endings::abandon_run(&mut tx, run_id).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The stored history as the model sees it, without chat commands and their replies.
fn context_messages(stored: &[Message]) -> Vec<ChatMessage> {
    stored
        .iter()
        .filter(|m| !(m.role == Role::User && is_command(&m.text())))
        .filter(|m| m.model.as_deref() != Some(COMMAND_MODEL))
        .map(|m| ChatMessage {
            role: m.role,
            content: m.content.clone(),
            seq: Some(m.seq),
        })
        .collect()
}

fn tool_specs(state: &AppState) -> Vec<ToolSpec> {
    state
        .tools
        .iter()
        .filter(|tool| tool.unavailable_reason().is_none())
        .map(|tool| ToolSpec {
            name: tool.name.clone(),
            description: tool.description.clone(),
            parameters: tool.parameters.clone(),
        })
        .collect()
}

/// One step's model request, everything but the model call: the stored history, the
/// available tools, and the middleware's `before_model` hooks.
pub async fn prepare_request(
    state: &AppState,
    run: &RunContext,
    stored: &[Message],
) -> Result<ModelRequest> {
    let ctx = Ctx {
        run,
        state,
        provider: state.agent.provider.as_ref(),
    };
    let mut request = ModelRequest {
        model: state.agent.default_model(),
        system: vec![SYSTEM_PROMPT.to_owned()],
        messages: context_messages(stored),
        tools: tool_specs(state),
        purpose: Purpose::Chat,
    };
    state.agent.chain.before_model(&ctx, &mut request).await?;
    Ok(request)
}

async fn drive(state: &AppState, user_id: &str, run_id: Uuid) -> Result<()> {
    loop {
        let mut tx = db::begin_as_user(&state.db, user_id).await?;
        let Some(run) = runs::find(&mut tx, run_id).await? else {
            return Ok(());
        };
        if run.status() != RunStatus::Running {
            return Ok(());
        }
        if run.step >= state.config.max_steps {
            return Err(Error::Internal(StepLimit(state.config.max_steps).into()));
        }
        let stored = messages::list(&mut tx, run.conversation_id).await?;
        tx.commit().await?;
        let original = stored
            .iter()
            .find(|m| Some(m.id) == run.user_message_id)
            .map(Message::text)
            .unwrap_or_default();
        let run_context = RunContext {
            user_id: user_id.to_owned(),
            conversation_id: run.conversation_id,
            run_id,
            step: run.step,
            original_user_request: original,
        };
        let request = prepare_request(state, &run_context, &stored).await?;
        let ctx = Ctx {
            run: &run_context,
            state,
            provider: state.agent.provider.as_ref(),
        };

        let mut tx = db::begin_as_user(&state.db, user_id).await?;
        runs::renew_lease(&mut tx, run_id, lease(state), Some(&request.model)).await?;
        tx.commit().await?;

        let (delta_sender, delta_receiver) = mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(write_deltas(
            state.clone(),
            user_id.to_owned(),
            run.conversation_id,
            run_id,
            delta_receiver,
        ));
        let sink = move |delta: String| {
            let _ = delta_sender.send(delta);
        };
        let reply = state.agent.chain.call_model(&ctx, request, &sink).await;
        drop(sink);
        let _ = writer.await;
        let mut reply = reply.map_err(|err| Error::Internal(err.into()))?;
        state.agent.chain.after_model(&ctx, &mut reply).await?;

        let mut content = Vec::new();
        if !reply.text.is_empty() {
            content.push(ContentBlock::Text {
                text: reply.text.clone(),
            });
        }
        // What the model put in a secret field is never kept, shown or sent back to it:
        // the executor ignores it anyway, and the stored call is what later steps see.
        for call in &mut reply.tool_calls {
            if let Some(tool) = state.tools.get(&call.name) {
                call.arguments = tool.masked_arguments(&call.arguments);
            }
        }
        for call in &reply.tool_calls {
            content.push(ContentBlock::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
        }
        let mut tx = db::begin_as_user(&state.db, user_id).await?;
        let answer = messages::append(
            &mut tx,
            NewMessage {
                conversation_id: run.conversation_id,
                user_id,
                role: Role::Assistant,
                content: &content,
                model: Some(&reply.model),
                run_id: Some(run_id),
            },
        )
        .await?;
        emit(
            &mut tx,
            run.conversation_id,
            user_id,
            Some(run_id),
            EventKind::MessageAdded { message: answer },
        )
        .await?;
        if reply.tool_calls.is_empty() {
            move_run(
                &mut tx,
                user_id,
                run_id,
                &[RunStatus::Running],
                RunStatus::Completed,
                Some(run.step + 1),
                None,
                None,
            )
            .await?;
            tx.commit().await?;
            return Ok(());
        }
        tx.commit().await?;

        let calls = reply.tool_calls.iter().map(|call| {
            let tool_call = ToolCall {
                conversation_id: run.conversation_id,
                run_id: Some(run_id),
                tool_name: call.name.clone(),
                tool_call_id: call.id.clone(),
                arguments: call.arguments.clone(),
                original_user_request: Some(run_context.original_user_request.clone()),
            };
            let ctx = &ctx;
            async move {
                let started = EventKind::ToolCallStarted {
                    tool_call_id: tool_call.tool_call_id.clone(),
                    name: tool_call.tool_name.clone(),
                    arguments: tool_call.arguments.clone(),
                };
                let mut tx = db::begin_as_user(&state.db, user_id).await?;
                emit(
                    &mut tx,
                    tool_call.conversation_id,
                    user_id,
                    Some(run_id),
                    started,
                )
                .await?;
                tx.commit().await?;
                let outcome = match state.agent.chain.call_tool(ctx, tool_call.clone()).await {
                    Ok(outcome) => outcome,
                    Err(Error::Conflict { message, .. }) => ToolOutcome::failed(message),
                    Err(err) => return Err(err),
                };
                Ok::<_, Error>((tool_call, outcome))
            }
        });
        let finished = join_all(calls).await;

        let mut tx = db::begin_as_user(&state.db, user_id).await?;
        let mut waiting = false;
        for result in finished {
            let (call, outcome) = result?;
            if outcome.is_waiting() {
                waiting = true;
                if let Some(request) = outcome.waiting_on().cloned() {
                    emit(
                        &mut tx,
                        run.conversation_id,
                        user_id,
                        Some(run_id),
                        EventKind::InputRequested { request },
                    )
                    .await?;
                }
            } else {
                record_tool_result(
                    &mut tx,
                    user_id,
                    run.conversation_id,
                    run_id,
                    &call.tool_call_id,
                    &call.tool_name,
                    outcome,
                )
                .await?;
            }
        }
        // A request can be settled (expired, answered through the API) before this step
        // records that it waits; with the run row locked, count what is still open.
        runs::find_for_update(&mut tx, run_id).await?;
        if waiting && input_requests::count_pending_for_run(&mut tx, run_id).await? == 0 {
            waiting = false;
        }
        let (next_status, next_lease) = if waiting {
            (RunStatus::WaitingForInput, None)
        } else {
            (RunStatus::Running, Some(lease(state)))
        };
        move_run(
            &mut tx,
            user_id,
            run_id,
            &[RunStatus::Running],
            next_status,
            Some(run.step + 1),
            None,
            next_lease,
        )
        .await?;
        tx.commit().await?;
        if waiting {
            return Ok(());
        }
    }
}

/// Streams the model's text into `text_delta` events, coalescing what has queued up.
async fn write_deltas(
    state: AppState,
    user_id: String,
    conversation_id: Uuid,
    run_id: Uuid,
    mut receiver: mpsc::UnboundedReceiver<String>,
) {
    while let Some(first) = receiver.recv().await {
        let mut delta = first;
        while let Ok(more) = receiver.try_recv() {
            delta.push_str(&more);
        }
        let written = async {
            let mut tx = db::begin_as_user(&state.db, &user_id).await?;
            emit(
                &mut tx,
                conversation_id,
                &user_id,
                Some(run_id),
                EventKind::TextDelta { delta },
            )
            .await?;
            tx.commit().await?;
            Ok::<_, Error>(())
        }
        .await;
        if let Err(err) = written {
            tracing::warn!(%run_id, error = %err, "could not store a text delta");
        }
    }
}

async fn record_tool_result(
    conn: &mut PgConnection,
    user_id: &str,
    conversation_id: Uuid,
    run_id: Uuid,
    tool_call_id: &str,
    tool_name: &str,
    outcome: ToolOutcome,
) -> Result<()> {
    let content = [ContentBlock::ToolResult {
        tool_call_id: tool_call_id.to_owned(),
        name: tool_name.to_owned(),
        outcome: outcome.clone(),
    }];
    let message = messages::append(
        conn,
        NewMessage {
            conversation_id,
            user_id,
            role: Role::Tool,
            content: &content,
            model: None,
            run_id: Some(run_id),
        },
    )
    .await?;
    emit(
        conn,
        conversation_id,
        user_id,
        Some(run_id),
        EventKind::ToolCallFinished {
            tool_call_id: tool_call_id.to_owned(),
            name: tool_name.to_owned(),
            outcome,
        },
    )
    .await?;
    emit(
        conn,
        conversation_id,
        user_id,
        Some(run_id),
        EventKind::MessageAdded { message },
    )
    .await?;
    Ok(())
}

/// Hands a run the outcome of one of its requests. An outcome that waits again (the
/// values are in, now the call needs approval) is announced and the run keeps waiting;
/// any other is recorded as the call's result, and the run resumes when that was the
/// last request it waited for. The run row is locked first, so two requests of one run
/// settled at once cannot both think the other is still open.
pub async fn deliver_outcome(
    state: &AppState,
    user_id: &str,
    row: &InputRequestRow,
    outcome: ToolOutcome,
) -> Result<()> {
    let Some(run_id) = row.run_id else {
        return Ok(());
    };
    let mut tx = db::begin_as_user(&state.db, user_id).await?;
    let Some(run) = runs::find_for_update(&mut tx, run_id).await? else {
        tx.commit().await?;
        return Ok(());
    };
    if let Some(request) = outcome.waiting_on().filter(|_| outcome.is_waiting()) {
        let kind = EventKind::InputRequested {
            request: request.clone(),
        };
        emit(&mut tx, row.conversation_id, user_id, Some(run_id), kind).await?;
        tx.commit().await?;
        return Ok(());
    }
    record_tool_result(
        &mut tx,
        user_id,
        row.conversation_id,
        run_id,
        &row.tool_call_id,
        &row.tool_name,
        outcome,
    )
    .await?;
    let still_open = input_requests::count_pending_for_run(&mut tx, run_id).await?;
    let mut resume = false;
    if still_open == 0 && run.status() == RunStatus::WaitingForInput {
        resume = move_run(
            &mut tx,
            user_id,
            run_id,
            &[RunStatus::WaitingForInput],
            RunStatus::Running,
            None,
            None,
            Some(lease(state)),
        )
        .await?
        .is_some();
    }
    tx.commit().await?;
    if resume {
        spawn_drive(state.clone(), user_id.to_owned(), run_id);
    }
    Ok(())
}

/// Marks failed the runs whose server stopped mid-step (their lease lapsed).
pub async fn fail_abandoned_runs(state: &AppState) -> Result<usize> {
    let mut tx = db::begin_background(&state.db).await?;
    let failed = runs::fail_abandoned(&mut tx).await?;
    for run in &failed {
        endings::abandon_run(&mut tx, run.id).await?;
        emit(
            &mut tx,
            run.conversation_id,
            &run.user_id,
            Some(run.id),
            EventKind::RunStatus { run: run.to_api() },
        )
        .await?;
    }
    tx.commit().await?;
    if !failed.is_empty() {
        tracing::warn!(
            count = failed.len(),
            "marked runs failed whose server stopped mid-step"
        );
    }
    Ok(failed.len())
}

/// How long a waiting run must have been quiet before the sweep takes it over, so it
/// never races the request that is settling it right now.
const STRANDED_AFTER_SECONDS: i64 = 10;

/// Resumes runs left waiting with nothing to wait for: their server stopped after a
/// request was settled but before the run went on. Each settled request's outcome is
/// recorded first (a stored retry outcome, or what happened to the request), then the run
/// resumes once.
pub async fn resume_stranded_runs(state: &AppState) -> Result<usize> {
    let mut tx = db::begin_background(&state.db).await?;
    let stranded =
        runs::stranded(&mut tx, chrono::Duration::seconds(STRANDED_AFTER_SECONDS)).await?;
    tx.commit().await?;
    let mut resumed = 0;
    for run in stranded {
        let mut tx = db::begin_as_user(&state.db, &run.user_id).await?;
        let Some(locked) = runs::find_for_update(&mut tx, run.id).await? else {
            continue;
        };
        if locked.status() != RunStatus::WaitingForInput
            || input_requests::count_pending_for_run(&mut tx, run.id).await? > 0
        {
            continue;
        }
        for row in input_requests::settled_without_result(&mut tx, run.id).await? {
            let Some(outcome) = requests::outcome_of_settled(&row) else {
                continue;
            };
            record_tool_result(
                &mut tx,
                &run.user_id,
                run.conversation_id,
                run.id,
                &row.tool_call_id,
                &row.tool_name,
                outcome,
            )
            .await?;
        }
        let moved = move_run(
            &mut tx,
            &run.user_id,
            run.id,
            &[RunStatus::WaitingForInput],
            RunStatus::Running,
            None,
            None,
            Some(lease(state)),
        )
        .await?;
        tx.commit().await?;
        if moved.is_some() {
            resumed += 1;
            spawn_drive(state.clone(), run.user_id.clone(), run.id);
        }
    }
    if resumed > 0 {
        tracing::warn!(
            count = resumed,
            "resumed runs left waiting with nothing to wait for"
        );
    }
    Ok(resumed)
}
