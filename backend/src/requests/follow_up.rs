//! What happens after a request has ended: the tool runs with the user's answer, or
//! the run is told why it did not, and resumes once nothing else is open.

use protocol::api::{RequestStatus, ToolOutcome};

use super::words;
use crate::agent;
use crate::db::input_requests::InputRequestRow;
use crate::error::Result;
use crate::state::AppState;
use crate::tools::executor;

/// After an ending has been committed: retries the tool when the user answered a
/// request of the executor's (the outcome is returned), and hands the run its tool
/// result, resuming it when that was the last open request.
pub async fn follow_up(
    state: &AppState,
    user_id: &str,
    row: &InputRequestRow,
) -> Result<Option<ToolOutcome>> {
    let answered = matches!(
        row.status(),
        RequestStatus::Completed | RequestStatus::Approved
    );
    let retried = if answered && row.from_executor() {
        Some(executor::retry(state, user_id, row).await?)
    } else {
        None
    };
    if row.run_id.is_some() && row.status() != RequestStatus::Abandoned {
        let outcome = retried.clone().unwrap_or_else(|| words::outcome_for(row));
        agent::deliver_outcome(state, user_id, row, outcome).await?;
    }
    Ok(retried)
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
