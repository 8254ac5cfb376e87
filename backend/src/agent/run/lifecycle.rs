//! A run's states: started for a message, resumed when its last open request is
//! settled and every answered call's outcome is in, failed (with words its user may read), handed over between steps when the
//! server stops, and wound down after the grace period.

use std::time::Duration;

use protocol::api::ToolOutcome;
use protocol::chat::{ContentBlock, EventKind, Message, Role, Run, RunStatus};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Runner;
use super::step::{StepLimit, drive, record_tool_result};
use crate::agent::model::ModelError;
use crate::db::input_requests;
use crate::db::messages::{self, NewMessage};
use crate::db::{self, conversations, events, runs};
use crate::error::{Error, Result, ResultExt};
use crate::requests::endings;
use crate::tools::CallRef;

pub struct StartedRun {
    pub run: Run,
    pub message: Message,
}

pub(super) fn lease(runner: &Runner) -> chrono::Duration {
    chrono::Duration::from_std(runner.config.run_lease).unwrap_or(chrono::Duration::seconds(30))
}

pub(super) async fn emit(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    user_id: &str,
    run_id: Option<Uuid>,
    kind: EventKind,
) -> Result<()> {
    events::append(conn, conversation_id, user_id, run_id, &kind).await?;
    Ok(())
}

/// Stores the user's message (under the client's `idempotency_key`, when it sent one),
/// starts a run for it and drives the run in the background. Refused with 409 while
/// another run of the conversation is active.
pub async fn start_run(
    runner: &Runner,
    user_id: &str,
    conversation_id: Uuid,
    content: Vec<ContentBlock>,
    idempotency_key: Option<Uuid>,
) -> Result<StartedRun> {
    let mut tx = db::begin_as_user(&runner.executor.pool, user_id).await?;
    if !conversations::exists(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    if runs::active_for_conversation(&mut tx, conversation_id)
        .await?
        .is_some()
    {
        return Err(run_active());
    }
    let most = runner.config.limits.active_runs;
    if runs::count_active_locked(&mut tx, user_id).await? >= i64::from(most) {
        return Err(Error::TooManyRequests {
            message: format!(
                "at most {most} runs may be in progress or waiting at once; finish or answer one first"
            ),
            retry_after_seconds: 10,
        });
    }
    let run_id = Uuid::new_v4();
    let message = messages::append_within(
        &mut tx,
        NewMessage {
            conversation_id,
            user_id,
            role: Role::User,
            content: &content,
            model: None,
            run_id: Some(run_id),
        },
        runner.config.limits.conversation_bytes(),
        idempotency_key,
    )
    .await
    .on_constraint(messages::IDEMPOTENCY_KEY_INDEX, |_| already_posted())?;
    let Some(message) = message else {
        return Err(not_appended(&mut tx, conversation_id, &runner.config.limits).await);
    };
    let model = runner.agent.default_model();
    let run = runs::insert(
        &mut tx,
        run_id,
        conversation_id,
        user_id,
        message.id,
        &model,
        lease(runner),
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
    spawn_drive(runner.clone(), user_id.to_owned(), conversation_id, run_id);
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

/// Another request posted a message under the same idempotency key while this one
/// did; it won, and asking again answers with its message.
pub fn already_posted() -> Error {
    Error::conflict(
        "already_posted",
        "a message was posted under this idempotency_key at the same moment; send it again to read that message",
    )
}

/// Why a user's message was not appended to the conversation: it holds the most
/// message content one may (nothing of the message is stored), or it was deleted since
/// the request found it.
pub async fn not_appended(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    limits: &crate::config::Limits,
) -> Error {
    match conversations::exists(conn, conversation_id).await {
        Ok(false) => Error::NotFound("conversation"),
        Err(err) => err.into(),
        Ok(true) => Error::conflict(
            "conversation_full",
            format!(
                "this conversation holds the most messages one may ({} MiB); start a new conversation to go on",
                limits.conversation_mib
            ),
        ),
    }
}

pub(super) fn spawn_drive(runner: Runner, user_id: String, conversation_id: Uuid, run_id: Uuid) {
    let driving = runner.active_runs.enter(run_id, &user_id);
    tokio::spawn(async move {
        let _driving = driving;
        let keeper = LeaseKeeper(tokio::spawn(keep_lease(
            runner.clone(),
            user_id.clone(),
            run_id,
        )));
        let result = drive(&runner, &user_id, conversation_id, run_id).await;
        drop(keeper);
        if let Err(err) = result {
            tracing::warn!(%run_id, error = ?err, "run failed");
            let message = public_failure(&err);
            if let Err(err) = fail_run(&runner, &user_id, run_id, &message).await {
                tracing::error!(%run_id, error = %err, "could not mark the run failed");
            }
        }
    });
}

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
        Error::Busy(_) => "the run stopped: the database took too long to answer".to_owned(),
        _ => "the run stopped on an internal error".to_owned(),
    }
}

/// The task renewing a run's lease, stopped when this is dropped: also when driving the
/// run panics, so a run whose driver died is left to the recovery sweep once its lease
/// lapses, not held (and its user's run slot with it) for as long as the process lives.
struct LeaseKeeper(tokio::task::JoinHandle<()>);

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the run's lease while this server drives it.
async fn keep_lease(runner: Runner, user_id: String, run_id: Uuid) {
    let every = (runner.config.run_lease / 3).max(Duration::from_millis(200));
    loop {
        tokio::time::sleep(every).await;
        let renewed = async {
            let mut tx = db::begin_as_user(&runner.executor.pool, &user_id).await?;
            runs::renew_lease(&mut tx, run_id, lease(&runner), None).await?;
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
pub(super) async fn move_run(
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

pub(super) async fn fail_run(
    runner: &Runner,
    user_id: &str,
    run_id: Uuid,
    message: &str,
) -> Result<()> {
    let mut tx = db::begin_as_user(&runner.executor.pool, user_id).await?;
    let Some(run) = runs::find(&mut tx, run_id).await? else {
        return Ok(());
    };
    conversations::lock_for_writing(&mut tx, run.conversation_id).await?;
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
        close_open_calls(&mut tx, user_id, run.conversation_id, run_id).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// What the model is told of a call its run ended before the call's result was in.
const ENDED_BEFORE_RESULT: &str =
    "the run ended before this call's result was in; whether the tool did anything is not known";

/// Gives each call of an ended run that has no result one saying so: a call without its
/// result is a history no OpenAI-compatible endpoint accepts, so the conversation could
/// not go on, and the user sees the call finished rather than running for ever.
pub(super) async fn close_open_calls(
    conn: &mut PgConnection,
    user_id: &str,
    conversation_id: Uuid,
    run_id: Uuid,
) -> Result<()> {
    for open in messages::open_calls_of_run(conn, run_id).await? {
        record_tool_result(
            conn,
            user_id,
            conversation_id,
            run_id,
            &open.tool_call_id,
            &open.tool_name,
            ToolOutcome::failed(ENDED_BEFORE_RESULT),
        )
        .await?;
    }
    Ok(())
}

/// The agent's runs take the outcomes of their settled requests.
impl crate::requests::RunInbox for Runner {
    fn deliver<'a>(
        &'a self,
        user_id: &'a str,
        call: &'a CallRef,
        outcome: ToolOutcome,
    ) -> futures::future::BoxFuture<'a, Result<()>> {
        Box::pin(deliver_outcome(self, user_id, call, outcome))
    }
}

/// Hands a run the outcome of one of its requests. An outcome that waits again (the
/// values are in, now the call needs approval) is announced and the run keeps waiting;
/// any other is recorded as the call's result (unless the call has one already), and the
/// run resumes when nothing holds it any more (no request open, no other answered call's
/// outcome still on its way). A run that has ended takes no result. The run row is
/// locked first, so two requests of one run settled at once cannot both think the other
/// is still open.
pub async fn deliver_outcome(
    runner: &Runner,
    user_id: &str,
    call: &CallRef,
    outcome: ToolOutcome,
) -> Result<()> {
    let Some(run_id) = call.run_id else {
        return Ok(());
    };
    let mut tx = db::begin_recording_as_user(&runner.executor.pool, user_id).await?;
    conversations::lock_for_writing(&mut tx, call.conversation_id).await?;
    let Some(run) = runs::find_for_update(&mut tx, run_id).await? else {
        tx.commit().await?;
        return Ok(());
    };
    if !matches!(
        run.status(),
        RunStatus::Running | RunStatus::WaitingForInput
    ) {
        // The run ended (it failed while the call was still out): a result written now
        // would land after its end, in the middle of whatever the conversation does next.
        tracing::warn!(%run_id, tool_call_id = %call.tool_call_id, tool = %call.tool_name, "a call's outcome came after its run ended; not recorded");
        tx.commit().await?;
        return Ok(());
    }
    if let Some(request) = outcome.waiting_on().filter(|_| outcome.is_waiting()) {
        // An MCP server's question was announced when it was stored.
        if request.elicitation.is_none() {
            let kind = EventKind::InputRequested {
                request: request.clone(),
            };
            emit(&mut tx, call.conversation_id, user_id, Some(run_id), kind).await?;
        }
        tx.commit().await?;
        return Ok(());
    }
    if input_requests::result_recorded(&mut tx, call.conversation_id, &call.tool_call_id).await? {
        tracing::info!(%run_id, tool_call_id = %call.tool_call_id, "a call's outcome was already recorded; not again");
    } else {
        record_tool_result(
            &mut tx,
            user_id,
            call.conversation_id,
            run_id,
            &call.tool_call_id,
            &call.tool_name,
            outcome,
        )
        .await?;
    }
    let mut resume = false;
    if run.status() == RunStatus::WaitingForInput
        && !input_requests::holds_run(&mut tx, run_id).await?
    {
        resume = move_run(
            &mut tx,
            user_id,
            run_id,
            &[RunStatus::WaitingForInput],
            RunStatus::Running,
            None,
            None,
            Some(lease(runner)),
        )
        .await?
        .is_some();
    }
    tx.commit().await?;
    if resume {
        spawn_drive(
            runner.clone(),
            user_id.to_owned(),
            call.conversation_id,
            run_id,
        );
    }
    Ok(())
}

/// How often, and how long apart at first, a run is offered its MCP call's outcome
/// when the database refuses it (the waits double): the outcome lives only in memory,
/// and the recovery sweep leaves the run alone while this process holds the call, until
/// the call is let go of after the last attempt.
const DELIVERY_ATTEMPTS: u32 = 6;
const DELIVERY_RETRY_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

/// Hands each run the outcome of its MCP call that finished after waiting for the user.
/// An outcome the database refuses is offered again a few times, in the background so
/// the other runs' outcomes do not wait behind it.
pub async fn deliver_mcp_outcomes(
    runner: Runner,
    mut deliveries: tokio::sync::mpsc::UnboundedReceiver<crate::tools::mcp::Delivery>,
) {
    while let Some(delivery) = deliveries.recv().await {
        let Err(err) = deliver_outcome(
            &runner,
            &delivery.user_id,
            &delivery.call,
            delivery.outcome.clone(),
        )
        .await
        else {
            continue;
        };
        tracing::warn!(error = %err, tool_call_id = %delivery.call.tool_call_id, "could not hand a run its MCP call's outcome; trying again");
        let runner = runner.clone();
        tokio::spawn(async move {
            let mut wait = DELIVERY_RETRY_AFTER;
            for attempt in 2..=DELIVERY_ATTEMPTS {
                tokio::time::sleep(wait).await;
                wait *= 2;
                match deliver_outcome(
                    &runner,
                    &delivery.user_id,
                    &delivery.call,
                    delivery.outcome.clone(),
                )
                .await
                {
                    Ok(()) => return,
                    Err(err) if attempt == DELIVERY_ATTEMPTS => {
                        tracing::error!(error = %err, tool_call_id = %delivery.call.tool_call_id, "gave up handing a run its MCP call's outcome; the recovery sweep will tell it what happened");
                        release(&runner, &delivery).await;
                    }
                    Err(_) => {}
                }
            }
        });
    }
}

/// After a delivery was given up: the sweep leaves a run alone while a live process
/// holds its call, so the call is let go of for the sweep to record what happened.
async fn release(runner: &Runner, delivery: &crate::tools::mcp::Delivery) {
    let released = async {
        let mut tx = db::begin_as_user(&runner.executor.pool, &delivery.user_id).await?;
        input_requests::release_call(
            &mut tx,
            delivery.call.conversation_id,
            &delivery.call.tool_call_id,
        )
        .await?;
        tx.commit().await?;
        Ok::<_, Error>(())
    }
    .await;
    if let Err(err) = released {
        tracing::error!(error = %err, tool_call_id = %delivery.call.tool_call_id, "could not let go of an MCP call; its run waits until this process stops");
    }
}

/// Between two steps of a stopping server: the run's state is all stored, so any
/// replica (this one after a restart, too) can go on with it at once.
pub(super) async fn hand_over(runner: &Runner, user_id: &str, run_id: Uuid) -> Result<()> {
    let mut tx = db::begin_as_user(&runner.executor.pool, user_id).await?;
    if runs::hand_over(&mut tx, run_id).await? {
        tracing::info!(%run_id, "handed the run over for another server to go on with");
    }
    tx.commit().await?;
    Ok(())
}

/// What a run's user is told when the server stopped in the middle of one of its steps.
const STOPPED_MID_STEP: &str =
    "the server stopped during this step of the run; send your message again";

/// After the HTTP server has stopped: lets the runs driven here finish their current
/// step (they hand themselves over after it) for up to the grace period, then fails the
/// ones still in a step, telling their users.
pub async fn wind_down(runner: &Runner) {
    let deadline = tokio::time::Instant::now() + runner.config.shutdown_grace;
    if runner.active_runs.until_idle(deadline).await {
        return;
    }
    for (run_id, user_id) in runner.active_runs.snapshot() {
        tracing::warn!(%run_id, "the run was still in a step when the grace period ended");
        if let Err(err) = fail_run(runner, &user_id, run_id, STOPPED_MID_STEP).await {
            tracing::error!(%run_id, error = %err, "could not mark the run failed");
        }
    }
}
