//! Marks pending requests past their expiry as expired, in the background.

use std::time::Duration;

use sqlx::PgPool;

use crate::db::{self, input_requests};

/// How often overdue requests are swept. Reads treat an overdue request as expired
/// at once; the sweep makes the stored status agree.
const SWEEP_EVERY: Duration = Duration::from_secs(15);

pub async fn sweep_once(pool: &PgPool) -> anyhow::Result<usize> {
    let mut tx = db::begin_background(pool).await?;
    let expired = input_requests::expire_overdue(&mut tx).await?;
    tx.commit().await?;
    if !expired.is_empty() {
        tracing::info!(count = expired.len(), "expired pending input requests");
    }
    Ok(expired.len())
}

pub async fn run(pool: PgPool) {
    let mut ticker = tokio::time::interval(SWEEP_EVERY);
    loop {
        ticker.tick().await;
        if let Err(err) = sweep_once(&pool).await {
            tracing::warn!(error = %err, "expiry sweep failed; retrying later");
        }
    }
}
