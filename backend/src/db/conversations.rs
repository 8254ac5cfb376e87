use chrono::{DateTime, Utc};
use protocol::api::Conversation;
use sqlx::PgConnection;
use uuid::Uuid;

struct ConversationRow {
    id: Uuid,
    title: String,
    created_at: DateTime<Utc>,
}

impl From<ConversationRow> for Conversation {
    fn from(row: ConversationRow) -> Self {
        Conversation {
            id: row.id,
            title: row.title,
            created_at: row.created_at,
        }
    }
}

pub async fn insert(
    conn: &mut PgConnection,
    user_id: &str,
    title: &str,
) -> sqlx::Result<Conversation> {
    sqlx::query_as!(
        ConversationRow,
        "insert into conversations (id, user_id, title) values ($1, $2, $3)
         returning id, title, created_at",
        Uuid::new_v4(),
        user_id,
        title
    )
    .fetch_one(conn)
    .await
    .map(Into::into)
}

/// Where a page of conversations ends: the last one's place in the order (most
/// recently active first, then newest, then by id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListPlace {
    pub updated_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub id: Uuid,
}

/// One page of the caller's conversations, most recently active first: those after
/// `after` (from the first when `None`), at most `limit`; and where the page ended when
/// more follow.
pub async fn page(
    conn: &mut PgConnection,
    after: Option<ListPlace>,
    limit: usize,
) -> sqlx::Result<(Vec<Conversation>, Option<ListPlace>)> {
    let ask = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    let rows = sqlx::query!(
        "select id, title, created_at, updated_at from conversations
         where $1::timestamptz is null
            or (updated_at, created_at, id) < ($1, $2::timestamptz, $3::uuid)
         order by updated_at desc, created_at desc, id desc
         limit $4",
        after.map(|place| place.updated_at),
        after.map(|place| place.created_at),
        after.map(|place| place.id),
        ask,
    )
    .fetch_all(conn)
    .await?;
    let more = rows.len() > limit;
    let mut page = Vec::with_capacity(rows.len().min(limit));
    let mut last = None;
    for row in rows.into_iter().take(limit) {
        last = Some(ListPlace {
            updated_at: row.updated_at,
            created_at: row.created_at,
            id: row.id,
        });
        page.push(Conversation {
            id: row.id,
            title: row.title,
            created_at: row.created_at,
        });
    }
    Ok((page, last.filter(|_| more)))
}

pub async fn find(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<Conversation>> {
    let row = sqlx::query_as!(
        ConversationRow,
        "select id, title, created_at from conversations where id = $1",
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Into::into))
}

/// Whether the conversation exists and is visible to the caller.
pub async fn exists(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select exists (select 1 from conversations where id = $1) as "exists!""#,
        id
    )
    .fetch_one(conn)
    .await
}

/// Takes the conversation's writer lock for the rest of the transaction; `false` when
/// the conversation is not the caller's.
///
/// Every transaction that writes the conversation's history or stream holds it from its
/// first write to its commit, so event ids and message sequence numbers follow commit
/// order and a reader never sees a later id before an earlier one. Take it before any
/// other row lock (a run, a request): one order everywhere, so no two writers deadlock.
pub async fn lock_for_writing(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    let locked = sqlx::query_scalar!(
        r#"select 1 as "locked!" from conversations where id = $1 for no key update"#,
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(locked.is_some())
}

/// Takes the conversation's row lock that keeps every writer out until commit, before
/// deleting it; `false` when the conversation is not the caller's.
pub async fn lock_for_deleting(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<bool> {
    let locked = sqlx::query_scalar!(
        r#"select 1 as "locked!" from conversations where id = $1 for update"#,
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(locked.is_some())
}

/// Deletes the conversation, and with it (by the tables' cascades) everything it holds:
/// messages, runs, requests, their events and the values saved for it alone. The log of
/// its tool calls stays, its conversation unset. Every replica hears of it on commit
/// (`<id> gone` on the events channel), so the streams following it end at once.
pub async fn delete(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<()> {
    sqlx::query_scalar!(
        r#"with deleted as (delete from conversations where id = $1 returning id)
           select count(*) as "deleted!" from deleted,
             lateral (select pg_notify($2, deleted.id::text || ' gone')) as notified"#,
        id,
        super::events::CHANNEL
    )
    .fetch_one(conn)
    .await?;
    Ok(())
}

/// The conversation's context pipeline settings, if it has its own.
pub async fn context_pipeline(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<serde_json::Value>> {
    let value = sqlx::query_scalar!(
        "select context_pipeline from conversations where id = $1",
        id
    )
    .fetch_optional(conn)
    .await?;
    Ok(value.flatten())
}

pub async fn set_context_pipeline(
    conn: &mut PgConnection,
    id: Uuid,
    pipeline: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update conversations set context_pipeline = $2 where id = $1",
        id,
        pipeline
    )
    .execute(conn)
    .await?;
    Ok(())
}
