//! What every handler can reach.

use std::sync::Arc;

use sqlx::PgPool;

use crate::agent::{ActiveRuns, Agent, Runner, deliver_mcp_outcomes};
use crate::api::health::Readiness;
use crate::api::limits::UserLimits;
use crate::auth::JwtKeys;
use crate::config::Config;
use crate::db::listener::EventHub;
use crate::tools::executor::Executor;
use crate::tools::mcp::{self, McpConfig, McpHub};
use crate::tools::registry::ToolRegistry;
use crate::vault::Vault;

#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    pub config: Arc<Config>,
    pub jwt: Arc<JwtKeys>,
    pub vault: Arc<Vault>,
    pub tools: Arc<ToolRegistry>,
    pub agent: Arc<Agent>,
    /// The runs this server is driving, for a clean stop.
    pub active_runs: Arc<ActiveRuns>,
    /// Per-user request and stream counters.
    pub limits: Arc<UserLimits>,
    /// The readiness probe's shared check of the database.
    pub readiness: Arc<Readiness>,
    /// Wakes event streams when their conversation has news.
    pub events: Arc<EventHub>,
    /// The MCP servers of the tools file and the calls under way.
    pub mcp: Arc<McpHub>,
    /// This process, as `server_instances` knows it.
    pub instance: uuid::Uuid,
    /// Turns true when the server is shutting down, so open event streams end.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    shutdown_sender: Arc<tokio::sync::watch::Sender<bool>>,
}

impl AppState {
    /// Must be called inside the Tokio runtime: it starts the event listener, the MCP
    /// servers' supervisors, and the task that hands runs the outcomes of MCP calls that
    /// finished after waiting for their user.
    pub fn new(
        db: PgPool,
        config: Config,
        tools: ToolRegistry,
        mcp_config: McpConfig,
        agent: Agent,
    ) -> Self {
        let (shutdown_sender, shutdown) = tokio::sync::watch::channel(false);
        let events = EventHub::start(db.clone());
        let tools = Arc::new(tools);
        let instance = uuid::Uuid::new_v4();
        let vault = Arc::new(Vault::new(&config.secret_key));
        let (mcp, deliveries) = McpHub::start(
            mcp_config,
            mcp::HubDeps {
                pool: db.clone(),
                registry: tools.clone(),
                events: events.clone(),
                input_ttl: config.input_ttl,
                max_waiting: config.limits.waiting_requests,
                vault: vault.clone(),
                instance,
            },
        );
        let state = AppState {
            shutdown,
            shutdown_sender: Arc::new(shutdown_sender),
            agent: Arc::new(agent),
            active_runs: Arc::default(),
            events,
            mcp,
            instance,
            tools,
            limits: Arc::new(UserLimits::new(config.limits)),
            readiness: Arc::default(),
            jwt: Arc::new(JwtKeys::new(&config)),
            vault,
            config: Arc::new(config),
            db,
        };
        tokio::spawn(deliver_mcp_outcomes(state.runner(), deliveries));
        state
    }

    /// Ends open event streams and tells runs to stop after their current step; the
    /// HTTP server then finishes its graceful shutdown.
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown_sender.send(true);
    }

    /// What the run loop reaches of this server.
    pub fn runner(&self) -> Runner {
        Runner {
            agent: self.agent.clone(),
            executor: self.executor(),
            config: self.config.clone(),
            active_runs: self.active_runs.clone(),
            shutdown: self.shutdown.clone(),
        }
    }

    /// What the tool executor reaches of this server.
    pub fn executor(&self) -> Executor {
        Executor {
            pool: self.db.clone(),
            tools: self.tools.clone(),
            vault: self.vault.clone(),
            mcp: self.mcp.clone(),
            input_ttl: self.config.input_ttl,
            max_waiting: self.config.limits.waiting_requests,
        }
    }
}
