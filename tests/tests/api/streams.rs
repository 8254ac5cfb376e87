//! The event stream as a contract: a connected stream receives every event exactly once
//! and in order while many transactions write at the same moment; expiry reaches the
//! stream when it happens, and so does a deletion; an outage answers fast; a stopping server finishes, hands
//! over or fails its runs and says so.

use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::join_all;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{MockLlm, MockReply, ServerOptions, TestServer};

fn text_field_request(conversation: &str, tool_call_id: &str) -> Value {
    json!({"action": "create_request", "conversation_id": conversation, "tool_name": "lookup",
        "tool_call_id": tool_call_id, "reason": "Which account?",
        "fields": [{"name": "account", "type": "text"}]})
}

/// Reads a live stream from the start until `done` accepts an event, in a task of its
/// own, so writers can run meanwhile.
fn collect_live(
    server: &TestServer,
    token: &str,
    conversation: &str,
    done: impl Fn(&Value) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<Vec<Value>> {
    let request = server
        .client
        .get(server.url(&format!("/api/conversations/{conversation}/events?after=0")))
        .bearer_auth(token);
    tokio::spawn(async move {
        let response = request.send().await.expect("event stream");
        assert_eq!(response.status(), StatusCode::OK);
        let mut stream = response.bytes_stream();
        let (mut buffer, mut seen) = (String::new(), Vec::new());
        while let Ok(Some(Ok(chunk))) =
            tokio::time::timeout(Duration::from_secs(60), stream.next()).await
        {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                for data in frame.lines().filter_map(|l| l.strip_prefix("data: ")) {
                    if let Ok(event) = serde_json::from_str::<Value>(data) {
                        let last = done(&event);
                        seen.push(event);
                        if last {
                            return seen;
                        }
                    }
                }
            }
        }
        panic!("the live stream ended early after {} events", seen.len());
    })
}

fn ids(events: &[Value]) -> Vec<i64> {
    events.iter().filter_map(|e| e["id"].as_i64()).collect()
}

fn is_resolution_of(event: &Value, tool_call_id: &str) -> bool {
    event["type"] == "input_resolved" && event["request"]["tool_call_id"] == tool_call_id
}

#[tokio::test]
async fn a_live_stream_gets_every_event_once_and_in_order_while_many_transactions_write() {
    const PARALLEL_CALLS: usize = 8;
    const RACERS: usize = 30;
    const ROUNDS: usize = 8;
    let calls: Vec<(String, String, Value)> = (0..PARALLEL_CALLS)
        .map(|i| {
            (
                format!("call_sum_{i}"),
                "calculator".to_owned(),
                json!({"expression": format!("{i} + {i}")}),
            )
        })
        .collect();
    let llm = MockLlm::start(vec![
        MockReply::ToolCalls(calls),
        MockReply::Text("All the sums are done.".into()),
    ])
    .await;
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_LLM_BASE_URL", &llm.base)
            .env("TOOLGATE_LLM_API_KEY", "sk-test-key")
            .env("TOOLGATE_RATE_BURST", "1000")
            // Every racer's request waits in the one conversation at once.
            .env("TOOLGATE_MAX_WAITING_REQUESTS", "1000"),
    )
    .await;
    let (_, token) = server.new_user("streams").await;
    let conversation = server.new_conversation(&token).await;
    let names: Vec<String> = (0..RACERS * ROUNDS).map(|i| format!("race_{i}")).collect();
    for id in names.iter().map(String::as_str).chain(["sentinel"]) {
        let (status, body) = server
            .action(&token, text_field_request(&conversation, id))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let reader = collect_live(&server, &token, &conversation, |e| {
        is_resolution_of(e, "sentinel")
    });

    // A run with parallel tool calls, and rounds of racing submits, all at once.
    let (status, started) = server
        .post_message(&token, &conversation, json!("Add these up"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{started}");
    for round in names.chunks(RACERS) {
        let submits = round.iter().map(|id| {
            server.action(
                &token,
                json!({"action": "submit_response", "tool_call_id": id,
                    "user_inputs": {"account": id}}),
            )
        });
        for (status, body) in join_all(submits).await {
            assert_eq!(status, StatusCode::OK, "{body}");
        }
    }
    let run_id = started["run_id"].as_str().expect("run id");
    let run = server.run_finished(&token, &conversation, run_id).await;
    assert_eq!(run["status"], "completed", "{run}");
    let (status, body) = server
        .action(
            &token,
            json!({"action": "cancel_request", "tool_call_id": "sentinel"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    let replayed = server
        .events_until(&token, &conversation, 0, Duration::from_secs(30), |e| {
            is_resolution_of(e, "sentinel")
        })
        .await;
    let live = reader.await.expect("live stream");
    assert_eq!(
        ids(&live),
        ids(&replayed),
        "the live stream must carry exactly what a replay from the start carries"
    );
    assert!(
        ids(&live).windows(2).all(|pair| pair[0] < pair[1]),
        "ids in strictly increasing order: {:?}",
        ids(&live)
    );
    let count = |kind: &str| live.iter().filter(|e| e["type"] == kind).count();
    assert_eq!(count("input_resolved"), RACERS * ROUNDS + 1);
    assert_eq!(count("tool_call_started"), PARALLEL_CALLS);
    assert_eq!(count("tool_call_finished"), PARALLEL_CALLS);
}

/// The mechanism under the test above, without a race to win: a second writer to the
/// same conversation waits for the first one's commit before it draws an event id.
#[tokio::test]
async fn a_second_writer_of_a_conversation_draws_its_event_id_after_the_first_commits() {
    let server = TestServer::start().await;
    let (user, token) = server.new_user("order").await;
    let conversation = server.new_conversation(&token).await;
    let conversation: uuid::Uuid = conversation.parse().expect("uuid");
    let pool = sqlx::PgPool::connect(&server.database_url)
        .await
        .expect("pool");
    let kind = protocol::chat::EventKind::TextDelta {
        delta: "first".into(),
    };
    let mut first = backend::db::begin_as_user(&pool, &user).await.expect("tx");
    let first_id = backend::db::events::append(&mut first, conversation, &user, None, &kind)
        .await
        .expect("first event");
    let second = {
        let (pool, user) = (pool.clone(), user.clone());
        tokio::spawn(async move {
            let mut tx = backend::db::begin_as_user(&pool, &user).await.expect("tx");
            let kind = protocol::chat::EventKind::TextDelta {
                delta: "second".into(),
            };
            let id = backend::db::events::append(&mut tx, conversation, &user, None, &kind)
                .await
                .expect("second event");
            tx.commit().await.expect("commit");
            id
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !second.is_finished(),
        "the second writer must wait while the first holds the conversation"
    );
    first.commit().await.expect("commit");
    let second_id = second.await.expect("second writer");
    assert!(second_id > first_id, "{first_id} then {second_id}");
}

#[tokio::test]
async fn expiry_reaches_the_stream_when_it_happens_not_at_the_next_sweep() {
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_INPUT_TTL", "6s")).await;
    let (_, token) = server.new_user("expiry").await;
    let conversation = server.new_conversation(&token).await;
    // Three requests 2 s apart: a sweep every 5 s (the most it waits) cannot expire
    // each within 2.5 s of its expiry, which leaves a busy machine room.
    for i in 0..3 {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let (status, body) = server
            .action(
                &token,
                text_field_request(&conversation, &format!("soon_{i}")),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    server
        .events_until(&token, &conversation, 0, Duration::from_secs(30), |e| {
            is_resolution_of(e, "soon_2")
        })
        .await;
    let mut db = server.db().await;
    let lags: Vec<f64> = sqlx::query_scalar(
        "select extract(epoch from completed_at - expires_at)::float8
         from tool_user_input_requests where status = 'expired' order by tool_call_id",
    )
    .fetch_all(&mut db)
    .await
    .expect("expired requests");
    assert_eq!(lags.len(), 3, "{lags:?}");
    assert!(
        lags.iter().all(|lag| (0.0..2.5).contains(lag)),
        "each request ends within 2.5 s of its expiry: {lags:?}"
    );
}

/// A stream is read only as long as the token that opened it is good: a revoked
/// user's client, or a leaked stream token, does not follow the conversation forever.
#[tokio::test]
async fn a_stream_ends_when_the_token_that_opened_it_expires() {
    let server = TestServer::start().await;
    let (user, token) = server.new_user("ending").await;
    let conversation = server.new_conversation(&token).await;
    let expires = tests::now() + 3;
    let short = tests::sign_token(
        &json!({"sub": user, "exp": expires}),
        tests::JWT_SECRET,
        jsonwebtoken::Algorithm::HS256,
    );
    // Asked for with the short token, it expires with it.
    let short_stream = server.stream_token(&short, &conversation).await;
    let long_stream = server.stream_token(&token, &conversation).await;
    let path = format!("/api/conversations/{conversation}/events");
    let open = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.expect("event stream");
        assert_eq!(response.status(), StatusCode::OK);
        response.bytes_stream()
    };
    let by_bearer = open(server.client.get(server.url(&path)).bearer_auth(&short)).await;
    let by_stream_token = open(
        server
            .client
            .get(server.url(&format!("{path}?token={short_stream}"))),
    )
    .await;
    let mut by_good_token = open(
        server
            .client
            .get(server.url(&format!("{path}?token={long_stream}"))),
    )
    .await;
    for (how, mut stream) in [("bearer", by_bearer), ("stream token", by_stream_token)] {
        let Some(text) = text_until_it_ends(&mut stream, Duration::from_secs(20)).await else {
            panic!("the {how} stream is still open");
        };
        // Its last word says why, so a client can open it again without alarm.
        assert!(
            text.trim_end()
                .ends_with("event: expired\ndata: {\"reason\":\"token_expired\"}"),
            "the {how} stream ends saying its token expired: {text:?}"
        );
        assert!(
            tests::now() >= expires,
            "the {how} stream ended before its token did"
        );
    }
    // A stream whose token is good goes on, and sees what is written now.
    let (status, body) = server
        .action(&token, text_field_request(&conversation, "after_expiry"))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let seen = tokio::time::timeout(Duration::from_secs(20), async {
        let mut text = String::new();
        while let Some(Ok(chunk)) = by_good_token.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
            if text.contains("after_expiry") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        seen,
        Ok(true),
        "the stream with a good token still delivers"
    );
}

/// A stream of a conversation deleted elsewhere (another tab) ends at once,
/// saying why, instead of staying open, and live, until its token expires; a stream of
/// the user's other conversation goes on.
#[tokio::test]
async fn a_stream_ends_soon_after_its_conversation_is_deleted() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("deleted-stream").await;
    let deleted = server.new_conversation(&token).await;
    let kept = server.new_conversation(&token).await;
    let mut deleted_stream = open_stream(&server, &token, &deleted, 0).await;
    // One that says it has seen the highest id there is is told all the same.
    let mut far_stream = open_stream(&server, &token, &deleted, i64::MAX).await;
    let mut kept_stream = open_stream(&server, &token, &kept, 0).await;

    let path = format!("/api/conversations/{deleted}");
    let (status, body) = server.send("DELETE", &path, Some(&token), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    // Told at once, well before the streams' periodic look (every 5 s) would find it.
    for stream in [&mut deleted_stream, &mut far_stream] {
        let Some(text) = text_until_it_ends(stream, Duration::from_secs(3)).await else {
            panic!("a stream of the deleted conversation is still open");
        };
        assert!(
            text.trim_end()
                .ends_with("event: deleted\ndata: {\"reason\":\"conversation_deleted\"}"),
            "the stream ends saying its conversation was deleted: {text:?}"
        );
    }
    // Past its next periodic look (every 5 s), the other stream is still open and was
    // told of no deletion.
    let mut seen = String::new();
    let watched = tokio::time::timeout(Duration::from_secs(7), async {
        while let Some(Ok(chunk)) = kept_stream.next().await {
            seen.push_str(&chunk);
        }
    })
    .await;
    assert!(
        watched.is_err(),
        "the other conversation's stream ended: {seen:?}"
    );
    assert!(!seen.contains("deleted"), "{seen:?}");
}

/// Everything `stream` sends until it ends; `None` while it is still open after `within`.
async fn text_until_it_ends<T: AsRef<[u8]>>(
    stream: &mut (impl futures::Stream<Item = reqwest::Result<T>> + Unpin),
    within: Duration,
) -> Option<String> {
    tokio::time::timeout(within, async {
        let mut text = String::new();
        while let Some(Ok(chunk)) = stream.next().await {
            text.push_str(&String::from_utf8_lossy(chunk.as_ref()));
        }
        text
    })
    .await
    .ok()
}

/// A stream of `conversation`'s events, from after the event `after`.
async fn open_stream(
    server: &TestServer,
    token: &str,
    conversation: &str,
    after: i64,
) -> impl futures::Stream<Item = reqwest::Result<String>> + Unpin {
    let stream_token = server.stream_token(token, conversation).await;
    let path =
        format!("/api/conversations/{conversation}/events?token={stream_token}&after={after}");
    let response = server
        .client
        .get(server.url(&path))
        .send()
        .await
        .expect("event stream");
    assert_eq!(response.status(), StatusCode::OK);
    response
        .bytes_stream()
        .map(|chunk| chunk.map(|bytes| String::from_utf8_lossy(&bytes).into_owned()))
}

/// Any session on the database can notify the events channel (Postgres checks no
/// privilege for it): a notice that a conversation still there is gone, or one naming
/// an event id no event has, ends none of its streams, and the streams go on getting
/// its events.
#[tokio::test]
async fn a_forged_notice_on_the_events_channel_ends_no_stream() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("forged-notice").await;
    let conversation = server.new_conversation(&token).await;
    let mut stream = open_stream(&server, &token, &conversation, 0).await;
    let mut db = tests::db_connection_to(&server.database_url)
        .await
        .expect("database");
    for forged in [
        format!("{conversation} gone"),
        format!("{conversation} {}", i64::MIN),
        format!("{conversation} 0"),
    ] {
        sqlx::query("select pg_notify('toolgate_events', $1)")
            .bind(&forged)
            .execute(&mut db)
            .await
            .expect("notify");
    }
    // Past a periodic look (every 5 s): still open, told of no deletion.
    let mut seen = String::new();
    let watched = tokio::time::timeout(Duration::from_secs(6), async {
        while let Some(Ok(chunk)) = stream.next().await {
            seen.push_str(&chunk);
        }
    })
    .await;
    assert!(watched.is_err(), "the stream ended: {seen:?}");
    assert!(!seen.contains("deleted"), "{seen:?}");
    // And the listener still hears: a message's events arrive, within a window that
    // holds none of the stream's periodic looks (5 and 10 s after it opened).
    let path = format!("/api/conversations/{conversation}/messages");
    let (status, body) = server
        .send(
            "POST",
            &path,
            Some(&token),
            Some(json!({"content": "hello"})),
        )
        .await;
    assert!(status.is_success(), "{status} {body}");
    let arrived = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some(Ok(chunk)) = stream.next().await {
            seen.push_str(&chunk);
            if seen.contains("event: run_started") {
                return;
            }
        }
    })
    .await;
    assert!(
        arrived.is_ok(),
        "no event came after the forged notices: {seen:?}"
    );
}

#[tokio::test]
async fn a_database_outage_answers_503_within_about_a_second() {
    let proxy = tests::TcpProxy::start_to_database().await;
    let database = tests::test_database().await.expect("test database");
    let server = TestServer::start_with(
        ServerOptions {
            database_url: Some(tests::with_host_port(&database, "127.0.0.1", proxy.port)),
            ..ServerOptions::default()
        }
        .without("TOOLGATE_DB_ACQUIRE_TIMEOUT"),
    )
    .await;
    let (_, token) = server.new_user("outage").await;
    proxy.stop();
    let started = Instant::now();
    let (status, body) = server
        .send("GET", "/api/conversations", Some(&token), None)
        .await;
    let waited = started.elapsed();
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "database_unavailable", "{body}");
    // The pool's acquire timeout is 1 s by default (it was 5 s): generous room for a
    // slow machine, none for the old wait.
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
}

fn mock_model_options(llm: &MockLlm) -> ServerOptions {
    ServerOptions::default()
        .env("TOOLGATE_LLM_BASE_URL", &llm.base)
        .env("TOOLGATE_LLM_API_KEY", "sk-test-key")
}

async fn wait_for_model_call(llm: &MockLlm, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while llm.requests().len() < count {
        assert!(Instant::now() < deadline, "the model was never called");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn sigterm_mid_step_lets_the_step_finish_and_another_server_goes_on_with_the_run() {
    let llm = MockLlm::start(vec![
        MockReply::Delayed(
            Duration::from_secs(2),
            Box::new(MockReply::ToolCalls(vec![(
                "call_sum".into(),
                "calculator".into(),
                json!({"expression": "20 + 22"}),
            )])),
        ),
        MockReply::Text("The sum is 42.".into()),
    ])
    .await;
    let mut first = TestServer::start_with(mock_model_options(&llm)).await;
    let (_, token) = first.new_user("handover").await;
    let conversation = first.new_conversation(&token).await;
    let run_id = first
        .start_run(&token, &conversation, json!("What is 20 + 22?"))
        .await;
    wait_for_model_call(&llm, 1).await;
    let exit = first.terminate().await.expect("stops");
    assert!(exit.success(), "{exit}\n{}", first.logs());
    assert!(
        first.logs().contains("handed the run over"),
        "{}",
        first.logs()
    );

    let mut db = first.db().await;
    let (status, handed_over): (String, bool) =
        sqlx::query_as("select status, handed_over from agent_runs where id = $1::uuid")
            .bind(&run_id)
            .fetch_one(&mut db)
            .await
            .expect("run row");
    assert_eq!((status.as_str(), handed_over), ("running", true));

    let second = TestServer::start_with(ServerOptions {
        database_url: Some(first.database_url.clone()),
        ..mock_model_options(&llm)
    })
    .await;
    let run = second.run_finished(&token, &conversation, &run_id).await;
    assert_eq!(run["status"], "completed", "{run}\n{}", second.logs());
    let messages = second.messages(&token, &conversation).await;
    let texts: Vec<String> = messages.iter().map(|m| m["content"].to_string()).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("tool_result") && t.contains("42")),
        "the step that ran during the stop kept its tool result: {texts:#?}"
    );
    assert!(
        texts.iter().any(|t| t.contains("The sum is 42.")),
        "{texts:#?}"
    );
}

#[tokio::test]
async fn a_run_still_mid_step_when_the_grace_period_ends_is_failed_and_its_user_told() {
    let llm = MockLlm::start(vec![MockReply::Hang(Duration::from_secs(60))]).await;
    let mut server =
        TestServer::start_with(mock_model_options(&llm).env("TOOLGATE_SHUTDOWN_GRACE", "1s")).await;
    let (_, token) = server.new_user("grace").await;
    let conversation = server.new_conversation(&token).await;
    let run_id = server
        .start_run(
            &token,
            &conversation,
            json!("Think about it for a long time"),
        )
        .await;
    wait_for_model_call(&llm, 1).await;
    server
        .terminate()
        .await
        .expect("stops within its grace period");

    let mut db = server.db().await;
    let (status, error): (String, Option<String>) =
        sqlx::query_as("select status, error from agent_runs where id = $1::uuid")
            .bind(&run_id)
            .fetch_one(&mut db)
            .await
            .expect("run row");
    assert_eq!(
        status, "failed",
        "failed at once, not when its lease lapses"
    );
    let told: Vec<Value> = sqlx::query_scalar(
        "select data from run_events where run_id = $1::uuid and kind = 'run_status' order by id",
    )
    .bind(&run_id)
    .fetch_all(&mut db)
    .await
    .expect("events");
    let last = told.last().cloned().unwrap_or_default();
    assert_eq!(last["run"]["status"], "failed", "{told:#?}");
    let error = error.unwrap_or_default();
    assert!(
        error.contains("server stopped during this step") && last["run"]["error"] == error,
        "{error} / {last}"
    );
}
