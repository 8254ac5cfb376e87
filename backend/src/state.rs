//! What every handler can reach.

use std::sync::Arc;

use sqlx::PgPool;

use crate::auth::JwtKeys;
use crate::config::Config;
use crate::tools::registry::ToolRegistry;
use crate::vault::Vault;

#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    pub config: Arc<Config>,
    pub jwt: Arc<JwtKeys>,
    pub vault: Arc<Vault>,
    pub tools: Arc<ToolRegistry>,
    /// One client for every HTTP tool, so connections are reused.
    pub http: reqwest::Client,
}

impl AppState {
    pub fn new(db: PgPool, config: Config, tools: ToolRegistry) -> Self {
        AppState {
            tools: Arc::new(tools),
            http: reqwest::Client::builder()
                .user_agent(concat!("toolgate/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default(),
            jwt: Arc::new(JwtKeys::new(&config)),
            vault: Arc::new(Vault::new(&config.secret_key)),
            config: Arc::new(config),
            db,
        }
    }
}
