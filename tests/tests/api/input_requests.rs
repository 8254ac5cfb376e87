use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{ServerOptions, TestServer};

fn realm_request(conversation_id: &str, tool_call_id: &str) -> Value {
    json!({
        "action": "create_request",
        "conversation_id": conversation_id,
        "tool_name": "quickbooks_profit_and_loss",
        "tool_call_id": tool_call_id,
        "reason": "QuickBooks API requests require your Company ID (Realm ID)",
        "fields": [{
            "name": "quickbooks_realm_id", "label": "QuickBooks Company ID",
            "description": "Find this in your QuickBooks URL", "type": "text",
            "required": true, "placeholder": "9130346988354456", "validation": "^[0-9]{10,20}$"
        }],
        "save_for_session": true
    })
}

fn call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// A call of the calculator with `arguments` through `/api/tools/execute`.
async fn calculate(
    server: &TestServer,
    token: &str,
    conversation: &str,
    arguments: Value,
) -> (StatusCode, Value) {
    server
        .execute_tool(token, conversation, "calculator", &call_id(), arguments)
        .await
}

/// A request of the user's for a realm id, waiting: its tool call id.
async fn pending_request(server: &TestServer, token: &str, conversation: &str) -> String {
    let id = call_id();
    let (status, created) = server.action(token, realm_request(conversation, &id)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    id
}

/// A connection of its own whose open transaction holds the conversation's writer
/// lock, as a writer of the conversation would; `rollback` on it lets go.
async fn holding_the_writer_lock(server: &TestServer, conversation: &str) -> sqlx::PgConnection {
    let mut holder = server.db().await;
    sqlx::query("begin").execute(&mut holder).await.unwrap();
    sqlx::query("select 1 from conversations where id = $1::uuid for no key update")
        .bind(conversation)
        .execute(&mut holder)
        .await
        .unwrap();
    holder
}

async fn user_with_conversation(server: &TestServer) -> (String, String) {
    let (_, token) = server.new_user("user").await;
    let conversation = server.new_conversation(&token).await;
    (token, conversation)
}

#[tokio::test]
async fn create_then_submit_completes_and_remembers_for_the_session() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = call_id();
    let (status, created) = server
        .action(&token, realm_request(&conversation, &id))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    assert_eq!(created["status"], "pending");
    assert_eq!(created["save_for"], "session");
    assert!(created["expires_at"].is_string());

    let (status, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(pending["requests"][0]["tool_call_id"], id.as_str());

    let (status, done) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
            "user_inputs": {"quickbooks_realm_id": "9130346988354456"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["request"]["status"], "completed");
    assert_eq!(
        done["request"]["user_inputs"]["quickbooks_realm_id"],
        "9130346988354456"
    );

    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(pending["requests"], json!([]));
    let (status, saved) = server
        .action(
            &token,
            json!({"action": "get_session_values", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(saved["values"][0]["name"], "quickbooks_realm_id");
    assert_eq!(saved["values"][0]["value"], "9130346988354456");
    assert_eq!(saved["values"][0]["scope"], "session");

    let (status, cleared) = server
        .action(
            &token,
            json!({"action": "clear_session_values", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(
        (status, cleared["cleared"].clone()),
        (StatusCode::OK, json!(1))
    );
    let (_, saved) = server
        .action(
            &token,
            json!({"action": "get_session_values", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(saved["values"], json!([]));
}

#[tokio::test]
async fn pending_requests_are_listed_oldest_first() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let ids = [call_id(), call_id(), call_id()];
    for id in &ids {
        let (status, _) = server
            .action(&token, realm_request(&conversation, id))
            .await;
        assert_eq!(status, StatusCode::CREATED);
    }
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    let listed: Vec<&str> = pending["requests"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|r| r["tool_call_id"].as_str())
        .collect();
    assert_eq!(listed, ids.iter().map(String::as_str).collect::<Vec<_>>());
}

#[tokio::test]
async fn each_bad_definition_is_a_422_naming_the_field() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let cases = [
        (
            json!({"name": "a", "type": "colour"}),
            "unknown type `colour`",
        ),
        (
            json!({"name": "a", "validation": "([0-9]"}),
            "not a valid regular expression",
        ),
        (json!({"name": "a", "type": "select"}), "needs options"),
        (json!({"name": "a", "type": "multiselect"}), "needs options"),
        (
            json!({"name": "a", "type": "number", "min": 9, "max": 1}),
            "greater than max",
        ),
    ];
    for (field, expected) in cases {
        let mut body = realm_request(&conversation, &call_id());
        body["fields"] = json!([field]);
        let (status, response) = server.action(&token, body).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{response}");
        let message = response["error"]["fields"]["fields.a"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains(expected), "{expected}: {response}");
    }
    let mut body = realm_request(&conversation, &call_id());
    body["fields"] = json!([{"name": "a"}, {"name": "a"}]);
    let (status, response) = server.action(&token, body).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        response["error"]["fields"]["fields.a"],
        "duplicate field name"
    );
}

#[tokio::test]
async fn a_reused_tool_call_id_is_a_409() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = call_id();
    assert_eq!(
        server
            .action(&token, realm_request(&conversation, &id))
            .await
            .0,
        StatusCode::CREATED
    );
    let (status, body) = server
        .action(&token, realm_request(&conversation, &id))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "duplicate_tool_call_id");
}

async fn create_with_fields(
    server: &TestServer,
    token: &str,
    conversation: &str,
    fields: Value,
) -> String {
    let id = call_id();
    let mut body = realm_request(conversation, &id);
    body["fields"] = fields;
    let (status, response) = server.action(token, body).await;
    assert_eq!(status, StatusCode::CREATED, "{response}");
    id
}

#[tokio::test]
async fn every_field_type_is_validated_on_submit_and_the_request_stays_pending() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = create_with_fields(
        &server,
        &token,
        &conversation,
        json!([
            {"name": "realm", "validation": "^[0-9]{10,20}$"},
            {"name": "count", "type": "number", "min": 1, "max": 5},
            {"name": "email", "type": "email"},
            {"name": "site", "type": "url"},
            {"name": "day", "type": "date"},
            {"name": "flag", "type": "boolean"},
            {"name": "db", "type": "select", "options": ["production", "staging"]},
            {"name": "tags", "type": "multiselect", "options": ["a", "b"]},
            {"name": "notes", "type": "textarea", "required": false, "max": 5},
            {"name": "key", "type": "secret"}
        ]),
    )
    .await;
    let bad = json!({
        "realm": "12345678901x", "count": "9", "email": "nope", "site": "ftp://x", "day": "2024-02-30",
        "flag": "maybe", "db": "prod", "tags": ["c"], "notes": "too long"
    });
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id, "user_inputs": bad}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let fields = &body["error"]["fields"];
    for (name, message) in [
        ("realm", "Does not match the expected format"),
        ("count", "Must be at most 5"),
        ("email", "Must be an email address"),
        ("site", "Must be a URL starting with http:// or https://"),
        ("day", "Must be a date (YYYY-MM-DD)"),
        ("flag", "Must be true or false"),
        ("db", "Must be one of: production, staging"),
        ("tags", "`c` is not one of the options"),
        ("notes", "Must be at most 5 characters"),
        ("key", "This field is required"),
    ] {
        assert_eq!(fields[name], message, "{name}: {body}");
    }
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(pending["requests"][0]["status"], "pending");

    let good = json!({
        "realm": "1234567890", "count": "3", "email": "a@b.co", "site": "https://x.io", "day": "2024-02-29",
        "flag": "true", "db": "staging", "tags": ["a", "b"], "key": "s3cret"
    });
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id, "user_inputs": good}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let inputs = &body["request"]["user_inputs"];
    assert_eq!(inputs["count"], 3);
    assert_eq!(inputs["flag"], true);
    assert_ne!(inputs["key"], "s3cret", "secrets are masked in responses");
}

#[tokio::test]
async fn a_second_submit_or_cancel_is_a_409() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = call_id();
    server
        .action(&token, realm_request(&conversation, &id))
        .await;
    let submit = json!({"action": "submit_response", "tool_call_id": id,
        "user_inputs": {"quickbooks_realm_id": "1234567890"}});
    assert_eq!(
        server.action(&token, submit.clone()).await.0,
        StatusCode::OK
    );
    let (status, body) = server.action(&token, submit).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["error"]["message"],
        "this request is already completed"
    );
    let (status, _) = server
        .action(
            &token,
            json!({"action": "cancel_request", "tool_call_id": id}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);

    let other = call_id();
    server
        .action(&token, realm_request(&conversation, &other))
        .await;
    let (status, body) = server
        .action(
            &token,
            json!({"action": "cancel_request", "tool_call_id": other}),
        )
        .await;
    assert_eq!(
        (status, body["status"].clone()),
        (StatusCode::OK, json!("cancelled"))
    );
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": other,
            "user_inputs": {"quickbooks_realm_id": "1234567890"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(
        body["error"]["message"],
        "this request is already cancelled"
    );
}

#[tokio::test]
async fn racing_submits_have_exactly_one_winner() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = call_id();
    server
        .action(&token, realm_request(&conversation, &id))
        .await;
    let submit = json!({"action": "submit_response", "tool_call_id": id,
        "user_inputs": {"quickbooks_realm_id": "1234567890"}});
    let attempts = (0..16).map(|_| server.action(&token, submit.clone()));
    let statuses: Vec<StatusCode> = futures::future::join_all(attempts)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    let wins = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    let conflicts = statuses
        .iter()
        .filter(|s| **s == StatusCode::CONFLICT)
        .count();
    assert_eq!((wins, conflicts), (1, 15), "{statuses:?}");
}

#[tokio::test]
async fn another_users_requests_and_conversations_are_404_for_every_action() {
    let server = TestServer::start().await;
    let (alice, conversation) = user_with_conversation(&server).await;
    let (_, bob) = server.new_user("bob").await;
    let id = call_id();
    server
        .action(&alice, realm_request(&conversation, &id))
        .await;
    let attempts = [
        realm_request(&conversation, &call_id()),
        json!({"action": "submit_response", "tool_call_id": id, "user_inputs": {"quickbooks_realm_id": "1234567890"}}),
        json!({"action": "get_pending", "conversation_id": conversation}),
        json!({"action": "get_session_values", "conversation_id": conversation}),
        json!({"action": "cancel_request", "tool_call_id": id}),
        json!({"action": "clear_session_values", "conversation_id": conversation}),
    ];
    for attempt in attempts {
        let (status, body) = server.action(&bob, attempt.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{attempt}: {body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    // Alice's request is untouched.
    let (_, pending) = server
        .action(
            &alice,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(pending["requests"][0]["status"], "pending");
}

#[tokio::test]
async fn expired_requests_are_not_pending_and_cannot_be_answered() {
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_INPUT_TTL", "1s")).await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = call_id();
    server
        .action(&token, realm_request(&conversation, &id))
        .await;
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(pending["requests"], json!([]));
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
            "user_inputs": {"quickbooks_realm_id": "1234567890"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["error"]["message"], "this request is already expired");
}

#[tokio::test]
async fn malformed_bodies_are_400s_that_say_what_is_wrong() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let cases = [
        (json!({"action": "explode"}), "action"),
        (json!({"conversation_id": conversation}), "action"),
        (json!({"action": 7}), "action"),
        (json!({"action": "get_pending"}), "conversation_id"),
        (
            json!({"action": "get_pending", "conversation_id": 12}),
            "conversation_id",
        ),
        (
            json!({"action": "submit_response", "tool_call_id": "x", "user_inputs": []}),
            "user_inputs",
        ),
        (
            json!({"action": "cancel_request", "tool_call_id": "x", "extra": 1}),
            "extra",
        ),
    ];
    for (body, field) in cases {
        let (status, response) = server.action(&token, body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {response}");
        assert!(
            response["error"]["fields"][field].is_string(),
            "{body}: {response}"
        );
    }
    for raw in ["not json", "{\"action\":", "[1,2]", ""] {
        let response = server
            .client
            .post(server.url("/api/tool-user-input"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{raw:?}");
        let body: Value = response.json().await.expect("json error body");
        assert_eq!(body["error"]["code"], "bad_request");
    }
}

#[tokio::test]
async fn oversized_bodies_are_413() {
    let server = TestServer::start().await;
    let (token, _) = user_with_conversation(&server).await;
    let huge = format!(
        "{{\"action\":\"get_pending\",\"pad\":\"{}\"}}",
        "x".repeat(2 * 1024 * 1024)
    );
    let response = server
        .client
        .post(server.url("/api/tool-user-input"))
        .bearer_auth(&token)
        .header("content-type", "application/json")
        .body(huge)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let body: Value = response.json().await.expect("json error body");
    assert_eq!(body["error"]["code"], "payload_too_large");
}

#[tokio::test]
async fn save_for_user_is_remembered_across_conversations_and_secrets_are_sealed() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = call_id();
    let mut body = realm_request(&conversation, &id);
    body["fields"] =
        json!([{"name": "api_key", "type": "secret"}, {"name": "region", "save_for": "call"}]);
    body["save_for"] = json!("user");
    server.action(&token, body).await;
    let (status, _) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
            "user_inputs": {"api_key": "sk-live-abc123", "region": "eu"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let other = server.new_conversation(&token).await;
    let (_, saved) = server
        .action(
            &token,
            json!({"action": "get_session_values", "conversation_id": other}),
        )
        .await;
    assert_eq!(saved["values"].as_array().map(Vec::len), Some(1), "{saved}");
    assert_eq!(saved["values"][0]["name"], "api_key");
    assert_eq!(saved["values"][0]["scope"], "user");
    assert_eq!(saved["values"][0]["is_secret"], true);
    assert_ne!(saved["values"][0]["value"], "sk-live-abc123");

    let mut db = server.db().await;
    let stored: Vec<String> = sqlx::query_scalar(
        "select value::text from saved_tool_inputs where name = 'api_key'
         union all select user_inputs::text from tool_user_input_requests where tool_call_id = $1",
    )
    .bind(&id)
    .fetch_all(&mut db)
    .await
    .expect("query");
    assert!(!stored.is_empty());
    for text in stored {
        assert!(
            !text.contains("sk-live-abc123"),
            "secret stored in clear: {text}"
        );
    }
}
#[tokio::test]
async fn user_ids_with_quotes_and_backslashes_stay_data() {
    use jsonwebtoken::Algorithm;
    use tests::{JWT_SECRET, now, sign_token};
    let server = TestServer::start().await;
    let hostile = r"o'brien\'); drop table conversations; --";
    let token = sign_token(
        &json!({"sub": hostile, "exp": now() + 600}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    let conversation = server.new_conversation(&token).await;
    let id = call_id();
    let (status, _) = server
        .action(&token, realm_request(&conversation, &id))
        .await;
    assert_eq!(status, StatusCode::CREATED);
    for action in ["get_pending", "get_session_values"] {
        let (status, body) = server
            .action(
                &token,
                json!({"action": action, "conversation_id": conversation}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{action}: {body}");
    }
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(pending["requests"][0]["tool_call_id"], id.as_str());
    let mut db = server.db().await;
    let owner: String = sqlx::query_scalar("select user_id from conversations where id = $1")
        .bind(uuid::Uuid::parse_str(&conversation).expect("uuid"))
        .fetch_one(&mut db)
        .await
        .expect("the conversations table is still there");
    assert_eq!(owner, hostile);
    // Someone else with a similar id sees nothing.
    let (_, other) = server.new_user("obrien").await;
    let (status, _) = server
        .action(
            &other,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_request_made_outside_a_run_reaches_an_open_stream_and_nobody_elses() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let (stranger, strangers_conversation) = user_with_conversation(&server).await;
    let id = call_id();
    let (status, created) = server
        .action(&token, realm_request(&conversation, &id))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    let events = server
        .events_until(&token, &conversation, 0, Duration::from_secs(10), |e| {
            e["type"] == "input_requested"
        })
        .await;
    let announced = events.last().expect("an event");
    assert_eq!(
        announced["request"]["tool_call_id"],
        id.as_str(),
        "{announced}"
    );
    assert_eq!(announced["request"]["status"], "pending");

    // The same call id aimed at another user's conversation creates nothing and tells
    // that conversation's stream nothing.
    let (status, _) = server
        .action(&token, realm_request(&strangers_conversation, &call_id()))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, created) = server
        .action(
            &stranger,
            realm_request(&strangers_conversation, &call_id()),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let theirs = server
        .events_until(
            &stranger,
            &strangers_conversation,
            0,
            Duration::from_secs(10),
            |e| e["type"] == "input_requested",
        )
        .await;
    let requested: Vec<&Value> = theirs
        .iter()
        .filter(|e| e["type"] == "input_requested")
        .collect();
    assert_eq!(requested.len(), 1, "{theirs:#?}");
    assert_eq!(
        requested[0]["request"]["tool_call_id"],
        created["tool_call_id"]
    );
}

#[tokio::test]
async fn a_nul_character_anywhere_is_a_422_and_changes_nothing() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = pending_request(&server, &token, &conversation).await;

    // In a decline message (a text column) and in a tool's arguments (JSON).
    let (status, body) = server
        .action(
            &token,
            json!({"action": "decline_request", "tool_call_id": id, "message": "no\u{0}thanks"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["fields"]["body"].is_string(), "{body}");
    let (status, body) = calculate(
        &server,
        &token,
        &conversation,
        json!({"expression": "1+1\u{0}"}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");

    // The request is still pending, untouched.
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(
        pending["requests"][0]["tool_call_id"],
        id.as_str(),
        "{pending}"
    );
    assert_eq!(pending["requests"][0]["status"], "pending");
}

#[tokio::test]
async fn a_reason_is_measured_in_characters_as_the_document_says() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let (_, doc) = server.send("GET", "/api/openapi.json", None, None).await;
    let documented =
        doc["components"]["schemas"]["CreateRequestAction"]["properties"]["reason"]["maxLength"]
            .as_u64()
            .expect("reason has a documented maxLength") as usize;

    // At the limit in two-byte characters: twice the limit in bytes, and taken.
    let mut request = realm_request(&conversation, &call_id());
    request["reason"] = Value::from("é".repeat(documented));
    let (status, body) = server.action(&token, request).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");

    // One character over: refused, naming the field.
    let mut request = realm_request(&conversation, &call_id());
    request["reason"] = Value::from("é".repeat(documented + 1));
    let (status, body) = server.action(&token, request).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["fields"]["reason"].is_string(), "{body}");
}

#[tokio::test]
async fn arguments_past_64_kib_are_refused_by_name_and_nothing_is_stored() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;

    // Zeros in an array: 2 bytes each in the body, many times that once decoded, and
    // stored with the card and read back with every read of what waits.
    let mut request = realm_request(&conversation, &call_id());
    request["tool_args"] = json!({ "padding": vec![0; 40_000] });
    let (status, body) = server.action(&token, request).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["fields"]["tool_args"]
            .as_str()
            .is_some_and(|why| why.contains("65536 bytes")),
        "{body}"
    );
    let (status, body) = calculate(
        &server,
        &token,
        &conversation,
        json!({"expression": "1+1", "padding": "x".repeat(70_000)}),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["fields"]["arguments"].is_string(), "{body}");
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(pending["requests"], json!([]), "{pending}");

    // Just under the limit is taken.
    let mut request = realm_request(&conversation, &call_id());
    request["tool_args"] = json!({ "padding": "x".repeat(60_000) });
    let (status, body) = server.action(&token, request).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// Every writer takes the conversation's writer lock before any other lock, so two
/// writers never wait on each other in a circle: a request made while an MCP server's
/// question is being stored (which holds that lock first) waits for it holding nothing.
#[tokio::test]
async fn a_new_request_waits_for_the_conversations_writer_lock_holding_no_other_lock() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let mut holder = holding_the_writer_lock(&server, &conversation).await;

    let creating = {
        let server_url = server.url("/api/tool-user-input");
        let body = realm_request(&conversation, &call_id());
        let token = token.clone();
        tokio::spawn(async move {
            tests::http_client()
                .post(server_url)
                .bearer_auth(token)
                .json(&body)
                .send()
                .await
                .map(|response| response.status())
        })
    };
    // The request's transaction, once it waits for a lock.
    let mut observer = server.db().await;
    let mut waiting = None;
    for _ in 0..100 {
        waiting = sqlx::query_scalar::<_, i32>(
            "select pid from pg_stat_activity
             where datname = current_database() and wait_event_type = 'Lock'",
        )
        .fetch_optional(&mut observer)
        .await
        .unwrap();
        if waiting.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waiting = waiting.expect("the new request waits for the conversation's lock");
    // Its other locks are advisory ones (on the call id, on the count of waiting cards).
    let held: Vec<String> = sqlx::query_scalar(
        "select objid::text from pg_locks where pid = $1 and granted and locktype = 'advisory'",
    )
    .bind(waiting)
    .fetch_all(&mut observer)
    .await
    .unwrap();
    assert_eq!(held, Vec::<String>::new(), "locks held while waiting");

    sqlx::query("rollback").execute(&mut holder).await.unwrap();
    let status = creating.await.unwrap().expect("the request is answered");
    assert_eq!(status, StatusCode::CREATED);
}

/// Values are checked against the request's fields before the conversation is locked:
/// matching a caller's patterns against a caller's values may take a while, and the
/// conversation's other writers do not wait for it. Values that are not valid are
/// refused while another transaction holds the conversation.
#[tokio::test]
async fn values_are_checked_before_the_conversation_is_locked() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = pending_request(&server, &token, &conversation).await;
    let mut holder = holding_the_writer_lock(&server, &conversation).await;

    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        server.action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
                "user_inputs": {"quickbooks_realm_id": "not digits"}}),
        ),
    )
    .await;
    sqlx::query("rollback").execute(&mut holder).await.unwrap();
    let (status, body) = refused.expect("refused without waiting for the lock");
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["fields"]["quickbooks_realm_id"].is_string(),
        "{body}"
    );

    // Valid values, once the conversation is free, are taken.
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
                "user_inputs": {"quickbooks_realm_id": "9130346988354456"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

/// A request past its time says so (409), whatever the values sent with the answer.
#[tokio::test]
async fn an_answer_to_a_request_past_its_time_is_told_it_expired_before_its_values() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let id = pending_request(&server, &token, &conversation).await;
    // Past its time, not yet expired by the sweep.
    sqlx::query(
        "update tool_user_input_requests set expires_at = now() - interval '1 second'
         where tool_call_id = $1",
    )
    .bind(&id)
    .execute(&mut server.db().await)
    .await
    .unwrap();
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
                "user_inputs": {"quickbooks_realm_id": "not digits"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "request_not_pending", "{body}");
}

/// A card a caller of the API makes speaks in the caller's words, shown as a person
/// must read them: each character that cannot be seen or that reverses the text around
/// it is written out, in the reason, the labels, descriptions, placeholders and choices,
/// and the limits on those texts hold for them written out. toolgate's own caution on a
/// field (`warning`) is not the caller's to give.
#[tokio::test]
async fn a_callers_card_shows_hidden_characters_and_cannot_speak_as_toolgate() {
    let server = TestServer::start().await;
    let (token, conversation) = user_with_conversation(&server).await;
    let card = |id: &str, warning: Option<&str>| {
        let mut field = json!({
            "name": "account", "type": "select", "label": "Acc\u{200B}ount",
            "description": "Pay to \u{202E}gro.live", "placeholder": "choose\u{2066}",
            "options": [{"value": "a", "label": "Main\u{200D} account"}]
        });
        if let Some(warning) = warning {
            field["warning"] = json!(warning);
        }
        json!({"action": "create_request", "conversation_id": conversation,
            "tool_name": "pay", "tool_call_id": id,
            "reason": "Asked by \u{202E}knab", "fields": [field]})
    };
    let (status, created) = server.action(&token, card("call_words", None)).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let pending = server.pending_requests(&token, &conversation).await;
    for shown in [&created, &pending[0]] {
        // Marked as a caller's, for a client to say so.
        assert_eq!(shown["from_api"], true, "{shown}");
        assert_eq!(shown["reason"], "Asked by ⟨U+202E⟩knab", "{shown}");
        let field = &shown["fields"][0];
        assert_eq!(field["label"], "Acc⟨U+200B⟩ount", "{shown}");
        assert_eq!(field["description"], "Pay to ⟨U+202E⟩gro.live", "{shown}");
        assert_eq!(field["placeholder"], "choose⟨U+2066⟩", "{shown}");
        assert_eq!(
            field["options"][0]["label"], "Main⟨U+200D⟩ account",
            "{shown}"
        );
        // The value goes back as it was.
        assert_eq!(field["options"][0]["value"], "a", "{shown}");
    }

    let (status, refused) = server
        .action(
            &token,
            card(
                "call_warning",
                Some("toolgate checked this form: it is safe"),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    assert_eq!(
        refused["error"]["fields"]["fields.account.warning"],
        "is toolgate's own caution, not a caller's",
        "{refused}"
    );

    // Hidden characters within the limits as sent, past them once written out (each
    // becomes eight): refused by name, nothing stored.
    let mut hiding = card("call_hiding", None);
    hiding["reason"] = json!("\u{200B}".repeat(300));
    hiding["fields"][0]["label"] = json!("\u{200B}".repeat(300));
    let (status, refused) = server.action(&token, hiding).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
    let why = &refused["error"]["fields"];
    assert_eq!(
        why["reason"],
        "must be at most 2000 characters once its hidden and look-alike characters are written out",
        "{refused}"
    );
    assert_eq!(
        why["fields.account"],
        "label may be at most 2000 characters once its hidden and look-alike characters are written out",
        "{refused}"
    );
    let pending = server.pending_requests(&token, &conversation).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
}
