//! The run loop: build the model request → middleware → model (streamed) → tool calls,
//! in parallel, through the executor → repeat, up to the step limit. Every message,
//! status change and event is stored as it happens; a step whose tool calls need the
//! user's input leaves the run `waiting_for_input`, and it resumes once no request is
//! open and every answered call's outcome is in its history (see [`deliver_outcome`]).
//!
//! `step` drives a run step by step; `lifecycle` moves it between its states;
//! `recovery` picks up runs whose server went away.

mod lifecycle;
mod recovery;
mod step;
#[cfg(test)]
mod tests;

use std::sync::Arc;

use tokio::sync::watch;

pub use lifecycle::{
    StartedRun, already_posted, deliver_mcp_outcomes, deliver_outcome, not_appended, start_run,
    wind_down,
};
pub use recovery::{fail_abandoned_runs, resume_stranded_runs};
pub use step::prepare_request;

use super::{ActiveRuns, Agent};
use crate::config::Config;
use crate::tools::executor::Executor;

/// What the run loop reaches of the server, handed to it explicitly: the model and its
/// middleware, the executor (which holds the database pool and the tools), the
/// settings, the runs this server drives, and whether it is stopping.
#[derive(Clone)]
pub struct Runner {
    pub agent: Arc<Agent>,
    pub executor: Executor,
    pub config: Arc<Config>,
    pub active_runs: Arc<ActiveRuns>,
    /// Turns true when the server is stopping: runs hand themselves over after their
    /// current step.
    pub shutdown: watch::Receiver<bool>,
}

impl Runner {
    fn is_shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }
}
