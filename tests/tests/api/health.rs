use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{ServerOptions, TestServer};

#[tokio::test]
async fn probes_report_process_and_database() {
    let server = TestServer::start().await;
    let (status, body) = server.send("GET", "/healthz", None, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ok"})));
    let (status, body) = server.send("GET", "/readyz", None, None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"status": "ready"})));
}

#[tokio::test]
async fn readyz_is_503_when_the_database_goes_away() {
    let proxy = tests::TcpProxy::start_to_database().await;
    let database = tests::test_database().await.expect("test database");
    let through_proxy = tests::with_host_port(&database, "127.0.0.1", proxy.port);
    let server = TestServer::start_with(
        ServerOptions {
            database_url: Some(through_proxy),
            ..ServerOptions::default()
        }
        .without("TOOLGATE_DB_ACQUIRE_TIMEOUT"),
    )
    .await;
    assert_eq!(
        server.send("GET", "/readyz", None, None).await.0,
        StatusCode::OK
    );
    proxy.stop();
    let (status, body) = server.send("GET", "/readyz", None, None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "database_unavailable");
    // The process itself stays up.
    assert_eq!(
        server.send("GET", "/healthz", None, None).await.0,
        StatusCode::OK
    );
}

#[tokio::test]
async fn without_a_database_the_server_refuses_to_start() {
    let unreachable = ServerOptions {
        database_url: Some("postgres://postgres@127.0.0.1:1/none".to_owned()),
        ..ServerOptions::default()
    };
    let err = TestServer::try_start(unreachable)
        .await
        .err()
        .expect("no database, no start");
    assert!(
        format!("{err:#}").contains("running database migrations"),
        "{err:#}"
    );
}

#[tokio::test]
async fn graceful_shutdown_on_sigterm() {
    let mut server = TestServer::start().await;
    let status = server.terminate().await.expect("stops");
    assert!(status.success(), "exit status {status}");
    assert!(
        server.logs().contains("toolgate stopped"),
        "{}",
        server.logs()
    );
    // A stop is no fault: nothing warns of a lost connection on the way out.
    assert!(
        !server.logs().contains("lost its connection"),
        "{}",
        server.logs()
    );
}

/// A client that sends its headers and then never the body it announced holds a
/// request open for as long as it likes; the stop waits for it only the grace period.
#[tokio::test]
async fn a_request_that_never_finishes_does_not_hold_the_stop() {
    use tokio::io::AsyncWriteExt;

    let mut server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_SHUTDOWN_GRACE", "1s")).await;
    let (_, token) = server.new_user("stalling").await;
    let address = server.url("");
    let address = address
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let started_requests = || server.logs().matches("started processing request").count();
    let before = started_requests();
    let mut stalled = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connects");
    stalled
        .write_all(
            format!(
                "POST /api/conversations HTTP/1.1\r\nHost: {address}\r\n\
                 Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
                 Content-Length: 1000\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .await
        .expect("sends the start of a request");
    // The request is under way before the stop begins.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while started_requests() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never started: {}",
            server.logs()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let status = server
        .terminate()
        .await
        .expect("stops although a request never finishes");
    assert!(status.success(), "exit status {status}");
    assert!(
        server.logs().contains("grace period ended") && server.logs().contains("toolgate stopped"),
        "{}",
        server.logs()
    );
    drop(stalled);
}

#[tokio::test]
async fn openapi_document_lists_the_routes_and_docs_page_is_served() {
    let server = TestServer::start().await;
    let (status, doc) = server.send("GET", "/api/openapi.json", None, None).await;
    assert_eq!(status, StatusCode::OK);
    for path in [
        "/api/conversations",
        "/api/tool-user-input",
        "/api/dev/token",
        "/healthz",
        "/readyz",
    ] {
        assert!(
            doc["paths"][path].is_object(),
            "{path} missing from the OpenAPI document"
        );
    }
    let page = server
        .client
        .get(server.url("/api/docs/"))
        .send()
        .await
        .expect("docs page");
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap_or_default();
    assert!(html.contains("swagger"), "docs page should be Swagger UI");
    assert!(!html.contains("cdn"), "docs page must work offline");
    // The policy forbids inline scripts: every script is a file of this server.
    for tag in html.split("<script").skip(1) {
        let open = tag.split('>').next().unwrap_or_default();
        assert!(
            open.contains("src=\"./"),
            "inline or foreign script: <script{open}>"
        );
    }
}

#[tokio::test]
async fn unknown_routes_and_methods_get_json_errors() {
    let server = TestServer::start().await;
    let (status, body) = server.send("GET", "/api/nope", None, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["message"], "no route for GET /api/nope");
    let (status, body) = server
        .send("DELETE", "/api/tool-user-input", None, None)
        .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    assert_eq!(body["error"]["code"], "method_not_allowed");
}

/// The schema `reference` points at, in `doc`.
fn resolve<'a>(doc: &'a Value, reference: &Value) -> &'a Value {
    let name = reference
        .as_str()
        .and_then(|r| r.rsplit('/').next())
        .unwrap_or_default();
    &doc["components"]["schemas"][name]
}

#[tokio::test]
async fn the_document_describes_the_action_union_the_fields_and_the_event_stream() {
    let server = TestServer::start().await;
    let (_, doc) = server.send("GET", "/api/openapi.json", None, None).await;

    // The action body: a union discriminated by `action`, each variant carrying
    // `action` itself, so a client generated from the document can build a request.
    let body = &doc["paths"]["/api/tool-user-input"]["post"]["requestBody"]["content"]["application/json"]
        ["schema"];
    let union = resolve(&doc, &body["$ref"]);
    assert_eq!(union["discriminator"]["propertyName"], "action", "{union}");
    let variants = union["oneOf"].as_array().expect("oneOf");
    let mut actions = Vec::new();
    for variant in variants {
        let schema = resolve(&doc, &variant["$ref"]);
        let action = schema["properties"]["action"]["enum"]
            .as_array()
            .filter(|values| values.len() == 1)
            .and_then(|values| values[0].as_str())
            .unwrap_or_else(|| panic!("a variant without its own action: {schema}"));
        assert!(
            schema["required"]
                .as_array()
                .is_some_and(|r| r.contains(&Value::from("action"))),
            "{action}: action must be required"
        );
        actions.push(action.to_owned());
    }
    for action in [
        "create_request",
        "submit_response",
        "submit_decision",
        "decline_request",
        "get_pending",
        "get_session_values",
        "cancel_request",
        "clear_session_values",
        "delete_saved_value",
    ] {
        assert!(
            actions.iter().any(|a| a == action),
            "{action} missing: {actions:?}"
        );
    }

    // The field specification is described, not `{}`.
    let create = resolve(
        &doc,
        &Value::from("#/components/schemas/CreateRequestAction"),
    );
    let field = &create["properties"]["fields"]["items"];
    let field = if field["$ref"].is_string() {
        resolve(&doc, &field["$ref"])
    } else {
        field
    };
    for property in [
        "name",
        "type",
        "options",
        "validation",
        "visible_if",
        "default",
    ] {
        assert!(
            field["properties"][property].is_object(),
            "the field spec lacks `{property}`: {field}"
        );
    }
    // What `type` implies is stated, so a generator never writes options on a url field
    // or lets the model fill a secret.
    let conditions = field["allOf"].to_string();
    assert!(
        conditions.contains(r#""maxItems":0"#) && conditions.contains(r#""model_may_fill""#),
        "the field spec does not tie options and model_may_fill to its type: {field}"
    );
    let (_, token) = server.new_user("contract-conditions").await;
    let conversation = server.new_conversation(&token).await;
    let (status, refused) = server
        .action(
            &token,
            serde_json::json!({"action": "create_request", "conversation_id": conversation,
                "tool_name": "lookup", "tool_call_id": "call_url_options", "reason": "Which?",
                "fields": [{"name": "site", "type": "url",
                            "options": [{"value": "a", "label": "A"}]}]}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");

    // The seed's example is a request the server takes.
    let (_, token) = server.new_user("contract").await;
    let conversation = server.new_conversation(&token).await;
    let mut example = create["example"].clone();
    example["conversation_id"] = Value::from(conversation.as_str());
    let (status, created) = server.action(&token, example).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");

    // The event stream says what it is.
    let events =
        &doc["paths"]["/api/conversations/{id}/events"]["get"]["responses"]["200"]["content"];
    assert!(events["text/event-stream"].is_object(), "{events}");
    // Errors a caller can meet are documented, 400 and 401 included.
    for (path, method) in [
        ("/api/conversations", "post"),
        ("/api/tool-user-input", "post"),
        ("/api/conversations/{id}/messages", "post"),
    ] {
        let responses = &doc["paths"][path][method]["responses"];
        for status in ["400", "401", "422"] {
            assert!(
                responses[status].is_object(),
                "{method} {path} does not document {status}: {responses}"
            );
        }
    }
}

/// Something that holds a conversation's lock for long (a stuck transaction, an
/// administrator's session) costs a request that needs the lock a 503 once the statement
/// timeout is up, not its connection for good: other requests go on meanwhile, and once
/// the lock is let go the same request goes through.
#[tokio::test]
async fn a_request_stuck_behind_a_held_lock_gets_a_503_not_a_stall() {
    let server = TestServer::start_with(
        ServerOptions::default().env("TOOLGATE_DB_STATEMENT_TIMEOUT", "500ms"),
    )
    .await;
    let (_, token) = server.new_user("stuck-behind-a-lock").await;
    let conversation = server.new_conversation(&token).await;
    let mut holder = server.db().await;
    let mut held = sqlx::Connection::begin(&mut holder)
        .await
        .expect("a transaction");
    sqlx::query("select 1 from conversations where id = $1::uuid for update")
        .bind(&conversation)
        .execute(&mut *held)
        .await
        .expect("the conversation's lock");

    let (status, body) = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        server.post_message(&token, &conversation, json!("hello")),
    )
    .await
    .expect("an answer, not a stall");
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["error"]["code"], "database_busy", "{body}");
    assert_eq!(
        body["error"]["message"],
        "the database took too long to answer; try again shortly"
    );
    let (_, other) = server.new_user("beside-a-held-lock").await;
    let (status, _) = server
        .send("GET", "/api/conversations", Some(&other), None)
        .await;
    assert_eq!(status, StatusCode::OK);

    held.rollback().await.expect("the lock let go");
    let (status, body) = server
        .post_message(&token, &conversation, json!("hello"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
}

/// A tool that has run is recorded even when its record waits behind a lock past the
/// statement timeout: given up on, the call would stand unrecorded while its side
/// effects happened.
#[tokio::test]
async fn a_tool_that_ran_is_recorded_however_long_its_record_waits() {
    use std::time::Duration;
    let service = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let base = format!("http://{}", service.local_addr().expect("address"));
    let app = axum::Router::new().route(
        "/lookup",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            axum::Json(json!({"found": true}))
        }),
    );
    tokio::spawn(async move { axum::serve(service, app).await });
    let tools = "[[tools]]\nname = \"slow_lookup\"\ndescription = \"Looks up, slowly\"\nkind = \"http\"\n[tools.http]\nurl = \"{env.SLOW_BASE}/lookup\"\nallow_private_networks = true\n";
    let (dir, path) = tests::write_temp_file("tools.toml", tools);
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_DB_STATEMENT_TIMEOUT", "300ms")
            .env("SLOW_BASE", &base)
            .env("TOOLGATE_TOOLS", &path.to_string_lossy()),
    )
    .await;
    let (_, token) = server.new_user("recorded-late").await;
    let conversation = server.new_conversation(&token).await;
    let mut holder = server.db().await;
    let holding = async {
        // While the tool runs, something holds the log's table for a while.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let mut held = sqlx::Connection::begin(&mut holder)
            .await
            .expect("a transaction");
        sqlx::query("lock table tool_call_log in share mode")
            .execute(&mut *held)
            .await
            .expect("the lock");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        held.rollback().await.expect("the lock let go");
    };
    let ((status, outcome), ()) = tokio::join!(
        server.execute_tool(&token, &conversation, "slow_lookup", "call_slow", json!({})),
        holding
    );
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["success"], true, "{outcome}");
    let recorded: i64 = sqlx::query_scalar(
        "select count(*) from tool_call_log where tool_call_id = 'call_slow' and outcome = 'success'",
    )
    .fetch_one(&mut server.db().await)
    .await
    .expect("the log");
    assert_eq!(recorded, 1, "{}", server.logs());
    drop(dir);
}
