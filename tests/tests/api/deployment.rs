//! Safe deployment defaults: dev sign-in stays on loopback, answers only loopback host
//! names, JSON routes take only JSON, and every response carries the browser headers.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{ServerOptions, TempDir, TestServer, free_port};

const OVERRIDE: &str = "TOOLGATE_DEV_AUTH_ON_PUBLIC_BIND_I_UNDERSTAND";

fn on_all_interfaces(port: u16) -> ServerOptions {
    ServerOptions::default().env("TOOLGATE_BIND", &format!("0.0.0.0:{port}"))
}

#[tokio::test]
async fn dev_sign_in_on_a_public_address_is_refused_at_start() {
    let port = free_port().expect("port");
    let err = TestServer::try_start_on(on_all_interfaces(port), port)
        .await
        .err()
        .expect("dev sign-in on 0.0.0.0 must not start");
    let err = format!("{err:#}");
    assert!(err.contains("refusing to start"), "{err}");
    assert!(err.contains("not a loopback address"), "{err}");
    assert!(err.contains(OVERRIDE), "the error says how: {err}");
}

#[tokio::test]
async fn dev_sign_in_on_a_public_address_starts_with_the_named_override() {
    let port = free_port().expect("port");
    let server = TestServer::start_on(on_all_interfaces(port).env(OVERRIDE, "1"), port).await;
    let token = server.token("override-user").await;
    let (status, _) = server
        .send("GET", "/api/conversations", Some(&token), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        server
            .logs()
            .contains("anyone who reaches this port can sign in as any user"),
        "the override is logged loudly: {}",
        server.logs()
    );
}

#[tokio::test]
async fn a_public_address_without_dev_sign_in_starts() {
    let port = free_port().expect("port");
    let server =
        TestServer::start_on(on_all_interfaces(port).without("TOOLGATE_DEV_AUTH"), port).await;
    let (status, _) = server.send("GET", "/api/info", None, None).await;
    assert_eq!(status, StatusCode::OK);
}

async fn dev_token_with_host(server: &TestServer, host: &str) -> (StatusCode, Value) {
    dev_token_with_headers(server, &[("host", host)]).await
}

async fn dev_token_with_headers(
    server: &TestServer,
    headers: &[(&str, &str)],
) -> (StatusCode, Value) {
    let mut request = server.client.post(server.url("/api/dev/token"));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request
        .json(&json!({"user_id": "victim"}))
        .send()
        .await
        .expect("sent");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

fn port_of(server: &TestServer) -> String {
    server
        .base
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn dev_token_answers_only_requests_addressed_to_loopback() {
    let server = TestServer::start().await;
    let port = port_of(&server);
    // What a page whose DNS name was rebound to 127.0.0.1 sends from a browser.
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("0.0.0.0:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
    ] {
        let (status, body) = dev_token_with_host(&server, &host).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{host}: {body}");
        assert_eq!(body["error"]["code"], "forbidden", "{host}: {body}");
        assert!(body.get("token").is_none(), "{host}: {body}");
        assert!(!body.to_string().contains("eyJ"), "{host}: {body}");
    }
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "localhost".to_owned(),
    ] {
        let (status, body) = dev_token_with_host(&server, &host).await;
        assert_eq!(status, StatusCode::OK, "{host}: {body}");
        assert!(body["token"].is_string(), "{host}: {body}");
    }
}

/// A proxy on the same machine reaches the server at 127.0.0.1 and may say so in
/// `Host`; what it passes on comes from its own clients, anywhere. A request that says
/// it came through a proxy gets no token, whatever its `Host`.
#[tokio::test]
async fn dev_token_refuses_requests_that_came_through_a_proxy() {
    let server = TestServer::start().await;
    let port = port_of(&server);
    for (header, value) in [
        ("x-forwarded-for", "203.0.113.5"),
        ("X-Forwarded-For", "127.0.0.1"),
        ("forwarded", "for=203.0.113.5;proto=https"),
        ("x-forwarded-host", "chat.example.com"),
        ("x-forwarded-proto", "https"),
        ("x-real-ip", "203.0.113.5"),
        ("via", "1.1 proxy"),
    ] {
        let host = format!("127.0.0.1:{port}");
        let (status, body) =
            dev_token_with_headers(&server, &[("host", &host), (header, value)]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{header}: {body}");
        assert!(body.get("token").is_none(), "{header}: {body}");
        assert!(!body.to_string().contains("eyJ"), "{header}: {body}");
    }
}

/// A key given twice is refused: serde would act on the last, where a proxy, a
/// firewall's rules or an audit log in front may read the first.
#[tokio::test]
async fn a_body_that_gives_a_key_twice_is_refused_naming_it() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("twice").await;
    let conversation = server.new_conversation(&token).await;
    let (status, created) = server
        .action(
            &token,
            json!({"action": "create_request", "conversation_id": conversation,
                "tool_name": "t", "tool_call_id": "call_kept", "reason": "A code",
                "fields": [{"name": "code"}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let twice = |body: String| {
        server
            .client
            .post(server.url("/api/tool-user-input"))
            .bearer_auth(&token)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    for (body, field) in [
        (
            r#"{"action":"cancel_request","tool_call_id":"call_other","tool_call_id":"call_kept"}"#.to_owned(),
            "tool_call_id",
        ),
        (
            r#"{"action":"submit_response","tool_call_id":"call_kept","user_inputs":{"code":"1","code":"2"}}"#.to_owned(),
            "user_inputs.code",
        ),
    ] {
        let response = twice(body).await.expect("sent");
        let status = response.status();
        let answer: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(answer["error"]["fields"][field].is_string(), "{answer}");
    }
    // Nothing was cancelled or answered.
    let (_, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(
        pending["requests"][0]["tool_call_id"], "call_kept",
        "{pending}"
    );
}

#[tokio::test]
async fn json_routes_refuse_bodies_not_labelled_json() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("media").await;
    let post = |path: &str, content_type: Option<&str>, body: &str| {
        let mut request = server
            .client
            .post(server.url(path))
            .bearer_auth(&token)
            .body(body.to_owned());
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        request.send()
    };
    let cases = [
        (
            "/api/dev/token",
            Some("text/plain"),
            r#"{"user_id":"victim"}"#,
        ),
        (
            "/api/dev/token",
            Some("application/x-www-form-urlencoded"),
            r#"{"user_id":"victim"}"#,
        ),
        ("/api/dev/token", None, r#"{"user_id":"victim"}"#),
        (
            "/api/conversations",
            Some("text/plain;charset=UTF-8"),
            r#"{"title":"planted"}"#,
        ),
        (
            "/api/tool-user-input",
            Some("text/plain"),
            r#"{"action":"get_pending"}"#,
        ),
        (
            "/api/tools/execute",
            Some("multipart/form-data; boundary=x"),
            r#"{"tool_name":"x","arguments":{}}"#,
        ),
    ];
    for (path, content_type, body) in cases {
        let response = post(path, content_type, body).await.expect("sent");
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        assert_eq!(
            status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{path} {content_type:?}: {body}"
        );
        assert_eq!(body["error"]["code"], "unsupported_media_type", "{body}");
        assert!(body.get("token").is_none(), "{body}");
    }
    // Nothing was created by the refused bodies.
    let (_, list) = server
        .send("GET", "/api/conversations", Some(&token), None)
        .await;
    assert_eq!(list["conversations"], json!([]), "{list}");
    // JSON, with or without parameters, still works; so does an empty optional body.
    let response = post(
        "/api/conversations",
        Some("application/json; charset=utf-8"),
        r#"{"title":"fine"}"#,
    )
    .await
    .expect("sent");
    assert_eq!(response.status(), StatusCode::CREATED);
    let response = post("/api/conversations", None, "").await.expect("sent");
    assert_eq!(response.status(), StatusCode::CREATED);
}

#[tokio::test]
async fn every_response_carries_the_browser_security_headers() {
    let web = TempDir::new("toolgate-test-web");
    std::fs::write(web.0.join("index.html"), "<!doctype html><title>t</title>").expect("index");
    let server = TestServer::start_with(
        ServerOptions::default().env("TOOLGATE_WEB_DIR", &web.0.to_string_lossy()),
    )
    .await;
    for path in [
        "/",
        "/some/page",
        "/api/docs/",
        "/api/docs/swagger-initializer.js",
        "/api/openapi.json",
        "/api/info",
        "/api/nope",
        "/healthz",
    ] {
        let response = server
            .client
            .get(server.url(path))
            .send()
            .await
            .expect("sent");
        let headers = response.headers();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let csp = header("content-security-policy");
        for directive in [
            "default-src 'self'",
            "script-src 'self' 'wasm-unsafe-eval'",
            "style-src 'self'",
            "connect-src 'self'",
            "frame-ancestors 'none'",
            "object-src 'none'",
        ] {
            assert!(
                csp.contains(directive),
                "{path}: {directive} not in {csp:?}"
            );
        }
        assert!(!csp.contains("unsafe-inline"), "{path}: {csp}");
        assert_eq!(header("x-frame-options"), "DENY", "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        assert_eq!(header("referrer-policy"), "no-referrer", "{path}");
    }
}

/// What the API answers (a user's conversations, a refusal alike) is kept in no cache,
/// the browser's included, so it does not stay on a shared computer after sign-out.
#[tokio::test]
async fn the_apis_answers_are_never_stored() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("not-stored").await;
    let conversation = server.new_conversation(&token).await;
    for (path, bearer, status) in [
        (
            "/api/conversations".to_owned(),
            Some(&token),
            StatusCode::OK,
        ),
        (
            format!("/api/conversations/{conversation}/messages"),
            Some(&token),
            StatusCode::OK,
        ),
        (
            "/api/conversations".to_owned(),
            None,
            StatusCode::UNAUTHORIZED,
        ),
        ("/api/nope".to_owned(), Some(&token), StatusCode::NOT_FOUND),
    ] {
        let mut request = server.client.get(server.url(&path));
        if let Some(token) = bearer {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("sent");
        assert_eq!(response.status(), status, "{path}");
        assert_not_stored(&response, &path);
    }
    // An event stream too, which carries the conversation's words.
    let stream_token = server.stream_token(&token, &conversation).await;
    let path = format!("/api/conversations/{conversation}/events?token={stream_token}");
    let response = server
        .client
        .get(server.url(&path))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), StatusCode::OK);
    assert_not_stored(&response, "the event stream");
}

fn assert_not_stored(response: &reqwest::Response, what: &str) {
    let cache = response
        .headers()
        .get("cache-control")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    assert_eq!(cache, "no-store", "{what}");
}

/// The page, its scripts and its main module are checked again on every load against
/// the build they come from, so a browser never keeps files of another build (newer or
/// older: modification times would not tell a rollback); a split-off module, named by
/// its build, is kept; a module that is not there is never kept in its place.
#[tokio::test]
async fn the_web_chats_files_are_kept_only_while_their_build_is_the_same() {
    let web = TempDir::new("toolgate-test-web");
    let pkg = web.0.join("pkg");
    std::fs::create_dir_all(&pkg).expect("pkg");
    std::fs::write(web.0.join("index.html"), "<!doctype html><title>t</title>").expect("index");
    std::fs::write(pkg.join("frontend.js"), "export {};").expect("js");
    std::fs::write(pkg.join("frontend_bg.wasm"), b"\0asm\x01\0\0\0").expect("main");
    std::fs::write(
        pkg.join("split_cards.0123456789abcdef.wasm"),
        b"\0asm\x01\0\0\0",
    )
    .expect("module");
    let build_id = web.0.join("build-id");
    std::fs::write(&build_id, "00112233445566778899aabbccddeeff\n").expect("build id");
    let server = TestServer::start_with(
        ServerOptions::default().env("TOOLGATE_WEB_DIR", &web.0.to_string_lossy()),
    )
    .await;
    let get = |path: &str, headers: &[(&str, &str)]| {
        let mut request = server.client.get(server.url(path));
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        async move { request.send().await.expect("sent") }
    };
    let header = |response: &reqwest::Response, name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let first_build = "W/\"00112233445566778899aabbccddeeff\"";

    for path in [
        "/",
        "/index.html",
        "/some/page",
        "/pkg/frontend.js",
        "/pkg/frontend_bg.wasm",
    ] {
        let response = get(path, &[]).await;
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(header(&response, "cache-control"), "no-cache", "{path}");
        assert_eq!(header(&response, "etag"), first_build, "{path}");
        assert_eq!(header(&response, "last-modified"), "", "{path}");
    }
    // A module that is not there: the page comes instead, and must not be kept as it.
    let missing = get("/pkg/split_cards.fedcba9876543210.wasm", &[]).await;
    assert_eq!(header(&missing, "content-type"), "text/html");
    assert_eq!(header(&missing, "cache-control"), "no-cache");

    let module = get("/pkg/split_cards.0123456789abcdef.wasm", &[]).await;
    assert_eq!(module.status(), StatusCode::OK);
    assert_eq!(header(&module, "content-type"), "application/wasm");
    assert_eq!(
        header(&module, "cache-control"),
        "public, max-age=31536000, immutable"
    );

    // A hostile caller: paths that climb out of the folder and validators that are
    // garbage get the page or a full answer, never a file beside the bundle nor a 500.
    let outside = TempDir::new("toolgate-test-outside");
    std::fs::write(outside.0.join("secret.txt"), "secret").expect("a file beside the bundle");
    std::fs::write(outside.0.join("secret.0123456789abcdef.wasm"), "secret").expect("another");
    let sibling = outside
        .0
        .file_name()
        .expect("name")
        .to_string_lossy()
        .into_owned();
    for path in [
        format!("/../{sibling}/secret.txt"),
        format!("/%2e%2e/{sibling}/secret.txt"),
        format!("/pkg/..%2f..%2f{sibling}%2fsecret.txt"),
        format!("/pkg/%2e%2e/%2e%2e/{sibling}/secret.0123456789abcdef.wasm"),
    ] {
        let response = get(&path, &[]).await;
        assert!(
            response.status().as_u16() < 500,
            "{path}: {}",
            response.status()
        );
        let body = response.text().await.expect("body");
        assert!(!body.contains("secret"), "{path}: {body}");
    }
    for garbage in ["W/", "\"", ",,,", "W/\"\u{e9}\"", &"x".repeat(4000)] {
        let response = get("/pkg/frontend.js", &[("if-none-match", garbage)]).await;
        assert_eq!(
            response.status(),
            StatusCode::OK,
            "If-None-Match: {garbage:?}"
        );
    }

    // Checking again is cheap while the build is the same: a 304 without a body.
    let again = get("/pkg/frontend_bg.wasm", &[("if-none-match", first_build)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&again, "etag"), first_build);
    assert_eq!(header(&again, "cache-control"), "no-cache");
    // A date says nothing: the files' times are not what decides.
    let dated = get(
        "/pkg/frontend_bg.wasm",
        &[("if-modified-since", "Fri, 01 Jan 2100 00:00:00 GMT")],
    )
    .await;
    assert_eq!(dated.status(), StatusCode::OK);

    // Another build (an update, or a rollback to older files with older times): every
    // copy a browser holds is stale at once.
    std::fs::write(&build_id, "ffeeddccbbaa99887766554433221100").expect("build id");
    let changed = get(
        "/pkg/frontend_bg.wasm",
        &[
            ("if-none-match", first_build),
            ("if-modified-since", "Fri, 01 Jan 2100 00:00:00 GMT"),
        ],
    )
    .await;
    assert_eq!(changed.status(), StatusCode::OK);
    assert_eq!(
        header(&changed, "etag"),
        "W/\"ffeeddccbbaa99887766554433221100\""
    );

    // Without a build id (a bundle built by hand), the files' times decide.
    std::fs::remove_file(&build_id).expect("remove the build id");
    let plain = get("/pkg/frontend_bg.wasm", &[]).await;
    let modified = header(&plain, "last-modified");
    assert!(!modified.is_empty(), "a Last-Modified to check against");
    assert_eq!(header(&plain, "etag"), "");
    let again = get("/pkg/frontend_bg.wasm", &[("if-modified-since", &modified)]).await;
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&again, "cache-control"), "no-cache");
}
