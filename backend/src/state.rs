//! What every handler can reach.

use std::sync::Arc;

use sqlx::PgPool;

use crate::agent::Agent;
use crate::api::limits::UserLimits;
use crate::auth::JwtKeys;
use crate::config::Config;
use crate::db::listener::EventHub;
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
    /// Per-user request and stream counters.
    pub limits: Arc<UserLimits>,
    /// Wakes event streams when their conversation has news.
    pub events: Arc<EventHub>,
    /// Turns true when the server is shutting down, so open event streams end.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    shutdown_sender: Arc<tokio::sync::watch::Sender<bool>>,
}

impl AppState {
    /// Must be called inside the Tokio runtime: it starts the event listener.
    pub fn new(db: PgPool, config: Config, tools: ToolRegistry, agent: Agent) -> Self {
        let (shutdown_sender, shutdown) = tokio::sync::watch::channel(false);
        AppState {
            shutdown,
            shutdown_sender: Arc::new(shutdown_sender),
            agent: Arc::new(agent),
            events: EventHub::start(db.clone()),
            tools: Arc::new(tools),
            limits: Arc::new(UserLimits::new(config.limits)),
            jwt: Arc::new(JwtKeys::new(&config)),
            vault: Arc::new(Vault::new(&config.secret_key)),
            config: Arc::new(config),
            db,
        }
    }

    /// Ends open event streams; the HTTP server then finishes its graceful shutdown.
    pub fn begin_shutdown(&self) {
        let _ = self.shutdown_sender.send(true);
    }
}
