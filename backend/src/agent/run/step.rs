//! One step of a run: load the history, build the model request through the
//! middleware, stream the model's reply, run its tool calls in parallel through the
//! executor, record the results; repeat up to the step limit.

use std::sync::Arc;

use futures::StreamExt;
use protocol::api::ToolOutcome;
use protocol::chat::{ContentBlock, EventKind, Message, Role, RunStatus};
use sqlx::PgConnection;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::Runner;
use super::lifecycle::{emit, hand_over, lease, move_run};
use crate::agent::commands::COMMAND_MODEL;
use crate::agent::history;
use crate::agent::middleware::Ctx;
use crate::agent::model::{ChatMessage, ModelRequest, Purpose, RunContext, ToolSpec};
use crate::agent::step_inputs::{StepInputs, StepOutputs};
use crate::agent::tokens;
use crate::db::input_requests;
use crate::db::messages::{self, NewMessage};
use crate::db::{self, conversations, runs, storable, summaries};
use crate::error::{Error, Result};
use crate::requests::endings;
use crate::tools::executor::ToolCall;

/// The most calls one model reply may make; the rest are answered as not run, so the
/// model makes them in a later step. A model steered by what it read could otherwise
/// ask for hundreds at once.
const MAX_CALLS_PER_REPLY: usize = 16;

/// How many of one reply's calls run at the same time.
const CALLS_AT_ONCE: usize = 4;

const SYSTEM_PROMPT: &str = "You are toolgate's assistant. Answer the user's request, calling tools when they help. Be brief and concrete, and base answers on tool results.";

/// A run that gave up after its step limit.
#[derive(Debug, thiserror::Error)]
#[error("stopped after {0} model steps without a final answer")]
pub(super) struct StepLimit(i32);

/// The stored history as the model sees it, without chat commands and their replies.
/// The first request, which set the conversation's task, is pinned like the ones the
/// user pinned.
pub(super) fn context_messages(stored: &[Arc<Message>]) -> Vec<ChatMessage> {
    let mut messages: Vec<ChatMessage> = stored
        .iter()
        .filter(|m| !m.is_command())
        // A command's answer is written outside any run; a model's reply is inside one,
        // whatever name its endpoint gave the model.
        .filter(|m| !(m.run_id.is_none() && m.model.as_deref() == Some(COMMAND_MODEL)))
        .map(|m| ChatMessage {
            role: m.role,
            content: m.content.clone(),
            seq: Some(m.seq),
            pinned: m.pinned,
        })
        .collect();
    if let Some(first) = messages.iter_mut().find(|m| m.role == Role::User) {
        first.pinned = true;
    }
    // Here, whatever middleware the chain holds: a pin marker or a turn token that a
    // tool's result or the model wrote must never reach the model as one.
    history::defuse_forged_markers(&mut messages);
    messages
}

fn tool_specs(runner: &Runner) -> Vec<ToolSpec> {
    runner
        .executor
        .tools
        .all()
        .iter()
        .filter(|tool| tool.unavailable_reason().is_none())
        .map(|tool| {
            // Templates write the tool list into the prompt: an MCP server's words must
            // not open a turn there either.
            let mut parameters = tool.parameters.clone();
            history::defuse_schema_words(&mut parameters);
            ToolSpec {
                name: tool.name.clone(),
                description: history::defused(&tool.description),
                parameters,
            }
        })
        .collect()
}

/// The middleware's view of one step: the run, its loaded inputs, and what the
/// server hands the chain explicitly.
fn step_ctx<'a>(
    runner: &'a Runner,
    run: &'a RunContext,
    inputs: &'a StepInputs,
    outputs: &'a StepOutputs,
) -> Ctx<'a> {
    Ctx {
        run,
        inputs,
        outputs,
        tools: &runner.executor.tools,
        summary: &runner.config.summary,
        llm: &runner.config.llm,
        provider: runner.agent.provider.as_ref(),
    }
}

/// One step's model request, everything but the model call: the loaded history, the
/// available tools, and the middleware's `before_model` hooks. What the middleware wants
/// written (a new summary) is left in `outputs`.
pub async fn prepare_request(
    runner: &Runner,
    run: &RunContext,
    inputs: &StepInputs,
    outputs: &StepOutputs,
) -> Result<ModelRequest> {
    let ctx = step_ctx(runner, run, inputs, outputs);
    let mut request = ModelRequest {
        model: runner.agent.default_model(),
        system: vec![SYSTEM_PROMPT.to_owned()],
        messages: context_messages(&inputs.history),
        tools: tool_specs(runner),
        purpose: Purpose::Chat,
    };
    runner.agent.chain.before_model(&ctx, &mut request).await?;
    Ok(request)
}

/// Counts the tokens of the history's messages after `counted_through` on the blocking
/// pool, where a long message's tokenizing holds no async worker; the middleware then
/// finds the counts remembered. Answers how far the history is counted.
async fn count_ahead(history: &[Arc<Message>], counted_through: i32) -> Result<i32> {
    let new: Vec<Arc<Message>> = history
        .iter()
        .filter(|message| message.seq > counted_through)
        .cloned()
        .collect();
    let Some(last) = new.iter().map(|message| message.seq).max() else {
        return Ok(counted_through);
    };
    tokio::task::spawn_blocking(move || tokens::remember_counts(&new))
        .await
        .map_err(|err| anyhow::anyhow!("counting tokens on the blocking pool: {err}"))?;
    Ok(last)
}

/// Drives a run step by step. Each step reads in one round trip (the run and
/// everything the middleware needs, retrieval included) and writes its answer in one
/// transaction — with the model that answered, a new summary if one was written, and
/// the text streamed since the last flush; tool calls and longer streamed text add
/// their own.
pub(super) async fn drive(
    runner: &Runner,
    user_id: &str,
    conversation_id: Uuid,
    run_id: Uuid,
) -> Result<()> {
    let executor = &runner.executor;
    // The history's messages up to this `seq` have had their tokens counted.
    let mut counted_through = 0;
    loop {
        if runner.is_shutting_down() {
            return hand_over(runner, user_id, run_id).await;
        }
        let Some((run, inputs)) = StepInputs::load(
            &runner.executor.pool,
            &runner.agent.history,
            user_id,
            conversation_id,
            run_id,
            runner.config.skills_dir.as_deref(),
            runner.agent.chain.retrieves(),
        )
        .await?
        else {
            return Ok(());
        };
        if run.status != RunStatus::Running {
            return Ok(());
        }
        if run.step >= runner.config.max_steps {
            return Err(Error::Internal(StepLimit(runner.config.max_steps).into()));
        }
        let run_context = RunContext {
            user_id: user_id.to_owned(),
            conversation_id: run.conversation_id,
            run_id,
            step: run.step,
            original_user_request: inputs.request_text(run.user_message_id),
        };
        let outputs = StepOutputs::default();
        counted_through = count_ahead(&inputs.history, counted_through).await?;
        let request = prepare_request(runner, &run_context, &inputs, &outputs).await?;
        let ctx = step_ctx(runner, &run_context, &inputs, &outputs);
        let model = request.model.clone();

        let (delta_sender, delta_receiver) = mpsc::unbounded_channel::<String>();
        let writer = tokio::spawn(write_deltas(
            runner.clone(),
            user_id.to_owned(),
            run.conversation_id,
            run_id,
            delta_receiver,
        ));
        // Streamed text is stored as it comes (see `write_deltas`): a NUL, which Postgres
        // cannot hold, is replaced here, where the text enters.
        let sink = move |mut delta: String| {
            storable::replace_nul_in_text(&mut delta);
            let _ = delta_sender.send(delta);
        };
        let reply = runner.agent.chain.call_model(&ctx, request, &sink).await;
        drop(sink);
        // The text streamed since the last flush goes out with the answer, in its
        // transaction; should the step fail before that commits, in a flush of its own.
        let unflushed = writer.await.ok().flatten();
        let answered = async {
            let mut reply = reply.map_err(|err| Error::Internal(err.into()))?;
            runner.agent.chain.after_model(&ctx, &mut reply).await?;
            Ok::<_, Error>(reply)
        }
        .await;
        let mut reply = match answered {
            Ok(reply) => reply,
            Err(err) => {
                if let Some(delta) = unflushed {
                    write_delta(runner, user_id, run.conversation_id, run_id, delta).await;
                }
                return Err(err);
            }
        };

        reply.screen();
        let mut content = Vec::new();
        if !reply.text.is_empty() {
            content.push(ContentBlock::Text {
                text: reply.text.clone(),
            });
        }
        // What the model put in a secret field is never kept, shown or sent back to it:
        // the executor ignores it anyway, and the stored call is what later steps see.
        for call in &mut reply.tool_calls {
            if let Some(tool) = runner.executor.tools.get(&call.name) {
                call.arguments = tool.masked_arguments(&call.arguments);
            }
        }
        // The answer's transaction; it tells whether the run is done (no tool calls).
        let written = async {
            let mut tx = db::begin_as_user(&runner.executor.pool, user_id).await?;
            // An id an earlier call of the conversation had is renewed; so is one a card
            // in another conversation carries (a request's id is the user's, once), or
            // the call would be refused.
            if !reply.tool_calls.is_empty() {
                let ids: Vec<String> = reply.tool_calls.iter().map(|c| c.id.clone()).collect();
                let in_use = input_requests::ids_in_use(&mut tx, user_id, &ids).await?;
                let earlier = inputs
                    .history
                    .iter()
                    .flat_map(|message| message.content.iter())
                    .filter_map(|block| match block {
                        ContentBlock::ToolCall { id, .. } => Some(id.as_str()),
                        _ => None,
                    })
                    .chain(in_use.iter().map(String::as_str))
                    .collect();
                reply.renew_reused_ids(&earlier);
            }
            content.extend(reply.tool_calls.iter().map(|call| ContentBlock::ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            }));
            if let Some(delta) = &unflushed {
                emit(
                    &mut tx,
                    run.conversation_id,
                    user_id,
                    Some(run_id),
                    EventKind::TextDelta {
                        delta: delta.clone(),
                    },
                )
                .await?;
            }
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
            if !runs::renew_lease(&mut tx, run_id, lease(runner), Some(&model)).await? {
                // The run ended while the model answered (failed at the end of a shutdown's
                // grace, or by another server after its lease lapsed): nothing of the
                // answer is kept and none of its calls runs.
                tx.rollback().await?;
                return Ok(None);
            }
            if let Some(summary) = outputs.take_summary() {
                summaries::insert(
                    &mut tx,
                    run.conversation_id,
                    user_id,
                    summary.through_seq,
                    &summary.text,
                    &summary.kept_out,
                )
                .await?;
            }
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
            }
            tx.commit().await?;
            Ok::<_, Error>(Some(reply.tool_calls.is_empty()))
        }
        .await;
        let finished = match written {
            Ok(Some(finished)) => finished,
            Ok(None) => {
                tracing::warn!(%run_id, "the run ended while its model answered; the answer is not kept");
                return Ok(());
            }
            Err(err) => {
                if let Some(delta) = unflushed {
                    write_delta(runner, user_id, run.conversation_id, run_id, delta).await;
                }
                return Err(err);
            }
        };
        if finished {
            return Ok(());
        }

        // A reply that gives one id to several calls runs none of them: each would stand
        // for the others' result (a request, an approval, recovery after a stop all go by
        // the id), so the model is told to call again with ids of their own.
        let repeated_ids: Vec<&str> = reply
            .tool_calls
            .iter()
            .map(|call| call.id.as_str())
            .filter(|id| reply.tool_calls.iter().filter(|c| c.id == *id).count() > 1)
            .collect();
        let calls: Vec<_> = reply.tool_calls.iter().enumerate().map(|(index, call)| {
            let repeated = repeated_ids.contains(&call.id.as_str());
            let over_the_limit = index >= MAX_CALLS_PER_REPLY;
            let refused = call.refused.clone();
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
                // Answered at once, without a word to the stream: a flood costs no
                // database work per call it holds.
                if over_the_limit {
                    let outcome = ToolOutcome::failed(format!(
                        "not run: one reply may make at most {MAX_CALLS_PER_REPLY} calls; make this one in a later reply"
                    ));
                    return Ok::<_, Error>((tool_call, outcome));
                }
                let started = EventKind::ToolCallStarted {
                    tool_call_id: tool_call.tool_call_id.clone(),
                    name: tool_call.tool_name.clone(),
                    arguments: tool_call.arguments.clone(),
                };
                let announced = async {
                    let mut tx = db::begin_as_user(&runner.executor.pool, user_id).await?;
                    emit(
                        &mut tx,
                        tool_call.conversation_id,
                        user_id,
                        Some(run_id),
                        started,
                    )
                    .await?;
                    tx.commit().await?;
                    Ok::<_, Error>(())
                }
                .await;
                // Not run, rather than an error for the whole reply: siblings that ran
                // before it (four at a time) keep the outcomes they must not lose.
                if let Err(err) = announced {
                    tracing::warn!(%run_id, tool_call_id = %tool_call.tool_call_id, error = %err, "a call's start could not be recorded; not run");
                    let outcome = ToolOutcome::failed(
                        "not run: toolgate could not record the call's start; call again",
                    );
                    return Ok::<_, Error>((tool_call, outcome));
                }
                if repeated {
                    let outcome = ToolOutcome::failed(format!(
                        "not run: this reply gives the id `{}` to more than one call; call again, each call with an id of its own",
                        tool_call.tool_call_id
                    ));
                    return Ok::<_, Error>((tool_call, outcome));
                }
                if let Some(why) = refused {
                    let outcome = ToolOutcome::failed(format!("not run: {why}; call again"));
                    return Ok::<_, Error>((tool_call, outcome));
                }
                let outcome = match runner
                    .agent
                    .chain
                    .call_tool(ctx, executor, tool_call.clone())
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(Error::Conflict { message, .. }) => ToolOutcome::failed(message),
                    // Toolgate's own failure (the database refused the call's log, say),
                    // not the model's: the call's siblings, which may have done things,
                    // keep their results, and the model is told what is known of this one.
                    Err(err) => {
                        tracing::error!(%run_id, tool = %tool_call.tool_name, tool_call_id = %tool_call.tool_call_id, error = %err, "a tool call failed inside toolgate");
                        ToolOutcome::failed(FAILED_INSIDE)
                    }
                };
                Ok::<_, Error>((tool_call, outcome))
            }
        }).collect();
        // A few at a time, a slow one holding up no other: a reply of many calls to a
        // slow service would otherwise hold as many responses and connections at once.
        // Recorded in the reply's order.
        let numbered = calls
            .into_iter()
            .enumerate()
            .map(|(index, call)| async move { (index, call.await) })
            .collect::<Vec<_>>();
        let mut finished: Vec<_> = futures::stream::iter(numbered)
            .buffer_unordered(CALLS_AT_ONCE)
            .collect()
            .await;
        finished.sort_unstable_by_key(|(index, _)| *index);
        let finished = finished.into_iter().map(|(_, result)| result);

        let mut tx = db::begin_recording_as_user(&runner.executor.pool, user_id).await?;
        conversations::lock_for_writing(&mut tx, run.conversation_id).await?;
        let still_running = runs::find_for_update(&mut tx, run_id)
            .await?
            .is_some_and(|locked| locked.status() == RunStatus::Running);
        if !still_running {
            // The run ended while its calls ran (failed at the end of a shutdown's grace,
            // or by another server after its lease lapsed), and its open calls were given
            // results then: these would be second ones, after the run's end. A card one of
            // them opened since ends as the run's others did, rather than wait for an
            // answer that would run the tool for nobody.
            tracing::warn!(%run_id, "the run ended while its calls ran; their outcomes are not recorded");
            endings::abandon_run(&mut tx, run_id).await?;
            tx.commit().await?;
            return Ok(());
        }
        let mut waiting = false;
        for result in finished {
            let (call, outcome) = result?;
            if outcome.is_waiting() {
                waiting = true;
                // An MCP server's question was announced when it was stored.
                if let Some(request) = outcome
                    .waiting_on()
                    .filter(|request| request.elicitation.is_none())
                    .cloned()
                {
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
        // A request can be settled (expired, answered through the API or an MCP server's
        // card) before this step records that it waits. With the run row locked, the run
        // goes on only when nothing holds it; an outcome still on its way resumes it when
        // it arrives (`deliver_outcome` finds it waiting), where going on now would
        // answer without it.
        if waiting && !input_requests::holds_run(&mut tx, run_id).await? {
            waiting = false;
        }
        let (next_status, next_lease) = if waiting {
            (RunStatus::WaitingForInput, None)
        } else {
            (RunStatus::Running, Some(lease(runner)))
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

/// What the model is told of a call that failed inside toolgate (the details are in the
/// server's log, never in what the model or the user reads).
const FAILED_INSIDE: &str = "toolgate could not finish this call (an internal error); whether the tool did anything is not known";

/// How long streamed text gathers before it is written as one event, and how much
/// text is written at once at most: one transaction (and one wake-up of every open
/// stream) per flush, not per token.
const DELTA_FLUSH_EVERY: std::time::Duration = std::time::Duration::from_millis(60);

const DELTA_FLUSH_BYTES: usize = 4096;

/// Streams the model's text into `text_delta` events, flushed on a short timer or when
/// enough has gathered. What gathers after the last flush, until the model finishes, is
/// handed back for the step to write with the answer, so an answer streamed within one
/// flush interval costs no transaction of its own.
async fn write_deltas(
    runner: Runner,
    user_id: String,
    conversation_id: Uuid,
    run_id: Uuid,
    mut receiver: mpsc::UnboundedReceiver<String>,
) -> Option<String> {
    while let Some(first) = receiver.recv().await {
        let mut delta = first;
        let flush_at = tokio::time::Instant::now() + DELTA_FLUSH_EVERY;
        while delta.len() < DELTA_FLUSH_BYTES {
            match tokio::time::timeout_at(flush_at, receiver.recv()).await {
                Ok(Some(more)) => delta.push_str(&more),
                Ok(None) => return Some(delta),
                Err(_) => break,
            }
        }
        write_delta(&runner, &user_id, conversation_id, run_id, delta).await;
    }
    None
}

/// Writes one `text_delta` event in a transaction of its own; a failure is logged, the
/// answer itself is written with the step.
async fn write_delta(
    runner: &Runner,
    user_id: &str,
    conversation_id: Uuid,
    run_id: Uuid,
    delta: String,
) {
    let written = async {
        let mut tx = db::begin_as_user(&runner.executor.pool, user_id).await?;
        emit(
            &mut tx,
            conversation_id,
            user_id,
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

pub(super) async fn record_tool_result(
    conn: &mut PgConnection,
    user_id: &str,
    conversation_id: Uuid,
    run_id: Uuid,
    tool_call_id: &str,
    tool_name: &str,
    mut outcome: ToolOutcome,
) -> Result<()> {
    // Whatever brought it (a tool, an MCP server, a page an attacker controls), the
    // result must be storable and stay readable, or the conversation could not be read
    // back at all.
    if let Some(result) = &mut outcome.result {
        storable::replace_nul(result);
        storable::flatten_deeper_than(result, storable::MAX_RESULT_DEPTH);
    }
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
