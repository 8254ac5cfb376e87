//! `conversation_summaries`: what the summarisation middleware wrote, so older turns
//! are summarised once rather than on every step.

use sqlx::PgConnection;
use uuid::Uuid;

pub async fn insert(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    user_id: &str,
    through_seq: i32,
    summary: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into conversation_summaries (conversation_id, user_id, through_seq, summary)
         values ($1, $2, $3, $4)",
        conversation_id,
        user_id,
        through_seq,
        summary
    )
    .execute(conn)
    .await?;
    Ok(())
}
