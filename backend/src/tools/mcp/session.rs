//! One connection to an MCP server: how it is made (a child process, or streamable HTTP
//! through the same egress policy as http tools), and toolgate's client side of it,
//! which receives the server's elicitations and notifications.

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CustomNotification, CustomRequest, CustomResult,
    ElicitRequestParams, ElicitResult, ElicitationCapability, ErrorCode, FormElicitationCapability,
    Implementation, ProtocolVersion, UrlElicitationCapability,
};
use rmcp::service::ClientInitializeError;
use rmcp::service::{
    NotificationContext, RequestContext, RoleClient, RunningService,
    RunningServiceCancellationToken,
};
use rmcp::transport::common::client_side_sse::ExponentialBackoff;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, ErrorData, Peer};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, watch};

use super::McpHub;
use super::calls::{self, CallSlot};
use super::config::{Revision, ServerConfig, Transport};
use crate::tools::kinds::http::egress::EgressPolicy;
use crate::tools::redact::Redactions;
use crate::tools::template::{Part, Template};

/// Environment variables a server process keeps from toolgate's: enough to run, and
/// none of toolgate's own secrets (database URL, keys).
const INHERITED_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

/// Why a server could not be reached: words for any caller, and the detail for the log.
#[derive(Debug)]
pub struct Unreachable {
    pub public: String,
    pub detail: String,
    /// Only for now: every session the call could take is in another call.
    pub busy: bool,
}

impl Unreachable {
    fn new(server: &str, public: &str, detail: impl Into<String>) -> Self {
        Unreachable {
            public: format!("the MCP server `{server}` {public}"),
            detail: detail.into(),
            busy: false,
        }
    }
}

/// What a session's client side shares with the calls that use it.
pub struct SessionShared {
    pub server: String,
    /// The user whose calls this session carries; `None` for the session that only
    /// watches the server's tool list. A notice the server sends on a session can
    /// concern that user's questions only.
    pub owner: Option<String>,
    pub hub: Weak<McpHub>,
    /// The call running in this session now: elicitations belong to it.
    pub current: Mutex<Option<Arc<CallSlot>>>,
    pub closed: watch::Sender<bool>,
    /// Pinged when the server says its tool list changed.
    pub list_changed: Arc<Notify>,
    /// The secrets of the latest calls made in this session, all the same user's (kept
    /// after they end: what a server writes about a call may come later), masked in
    /// what the server writes to its standard error before it is logged.
    carried_secrets: Mutex<std::collections::VecDeque<Arc<Redactions>>>,
    /// The URL-mode questions whose completion the server has already said.
    completed: Mutex<std::collections::VecDeque<String>>,
    /// Held while one completion notice is recorded.
    recording_completion: tokio::sync::Mutex<()>,
    /// Completion notices recorded or waiting their turn now.
    completions_in_hand: AtomicUsize,
}

/// Most completion notices of one session recorded or waiting at once; more are
/// dropped (a server says a question is complete once or a few times, not in floods).
const MOST_COMPLETIONS_IN_HAND: usize = 64;

/// A completion notice's turn to be recorded; the next waits until it is dropped.
pub struct CompletionTurn<'a> {
    _recording: tokio::sync::MutexGuard<'a, ()>,
    _counted: InHand<'a>,
}

/// One notice counted in hand until dropped (also while it waits for its turn, should
/// its task end then).
struct InHand<'a>(&'a AtomicUsize);

impl Drop for InHand<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl SessionShared {
    pub fn new(
        server: &str,
        owner: Option<&str>,
        hub: Weak<McpHub>,
        list_changed: Arc<Notify>,
    ) -> Arc<Self> {
        Arc::new(SessionShared {
            server: server.to_owned(),
            owner: owner.map(str::to_owned),
            hub,
            current: Mutex::new(None),
            closed: watch::channel(false).0,
            list_changed,
            carried_secrets: Mutex::default(),
            completed: Mutex::default(),
            recording_completion: tokio::sync::Mutex::new(()),
            completions_in_hand: AtomicUsize::new(0),
        })
    }

    /// The turn to record a completion notice, once the notices before it are recorded;
    /// `None` when too many are in hand already.
    pub async fn completion_turn(&self) -> Option<CompletionTurn<'_>> {
        let before = self.completions_in_hand.fetch_add(1, Ordering::AcqRel);
        let counted = InHand(&self.completions_in_hand);
        if before >= MOST_COMPLETIONS_IN_HAND {
            return None;
        }
        Some(CompletionTurn {
            _recording: self.recording_completion.lock().await,
            _counted: counted,
        })
    }

    pub fn current(&self) -> Option<Arc<CallSlot>> {
        self.current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn set_current(&self, slot: Option<Arc<CallSlot>>) {
        if let Some(slot) = &slot {
            self.carrying(slot.own_redactions());
        }
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = slot;
    }

    /// A call with these secrets is made in this session.
    pub fn carrying(&self, secrets: Arc<Redactions>) {
        let mut carried = self
            .carried_secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        push_latest(&mut carried, secrets, CARRIED_CALLS);
    }

    /// Whether this is the first time the server says the URL-mode question
    /// `elicitation_id` is complete (among the latest [`REMEMBERED_NOTICES`]); it is
    /// then taken as said.
    pub fn first_completion_of(&self, elicitation_id: &str) -> bool {
        let mut completed = self.completed.lock().unwrap_or_else(|p| p.into_inner());
        if completed.iter().any(|id| id == elicitation_id) {
            return false;
        }
        push_latest(
            &mut completed,
            elicitation_id.to_owned(),
            REMEMBERED_NOTICES,
        );
        true
    }

    /// The completion of `elicitation_id` could not be recorded: the server may say it
    /// again.
    pub fn forget_completion_of(&self, elicitation_id: &str) {
        self.completed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id| id != elicitation_id);
    }

    /// A call's secrets grew (the user answered the server's question with one): its
    /// entry takes the larger set, so no other call's secrets make way for it.
    pub fn carrying_instead(&self, before: &Arc<Redactions>, now: Arc<Redactions>) {
        let mut carried = self
            .carried_secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match carried.iter_mut().find(|entry| Arc::ptr_eq(entry, before)) {
            Some(entry) => *entry = now,
            None => push_latest(&mut carried, now, CARRIED_CALLS),
        }
    }

    /// The secrets of the latest calls made in this session.
    pub fn carried(&self) -> Vec<Arc<Redactions>> {
        self.carried_secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// `text` with the secrets of the latest calls made in this session masked.
    fn mask(&self, text: &mut String) {
        for secrets in self.carried() {
            secrets.text(text);
        }
    }
}

/// toolgate's client side of one session.
#[derive(Clone)]
pub struct Handler(pub Arc<SessionShared>);

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::new())
                .with_url(UrlElicitationCapability::new()),
        );
        ClientConfig::new(
            capabilities,
            Implementation::new("toolgate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(calls::on_elicitation(&self.0, request, context.ct).await)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleClient>,
    ) -> Result<CustomResult, ErrorData> {
        // An elicitation whose form is outside the protocol's (a nested object, an
        // unknown format) does not parse as one and lands here.
        if request.method == "elicitation/create" {
            tracing::warn!(
                server = %self.0.server,
                "cancelled an elicitation whose form toolgate cannot read"
            );
            // Cancelled, not declined: no user saw it (see `calls::on_elicitation`).
            return Ok(CustomResult::new(serde_json::json!({ "action": "cancel" })));
        }
        // Not the method's name: a server chose it, and the error is logged.
        Err(ErrorData::new(
            ErrorCode::METHOD_NOT_FOUND,
            "toolgate does not answer this request",
            None,
        ))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.list_changed.notify_one();
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleClient>,
    ) {
        if notification.method != "notifications/elicitation/complete" {
            return;
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Completed {
            elicitation_id: String,
        }
        match notification.params_as::<Completed>() {
            Ok(Some(done)) => calls::on_elicitation_complete(&self.0, &done.elicitation_id).await,
            _ => tracing::debug!(server = %self.0.server, "ignored a malformed completion notice"),
        }
    }
}

/// A live session with a server.
pub struct Session {
    pub peer: Peer<RoleClient>,
    pub shared: Arc<SessionShared>,
    /// One call at a time, so each elicitation belongs to exactly one call.
    pub turn: Arc<tokio::sync::Mutex<()>>,
    pub protocol_version: Option<String>,
    last_used: Mutex<Instant>,
    cancel: Mutex<Option<RunningServiceCancellationToken>>,
}

impl Session {
    /// Connects and keeps watch on the connection: `shared.closed` turns true when it
    /// ends, however it ends.
    pub async fn open(
        config: &ServerConfig,
        older_revision: &OlderRevision,
        shared: Arc<SessionShared>,
    ) -> Result<Arc<Session>, Unreachable> {
        let running = connect(config, older_revision, Handler(shared.clone())).await?;
        let protocol_version = running
            .peer_info()
            .map(|info| info.protocol_version.as_str().to_owned());
        let session = Arc::new(Session {
            peer: running.peer().clone(),
            shared: shared.clone(),
            turn: Arc::new(tokio::sync::Mutex::new(())),
            protocol_version,
            last_used: Mutex::new(Instant::now()),
            cancel: Mutex::new(Some(running.cancellation_token())),
        });
        tokio::spawn(async move {
            let reason = running.waiting().await;
            tracing::debug!(server = %shared.server, ?reason, "MCP session ended");
            let _ = shared.closed.send(true);
        });
        Ok(session)
    }

    pub fn is_closed(&self) -> bool {
        *self.shared.closed.borrow() || self.peer.is_transport_closed()
    }

    pub fn touch(&self) {
        *self.last_used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }

    /// Takes the session for one call, if no call has it now.
    pub fn try_take(&self) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        self.turn.clone().try_lock_owned().ok()
    }

    pub fn in_call(&self) -> bool {
        self.turn.try_lock().is_err()
    }

    pub fn idle_for(&self) -> std::time::Duration {
        self.last_used
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .elapsed()
    }

    /// Ends the session; a child process is stopped.
    pub fn close(&self) {
        if let Some(cancel) = self.cancel.lock().unwrap_or_else(|p| p.into_inner()).take() {
            cancel.cancel();
        }
    }
}

/// `{env.NAME}` in a configured value, resolved now; a variable that is not set makes
/// the server "not configured" (its name goes to the log only).
fn resolve(server: &str, text: &str) -> Result<String, Unreachable> {
    let template = Template::parse(text)
        .map_err(|err| Unreachable::new(server, "is not configured on this server", err))?;
    let mut out = String::new();
    for part in template.parts() {
        match part {
            Part::Literal(literal) => out.push_str(literal),
            Part::Env(name) => match std::env::var(name) {
                Ok(value) => out.push_str(&value),
                Err(_) => {
                    return Err(Unreachable::new(
                        server,
                        "is not configured on this server",
                        format!("the environment variable {name} is not set"),
                    ));
                }
            },
            _ => {
                return Err(Unreachable::new(
                    server,
                    "is not configured on this server",
                    "only {env.NAME} placeholders are allowed in an MCP server's settings",
                ));
            }
        }
    }
    Ok(out)
}

/// `{toolgate}` names this very program (it serves the demo MCP server).
fn program(server: &str, command: &str) -> Result<String, Unreachable> {
    if command == "{toolgate}" {
        return std::env::current_exe()
            .map(|path| path.to_string_lossy().into_owned())
            .map_err(|err| {
                Unreachable::new(
                    server,
                    "could not be started",
                    format!("current exe: {err}"),
                )
            });
    }
    resolve(server, command)
}

/// The handshake a session starts with. A server configured for 2026-07-28 is asked
/// with `server/discover` alone, not rmcp's `Auto`: that takes a server slower than 10 s
/// to answer (one starting on a busy machine) for an older one and settles on
/// 2025-11-25 without a word. [`connect`] falls back itself, and only on the server's
/// own answer that it knows no `server/discover`.
fn lifecycle(revision: Revision) -> ClientLifecycleMode {
    match revision {
        Revision::Sessions => ClientLifecycleMode::Initialize,
        Revision::Stateless => ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    }
}

/// Whether a failed `server/discover` is a server of an older revision saying it does
/// not know the method (any JSON-RPC error but the 2026-07-28 rejections), rather than a
/// server that could not be reached or refused toolgate.
fn speaks_an_older_revision(err: &ClientInitializeError) -> bool {
    matches!(
        err,
        ClientInitializeError::JsonRpcError(data)
            if data.code != ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                && data.code != ErrorCode::HEADER_MISMATCH
    )
}

/// Whether a server set to 2026-07-28 has refused `server/discover` and then started a
/// 2025-11-25 session: its later sessions start with `initialize` at once, instead of
/// starting the server twice each time, until the server goes away (see
/// [`OlderRevision::forget`]).
#[derive(Debug, Default)]
pub struct OlderRevision(AtomicBool);

impl OlderRevision {
    /// The server went away (stopped, crashed, was restarted): it may come back in a
    /// newer revision, so its next session asks `server/discover` again.
    pub fn forget(&self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Starts a session: with the handshake of the server's configured revision, and for a
/// 2026-07-28 server that turns out to be older, once more with `initialize`
/// (2025-11-25), each within the server's connect timeout: the second is a fresh start
/// of the server (the first connection is spent).
async fn connect(
    config: &ServerConfig,
    older_revision: &OlderRevision,
    handler: Handler,
) -> Result<RunningService<RoleClient, Handler>, Unreachable> {
    let server = config.name.as_str();
    let within = |attempt| async move {
        tokio::time::timeout(config.connect_timeout, attempt)
            .await
            .map_err(|_| {
                Unreachable::new(
                    server,
                    "did not answer in time",
                    format!("no session within {:?}", config.connect_timeout),
                )
            })?
    };
    let failed = |detail: String| {
        let public = match config.transport {
            Transport::Stdio { .. } => "did not start an MCP session",
            Transport::Http { .. } => "could not be reached",
        };
        Unreachable::new(server, public, detail)
    };
    let mode = if older_revision.0.load(Ordering::Relaxed) {
        ClientLifecycleMode::Initialize
    } else {
        lifecycle(config.revision)
    };
    // Only a refused `server/discover` says anything about the revision: a refused
    // `initialize` is the server failing, not a reason to start it again.
    let discovering = matches!(mode, ClientLifecycleMode::Discover { .. });
    match within(start(config, handler.clone(), mode)).await? {
        Ok(running) => Ok(running),
        Err(refused) if discovering && speaks_an_older_revision(&refused) => {
            tracing::info!(server, error = %config.settings_redactions().logged(&refused),
                "the MCP server does not speak 2026-07-28; starting a 2025-11-25 session");
            let running = within(start(config, handler, ClientLifecycleMode::Initialize))
                .await?
                .map_err(|err| failed(format!("{err} (after server/discover: {refused})")))?;
            // Remembered once the older handshake has worked: a server that refused
            // both (one failing for a moment) is asked in its own revision next time.
            older_revision.0.store(true, Ordering::Relaxed);
            Ok(running)
        }
        Err(err) => Err(failed(err.to_string())),
    }
}

/// One attempt at a session with the handshake `mode`: the transport made (or why
/// not), then the handshake's own outcome.
async fn start(
    config: &ServerConfig,
    handler: Handler,
    mode: ClientLifecycleMode,
) -> Result<Result<RunningService<RoleClient, Handler>, ClientInitializeError>, Unreachable> {
    let server = config.name.as_str();
    match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
            let mut process = tokio::process::Command::new(program(server, command)?);
            for arg in args {
                process.arg(resolve(server, arg)?);
            }
            process.env_clear();
            for name in INHERITED_ENV {
                if let Ok(value) = std::env::var(name) {
                    process.env(name, value);
                }
            }
            for (name, value) in env {
                process.env(name, resolve(server, value)?);
            }
            if let Some(dir) = cwd {
                process.current_dir(dir);
            }
            process.kill_on_drop(true);
            let (transport, stderr) = TokioChildProcess::builder(process)
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|err| Unreachable::new(server, "could not be started", err.to_string()))?;
            if let Some(stderr) = stderr {
                // A server may write what it was called with (a user's secret) or
                // its settings (from the environment) to its standard error.
                let name = server.to_owned();
                let shared = handler.0.clone();
                let settings =
                    Redactions::new(config.secret_env_values().iter().map(String::as_str));
                tokio::spawn(read_lines_cut(stderr, READ_STDERR_LINE, move |line| {
                    if !tracing::enabled!(tracing::Level::DEBUG) {
                        return;
                    }
                    let mut line = String::from_utf8_lossy(line).into_owned();
                    settings.text(&mut line);
                    shared.mask(&mut line);
                    let line: String = line.chars().take(MAX_STDERR_LINE).collect();
                    tracing::debug!(server = %name, stderr = ?line, "MCP server said");
                }));
            }
            Ok(handler.serve_with_lifecycle(transport, mode).await)
        }
        Transport::Http {
            url,
            headers,
            allow_private_networks,
        } => {
            let policy = EgressPolicy::new(&[], *allow_private_networks)
                .map_err(|err| Unreachable::new(server, "is not configured on this server", err))?;
            let parsed = reqwest::Url::parse(url).map_err(|err| {
                Unreachable::new(server, "is not configured on this server", err.to_string())
            })?;
            policy.check_url(&parsed).map_err(|refused| {
                Unreachable::new(
                    server,
                    "is at an address toolgate may not reach",
                    refused.to_string(),
                )
            })?;
            let client = policy
                .client()
                .map_err(|err| Unreachable::new(server, "is not configured on this server", err))?;
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let value = resolve(server, value)?;
                let name =
                    reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|err| {
                        Unreachable::new(server, "is not configured", err.to_string())
                    })?;
                let value = reqwest::header::HeaderValue::from_str(&value).map_err(|_| {
                    Unreachable::new(
                        server,
                        "is not configured on this server",
                        format!("the value of header {name} is not a valid header value"),
                    )
                })?;
                custom.insert(name, value);
            }
            let mut transport_config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            let mut retry = ExponentialBackoff::default();
            retry.max_times = Some(2);
            transport_config.retry_config = Arc::new(retry);
            let transport = StreamableHttpClientTransport::with_client(client, transport_config);
            Ok(handler.serve_with_lifecycle(transport, mode).await)
        }
    }
}

/// How many of the questions a server said were complete a session remembers, so a
/// notice said again is not recorded again.
const REMEMBERED_NOTICES: usize = 64;

/// `item` as the latest of `queue`, the oldest let go past `most`.
fn push_latest<T>(queue: &mut std::collections::VecDeque<T>, item: T, most: usize) {
    if queue.len() == most {
        queue.pop_front();
    }
    queue.push_back(item);
}

/// How many of a session's latest calls have their secrets masked in what the server
/// writes to its standard error.
const CARRIED_CALLS: usize = 8;

/// The most of one line of a server process's standard error that is logged, in
/// characters.
const MAX_STDERR_LINE: usize = 500;
/// The most of one line that is read: enough past what is logged for a secret that
/// begins in the logged part to be read whole (a value the user gives is at most
/// 20,000 characters), so it is masked before the line is cut.
const READ_STDERR_LINE: usize = 128 * 1024;

/// Hands `each` every line `reader` gives, cut to its first `most` bytes: a process that
/// never ends a line costs no more memory than that.
async fn read_lines_cut(
    reader: impl tokio::io::AsyncRead + Unpin,
    most: usize,
    mut each: impl FnMut(&[u8]),
) {
    let mut reader = tokio::io::BufReader::new(reader);
    let mut line = Vec::new();
    while let Ok(read) = reader.fill_buf().await {
        if read.is_empty() {
            break;
        }
        let end = read.iter().position(|byte| *byte == b'\n');
        let piece = &read[..end.unwrap_or(read.len())];
        let room = most.saturating_sub(line.len());
        line.extend_from_slice(&piece[..piece.len().min(room)]);
        let used = piece.len() + usize::from(end.is_some());
        reader.consume(used);
        if end.is_some() {
            each(line.strip_suffix(b"\r").unwrap_or(&line));
            line.clear();
        }
    }
    if !line.is_empty() {
        each(&line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_without_end_is_cut_not_gathered() {
        let endless = vec![b'x'; 8 * 1024 * 1024];
        let mut input = b"first\r\n".to_vec();
        input.extend_from_slice(&endless);
        input.extend_from_slice(b"\nlast");
        let mut lines = Vec::new();
        read_lines_cut(input.as_slice(), 16, |line| lines.push(line.to_vec())).await;
        assert_eq!(
            lines,
            [b"first".to_vec(), vec![b'x'; 16], b"last".to_vec()],
            "cut to 16 bytes, and reading went on past the long line"
        );
    }
}
