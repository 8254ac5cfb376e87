//! `memory_notes`: what the user asked the agent to remember about them.

use sqlx::PgConnection;

pub async fn add(conn: &mut PgConnection, user_id: &str, note: &str) -> sqlx::Result<()> {
    sqlx::query("insert into memory_notes (user_id, note) values ($1, $2)")
        .bind(user_id)
        .bind(note)
        .execute(conn)
        .await?;
    Ok(())
}

pub async fn list(conn: &mut PgConnection) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("select note from memory_notes order by id")
        .fetch_all(conn)
        .await
}
