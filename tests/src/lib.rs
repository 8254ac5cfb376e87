//! Shared helpers for the end-to-end tests: a real `toolgate` server process on its own
//! port, against a database of this test run, and a small JSON client.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::OnceCell;

pub mod mcp_server;

/// The HS256 key every test server is started with, so tests can sign their own tokens.
pub const JWT_SECRET: &str = "test-secret-0123456789-abcdefghijklmnop";
pub const SECRET_KEY: &str = "test-secret-key-for-sealing-values";

/// A plain HTTP client; reqwest needs a TLS provider chosen even for http://.
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// The admin URL: `DATABASE_URL`, or the local Postgres.
pub fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .ok()
        .filter(|url| !url.is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, Some(query)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let root = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    match query {
        Some(query) => format!("{root}/{database}?{query}"),
        None => format!("{root}/{database}"),
    }
}

/// The repository root.
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// The server program: `TOOLGATE_BIN`, or the `toolgate-e2e` binary cargo builds
/// beside the test executables (the same program as `toolgate`).
pub fn server_binary() -> Result<PathBuf> {
    if let Ok(path) = std::env::var("TOOLGATE_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().context("locating the test executable")?;
    let dir = exe
        .parent()
        .map(|deps| {
            if deps.ends_with("deps") {
                deps.parent().unwrap_or(deps)
            } else {
                deps
            }
        })
        .context("the test executable has no folder")?;
    let binary = dir.join("toolgate-e2e");
    if !binary.exists() {
        bail!(
            "{} is missing: run the tests with `cargo test -p tests`",
            binary.display()
        );
    }
    Ok(binary)
}

/// A new database for one test server. Servers never share one unless a test says
/// so (a restart), because each server's background sweeps act on every row of its
/// database. Databases left by earlier, finished test processes are dropped first.
pub async fn fresh_database() -> Result<String> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static CLEANED: OnceCell<()> = OnceCell::const_new();
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let admin = admin_url();
    let mut conn = sqlx_connect(&admin).await?;
    CLEANED
        .get_or_try_init(|| async {
            let mut cleanup = sqlx_connect(&admin).await?;
            let stale: Vec<String> = sqlx::query_scalar(
                "select datname from pg_database where datname like 'toolgate_test_%'",
            )
            .fetch_all(&mut cleanup)
            .await?;
            for name in stale {
                let pid = name
                    .trim_start_matches("toolgate_test_")
                    .split('_')
                    .next()
                    .unwrap_or_default();
                let alive = pid
                    .parse::<u32>()
                    .is_ok_and(|pid| PathBuf::from(format!("/proc/{pid}")).exists());
                if !alive {
                    let _ =
                        sqlx::query(&format!("drop database if exists \"{name}\" with (force)"))
                            .execute(&mut cleanup)
                            .await;
                }
            }
            Ok::<_, anyhow::Error>(())
        })
        .await?;
    let name = format!(
        "toolgate_test_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    );
    sqlx::query(&format!("create database \"{name}\""))
        .execute(&mut conn)
        .await?;
    Ok(with_database(&admin, &name))
}

/// Kept for callers that want "a database for a test": a fresh one.
pub async fn test_database() -> Result<String> {
    fresh_database().await
}

/// The demo sample databases, each with a read-only login of its own.
pub const DEMO_DATABASES: [&str; 3] = ["production", "staging", "development"];

/// The read-only login the demo creates for one sample database (`production`,
/// `staging` or `development`), on the same database.
pub fn demo_reader_url(database_url: &str, demo_database: &str) -> String {
    let (scheme, rest) = database_url
        .split_once("://")
        .unwrap_or(("postgres", database_url));
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://toolgate_demo_{demo_database}:demo-reader@{rest}")
}

async fn sqlx_connect(url: &str) -> Result<sqlx::PgConnection> {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url)
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// A direct (superuser) connection to a database, for SQL-level checks.
pub async fn db_connection_to(url: &str) -> Result<sqlx::PgConnection> {
    sqlx_connect(url).await
}

/// A running server process. It is killed when dropped.
pub struct TestServer {
    pub base: String,
    pub client: reqwest::Client,
    pub database_url: String,
    child: Child,
    log: Log,
    _data_dir: TempDir,
}

/// A folder removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(prefix: &str) -> Self {
        let path = std::env::temp_dir().join(format!("{prefix}-{}", uuid::Uuid::new_v4()));
        let _ = std::fs::create_dir_all(&path);
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A loopback port nobody listens on right now, for a server started later: below the
/// range the system hands out for port 0, so no other test's listener (bound to port 0
/// meanwhile) is given it, and never the same twice in this process.
pub fn free_port() -> Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let handed_out_from = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let (low, count) = (10_000u32, handed_out_from.saturating_sub(10_000).max(1_000));
    // Processes started side by side begin at different places.
    let start = std::process::id().wrapping_mul(7_919);
    for _ in 0..count {
        let port = low + start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) % count;
        let port = u16::try_from(port).context("a port number")?;
        if StdListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port from {low} to {}", low + count)
}

/// What a server is started with; tests override single variables.
pub struct ServerOptions {
    pub env: Vec<(String, String)>,
    pub database_url: Option<String>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            env: vec![
                ("TOOLGATE_DEV_AUTH".into(), "1".into()),
                ("TOOLGATE_JWT_SECRET".into(), JWT_SECRET.into()),
                ("TOOLGATE_SECRET_KEY".into(), SECRET_KEY.into()),
                ("TOOLGATE_LOG".into(), "info,tower_http=debug".into()),
                // Tests run side by side on a busy database: a burst of requests may
                // wait longer than the product's 1 s for a connection. The outage
                // tests take the product's own.
                ("TOOLGATE_DB_ACQUIRE_TIMEOUT".into(), "10s".into()),
            ],
            database_url: None,
        }
    }
}

impl ServerOptions {
    pub fn env(mut self, name: &str, value: &str) -> Self {
        self.env.retain(|(n, _)| n != name);
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn without(mut self, name: &str) -> Self {
        self.env.retain(|(n, _)| n != name);
        self
    }
}

/// Starts the server binary and returns the child and its captured output, without
/// waiting for it to become healthy.
pub async fn spawn_server(
    options: &ServerOptions,
    port: u16,
    data_dir: &std::path::Path,
) -> Result<(Child, Log, String)> {
    let database_url = match &options.database_url {
        Some(url) => url.clone(),
        None => fresh_database().await?,
    };
    let mut command = Command::new(server_binary()?);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("DATABASE_URL", &database_url)
        .env("TOOLGATE_BIND", format!("127.0.0.1:{port}"))
        .env("TOOLGATE_DATA_DIR", data_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for demo in DEMO_DATABASES {
        command.env(
            format!("TOOLGATE_DEMO_SQL_{}_URL", demo.to_uppercase()),
            demo_reader_url(&database_url, demo),
        );
    }
    for (name, value) in &options.env {
        command.env(name, value);
    }
    let mut child = command.spawn().context("starting the toolgate binary")?;
    let log = Log::default();
    let mut readers = Vec::new();
    if let Some(stdout) = child.stdout.take() {
        readers.push(collect(stdout, log.text.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        readers.push(collect(stderr, log.text.clone()));
    }
    if let Ok(mut slot) = log.readers.lock() {
        *slot = readers;
    }
    Ok((child, log, database_url))
}

/// A server's captured output.
#[derive(Clone, Default)]
pub struct Log {
    text: Arc<Mutex<String>>,
    readers: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Log {
    pub fn text(&self) -> String {
        self.text.lock().map(|log| log.clone()).unwrap_or_default()
    }

    /// Waits until the output pipes are drained (the process has ended).
    pub async fn drained(&self) -> String {
        let readers = self
            .readers
            .lock()
            .map(|mut r| std::mem::take(&mut *r))
            .unwrap_or_default();
        for reader in readers {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        self.text()
    }
}

fn collect(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    log: Arc<Mutex<String>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut log) = log.lock() {
                log.push_str(&line);
                log.push('\n');
            }
        }
    })
}

impl TestServer {
    pub async fn start() -> Self {
        Self::start_with(ServerOptions::default()).await
    }

    pub async fn start_with(options: ServerOptions) -> Self {
        match Self::try_start(options).await {
            Ok(server) => server,
            Err(err) => panic!("test server did not start: {err:#}"),
        }
    }

    pub async fn try_start(options: ServerOptions) -> Result<Self> {
        Self::try_start_on(options, free_port()?).await
    }

    pub async fn start_on(options: ServerOptions, port: u16) -> Self {
        match Self::try_start_on(options, port).await {
            Ok(server) => server,
            Err(err) => panic!("test server did not start: {err:#}"),
        }
    }

    /// Starts on a chosen port, for settings that name the server's own address
    /// (or a restart on the same address).
    pub async fn try_start_on(options: ServerOptions, port: u16) -> Result<Self> {
        let data_dir = TempDir::new("toolgate-test-data");
        let (child, log, database_url) = spawn_server(&options, port, &data_dir.0).await?;
        let mut server = TestServer {
            base: format!("http://127.0.0.1:{port}"),
            client: http_client(),
            database_url,
            child,
            log,
            _data_dir: data_dir,
        };
        server.wait_healthy().await?;
        Ok(server)
    }

    async fn wait_healthy(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                bail!(
                    "server exited with {status}; output:\n{}",
                    self.log.drained().await
                );
            }
            // Only toolgate's own answer counts: another program may hold the port this
            // server could not bind.
            if let Ok(response) = self.client.get(self.url("/healthz")).send().await
                && response.status().is_success()
                && response
                    .json::<Value>()
                    .await
                    .is_ok_and(|body| body == json!({"status": "ok"}))
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("server not healthy after 60 s; output:\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Everything the server printed so far.
    pub fn logs(&self) -> String {
        self.log.text()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Ends the process without warning (SIGKILL), as a crash would, and waits for it.
    pub async fn kill(&mut self) {
        let pid = self.pid().expect("the server is running");
        std::process::Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .expect("kill");
        let _ = self.terminate().await;
    }

    /// Sends SIGTERM and waits for the process to end.
    pub async fn terminate(&mut self) -> Result<std::process::ExitStatus> {
        let pid = self.pid().context("server already ended")?;
        std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .context("sending SIGTERM")?;
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .context("server did not stop within 15 s of SIGTERM")??;
        self.log.drained().await;
        Ok(status)
    }

    /// A token for `user_id` from the dev sign-in endpoint.
    pub async fn token(&self, user_id: &str) -> String {
        let (status, body) = self
            .send(
                "POST",
                "/api/dev/token",
                None,
                Some(json!({ "user_id": user_id })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "dev token: {body}");
        body["token"]
            .as_str()
            .unwrap_or_else(|| panic!("no token in the dev sign-in's answer: {body}"))
            .to_owned()
    }

    /// Sends a JSON request and returns the status and the parsed body (`Null` when the
    /// body is empty or not JSON).
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let is_get = method == reqwest::Method::GET;
        let mut request = self.client.request(method, self.url(path));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let again = request.try_clone();
        let response = match (request.send().await, again) {
            (Ok(response), _) => response,
            // A kept-alive connection the server has just closed can meet the next
            // request on the way and answer with a reset (seen once in a full run); a
            // GET, which changes nothing, is sent once more. A server that is gone fails
            // again, and the panic shows its log.
            (Err(err), Some(again)) if is_get && !err.is_timeout() => {
                again.send().await.unwrap_or_else(|again_err| {
                    panic!(
                        "request sent: {err}; sent again: {again_err}\n{}",
                        self.logs()
                    )
                })
            }
            (Err(err), _) => panic!("request sent: {err}\n{}", self.logs()),
        };
        let status = response.status();
        // An answer cut off on its way is the transport's failure, not an empty body:
        // said as such, with the server's log, rather than left to a later assertion.
        let text = response.text().await.unwrap_or_else(|err| {
            panic!(
                "reading the answer ({status}) to {path}: {err}\n{}",
                self.logs()
            )
        });
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// `POST /api/tool-user-input` with an action body.
    pub async fn action(&self, token: &str, body: Value) -> (StatusCode, Value) {
        self.send("POST", "/api/tool-user-input", Some(token), Some(body))
            .await
    }

    /// `POST /api/tools/execute`: `tool` called with `arguments` under `call_id`.
    pub async fn execute_tool(
        &self,
        token: &str,
        conversation: &str,
        tool: &str,
        call_id: &str,
        arguments: Value,
    ) -> (StatusCode, Value) {
        self.send(
            "POST",
            "/api/tools/execute",
            Some(token),
            Some(json!({"conversation_id": conversation, "tool_name": tool,
                "tool_call_id": call_id, "arguments": arguments})),
        )
        .await
    }

    /// A stream token for `conversation`'s events, as `token`'s user asks for one.
    pub async fn stream_token(&self, token: &str, conversation: &str) -> String {
        let (status, body) = self
            .send(
                "POST",
                &format!("/api/conversations/{conversation}/stream-token"),
                Some(token),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["token"].as_str().expect("a stream token").to_owned()
    }

    /// A fresh user: an id no other test uses, and its token.
    pub async fn new_user(&self, prefix: &str) -> (String, String) {
        let user_id = format!("{prefix}-{}", uuid::Uuid::new_v4().simple());
        let token = self.token(&user_id).await;
        (user_id, token)
    }

    pub async fn new_conversation(&self, token: &str) -> String {
        let (status, body) = self
            .send("POST", "/api/conversations", Some(token), Some(json!({})))
            .await;
        assert_eq!(status, StatusCode::CREATED, "create conversation: {body}");
        body["id"].as_str().expect("conversation id").to_owned()
    }
}

/// Signs arbitrary claims with `secret` and algorithm `alg`.
pub fn sign_token(claims: &Value, secret: &str, alg: jsonwebtoken::Algorithm) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(alg),
        claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("signing a test token")
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// `url` with its host and port replaced.
pub fn with_host_port(url: &str, host: &str, port: u16) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let credentials = authority.rsplit_once('@').map(|(c, _)| format!("{c}@"));
    format!(
        "{}{}{host}:{port}{}",
        &url[..scheme_end],
        credentials.unwrap_or_default(),
        &rest[authority_end..]
    )
}

/// `host:port` of a Postgres URL (default 5432).
pub fn host_port(url: &str) -> String {
    let scheme_end = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[scheme_end..];
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

/// A TCP relay to the test database that can be cut, to see how the server behaves
/// when its database goes away.
pub struct TcpProxy {
    pub port: u16,
    stop: tokio::sync::watch::Sender<bool>,
}

impl TcpProxy {
    pub async fn start_to_database() -> Self {
        let target = host_port(&admin_url());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("proxy bind");
        let port = listener.local_addr().expect("proxy address").port();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut accept_stopped = stopped.clone();
            loop {
                tokio::select! {
                    _ = accept_stopped.changed() => return,
                    accepted = listener.accept() => {
                        let Ok((mut inbound, _)) = accepted else { return };
                        let target = target.clone();
                        let mut conn_stopped = stopped.clone();
                        tokio::spawn(async move {
                            let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await else { return };
                            tokio::select! {
                                _ = conn_stopped.changed() => {}
                                _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
                            }
                        });
                    }
                }
            }
        });
        TcpProxy { port, stop }
    }

    /// Closes the listener and every relayed connection.
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// What the mock HTTP service received.
#[derive(Clone, Debug)]
pub struct Received {
    pub method: String,
    pub path_and_query: String,
    pub headers: std::collections::HashMap<String, String>,
    pub body: String,
}

/// A stand-in for a third-party HTTP API: records every request and answers with a
/// configurable status and JSON body.
pub struct MockHttp {
    pub base: String,
    received: Arc<Mutex<Vec<Received>>>,
    answer: Arc<Mutex<(u16, Value)>>,
}

impl MockHttp {
    pub async fn start() -> Self {
        use axum::extract::Request;
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let answer = Arc::new(Mutex::new((200, json!({"ok": true}))));
        let (log, reply) = (received.clone(), answer.clone());
        let app = axum::Router::new().fallback(move |request: Request| {
            let (log, reply) = (log.clone(), reply.clone());
            async move {
                let (parts, body) = request.into_parts();
                let bytes = axum::body::to_bytes(body, 10 * 1024 * 1024)
                    .await
                    .unwrap_or_default();
                let headers = parts
                    .headers
                    .iter()
                    .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
                    .collect();
                if let Ok(mut log) = log.lock() {
                    log.push(Received {
                        method: parts.method.to_string(),
                        path_and_query: parts
                            .uri
                            .path_and_query()
                            .map(|p| p.to_string())
                            .unwrap_or_default(),
                        headers,
                        body: String::from_utf8_lossy(&bytes).into_owned(),
                    });
                }
                let (status, body) = reply
                    .lock()
                    .map(|r| r.clone())
                    .unwrap_or((500, Value::Null));
                (
                    axum::http::StatusCode::from_u16(status).unwrap_or(axum::http::StatusCode::OK),
                    axum::Json(body),
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("mock bind");
        let base = format!("http://{}", listener.local_addr().expect("mock address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockHttp {
            base,
            received,
            answer,
        }
    }

    pub fn answer_with(&self, status: u16, body: Value) {
        if let Ok(mut answer) = self.answer.lock() {
            *answer = (status, body);
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Writes `contents` to a file in a fresh temporary folder.
pub fn write_temp_file(name: &str, contents: &str) -> (TempDir, PathBuf) {
    let dir = TempDir::new("toolgate-test-file");
    let path = dir.0.join(name);
    std::fs::write(&path, contents).expect("writing a temp file");
    (dir, path)
}

/// What the mock model answers to every summary request.
pub const MOCK_SUMMARY: &str = "THE SUMMARY";

/// One scripted answer of the mock model endpoint.
#[derive(Clone, Debug)]
pub enum MockReply {
    /// Streamed text, in two chunks (a long text in chunks of at most 16 KiB).
    Text(String),
    /// Tool calls: (id, name, arguments), arguments streamed in two pieces.
    ToolCalls(Vec<(String, String, Value)>),
    /// One tool call (id, name, arguments) whose arguments are sent as written, JSON or
    /// not, as a model cut off or confused may write them.
    RawToolCall(String, String, String),
    /// An HTTP error status with an OpenAI-style error body.
    Status(u16),
    /// A stream whose chunks are not JSON.
    Malformed,
    /// Waits this long before answering (to catch a run mid-step).
    Hang(Duration),
    /// Waits this long, then answers as the inner reply does.
    Delayed(Duration, Box<MockReply>),
    /// Starts the answer with this text, then sends nothing more and never ends it.
    Stall(String),
    /// An event stream whose body is this, as written (framing and all).
    RawStream(String),
    /// An event stream that says only a comment every half second, without end.
    Murmur,
    /// An answer that says one more word every half second, without end.
    Drip,
}

/// A stand-in for an OpenAI-compatible chat-completions endpoint: records every request
/// body and answers from a script (then with "done" once the script is used up).
#[derive(Clone)]
pub struct MockLlm {
    pub base: String,
    requests: Arc<Mutex<Vec<Value>>>,
    script: Arc<Mutex<std::collections::VecDeque<MockReply>>>,
    summary: Arc<Mutex<String>>,
}

/// How many events there were and the last few, each cut short: what a failing test
/// prints of a stream (whose text deltas may hold megabytes).
fn events_in_short(events: &[Value]) -> String {
    const SHOWN: usize = 8;
    const MOST_CHARS: usize = 400;
    let mut said = format!(
        "{} events; the last {}:",
        events.len(),
        SHOWN.min(events.len())
    );
    for event in &events[events.len().saturating_sub(SHOWN)..] {
        let text = event.to_string();
        let cut: String = text.chars().take(MOST_CHARS).collect();
        let more = if cut.len() < text.len() { " …" } else { "" };
        said.push_str(&format!("\n  {cut}{more}"));
    }
    said
}

/// The most of a text one chunk of the mock's stream carries: a long answer comes in
/// many chunks, as a model streams it.
const MOST_TEXT_PER_CHUNK: usize = 16 * 1024;

/// `text` in the pieces the mock streams it in: two halves, or, when longer than two
/// chunks hold, pieces of [`MOST_TEXT_PER_CHUNK`] bytes (each ending on a character's
/// boundary).
fn text_pieces(text: &str) -> Vec<&str> {
    let halves = text.len() <= 2 * MOST_TEXT_PER_CHUNK;
    let size = if halves {
        text.len() / 2
    } else {
        MOST_TEXT_PER_CHUNK
    };
    let mut pieces = Vec::new();
    let mut rest = text;
    loop {
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, after) = rest.split_at(end);
        pieces.push(piece);
        rest = after;
        if rest.len() <= size || halves {
            pieces.push(rest);
            return pieces;
        }
    }
}

fn sse_chunk(model: &str, delta: Value) -> String {
    let chunk = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
        "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    format!("data: {chunk}\n\n")
}

impl MockLlm {
    pub async fn start(script: Vec<MockReply>) -> Self {
        let mock = MockLlm {
            base: String::new(),
            requests: Arc::default(),
            script: Arc::new(Mutex::new(script.into())),
            summary: Arc::new(Mutex::new(MOCK_SUMMARY.to_owned())),
        };
        let (requests, queue, summary_text) = (
            mock.requests.clone(),
            mock.script.clone(),
            mock.summary.clone(),
        );
        let app = axum::Router::new().route(
            "/v1/chat/completions",
            axum::routing::post(move |body: axum::Json<Value>| {
                let (requests, queue, summary_text) =
                    (requests.clone(), queue.clone(), summary_text.clone());
                async move {
                    let model = body.0["model"].as_str().unwrap_or("mock").to_owned();
                    if let Ok(mut log) = requests.lock() {
                        log.push(body.0);
                    }
                    // Summary requests (the summarisation middleware's) get a fixed
                    // answer and leave the script alone.
                    let summary = requests
                        .lock()
                        .ok()
                        .and_then(|log| log.last().map(|b| b["messages"][0].to_string()))
                        .is_some_and(|first| first.contains("Summarise the conversation"));
                    let mut next = if summary {
                        let text = summary_text
                            .lock()
                            .map(|t| t.clone())
                            .unwrap_or_else(|_| MOCK_SUMMARY.to_owned());
                        Some(MockReply::Text(text))
                    } else {
                        queue.lock().ok().and_then(|mut q| q.pop_front())
                    };
                    if let Some(MockReply::Hang(delay)) = next {
                        tokio::time::sleep(delay).await;
                        next = Some(MockReply::Text("late".into()));
                    }
                    if let Some(MockReply::Delayed(delay, inner)) = next {
                        tokio::time::sleep(delay).await;
                        next = Some(*inner);
                    }
                    let reply = next.unwrap_or(MockReply::Text("done".into()));
                    if let MockReply::Murmur | MockReply::Drip = &reply {
                        let said = match &reply {
                            MockReply::Drip => sse_chunk(&model, json!({"content": "and "})),
                            _ => ": still here\n".to_owned(),
                        };
                        let events = futures::stream::unfold(said, |said| async {
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            Some((Ok::<_, std::io::Error>(said.clone()), said))
                        });
                        return axum::response::Response::builder()
                            .status(200)
                            .header("content-type", "text/event-stream")
                            .body(axum::body::Body::from_stream(events))
                            .unwrap_or_default();
                    }
                    if let MockReply::Stall(text) = &reply {
                        let start = sse_chunk(&model, json!({"role": "assistant"}))
                            + &sse_chunk(&model, json!({"content": text}));
                        let endless = futures::StreamExt::chain(
                            futures::stream::once(async move { Ok::<_, std::io::Error>(start) }),
                            futures::stream::pending(),
                        );
                        return axum::response::Response::builder()
                            .status(200)
                            .header("content-type", "text/event-stream")
                            .body(axum::body::Body::from_stream(endless))
                            .unwrap_or_default();
                    }
                    let body = match reply {
                        MockReply::Status(status) => {
                            let error = json!({"error": {"message": format!("mock error {status}"),
                                "type": "mock_error", "param": null, "code": null}});
                            return axum::response::Response::builder()
                                .status(status)
                                .header("content-type", "application/json")
                                .body(axum::body::Body::from(error.to_string()))
                                .unwrap_or_default();
                        }
                        MockReply::Malformed => "data: {this is not json\n\n".to_owned(),
                        MockReply::RawStream(body) => body,
                        MockReply::Text(text) => {
                            let mut out = sse_chunk(&model, json!({"role": "assistant"}));
                            for piece in text_pieces(&text) {
                                out.push_str(&sse_chunk(&model, json!({"content": piece})));
                            }
                            out + "data: [DONE]\n\n"
                        }
                        MockReply::ToolCalls(calls) => {
                            let mut out = sse_chunk(&model, json!({"role": "assistant", "content": null}));
                            for (index, (id, name, arguments)) in calls.iter().enumerate() {
                                let text = arguments.to_string();
                                let (a, b) = text.split_at(text.len() / 2);
                                out.push_str(&sse_chunk(&model, json!({"tool_calls": [{"index": index, "id": id,
                                    "type": "function", "function": {"name": name, "arguments": a}}]})));
                                out.push_str(&sse_chunk(&model, json!({"tool_calls": [{"index": index,
                                    "function": {"arguments": b}}]})));
                            }
                            out + "data: [DONE]\n\n"
                        }
                        MockReply::RawToolCall(id, name, arguments) => {
                            sse_chunk(&model, json!({"role": "assistant", "content": null}))
                                + &sse_chunk(&model, json!({"tool_calls": [{"index": 0, "id": id,
                                    "type": "function", "function": {"name": name, "arguments": arguments}}]}))
                                + "data: [DONE]\n\n"
                        }
                        MockReply::Hang(_)
                        | MockReply::Delayed(..)
                        | MockReply::Stall(_)
                        | MockReply::Murmur
                        | MockReply::Drip => {
                            String::new()
                        }
                    };
                    axum::response::Response::builder()
                        .status(200)
                        .header("content-type", "text/event-stream")
                        .body(axum::body::Body::from(body))
                        .unwrap_or_default()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("mock llm bind");
        let base = format!("http://{}/v1", listener.local_addr().expect("mock address"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        MockLlm { base, ..mock }
    }

    pub fn push(&self, reply: MockReply) {
        if let Ok(mut queue) = self.script.lock() {
            queue.push_back(reply);
        }
    }

    /// Answers every later summary request with `text` instead of [`MOCK_SUMMARY`].
    pub fn summarise_with(&self, text: &str) {
        if let Ok(mut summary) = self.summary.lock() {
            *summary = text.to_owned();
        }
    }

    /// How many scripted replies are still waiting to be used.
    pub fn queued(&self) -> usize {
        self.script.lock().map(|q| q.len()).unwrap_or_default()
    }

    /// The request bodies received after the first `start` (cheaper than cloning all
    /// of a long conversation's requests again).
    pub fn requests_since(&self, start: usize) -> Vec<Value> {
        self.requests
            .lock()
            .map(|r| r.get(start..).map(<[Value]>::to_vec).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

impl TestServer {
    /// A direct (superuser) connection to this server's database.
    pub async fn db(&self) -> sqlx::PgConnection {
        db_connection_to(&self.database_url)
            .await
            .expect("database connection")
    }

    /// Options for another server on this one's database (a restart, a replica).
    pub fn same_database(&self) -> ServerOptions {
        ServerOptions {
            database_url: Some(self.database_url.clone()),
            ..ServerOptions::default()
        }
    }

    /// Posts a user message.
    pub async fn post_message(
        &self,
        token: &str,
        conversation: &str,
        content: Value,
    ) -> (StatusCode, Value) {
        self.send(
            "POST",
            &format!("/api/conversations/{conversation}/messages"),
            Some(token),
            Some(json!({ "content": content })),
        )
        .await
    }

    /// Posts a message that must start a run (202 Accepted): the run's id.
    pub async fn start_run(&self, token: &str, conversation: &str, content: Value) -> String {
        let (status, body) = self.post_message(token, conversation, content).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["run_id"].as_str().expect("run id").to_owned()
    }

    /// Every message of the conversation, read a page at a time.
    pub async fn messages(&self, token: &str, conversation: &str) -> Vec<Value> {
        let mut all = Vec::new();
        let mut path = format!("/api/conversations/{conversation}/messages");
        loop {
            let (_, body) = self.send("GET", &path, Some(token), None).await;
            all.extend(body["messages"].as_array().cloned().unwrap_or_default());
            let Some(after) = body["next_after_seq"].as_i64() else {
                return all;
            };
            path = format!("/api/conversations/{conversation}/messages?after_seq={after}");
        }
    }

    /// Reads the conversation's event stream from `after` until `done` accepts an
    /// event (returning all events read), or fails after `timeout`.
    pub async fn events_until(
        &self,
        token: &str,
        conversation: &str,
        after: i64,
        timeout: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        use futures::StreamExt;
        let response = self
            .client
            .get(self.url(&format!(
                "/api/conversations/{conversation}/events?after={after}"
            )))
            .bearer_auth(token)
            .send()
            .await
            .expect("event stream");
        assert_eq!(response.status(), StatusCode::OK, "event stream status");
        let mut stream = response.bytes_stream();
        let mut buffer = String::new();
        let mut seen = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let chunk = match tokio::time::timeout_at(deadline, stream.next()).await {
                Ok(Some(Ok(chunk))) => chunk,
                _ => panic!(
                    "no matching event within {timeout:?}; saw {}\nserver log:\n{}",
                    events_in_short(&seen),
                    self.logs()
                ),
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let frame: String = buffer.drain(..end + 2).collect();
                for line in frame.lines() {
                    if let Some(data) = line.strip_prefix("data: ")
                        && let Ok(event) = serde_json::from_str::<Value>(data)
                    {
                        let matched = done(&event);
                        seen.push(event);
                        if matched {
                            return seen;
                        }
                    }
                }
            }
        }
    }

    /// The conversation's pending requests (`get_pending`), oldest first.
    pub async fn pending_requests(&self, token: &str, conversation: &str) -> Vec<Value> {
        let (status, body) = self
            .action(
                token,
                json!({"action": "get_pending", "conversation_id": conversation}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["requests"].as_array().cloned().unwrap_or_default()
    }

    /// Waits for the run's final status event and returns the run.
    pub async fn run_finished(&self, token: &str, conversation: &str, run_id: &str) -> Value {
        self.run_reaches(
            token,
            conversation,
            run_id,
            &["completed", "failed", "cancelled"],
        )
        .await
    }

    /// Waits until the run's status is one of `statuses` and returns the run.
    pub async fn run_reaches(
        &self,
        token: &str,
        conversation: &str,
        run_id: &str,
        statuses: &[&str],
    ) -> Value {
        let events = self
            .events_until(token, conversation, 0, Duration::from_secs(30), |e| {
                e["type"] == "run_status"
                    && e["run"]["id"] == run_id
                    && statuses.iter().any(|s| e["run"]["status"] == *s)
            })
            .await;
        events
            .last()
            .map(|e| e["run"].clone())
            .unwrap_or(Value::Null)
    }
}

/// How the server begins the summary of earlier turns it sends the model.
pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:";

/// Why a chat-completions request body reads as a conversation that never happened, if it does: a user
/// message with no assistant message before the next user message (the last user
/// message excepted: it is the one being answered), a tool result whose call is not
/// before it, a tool call whose result is not after it.
pub fn dangling_turn(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    let last_user = messages.iter().rposition(|m| m["role"] == "user");
    // The summary of earlier turns goes as the assistant's words, but answers nothing.
    let is_summary = |m: &Value| {
        m["content"]
            .as_str()
            .is_some_and(|text| text.starts_with(SUMMARY_PREFIX))
    };
    for (index, message) in messages.iter().enumerate() {
        if message["role"] == "user" && Some(index) != last_user {
            let answered = messages[index + 1..]
                .iter()
                .take_while(|m| m["role"] != "user")
                .any(|m| m["role"] == "assistant" && !is_summary(m));
            if !answered {
                return Some(format!("user message {index} has no answer"));
            }
        }
        if message["role"] == "tool" {
            let id = &message["tool_call_id"];
            let called = messages[..index].iter().any(|m| {
                m["tool_calls"]
                    .as_array()
                    .is_some_and(|calls| calls.iter().any(|c| &c["id"] == id))
            });
            if !called {
                return Some(format!("tool result {id} has no call"));
            }
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let answered = messages[index + 1..]
                .iter()
                .any(|m| m["role"] == "tool" && m["tool_call_id"] == call["id"]);
            if !answered {
                return Some(format!("tool call {} has no result", call["id"]));
            }
        }
    }
    None
}
