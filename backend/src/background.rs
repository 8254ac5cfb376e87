//! Background work that spans users, on its own explicit database path: expiring
//! unanswered input requests (and resuming the runs that waited for them), failing runs
//! whose server stopped mid-step, and resuming runs whose server stopped just after their
//! last request was settled, and pruning the stream events of long-finished runs.

use std::time::Duration;

use crate::agent;
use crate::db::input_requests::InputRequestRow;
use crate::db::{self, conversations, events, input_requests, instances};
use crate::requests::{self, endings};
use crate::state::AppState;

/// The longest the sweep sleeps; it wakes sooner when a request is due to expire.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// An MCP session nobody used for this long is closed.
const MCP_IDLE: Duration = Duration::from_secs(300);

/// How often this process says it is alive: from a task of its own, so a pass held up
/// never makes other processes take it for gone.
const BEAT_EVERY: Duration = Duration::from_secs(5);

/// How long a pass waits for the runs it told of ended requests before going on: a
/// tool that takes its time after the news (an MCP server holding its call) carries on
/// alone, not holding up every user's expiries.
const FOLLOW_UPS_WAIT: Duration = Duration::from_secs(2);

/// One pass; returns how many requests expired and runs were failed.
pub async fn sweep_once(state: &AppState) -> anyhow::Result<(usize, usize)> {
    let expired = expire_overdue(state).await?;
    end_orphaned_questions(state).await?;
    state.mcp.close_idle_sessions(MCP_IDLE);
    state.limits.forget_idle();
    let runner = state.runner();
    let failed = agent::fail_abandoned_runs(&runner).await?;
    agent::resume_stranded_runs(&runner).await?;
    prune_events(state).await?;
    Ok((expired, failed))
}

/// Most old events deleted in one pass, so a large backlog never holds a long lock.
const PRUNE_BATCH: i64 = 5_000;

/// Deletes the stream events of runs that finished longer ago than the retention.
async fn prune_events(state: &AppState) -> anyhow::Result<()> {
    let retention =
        chrono::Duration::from_std(state.config.event_retention).unwrap_or(chrono::Duration::MAX);
    let mut tx = db::begin_background(&state.db).await?;
    let pruned = events::prune(&mut tx, retention, PRUNE_BATCH).await?;
    tx.commit().await?;
    if pruned > 0 {
        tracing::info!(count = pruned, "pruned old stream events");
    }
    Ok(())
}

/// Expires each overdue request in its own transaction, its conversation locked first
/// like every writer's, then tells its run.
async fn expire_overdue(state: &AppState) -> anyhow::Result<usize> {
    let mut tx = db::begin_background(&state.db).await?;
    let overdue = input_requests::overdue(&mut tx).await?;
    tx.commit().await?;
    let mut ended = Vec::new();
    for (id, conversation_id) in overdue {
        let mut tx = db::begin_background(&state.db).await?;
        conversations::lock_for_writing(&mut tx, conversation_id).await?;
        let row = endings::expire(&mut tx, id).await?;
        tx.commit().await?;
        ended.extend(row);
    }
    let expired = ended.len();
    if expired > 0 {
        tracing::info!(count = expired, "expired pending input requests");
    }
    follow_up_all(
        state,
        ended,
        "could not resume the run of an expired request",
    )
    .await;
    Ok(expired)
}

/// Follow-ups of the sweep's running at once, across passes: each holds a database
/// connection (and may queue on its conversation's lock), and a pass may end hundreds
/// of requests; users' own requests must still find connections.
static FOLLOW_UPS_AT_ONCE: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

/// Follows up each ended request in a task of its own, a few at a time, waiting for
/// them together at most [`FOLLOW_UPS_WAIT`]; those still going (or waiting their turn)
/// then finish on their own.
async fn follow_up_all(state: &AppState, ended: Vec<InputRequestRow>, failed: &'static str) {
    if ended.is_empty() {
        return;
    }
    let runner = state.runner();
    let following = ended.into_iter().map(|row| {
        let runner = runner.clone();
        tokio::spawn(async move {
            let Ok(_turn) = FOLLOW_UPS_AT_ONCE.acquire().await else {
                return;
            };
            if let Err(err) =
                requests::follow_up(&runner.executor, &runner, &row.user_id, &row).await
            {
                tracing::warn!(request = %row.id, error = %err, "{failed}");
            }
        })
    });
    let all = futures::future::join_all(following.collect::<Vec<_>>());
    match tokio::time::timeout(FOLLOW_UPS_WAIT, all).await {
        Err(_) => {
            tracing::info!("follow-ups of ended requests are still going; the sweep goes on");
        }
        Ok(joined) => {
            for panicked in joined.into_iter().filter_map(Result::err) {
                tracing::error!(error = %panicked, "a follow-up of an ended request panicked");
            }
        }
    }
}

/// Tells other processes this one is alive (its MCP sessions still wait for answers).
async fn beat(state: &AppState) -> anyhow::Result<()> {
    let mut tx = db::begin_background(&state.db).await?;
    instances::beat(&mut tx, state.instance).await?;
    tx.commit().await?;
    Ok(())
}

/// A clean stop: this process holds nothing any more.
pub async fn leave(state: &AppState) {
    let left = async {
        let mut tx = db::begin_background(&state.db).await?;
        instances::leave(&mut tx, state.instance).await?;
        tx.commit().await
    }
    .await;
    if let Err(err) = left {
        tracing::warn!(error = %err, "could not sign this process off");
    }
}

/// MCP servers' questions whose process stopped without ending them (it crashed): they
/// end saying so, and their runs are told the tools did not finish.
async fn end_orphaned_questions(state: &AppState) -> anyhow::Result<()> {
    let mut tx = db::begin_background(&state.db).await?;
    let orphaned =
        input_requests::orphaned(&mut tx, instances::interval(instances::GONE_AFTER)).await?;
    tx.commit().await?;
    let mut ended = Vec::new();
    for (id, conversation_id) in orphaned {
        let mut tx = db::begin_background(&state.db).await?;
        conversations::lock_for_writing(&mut tx, conversation_id).await?;
        let row = endings::abandon_question(
            &mut tx,
            id,
            "toolgate stopped while this was open, so the tool did not finish",
        )
        .await?;
        tx.commit().await?;
        ended.extend(row);
    }
    follow_up_all(state, ended, "could not tell a run its MCP tool ended").await;
    Ok(())
}

/// How long to sleep before the next pass: until the next pending request expires, but
/// never longer than [`SWEEP_EVERY`] nor than a new request's time to live (one created
/// right after this reading expires no sooner than that).
async fn next_pass_in(state: &AppState) -> Duration {
    let mut wait = SWEEP_EVERY.min(state.config.input_ttl);
    let next = async {
        let mut tx = db::begin_background(&state.db).await?;
        let next = input_requests::next_expiry_in(&mut tx).await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(next)
    }
    .await;
    if let Ok(Some(until)) = next {
        wait = wait.min(until);
    }
    // A few milliseconds past the expiry it is overdue in the database's clock too; and a
    // request another transaction holds (so the pass skipped it) is not retried in a
    // tight loop.
    wait.max(Duration::from_millis(100)) + Duration::from_millis(20)
}

/// Beats every [`BEAT_EVERY`] until stopped; stopped only just before [`leave`], so
/// that other processes do not take this one for gone while its runs wind down.
pub async fn keep_beating(state: AppState) {
    loop {
        if let Err(err) = beat(&state).await {
            tracing::warn!(error = %err, "could not record this process's heartbeat");
        }
        tokio::time::sleep(BEAT_EVERY).await;
    }
}

/// The background work but the heartbeat ([`keep_beating`]), until the future is
/// dropped.
pub async fn run(state: AppState) {
    loop {
        if let Err(err) = sweep_once(&state).await {
            tracing::warn!(error = %err, "background sweep failed; retrying later");
        }
        tokio::time::sleep(next_pass_in(&state).await).await;
    }
}
