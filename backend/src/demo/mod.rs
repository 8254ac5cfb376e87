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
    Ok(())
}

/// Routes under `/demo`.
pub fn router() -> Router<AppState> {
    quickbooks::router()
}
