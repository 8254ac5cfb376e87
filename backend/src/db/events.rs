//! `run_events`: what the conversation stream carries, kept so a client that
//! reconnects misses nothing.

use futures::TryStreamExt;
use protocol::chat::{EventKind, StreamEvent};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::batch::SizedBatch;
use super::storable;

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
             insert into run_events (conversation_id, user_id, run_id, kind, data, data_bytes)
             select locked.id, $2, $3, $4, $5, $7 from locked returning id)
         select stored.id as "id!" from stored,
             lateral (select pg_notify($6, $1::text || ' ' || stored.id::text)) as notified"#,
        conversation_id,
        user_id,
        run_id,
        kind.name(),
        Json(kind) as _,
        CHANNEL,
        i32::try_from(storable::json_size(kind)).unwrap_or(i32::MAX)
    )
    .fetch_one(conn)
    .await
}

/// Whether the completion of the URL-mode question `request_id` has been announced in
/// its conversation.
pub async fn completion_announced(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    request_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select exists (
             select 1 from run_events
             where conversation_id = $1 and kind = 'elicitation_completed'
               and data ->> 'request_id' = $2::uuid::text) as "announced!""#,
        conversation_id,
        request_id
    )
    .fetch_one(conn)
    .await
}

struct EventRow {
    id: i64,
    conversation_id: Uuid,
    run_id: Option<Uuid>,
    data: Json<EventKind>,
    size: i32,
}

/// About the most event data one read holds (at least one event, however large): a
/// conversation's events may each be as large as a posted message, and a stream that
/// catches up must not hold hundreds of them in memory at once.
pub const MAX_BATCH_BYTES: usize = 4 << 20;

/// The conversation's events after `after_id`, in order: at most `limit` of them and
/// no more than about [`MAX_BATCH_BYTES`] of data; and whether more may follow. The
/// database stops sending at that size too (by each event's `data_bytes`; one written
/// without it, 0, counts by its data): one event past it, which tells that more
/// follow, and no other.
pub async fn after(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    after_id: i64,
    limit: usize,
) -> sqlx::Result<(Vec<StreamEvent>, bool)> {
    let ask = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let max_bytes = i64::try_from(MAX_BATCH_BYTES).unwrap_or(i64::MAX);
    // `size`: the stored size, or for an event stored without one, its data's. Both
    // sides count by it, so the batch ends where the sending does. `before_previous`:
    // the size of every event before the one before this one, so the event right after
    // the batch's last is sent as well.
    let mut rows = sqlx::query_as!(
        EventRow,
        r#"select id as "id!", conversation_id as "conversation_id!", run_id,
                  data as "data!: Json<EventKind>", size as "size!"
           from (select counted.*,
                        coalesce(sum(counted.size) over (order by counted.id
                            rows between unbounded preceding and 2 preceding), 0)
                            as before_previous
                 from (select e.id, e.conversation_id, e.run_id, e.data,
                              coalesce(nullif(e.data_bytes, 0), octet_length(e.data::text))
                                  as size
                       from run_events e
                       where e.conversation_id = $1 and e.id > $2
                       order by e.id limit $3) as counted) as sized
           where sized.before_previous < $4
           order by sized.id"#,
        conversation_id,
        after_id,
        ask,
        max_bytes
    )
    .fetch(conn);
    let mut batch = SizedBatch::new(limit, MAX_BATCH_BYTES);
    while let Some(row) = rows.try_next().await? {
        if batch.is_full() {
            return Ok(batch.finish(true));
        }
        let event = StreamEvent {
            id: row.id,
            conversation_id: row.conversation_id,
            run_id: row.run_id,
            kind: row.data.0,
        };
        batch.take(event, row.size);
    }
    Ok(batch.finish(false))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, conversations};

    /// Large events (a posted message may be near a megabyte) are read a few at a time,
    /// never hundreds into memory at once; nothing is skipped.
    #[tokio::test]
    async fn a_read_holds_about_max_batch_bytes_of_events() {
        let pool = db::tests::scratch_pool().await;
        let user = "events-batch-user";
        let mut tx = db::begin_as_user(&pool, user).await.expect("begin");
        let conversation = conversations::insert(&mut tx, user, "t")
            .await
            .expect("conversation");
        let delta = "x".repeat(MAX_BATCH_BYTES / 4);
        for _ in 0..6 {
            append(
                &mut tx,
                conversation.id,
                user,
                None,
                &EventKind::TextDelta {
                    delta: delta.clone(),
                },
            )
            .await
            .expect("append");
        }
        let (first, more) = after(&mut tx, conversation.id, 0, 500).await.expect("read");
        assert_eq!((first.len(), more), (4, true));
        let last = first.last().expect("events").id;
        let (rest, more) = after(&mut tx, conversation.id, last, 500)
            .await
            .expect("read");
        assert_eq!((rest.len(), more), (2, false));
        // The count still bounds a batch of small events.
        let (two, more) = after(&mut tx, conversation.id, 0, 2).await.expect("read");
        assert_eq!((two.len(), more), (2, true));
        let (all, more) = after(&mut tx, conversation.id, 0, 6).await.expect("read");
        assert_eq!((all.len(), more), (4, true), "the size ends it first");

        // Events written without their size (an older server) count by their data.
        sqlx::query("update run_events set data_bytes = 0 where conversation_id = $1")
            .bind(conversation.id)
            .execute(&mut *tx)
            .await
            .expect("forget the sizes");
        let (first, more) = after(&mut tx, conversation.id, 0, 500).await.expect("read");
        assert_eq!((first.len(), more), (4, true));
        tx.rollback().await.expect("rollback");
    }

    /// One event larger than a batch is a batch of its own; a batch that ends exactly
    /// at its count says that nothing follows.
    #[tokio::test]
    async fn a_batch_holds_at_least_one_event_and_says_whether_more_follow() {
        let pool = db::tests::scratch_pool().await;
        let user = "events-edge-user";
        let mut tx = db::begin_as_user(&pool, user).await.expect("begin");
        let conversation = conversations::insert(&mut tx, user, "t")
            .await
            .expect("conversation");
        let deltas = ["x".repeat(MAX_BATCH_BYTES + 1), "a".into(), "b".into()];
        for delta in deltas {
            append(
                &mut tx,
                conversation.id,
                user,
                None,
                &EventKind::TextDelta { delta },
            )
            .await
            .expect("append");
        }
        let (huge, more) = after(&mut tx, conversation.id, 0, 500).await.expect("read");
        assert_eq!((huge.len(), more), (1, true));
        let (rest, more) = after(&mut tx, conversation.id, huge[0].id, 2)
            .await
            .expect("read");
        assert_eq!((rest.len(), more), (2, false));
        tx.rollback().await.expect("rollback");
    }
}
