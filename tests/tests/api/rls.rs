//! Row-level security proven at the SQL level: as the role API requests run under, with
//! a user id set, another user's rows are invisible and cannot be written.

use sqlx::{Connection, PgConnection};
use tests::TestServer;
use uuid::Uuid;

async fn migrated_connection() -> PgConnection {
    // Starting a server applies the migrations to its database.
    let server = TestServer::start().await;
    server.db().await
}

/// Inserts, as the owner would, a conversation and a pending request for `user`.
async fn seed_request(conn: &mut PgConnection, user: &str) -> (Uuid, Uuid) {
    let conversation = Uuid::new_v4();
    let request = Uuid::new_v4();
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(
        "select set_config('role', 'toolgate_app', true), set_config('toolgate.user_id', $1, true)",
    )
    .bind(user)
    .execute(&mut *tx)
    .await
    .expect("identity");
    sqlx::query("insert into conversations (id, user_id, title) values ($1, $2, 't')")
        .bind(conversation)
        .bind(user)
        .execute(&mut *tx)
        .await
        .expect("conversation");
    sqlx::query(
        "insert into tool_user_input_requests (id, user_id, conversation_id, tool_name, tool_call_id,
             reason, required_fields, expires_at)
         values ($1, $2, $3, 'tool', $4, 'why', '[]', now() + interval '1 hour')",
    )
    .bind(request)
    .bind(user)
    .bind(conversation)
    .bind(format!("call-{request}"))
    .execute(&mut *tx)
    .await
    .expect("request");
    tx.commit().await.expect("commit");
    (conversation, request)
}

async fn as_user<'c>(
    conn: &'c mut PgConnection,
    user: &str,
) -> sqlx::Transaction<'c, sqlx::Postgres> {
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query(
        "select set_config('role', 'toolgate_app', true), set_config('toolgate.user_id', $1, true)",
    )
    .bind(user)
    .execute(&mut *tx)
    .await
    .expect("identity");
    tx
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", Uuid::new_v4().simple())
}

#[tokio::test]
async fn bob_sees_none_of_alices_rows_even_though_the_pool_is_superuser() {
    let mut conn = migrated_connection().await;
    let is_superuser: bool =
        sqlx::query_scalar("select rolsuper from pg_roles where rolname = current_user")
            .fetch_one(&mut conn)
            .await
            .expect("role");
    let alice = unique("alice");
    let bob = unique("bob");
    let (_, alice_request) = seed_request(&mut conn, &alice).await;
    seed_request(&mut conn, &bob).await;

    let mut tx = as_user(&mut conn, &bob).await;
    let owners: Vec<String> = sqlx::query_scalar("select user_id from tool_user_input_requests")
        .fetch_all(&mut *tx)
        .await
        .expect("select");
    assert!(!owners.is_empty(), "bob sees his own row");
    assert!(
        owners.iter().all(|owner| owner == &bob),
        "bob saw {owners:?}"
    );
    let found: Option<Uuid> =
        sqlx::query_scalar("select id from tool_user_input_requests where id = $1")
            .bind(alice_request)
            .fetch_optional(&mut *tx)
            .await
            .expect("select by id");
    assert_eq!(found, None);
    let conversations: i64 =
        sqlx::query_scalar("select count(*) from conversations where user_id = $1")
            .bind(&alice)
            .fetch_one(&mut *tx)
            .await
            .expect("count");
    assert_eq!(conversations, 0);
    tx.rollback().await.expect("rollback");
    // The proof matters most when the login role could otherwise bypass RLS.
    if is_superuser {
        let all: i64 =
            sqlx::query_scalar("select count(*) from tool_user_input_requests where user_id = $1")
                .bind(&alice)
                .fetch_one(&mut conn)
                .await
                .expect("count");
        assert_eq!(
            all, 1,
            "outside the request transaction the superuser sees alice's row"
        );
    }
}

#[tokio::test]
async fn bob_cannot_insert_or_update_rows_owned_by_alice() {
    let mut conn = migrated_connection().await;
    let alice = unique("alice");
    let bob = unique("bob");
    let (alice_conversation, alice_request) = seed_request(&mut conn, &alice).await;

    let mut tx = as_user(&mut conn, &bob).await;
    let insert =
        sqlx::query("insert into conversations (id, user_id, title) values ($1, $2, 'forged')")
            .bind(Uuid::new_v4())
            .bind(&alice)
            .execute(&mut *tx)
            .await;
    let err = insert.expect_err("insert as alice must be refused");
    assert!(err.to_string().contains("row-level security"), "{err}");
    tx.rollback().await.expect("rollback");

    let mut tx = as_user(&mut conn, &bob).await;
    let updated =
        sqlx::query("update tool_user_input_requests set reason = 'hijacked' where id = $1")
            .bind(alice_request)
            .execute(&mut *tx)
            .await
            .expect("update runs");
    assert_eq!(updated.rows_affected(), 0);
    let deleted = sqlx::query("delete from conversations where id = $1")
        .bind(alice_conversation)
        .execute(&mut *tx)
        .await
        .expect("delete runs");
    assert_eq!(deleted.rows_affected(), 0);
    tx.commit().await.expect("commit");

    // Alice cannot give her row away either.
    let mut tx = as_user(&mut conn, &alice).await;
    let give_away = sqlx::query("update tool_user_input_requests set user_id = $2 where id = $1")
        .bind(alice_request)
        .bind(&bob)
        .execute(&mut *tx)
        .await;
    assert!(give_away.is_err(), "changing the owner must be refused");
    tx.rollback().await.expect("rollback");

    let reason: String =
        sqlx::query_scalar("select reason from tool_user_input_requests where id = $1")
            .bind(alice_request)
            .fetch_one(&mut conn)
            .await
            .expect("reason");
    assert_eq!(reason, "why");
}

#[tokio::test]
async fn without_a_user_id_nothing_is_visible() {
    let mut conn = migrated_connection().await;
    seed_request(&mut conn, &unique("alice")).await;
    let mut tx = conn.begin().await.expect("begin");
    sqlx::query("select set_config('role', 'toolgate_app', true)")
        .execute(&mut *tx)
        .await
        .expect("role");
    let count: i64 = sqlx::query_scalar("select count(*) from tool_user_input_requests")
        .fetch_one(&mut *tx)
        .await
        .expect("count");
    assert_eq!(count, 0);
}

#[tokio::test]
async fn every_user_owned_table_has_forced_rls() {
    let mut conn = migrated_connection().await;
    let tables: Vec<(String, bool, bool)> = sqlx::query_as(
        "select relname::text, relrowsecurity, relforcerowsecurity from pg_class
         where relnamespace = 'public'::regnamespace and relkind = 'r'
           and exists (select 1 from pg_attribute a where a.attrelid = pg_class.oid and a.attname = 'user_id')",
    )
    .fetch_all(&mut conn)
    .await
    .expect("catalog");
    assert!(tables.len() >= 6, "{tables:?}");
    for (table, enabled, forced) in tables {
        assert!(
            enabled && forced,
            "{table}: rls enabled={enabled} forced={forced}"
        );
    }
}

#[tokio::test]
async fn a_row_cannot_point_at_another_users_conversation() {
    let mut conn = migrated_connection().await;
    let alice = unique("alice");
    let bob = unique("bob");
    let (alice_conversation, _) = seed_request(&mut conn, &alice).await;
    let (bob_conversation, _) = seed_request(&mut conn, &bob).await;
    let attempts = [
        "insert into messages (id, conversation_id, user_id, seq, role, content)
             values (gen_random_uuid(), $1, $2, 99, 'user', '[]')",
        "insert into tool_user_input_requests (id, user_id, conversation_id, tool_name, tool_call_id,
             reason, required_fields, expires_at)
             values (gen_random_uuid(), $2, $1, 'tool', 'forged', 'why', '[]', now() + interval '1 hour')",
        "insert into saved_tool_inputs (user_id, conversation_id, tool_name, name, value)
             values ($2, $1, 'tool', 'realm', '\"1\"')",
        "insert into run_events (conversation_id, user_id, kind, data) values ($1, $2, 'x', '{}')",
    ];
    for sql in attempts {
        // Bob writes rows as himself, but into Alice's conversation.
        let mut tx = as_user(&mut conn, &bob).await;
        let err = sqlx::query(sql)
            .bind(alice_conversation)
            .bind(&bob)
            .execute(&mut *tx)
            .await
            .expect_err("a row in another user's conversation must be refused");
        assert!(
            err.to_string().contains("row-level security"),
            "{sql}: {err}"
        );
        tx.rollback().await.expect("rollback");
        // The same row in his own conversation is fine.
        let mut tx = as_user(&mut conn, &bob).await;
        sqlx::query(sql)
            .bind(bob_conversation)
            .bind(&bob)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|err| panic!("{sql} in his own conversation: {err}"));
        tx.rollback().await.expect("rollback");
    }
}

/// Every request borrows a pooled connection and sets who it serves for its own
/// transaction only. With one connection for all requests (the other is the event
/// listener's), requests of two users alternate on it, a failed one among them, and
/// neither ever sees the other's rows.
#[tokio::test]
async fn the_identity_never_outlives_a_request_on_a_pooled_connection() {
    use reqwest::StatusCode;
    use serde_json::json;

    let server = TestServer::start_with(
        tests::ServerOptions::default().env("TOOLGATE_DB_MAX_CONNECTIONS", "2"),
    )
    .await;
    let (_, alice) = server.new_user("pool-alice").await;
    let (_, bob) = server.new_user("pool-bob").await;
    let conversation = server.new_conversation(&alice).await;
    let (status, created) = server
        .action(
            &alice,
            json!({"action": "create_request", "conversation_id": conversation,
                "tool_name": "lookup", "tool_call_id": "call_pool", "reason": "Which account?",
                "fields": [{"name": "account", "type": "text"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    for round in 0..5 {
        // Alice's transaction fails inside Postgres (a NUL in a text column)...
        let (status, body) = server
            .action(
                &alice,
                json!({"action": "decline_request", "tool_call_id": "call_pool",
                    "message": "no\u{0}thanks"}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        // ...then succeeds; then Bob, on the same connection, sees nothing of hers.
        let (status, mine) = server
            .action(
                &alice,
                json!({"action": "get_pending", "conversation_id": conversation}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{mine}");
        assert_eq!(mine["requests"].as_array().map(Vec::len), Some(1), "{mine}");
        let (status, listed) = server
            .send("GET", "/api/conversations", Some(&bob), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{listed}");
        assert_eq!(
            listed["conversations"].as_array().map(Vec::len),
            Some(0),
            "round {round}: Bob sees Alice's conversations: {listed}"
        );
        let (status, theirs) = server
            .action(
                &bob,
                json!({"action": "get_pending", "conversation_id": conversation}),
            )
            .await;
        assert!(
            status == StatusCode::NOT_FOUND
                || theirs["requests"].as_array().is_some_and(Vec::is_empty),
            "round {round}: Bob reads Alice's requests: {status} {theirs}"
        );
        let (status, values) = server
            .action(
                &bob,
                json!({"action": "get_session_values", "conversation_id": conversation}),
            )
            .await;
        assert!(
            status == StatusCode::NOT_FOUND || values.to_string().find("account").is_none(),
            "round {round}: {status} {values}"
        );
    }
}

#[tokio::test]
async fn only_the_servers_login_may_read_as_someone_else_through_the_one_trip_reads() {
    let mut conn = migrated_connection().await;
    let alice = unique("alice");
    let bob = unique("bob");
    let (alice_conversation, _) = seed_request(&mut conn, &alice).await;

    // The server's login names the caller and reads what is theirs.
    let mine: i64 = sqlx::query_scalar("select count(*) from toolgate_pending_requests($1, $2)")
        .bind(&alice)
        .bind(alice_conversation)
        .fetch_one(&mut conn)
        .await
        .expect("the server's read");
    assert_eq!(mine, 1);
    // Named as Bob, the same read finds Alice's conversation is not his.
    let theirs = sqlx::query("select * from toolgate_pending_requests($1, $2)")
        .bind(&bob)
        .bind(alice_conversation)
        .fetch_all(&mut conn)
        .await
        .expect_err("not Bob's conversation");
    assert!(
        theirs.to_string().contains("conversation not found"),
        "{theirs}"
    );

    // Whoever runs as the app role (as any request does) cannot call any of them to name
    // another user: the identity is an argument, so only the server's login may.
    for read in [
        "toolgate_pending_requests($1, $2)",
        "toolgate_session_values($1, $2)",
        "toolgate_step_inputs($1, $2, 20)",
    ] {
        let mut tx = as_user(&mut conn, &bob).await;
        let forged = sqlx::query(&format!("select * from {read}"))
            .bind(&alice)
            .bind(alice_conversation)
            .fetch_all(&mut *tx)
            .await
            .expect_err("the app role may not name a caller");
        assert!(
            forged.to_string().contains("permission denied"),
            "{read}: {forged}"
        );
        tx.rollback().await.expect("rollback");
    }
}

/// Inserts, as the owner would, a run, two messages, a memory note and a summary in
/// `conversation` of `user`, plus a message of theirs in another conversation.
async fn seed_step(conn: &mut PgConnection, user: &str, conversation: Uuid) -> Uuid {
    let run = Uuid::new_v4();
    let other = Uuid::new_v4();
    let mut tx = as_user(conn, user).await;
    for statement in [
        "insert into conversations (id, user_id, title) values ($3, $2, 'other')",
        "insert into agent_runs (id, conversation_id, user_id, status, model)
         values ($1, $4, $2, 'running', 'offline')",
        "insert into messages (id, conversation_id, user_id, seq, role, content, text_content)
         values (gen_random_uuid(), $4, $2, 1, 'user',
                 '[{\"type\": \"text\", \"text\": \"invoice\"}]', 'invoice'),
                (gen_random_uuid(), $4, $2, 2, 'assistant',
                 '[{\"type\": \"text\", \"text\": \"noted\"}]', 'noted'),
                (gen_random_uuid(), $3, $2, 1, 'user',
                 '[{\"type\": \"text\", \"text\": \"an invoice\"}]', 'an invoice for ' || $2)",
        "insert into memory_notes (user_id, note) values ($2, 'note of ' || $2)",
        "insert into conversation_summaries (conversation_id, user_id, through_seq, summary)
         values ($4, $2, 1, 'summary of ' || $2)",
    ] {
        sqlx::query(statement)
            .bind(run)
            .bind(user)
            .bind(other)
            .bind(conversation)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|err| panic!("{statement}: {err}"));
    }
    tx.commit().await.expect("commit");
    run
}

/// A model step reads its run, messages, notes, summary and retrieval in one statement
/// that names the caller. Named as someone else, it reads nothing of the run's owner,
/// and afterwards the connection carries no identity. (That the app role cannot call it
/// to name anyone is checked with the other one-trip reads.)
#[tokio::test]
async fn a_steps_one_trip_read_is_the_callers_alone_and_leaves_no_identity_behind() {
    let mut conn = migrated_connection().await;
    let alice = unique("alice");
    let bob = unique("bob");
    let (alice_conversation, _) = seed_request(&mut conn, &alice).await;
    let alice_run = seed_step(&mut conn, &alice, alice_conversation).await;
    let (bob_conversation, _) = seed_request(&mut conn, &bob).await;
    seed_step(&mut conn, &bob, bob_conversation).await;

    // Retrieval searches the caller's other conversations: Alice's, never Bob's.
    let read = "select conversation_id, cardinality(message_ids) as messages,
                       array_to_string(notes, '|') as notes, summary,
                       array_to_string(retrieved, '|') as retrieved
                from toolgate_step_inputs($1, $2, 20)";
    let (conversation, messages, notes, summary, retrieved): (
        Uuid,
        i32,
        String,
        Option<String>,
        String,
    ) = sqlx::query_as(read)
        .bind(&alice)
        .bind(alice_run)
        .fetch_one(&mut conn)
        .await
        .expect("Alice's step");
    assert_eq!(conversation, alice_conversation);
    assert_eq!(messages, 2);
    assert_eq!(notes, format!("note of {alice}"), "her notes alone");
    assert_eq!(summary, Some(format!("summary of {alice}")));
    assert_eq!(retrieved, format!("an invoice for {alice}"));

    // Named as Bob (whose own run reads), Alice's run is not there at all.
    let bob_run: Uuid = sqlx::query_scalar("select id from agent_runs where conversation_id = $1")
        .bind(bob_conversation)
        .fetch_one(&mut conn)
        .await
        .expect("Bob's run");
    let own = sqlx::query(read)
        .bind(&bob)
        .bind(bob_run)
        .fetch_all(&mut conn)
        .await
        .expect("Bob's read of his run");
    assert_eq!(own.len(), 1);
    let stolen = sqlx::query(read)
        .bind(&bob)
        .bind(alice_run)
        .fetch_all(&mut conn)
        .await
        .expect("Bob's read of Alice's run");
    assert!(stolen.is_empty(), "Bob reads Alice's step");

    // The identity ended with the statement: the connection is the server's login again.
    let (role, who): (String, Option<String>) = sqlx::query_as(
        "select current_user::text, nullif(current_setting('toolgate.user_id', true), '')",
    )
    .fetch_one(&mut conn)
    .await
    .expect("after the reads");
    assert_ne!(role, "toolgate_app");
    assert_eq!(who, None, "the caller's id outlived the read");
}
