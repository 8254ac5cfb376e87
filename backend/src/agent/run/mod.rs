//! The run loop: build the model request → middleware → model (streamed) → tool calls,
//! in parallel, through the executor → repeat, up to the step limit. Every message,
//! status change and event is stored as it happens; a step whose tool calls need the
//! user's input leaves the run `waiting_for_input`, and answering the last open request
//! resumes it (see [`deliver_outcome`]).
//!
//! `step` drives a run step by step; `lifecycle` moves it between its states;
//! `recovery` picks up runs whose server went away.

mod lifecycle;
mod recovery;
mod step;

pub use lifecycle::{StartedRun, deliver_outcome, start_run, wind_down};
pub use recovery::{fail_abandoned_runs, resume_stranded_runs};
pub use step::prepare_request;
