//! `memory_notes`: what the user asked the agent to remember about them.

use sqlx::PgConnection;

pub async fn add(conn: &mut PgConnection, user_id: &str, note: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into memory_notes (user_id, note) values ($1, $2)",
        user_id,
        note
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// How many notes the caller has.
pub async fn count(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"select count(*) as "count!" from memory_notes"#)
        .fetch_one(conn)
        .await
}
