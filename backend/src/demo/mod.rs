//! Demo mode (`TOOLGATE_DEMO=1`): sample databases for the `query_database` tool and a
//! stand-in for the QuickBooks reports API, so the example tools work on a machine with
//! no network and no accounts; a sample MCP server (`toolgate mcp-demo`); and the
//! offline model's vocabulary. Everything they serve is labelled as sample data.

pub mod mcp_server;
mod quickbooks;
pub mod vocabulary;

use anyhow::Context;
use axum::Router;
use sqlx::PgPool;

use crate::state::AppState;

const SAMPLE_DATABASES: &str = include_str!("sample_databases.sql");

/// Creates (or rebuilds) the sample schemas and their read-only logins, one per schema.
pub async fn create_sample_databases(pool: &PgPool) -> anyhow::Result<()> {
    sqlx::raw_sql(SAMPLE_DATABASES)
        .execute(pool)
        .await
        .context("creating the demo sample databases")?;
    // Only a superuser can hide one session's SQL from another of the same login, and
    // the sql tool refuses a login that does not: said at start-up, not at each call.
    let shown: Vec<String> = sqlx::query_scalar!(
        r#"select r.rolname as "rolname!" from pg_roles r
           where r.rolname in ('toolgate_demo_production', 'toolgate_demo_staging',
                               'toolgate_demo_development')
             and not exists (select from pg_db_role_setting s
                             where s.setrole = r.oid and s.setdatabase = 0
                               and 'track_activities=off' = any (s.setconfig))
           order by r.rolname"#
    )
    .fetch_all(pool)
    .await
    .context("checking the demo databases' logins")?;
    if !shown.is_empty() {
        tracing::warn!(
            logins = %shown.join(", "),
            "the demo's query_database tool refuses these logins until a superuser runs \
             ALTER ROLE <login> SET track_activities = off for each (toolgate's own login \
             could not)"
        );
    }
    Ok(())
}

/// Routes under `/demo`.
pub fn router() -> Router<AppState> {
    quickbooks::router()
}
