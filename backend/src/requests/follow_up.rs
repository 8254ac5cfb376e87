//! What happens after a request has ended: the tool runs with the user's answer, or
//! the run is told why it did not, and resumes once nothing else is open.

use futures::future::BoxFuture;
use protocol::api::{RequestStatus, ToolOutcome};

use super::words;
use crate::db::input_requests::InputRequestRow;
use crate::error::Result;
use crate::tools::CallRef;
use crate::tools::executor::{self, Executor};
use crate::tools::mcp::AfterAnswer;

/// Where the outcome of a call goes when a run waits for it: the agent's runs (which
/// record it and resume), or, in tests, a list.
pub trait RunInbox: Send + Sync {
    /// Hands the run of `call` its outcome.
    fn deliver<'a>(
        &'a self,
        user_id: &'a str,
        call: &'a CallRef,
        outcome: ToolOutcome,
    ) -> BoxFuture<'a, Result<()>>;
}

/// After an ending has been committed: retries the tool through `executor` when the
/// user answered a request of the executor's (the outcome is returned), and hands the
/// run its tool result through `runs`, which resumes it when nothing else holds it
/// (no request open, no other answered call's outcome on its way).
pub async fn follow_up(
    executor: &Executor,
    runs: &dyn RunInbox,
    user_id: &str,
    row: &InputRequestRow,
) -> Result<Option<ToolOutcome>> {
    if row.from_mcp() {
        return follow_up_mcp(executor, runs, user_id, row).await;
    }
    let answered = matches!(
        row.status(),
        RequestStatus::Completed | RequestStatus::Approved
    );
    let retried = if answered && row.from_executor() {
        Some(executor::retry(executor, user_id, row).await?)
    } else {
        None
    };
    if row.run_id.is_some() && row.status() != RequestStatus::Abandoned {
        let outcome = retried.clone().unwrap_or_else(|| words::outcome_for(row));
        runs.deliver(user_id, &row.call_ref(), outcome).await?;
    }
    Ok(retried)
}

/// An MCP server's question: the live call that waits for it carries on (and its run
/// records what it finally does). Only when nobody holds that call any more is the run
/// told here that the tool did not finish.
async fn follow_up_mcp(
    executor: &Executor,
    runs: &dyn RunInbox,
    user_id: &str,
    row: &InputRequestRow,
) -> Result<Option<ToolOutcome>> {
    if row.retry_state.is_some() {
        let Some(outcome) = executor.mcp.answer_round(row).await? else {
            return Ok(None);
        };
        runs.deliver(user_id, &row.call_ref(), outcome.clone())
            .await?;
        return Ok(Some(outcome));
    }
    match executor.mcp.after_answer(row).await? {
        AfterAnswer::Outcome(outcome) => Ok(Some(*outcome)),
        AfterAnswer::Elsewhere => Ok(None),
        AfterAnswer::Orphaned => {
            if row.run_id.is_some() {
                let outcome = words::outcome_for(row);
                runs.deliver(user_id, &row.call_ref(), outcome).await?;
            }
            Ok(None)
        }
    }
}

/// The result a run should record for a request that ended while nobody delivered it
/// (the server stopped in between): the stored retry outcome, else the words for its
/// ending. `None` when the stored outcome was itself a new request (an approval after
/// the values), which carries the call on.
pub fn outcome_of_settled(row: &InputRequestRow) -> Option<ToolOutcome> {
    match row
        .tool_result
        .clone()
        .and_then(|value| serde_json::from_value::<ToolOutcome>(value).ok())
    {
        Some(outcome) if outcome.is_waiting() => None,
        Some(outcome) => Some(outcome),
        None => Some(words::outcome_for(row)),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use protocol::api::{DeclineRequestParams, SubmitResponseParams};
    use protocol::chat::{ContentBlock, Role};
    use serde_json::json;
    use uuid::Uuid;

    use super::*;
    use crate::db::messages::{self, NewMessage};
    use crate::db::{self, runs};
    use crate::requests::endings;
    use crate::tools::executor::tests::{call, conversation_of, fixture};

    /// Keeps what would have gone to the runs.
    #[derive(Default)]
    struct Delivered(Mutex<Vec<(String, ToolOutcome)>>);

    impl RunInbox for Delivered {
        fn deliver<'a>(
            &'a self,
            _user_id: &'a str,
            call: &'a CallRef,
            outcome: ToolOutcome,
        ) -> BoxFuture<'a, Result<()>> {
            self.0
                .lock()
                .expect("lock")
                .push((call.tool_call_id.clone(), outcome));
            Box::pin(async { Ok(()) })
        }
    }

    /// A run of `user` in `conversation`, waiting on the calls it makes.
    async fn run_of(executor: &Executor, user: &str, conversation: Uuid) -> Uuid {
        let mut tx = db::begin_as_user(&executor.pool, user).await.expect("tx");
        let message = messages::append(
            &mut tx,
            NewMessage {
                conversation_id: conversation,
                user_id: user,
                role: Role::User,
                content: &[ContentBlock::Text {
                    text: "look my account up".into(),
                }],
                model: None,
                run_id: None,
            },
        )
        .await
        .expect("message");
        let run_id = Uuid::new_v4();
        runs::insert(
            &mut tx,
            run_id,
            conversation,
            user,
            message.id,
            "m",
            chrono::Duration::seconds(30),
        )
        .await
        .expect("run");
        tx.commit().await.expect("commit");
        run_id
    }

    /// The executor's request for the account, made in a run of the user's or outside
    /// any.
    async fn asked(executor: &Executor, user: &str, in_run: bool) -> String {
        let conversation = conversation_of(executor, user).await;
        let run = if in_run {
            Some(run_of(executor, user, conversation).await)
        } else {
            None
        };
        let id = format!("call_{}", Uuid::new_v4().simple());
        let mut tool_call = call(conversation, "lookup_account", &id, json!({}));
        tool_call.run_id = run;
        let outcome = executor::execute(executor, user, tool_call)
            .await
            .expect("executed");
        assert!(outcome.requires_user_input, "{outcome:?}");
        id
    }

    #[tokio::test]
    async fn a_declined_request_tells_its_run_without_running_the_tool() {
        let fx = fixture().await;
        let id = asked(&fx.executor, "ann", true).await;
        let mut tx = db::begin_as_user(&fx.executor.pool, "ann")
            .await
            .expect("tx");
        let row = endings::decline(
            &mut tx,
            "ann",
            DeclineRequestParams {
                tool_call_id: id.clone(),
                message: None,
            },
        )
        .await
        .expect("declined");
        tx.commit().await.expect("commit");

        let inbox = Delivered::default();
        let retried = follow_up(&fx.executor, &inbox, "ann", &row)
            .await
            .expect("followed up");
        assert!(retried.is_none(), "the tool must not run: {retried:?}");
        let delivered = inbox.0.lock().expect("lock");
        assert_eq!(delivered.len(), 1);
        assert_eq!(delivered[0].0, id);
        assert!(!delivered[0].1.success);
        assert!(
            delivered[0]
                .1
                .error
                .as_deref()
                .unwrap_or_default()
                .contains("declined"),
            "{:?}",
            delivered[0].1
        );
    }

    /// A server may say its URL-mode question is complete after the question's time
    /// ran out and before the sweep expired it: the question stays unanswered.
    #[tokio::test]
    async fn a_question_past_its_time_is_not_completed_by_its_server() {
        let fx = fixture().await;
        let id = asked(&fx.executor, "cy", false).await;
        let mut tx = db::begin_as_user(&fx.executor.pool, "cy")
            .await
            .expect("tx");
        let row = crate::db::input_requests::find_for_update(&mut tx, &id, None)
            .await
            .expect("read")
            .expect("the request");
        sqlx::query(
            "update tool_user_input_requests set expires_at = now() - interval '1 second'
             where id = $1",
        )
        .bind(row.id)
        .execute(&mut *tx)
        .await
        .expect("past its time");
        let completed = endings::complete_url_question(&mut tx, row.id)
            .await
            .expect("looked at");
        assert!(completed.is_none(), "{completed:?}");
        let stored = crate::db::input_requests::find(&mut tx, row.id)
            .await
            .expect("read")
            .expect("the request");
        assert_eq!(stored.status, protocol::api::RequestStatus::Pending);
    }

    #[tokio::test]
    async fn an_answered_request_retries_the_tool_and_its_run_gets_that_outcome() {
        let fx = fixture().await;
        let id = asked(&fx.executor, "ann", true).await;
        let answer = endings::check_answer(
            &fx.executor.pool,
            "ann",
            SubmitResponseParams {
                tool_call_id: id.clone(),
                user_inputs: json!({"account": "acme-42"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            },
        )
        .await
        .expect("checked");
        let mut tx = db::begin_as_user(&fx.executor.pool, "ann")
            .await
            .expect("tx");
        let row = endings::submit(
            &mut tx,
            endings::Deps {
                vault: &fx.executor.vault,
                tools: &fx.executor.tools,
            },
            "ann",
            answer,
        )
        .await
        .expect("answered");
        tx.commit().await.expect("commit");

        let inbox = Delivered::default();
        let retried = follow_up(&fx.executor, &inbox, "ann", &row)
            .await
            .expect("followed up")
            .expect("the tool ran again");
        let delivered = inbox.0.lock().expect("lock");
        assert_eq!(delivered.len(), 1);
        assert_eq!(delivered[0].0, id);
        assert_eq!(
            delivered[0].1, retried,
            "the run gets what the retry answered"
        );
    }

    #[tokio::test]
    async fn a_request_outside_a_run_delivers_nothing() {
        let fx = fixture().await;
        let id = asked(&fx.executor, "bob", false).await;
        let mut tx = db::begin_as_user(&fx.executor.pool, "bob")
            .await
            .expect("tx");
        let row = endings::cancel(&mut tx, "bob", &id)
            .await
            .expect("cancelled");
        tx.commit().await.expect("commit");
        let inbox = Delivered::default();
        let retried = follow_up(&fx.executor, &inbox, "bob", &row)
            .await
            .expect("followed up");
        assert!(retried.is_none());
        assert!(inbox.0.lock().expect("lock").is_empty());
    }
}
