//! `sql` tools: one read-only query, on a database the user picks with a select field.
//!
//! Each database names its own login, which should read that database (or schema) and
//! nothing else: that login is the boundary between databases. Around it, each call:
//! the query must parse as exactly one read-only statement without refused functions
//! ([`statement`]); at most `max_concurrent_per_user` calls of one user run at once
//! ([`limit`]); the query runs in a READ ONLY transaction with a statement timeout and
//! a random `application_name`; at most `max_rows` rows and `max_result_bytes` bytes
//! come back; and the session is reset before its connection is used again
//! ([`session`]).

mod limit;
mod session;
mod statement;

use std::collections::BTreeMap;
use std::time::Duration;

use futures::TryStreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sqlx::{Connection, PgConnection, Row};

use crate::tools::ToolContext;
use crate::tools::redact;
use crate::tools::template::{Encoding, Part, Template};

use limit::PerUserLimit;
use session::Pools;

/// The `[tools.sql]` table of a tools file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlConfig {
    /// The select field whose value names one of `databases`.
    pub database_field: String,
    /// The argument that carries the query.
    #[serde(default = "default_query_argument")]
    pub query_argument: String,
    /// Rows returned at most; more are cut off and `truncated` says so.
    #[serde(default = "default_max_rows")]
    pub max_rows: u32,
    /// Bytes of rows (as JSON) returned at most; a larger result fails the call.
    #[serde(default = "default_max_result_bytes")]
    pub max_result_bytes: u32,
    #[serde(default = "default_timeout_ms")]
    pub statement_timeout_ms: u64,
    /// Calls of one user running at once; more wait up to the statement timeout, then fail.
    #[serde(default = "default_max_concurrent_per_user")]
    pub max_concurrent_per_user: u32,
    pub databases: BTreeMap<String, SqlDatabase>,
}

/// One database the user may pick.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlDatabase {
    /// Connection URL with this database's own login; a template, so it can come from
    /// the environment.
    pub url: String,
    /// Schema put first on the search path.
    #[serde(default)]
    pub schema: Option<String>,
}

fn default_query_argument() -> String {
    "query".to_owned()
}
fn default_max_rows() -> u32 {
    100
}
fn default_max_result_bytes() -> u32 {
    1024 * 1024
}
fn default_timeout_ms() -> u64 {
    5000
}
fn default_max_concurrent_per_user() -> u32 {
    2
}

struct Database {
    url: Template,
    schema: Option<String>,
}

/// A loaded sql tool.
pub struct SqlTool {
    pub database_field: String,
    pub query_argument: String,
    max_rows: u32,
    max_result_bytes: u32,
    statement_timeout: Duration,
    databases: BTreeMap<String, Database>,
    pools: Pools,
    running: PerUserLimit,
}

/// Built-in roles whose members reach beyond the database a login is for: the server's
/// files and programs, other sessions, every table of every database.
const PRIVILEGED_ROLES: [&str; 7] = [
    "pg_execute_server_program",
    "pg_monitor",
    "pg_read_all_data",
    "pg_read_all_stats",
    "pg_read_server_files",
    "pg_signal_backend",
    "pg_write_server_files",
];

const ACTIVITY_SHOWN: &str = "this tool's database login records each session's SQL \
    (track_activities is on), and every user of the tool shares the login, so one could \
    read another's queries in pg_stat_activity; have a superuser run `ALTER ROLE <login> \
    SET track_activities = off`";

const SUPERUSER_REFUSED: &str = "this tool's database login is a superuser, which a sql tool \
    refuses; configure a login that can only read this database";

/// The rows of one call.
struct Rows {
    rows: Vec<Value>,
    truncated: bool,
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl SqlTool {
    /// `options` are the values of the database select field.
    pub fn new(config: SqlConfig, options: Option<Vec<String>>) -> Result<Self, String> {
        let Some(options) = options else {
            return Err(format!(
                "sql.database_field `{}` must be a select field of requires_user_input",
                config.database_field
            ));
        };
        for option in &options {
            if !config.databases.contains_key(option) {
                return Err(format!(
                    "sql.databases has no entry for the option `{option}` of field `{}`",
                    config.database_field
                ));
            }
        }
        if config.max_rows == 0
            || config.max_result_bytes == 0
            || config.statement_timeout_ms == 0
            || config.max_concurrent_per_user == 0
        {
            return Err("sql.max_rows, sql.max_result_bytes, sql.statement_timeout_ms and sql.max_concurrent_per_user must be above zero".into());
        }
        let mut databases = BTreeMap::new();
        for (name, database) in config.databases {
            if let Some(schema) = &database.schema
                && !is_identifier(schema)
            {
                return Err(format!(
                    "sql.databases.{name}: `{schema}` must be a plain lower-case identifier"
                ));
            }
            let url = Template::parse(&database.url)
                .map_err(|err| format!("sql.databases.{name}.url: {err}"))?;
            // A call's values or context (its id, the user's words) would rewrite the
            // connection: which host, which login, which options.
            if url
                .parts()
                .iter()
                .any(|part| !matches!(part, Part::Literal(_) | Part::Env(_)))
            {
                return Err(format!(
                    "sql.databases.{name}.url may only use {{env.NAME}} placeholders"
                ));
            }
            databases.insert(
                name,
                Database {
                    url,
                    schema: database.schema,
                },
            );
        }
        Ok(SqlTool {
            database_field: config.database_field,
            query_argument: config.query_argument,
            max_rows: config.max_rows,
            max_result_bytes: config.max_result_bytes,
            statement_timeout: Duration::from_millis(config.statement_timeout_ms),
            databases,
            pools: Pools::default(),
            running: PerUserLimit::new(config.max_concurrent_per_user as usize),
        })
    }

    /// The environment variables the databases' URLs read.
    fn env_names(&self) -> impl Iterator<Item = &str> {
        self.databases.values().flat_map(|db| db.url.env_names())
    }

    /// What the environment gives the databases' URLs (a whole URL with its
    /// password, or a password).
    pub fn secret_env_values(&self) -> Vec<String> {
        redact::secret_env_values(self.env_names())
    }

    /// The longest one call takes: a wait for the pool, for a place among the user's
    /// running queries and for a connection, each as long as a query, then the query.
    pub fn longest_call(&self) -> Duration {
        (self.statement_timeout + Duration::from_secs(1)) * 4
    }

    pub fn unavailable_reason(&self) -> Option<String> {
        let missing: Vec<&str> = self
            .env_names()
            .filter(|name| std::env::var(name).map_or(true, |v| v.is_empty()))
            .collect();
        (!missing.is_empty())
            .then(|| format!("environment variable {} is not set", missing.join(", ")))
    }

    pub async fn run(
        &self,
        values: &Map<String, Value>,
        context: &ToolContext,
    ) -> Result<Value, String> {
        let database_name = values
            .get(&self.database_field)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no database chosen in `{}`", self.database_field))?;
        let database = self
            .databases
            .get(database_name)
            .ok_or_else(|| format!("unknown database `{database_name}`"))?;
        let query = values
            .get(&self.query_argument)
            .and_then(Value::as_str)
            .filter(|q| !q.trim().is_empty())
            .ok_or_else(|| format!("`{}` must be a SQL query", self.query_argument))?;
        let statement = statement::check(query.to_owned()).await?;
        let url = database.url.render(values, context, Encoding::Plain)?;
        // A queued call may wait as long as one running query can take.
        let wait = self.statement_timeout + Duration::from_secs(1);
        let pool = self.pools.get(&url, wait).await?;
        let Some(_slot) = self.running.acquire(&context.user_id, wait).await else {
            return Err(format!(
                "{} of your queries on this tool are still running; wait for one to finish and try again",
                self.running.max()
            ));
        };
        let mut conn = pool.acquire().await.map_err(|err| {
            tracing::warn!(error = %err, database = database_name, "sql tool: no connection");
            match err {
                sqlx::Error::PoolTimedOut => describe(&err),
                _ => "the database could not be reached with this tool's login".to_owned(),
            }
        })?;
        let outcome = self.query(&mut conn, database, &statement).await;
        // A connection goes back to the pool only after a query that ran to its end and
        // a reset; any other one is closed, which ends its session just as surely.
        let clean = outcome.is_ok() && session::reset(&mut conn).await.is_ok();
        if !clean {
            conn.close_on_drop();
        }
        let Rows { rows, truncated } = outcome?;
        Ok(json!({
            "database": database_name,
            "row_count": rows.len(),
            "truncated": truncated,
            "rows": rows,
        }))
    }

    async fn query(
        &self,
        conn: &mut PgConnection,
        database: &Database,
        statement: &str,
    ) -> Result<Rows, String> {
        let mut tx = conn
            .begin_with("begin read only")
            .await
            .map_err(|err| describe(&err))?;
        // standard_conforming_strings: the checked text is printed for it.
        let settings = sqlx::query(
            "select set_config('statement_timeout', $1, true),
                    set_config('search_path', coalesce($2, current_setting('search_path')), true),
                    set_config('application_name', $3, true),
                    set_config('standard_conforming_strings', 'on', true),
                    current_setting('is_superuser'),
                    (select string_agg(rolname, ', ' order by rolname) from pg_roles
                      where rolname = any($4) and pg_has_role(current_user, oid, 'member')),
                    (select rolbypassrls from pg_roles where rolname = current_user),
                    current_setting('track_activities')",
        )
        .bind(self.statement_timeout.as_millis().to_string())
        .bind(&database.schema)
        .bind(session::call_name())
        .bind(&PRIVILEGED_ROLES[..])
        .persistent(false)
        .fetch_one(&mut *tx)
        .await
        .map_err(|err| describe(&err))?;
        let superuser: String = settings.try_get(4).map_err(|err| describe(&err))?;
        if superuser == "on" {
            return Err(SUPERUSER_REFUSED.into());
        }
        let privileged: Option<String> = settings.try_get(5).map_err(|err| describe(&err))?;
        if let Some(roles) = privileged {
            return Err(format!(
                "this tool's database login is a member of {roles}, which reaches beyond one \
                 database (the server's files or programs, other sessions, every table); \
                 configure a login that can only read this database"
            ));
        }
        let bypasses_rls: Option<bool> = settings.try_get(6).map_err(|err| describe(&err))?;
        if bypasses_rls == Some(true) {
            return Err(
                "this tool's database login bypasses row-level security; configure a \
                        login that can only read this database"
                    .into(),
            );
        }
        let tracked: String = settings.try_get(7).map_err(|err| describe(&err))?;
        if tracked == "on" {
            return Err(ACTIVITY_SHOWN.into());
        }
        // Postgres measures each row and sends its JSON only while it fits the cap, so
        // an oversized value never travels or sits in this process.
        let cap = i64::from(self.max_result_bytes);
        let wrapped = format!(
            "select octet_length(agent_row)::int8,
                    case when octet_length(agent_row) <= $1 then agent_row end
             from (select row_to_json(agent_query.*)::text as agent_row
                   from ({statement}) as agent_query limit $2) as agent_rows"
        );
        let mut stream = sqlx::query_as::<_, (i64, Option<String>)>(&wrapped)
            .bind(cap)
            .bind(i64::from(self.max_rows) + 1)
            .persistent(false)
            .fetch(&mut *tx);
        let mut rows = Vec::new();
        let mut truncated = false;
        let mut bytes = 0_i64;
        while let Some((size, text)) = stream.try_next().await.map_err(|err| describe(&err))? {
            if rows.len() == self.max_rows as usize {
                truncated = true;
                break;
            }
            bytes += size;
            let Some(text) = text.filter(|_| bytes <= cap) else {
                return Err(format!(
                    "the result is larger than {cap} bytes; select fewer columns or rows"
                ));
            };
            rows.push(
                serde_json::from_str(&text)
                    .map_err(|_| "the query result could not be read".to_owned())?,
            );
        }
        drop(stream);
        tx.rollback().await.map_err(|err| describe(&err))?;
        Ok(Rows { rows, truncated })
    }
}

/// Postgres's own message is what the agent needs to fix its query; connection
/// details stay out.
fn describe(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => format!("the database refused the query: {}", db.message()),
        sqlx::Error::PoolTimedOut => {
            "every connection to this database is busy; try again shortly".to_owned()
        }
        sqlx::Error::Io(_) => "the database could not be reached".to_owned(),
        _ => "the query failed".to_owned(),
    }
}
