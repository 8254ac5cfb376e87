//! The agent runtime: the run loop, model providers, the middleware chain and chat
//! commands. A run lives in Postgres, not in an HTTP request: it survives the client
//! going away, waits for user input as long as it takes, and resumes after a restart.

mod active_runs;
pub mod commands;
pub mod history;
pub mod history_cache;
pub mod middleware;
pub mod model;
pub mod providers;
mod run;
pub mod skills;
pub mod step_inputs;
pub mod tokens;

pub use active_runs::ActiveRuns;
pub use run::{
    Runner, StartedRun, already_posted, deliver_mcp_outcomes, deliver_outcome, fail_abandoned_runs,
    not_appended, prepare_request, resume_stranded_runs, start_run, wind_down,
};

use std::sync::Arc;

use model::ModelProvider;

use crate::config::Config;

/// The model and the middleware around it, built once at start-up.
pub struct Agent {
    pub provider: Arc<dyn ModelProvider>,
    pub chain: middleware::Chain,
    /// The messages of recently run conversations, so steps do not read them again.
    pub history: history_cache::HistoryCache,
}

impl Agent {
    pub fn new(config: &Config) -> anyhow::Result<Self> {
        let chain = middleware::Chain::from_names(&config.middleware)?;
        Ok(Agent {
            provider: providers::from_config(&config.llm)?,
            chain,
            history: history_cache::HistoryCache::default(),
        })
    }

    /// The model a run starts with (routing may change it per step).
    pub fn default_model(&self) -> String {
        self.provider.default_model().to_owned()
    }
}
