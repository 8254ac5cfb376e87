//! What every handler can reach.

use std::sync::Arc;

use sqlx::PgPool;

use crate::auth::JwtKeys;
use crate::config::Config;
use crate::vault::Vault;

#[derive(Clone)]
pub struct AppState {
    pub db: PgPool,
    pub config: Arc<Config>,
    pub jwt: Arc<JwtKeys>,
    pub vault: Arc<Vault>,
}

impl AppState {
    pub fn new(db: PgPool, config: Config) -> Self {
        AppState {
            jwt: Arc::new(JwtKeys::new(&config)),
            vault: Arc::new(Vault::new(&config.secret_key)),
            config: Arc::new(config),
            db,
        }
    }
}
