//! Postgres: the pool, the per-request transaction that carries the caller's identity,
//! the queries, one file per table, and what JSON it can store and give back.

pub mod batch;
pub mod conversations;
pub mod events;
pub mod input_requests;
pub mod instances;
pub mod listener;
pub mod memory;
pub mod messages;
pub mod runs;
pub mod saved_inputs;
pub mod step_context;
pub mod storable;
pub mod summaries;
pub mod tool_calls;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgPool, Postgres, Transaction};

use crate::config::{Config, redact_url};

pub type Tx = Transaction<'static, Postgres>;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How long a pooled connection may sit unused before it is checked again before use.
const IDLE_BEFORE_CHECK: Duration = Duration::from_secs(1);

/// Opens the pool. Connections are made lazily so the server starts (and `/readyz`
/// says why it is not ready) while the database is still coming up.
pub async fn connect(config: &Config) -> anyhow::Result<PgPool> {
    let options: PgConnectOptions = config.database_url.parse().with_context(|| {
        format!(
            "DATABASE_URL `{}` is not valid",
            redact_url(&config.database_url)
        )
    })?;
    let options = options.application_name("toolgate");
    Ok(pool_options(config.db_statement_timeout)
        .max_connections(config.db_max_connections)
        .acquire_timeout(config.db_acquire_timeout)
        // By default every connection handed out is pinged first: one more round trip
        // on every request. A connection in steady use is known to be alive; only one
        // that sat idle (the database may have restarted meanwhile) is checked.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_BEFORE_CHECK {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options))
}

/// What every pool on toolgate's database does with a new connection: its search path
/// becomes the schema toolgate's tables are in (the first the login finds, as when the
/// migrations made them; `public` if it finds none), then temporary objects last.
/// Transactions switch to the roles `toolgate_app` and `toolgate_worker`, and the usual
/// `"$user", public` would then look first in a schema of that role's name, where
/// anyone allowed to make one could put a table to stand in for toolgate's.
///
/// Each statement may run for `statement_timeout` at most, waiting for locks included
/// (a session setting, which the roles' switches keep): one request stuck behind another
/// that holds a conversation's lock gives its connection back with a 503, rather than
/// stalling until the pool has none left for anyone.
fn pool_options(statement_timeout: Duration) -> PgPoolOptions {
    let timeout = format!("{}ms", statement_timeout.as_millis());
    PgPoolOptions::new().after_connect(move |conn, _| {
        let timeout = timeout.clone();
        Box::pin(async move {
            sqlx::query!(
                r#"select set_config('search_path', quote_ident(coalesce(current_schema(), 'public')) || ', pg_temp', false) as "path",
                          set_config('statement_timeout', $1, false) as "statement_timeout""#,
                timeout
            )
            .fetch_one(conn)
            .await
            .map(drop)
        })
    })
}

/// Applies the migrations embedded in the binary, on a connection of their own without
/// the pool's statement timeout: a migration of a large table may take long, once.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<()> {
    let mut conn = pool
        .acquire()
        .await
        .context("running database migrations: no connection")?
        .detach();
    sqlx::query!(r#"select set_config('statement_timeout', '0', false) as "off""#)
        .fetch_one(&mut conn)
        .await
        .context("lifting the statement timeout for the migrations")?;
    MIGRATOR
        .run(&mut conn)
        .await
        .context("running database migrations")?;
    conn.close()
        .await
        .context("closing the migrations' connection")
}

static USER_TRANSACTIONS: AtomicU64 = AtomicU64::new(0);

/// How many user transactions this process has begun, explicit or the implicit one of a
/// one-round-trip read: the benchmark's count of the database work one model step does.
pub fn user_transactions_begun() -> u64 {
    USER_TRANSACTIONS.load(Ordering::Relaxed)
}

fn count_user_transaction() {
    USER_TRANSACTIONS.fetch_add(1, Ordering::Relaxed);
}

/// Starts the transaction an API request runs in: switched to the `toolgate_app` role,
/// with row-level security keyed on `user_id`. Role and user id are set in one
/// statement, since each round trip here costs every request.
pub async fn begin_as_user(pool: &PgPool, user_id: &str) -> sqlx::Result<Tx> {
    count_user_transaction();
    let mut tx = begin_whole(pool).await?;
    sqlx::query!(
        r#"select set_config('role', 'toolgate_app', true) as "role",
                  set_config('toolgate.user_id', $1, true) as "user_id""#,
        user_id
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(tx)
}

/// [`begin_as_user`] for a transaction that records what a tool has already done (its
/// outcome, its log): without the statement timeout, which would otherwise give up on
/// the record behind a held lock, fail the run, and leave a call whose side effects
/// happened reported as one that may or may not have run. Waiting is the lesser harm.
pub async fn begin_recording_as_user(pool: &PgPool, user_id: &str) -> sqlx::Result<Tx> {
    count_user_transaction();
    let mut tx = begin_whole(pool).await?;
    sqlx::query!(
        r#"select set_config('role', 'toolgate_app', true) as "role",
                  set_config('toolgate.user_id', $1, true) as "user_id",
                  set_config('statement_timeout', '0', true) as "statement_timeout""#,
        user_id
    )
    .fetch_one(&mut *tx)
    .await?;
    Ok(tx)
}

/// `pool.begin()`, carried through even when the caller is cancelled (a client that
/// hangs up, a timeout). sqlx 0.8 counts a transaction as open only once `BEGIN` has been
/// answered, so a `begin` dropped during that round trip leaves the session inside a
/// transaction nothing ends, and the pool hands it to the next request: its statements
/// would run in that stale transaction, and the first error would poison the connection.
/// Run to completion in a task of its own, a `begin` whose caller has gone ends as a
/// transaction that is dropped, which sqlx rolls back.
async fn begin_whole(pool: &PgPool) -> sqlx::Result<Tx> {
    let pool = pool.clone();
    tokio::spawn(async move { pool.begin().await })
        .await
        .map_err(|failed| sqlx::Error::Io(std::io::Error::other(failed)))?
}

/// SQLSTATE `no_data_found`: what the one-round-trip reads (`list_pending_as`,
/// `list_for_conversation_as`) raise for a conversation the caller cannot see.
const NOT_THE_CALLERS: &str = "P0002";

/// A one-round-trip read's answer: `None` when the conversation is not the caller's.
fn not_found_as_none<T>(result: sqlx::Result<T>) -> sqlx::Result<Option<T>> {
    match result {
        Ok(rows) => Ok(Some(rows)),
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some(NOT_THE_CALLERS) => {
            Ok(None)
        }
        Err(error) => Err(error),
    }
}

/// Starts a transaction for background work that spans users (expiry, resuming runs).
/// It bypasses row-level security deliberately, so only code that is not serving a
/// caller may use it.
pub async fn begin_background(pool: &PgPool) -> sqlx::Result<Tx> {
    let mut tx = begin_whole(pool).await?;
    sqlx::query!(r#"select set_config('role', 'toolgate_worker', true) as "role""#)
        .fetch_one(&mut *tx)
        .await?;
    Ok(tx)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use sqlx::{Connection, PgPool};
    use uuid::Uuid;

    /// The statement timeout of the tests' pools: the server's default.
    const TEST_STATEMENT_TIMEOUT: Duration = Duration::from_secs(30);

    /// A pool, as the server makes them, on a fresh, migrated database of its own.
    pub(crate) async fn scratch_pool() -> PgPool {
        let pool = super::pool_options(TEST_STATEMENT_TIMEOUT)
            .max_connections(4)
            .connect(&scratch_database().await)
            .await
            .expect("test database");
        super::migrate(&pool).await.expect("migrations");
        pool
    }

    /// The address of a fresh, empty database, made on the admin database of
    /// `DATABASE_URL` (default: the local Postgres). Named like the end-to-end tests'
    /// databases, so their clean-up drops it.
    async fn scratch_database() -> String {
        let admin = std::env::var("DATABASE_URL")
            .ok()
            .filter(|url| !url.is_empty())
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned());
        let name = format!("toolgate_test_unit_{}", Uuid::new_v4().simple());
        let mut conn = sqlx::PgConnection::connect(&admin)
            .await
            .expect("the admin database (DATABASE_URL)");
        sqlx::query(&format!("create database {name}"))
            .execute(&mut conn)
            .await
            .expect("create database");
        match admin.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => panic!("DATABASE_URL has no database name"),
        }
    }

    /// Whether a statement runs in a transaction of its own, as it must outside `begin`:
    /// a session left inside an earlier transaction answers false. (One simple-protocol
    /// query, so the transaction and the statement start at the same moment.)
    async fn in_a_fresh_transaction(pool: &PgPool) -> bool {
        use sqlx::Row;
        sqlx::raw_sql("select transaction_timestamp() = statement_timestamp()")
            .fetch_one(pool)
            .await
            .expect("a fresh statement")
            .get::<bool, _>(0)
    }

    /// A caller's transactions and one-round-trip reads run as `toolgate_app`: a schema
    /// of that name (first in the usual `"$user", public`) must not stand in for
    /// toolgate's tables.
    #[tokio::test]
    async fn a_schema_named_for_the_role_cannot_stand_in_for_toolgates_tables() {
        // Migrated as a server before this change did, whose sessions searched
        // `"$user", public`: the functions made then took that path with them.
        let url = scratch_database().await;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await
            .expect("test database");
        super::migrate(&pool).await.expect("migrations");
        let conversation = Uuid::new_v4();
        for statement in [
            "create schema toolgate_app",
            "create table toolgate_app.tool_user_input_requests as
                 select * from public.tool_user_input_requests with no data",
            "create table toolgate_app.conversations as
                 select * from public.conversations with no data",
            "grant usage on schema toolgate_app to toolgate_app",
            "grant select on all tables in schema toolgate_app to toolgate_app",
        ] {
            sqlx::query(statement)
                .execute(&pool)
                .await
                .expect("the stand-in");
        }
        sqlx::query(
            "insert into toolgate_app.tool_user_input_requests
                 (id, user_id, conversation_id, status, expires_at, created_at)
             values (gen_random_uuid(), 'mallory', $1, 'pending', now() + interval '1 hour', now())",
        )
        .bind(conversation)
        .execute(&pool)
        .await
        .expect("a forged row");
        sqlx::query("insert into toolgate_app.conversations (id, user_id) values ($1, 'mallory')")
            .bind(conversation)
            .execute(&pool)
            .await
            .expect("a forged conversation");
        let read = super::input_requests::list_pending_as(&pool, "mallory", conversation).await;
        assert!(
            matches!(read, Ok(None)),
            "the read found the stand-in's row: {read:?}"
        );
        let pinned = super::pool_options(TEST_STATEMENT_TIMEOUT)
            .max_connections(1)
            .connect(&url)
            .await
            .expect("a pool of the server's");
        let mut tx = super::begin_as_user(&pinned, "mallory")
            .await
            .expect("begin");
        let found = super::conversations::exists(&mut tx, conversation)
            .await
            .expect("a look-up");
        assert!(!found, "the transaction found the stand-in's conversation");
    }

    #[tokio::test]
    async fn a_cancelled_begin_leaves_no_transaction_behind_on_the_pooled_connection() {
        let scratch = scratch_pool().await;
        // One connection, so every step below reuses the one a cancelled begin had.
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .connect_with((*scratch.connect_options()).clone())
            .await
            .expect("pool");
        for round in 0..50 {
            // Dropped at its first await: after `BEGIN` is on its way, before its answer.
            let cancelled = tokio::time::timeout(
                std::time::Duration::ZERO,
                super::begin_as_user(&pool, "cancelled-user"),
            )
            .await;
            drop(cancelled);
            assert!(
                in_a_fresh_transaction(&pool).await,
                "round {round}: the next statement ran inside the cancelled transaction"
            );
        }
        // The one-statement reads keep working, and so does a whole transaction.
        let conversation = Uuid::new_v4();
        for _ in 0..3 {
            let read =
                super::input_requests::list_pending_as(&pool, "cancelled-user", conversation)
                    .await
                    .expect("the read runs");
            assert!(read.is_none(), "not the caller's conversation");
        }
        let tx = super::begin_as_user(&pool, "cancelled-user")
            .await
            .expect("begin");
        tx.commit().await.expect("commit");
        assert!(in_a_fresh_transaction(&pool).await);
    }
}
