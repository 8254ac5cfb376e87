//! The http kind's egress policy, attacked: a URL the model chooses must not reach
//! this machine or the network inside, directly, through a name, through IPv6 forms or
//! through a redirect, unless the tool opts in.

use axum::http::{HeaderMap, StatusCode as AxumStatus, header};
use axum::response::IntoResponse;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{MockHttp, ServerOptions, TempDir, TestServer, write_temp_file};

const TOOLS: &str = r#"
[[tools]]
name = "fetch"
description = "Fetch a URL"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
url = "{target}"
headers = { Authorization = "Bearer {env.EGRESS_TOKEN}" }

[[tools]]
name = "fetch_inside"
description = "Fetch a URL inside the network"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
url = "{target}"
allow_private_networks = true
headers = { Authorization = "Bearer {env.EGRESS_TOKEN}" }

[[tools]]
name = "fetch_capped"
description = "Fetch a small answer"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
url = "{target}"
allow_private_networks = true
max_response_bytes = 1024
timeout_seconds = 60

[[tools]]
name = "fetch_listed"
description = "Fetch from the listed hosts only"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
url = "{target}"
allow_hosts = ["api.example.com"]
allow_private_networks = true
"#;

const TOKEN: &str = "egress-secret-token-5521";

struct Egress {
    server: TestServer,
    listener: MockHttp,
    _tools: TempDir,
}

async fn egress() -> Egress {
    let listener = MockHttp::start().await;
    let (dir, path) = write_temp_file("tools.toml", TOOLS);
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_TOOLS", &path.to_string_lossy())
            .env("EGRESS_TOKEN", TOKEN),
    )
    .await;
    Egress {
        server,
        listener,
        _tools: dir,
    }
}

impl Egress {
    async fn fetch(&self, tool: &str, target: &str) -> Value {
        let (_, token) = self.server.new_user("egress").await;
        let conversation = self.server.new_conversation(&token).await;
        let (status, body) = self
            .server
            .send(
                "POST",
                "/api/tools/execute",
                Some(&token),
                Some(json!({"conversation_id": conversation, "tool_name": tool,
                    "tool_call_id": format!("call_{}", uuid::Uuid::new_v4().simple()),
                    "arguments": {"target": target}})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    fn port(&self) -> String {
        self.listener
            .base
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_owned()
    }
}

fn refused(outcome: &Value) -> bool {
    outcome["success"] == false
        && outcome["error"]
            .as_str()
            .is_some_and(|e| e.contains("refused by the tool's egress policy"))
}

#[tokio::test]
async fn a_local_listener_is_unreachable_in_every_form_unless_allowed() {
    let e = egress().await;
    let port = e.port();
    for target in [
        format!("http://127.0.0.1:{port}/direct"),
        format!("http://localhost:{port}/by-name"),
        format!("http://[::1]:{port}/ipv6"),
        format!("http://[::ffff:127.0.0.1]:{port}/mapped"),
        format!("http://0.0.0.0:{port}/unspecified"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("file:///etc/passwd?{port}"),
    ] {
        let outcome = e.fetch("fetch", &target).await;
        assert!(refused(&outcome), "{target}: {outcome}");
    }
    assert!(e.listener.received().is_empty(), "the listener got nothing");

    // Opted in: the same listener is reached, directly and by name; metadata never.
    let outcome = e
        .fetch("fetch_inside", &format!("http://127.0.0.1:{port}/inside"))
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
    let outcome = e
        .fetch("fetch_inside", &format!("http://localhost:{port}/inside"))
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
    let outcome = e
        .fetch("fetch_inside", "http://169.254.169.254/latest/meta-data/")
        .await;
    assert!(refused(&outcome), "{outcome}");
    assert_eq!(e.listener.received().len(), 2);

    // A host list keeps even an opted-in tool to its hosts.
    let outcome = e
        .fetch("fetch_listed", &format!("http://127.0.0.1:{port}/listed"))
        .await;
    assert!(refused(&outcome), "{outcome}");
    assert_eq!(e.listener.received().len(), 2);
}

/// A service that redirects: across origins with 307, within its origin with 303.
async fn redirector(elsewhere: String) -> String {
    let app = axum::Router::new()
        .route(
            "/cross",
            axum::routing::any(move || {
                let elsewhere = elsewhere.clone();
                async move {
                    let mut headers = HeaderMap::new();
                    if let Ok(location) = format!("{elsewhere}/stolen").parse() {
                        headers.insert(header::LOCATION, location);
                    }
                    (AxumStatus::TEMPORARY_REDIRECT, headers)
                }
            }),
        )
        .route(
            "/same",
            axum::routing::any(|| async {
                let mut headers = HeaderMap::new();
                headers.insert(
                    header::LOCATION,
                    header::HeaderValue::from_static("/landing"),
                );
                (AxumStatus::SEE_OTHER, headers)
            }),
        )
        .route(
            "/landing",
            axum::routing::get(|| async { axum::Json(json!({"landed": true})).into_response() }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    base
}

#[tokio::test]
async fn redirects_stay_within_their_origin() {
    let e = egress().await;
    let service = redirector(e.listener.base.clone()).await;
    // A 307 would re-send the body and the Authorization header elsewhere: not followed.
    let outcome = e.fetch("fetch_inside", &format!("{service}/cross")).await;
    assert_eq!(outcome["success"], false, "{outcome}");
    assert!(
        outcome["error"]
            .as_str()
            .is_some_and(|err| err.contains("307") && err.contains("not followed")),
        "{outcome}"
    );
    assert!(
        e.listener.received().is_empty(),
        "nothing reached the other origin"
    );
    // Within the origin, a redirect is followed.
    let outcome = e.fetch("fetch_inside", &format!("{service}/same")).await;
    assert_eq!(outcome["result"], json!({"landed": true}), "{outcome}");
}

#[tokio::test]
async fn an_error_page_comes_back_short_and_without_what_the_request_carried() {
    let e = egress().await;
    let echo = format!("you sent Bearer {TOKEN}; {}", "lorem ipsum ".repeat(200));
    e.listener.answer_with(500, json!({"detail": echo}));
    let outcome = e
        .fetch("fetch_inside", &format!("{}/fails", e.listener.base))
        .await;
    let error = outcome["error"].as_str().unwrap_or_default();
    assert!(error.contains("HTTP 500"), "{error}");
    assert!(!error.contains(TOKEN), "{error}");
    assert!(error.contains("[redacted]"), "{error}");
    assert!(
        error.chars().count() < 300,
        "{} characters",
        error.chars().count()
    );
}

#[tokio::test]
async fn a_response_over_the_cap_is_cut_off_while_it_streams() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    // A service that sends four times the cap and then never finishes: a client that
    // read the whole body before measuring it would wait for the tool's timeout (60 s).
    let service = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", service.local_addr().expect("address"));
    let serving = tokio::spawn(async move {
        let (mut socket, _) = service.accept().await.expect("accept");
        let mut request = vec![0u8; 8192];
        let _ = socket.read(&mut request).await;
        let chunk = "x".repeat(4096);
        let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
        let body = format!("{:x}\r\n{chunk}\r\n", chunk.len());
        socket.write_all(head.as_bytes()).await.expect("head");
        socket.write_all(body.as_bytes()).await.expect("body");
        socket.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_secs(120)).await;
    });
    let e = egress().await;
    let started = Instant::now();
    let outcome = e.fetch("fetch_capped", &format!("{base}/big")).await;
    let waited = started.elapsed();
    serving.abort();
    assert_eq!(outcome["success"], false, "{outcome}");
    let error = outcome["error"].as_str().unwrap_or_default();
    assert!(error.contains("larger than 1024 bytes"), "{outcome}");
    assert!(!error.contains("xxxx"), "the body came back: {outcome}");
    assert!(
        waited < Duration::from_secs(30),
        "the call waited {waited:?}: the body was read to its end before it was measured"
    );
}
