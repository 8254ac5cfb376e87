//! What a model step reads, in one round trip: the run, the conversation's messages, the
//! caller's memory notes, the newest summary, the context pipeline and what retrieval
//! finds in the caller's other conversations. They live in five
//! tables (`agent_runs`, `messages`, `memory_notes`, `conversation_summaries`,
//! `conversations`); one SQL function (migration `one_trip_step_inputs`) reads them as
//! the caller in the implicit transaction of its own statement, so a step's read costs
//! one round trip where a transaction of its statements cost six.

use chrono::{DateTime, Utc};
use protocol::chat::{ContentBlock, Message, Role, RunStatus};
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
    /// The conversation's messages, column by column, in order; only those after the
    /// ones the caller said it holds.
    pub message_ids: Vec<Uuid>,
    pub message_seqs: Vec<i32>,
    pub message_roles: Vec<Role>,
    pub message_contents: Vec<Json<Vec<ContentBlock>>>,
    pub message_models: Vec<Option<String>>,
    pub message_run_ids: Vec<Option<Uuid>>,
    pub message_pinned: Vec<bool>,
    pub message_created_at: Vec<DateTime<Utc>>,
    /// The id of the last message the caller said it holds (`None`: it holds none, or
    /// that message is not there).
    pub known_last_id: Option<Uuid>,
    /// The sequence numbers of the pinned messages among those the caller holds.
    pub known_pinned: Vec<i32>,
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

impl StepContextRow {
    /// The conversation's messages, in order. The columns come from one aggregate, so
    /// they are equally long; if they ever were not, the read fails rather than pair a
    /// message with another's columns or drop one.
    pub fn take_messages(&mut self) -> sqlx::Result<Vec<Message>> {
        let n = self.message_ids.len();
        let lengths = [
            self.message_seqs.len(),
            self.message_roles.len(),
            self.message_contents.len(),
            self.message_models.len(),
            self.message_run_ids.len(),
            self.message_pinned.len(),
            self.message_created_at.len(),
        ];
        if lengths.iter().any(|length| *length != n) {
            return Err(sqlx::Error::Decode(
                format!("the step's message columns differ in length: {n} ids, {lengths:?}").into(),
            ));
        }
        let mut messages: Vec<Message> = std::mem::take(&mut self.message_ids)
            .into_iter()
            .zip(std::mem::take(&mut self.message_seqs))
            .zip(std::mem::take(&mut self.message_roles))
            .zip(std::mem::take(&mut self.message_contents))
            .zip(std::mem::take(&mut self.message_models))
            .zip(std::mem::take(&mut self.message_run_ids))
            .zip(std::mem::take(&mut self.message_pinned))
            .zip(std::mem::take(&mut self.message_created_at))
            .map(
                |(((((((id, seq), role), content), model), run_id), pinned), created_at)| Message {
                    id,
                    seq,
                    role,
                    content: content.0,
                    model,
                    run_id,
                    pinned,
                    created_at,
                },
            )
            .collect();
        // The statement aggregates a sorted subquery, which keeps its order in practice
        // but not by the SQL standard's word: checked, and sorted only if it did not.
        if !messages.is_sorted_by_key(|message| message.seq) {
            messages.sort_by_key(|message| message.seq);
        }
        Ok(messages)
    }
}

/// Reads run `run_id`'s step inputs as `user_id`, retrieving at most `max_retrieved`
/// texts (0: no search); `None` when the run is not theirs. `known` names the
/// conversation and the last sequence number whose messages the caller holds: of those
/// only the last one's id and which are pinned come back. It takes the pool, never a
/// transaction, in which the identity would outlive the call.
pub async fn load_as(
    pool: &PgPool,
    user_id: &str,
    run_id: Uuid,
    max_retrieved: i32,
    known: Option<(Uuid, i32)>,
) -> sqlx::Result<Option<StepContextRow>> {
    let (known_conversation, known_through) = known.unwrap_or((Uuid::nil(), 0));
    super::count_user_transaction();
    sqlx::query_as!(
        StepContextRow,
        r#"select conversation_id as "conversation_id!", status as "status!: RunStatus",
                  step as "step!", user_message_id,
                  message_ids as "message_ids!", message_seqs as "message_seqs!",
                  message_roles as "message_roles!: Vec<Role>",
                  message_contents as "message_contents!: Vec<Json<Vec<ContentBlock>>>",
                  message_models as "message_models!: Vec<Option<String>>",
                  message_run_ids as "message_run_ids!: Vec<Option<Uuid>>",
                  message_pinned as "message_pinned!", message_created_at as "message_created_at!",
                  known_last_id, known_pinned as "known_pinned!",
                  notes as "notes!",
                  summary_through_seq, summary, summary_kept_out as "summary_kept_out!",
                  pipeline, retrieved as "retrieved!"
           from toolgate_step_inputs($1, $2, $3, $4, $5)"#,
        user_id,
        run_id,
        max_retrieved,
        known_conversation,
        known_through
    )
    .fetch_optional(pool)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seqs: &[i32]) -> StepContextRow {
        let n = seqs.len();
        StepContextRow {
            conversation_id: Uuid::new_v4(),
            status: RunStatus::Running,
            step: 0,
            user_message_id: None,
            message_ids: (0..n).map(|_| Uuid::new_v4()).collect(),
            message_seqs: seqs.to_vec(),
            message_roles: (0..n)
                .map(|i| {
                    if i % 2 == 0 {
                        Role::User
                    } else {
                        Role::Assistant
                    }
                })
                .collect(),
            message_contents: seqs
                .iter()
                .map(|seq| {
                    Json(vec![ContentBlock::Text {
                        text: format!("message {seq}"),
                    }])
                })
                .collect(),
            message_models: seqs
                .iter()
                .map(|seq| Some(format!("model {seq}")))
                .collect(),
            message_run_ids: vec![None; n],
            message_pinned: seqs.iter().map(|seq| *seq == 2).collect(),
            message_created_at: vec![Utc::now(); n],
            known_last_id: None,
            known_pinned: Vec::new(),
            notes: Vec::new(),
            summary_through_seq: None,
            summary: None,
            summary_kept_out: Vec::new(),
            pipeline: None,
            retrieved: Vec::new(),
        }
    }

    #[test]
    fn each_message_is_put_together_from_its_own_row_of_every_column() {
        let mut stored = row(&[1, 2, 3]);
        let ids = stored.message_ids.clone();
        let messages = stored.take_messages().expect("whole columns");
        assert_eq!(messages.iter().map(|m| m.id).collect::<Vec<_>>(), ids);
        for message in &messages {
            assert_eq!(message.text(), format!("message {}", message.seq));
            assert_eq!(message.model, Some(format!("model {}", message.seq)));
            assert_eq!(message.pinned, message.seq == 2);
        }
    }

    #[test]
    fn messages_out_of_order_are_put_in_order_with_their_columns() {
        let mut stored = row(&[3, 1, 2]);
        let messages = stored.take_messages().expect("whole columns");
        assert_eq!(
            messages.iter().map(|m| m.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        for message in &messages {
            assert_eq!(message.text(), format!("message {}", message.seq));
        }
    }

    #[test]
    fn columns_of_unequal_length_fail_the_read_rather_than_drop_a_message() {
        let mut stored = row(&[1, 2, 3]);
        stored.message_contents.pop();
        let error = stored.take_messages().expect_err("a column short");
        assert!(error.to_string().contains("differ in length"), "{error}");
    }
}
