//! `run_events`: what the conversation stream carries, kept so a client that
//! reconnects misses nothing.

use protocol::chat::{EventKind, StreamEvent};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

/// The channel every replica listens on; the payload is `<conversation id> <event id>`
/// (see `listener`: never the event itself).
pub const CHANNEL: &str = "toolgate_events";

/// Stores an event and notifies every replica. The conversation's writer lock (see
/// `conversations::lock_for_writing`) is taken in the same statement, before the id is
/// drawn, so ids of one conversation become visible in order.
pub async fn append(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    user_id: &str,
    run_id: Option<Uuid>,
    kind: &EventKind,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"with locked as (
             select id from conversations where id = $1 for no key update),
         stored as (
             insert into run_events (conversation_id, user_id, run_id, kind, data)
             select locked.id, $2, $3, $4, $5 from locked returning id)
         select stored.id as "id!" from stored,
             lateral (select pg_notify($6, $1::text || ' ' || stored.id::text)) as notified"#,
        conversation_id,
        user_id,
        run_id,
        kind.name(),
        Json(kind) as _,
        CHANNEL
    )
    .fetch_one(conn)
    .await
}

struct EventRow {
    id: i64,
    conversation_id: Uuid,
    run_id: Option<Uuid>,
    data: Json<EventKind>,
}

pub async fn after(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    after_id: i64,
    limit: i64,
) -> sqlx::Result<Vec<StreamEvent>> {
    let rows = sqlx::query_as!(
        EventRow,
        r#"select id, conversation_id, run_id, data as "data: Json<EventKind>" from run_events
         where conversation_id = $1 and id > $2 order by id limit $3"#,
        conversation_id,
        after_id,
        limit
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| StreamEvent {
            id: row.id,
            conversation_id: row.conversation_id,
            run_id: row.run_id,
            kind: row.data.0,
        })
        .collect())
}

/// Deletes up to `limit` events older than `retention` whose run (if any) finished
/// longer than `retention` ago (background path). Events of a run still going are
/// kept whatever their age, so a stream following that run replays all of it; what a
/// finished run said lives on in the conversation's messages.
pub async fn prune(
    conn: &mut PgConnection,
    retention: chrono::Duration,
    limit: i64,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "delete from run_events where id in (
             select e.id from run_events e
             left join agent_runs r on r.id = e.run_id
             where e.created_at < now() - $1::interval
               and (r.id is null
                    or (r.status not in ('running', 'waiting_for_input')
                        and r.updated_at < now() - $1::interval))
             order by e.id
             limit $2)",
        retention as _,
        limit
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}
