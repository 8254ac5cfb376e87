//! `server_instances`: the toolgate processes running on this database, each with a
//! heartbeat, so work a process held (an MCP session waiting for a user's answer) can be
//! ended by another once the holder is gone. Background path only.

use std::time::Duration;

use sqlx::PgConnection;
use uuid::Uuid;

/// A process whose heartbeat is older than this is gone (it beats every few seconds,
/// from a task of its own).
pub const GONE_AFTER: Duration = Duration::from_secs(30);

/// [`GONE_AFTER`] for a query.
pub fn interval(duration: Duration) -> chrono::Duration {
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::seconds(30))
}

/// Records that `id` is alive now.
pub async fn beat(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into server_instances (id) values ($1)
         on conflict (id) do update set heartbeat_at = now()",
        id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether `id` beat within [`GONE_AFTER`].
pub async fn is_alive(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select exists (select 1 from server_instances
                        where id = $1 and heartbeat_at > now() - $2::interval) as "alive!""#,
        id,
        interval(GONE_AFTER) as _
    )
    .fetch_one(conn)
    .await
}

/// Forgets `id` (a clean stop) and processes silent for a day.
pub async fn leave(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "delete from server_instances where id = $1 or heartbeat_at < now() - interval '1 day'",
        id
    )
    .execute(conn)
    .await?;
    Ok(())
}
