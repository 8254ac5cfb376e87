//! `agent_runs`: one run of the agent loop per user message.

use chrono::{DateTime, Utc};
use protocol::chat::{Run, RunStatus};
use sqlx::PgConnection;
use uuid::Uuid;

/// Reads [`RunRow`]s: `$prefix` (the statement up to its columns) + the row's columns +
/// `$suffix`, with the statement's arguments. One column list for every query of the
/// table, checked against the database at compile time.
macro_rules! run_rows {
    ($prefix:literal, $suffix:literal $(, $argument:expr)* $(,)?) => {
        sqlx::query_as!(
            RunRow,
            $prefix
                + r#" id, conversation_id, user_id, status as "status: RunStatus", step, model,
                      error, created_at, updated_at, user_message_id "#
                + $suffix
            $(, $argument)*
        )
    };
}

#[derive(Debug, Clone)]
pub struct RunRow {
    pub id: Uuid,
    pub conversation_id: Uuid,
    pub user_id: String,
    pub status: RunStatus,
    pub step: i32,
    pub model: Option<String>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub user_message_id: Option<Uuid>,
}

impl RunRow {
    pub fn status(&self) -> RunStatus {
        self.status
    }

    pub fn to_api(&self) -> Run {
        Run {
            id: self.id,
            conversation_id: self.conversation_id,
            status: self.status(),
            step: self.step,
            model: self.model.clone(),
            error: self.error.clone(),
            created_at: self.created_at,
            updated_at: self.updated_at,
        }
    }
}

pub async fn insert(
    conn: &mut PgConnection,
    id: Uuid,
    conversation_id: Uuid,
    user_id: &str,
    user_message_id: Uuid,
    model: &str,
    lease: chrono::Duration,
) -> sqlx::Result<RunRow> {
    run_rows!(
        "insert into agent_runs (id, conversation_id, user_id, status, model, user_message_id, lease_expires_at)
         values ($1, $2, $3, 'running', $4, $5, now() + $6::interval)
         returning",
        "",
        id,
        conversation_id,
        user_id,
        model,
        user_message_id,
        lease as _,
    )
    .fetch_one(conn)
    .await
}

pub async fn find(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    run_rows!("select", "from agent_runs where id = $1", id)
        .fetch_optional(conn)
        .await
}

/// Reads a run and locks it for the rest of the transaction.
pub async fn find_for_update(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    run_rows!("select", "from agent_runs where id = $1 for update", id)
        .fetch_optional(conn)
        .await
}

/// The caller's runs in progress or waiting, in every conversation (row-level security
/// keeps the count to the caller's own), holding a lock on that count until the
/// transaction ends: two starts at once would otherwise both see room for one more run.
/// Called inside the transaction that inserts the run.
pub async fn count_active_locked(conn: &mut PgConnection, user_id: &str) -> sqlx::Result<i64> {
    // A statement of its own: a statement's snapshot is taken when it starts, so a count
    // in the statement that waited for the lock would miss what the other start wrote.
    sqlx::query!(
        "select pg_advisory_xact_lock(hashtextextended('toolgate.active_runs:' || $1::text, 0))",
        user_id
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        r#"select count(*) as "count!" from agent_runs
           where status in ('running', 'waiting_for_input')"#
    )
    .fetch_one(conn)
    .await
}

pub async fn active_for_conversation(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Option<RunRow>> {
    run_rows!(
        "select",
        "from agent_runs
         where conversation_id = $1 and status in ('running', 'waiting_for_input')",
        conversation_id,
    )
    .fetch_optional(conn)
    .await
}

/// Moves a run to `status`; `from` guards the transition so only one caller wins it.
pub async fn transition(
    conn: &mut PgConnection,
    id: Uuid,
    from: &[RunStatus],
    to: RunStatus,
    step: Option<i32>,
    error: Option<&str>,
    lease: Option<chrono::Duration>,
) -> sqlx::Result<Option<RunRow>> {
    let from: Vec<String> = from.iter().map(|s| s.as_str().to_owned()).collect();
    run_rows!(
        "update agent_runs
         set status = $3, step = coalesce($4, step), error = coalesce($5, error), updated_at = now(),
             lease_expires_at = case when $6::interval is null then null else now() + $6::interval end,
             finished_at = case when $3 in ('completed', 'failed', 'cancelled') then now() else finished_at end
         where id = $1 and status = any($2)
         returning",
        "",
        id,
        &from,
        to.as_str(),
        step,
        error,
        lease as _,
    )
    .fetch_optional(conn)
    .await
}

/// Extends the lease of a running run, and records its model. Whether the run was still
/// running here (not ended, not handed over).
pub async fn renew_lease(
    conn: &mut PgConnection,
    id: Uuid,
    lease: chrono::Duration,
    model: Option<&str>,
) -> sqlx::Result<bool> {
    let renewed = sqlx::query!(
        "update agent_runs set lease_expires_at = now() + $2::interval, model = coalesce($3, model), updated_at = now()
         where id = $1 and status = 'running' and not handed_over",
        id,
        lease as _,
        model
    )
    .execute(conn)
    .await?;
    Ok(renewed.rows_affected() == 1)
}

/// A running run whose lease has lapsed.
pub struct LapsedRun {
    pub id: Uuid,
    pub conversation_id: Uuid,
    pub user_id: String,
    /// Its server handed it over between steps, so it can go on; otherwise the server
    /// stopped mid-step.
    pub handed_over: bool,
}

/// Running runs whose lease has lapsed, oldest first.
pub async fn lapsed(conn: &mut PgConnection) -> sqlx::Result<Vec<LapsedRun>> {
    sqlx::query_as!(
        LapsedRun,
        "select id, conversation_id, user_id, handed_over from agent_runs
         where status = 'running' and lease_expires_at < now()
         order by lease_expires_at limit 500"
    )
    .fetch_all(conn)
    .await
}

/// Marks a run failed if it is still running with its lease lapsed and was not handed
/// over.
pub async fn fail_abandoned(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    run_rows!(
        "update agent_runs
         set status = 'failed', error = 'the server stopped while this run was in progress; send your message again',
             updated_at = now(), finished_at = now(), lease_expires_at = null
         where id = $1 and status = 'running' and lease_expires_at < now() and not handed_over
         returning",
        "",
        id,
    )
    .fetch_optional(conn)
    .await
}

/// Marks a running run as handed over between steps: its lease lapses now, so the
/// next sweep of any replica resumes it. `false` when it is no longer running.
pub async fn hand_over(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    let moved = sqlx::query!(
        "update agent_runs set handed_over = true, lease_expires_at = now(), updated_at = now()
         where id = $1 and status = 'running'",
        id
    )
    .execute(conn)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Takes over a handed-over run with a fresh lease; `false` when another replica was
/// first.
pub async fn take_over(
    conn: &mut PgConnection,
    id: Uuid,
    lease: chrono::Duration,
) -> sqlx::Result<bool> {
    let taken = sqlx::query!(
        "update agent_runs set handed_over = false, lease_expires_at = now() + $2::interval, updated_at = now()
         where id = $1 and status = 'running' and handed_over and lease_expires_at < now()",
        id,
        lease as _
    )
    .execute(conn)
    .await?;
    Ok(taken.rows_affected() == 1)
}

/// Runs still waiting for input that no pending request holds any more: their server
/// stopped between settling the last request and resuming them.
pub async fn stranded(
    conn: &mut PgConnection,
    quiet_for: chrono::Duration,
) -> sqlx::Result<Vec<RunRow>> {
    run_rows!(
        "select",
        "from agent_runs r
         where status = 'waiting_for_input' and updated_at < now() - $1::interval
           and not exists (select 1 from tool_user_input_requests q
                           where q.run_id = r.id and q.status = 'pending')",
        quiet_for as _,
    )
    .fetch_all(conn)
    .await
}
