use reqwest::StatusCode;
use serde_json::json;
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
    let server = TestServer::start_with(ServerOptions {
        database_url: Some(through_proxy),
        ..ServerOptions::default()
    })
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
