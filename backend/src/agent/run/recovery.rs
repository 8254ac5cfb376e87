//! Runs whose server went away: failed when it stopped mid-step (its lease lapsed),
//! taken over when it had handed them over, resumed when they were left waiting after
//! their last request was settled.

use std::time::Duration;

use protocol::chat::{EventKind, RunStatus};

use super::Runner;
use super::lifecycle::{close_open_calls, emit, lease, move_run, spawn_drive};
use super::step::record_tool_result;
use crate::db::input_requests;
use crate::db::{self, conversations, runs};
use crate::error::Result;
use crate::requests::{self, endings};

/// Marks failed the runs whose server stopped mid-step (their lease lapsed). Each run
/// in its own transaction, its conversation locked first like every writer's.
pub async fn fail_abandoned_runs(runner: &Runner) -> Result<usize> {
    let mut tx = db::begin_background(&runner.executor.pool).await?;
    let lapsed = runs::lapsed(&mut tx).await?;
    tx.commit().await?;
    let mut failed = 0;
    for lapsed in lapsed {
        if lapsed.handed_over {
            take_over(runner, &lapsed).await?;
            continue;
        }
        let mut tx = db::begin_background(&runner.executor.pool).await?;
        conversations::lock_for_writing(&mut tx, lapsed.conversation_id).await?;
        if let Some(run) = runs::fail_abandoned(&mut tx, lapsed.id).await? {
            endings::abandon_run(&mut tx, run.id).await?;
            close_open_calls(&mut tx, &run.user_id, run.conversation_id, run.id).await?;
            emit(
                &mut tx,
                run.conversation_id,
                &run.user_id,
                Some(run.id),
                EventKind::RunStatus { run: run.to_api() },
            )
            .await?;
            failed += 1;
        }
        tx.commit().await?;
    }
    if failed > 0 {
        tracing::warn!(
            count = failed,
            "marked runs failed whose server stopped mid-step"
        );
    }
    Ok(failed)
}

/// Goes on with a run another server handed over between steps.
async fn take_over(runner: &Runner, run: &runs::LapsedRun) -> Result<()> {
    if runner.is_shutting_down() {
        return Ok(());
    }
    let mut tx = db::begin_as_user(&runner.executor.pool, &run.user_id).await?;
    let taken = runs::take_over(&mut tx, run.id, lease(runner)).await?;
    tx.commit().await?;
    if taken {
        tracing::info!(run_id = %run.id, "going on with a run another server handed over");
        spawn_drive(
            runner.clone(),
            run.user_id.clone(),
            run.conversation_id,
            run.id,
        );
    }
    Ok(())
}

/// How long after a request was settled its follow-up (the tool run again with the
/// user's answer) may still be starting, on top of the longest the tool's call may take;
/// the sweep leaves such runs alone until then.
const FOLLOW_UP_GRACE: Duration = Duration::from_secs(180);

/// Whether the follow-up of a request settled at `settled_at` may still be under way, for
/// a tool whose call takes at most `longest_call`: an approved payment still running must
/// not be reported as not run, which invites a second one.
fn follow_up_may_be_running(
    settled_at: Option<chrono::DateTime<chrono::Utc>>,
    now: chrono::DateTime<chrono::Utc>,
    longest_call: Duration,
) -> bool {
    let window = chrono::Duration::from_std(FOLLOW_UP_GRACE.saturating_add(longest_call))
        .unwrap_or(chrono::Duration::MAX);
    settled_at.is_none_or(|at| now.signed_duration_since(at) < window)
}

/// How long a waiting run must have been quiet before the sweep takes it over, so it
/// never races the request that is settling it right now.
const STRANDED_AFTER_SECONDS: i64 = 10;

/// Resumes runs left waiting with nothing to wait for: their server stopped after a
/// request was settled but before the run went on. Each settled request's outcome is
/// recorded first (a stored retry outcome, or what happened to the request), then the run
/// resumes once.
pub async fn resume_stranded_runs(runner: &Runner) -> Result<usize> {
    let mut tx = db::begin_background(&runner.executor.pool).await?;
    let stranded =
        runs::stranded(&mut tx, chrono::Duration::seconds(STRANDED_AFTER_SECONDS)).await?;
    tx.commit().await?;
    let mut resumed = 0;
    for run in stranded {
        let mut tx = db::begin_as_user(&runner.executor.pool, &run.user_id).await?;
        conversations::lock_for_writing(&mut tx, run.conversation_id).await?;
        let Some(locked) = runs::find_for_update(&mut tx, run.id).await? else {
            continue;
        };
        if locked.status() != RunStatus::WaitingForInput
            || input_requests::count_pending_for_run(&mut tx, run.id).await? > 0
        {
            continue;
        }
        let settled = input_requests::settled_without_result(&mut tx, run.id).await?;
        // A request settled a moment ago may still have its follow-up under way (the tool
        // running again with the answer), which records the result itself.
        let now = chrono::Utc::now();
        if settled.iter().any(|row| {
            let longest = runner.executor.longest_call(&row.tool_name);
            follow_up_may_be_running(row.completed_at, now, longest)
        }) {
            continue;
        }
        // An MCP call whose live session is still working on the answer will report.
        let mut held_elsewhere = false;
        for row in settled.iter().filter(|row| row.from_mcp()) {
            if let Some(holder) = row.held_by
                && db::instances::is_alive(&mut tx, holder).await?
            {
                held_elsewhere = true;
            }
        }
        if held_elsewhere {
            continue;
        }
        let mut recorded = std::collections::HashSet::new();
        for row in settled {
            let call = row.call_ref();
            if !recorded.insert(call.tool_call_id.clone()) {
                continue;
            }
            let Some(outcome) = requests::outcome_of_settled(&row) else {
                continue;
            };
            record_tool_result(
                &mut tx,
                &run.user_id,
                run.conversation_id,
                run.id,
                &call.tool_call_id,
                &call.tool_name,
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
            Some(lease(runner)),
        )
        .await?;
        tx.commit().await?;
        if moved.is_some() {
            resumed += 1;
            spawn_drive(
                runner.clone(),
                run.user_id.clone(),
                run.conversation_id,
                run.id,
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follow_up_is_left_alone_for_as_long_as_its_tool_may_take() {
        let now = chrono::Utc::now();
        let ago = |seconds| Some(now - chrono::Duration::seconds(seconds));
        assert!(follow_up_may_be_running(None, now, Duration::ZERO));
        assert!(follow_up_may_be_running(ago(60), now, Duration::ZERO));
        assert!(!follow_up_may_be_running(ago(200), now, Duration::ZERO));
        // A tool that may take an hour: ten minutes after the yes it may still be working.
        assert!(follow_up_may_be_running(
            ago(600),
            now,
            Duration::from_secs(3600)
        ));
        assert!(!follow_up_may_be_running(
            ago(4000),
            now,
            Duration::from_secs(3600)
        ));
        // A timeout too long to add up is read as "may still be running".
        assert!(follow_up_may_be_running(ago(4000), now, Duration::MAX));
    }
}
