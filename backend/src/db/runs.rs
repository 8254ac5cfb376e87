//! `agent_runs`: one run of the agent loop per user message.

use chrono::{DateTime, Utc};
use protocol::chat::{Run, RunStatus};
use sqlx::PgConnection;
use uuid::Uuid;

const COLUMNS: &str = "id, conversation_id, user_id, status, step, model, error, created_at, updated_at, user_message_id";

#[derive(Debug, Clone, sqlx::FromRow)]
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
    sqlx::query_as::<_, RunRow>(&format!(
        "insert into agent_runs (id, conversation_id, user_id, status, model, user_message_id, lease_expires_at)
         values ($1, $2, $3, 'running', $4, $5, now() + $6)
         returning {COLUMNS}"
    ))
    .bind(id)
    .bind(conversation_id)
    .bind(user_id)
    .bind(model)
    .bind(user_message_id)
    .bind(lease)
    .fetch_one(conn)
    .await
}

pub async fn find(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>(&format!("select {COLUMNS} from agent_runs where id = $1"))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// Reads a run and locks it for the rest of the transaction.
pub async fn find_for_update(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>(&format!(
        "select {COLUMNS} from agent_runs where id = $1 for update"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The caller's runs in progress or waiting, in every conversation (row-level security
/// keeps the count to the caller's own).
pub async fn count_active(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "select count(*) from agent_runs where status in ('running', 'waiting_for_input')",
    )
    .fetch_one(conn)
    .await
}

pub async fn active_for_conversation(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>(&format!(
        "select {COLUMNS} from agent_runs
         where conversation_id = $1 and status in ('running', 'waiting_for_input')"
    ))
    .bind(conversation_id)
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
    let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
    sqlx::query_as::<_, RunRow>(&format!(
        "update agent_runs
         set status = $3, step = coalesce($4, step), error = coalesce($5, error), updated_at = now(),
             lease_expires_at = case when $6::interval is null then null else now() + $6::interval end,
             finished_at = case when $3 in ('completed', 'failed', 'cancelled') then now() else finished_at end
         where id = $1 and status = any($2)
         returning {COLUMNS}"
    ))
    .bind(id)
    .bind(&from)
    .bind(to.as_str())
    .bind(step)
    .bind(error)
    .bind(lease)
    .fetch_optional(conn)
    .await
}

/// Extends the lease of a running run, and records its model.
pub async fn renew_lease(
    conn: &mut PgConnection,
    id: Uuid,
    lease: chrono::Duration,
    model: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "update agent_runs set lease_expires_at = now() + $2, model = coalesce($3, model), updated_at = now()
         where id = $1 and status = 'running' and not handed_over",
    )
    .bind(id)
    .bind(lease)
    .bind(model)
    .execute(conn)
    .await?;
    Ok(())
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
    let rows: Vec<(Uuid, Uuid, String, bool)> = sqlx::query_as(
        "select id, conversation_id, user_id, handed_over from agent_runs
         where status = 'running' and lease_expires_at < now()
         order by lease_expires_at limit 500",
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, conversation_id, user_id, handed_over)| LapsedRun {
            id,
            conversation_id,
            user_id,
            handed_over,
        })
        .collect())
}

/// Marks a run failed if it is still running with its lease lapsed and was not handed
/// over.
pub async fn fail_abandoned(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>(&format!(
        "update agent_runs
         set status = 'failed', error = 'the server stopped while this run was in progress; send your message again',
             updated_at = now(), finished_at = now(), lease_expires_at = null
         where id = $1 and status = 'running' and lease_expires_at < now() and not handed_over
         returning {COLUMNS}"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Marks a running run as handed over between steps: its lease lapses now, so the
/// next sweep of any replica resumes it. `false` when it is no longer running.
pub async fn hand_over(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    let moved = sqlx::query(
        "update agent_runs set handed_over = true, lease_expires_at = now(), updated_at = now()
         where id = $1 and status = 'running'",
    )
    .bind(id)
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
    let taken = sqlx::query(
        "update agent_runs set handed_over = false, lease_expires_at = now() + $2, updated_at = now()
         where id = $1 and status = 'running' and handed_over and lease_expires_at < now()",
    )
    .bind(id)
    .bind(lease)
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
    sqlx::query_as::<_, RunRow>(&format!(
        "select {COLUMNS} from agent_runs r
         where status = 'waiting_for_input' and updated_at < now() - $1::interval
           and not exists (select 1 from tool_user_input_requests q
                           where q.run_id = r.id and q.status = 'pending')"
    ))
    .bind(quiet_for)
    .fetch_all(conn)
    .await
}
