//! Each server's place in the registry: a supervisor keeps a session of its own to list
//! the server's tools (refreshed on `tools/list_changed`), reconnects with backoff when
//! the server is down or goes away, and shows why meanwhile. Users' calls run in
//! sessions of their own, opened here on demand.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use protocol::api::{McpServerInfo, McpServerStatus};
use serde_json::Value;
use tokio::sync::Notify;

use super::config::ServerConfig;
use super::session::{OlderRevision, Session, SessionShared, Unreachable};
use super::{McpHub, McpTarget, NAMESPACE_SEPARATOR};
use crate::tools::registry::{Runner, Tool, ToolOrigin, ToolParts, read_approval};

/// Most tools one server may list; the rest are left out (and logged).
const MAX_TOOLS: usize = 500;
/// Largest input schema of one tool, serialised.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;
/// Longest description the model is shown.
const MAX_DESCRIPTION_CHARS: usize = 2000;
/// Most bytes of names, descriptions and schemas one server's tools may take in all:
/// every tool goes with every model request, so 500 tools of the largest schema would
/// put 32 MiB into each step of every conversation.
const MAX_CATALOG_BYTES: usize = 1024 * 1024;
/// Most pages one listing of a server's tools may take, and most bytes (as JSON) of
/// tools read from it: a server that hands out cursors without end, or pages of tools
/// that will be left out anyway, is stopped there rather than read into memory.
const MAX_LIST_PAGES: usize = 50;
const MAX_LISTED_BYTES: usize = 8 * MAX_CATALOG_BYTES;
const LONGEST_BACKOFF: Duration = Duration::from_secs(60);
/// Least time between two listings of one server's tools.
const LIST_INTERVAL: Duration = Duration::from_secs(1);

/// Most sessions one user has with one server at once: a call waiting for the user's
/// answer keeps its session, so the user's next call takes another.
const SESSIONS_PER_USER: usize = 4;

/// One configured server and the sessions its users have with it.
pub struct Server {
    pub config: ServerConfig,
    /// Held only to look and to book, never while a session opens: a server slow to
    /// open one holds up that call alone, not its other users nor the sweep.
    sessions: std::sync::Mutex<Sessions>,
    list_changed: Arc<Notify>,
    /// Whether the server, set to 2026-07-28, said it knows no `server/discover`.
    older_revision: OlderRevision,
}

/// The users' sessions with one server, and how many each user has being opened.
#[derive(Default)]
struct Sessions {
    open: HashMap<String, Vec<Arc<Session>>>,
    opening: HashMap<String, usize>,
}

impl Sessions {
    fn of(&self, user_id: &str) -> usize {
        self.open.get(user_id).map_or(0, Vec::len) + self.opening.get(user_id).copied().unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.open.values().map(Vec::len).sum::<usize>() + self.opening.values().sum::<usize>()
    }

    fn unbook(&mut self, user_id: &str) {
        if let Some(count) = self.opening.get_mut(user_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.opening.remove(user_id);
            }
        }
    }

    fn forget_closed(&mut self) {
        for list in self.open.values_mut() {
            list.retain(|session| !session.is_closed());
        }
        self.open.retain(|_, list| !list.is_empty());
    }
}

/// A session booked for a user while it opens; the booking ends however the opening
/// ends, a call given up on included.
struct Booking<'a> {
    server: &'a Server,
    user_id: &'a str,
    ended: bool,
}

impl Booking<'_> {
    /// Ends the booking under a lock the caller holds (where the session it was for
    /// takes its place, so nobody sees it counted twice).
    fn end(mut self, sessions: &mut Sessions) {
        sessions.unbook(self.user_id);
        self.ended = true;
    }
}

impl Drop for Booking<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.server.lock().unbook(self.user_id);
        }
    }
}

/// What a user's call finds: an idle session of theirs, or room for a new one.
enum Found<'a> {
    Idle(Taken),
    Booked(Booking<'a>),
}

/// A session taken for one call: nobody else's call runs in it until this is dropped.
pub struct Taken {
    pub session: Arc<Session>,
    pub _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Server {
    pub fn new(config: ServerConfig) -> Self {
        Server {
            config,
            sessions: std::sync::Mutex::default(),
            list_changed: Arc::new(Notify::new()),
            older_revision: OlderRevision::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Sessions> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn busy(&self, detail: String) -> Unreachable {
        Unreachable {
            public: format!(
                "the MCP server `{}` is busy; try again shortly",
                self.config.name
            ),
            detail,
            busy: true,
        }
    }

    /// A session of the user's own that no call is using, opened when there is none.
    pub async fn take_session(
        &self,
        hub: &Arc<McpHub>,
        user_id: &str,
    ) -> Result<Taken, Unreachable> {
        let booking = match self.take_or_book(user_id)? {
            Found::Idle(taken) => return Ok(taken),
            Found::Booked(booking) => booking,
        };
        let shared = SessionShared::new(
            &self.config.name,
            Some(user_id),
            Arc::downgrade(hub),
            self.list_changed.clone(),
        );
        let session = Session::open(&self.config, &self.older_revision, shared).await?;
        let turn = session
            .try_take()
            .ok_or_else(|| self.busy("a new session was taken at once".to_owned()))?;
        let mut sessions = self.lock();
        booking.end(&mut sessions);
        // Opened while the server shut down: the sessions it closed did not hold it.
        if hub.is_stopping() {
            session.close();
            return Err(self.busy("toolgate is stopping".to_owned()));
        }
        sessions
            .open
            .entry(user_id.to_owned())
            .or_default()
            .push(session.clone());
        drop(sessions);
        Ok(Taken {
            session,
            _turn: turn,
        })
    }

    /// An idle session of the user's taken, or room booked for a new one (the idlest
    /// session of anyone's closed when the server has no room left).
    fn take_or_book<'a>(&'a self, user_id: &'a str) -> Result<Found<'a>, Unreachable> {
        let mut sessions = self.lock();
        sessions.forget_closed();
        if let Some(list) = sessions.open.get(user_id) {
            for session in list {
                if let Some(turn) = session.try_take() {
                    session.touch();
                    return Ok(Found::Idle(Taken {
                        session: session.clone(),
                        _turn: turn,
                    }));
                }
            }
        }
        if sessions.of(user_id) >= SESSIONS_PER_USER {
            return Err(self.busy(format!(
                "the user's {SESSIONS_PER_USER} sessions are all in calls"
            )));
        }
        if sessions.total() >= self.config.max_sessions {
            let idlest = sessions
                .open
                .iter()
                .flat_map(|(user, list)| list.iter().map(move |s| (user.clone(), s.clone())))
                .filter(|(_, session)| !session.in_call())
                .max_by_key(|(_, session)| session.idle_for());
            let Some((owner, evicted)) = idlest else {
                return Err(self.busy(format!(
                    "all {} sessions are in calls",
                    self.config.max_sessions
                )));
            };
            evicted.close();
            if let Some(list) = sessions.open.get_mut(&owner) {
                list.retain(|session| !Arc::ptr_eq(session, &evicted));
            }
        }
        *sessions.opening.entry(user_id.to_owned()).or_default() += 1;
        Ok(Found::Booked(Booking {
            server: self,
            user_id,
            ended: false,
        }))
    }

    pub fn close_sessions(&self) {
        for (_, list) in self.lock().open.drain() {
            for session in list {
                session.close();
            }
        }
    }

    /// Closes the sessions nobody used for `idle` (and none running a call).
    pub fn close_idle(&self, idle: Duration) {
        let mut sessions = self.lock();
        for list in sessions.open.values_mut() {
            list.retain(|session| {
                let keep = !session.is_closed() && (session.idle_for() < idle || session.in_call());
                if !keep {
                    session.close();
                }
                keep
            });
        }
        sessions.open.retain(|_, list| !list.is_empty());
    }
}

fn info(
    server: &ServerConfig,
    status: McpServerStatus,
    reason: Option<String>,
    protocol_version: Option<String>,
    tools: usize,
) -> McpServerInfo {
    McpServerInfo {
        name: server.name.clone(),
        transport: server.transport.name().to_owned(),
        status,
        reason,
        protocol_version,
        tools,
    }
}

/// Keeps the server's tools in the registry for as long as toolgate runs.
pub async fn supervise(hub: Arc<McpHub>, server: Arc<Server>) {
    let name = server.config.name.clone();
    let mut stopping = hub.stopping.subscribe();
    let mut backoff = Duration::from_secs(1);
    loop {
        if hub.is_stopping() {
            return;
        }
        let shared = SessionShared::new(
            &name,
            None,
            Arc::downgrade(&hub),
            server.list_changed.clone(),
        );
        let session = match Session::open(&server.config, &server.older_revision, shared.clone())
            .await
        {
            Ok(session) => session,
            Err(unreachable) => {
                tracing::warn!(server = %name, detail = %server.config.settings_redactions().logged(&unreachable.detail), "MCP server unavailable; retrying in {backoff:?}");
                hub.deps.registry.mark_mcp_server_down(
                    &name,
                    info(
                        &server.config,
                        McpServerStatus::Unavailable,
                        Some(unreachable.public.clone()),
                        None,
                        0,
                    ),
                    &unreachable.public,
                );
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    _ = stopping.changed() => return,
                }
                backoff = (backoff * 2).min(LONGEST_BACKOFF);
                continue;
            }
        };
        tracing::info!(server = %name, protocol = ?session.protocol_version, "MCP server connected");
        let mut closed = shared.closed.subscribe();
        let down = loop {
            let listed_at = tokio::time::Instant::now();
            if let Err(reason) = refresh(&hub, &server, &session).await {
                break reason;
            }
            backoff = Duration::from_secs(1);
            // A server that says its list changed again and again is listed at most once
            // a second; what changed meanwhile is in the next listing.
            let changed = async {
                server.list_changed.notified().await;
                tokio::time::sleep_until(listed_at + LIST_INTERVAL).await;
            };
            tokio::select! {
                () = changed => {}
                _ = closed.wait_for(|closed| *closed) => {
                    break format!("the MCP server `{name}` stopped; toolgate is reconnecting");
                }
                _ = stopping.changed() => {
                    session.close();
                    return;
                }
            }
        };
        session.close();
        tracing::warn!(server = %name, reason = %crate::logged::outside(&down), "MCP server went away");
        server.older_revision.forget();
        hub.deps.registry.mark_mcp_server_down(
            &name,
            info(
                &server.config,
                McpServerStatus::Unavailable,
                Some(down.clone()),
                None,
                0,
            ),
            &down,
        );
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stopping.changed() => return,
        }
    }
}

/// The server's tools, page by page, up to [`MAX_TOOLS`], [`MAX_LIST_PAGES`] and
/// [`MAX_LISTED_BYTES`], and never past a cursor the server already gave.
async fn list_tools(
    name: &str,
    session: &Session,
) -> Result<Vec<rmcp::model::Tool>, rmcp::ServiceError> {
    let mut tools = Vec::new();
    let mut cursors = BTreeSet::new();
    let mut cursor = None;
    let mut bytes: usize = 0;
    for _ in 0..MAX_LIST_PAGES {
        let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
        let page = session.peer.list_tools(Some(params)).await?;
        bytes = bytes.saturating_add(crate::db::storable::json_size(&page.tools));
        tools.extend(page.tools);
        let Some(next) = page.next_cursor else {
            return Ok(tools);
        };
        if tools.len() >= MAX_TOOLS || bytes > MAX_LISTED_BYTES {
            tracing::warn!(server = %name, listed = tools.len(), bytes, "the server lists more tools than are kept; the rest are not asked for");
            return Ok(tools);
        }
        if !cursors.insert(next.clone()) {
            tracing::warn!(server = %name, "the server gave a cursor it gave before; its list ends there");
            return Ok(tools);
        }
        cursor = Some(next);
    }
    tracing::warn!(server = %name, "the server's tool list did not end after {MAX_LIST_PAGES} pages; the tools listed so far are kept");
    Ok(tools)
}

/// Lists the server's tools into the registry; why not, in public words.
async fn refresh(hub: &Arc<McpHub>, server: &Server, session: &Session) -> Result<(), String> {
    let name = &server.config.name;
    let listed = tokio::time::timeout(server.config.call_timeout, list_tools(name, session))
        .await
        .map_err(|_| format!("the MCP server `{name}` did not list its tools in time"))?
        .map_err(|err| {
            tracing::warn!(server = %name, error = %server.config.settings_redactions().logged(&err), "listing MCP tools failed");
            format!("the MCP server `{name}` could not list its tools")
        })?;
    if listed.len() > MAX_TOOLS {
        tracing::warn!(server = %name, listed = listed.len(), "only the first {MAX_TOOLS} tools are kept");
    }
    // Compiling a server's schemas (its patterns among them) is CPU work of the
    // server's choosing: on the blocking pool, so a hostile catalogue stalls no request.
    let (assembling, config) = (hub.clone(), server.config.clone());
    let (tools, seen) = tokio::task::spawn_blocking(move || {
        assemble_listed(&assembling, &config, &listed)
    })
    .await
    .map_err(|failed| {
        // A panic's message may quote what the server sent: not logged.
        tracing::error!(server = %name, panicked = failed.is_panic(), "reading an MCP server's tools failed");
        format!("the MCP server `{name}`'s tools could not be read")
    })?;
    for (matcher, _) in &hub.config.overlays {
        if let super::config::Matcher::Name(wanted) = matcher
            && let Some(rest) = wanted.strip_prefix(&format!("{name}{NAMESPACE_SEPARATOR}"))
            && !seen.contains(rest)
        {
            tracing::warn!(server = %name, overlay = %wanted, "an overlay names a tool this server does not list");
        }
    }
    hub.deps.registry.set_mcp_server(
        info(
            &server.config,
            McpServerStatus::Connected,
            None,
            session.protocol_version.clone(),
            tools.len(),
        ),
        tools,
    );
    Ok(())
}

/// The tools of a server's listing that toolgate takes (the first [`MAX_TOOLS`], each
/// once, up to [`MAX_CATALOG_BYTES`] in all), and the names listed.
fn assemble_listed(
    hub: &McpHub,
    config: &ServerConfig,
    listed: &[rmcp::model::Tool],
) -> (Vec<Arc<Tool>>, BTreeSet<String>) {
    let mut tools = Vec::new();
    let mut seen = BTreeSet::new();
    let mut catalog_bytes: usize = 0;
    let settings = config.settings_redactions();
    for remote in listed.iter().take(MAX_TOOLS) {
        if !seen.insert(remote.name.to_string()) {
            tracing::warn!(server = %config.name, tool = %settings.logged(&remote.name), "tool listed twice; keeping the first");
            continue;
        }
        match tool_of(hub, config, remote) {
            Ok(tool) => {
                let bytes = serde_json::to_vec(&tool.parameters)
                    .map_or(usize::MAX, |b| b.len())
                    .saturating_add(tool.name.len() + tool.description.len());
                catalog_bytes = catalog_bytes.saturating_add(bytes);
                if catalog_bytes > MAX_CATALOG_BYTES {
                    tracing::warn!(server = %config.name, tool = %settings.logged(&remote.name), "the server's tools take more than {MAX_CATALOG_BYTES} bytes; this one and the rest are left out");
                    break;
                }
                tools.push(Arc::new(tool));
            }
            Err(err) => {
                tracing::warn!(server = %config.name, tool = %settings.logged(&remote.name), error = %settings.logged(format!("{err:#}")), "MCP tool left out")
            }
        }
    }
    (tools, seen)
}

fn is_callable_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A server's tool as a registry tool: namespaced, with the overlays applied. The
/// overlay's user-input fields leave the model's view of the arguments (the model
/// never fills them) and join the arguments again when the call is made.
fn tool_of(
    hub: &McpHub,
    server: &ServerConfig,
    remote: &rmcp::model::Tool,
) -> anyhow::Result<Tool> {
    let full = format!("{}{NAMESPACE_SEPARATOR}{}", server.name, remote.name);
    if !is_callable_name(&full) {
        anyhow::bail!("`{full}` is not a name a model can call ([A-Za-z0-9_-], at most 64)");
    }
    let overlay = hub.config.overlay_for(server, &remote.name);
    let mut parameters = Value::Object((*remote.input_schema).clone());
    if serde_json::to_vec(&parameters).map_or(usize::MAX, |bytes| bytes.len()) > MAX_SCHEMA_BYTES {
        anyhow::bail!("its input schema is larger than {MAX_SCHEMA_BYTES} bytes");
    }
    // Its names and values reach the model as written: one that would pose as a chat
    // turn or the user's pinned words keeps the whole tool out.
    if let Some(forged) = crate::agent::history::schema_forged_text(&parameters) {
        anyhow::bail!(
            "its input schema holds `{}`, which reads as a chat turn or a pin marker",
            forged.chars().take(80).collect::<String>()
        );
    }
    let fields: Vec<String> = overlay
        .requires_user_input
        .iter()
        .flat_map(|spec| spec.fields.iter().map(|f| f.name.clone()))
        .collect();
    if let Some(schema) = parameters.as_object_mut() {
        schema
            .entry("type")
            .or_insert_with(|| Value::String("object".to_owned()));
        if let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            properties.retain(|name, _| !fields.contains(name));
        }
        if let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
            required.retain(|name| name.as_str().is_none_or(|n| !fields.iter().any(|f| f == n)));
        }
    }
    let mut known: BTreeSet<String> = fields.iter().cloned().collect();
    if let Some(properties) = parameters.get("properties").and_then(Value::as_object) {
        known.extend(properties.keys().cloned());
    }
    if let Some(key) = &overlay.key_argument
        && !known.contains(key)
    {
        anyhow::bail!("the overlay's key_argument `{key}` is not an argument");
    }
    let annotations = remote.annotations.as_ref();
    // The server's own word, taken only from a server the operator trusts.
    let read_only =
        server.trust_annotations && annotations.and_then(|a| a.read_only_hint) == Some(true);
    let destructive = annotations.and_then(|a| a.destructive_hint) == Some(true);
    let approval = read_approval(
        overlay.requires_approval.clone(),
        destructive || !read_only,
        &known,
    )?;
    let description = overlay
        .description
        .clone()
        .or_else(|| remote.description.as_deref().map(str::to_owned))
        .or_else(|| remote.title.clone())
        .filter(|text| !text.trim().is_empty())
        .unwrap_or_else(|| {
            format!(
                "The `{}` tool of the MCP server `{}`",
                remote.name, server.name
            )
        });
    let description: String = description.chars().take(MAX_DESCRIPTION_CHARS).collect();
    Tool::assemble(ToolParts {
        name: full,
        description,
        parameters,
        input_spec: overlay.requires_user_input.clone(),
        enabled: overlay.enabled.unwrap_or(true),
        key_argument: overlay.key_argument.clone(),
        approval,
        origin: ToolOrigin::Mcp {
            server: server.name.clone(),
        },
        runner: Runner::Mcp(McpTarget {
            server: server.name.clone(),
            remote_name: remote.name.to_string(),
        }),
    })
}
