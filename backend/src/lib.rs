//! toolgate's server: HTTP API, auth, the universal tool executor and the agent runtime.

pub mod agent;
pub mod api;
pub mod auth;
pub mod background;
pub mod config;
pub mod db;
pub mod demo;
pub mod error;
mod listen;
mod logged;
pub mod requests;
pub mod state;
pub mod tools;
pub mod vault;

pub use api::app;
pub use config::Config;
pub use error::{Error, Result};
pub use state::AppState;

use anyhow::Context;
use tokio::net::TcpListener;

/// The `toolgate` program: logging set up from `TOOLGATE_LOG` / `TOOLGATE_LOG_FORMAT`,
/// settings from the environment, then [`serve`]. `toolgate mcp-demo` serves the sample
/// MCP server on standard input and output instead.
pub async fn run_from_env() -> std::process::ExitCode {
    if std::env::args().nth(1).as_deref() == Some("mcp-demo") {
        // Standard output is the protocol's channel: the log goes to standard error.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
            .with_writer(std::io::stderr)
            .init();
        return match demo::mcp_server::serve_stdio().await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("toolgate mcp-demo: {err:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let filter = tracing_subscriber::EnvFilter::try_from_env("TOOLGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn,tower_http=info"));
    // rmcp logs whole messages at info and debug (tool arguments with a user's secrets,
    // a user's answers) and, at warn, what a server sent unasked or answered with an
    // error, in its own words (a secret it was started with among them). Whatever
    // TOOLGATE_LOG says, it stays at error; toolgate logs what it needs of those, masked.
    let filter = match "rmcp=error".parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    };
    let json = std::env::var("TOOLGATE_LOG_FORMAT").is_ok_and(|format| format == "json");
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.fmt_fields(logged::OneLineFields).init();
    }
    let result = match Config::from_env() {
        Ok(config) => serve(config).await,
        Err(err) => Err(err),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("toolgate: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Connects, migrates, starts background work and serves until SIGTERM or Ctrl-C.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    install_tls_provider();
    // Before anything checks a field: the tools file's definitions included.
    protocol::fields::set_limits(config.input_limits);
    let (tools, mcp) = tools::registry::ToolRegistry::load(
        config.tools_file.as_deref(),
        config.skills_dir.as_deref(),
    )?;
    let pool = db::connect(&config).await?;
    db::migrate(&pool).await?;
    bind_legacy_values(&pool, &tools).await?;
    if config.demo {
        demo::create_sample_databases(&pool).await?;
    }
    let listener = TcpListener::bind(config.bind)
        .await
        .with_context(|| format!("binding {}", config.bind))?;
    let address = listener.local_addr().context("reading the bound address")?;
    tracing::info!(%address, dev_auth = config.dev_auth, "toolgate listening");

    let agent = agent::Agent::new(&config)?;
    let state = AppState::new(pool.clone(), config, tools, mcp, agent);
    tracing::info!(
        provider = state.agent.provider.kind(),
        model = %state.agent.default_model(),
        middleware = ?state.agent.chain.names(),
        "agent ready"
    );
    let beating = tokio::spawn(background::keep_beating(state.clone()));
    let sweeper = tokio::spawn(background::run(state.clone()));
    let stopping = state.clone();
    let timeouts = listen::Timeouts {
        header_read: state.config.header_read_timeout,
        write: state.config.write_timeout,
    };
    let grace = state.config.shutdown_grace;
    listen::serve(listener, app(state.clone()), timeouts, grace, async move {
        shutdown_signal().await;
        stopping.begin_shutdown();
    })
    .await;
    sweeper.abort();
    agent::wind_down(&state.runner()).await;
    state.mcp.stop().await;
    // Stopped, and waited for, before signing off: a beat after it would sign back on.
    beating.abort();
    let _ = beating.await;
    background::leave(&state).await;
    pool.close().await;
    tracing::info!("toolgate stopped");
    Ok(())
}

/// Binds values remembered before values belonged to tools, now that the tools are
/// known (see `db::saved_inputs::attribute_legacy` for the rule).
async fn bind_legacy_values(
    pool: &sqlx::PgPool,
    tools: &tools::registry::ToolRegistry,
) -> anyhow::Result<()> {
    let mut tx = db::begin_background(pool).await?;
    let done = db::saved_inputs::attribute_legacy(&mut tx, &tools.field_claims()).await?;
    tx.commit().await?;
    if done.attributed > 0 || done.left > 0 {
        tracing::info!(
            attributed = done.attributed,
            left = done.left,
            "bound remembered values from before values belonged to tools"
        );
    }
    Ok(())
}

/// One TLS crypto provider (ring) for every HTTP client in the process: tools, the
/// model endpoint. Installing twice is harmless.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(err) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %err, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(err) => {
                tracing::warn!(error = %err, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
