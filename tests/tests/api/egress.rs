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

[[tools]]
name = "fetch_inside"
description = "Fetch a URL inside the network"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
url = "{target}"
allow_hosts = ["127.0.0.1", "localhost", "169.254.169.254"]
allow_private_networks = true
headers = { Authorization = "Bearer {env.EGRESS_TOKEN}" }

[[tools]]
name = "fetch_capped"
description = "Fetch a small answer"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
url = "{target}"
allow_hosts = ["127.0.0.1"]
allow_private_networks = true
max_response_bytes = 1024
timeout_seconds = 60

[[tools]]
name = "repo_issues"
description = "A repository's issues"
kind = "http"
parameters = { type = "object", properties = { base = { type = "string" }, owner = { type = "string" }, repo = { type = "string" } }, required = ["base", "owner", "repo"] }
[tools.http]
url = "{base}/v1/repos/{owner}/{repo}/issues?key={env.EGRESS_KEY}"
allow_hosts = ["127.0.0.1"]
allow_private_networks = true

[[tools]]
name = "post_to"
description = "Post to a service"
kind = "http"
parameters = { type = "object", properties = { target = { type = "string" } }, required = ["target"] }
[tools.http]
method = "POST"
url = "{target}"
allow_hosts = ["127.0.0.1"]
allow_private_networks = true

[[tools]]
name = "keyed_item"
description = "An item of a service whose key is in its address"
kind = "http"
parameters = { type = "object", properties = { id = { type = "string" } }, required = ["id"] }
[tools.http]
url = "{env.EGRESS_KEYED_BASE}/items/{id}"
allow_hosts = ["127.0.0.1"]
allow_private_networks = true

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
/// An operator's key with characters that URLs and JSON escape.
const KEY: &str = "k3y+/with=\"odd\" chars";
/// A key written into the path of a service's address, as a bot API's is.
const PATH_TOKEN: &str = "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw";

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
            .env("EGRESS_TOKEN", TOKEN)
            .env("EGRESS_KEY", KEY)
            .env(
                "EGRESS_KEYED_BASE",
                &format!("{}/bot5501234:{PATH_TOKEN}", listener.base),
            ),
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
        let (status, body) = self.call(tool, json!({"target": target})).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body
    }

    async fn call(&self, tool: &str, arguments: Value) -> (StatusCode, Value) {
        let (_, token) = self.server.new_user("egress").await;
        let conversation = self.server.new_conversation(&token).await;
        self.server
            .send(
                "POST",
                "/api/tools/execute",
                Some(&token),
                Some(json!({"conversation_id": conversation, "tool_name": tool,
                    "tool_call_id": format!("call_{}", uuid::Uuid::new_v4().simple()),
                    "arguments": arguments})),
            )
            .await
    }

    /// A new user's `post_to` call to `target`, which waits for their approval: the
    /// user's token, the call's id and the digest an approval names.
    async fn post_awaiting_approval(&self, user: &str, target: &str) -> (String, String, Value) {
        let (_, token) = self.server.new_user(user).await;
        let conversation = self.server.new_conversation(&token).await;
        let id = format!("call_{}", uuid::Uuid::new_v4().simple());
        let (status, asked) = self
            .server
            .send(
                "POST",
                "/api/tools/execute",
                Some(&token),
                Some(
                    json!({"conversation_id": conversation, "tool_name": "post_to",
                    "tool_call_id": id, "arguments": {"target": target}}),
                ),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{asked}");
        assert_eq!(asked["requires_approval"], true, "{asked}");
        let digest = asked["approval_request"]["arguments_digest"].clone();
        (token, id, digest)
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

/// Why a server given `tools` (and the operator's token) refuses to start.
async fn refused_start(tools: &str) -> String {
    let (_dir, path) = write_temp_file("tools.toml", tools);
    let started = TestServer::try_start(
        ServerOptions::default()
            .env("TOOLGATE_TOOLS", &path.to_string_lossy())
            .env("EGRESS_TOKEN", TOKEN),
    )
    .await;
    format!("{:#}", started.err().expect("refused"))
}

/// A tool whose host the model chooses and whose request carries the operator's token
/// would hand that token to whatever host a prompt-injected model names: refused at
/// start, naming the tool, unless its hosts are listed.
#[tokio::test]
async fn a_tool_that_lets_the_model_choose_where_its_token_goes_stops_start_up() {
    let fetch_with_token = TOOLS.replacen(
        "[tools.http]\nurl = \"{target}\"\n",
        "[tools.http]\nurl = \"{target}\"\nheaders = { Authorization = \"Bearer {env.EGRESS_TOKEN}\" }\n",
        1,
    );
    assert_ne!(fetch_with_token, TOOLS, "the replacement must apply");
    let err = refused_start(&fetch_with_token).await;
    assert!(
        err.contains("tool `fetch`") && err.contains("`{target}`") && err.contains("allow_hosts"),
        "{err}"
    );
    assert!(!err.contains(TOKEN), "{err}");
}

/// A listed host does not make a model-filled `X-Forwarded-Host` safe: a front shared by
/// many sites would hand the operator's token to the site the model names. Refused at
/// start, naming the tool and the header.
#[tokio::test]
async fn a_tool_that_lets_the_model_name_the_site_behind_its_host_stops_start_up() {
    let routed_by_the_model = TOOLS.replacen(
        "headers = { Authorization = \"Bearer {env.EGRESS_TOKEN}\" }",
        "headers = { Authorization = \"Bearer {env.EGRESS_TOKEN}\", X-Forwarded-Host = \"{target}\" }",
        1,
    );
    assert_ne!(routed_by_the_model, TOOLS, "the replacement must apply");
    let err = refused_start(&routed_by_the_model).await;
    assert!(
        err.contains("tool `fetch_inside`")
            && err.contains("x-forwarded-host")
            && err.contains("`{target}`"),
        "{err}"
    );
    assert!(!err.contains(TOKEN), "{err}");
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

/// `text` percent-encoded as a URL's query carries it.
fn percent(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                (byte as char).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

#[tokio::test]
async fn an_answer_that_echoes_the_operators_key_comes_back_without_it() {
    let e = egress().await;
    // The key went out in the URL (as the URL parser encodes a raw value: the quotes
    // and the space); the service hands it back as it received it, URL-encoded in a
    // link, form-decoded (the `+` a space), raw, and inside text that is itself JSON.
    let as_received = "k3y+/with=%22odd%22%20chars";
    let link = format!(
        "{}/v1/repos/a/b/issues?key={}&page=2",
        e.listener.base,
        percent(KEY)
    );
    e.listener.answer_with(
        200,
        json!({
            "next": link,
            "echo": format!("you sent key={as_received}"),
            "decoded": "invalid key 'k3y /with=\"odd\" chars'",
            "debug": {"key": KEY},
            "raw": serde_json::to_string(&json!({"key": KEY})).unwrap_or_default(),
        }),
    );
    let (status, outcome) = e
        .call(
            "repo_issues",
            json!({"base": e.listener.base, "owner": "a", "repo": "b"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["success"], true, "{outcome}");
    let received = e.listener.received();
    assert_eq!(received.len(), 1);
    assert!(
        received[0]
            .path_and_query
            .contains(&format!("key={as_received}")),
        "the service got the key: {}",
        received[0].path_and_query
    );
    let shown = outcome.to_string();
    for form in ["k3y", "odd", "with="] {
        assert!(!shown.contains(form), "{form} came back: {shown}");
    }
    assert_eq!(
        outcome["result"]["next"],
        json!(format!(
            "{}/v1/repos/a/b/issues?key={}&page=2",
            e.listener.base,
            protocol::fields::MASKED
        )),
        "{outcome}"
    );
}

/// A service whose key is in its address's path says the path back (an error page
/// naming what was not found, a `self` link): the key reaches neither the model nor
/// the user.
#[tokio::test]
async fn a_key_in_the_path_of_a_services_address_never_comes_back() {
    let e = egress().await;
    let not_found = json!({"status": 404, "path": format!("/bot5501234:{PATH_TOKEN}/items/x")});
    let found = json!({
        "links": {"self": format!("{}/bot5501234:{PATH_TOKEN}/items/y", e.listener.base)},
        "echo": format!("token {PATH_TOKEN} accepted"),
    });
    for (id, status, answer) in [("x", 404, not_found), ("y", 200, found)] {
        e.listener.answer_with(status, answer);
        let (status, outcome) = e.call("keyed_item", json!({"id": id})).await;
        assert_eq!(status, StatusCode::OK, "{outcome}");
        let shown = outcome.to_string();
        assert!(!shown.contains(PATH_TOKEN), "the key came back: {shown}");
        // What is no secret still comes back: the item's name.
        assert!(shown.contains(&format!("/items/{id}")), "{shown}");
    }
    let received = e.listener.received();
    assert_eq!(received.len(), 2);
    assert!(
        received[0].path_and_query.contains(PATH_TOKEN),
        "the service got its key: {}",
        received[0].path_and_query
    );
}

#[tokio::test]
async fn a_value_cannot_climb_the_urls_path_to_another_endpoint() {
    let e = egress().await;
    for (owner, repo) in [("..", ".."), ("a", ".."), (".", "b")] {
        let (status, outcome) = e
            .call(
                "repo_issues",
                json!({"base": e.listener.base, "owner": owner, "repo": repo}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{outcome}");
        assert_eq!(outcome["success"], false, "{owner}/{repo}: {outcome}");
    }
    assert!(
        e.listener.received().is_empty(),
        "a request went out: {:?}",
        e.listener.received()
    );
}

#[tokio::test]
async fn a_nul_in_the_arguments_is_refused_before_the_service_is_called() {
    let e = egress().await;
    let (status, body) = e
        .call(
            "repo_issues",
            json!({"base": e.listener.base, "owner": "a\u{0}b", "repo": "b"}),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(
        body["error"]["fields"]["arguments.owner"].is_string(),
        "{body}"
    );
    assert!(
        e.listener.received().is_empty(),
        "the service was called although the call was refused"
    );
}

#[tokio::test]
async fn a_nul_in_an_answer_is_kept_out_and_the_approved_call_recorded() {
    let e = egress().await;
    e.listener
        .answer_with(200, json!({"text": "before\u{0}after", "a\u{0}b": 1}));
    let (token, id, digest) = e
        .post_awaiting_approval("nul-answer", &format!("{}/notes", e.listener.base))
        .await;
    // Approved, the call runs and its answer is stored with the request: Postgres
    // could not store the NUL, so without a stand-in the approval would fail after the
    // call was made.
    let (status, approved) = e
        .server
        .action(
            &token,
            json!({"action": "submit_decision", "tool_call_id": id, "decision": "approve",
                "arguments_digest": digest}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    let result = &approved["tool_result"]["result"];
    assert_eq!(result["text"], "before\u{FFFD}after", "{approved}");
    assert_eq!(result["a\u{FFFD}b"], 1, "{approved}");
    assert_eq!(e.listener.received().len(), 1);
}

#[tokio::test]
async fn an_approved_call_is_made_and_recorded_even_when_the_client_hangs_up() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    // A service that answers a second and a half after each POST.
    let posts = Arc::new(AtomicUsize::new(0));
    let counted = posts.clone();
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::post(move || {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1500)).await;
                axum::Json(json!({"posted": true}))
            }
        }),
    );
    let service = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", service.local_addr().expect("address"));
    tokio::spawn(async move {
        let _ = axum::serve(service, app).await;
    });

    let e = egress().await;
    let (token, id, digest) = e
        .post_awaiting_approval("hangs-up", &format!("{base}/slow"))
        .await;

    // The user approves; their browser goes away while the tool runs (the service has
    // been called and takes its time).
    let approving = e
        .server
        .client
        .post(e.server.url("/api/tool-user-input"))
        .bearer_auth(&token)
        .json(&json!({"action": "submit_decision", "tool_call_id": id,
            "decision": "approve", "arguments_digest": digest}))
        .send();
    let approving = tokio::spawn(approving);
    for _ in 0..300 {
        if posts.load(Ordering::SeqCst) > 0 || approving.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !approving.is_finished(),
        "the approval was answered before the service was: {:?}",
        approving.await
    );
    approving.abort();

    // The call went out once, and its outcome is recorded all the same.
    let mut db = e.server.db().await;
    let mut recorded = None;
    for _ in 0..100 {
        recorded = sqlx::query_scalar::<_, String>(
            "select outcome from tool_call_log where tool_call_id = $1 and outcome in ('success', 'failure')",
        )
        .bind(&id)
        .fetch_optional(&mut db)
        .await
        .expect("the log");
        if recorded.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        recorded.as_deref(),
        Some("success"),
        "the call was not recorded"
    );
    assert_eq!(posts.load(Ordering::SeqCst), 1);
    let stored = sqlx::query_scalar::<_, Option<serde_json::Value>>(
        "select tool_result from tool_user_input_requests where tool_call_id = $1",
    )
    .bind(&id)
    .fetch_one(&mut db)
    .await
    .expect("the request");
    assert_eq!(
        stored.map(|result| result["result"].clone()),
        Some(json!({"posted": true}))
    );
}
