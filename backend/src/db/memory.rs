//! `memory_notes`: what the user asked the agent to remember about them.

use sqlx::PgConnection;

/// Adds a note unless the user already keeps `most` of them; whether it was added.
/// The count and the insert run under a lock on the user's id until the transaction
/// ends, so notes sent side by side wait their turn instead of all reading the same
/// count and passing the limit together. Call it inside a transaction.
pub async fn add_within(
    conn: &mut PgConnection,
    user_id: &str,
    note: &str,
    most: u32,
) -> sqlx::Result<bool> {
    sqlx::query!(
        "select pg_advisory_xact_lock(hashtextextended($1, 7302))",
        user_id
    )
    .execute(&mut *conn)
    .await?;
    let added = sqlx::query!(
        "insert into memory_notes (user_id, note)
         select $1, $2 where (select count(*) from memory_notes) < $3",
        user_id,
        note,
        i64::from(most),
    )
    .execute(conn)
    .await?;
    Ok(added.rows_affected() == 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db;

    /// Two notes sent at the same moment with room for one: the second waits for the
    /// first to commit, then finds no room, instead of both reading "one free".
    #[tokio::test]
    async fn notes_sent_side_by_side_never_pass_the_limit() {
        let pool = db::tests::scratch_pool().await;
        let mut first = db::begin_as_user(&pool, "kim").await.expect("tx");
        assert!(add_within(&mut first, "kim", "one", 1).await.expect("add"));
        let second = tokio::spawn({
            let pool = pool.clone();
            async move {
                let mut tx = db::begin_as_user(&pool, "kim").await.expect("tx");
                let added = add_within(&mut tx, "kim", "two", 1).await.expect("add");
                tx.commit().await.expect("commit");
                added
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        assert!(!second.is_finished(), "the second waits for the first");
        first.commit().await.expect("commit");
        assert!(!second.await.expect("task"), "no room was left");
        // Exactly one was kept: room for a second, and then for no third.
        let mut tx = db::begin_as_user(&pool, "kim").await.expect("tx");
        assert!(add_within(&mut tx, "kim", "two", 2).await.expect("add"));
        assert!(!add_within(&mut tx, "kim", "three", 2).await.expect("add"));
        // Another user's notes are theirs: kim's limit does not count them.
        let mut other = db::begin_as_user(&pool, "lee").await.expect("tx");
        assert!(add_within(&mut other, "lee", "mine", 1).await.expect("add"));
    }
}
