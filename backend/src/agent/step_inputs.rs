//! What one model step reads — the history, memory notes, skills, the latest summary,
//! the conversation's context pipeline and what retrieval finds — loaded by the run loop
//! in one transaction, and what the middleware hands back for the run loop to write (a
//! new summary). The middleware itself does no I/O but the model call a summary needs.

use std::path::Path;
use std::sync::Mutex;

use protocol::chat::{Message, Role};
use sqlx::PgConnection;
use uuid::Uuid;

use super::middleware::PipelineConfig;
use super::skills::{self, Skill};
use crate::db::{messages, step_context};
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

impl StepInputs {
    /// Loads a step's inputs on `conn` (one transaction, as the user). `request_id` is
    /// the run's user message, whose words retrieval searches for; without it, the last
    /// user message's.
    pub async fn load(
        conn: &mut PgConnection,
        conversation_id: Uuid,
        request_id: Option<Uuid>,
        skills_dir: Option<&Path>,
    ) -> Result<Self> {
        let history = messages::list(&mut *conn, conversation_id).await?;
        let stored = step_context::load(&mut *conn, conversation_id).await?;
        let summary = stored
            .summary_through_seq
            .zip(stored.summary)
            .map(|(through_seq, text)| StoredSummary {
                through_seq,
                text,
                kept_out: stored.summary_kept_out,
            });
        let mut inputs = StepInputs {
            history,
            memory_notes: stored.notes,
            skills: skills_dir.map(skills::list).unwrap_or_default(),
            summary,
            pipeline: PipelineConfig::from_stored(stored.pipeline),
            retrieved: Vec::new(),
        };
        if let Some(limit) = inputs.pipeline.retrieval_limit() {
            let query = inputs.request_text(request_id);
            if !query.trim().is_empty() {
                inputs.retrieved = messages::search_other_conversations(
                    &mut *conn,
                    conversation_id,
                    &query,
                    limit,
                )
                .await?;
            }
        }
        Ok(inputs)
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
