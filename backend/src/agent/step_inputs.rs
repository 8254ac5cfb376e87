//! What one model step reads — the run, the history, memory notes, skills, the latest
//! summary, the conversation's context pipeline and what retrieval finds — loaded by the
//! run loop in one round trip, and what the middleware hands back for the run loop to write (a
//! new summary). The middleware itself does no I/O but the model call a summary needs.

use std::path::Path;
use std::sync::Mutex;

use protocol::chat::{Message, Role, RunStatus};
use sqlx::PgPool;
use uuid::Uuid;

use super::middleware::{MAX_RETRIEVAL_LIMIT, PipelineConfig};
use super::skills::{self, Skill};
use crate::db::step_context;
use crate::error::Result;

/// A summary as stored: it covers the messages up to `through_seq` but those in
/// `kept_out`, which had to stay word for word when it was written and stay in the
/// context until a later summary takes them in.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredSummary {
    pub through_seq: i32,
    pub text: String,
    pub kept_out: Vec<i32>,
}

/// Everything a step's middleware reads.
#[derive(Clone, Debug, Default)]
pub struct StepInputs {
    /// The conversation's stored messages, in order.
    pub history: Vec<Message>,
    /// What the user asked to be remembered (`/remember`).
    pub memory_notes: Vec<String>,
    /// The skills the model may read.
    pub skills: Vec<Skill>,
    /// The newest summary of the conversation, if one was written.
    pub summary: Option<StoredSummary>,
    /// The conversation's context pipeline (its stages and settings).
    pub pipeline: PipelineConfig,
    /// Text from the user's other conversations that matches the request, for the
    /// pipeline's collect stage.
    pub retrieved: Vec<String>,
}

/// The run a step belongs to, as read with its inputs.
#[derive(Clone, Copy, Debug)]
pub struct StepRun {
    pub conversation_id: Uuid,
    pub status: RunStatus,
    /// The steps the run has taken.
    pub step: i32,
    /// The user message the run answers.
    pub user_message_id: Option<Uuid>,
}

impl StepInputs {
    /// Loads run `run_id` and its step's inputs as `user_id`, in one round trip; with
    /// `retrieve`, what the conversation's pipeline retrieves from the user's other
    /// conversations too. `None` when the run is not the caller's.
    pub async fn load(
        pool: &PgPool,
        user_id: &str,
        run_id: Uuid,
        skills_dir: Option<&Path>,
        retrieve: bool,
    ) -> Result<Option<(StepRun, Self)>> {
        // The pipeline's own limit is only known once its row is read, so the statement
        // retrieves as many as any pipeline may ask for and the limit trims them.
        let max_retrieved = if retrieve { MAX_RETRIEVAL_LIMIT } else { 0 };
        let Some(mut stored) = step_context::load_as(pool, user_id, run_id, max_retrieved).await?
        else {
            return Ok(None);
        };
        let history = stored.take_messages()?;
        let run = StepRun {
            conversation_id: stored.conversation_id,
            status: stored.status,
            step: stored.step,
            user_message_id: stored.user_message_id,
        };
        let summary = stored
            .summary_through_seq
            .zip(stored.summary)
            .map(|(through_seq, text)| StoredSummary {
                through_seq,
                text,
                kept_out: stored.summary_kept_out,
            });
        let pipeline = PipelineConfig::from_stored(stored.pipeline);
        let mut retrieved = stored.retrieved;
        retrieved.truncate(
            pipeline
                .retrieval_limit()
                .and_then(|limit| usize::try_from(limit).ok())
                .unwrap_or(0),
        );
        let inputs = StepInputs {
            history,
            memory_notes: stored.notes,
            skills: skills_dir.map(skills::list).unwrap_or_default(),
            summary,
            pipeline,
            retrieved,
        };
        Ok(Some((run, inputs)))
    }

    /// The words of the run's request: the message `request_id`, or the last user
    /// message.
    pub fn request_text(&self, request_id: Option<Uuid>) -> String {
        let by_id = request_id.and_then(|id| self.history.iter().find(|m| m.id == id));
        by_id
            .or_else(|| self.history.iter().rev().find(|m| m.role == Role::User))
            .map(Message::text)
            .unwrap_or_default()
    }
}

/// What the middleware hands back for the run loop to write with the step's answer.
#[derive(Debug, Default)]
pub struct StepOutputs {
    summary: Mutex<Option<StoredSummary>>,
}

impl StepOutputs {
    /// Keeps a new summary for the run loop to store.
    pub fn store_summary(&self, summary: StoredSummary) {
        *self
            .summary
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(summary);
    }

    /// The new summary, if the step wrote one.
    pub fn take_summary(&self) -> Option<StoredSummary> {
        self.summary
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
    }
}
