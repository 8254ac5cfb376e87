//! `sql` tools: one read-only query, on a database the user picks with a select field.
//!
//! The agent's query is wrapped as a subquery (so it must be a single SELECT), runs in
//! a READ ONLY transaction with a statement timeout, under a role of the database's
//! configuration, and at most `max_rows` rows come back.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::Mutex;

use crate::tools::ToolContext;
use crate::tools::template::{Encoding, Template};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlConfig {
    /// The select field whose value names one of `databases`.
    pub database_field: String,
    /// The argument that carries the query.
    #[serde(default = "default_query_argument")]
    pub query_argument: String,
    #[serde(default = "default_max_rows")]
    pub max_rows: u32,
    #[serde(default = "default_timeout_ms")]
    pub statement_timeout_ms: u64,
    pub databases: BTreeMap<String, SqlDatabase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlDatabase {
    /// Connection URL; a template, so it can come from the environment.
    pub url: String,
    /// Schema put first on the search path.
    #[serde(default)]
    pub schema: Option<String>,
    /// Role the query runs as (the login role must be a member of it).
    #[serde(default)]
    pub role: Option<String>,
}

fn default_query_argument() -> String {
    "query".to_owned()
}
fn default_max_rows() -> u32 {
    100
}
fn default_timeout_ms() -> u64 {
    5000
}

struct Database {
    url: Template,
    schema: Option<String>,
    role: Option<String>,
}

pub struct SqlTool {
    pub database_field: String,
    pub query_argument: String,
    max_rows: u32,
    statement_timeout: Duration,
    databases: BTreeMap<String, Database>,
    pools: Mutex<HashMap<String, PgPool>>,
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
        if config.max_rows == 0 || config.statement_timeout_ms == 0 {
            return Err("sql.max_rows and sql.statement_timeout_ms must be above zero".into());
        }
        let mut databases = BTreeMap::new();
        for (name, database) in config.databases {
            for identifier in [&database.schema, &database.role].into_iter().flatten() {
                if !is_identifier(identifier) {
                    return Err(format!(
                        "sql.databases.{name}: `{identifier}` must be a plain lower-case identifier"
                    ));
                }
            }
            let url = Template::parse(&database.url)
                .map_err(|err| format!("sql.databases.{name}.url: {err}"))?;
            if url.value_names().next().is_some() {
                return Err(format!(
                    "sql.databases.{name}.url may only use {{env.NAME}} placeholders"
                ));
            }
            databases.insert(
                name,
                Database {
                    url,
                    schema: database.schema,
                    role: database.role,
                },
            );
        }
        Ok(SqlTool {
            database_field: config.database_field,
            query_argument: config.query_argument,
            max_rows: config.max_rows,
            statement_timeout: Duration::from_millis(config.statement_timeout_ms),
            databases,
            pools: Mutex::new(HashMap::new()),
        })
    }

    pub fn unavailable_reason(&self) -> Option<String> {
        let missing: Vec<&str> = self
            .databases
            .values()
            .flat_map(|db| db.url.env_names())
            .filter(|name| std::env::var(name).map_or(true, |v| v.is_empty()))
            .collect();
        (!missing.is_empty())
            .then(|| format!("environment variable {} is not set", missing.join(", ")))
    }

    async fn pool(&self, url: &str) -> Result<PgPool, String> {
        let mut pools = self.pools.lock().await;
        if let Some(pool) = pools.get(url) {
            return Ok(pool.clone());
        }
        let options = url
            .parse::<sqlx::postgres::PgConnectOptions>()
            .map_err(|_| "the database URL of this tool is not valid".to_owned())?
            .application_name("toolgate-sql-tool");
        let pool = PgPoolOptions::new()
            .max_connections(2)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with(options);
        pools.insert(url.to_owned(), pool.clone());
        Ok(pool)
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
            .map(|q| q.trim().trim_end_matches(';').trim())
            .filter(|q| !q.is_empty())
            .ok_or_else(|| format!("`{}` must be a SQL query", self.query_argument))?;
        let url = database.url.render(values, context, Encoding::Plain)?;
        let pool = self.pool(&url).await?;
        let mut tx = pool.begin().await.map_err(|err| describe(&err))?;
        sqlx::query("set transaction read only")
            .execute(&mut *tx)
            .await
            .map_err(|err| describe(&err))?;
        sqlx::query(
            "select set_config('statement_timeout', $1, true),
                    set_config('search_path', coalesce($2, current_setting('search_path')), true),
                    set_config('role', coalesce($3, current_user::text), true)",
        )
        .bind(self.statement_timeout.as_millis().to_string())
        .bind(&database.schema)
        .bind(&database.role)
        .execute(&mut *tx)
        .await
        .map_err(|err| describe(&err))?;
        let limit = u64::from(self.max_rows) + 1;
        let wrapped = format!(
            "select coalesce(json_agg(row_to_json(limited)), '[]'::json)::text
             from (select * from ({query}\n) as agent_query limit {limit}) as limited"
        );
        let rows_json: String = sqlx::query_scalar(&wrapped)
            .fetch_one(&mut *tx)
            .await
            .map_err(|err| describe(&err))?;
        tx.rollback().await.map_err(|err| describe(&err))?;
        let mut rows: Vec<Value> = serde_json::from_str(&rows_json)
            .map_err(|_| "the query result could not be read".to_owned())?;
        let truncated = rows.len() > self.max_rows as usize;
        rows.truncate(self.max_rows as usize);
        Ok(json!({
            "database": database_name,
            "row_count": rows.len(),
            "truncated": truncated,
            "rows": rows,
        }))
    }
}

/// Postgres's own message is what the agent needs to fix its query; connection
/// details stay out.
fn describe(err: &sqlx::Error) -> String {
    match err {
        sqlx::Error::Database(db) => format!("the database refused the query: {}", db.message()),
        sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) => {
            "the database could not be reached".to_owned()
        }
        _ => "the query failed".to_owned(),
    }
}
