//! What a model step reads besides its messages, in one statement: the caller's memory
//! notes, the conversation's newest summary and its context pipeline. Each is a table
//! of its own (`memory_notes`, `conversation_summaries`, `conversations`); reading them
//! together saves a step two round trips.

use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// The stored parts of a step's inputs, as read.
pub struct StepContextRow {
    /// The caller's `/remember` notes, oldest first.
    pub notes: Vec<String>,
    /// The newest summary's last covered message, when one was written.
    pub summary_through_seq: Option<i32>,
    pub summary: Option<String>,
    /// The messages the newest summary was not written from (none without one).
    pub summary_kept_out: Vec<i32>,
    /// The conversation's context pipeline as stored (`None`: the defaults).
    pub pipeline: Option<Value>,
}

pub async fn load(conn: &mut PgConnection, conversation_id: Uuid) -> sqlx::Result<StepContextRow> {
    sqlx::query_as!(
        StepContextRow,
        r#"select array(select note from memory_notes order by id) as "notes!",
                  newest.through_seq as "summary_through_seq?",
                  newest.summary as "summary?",
                  coalesce(newest.kept_out, '{}') as "summary_kept_out!",
                  (select context_pipeline from conversations where id = $1) as pipeline
           from (select) as step
           left join lateral (
               select through_seq, summary, kept_out from conversation_summaries
               where conversation_id = $1 order by through_seq desc, id desc limit 1
           ) as newest on true"#,
        conversation_id
    )
    .fetch_one(conn)
    .await
}
