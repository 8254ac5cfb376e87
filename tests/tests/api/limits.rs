//! Bounded work per request and per user: costly definitions refused fast while the
//! server stays responsive, rate limits with `Retry-After`, stream and run quotas, and
//! identifiers that cannot forge a log line.

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{ServerOptions, TestServer};

fn call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// `options` with the example tools and the demo, whose P&L request waits for the
/// user's input (so a run it starts stays active); QuickBooks itself is never reached.
fn with_demo_tools(options: ServerOptions) -> ServerOptions {
    options
        .env(
            "TOOLGATE_TOOLS",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../tools.example.toml"),
        )
        .env("TOOLGATE_DEMO", "1")
        .env("QUICKBOOKS_BASE_URL", "http://127.0.0.1:9")
        .env("QUICKBOOKS_ACCESS_TOKEN", "unused")
}

fn request_with(conversation: &str, fields: Value) -> Value {
    json!({"action": "create_request", "conversation_id": conversation, "tool_name": "t",
        "tool_call_id": call_id(), "reason": "why", "fields": fields})
}

#[tokio::test]
async fn costly_definitions_are_refused_quickly_and_the_server_stays_responsive() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("costly").await;
    let conversation = server.new_conversation(&token).await;

    // A pattern that compiles huge, a 2,000-field visible_if chain, an oversized
    // default: each a 422 that names what was too large.
    let chain: Vec<Value> = (0..2000)
        .map(|i| match i {
            0 => json!({"name": "f0"}),
            _ => json!({"name": format!("f{i}"), "visible_if": {"field": format!("f{}", i - 1)}}),
        })
        .collect();
    let cases = [
        (
            json!([{"name": "a", "validation": "(?:a*){2000}"}]),
            "fields.a",
        ),
        (json!(chain), "fields.fields"),
        (
            json!([{"name": "a", "default": "x".repeat(5000)}]),
            "fields.a",
        ),
    ];
    for (fields, key) in cases {
        let started = Instant::now();
        let (status, body) = server
            .action(&token, request_with(&conversation, fields))
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(body["error"]["fields"].get(key).is_some(), "{key}: {body}");
        // Wide margins for a busy machine: a check that ran away would take minutes.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }

    // Costly patterns against the longest values, submitted many times at once: at
    // most two of one user's checks run at a time, the others are refused once their
    // wait for a place runs out (429), and neither another user's answer nor /healthz
    // waits for them.
    let costly =
        |name: String| json!({"name": name, "type": "textarea", "validation": "(?:.*){100}x"});
    let (status, created) = server
        .action(
            &token,
            request_with(
                &conversation,
                json!((0..20).map(|i| costly(format!("f{i}"))).collect::<Vec<_>>()),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["tool_call_id"].as_str().expect("id").to_owned();
    let value = "ab".repeat(10_000);
    let inputs: serde_json::Map<String, Value> =
        (0..20).map(|i| (format!("f{i}"), json!(value))).collect();
    let (_, other) = server.new_user("costly-other").await;
    let other_conversation = server.new_conversation(&other).await;
    let (status, created) = server
        .action(
            &other,
            request_with(&other_conversation, json!([costly("f0".to_owned())])),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let other_id = created["tool_call_id"].as_str().expect("id").to_owned();
    let submits = (0..8).map(|_| async {
        let started = Instant::now();
        let (status, body) = server
            .action(
                &token,
                json!({"action": "submit_response", "tool_call_id": id, "user_inputs": inputs}),
            )
            .await;
        (status, body, started.elapsed())
    });
    let others_answer = async {
        // Once the flood's checks are running.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let answer = server
            .action(
                &other,
                json!({"action": "submit_response", "tool_call_id": other_id,
                    "user_inputs": {"f0": value}}),
            )
            .await;
        (answer, started.elapsed())
    };
    let health = async {
        let mut slowest = Duration::ZERO;
        for _ in 0..10 {
            let started = Instant::now();
            let (status, _) = server.send("GET", "/healthz", None, None).await;
            assert_eq!(status, StatusCode::OK);
            slowest = slowest.max(started.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slowest
    };
    let started = Instant::now();
    let (answers, ((other_status, other_body), other_took), slowest) =
        tokio::join!(futures::future::join_all(submits), others_answer, health);
    let flood_took = started.elapsed();
    let refused = answers
        .iter()
        .filter(|(status, body, _)| {
            *status == StatusCode::TOO_MANY_REQUESTS && body["error"]["code"] == "rate_limited"
        })
        .count();
    for (status, body, _) in &answers {
        assert!(
            [
                StatusCode::UNPROCESSABLE_ENTITY,
                StatusCode::TOO_MANY_REQUESTS
            ]
            .contains(status),
            "{status} {body}"
        );
    }
    // Two at a time (a unit test holds them to it exactly): one more waits a second for
    // its turn before its 429. Where even the quickest check took over three seconds
    // (here each takes several), the first two were still running when the others'
    // wait ran out (they arrive together), so some were refused.
    for (status, _, took) in &answers {
        if *status == StatusCode::TOO_MANY_REQUESTS {
            assert!(
                *took >= Duration::from_millis(900),
                "refused after {took:?} only"
            );
        }
    }
    let quickest_check = answers
        .iter()
        .filter(|(status, _, _)| *status == StatusCode::UNPROCESSABLE_ENTITY)
        .map(|(_, _, took)| *took)
        .min()
        .unwrap_or_default();
    assert!(
        refused > 0 || quickest_check < Duration::from_secs(3),
        "none refused in {flood_took:?}: {answers:?}"
    );
    assert_eq!(
        other_status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{other_body} after {other_took:?}"
    );
    // Not behind the flood: answered well before the flood's checks are done.
    assert!(
        other_took < flood_took / 2,
        "the other user's answer took {other_took:?}, the flood {flood_took:?}"
    );
    assert!(slowest < Duration::from_secs(2), "healthz took {slowest:?}");
}

#[tokio::test]
async fn a_flooding_user_gets_429_with_retry_after_and_others_do_not() {
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_RATE_PER_MINUTE", "60")
            .env("TOOLGATE_RATE_BURST", "5"),
    )
    .await;
    let (_, flooder) = server.new_user("flood").await;
    let (_, calm) = server.new_user("calm").await;
    let mut limited = None;
    for _ in 0..20 {
        let response = server
            .client
            .get(server.url("/api/conversations"))
            .bearer_auth(&flooder)
            .send()
            .await
            .expect("sent");
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(response);
            break;
        }
    }
    let response = limited.expect("the flood is limited");
    let retry_after: u64 = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body: Value = response.json().await.expect("json");
    assert_eq!(body["error"]["code"], "rate_limited");
    // Another user is not affected.
    let (status, _) = server
        .send("GET", "/api/conversations", Some(&calm), None)
        .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_refusal_is_held_so_a_client_that_ignores_retry_after_is_slowed() {
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_RATE_PER_MINUTE", "6")
            .env("TOOLGATE_RATE_BURST", "1"),
    )
    .await;
    let (_, flooder) = server.new_user("flood").await;
    let (status, _) = server
        .send("GET", "/api/conversations", Some(&flooder), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    // The next request has to wait ten seconds for the allowance: it is answered 429
    // after a pause of a second (the longest pause), not at once.
    let started = std::time::Instant::now();
    let (status, body) = server
        .send("GET", "/api/conversations", Some(&flooder), None)
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(900),
        "answered after {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn opening_streams_with_a_stream_token_spends_the_request_allowance_too() {
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_RATE_PER_MINUTE", "60")
            .env("TOOLGATE_RATE_BURST", "4")
            .env("TOOLGATE_MAX_STREAMS", "50"),
    )
    .await;
    let (_, token) = server.new_user("stream-flood").await;
    let conversation = server.new_conversation(&token).await;
    let stream_token = server.stream_token(&token, &conversation).await;
    let url = server.url(&format!(
        "/api/conversations/{conversation}/events?token={stream_token}"
    ));
    let mut limited = None;
    for round in 0..20 {
        // Each stream is dropped at once: only the allowance can stop the flood. Half
        // the rounds carry an Authorization header that is no valid bearer token.
        let mut request = server.client.get(&url);
        if round % 2 == 1 {
            request = request.header("authorization", "x");
        }
        let response = request.send().await.expect("sent");
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(response);
            break;
        }
        assert_eq!(response.status(), StatusCode::OK);
    }
    let body: Value = limited
        .expect("stream tokens are limited like bearer tokens")
        .json()
        .await
        .expect("json");
    assert_eq!(body["error"]["code"], "rate_limited", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("a minute")),
        "{body}"
    );
}

#[tokio::test]
async fn starts_at_the_same_moment_cannot_pass_the_active_runs_cap_together() {
    let server = TestServer::start_with(with_demo_tools(
        ServerOptions::default().env("TOOLGATE_MAX_ACTIVE_RUNS", "2"),
    ))
    .await;
    let (_, token) = server.new_user("racing-runs").await;
    let mut conversations = Vec::new();
    for _ in 0..8 {
        conversations.push(server.new_conversation(&token).await);
    }
    // Each run waits for the user's input, so every accepted one stays active.
    let posts = conversations.iter().map(|conversation| {
        server.post_message(&token, conversation, json!("Get my P&L report for Q1 2025"))
    });
    let statuses: Vec<StatusCode> = futures::future::join_all(posts)
        .await
        .into_iter()
        .map(|(status, _)| status)
        .collect();
    let accepted = statuses
        .iter()
        .filter(|status| **status == StatusCode::ACCEPTED)
        .count();
    assert_eq!(accepted, 2, "{statuses:?}");
    assert!(
        statuses
            .iter()
            .all(|status| [StatusCode::ACCEPTED, StatusCode::TOO_MANY_REQUESTS].contains(status)),
        "{statuses:?}"
    );
}

#[tokio::test]
async fn a_client_that_trickles_its_headers_is_cut_off_and_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_HEADER_READ_TIMEOUT", "1s"))
            .await;
    let address = server.base.trim_start_matches("http://").to_owned();
    // Headers begun and never finished, as a slowloris client sends them.
    let mut trickling = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    trickling
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: toolgate\r\nX-Slow: a")
        .await
        .expect("write");
    // Others are answered meanwhile.
    let (status, _) = server.send("GET", "/healthz", None, None).await;
    assert_eq!(status, StatusCode::OK);
    // The server closes the connection (with or without a 408) instead of waiting.
    let mut answer = Vec::new();
    let closed =
        tokio::time::timeout(Duration::from_secs(10), trickling.read_to_end(&mut answer)).await;
    assert!(
        closed.is_ok(),
        "the connection was still open after 10 s with its headers unfinished"
    );
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_client_that_trickles_its_body_gets_a_408_that_says_why() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_HEADER_READ_TIMEOUT", "1s"))
            .await;
    let (_, token) = server.new_user("trickling-body").await;
    let address = server.base.trim_start_matches("http://").to_owned();
    // Its headers in full, then a body that stops after one byte of the 100 announced.
    let mut trickling = tokio::net::TcpStream::connect(&address)
        .await
        .expect("connect");
    trickling
        .write_all(
            format!(
                "POST /api/conversations HTTP/1.1\r\nHost: toolgate\r\n\
                 Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
                 Content-Length: 100\r\nConnection: close\r\n\r\n{{"
            )
            .as_bytes(),
        )
        .await
        .expect("write");
    let mut answer = Vec::new();
    let answered =
        tokio::time::timeout(Duration::from_secs(10), trickling.read_to_end(&mut answer)).await;
    assert!(answered.is_ok(), "no answer 10 s after the body stopped");
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    let body: Value = answer
        .split_once("\r\n\r\n")
        .and_then(|(_, body)| serde_json::from_str(body).ok())
        .unwrap_or_default();
    assert_eq!(body["error"]["code"], "request_timeout", "{answer}");
    // Nothing was made of half a request.
    let (_, list) = server
        .send("GET", "/api/conversations", Some(&token), None)
        .await;
    assert_eq!(list["conversations"], json!([]), "{list}");
}

/// The document says every route with a body may answer 408.
#[tokio::test]
async fn every_route_with_a_body_documents_its_408() {
    let server = TestServer::start().await;
    let (_, document) = server.send("GET", "/api/openapi.json", None, None).await;
    for (path, method) in [
        ("/api/conversations", "post"),
        ("/api/tool-user-input", "post"),
        ("/api/tools/execute", "post"),
    ] {
        let answer = &document["paths"][path][method]["responses"]["408"];
        assert_eq!(
            answer["$ref"], "#/components/responses/RequestTimeout",
            "{path}: {answer}"
        );
    }
}

#[tokio::test]
async fn a_bad_replay_position_names_the_field() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("after").await;
    let conversation = server.new_conversation(&token).await;
    let (status, body) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}/events?after=abc"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["fields"]["after"].is_string(), "{body}");
}

#[tokio::test]
async fn open_streams_and_active_runs_are_capped_per_user() {
    let server = TestServer::start_with(with_demo_tools(
        ServerOptions::default()
            .env("TOOLGATE_MAX_STREAMS", "2")
            .env("TOOLGATE_MAX_ACTIVE_RUNS", "1"),
    ))
    .await;
    let (_, token) = server.new_user("streams").await;
    let conversation = server.new_conversation(&token).await;
    let url = server.url(&format!("/api/conversations/{conversation}/events"));
    let mut open = Vec::new();
    for _ in 0..2 {
        let response = server
            .client
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::OK);
        open.push(response);
    }
    let third = server
        .client
        .get(&url)
        .bearer_auth(&token)
        .send()
        .await
        .expect("sent");
    assert_eq!(third.status(), StatusCode::TOO_MANY_REQUESTS);
    // Closing one frees its place.
    drop(open.pop());
    let mut reopened = None;
    for _ in 0..50 {
        let response = server
            .client
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .expect("sent");
        if response.status() == StatusCode::OK {
            reopened = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(reopened.is_some(), "a closed stream gives its place back");

    // A run waiting for input counts; a second conversation's run is refused.
    let (status, body) = server
        .post_message(
            &token,
            &conversation,
            json!("Get my P&L report for Q1 2025"),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let other = server.new_conversation(&token).await;
    let (status, body) = server
        .post_message(&token, &other, json!("What is 2+2?"))
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
}

/// A client that opens an event stream and then reads nothing keeps neither its stream
/// place nor what was queued for it: once nothing can be written to it for the write
/// timeout, its connection is closed.
#[tokio::test]
async fn a_stream_whose_client_stops_reading_gives_its_place_back() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_MAX_STREAMS", "1")
            .env("TOOLGATE_WRITE_TIMEOUT", "1s"),
    )
    .await;
    let (_, token) = server.new_user("deaf").await;
    let conversation = server.new_conversation(&token).await;
    let url = server.url(&format!("/api/conversations/{conversation}/events"));
    let stream_status = async || {
        server
            .client
            .get(&url)
            .bearer_auth(&token)
            .send()
            .await
            .expect("sent")
            .status()
    };
    // A socket with a small receive window that never reads.
    let address: std::net::SocketAddr = server
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("small window");
    let mut deaf = socket.connect(address).await.expect("connect");
    deaf.write_all(
        format!(
            "GET /api/conversations/{conversation}/events HTTP/1.1\r\nHost: toolgate\r\n\
             Authorization: Bearer {token}\r\n\r\n"
        )
        .as_bytes(),
    )
    .await
    .expect("ask for the stream");
    // Its answer's head is read, then nothing more.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(10), deaf.read_exact(&mut byte))
            .await
            .expect("the stream answers")
            .expect("read");
        assert_eq!(read, 1);
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(stream_status().await, StatusCode::TOO_MANY_REQUESTS);
    // About 9 MB of events, twice what the socket buffers hold at most by default
    // (`net.ipv4.tcp_wmem`'s 4 MiB on the sending side, a few KiB on this one).
    let part = json!({"type": "text", "text": "x".repeat(20_000)});
    for _ in 0..64 {
        let mut parts = vec![json!({"type": "text", "text": "/help"})];
        parts.extend(std::iter::repeat_n(part.clone(), 7));
        let (status, body) = server
            .post_message(&token, &conversation, json!(parts))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while stream_status().await != StatusCode::OK {
        assert!(
            Instant::now() < deadline,
            "the stream place is still held 15 s after its client stopped reading"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(deaf);
}

/// A NUL in the user's request a tool call carries is named, not blamed on "the body".
#[tokio::test]
async fn a_nul_in_the_original_user_request_is_a_422_naming_it() {
    let server = TestServer::start_with(with_demo_tools(ServerOptions::default())).await;
    let (_, token) = server.new_user("nul-request").await;
    let conversation = server.new_conversation(&token).await;
    let (status, body) = server
        .send(
            "POST",
            "/api/tools/execute",
            Some(&token),
            Some(json!({"conversation_id": conversation,
                "tool_name": "quickbooks_profit_and_loss", "tool_call_id": "call_nul",
                "arguments": {}, "original_user_request": "my P&L\u{0} please"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["fields"]["original_user_request"].is_string(),
        "{body}"
    );
}

#[tokio::test]
async fn identifiers_with_control_or_invisible_characters_are_refused() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("ids").await;
    let conversation = server.new_conversation(&token).await;
    for forged in [
        "call_1\nINFO toolgate: forged line",
        "call_\u{1b}[31mred",
        "call_\r",
        // Reads as another id, or reorders what follows it in a log line or a card.
        "call_1\u{200B}",
        "call_1\u{202E}enil degrof",
        "call_1\u{2028}INFO toolgate: forged line",
        "\u{FEFF}",
        "call_1\u{E0041}",
    ] {
        let mut body = request_with(&conversation, json!([{"name": "a"}]));
        body["tool_call_id"] = json!(forged);
        let (status, response) = server.action(&token, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{forged:?}: {response}");
        assert!(
            response["error"]["fields"].get("tool_call_id").is_some(),
            "{response}"
        );
        // A card's header shows the tool's name.
        let mut body = request_with(&conversation, json!([{"name": "a"}]));
        body["tool_name"] = json!(forged);
        let (status, response) = server.action(&token, body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{forged:?}: {response}");
        assert!(
            response["error"]["fields"].get("tool_name").is_some(),
            "{response}"
        );
        let (status, _) = server
            .send(
                "POST",
                "/api/tools/execute",
                Some(&token),
                Some(
                    json!({"conversation_id": conversation, "tool_name": "calculator",
                    "tool_call_id": forged, "arguments": {"expression": "1+1"}}),
                ),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    assert!(!server.logs().contains("forged line"));
}

#[tokio::test]
async fn any_remembered_value_can_be_deleted_user_wide_ones_too() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("forget").await;
    let conversation = server.new_conversation(&token).await;
    let id = call_id();
    let (status, body) = server
        .action(
            &token,
            json!({"action": "create_request", "conversation_id": conversation, "tool_name": "t",
                "tool_call_id": id, "reason": "why", "save_for": "user",
                "fields": [{"name": "api_key", "type": "secret"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
                "user_inputs": {"api_key": "sk-user-wide-123"}}),
        )
        .await;
    let list = |conversation: String| {
        let server = &server;
        let token = token.clone();
        async move {
            let (_, body) = server
                .action(
                    &token,
                    json!({"action": "get_session_values", "conversation_id": conversation}),
                )
                .await;
            body["values"].as_array().cloned().unwrap_or_default()
        }
    };
    let values = list(conversation.clone()).await;
    assert_eq!(values.len(), 1, "{values:?}");
    assert_eq!(values[0]["scope"], "user");
    let key = values[0]["key"].as_str().expect("key").to_owned();

    // Clearing the conversation's values leaves a user-wide one; deleting it removes it.
    server
        .action(
            &token,
            json!({"action": "clear_session_values", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(list(conversation.clone()).await.len(), 1);
    // Another user cannot delete it.
    let (_, stranger) = server.new_user("stranger").await;
    let theirs = server.new_conversation(&stranger).await;
    let (status, _) = server
        .action(
            &stranger,
            json!({"action": "delete_saved_value", "conversation_id": theirs, "scope": "user", "key": key}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = server
        .action(
            &token,
            json!({"action": "delete_saved_value", "conversation_id": conversation, "scope": "user", "key": key}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cleared"], 1);
    let other = server.new_conversation(&token).await;
    assert!(list(other).await.is_empty(), "gone from every conversation");
}

#[tokio::test]
async fn remember_notes_are_capped_per_user() {
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_MAX_MEMORY_NOTES", "2"))
            .await;
    let (_, token) = server.new_user("notes").await;
    let conversation = server.new_conversation(&token).await;
    let mut replies = Vec::new();
    for note in ["/remember one", "/remember two", "/remember three"] {
        let (status, body) = server
            .post_message(&token, &conversation, json!(note))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        replies.push(
            body["reply"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    assert!(replies[1].contains("I will remember: two"), "{replies:?}");
    assert!(replies[2].contains("the most I keep"), "{replies:?}");
    let mut db = server.db().await;
    let kept: i64 = sqlx::query_scalar("select count(*) from memory_notes")
        .fetch_one(&mut db)
        .await
        .expect("count");
    assert_eq!(kept, 2);
}

#[tokio::test]
async fn the_per_request_limits_are_settings_the_server_and_its_document_apply() {
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_MAX_FIELDS", "3")
            .env("TOOLGATE_MAX_PATTERN_CHARS", "5")
            .env("TOOLGATE_MAX_VALUE_CHARS", "10")
            .env("TOOLGATE_MAX_DEFINITION_CHARS", "20")
            .env("TOOLGATE_MAX_VISIBLE_IF_DEPTH", "1"),
    )
    .await;
    let (_, token) = server.new_user("settings").await;
    let conversation = server.new_conversation(&token).await;

    // Each lowered limit is a 422 naming what broke it, where the defaults accept it.
    let cases = [
        (
            json!([{"name": "a"}, {"name": "b"}, {"name": "c"}, {"name": "d"}]),
            "fields.fields",
            "at most 3 fields",
        ),
        (
            json!([{"name": "a", "validation": "[a-z]+x"}]),
            "fields.a",
            "at most 5 characters",
        ),
        (
            json!([{"name": "a", "label": "A label of some thirty characters"}]),
            "fields.a",
            "at most 20 characters",
        ),
        (
            json!([{"name": "a"}, {"name": "b", "visible_if": {"field": "a"}},
                   {"name": "c", "visible_if": {"field": "b"}}]),
            "fields.c",
            "at most 1 deep",
        ),
        (
            json!([{"name": "a"}, {"name": "b", "visible_if": {"field": "a"}}]),
            "",
            "",
        ),
    ];
    for (fields, key, words) in cases {
        let (status, body) = server
            .action(&token, request_with(&conversation, fields.clone()))
            .await;
        if key.is_empty() {
            assert_eq!(status, StatusCode::CREATED, "{fields}: {body}");
            continue;
        }
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{fields}: {body}");
        let message = body["error"]["fields"][key].as_str().unwrap_or_default();
        assert!(message.contains(words), "{key}: {body}");
    }

    // Values: eleven characters is one too many here.
    let id = call_id();
    let (status, body) = server
        .action(
            &token,
            json!({"action": "create_request", "conversation_id": conversation, "tool_name": "t",
                "tool_call_id": id, "reason": "why", "fields": [{"name": "code"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": id,
                "user_inputs": {"code": "01234567890"}}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let message = body["error"]["fields"]["code"].as_str().unwrap_or_default();
    assert!(message.contains("at most 10 characters"), "{body}");

    // The web chat learns the limits from /api/info; the document states the field count.
    let (status, info) = server.send("GET", "/api/info", None, None).await;
    assert_eq!(status, StatusCode::OK, "{info}");
    assert_eq!(info["input_limits"]["fields"], 3, "{info}");
    assert_eq!(info["input_limits"]["value_chars"], 10, "{info}");
    assert_eq!(info["input_limits"]["options"], 200, "{info}");
    let (_, document) = server.send("GET", "/api/openapi.json", None, None).await;
    assert_eq!(
        document["components"]["schemas"]["CreateRequestAction"]["properties"]["fields"]["maxItems"],
        3
    );
}

#[tokio::test]
async fn a_per_request_limit_of_zero_stops_the_start() {
    let result =
        TestServer::try_start(ServerOptions::default().env("TOOLGATE_MAX_FIELDS", "0")).await;
    let err = format!("{:#}", result.err().expect("must not start"));
    assert!(
        err.contains("TOOLGATE_MAX_FIELDS must be above zero"),
        "{err}"
    );
}

/// A value nested as deep as the JSON parser still reads, sent as a tool's arguments,
/// would be stored inside a request and its events one level too deep to read back,
/// and the conversation's stream would stall on it: the body is refused whole, and
/// nothing of it is stored.
#[tokio::test]
async fn a_body_nested_too_deep_is_refused_and_nothing_of_it_is_stored() {
    let server = TestServer::start_with(with_demo_tools(ServerOptions::default())).await;
    let (_, token) = server.new_user("deep").await;
    let conversation = server.new_conversation(&token).await;
    let deep = (0..125).fold(json!(1), |inner, _| json!([inner]));
    let id = call_id();

    let (status, body) = server
        .send(
            "POST",
            "/api/tools/execute",
            Some(&token),
            Some(
                json!({"conversation_id": conversation, "tool_name": "query_database",
                "tool_call_id": id, "arguments": {"query": "select 1", "z": deep}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("nests deeper"),
        "{body}"
    );
    let mut request = request_with(&conversation, json!([{"name": "a", "type": "text"}]));
    request["tool_args"] = json!({"z": deep});
    let (status, body) = server.action(&token, request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");

    // Nothing was stored: no request waits, and the same call goes through as new.
    let (status, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pending}");
    assert_eq!(pending["requests"], json!([]), "{pending}");
    let (status, body) = server
        .send(
            "POST",
            "/api/tools/execute",
            Some(&token),
            Some(
                json!({"conversation_id": conversation, "tool_name": "query_database",
                "tool_call_id": id, "arguments": {"query": "select 1"}}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["requires_user_input"], true, "{body}");
}

/// The model's server may fetch an image's URL from where it runs; a URL into that
/// network (loopback, private, metadata) is refused before anything is stored or sent.
#[tokio::test]
async fn an_image_url_into_the_model_servers_network_is_refused() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("image-url").await;
    let conversation = server.new_conversation(&token).await;
    for url in [
        "http://169.254.169.254/latest/meta-data/iam/",
        "http://2130706433:8080/admin",
        "http://[::ffff:10.0.0.1]/",
        "http://localhost:5432/",
    ] {
        let (status, body) = server
            .post_message(
                &token,
                &conversation,
                json!([{"type": "text", "text": "describe"}, {"type": "image", "url": url}]),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {body}");
        assert!(
            body["error"]["fields"]["content"].is_string(),
            "{url}: {body}"
        );
    }
    assert_eq!(
        server.messages(&token, &conversation).await,
        Vec::<Value>::new()
    );
}

/// A caller (or a model) that asks without end does not fill the user's screen or
/// every read of what waits: past the most waiting requests of a conversation a new
/// one is a 409; once one ends there is room again, and other conversations are their
/// own.
#[tokio::test]
async fn a_conversation_holds_at_most_so_many_waiting_requests() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("waiting").await;
    let conversation = server.new_conversation(&token).await;
    let field = json!([{"name": "a", "type": "text"}]);
    let mut first = None;
    for _ in 0..100 {
        let request = request_with(&conversation, field.clone());
        let id = request["tool_call_id"].clone();
        let (status, body) = server.action(&token, request).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        first.get_or_insert(id);
    }
    let (status, body) = server
        .action(&token, request_with(&conversation, field.clone()))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "too_many_pending", "{body}");
    let (status, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pending}");
    assert_eq!(pending["requests"].as_array().map(Vec::len), Some(100));

    let other = server.new_conversation(&token).await;
    let (status, body) = server
        .action(&token, request_with(&other, field.clone()))
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "another conversation is its own: {body}"
    );
    let (status, body) = server
        .action(
            &token,
            json!({"action": "cancel_request", "tool_call_id": first}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = server
        .action(&token, request_with(&conversation, field))
        .await;
    assert_eq!(status, StatusCode::CREATED, "room again: {body}");
}

/// A conversation holds at most `TOOLGATE_MAX_CONVERSATION_MIB` of messages: past it the
/// user's messages, commands and run-starting ones alike, are a 409 that says what to
/// do, and nothing of them is stored; another conversation goes on. Every step reads
/// the conversation's messages, so one user's conversation grown without bound would
/// take the server's memory from everyone.
#[tokio::test]
async fn a_conversation_holds_at_most_its_size_in_messages() {
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_MAX_CONVERSATION_MIB", "1"))
            .await;
    let (_, token) = server.new_user("full").await;
    let conversation = server.new_conversation(&token).await;
    // Posts `content` until it is refused: how many were taken, and the refusal.
    let fill = |content: Value| {
        let (server, token, conversation) = (&server, &token, &conversation);
        async move {
            let mut accepted = 0;
            loop {
                let (status, body) = server
                    .post_message(token, conversation, content.clone())
                    .await;
                if status != StatusCode::OK {
                    return (accepted, status, body);
                }
                accepted += 1;
                assert!(accepted < 100, "never refused");
            }
        }
    };
    // About 140 KB a message: "/help" and seven parts of 20,000 characters.
    let mut large = vec![json!({"type": "text", "text": "/help"})];
    for _ in 0..7 {
        large.push(json!({"type": "text", "text": "x".repeat(20_000)}));
    }
    let large = Value::Array(large);
    let (accepted, status, body) = fill(large.clone()).await;
    assert!((5..=7).contains(&accepted), "{accepted} accepted");
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conversation_full", "{body}");
    let said = body["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("start a new conversation"), "{said}");
    // What room is left takes smaller ones, until less than one of them is left.
    let help = format!("/help {}", "x".repeat(19_994));
    let (more, status, _) = fill(json!(help)).await;
    assert_eq!(status, StatusCode::CONFLICT);

    let stored = server.messages(&token, &conversation).await.len();
    assert_eq!(
        stored,
        (accepted + more) * 2,
        "a command and its reply each time"
    );
    // A message that would start a run, as large as the last refused, is refused too.
    let question = format!("What {}", "y".repeat(19_995));
    let (status, body) = server
        .post_message(&token, &conversation, json!(question))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "conversation_full");
    assert_eq!(server.messages(&token, &conversation).await.len(), stored);

    let fresh = server.new_conversation(&token).await;
    let (status, body) = server.post_message(&token, &fresh, large).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
