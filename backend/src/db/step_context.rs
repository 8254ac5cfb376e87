//! What a model step reads, in one round trip: the run, the conversation's messages, the
//! caller's memory notes, the newest summary, the context pipeline and what retrieval
//! finds in the caller's other conversations. They live in five
//! tables (`agent_runs`, `messages`, `memory_notes`, `conversation_summaries`,
//! `conversations`); one SQL function (migration `one_trip_step_inputs`) reads them as
//! the caller in the implicit transaction of its own statement, so a step's read costs
//! one round trip where a transaction of its statements cost six.

use protocol::chat::{Message, RunStatus};
use serde_json::Value;
use sqlx::PgPool;
use sqlx::types::Json;
use uuid::Uuid;

/// A step's stored inputs, as read.
pub struct StepContextRow {
    pub conversation_id: Uuid,
    pub status: RunStatus,
    /// The steps the run has taken.
    pub step: i32,
    /// The user message the run answers.
    pub user_message_id: Option<Uuid>,
    /// The conversation's messages, in order.
    pub messages: Json<Vec<Message>>,
    /// The caller's `/remember` notes, oldest first.
    pub notes: Vec<String>,
    /// The newest summary's last covered message, when one was written.
    pub summary_through_seq: Option<i32>,
    pub summary: Option<String>,
    /// The messages the newest summary was not written from (none without one).
    pub summary_kept_out: Vec<i32>,
    /// The conversation's context pipeline as stored (`None`: the defaults).
    pub pipeline: Option<Value>,
    /// Up to `max_retrieved` texts of the caller's other conversations that match the
    /// run's request, best first.
    pub retrieved: Vec<String>,
}

/// Reads run `run_id`'s step inputs as `user_id`, retrieving at most `max_retrieved`
/// texts (0: no search); `None` when the run is not theirs. It takes the pool, never a
/// transaction, in which the identity would outlive the call.
pub async fn load_as(
    pool: &PgPool,
    user_id: &str,
    run_id: Uuid,
    max_retrieved: i32,
) -> sqlx::Result<Option<StepContextRow>> {
    super::count_user_transaction();
    sqlx::query_as!(
        StepContextRow,
        r#"select conversation_id as "conversation_id!", status as "status!: RunStatus",
                  step as "step!", user_message_id,
                  messages as "messages!: Json<Vec<Message>>", notes as "notes!",
                  summary_through_seq, summary, summary_kept_out as "summary_kept_out!",
                  pipeline, retrieved as "retrieved!"
           from toolgate_step_inputs($1, $2, $3)"#,
        user_id,
        run_id,
        max_retrieved
    )
    .fetch_optional(pool)
    .await
}
