//! `saved_tool_inputs`: values remembered for a conversation (`conversation_id` set)
//! or for all of a user's conversations (`conversation_id` null).

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SavedInputRow {
    pub conversation_id: Option<Uuid>,
    pub name: String,
    /// Sealed by the vault when `is_secret`.
    pub value: Value,
    pub is_secret: bool,
    pub updated_at: DateTime<Utc>,
}

pub async fn upsert(
    conn: &mut PgConnection,
    user_id: &str,
    conversation_id: Option<Uuid>,
    name: &str,
    value: &Value,
    is_secret: bool,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into saved_tool_inputs (user_id, conversation_id, name, value, is_secret)
         values ($1, $2, $3, $4, $5)
         on conflict on constraint saved_tool_inputs_scope_name
         do update set value = excluded.value, is_secret = excluded.is_secret, updated_at = now()",
    )
    .bind(user_id)
    .bind(conversation_id)
    .bind(name)
    .bind(value)
    .bind(is_secret)
    .execute(conn)
    .await?;
    Ok(())
}

/// The conversation's values followed by the user-wide ones; nothing at all when the
/// conversation is not the caller's.
pub async fn list_for_conversation(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Vec<SavedInputRow>> {
    sqlx::query_as::<_, SavedInputRow>(
        "select conversation_id, name, value, is_secret, updated_at from saved_tool_inputs
         where (conversation_id = $1 or conversation_id is null)
           and exists (select 1 from conversations where id = $1)
         order by conversation_id nulls last, name",
    )
    .bind(conversation_id)
    .fetch_all(conn)
    .await
}

pub async fn clear_conversation(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query("delete from saved_tool_inputs where conversation_id = $1")
        .bind(conversation_id)
        .execute(conn)
        .await?;
    Ok(done.rows_affected())
}
