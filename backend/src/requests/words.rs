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

/// How the words for an ending the user chose begin. Every error of a tool or of a
/// third party reaches the model behind words of toolgate's own ("the service
/// answered …", "the tool of the MCP server … failed: …"), so only these endings
/// begin so.
const DECLINED: &str = "The user declined to provide ";
const REJECTED: &str = "The user rejected this call of ";
const CANCELLED_INPUT: &str = "The user cancelled the request for ";
const CANCELLED_APPROVAL: &str = "The user cancelled the approval of ";
const EXPIRED: &str = "The request to the user expired before they answered, ";

/// An ending of a request that the user chose, or let lapse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UserEnding {
    Declined,
    Rejected,
    Cancelled,
    Expired,
}

/// The ending `error` (a failed outcome's error) reports, if it is one of the words
/// [`outcome_for`] writes for an ending the user chose; never for an error that merely
/// mentions one ("Request rejected by WAF").
pub fn user_ending(error: &str) -> Option<UserEnding> {
    [
        (DECLINED, UserEnding::Declined),
        (REJECTED, UserEnding::Rejected),
        (CANCELLED_INPUT, UserEnding::Cancelled),
        (CANCELLED_APPROVAL, UserEnding::Cancelled),
        (EXPIRED, UserEnding::Expired),
    ]
    .into_iter()
    .find_map(|(start, ending)| error.starts_with(start).then_some(ending))
}

/// The tool result a run receives for a request that ended without running the tool.
pub fn outcome_for(row: &InputRequestRow) -> ToolOutcome {
    let tool = &row.tool_name;
    let message = row.decision_message.as_deref();
    let text = match (row.kind(), row.status()) {
        (RequestKind::Input, RequestStatus::Declined) => with_message(
            format!(
                "{DECLINED}{} for `{tool}`, so it did not run. Do not ask for it again; carry on without it or say what cannot be done without it.",
                asked_for(row)
            ),
            message,
        ),
        (RequestKind::Approval, RequestStatus::Rejected) => with_message(
            format!(
                "{REJECTED}`{tool}`, so it did not run. Do not repeat it unchanged; follow what the user said, or ask how to proceed."
            ),
            message,
        ),
        (RequestKind::Input, RequestStatus::Cancelled) => format!(
            "{CANCELLED_INPUT}{} without answering, so `{tool}` did not run. It can be asked again if the user still wants it.",
            asked_for(row)
        ),
        (RequestKind::Approval, RequestStatus::Cancelled) => format!(
            "{CANCELLED_APPROVAL}`{tool}` without deciding, so it did not run. It can be asked again if the user still wants it."
        ),
        (_, RequestStatus::Expired) => {
            format!("{EXPIRED}so `{tool}` did not run. Ask again when they are back.")
        }
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

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use protocol::api::{RequestKind, RequestStatus};
    use sqlx::types::Json;
    use uuid::Uuid;

    use super::*;

    fn row(kind: RequestKind, status: RequestStatus) -> InputRequestRow {
        InputRequestRow {
            id: Uuid::nil(),
            user_id: "u".to_owned(),
            conversation_id: Uuid::nil(),
            run_id: None,
            tool_name: "deploy".to_owned(),
            tool_call_id: "c1".to_owned(),
            tool_args: Json(serde_json::Map::new()),
            reason: String::new(),
            required_fields: Json(Vec::new()),
            user_inputs: None,
            save_for: "none".to_owned(),
            status,
            created_at: Utc::now(),
            completed_at: None,
            expires_at: Utc::now(),
            past_due: false,
            origin: "executor".to_owned(),
            original_user_request: None,
            tool_result: None,
            kind,
            allowed_decisions: Json(Vec::new()),
            arguments_digest: None,
            decision: None,
            decision_message: Some("Request rejected by WAF".to_owned()),
            decided_by: None,
            elicitation: None,
            held_by: None,
            retry_state: None,
            note: None,
        }
    }

    #[test]
    fn the_users_endings_are_read_back_from_their_words() {
        use RequestKind::{Approval, Input};
        use RequestStatus::{Abandoned, Cancelled, Declined, Expired, Rejected};
        for (kind, status, ending) in [
            (Input, Declined, Some(UserEnding::Declined)),
            (Approval, Rejected, Some(UserEnding::Rejected)),
            (Input, Cancelled, Some(UserEnding::Cancelled)),
            (Approval, Cancelled, Some(UserEnding::Cancelled)),
            (Input, Expired, Some(UserEnding::Expired)),
            (Approval, Expired, Some(UserEnding::Expired)),
            (Input, Abandoned, None),
        ] {
            let error = outcome_for(&row(kind, status)).error.expect("an error");
            assert_eq!(user_ending(&error), ending, "{error}");
        }
    }

    #[test]
    fn an_error_that_only_mentions_an_ending_is_none() {
        for error in [
            "the service answered HTTP 403 Forbidden: Request rejected by WAF",
            "the tool of the MCP server `x` failed: declined",
            "the MCP server `x` refused the call: The user rejected this call of `deploy`",
            "token expired",
            " The user declined to provide the id",
        ] {
            assert_eq!(user_ending(error), None, "{error}");
        }
    }
}
