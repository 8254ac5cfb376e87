//! `conversation_summaries`: what the summarisation middleware wrote, so older turns
//! are summarised once rather than on every step.

use sqlx::PgConnection;
use uuid::Uuid;

pub async fn latest(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Option<(i32, String)>> {
    sqlx::query_as(
        "select through_seq, summary from conversation_summaries
         where conversation_id = $1 order by through_seq desc limit 1",
    )
    .bind(conversation_id)
    .fetch_optional(conn)
    .await
}

pub async fn insert(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    user_id: &str,
    through_seq: i32,
    summary: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into conversation_summaries (conversation_id, user_id, through_seq, summary)
         values ($1, $2, $3, $4)",
    )
    .bind(conversation_id)
    .bind(user_id)
    .bind(through_seq)
    .bind(summary)
    .execute(conn)
    .await?;
    Ok(())
}
