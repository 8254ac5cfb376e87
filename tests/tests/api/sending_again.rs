//! A message sent again under its idempotency key (its answer lost on the way, or its
//! user back on the page while it was sent) is posted once.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::TestServer;
use uuid::Uuid;

async fn post_under(
    server: &TestServer,
    token: &str,
    conversation: &str,
    text: &str,
    key: Uuid,
) -> (StatusCode, Value) {
    server
        .send(
            "POST",
            &format!("/api/conversations/{conversation}/messages"),
            Some(token),
            Some(json!({ "content": text, "idempotency_key": key })),
        )
        .await
}

/// The texts of the conversation's user messages, in order.
async fn user_texts(server: &TestServer, token: &str, conversation: &str) -> Vec<String> {
    server
        .messages(token, conversation)
        .await
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| {
            m["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

async fn runs_of(server: &TestServer, conversation: &str) -> i64 {
    let mut db = server.db().await;
    sqlx::query_scalar("select count(*) from agent_runs where conversation_id = $1::uuid")
        .bind(conversation)
        .fetch_one(&mut db)
        .await
        .expect("count runs")
}

#[tokio::test]
async fn a_message_sent_again_under_its_key_is_posted_once_and_answered_as_before() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("again").await;
    let conversation = server.new_conversation(&token).await;
    let key = Uuid::new_v4();
    let (status, first) = post_under(&server, &token, &conversation, "what is 6 * 7?", key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    // At once, while its run may still be going: the first post's answer, not a 409.
    let (status, again) = post_under(&server, &token, &conversation, "what is 6 * 7?", key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    assert_eq!(again["message"]["id"], first["message"]["id"]);
    assert_eq!(again["run_id"], first["run_id"]);
    let run = first["run_id"].as_str().expect("run id");
    server.run_finished(&token, &conversation, run).await;
    // And once its run is over, when a second run could have started.
    let (status, late) = post_under(&server, &token, &conversation, "what is 6 * 7?", key).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{late}");
    assert_eq!(late["message"], first["message"]);
    assert_eq!(late["run_id"], first["run_id"]);
    assert_eq!(
        user_texts(&server, &token, &conversation).await,
        ["what is 6 * 7?"]
    );
    assert_eq!(runs_of(&server, &conversation).await, 1);
    // The same words under a new key are a new message.
    let (status, _) = post_under(
        &server,
        &token,
        &conversation,
        "what is 6 * 7?",
        Uuid::new_v4(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(user_texts(&server, &token, &conversation).await.len(), 2);
}

/// Posts `texts` under one key at once: both reach the database while the
/// conversation is held, and are let through together.
async fn at_once_under(
    server: &TestServer,
    token: &str,
    conversation: &str,
    key: Uuid,
    texts: [&str; 2],
) -> [(StatusCode, Value); 2] {
    let mut holder = server.db().await;
    let mut held = sqlx::Connection::begin(&mut holder)
        .await
        .expect("a transaction");
    let holder_pid: i32 = sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(&mut *held)
        .await
        .expect("the holder's process");
    sqlx::query("select 1 from conversations where id = $1::uuid for update")
        .bind(conversation)
        .execute(&mut *held)
        .await
        .expect("the conversation's lock");
    let mut watcher = server.db().await;
    let let_go = async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            // Those waiting for the holder, and for those.
            let waiting: i64 = sqlx::query_scalar(
                "with recursive behind(pid) as (
                     select pid from pg_stat_activity where $1 = any(pg_blocking_pids(pid))
                     union
                     select a.pid from pg_stat_activity a, behind
                     where behind.pid = any(pg_blocking_pids(a.pid)))
                 select count(*) from behind",
            )
            .bind(holder_pid)
            .fetch_one(&mut watcher)
            .await
            .expect("waiting statements");
            if waiting >= 2 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "both posts to wait");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        held.commit().await.expect("let go");
    };
    let (a, b, ()) = tokio::join!(
        post_under(server, token, conversation, texts[0], key),
        post_under(server, token, conversation, texts[1], key),
        let_go,
    );
    [a, b]
}

#[tokio::test]
async fn two_sends_at_once_under_one_key_post_one_message() {
    let server = TestServer::start().await;
    for text in ["hello", "/help"] {
        let (_, token) = server.new_user("twice").await;
        let conversation = server.new_conversation(&token).await;
        let [a, b] = at_once_under(&server, &token, &conversation, Uuid::new_v4(), [text; 2]).await;
        let expected = if text == "hello" {
            StatusCode::ACCEPTED
        } else {
            StatusCode::OK
        };
        assert_eq!(a.0, expected, "{}", a.1);
        assert_eq!(b.0, expected, "{}", b.1);
        assert_eq!(a.1, b.1);
        assert_eq!(user_texts(&server, &token, &conversation).await, [text]);
        let runs = if text == "hello" { 1 } else { 0 };
        assert_eq!(runs_of(&server, &conversation).await, runs);
    }
    // Other content under the same key at the same moment: one is posted, the other
    // refused, whichever came second.
    let (_, token) = server.new_user("twice-other").await;
    let conversation = server.new_conversation(&token).await;
    let answers = at_once_under(
        &server,
        &token,
        &conversation,
        Uuid::new_v4(),
        ["hello", "goodbye"],
    )
    .await;
    let statuses: Vec<StatusCode> = answers.iter().map(|(status, _)| *status).collect();
    assert!(
        statuses.contains(&StatusCode::ACCEPTED)
            && statuses.contains(&StatusCode::UNPROCESSABLE_ENTITY),
        "{answers:?}"
    );
    let posted = answers
        .iter()
        .find(|(status, _)| *status == StatusCode::ACCEPTED)
        .map(|(_, body)| body["message"]["content"][0]["text"].clone())
        .expect("one posted");
    assert_eq!(
        user_texts(&server, &token, &conversation).await,
        [posted.as_str().expect("text")]
    );
}

#[tokio::test]
async fn a_command_sent_again_under_its_key_does_its_work_once() {
    let server = TestServer::start().await;
    let (user, token) = server.new_user("command").await;
    let conversation = server.new_conversation(&token).await;
    let key = Uuid::new_v4();
    let text = "/remember I prefer metric units";
    let (status, first) = post_under(&server, &token, &conversation, text, key).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, again) = post_under(&server, &token, &conversation, text, key).await;
    assert_eq!(status, StatusCode::OK, "{again}");
    assert_eq!(again["message"], first["message"]);
    assert_eq!(again["reply"], first["reply"]);
    assert!(again.get("run_id").is_none(), "{again}");
    let mut db = server.db().await;
    let notes: i64 = sqlx::query_scalar("select count(*) from memory_notes where user_id = $1")
        .bind(&user)
        .fetch_one(&mut db)
        .await
        .expect("count notes");
    assert_eq!(notes, 1);
    assert_eq!(server.messages(&token, &conversation).await.len(), 2);
}

#[tokio::test]
async fn a_key_used_for_another_message_is_a_422_naming_it_and_posts_nothing() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("reused").await;
    let conversation = server.new_conversation(&token).await;
    let key = Uuid::new_v4();
    let (status, first) = post_under(&server, &token, &conversation, "/help", key).await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let (status, body) = post_under(&server, &token, &conversation, "/help me more", key).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["fields"]["idempotency_key"].is_string(),
        "{body}"
    );
    assert_eq!(user_texts(&server, &token, &conversation).await, ["/help"]);
}

#[tokio::test]
async fn another_users_key_answers_nothing_of_theirs() {
    let server = TestServer::start().await;
    let (_, alice) = server.new_user("alice").await;
    let (_, mallory) = server.new_user("mallory").await;
    let theirs = server.new_conversation(&alice).await;
    let key = Uuid::new_v4();
    let (status, _) = post_under(
        &server,
        &alice,
        &theirs,
        "/remember my PIN hint is blue",
        key,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // Alice's conversation under Alice's key: not found, as any conversation not theirs.
    let (status, body) = post_under(
        &server,
        &mallory,
        &theirs,
        "/remember my PIN hint is blue",
        key,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(!body.to_string().contains("blue"), "{body}");
    let (status, body) = post_under(&server, &mallory, &theirs, "something else", key).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // In Mallory's own conversation the key is only a key: a message of Mallory's own.
    let own = server.new_conversation(&mallory).await;
    let (status, body) = post_under(&server, &mallory, &own, "/help", key).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(user_texts(&server, &mallory, &own).await, ["/help"]);
    assert_eq!(
        user_texts(&server, &alice, &theirs).await,
        ["/remember my PIN hint is blue"]
    );
}

#[tokio::test]
async fn a_key_that_is_no_uuid_is_a_400_naming_it() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("badkey").await;
    let conversation = server.new_conversation(&token).await;
    for key in [json!("not-a-uuid"), json!("3f2a\u{0}"), json!(7), json!("")] {
        let (status, body) = server
            .send(
                "POST",
                &format!("/api/conversations/{conversation}/messages"),
                Some(&token),
                Some(json!({ "content": "hello", "idempotency_key": key })),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{key}: {body}");
        assert!(
            body.to_string().contains("idempotency_key"),
            "{key}: {body}"
        );
    }
    assert!(user_texts(&server, &token, &conversation).await.is_empty());
}
