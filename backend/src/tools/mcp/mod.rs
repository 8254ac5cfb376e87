//! toolgate as an MCP client (the official `rmcp` SDK): the servers of the tools file,
//! their tools in the registry under `<server>__<tool>` with the file's overlays, and a
//! server's elicitation turned into the same durable input card as any other request.
//!
//! - [`config`]: `[[mcp_servers]]` and `[[tool_overlays]]`, checked at load.
//! - `catalog`: one supervisor per server keeps its tool list in the registry,
//!   reconnecting with backoff; `tools/list_changed` refreshes it.
//! - `session`: how a connection is made (child process or streamable HTTP), and the
//!   client side that receives elicitations.
//! - `calls`: a call runs in a session of its user's own (so one user's answers never
//!   reach another's call); an elicitation becomes a stored request the web chat shows,
//!   and its answer goes back to the server.
//! - `elicitation`: schema ↔ field conversion.

mod calls;
mod catalog;
pub mod config;
mod elicitation;
mod session;
pub mod stateless;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::api::ToolOutcome;
use serde_json::{Map, Value};
use sqlx::PgPool;
use tokio::sync::{Notify, mpsc, watch};
use uuid::Uuid;

pub use calls::AfterAnswer;
pub use config::McpConfig;

use crate::db::listener::EventHub;
use crate::tools::CallRef;
use crate::tools::registry::ToolRegistry;

/// Between a server's name and its tool's name in the registry: `github__create_issue`.
pub const NAMESPACE_SEPARATOR: &str = "__";

/// Which server's tool a registry tool calls.
#[derive(Clone, Debug)]
pub struct McpTarget {
    pub server: String,
    pub remote_name: String,
}

/// Who calls, and for which conversation and run.
#[derive(Clone, Debug)]
pub struct CallContext {
    pub user_id: String,
    pub call: CallRef,
}

/// The outcome of a call that finished after the executor had already answered that it
/// waits for the user: the run it belongs to records it.
pub struct Delivery {
    pub user_id: String,
    pub call: CallRef,
    pub outcome: ToolOutcome,
}

/// What the hub needs from the rest of the server.
pub struct HubDeps {
    pub pool: PgPool,
    pub registry: Arc<ToolRegistry>,
    pub events: Arc<EventHub>,
    pub input_ttl: Duration,
    /// Most requests waiting at once in one conversation.
    pub max_waiting: u32,
    /// Seals the call's secret values kept with stateless questions.
    pub vault: Arc<crate::vault::Vault>,
    /// This process, as `server_instances` knows it.
    pub instance: Uuid,
}

/// Every MCP server of the tools file, and the calls under way.
pub struct McpHub {
    config: McpConfig,
    servers: BTreeMap<String, Arc<catalog::Server>>,
    deps: HubDeps,
    deliveries: mpsc::UnboundedSender<Delivery>,
    /// Requests whose answer a live call waits for, woken when one is settled here.
    waiters: Mutex<HashMap<Uuid, Arc<Notify>>>,
    /// Calls under way or recently finished, by (user, tool call id).
    calls: Mutex<HashMap<calls::CallKey, calls::CallEntry>>,
    stopping: watch::Sender<bool>,
}

impl McpHub {
    /// How long a call to `server` may work (time spent waiting for the user aside).
    pub fn call_timeout(&self, server: &str) -> Duration {
        self.servers
            .get(server)
            .map_or(Duration::ZERO, |server| server.config.call_timeout)
    }

    /// Starts a supervisor per enabled server. Outcomes of calls that finish after
    /// waiting for the user arrive on the returned receiver, for the agent to deliver.
    pub fn start(
        config: McpConfig,
        deps: HubDeps,
    ) -> (Arc<McpHub>, mpsc::UnboundedReceiver<Delivery>) {
        let (deliveries, received) = mpsc::unbounded_channel();
        let servers = config
            .servers
            .iter()
            .map(|server| {
                (
                    server.name.clone(),
                    Arc::new(catalog::Server::new(server.clone())),
                )
            })
            .collect();
        let hub = Arc::new(McpHub {
            config,
            servers,
            deps,
            deliveries,
            waiters: Mutex::default(),
            calls: Mutex::default(),
            stopping: watch::channel(false).0,
        });
        for server in hub.servers.values() {
            if server.config.enabled {
                tokio::spawn(catalog::supervise(hub.clone(), server.clone()));
            }
        }
        (hub, received)
    }

    /// Calls a server's tool for a user with `arguments` (the values the executor
    /// filled; `secret_fields` name the secret ones, masked wherever the server repeats
    /// them and sealed wherever they are kept).
    /// A question the server asks meanwhile is the outcome's `requires_user_input`, and
    /// the call goes on in the background until it is answered. Never fails: a server
    /// that cannot be reached is a failed outcome.
    pub async fn call(
        self: &Arc<Self>,
        target: &McpTarget,
        context: CallContext,
        arguments: Map<String, Value>,
        secret_fields: Vec<String>,
    ) -> ToolOutcome {
        calls::start(self, target, context, arguments, secret_fields).await
    }

    /// After one of a round of stateless questions ended: the call made again once the
    /// whole round has (see `stateless`); `None` while some are still open.
    pub async fn answer_round(
        self: &Arc<Self>,
        row: &crate::db::input_requests::InputRequestRow,
    ) -> crate::error::Result<Option<ToolOutcome>> {
        stateless::answer_round(self, row).await
    }

    /// After a request of an MCP server was settled (answered, declined, cancelled,
    /// expired): wakes the call waiting for it and, when that call lives in this
    /// process, waits for what it does next.
    pub async fn after_answer(
        self: &Arc<Self>,
        row: &crate::db::input_requests::InputRequestRow,
    ) -> crate::error::Result<AfterAnswer> {
        calls::after_answer(self, row).await
    }

    /// Ends every session (their questions to users end with them) and stops the
    /// supervisors: the server is shutting down.
    pub async fn stop(self: &Arc<Self>) {
        let _ = self.stopping.send(true);
        calls::end_all(self, "toolgate was restarted").await;
        for server in self.servers.values() {
            server.close_sessions();
        }
    }

    /// Closes sessions nobody used for a while.
    pub fn close_idle_sessions(&self, idle: Duration) {
        for server in self.servers.values() {
            server.close_idle(idle);
        }
        calls::forget_finished(self);
    }

    fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }
}
