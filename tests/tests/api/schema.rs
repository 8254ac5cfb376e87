//! What the database holds, read strictly and kept in bounds: a status or role the
//! server does not know is an error (never a guess), and the stream events of
//! long-finished runs are pruned while live streams keep getting everything new.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{ServerOptions, TestServer};

/// Inserts a row the server's own code could never write, once the column's check is
/// gone (a newer server's value, a hand edit).
async fn write_behind_the_servers_back(server: &TestServer, statements: &[String]) {
    // One transaction, so a background pass sees all of the rows or none of them.
    let mut db = server.db().await;
    let mut tx = sqlx::Connection::begin(&mut db).await.expect("begin");
    for statement in statements {
        sqlx::query(statement)
            .execute(&mut *tx)
            .await
            .unwrap_or_else(|err| panic!("{statement}: {err}"));
    }
    tx.commit().await.expect("commit");
}

#[tokio::test]
async fn an_unknown_role_or_request_status_in_the_database_is_an_error_not_a_guess() {
    let server = TestServer::start().await;
    let (user, token) = server.new_user("strict").await;
    let conversation = server.new_conversation(&token).await;
    write_behind_the_servers_back(
        &server,
        &[
            "alter table messages drop constraint messages_role_check".to_owned(),
            format!(
                "insert into messages (id, conversation_id, user_id, seq, role, content)
                 values (gen_random_uuid(), '{conversation}', '{user}', 1, 'robot', '[]')"
            ),
        ],
    )
    .await;
    let (status, body) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}/messages"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert_eq!(body["error"]["code"], "internal_error");
    assert!(!body.to_string().contains("robot"), "no internals: {body}");
    assert!(
        server.logs().contains("unknown message role"),
        "{}",
        server.logs()
    );

    // A request whose status is not one the server knows is neither pending (answerable)
    // nor settled (a 409): it is refused as the fault it is.
    let (status, created) = server
        .action(
            &token,
            json!({"action": "create_request", "conversation_id": conversation,
                "tool_name": "lookup", "tool_call_id": "call_strict", "reason": "Which account?",
                "fields": [{"name": "account", "type": "text"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    write_behind_the_servers_back(
        &server,
        &[
            "alter table tool_user_input_requests
                 drop constraint tool_user_input_requests_status_check"
                .to_owned(),
            "update tool_user_input_requests set status = 'snoozed'
                 where tool_call_id = 'call_strict'"
                .to_owned(),
        ],
    )
    .await;
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": "call_strict",
                "user_inputs": {"account": "A-1"}}),
        )
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(
        !body.to_string().contains("snoozed"),
        "no internals: {body}"
    );
    assert!(server.logs().contains("unknown request status"));
}

/// An event row as the server writes one, `age` old.
fn event(conversation: &str, user: &str, run: Option<&str>, age: &str) -> String {
    let data = json!({"type": "elicitation_completed", "request_id": uuid::Uuid::new_v4(),
        "tool_call_id": "call_x"});
    let run = run.map_or("null".to_owned(), |r| format!("'{r}'"));
    format!(
        "insert into run_events (conversation_id, user_id, run_id, kind, data, data_bytes, created_at)
         values ('{conversation}', '{user}', {run}, 'elicitation_completed', '{data}', {},
                 now() - interval '{age}')",
        data.to_string().len()
    )
}

fn run(id: &str, conversation: &str, user: &str, finished_ago: &str) -> String {
    format!(
        "insert into agent_runs (id, conversation_id, user_id, status, created_at, updated_at)
         values ('{id}', '{conversation}', '{user}', 'completed', now() - interval '2 hours',
                 now() - interval '{finished_ago}')"
    )
}

async fn count(server: &TestServer, sql: &str) -> i64 {
    let mut db = server.db().await;
    sqlx::query_scalar(sql)
        .fetch_one(&mut db)
        .await
        .expect("count")
}

#[tokio::test]
async fn events_of_long_finished_runs_are_pruned_and_a_live_stream_misses_nothing_new() {
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_EVENT_RETENTION", "30m"))
            .await;
    let (user, token) = server.new_user("prune").await;
    let conversation = server.new_conversation(&token).await;
    let (old_run, recent_run) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let (old_run, recent_run) = (old_run.to_string(), recent_run.to_string());
    write_behind_the_servers_back(
        &server,
        &[
            run(&old_run, &conversation, &user, "1 hour"),
            // A long run that finished a minute ago: its old events stay.
            run(&recent_run, &conversation, &user, "1 minute"),
            event(&conversation, &user, Some(&old_run), "1 hour"),
            event(&conversation, &user, Some(&old_run), "1 hour"),
            event(&conversation, &user, Some(&recent_run), "1 hour"),
            event(&conversation, &user, None, "1 hour"),
            event(&conversation, &user, None, "1 minute"),
        ],
    )
    .await;
    let kept_ids: Vec<i64> = {
        let mut db = server.db().await;
        sqlx::query_scalar(&format!(
            "select id from run_events where run_id = '{recent_run}'
                or (run_id is null and created_at > now() - interval '30 minutes')
             order by id"
        ))
        .fetch_all(&mut db)
        .await
        .expect("ids")
    };

    // A stream is connected before the pass and stays connected through it.
    let last_id = count(&server, "select max(id) from run_events").await;
    let live = {
        let request = server
            .client
            .get(server.url(&format!(
                "/api/conversations/{conversation}/events?after={last_id}"
            )))
            .bearer_auth(&token);
        tokio::spawn(async move {
            use futures::StreamExt;
            let response = request.send().await.expect("stream");
            let mut stream = response.bytes_stream();
            let (mut buffer, mut seen) = (String::new(), Vec::<Value>::new());
            while let Ok(Some(Ok(chunk))) =
                tokio::time::timeout(Duration::from_secs(30), stream.next()).await
            {
                buffer.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(end) = buffer.find("\n\n") {
                    let frame: String = buffer.drain(..end + 2).collect();
                    for data in frame.lines().filter_map(|l| l.strip_prefix("data: ")) {
                        if let Ok(event) = serde_json::from_str::<Value>(data) {
                            let last = event["type"] == "input_resolved";
                            seen.push(event);
                            if last {
                                return seen;
                            }
                        }
                    }
                }
            }
            seen
        })
    };

    let deadline = Instant::now() + Duration::from_secs(20);
    while count(
        &server,
        &format!("select count(*) from run_events where run_id = '{old_run}'"),
    )
    .await
        > 0
    {
        assert!(
            Instant::now() < deadline,
            "nothing pruned\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        count(&server, "select count(*) from run_events where run_id is null and created_at < now() - interval '30 minutes'").await,
        0,
        "old events of no run go too"
    );

    // New events after the pass reach the live stream, once each and in order.
    let (status, created) = server
        .action(
            &token,
            json!({"action": "create_request", "conversation_id": conversation,
                "tool_name": "lookup", "tool_call_id": "call_new", "reason": "Which account?",
                "fields": [{"name": "account", "type": "text"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, _) = server
        .action(
            &token,
            json!({"action": "cancel_request", "tool_call_id": "call_new"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let seen = live.await.expect("live stream");
    let kinds: Vec<&str> = seen.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(kinds, ["input_requested", "input_resolved"], "{seen:?}");

    // A replay from the start has exactly what was kept, then the new events.
    let replay = server
        .events_until(&token, &conversation, 0, Duration::from_secs(10), |e| {
            e["type"] == "input_resolved"
        })
        .await;
    let replay_ids: Vec<i64> = replay.iter().filter_map(|e| e["id"].as_i64()).collect();
    let live_ids: Vec<i64> = seen.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert_eq!(replay_ids, [kept_ids, live_ids].concat(), "{replay:?}");
}
