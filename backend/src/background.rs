//! Background work that spans users, on its own explicit database path: expiring
//! unanswered input requests (and resuming the runs that waited for them), failing runs
//! whose server stopped mid-step, and resuming runs whose server stopped just after their
//! last request was settled.

use std::time::Duration;

use crate::agent;
use crate::db;
use crate::requests::{self, endings};
use crate::state::AppState;

const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// One pass; returns how many requests expired and runs were failed.
pub async fn sweep_once(state: &AppState) -> anyhow::Result<(usize, usize)> {
    let mut tx = db::begin_background(&state.db).await?;
    let expired = endings::expire_overdue(&mut tx).await?;
    tx.commit().await?;
    if !expired.is_empty() {
        tracing::info!(count = expired.len(), "expired pending input requests");
    }
    for row in &expired {
        if let Err(err) = requests::follow_up(state, &row.user_id, row).await {
            tracing::warn!(request = %row.id, error = %err, "could not resume the run of an expired request");
        }
    }
    state.limits.forget_idle();
    let failed = agent::fail_abandoned_runs(state).await?;
    agent::resume_stranded_runs(state).await?;
    Ok((expired.len(), failed))
}

pub async fn run(state: AppState) {
    let mut ticker = tokio::time::interval(SWEEP_EVERY);
    loop {
        ticker.tick().await;
        if let Err(err) = sweep_once(&state).await {
            tracing::warn!(error = %err, "background sweep failed; retrying later");
        }
    }
}
