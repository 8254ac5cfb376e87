//! What the model is told when a request ends without the tool running: one place for
//! the words, so the run loop, the handlers and the background sweep say the same.
//! Each says what happened and what the model may do next.

use protocol::api::{RequestKind, RequestStatus, ToolOutcome};

use crate::db::input_requests::InputRequestRow;

fn asked_for(row: &InputRequestRow) -> String {
    let labels: Vec<&str> = row.fields().iter().map(|f| f.label()).collect();
    if labels.is_empty() {
        "the values it asked for".to_owned()
    } else {
        labels.join(", ")
    }
}

fn with_message(text: String, message: Option<&str>) -> String {
    match message {
        Some(message) => format!("{text} The user said: \"{message}\""),
        None => text,
    }
}

/// The tool result a run receives for a request that ended without running the tool.
pub fn outcome_for(row: &InputRequestRow) -> ToolOutcome {
    let tool = &row.tool_name;
    let message = row.decision_message.as_deref();
    let text = match (row.kind(), row.status()) {
        (RequestKind::Input, RequestStatus::Declined) => with_message(
            format!(
                "The user declined to provide {} for `{tool}`, so it did not run. Do not ask for it again; carry on without it or say what cannot be done without it.",
                asked_for(row)
            ),
            message,
        ),
        (RequestKind::Approval, RequestStatus::Rejected) => with_message(
            format!(
                "The user rejected this call of `{tool}`, so it did not run. Do not repeat it unchanged; follow what the user said, or ask how to proceed."
            ),
            message,
        ),
        (RequestKind::Input, RequestStatus::Cancelled) => format!(
            "The user cancelled the request for {} without answering, so `{tool}` did not run. It can be asked again if the user still wants it.",
            asked_for(row)
        ),
        (RequestKind::Approval, RequestStatus::Cancelled) => format!(
            "The user cancelled the approval of `{tool}` without deciding, so it did not run. It can be asked again if the user still wants it."
        ),
        (_, RequestStatus::Expired) => format!(
            "The request to the user expired before they answered, so `{tool}` did not run. Ask again when they are back."
        ),
        (_, RequestStatus::Abandoned) => match message {
            Some(why) => format!("`{tool}` did not finish: {why}."),
            None => format!("The run ended before the user answered, so `{tool}` did not run."),
        },
        (_, RequestStatus::Completed | RequestStatus::Approved) => {
            format!(
                "the server stopped after the user's answer and before `{tool}`'s result was recorded, so it may or may not have run; tell the user, and do not call it again before they have checked"
            )
        }
        (_, status) => format!("`{tool}` did not run (the request is {}).", status.as_str()),
    };
    ToolOutcome::failed(text)
}
