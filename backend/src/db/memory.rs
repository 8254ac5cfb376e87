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

pub async fn list(conn: &mut PgConnection) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!("select note from memory_notes order by id")
        .fetch_all(conn)
        .await
}
