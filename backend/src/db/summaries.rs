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
    kept_out: &[i32],
) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into conversation_summaries (conversation_id, user_id, through_seq, summary, kept_out)
         values ($1, $2, $3, $4, $5)",
        conversation_id,
        user_id,
        through_seq,
        summary,
        kept_out
    )
    .execute(conn)
    .await?;
    Ok(())
}
