//! `run_events`: what the conversation stream carries, kept so a client that
//! reconnects misses nothing.

use protocol::chat::{EventKind, StreamEvent};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

/// The channel every replica listens on; the payload is the conversation id.
pub const CHANNEL: &str = "toolgate_events";

pub async fn append(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    user_id: &str,
    run_id: Option<Uuid>,
    kind: &EventKind,
) -> sqlx::Result<i64> {
    let id: i64 = sqlx::query_scalar(
        "with stored as (
             insert into run_events (conversation_id, user_id, run_id, kind, data)
             values ($1, $2, $3, $4, $5) returning id)
         select id from stored, (select pg_notify($6, $1::text)) as notified",
    )
    .bind(conversation_id)
    .bind(user_id)
    .bind(run_id)
    .bind(kind.name())
    .bind(Json(kind))
    .bind(CHANNEL)
    .fetch_one(conn)
    .await?;
    Ok(id)
}

#[derive(sqlx::FromRow)]
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
    let rows = sqlx::query_as::<_, EventRow>(
        "select id, conversation_id, run_id, data from run_events
         where conversation_id = $1 and id > $2 order by id limit $3",
    )
    .bind(conversation_id)
    .bind(after_id)
    .bind(limit)
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
