//! The connections of sql tools: one small pool per database URL, whose connections
//! carry nothing from one call to the next.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgConnection, PgPool};
use tokio::sync::Mutex;

/// Connections per database URL; the per-user limit keeps one user from holding them all.
const MAX_CONNECTIONS: u32 = 4;

/// Lazily opened pools, keyed by the rendered database URL.
#[derive(Default)]
pub struct Pools {
    pools: Mutex<HashMap<String, PgPool>>,
}

impl Pools {
    /// The pool of `url`; connections are opened on first use. A caller waits at most
    /// `acquire_timeout` for a free connection.
    pub async fn get(&self, url: &str, acquire_timeout: Duration) -> Result<PgPool, String> {
        let mut pools = self.pools.lock().await;
        if let Some(pool) = pools.get(url) {
            return Ok(pool.clone());
        }
        let options = url
            .parse::<PgConnectOptions>()
            .map_err(|_| "the database URL of this tool is not valid".to_owned())?
            // Each call names itself (see `call_name`); this one is seen between calls.
            .application_name("toolgate-sql")
            // No named prepared statements: `DISCARD ALL` after each call drops them,
            // and an agent's queries are rarely repeated word for word anyway.
            .statement_cache_capacity(0);
        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .acquire_timeout(acquire_timeout)
            .connect_lazy_with(options);
        pools.insert(url.to_owned(), pool.clone());
        Ok(pool)
    }
}

/// `toolgate-sql-<8 hex digits>`: the `application_name` of one call, random so that
/// `pg_stat_activity` tells calls apart without naming the user.
pub fn call_name() -> String {
    format!("toolgate-sql-{:08x}", rand::random::<u32>())
}

/// Ends whatever a query could have left in its session (advisory locks, settings,
/// prepared statements, cursors, temporary tables, LISTEN) before the connection
/// serves another call. Runs after the transaction has ended.
pub async fn reset(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    conn.execute("discard all").await.map(|_| ())
}
