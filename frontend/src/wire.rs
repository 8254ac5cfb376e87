//! Reading the server's JSON.
//!
//! Every body is parsed into one `serde_json::Value` and each wire type is read from
//! that value. The bundle then holds one decoder per wire type, where reading each from
//! its own source (a response's text, an event's text, serde's buffer for an internally
//! tagged or flattened enum) would compile it once per source. The stream's event,
//! which is a flattened tagged enum on the wire, is taken apart by hand for the same
//! reason.

use protocol::chat::{EventKind, StreamEvent};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// Reads a `T` from a body's text; the error says what did not fit.
pub fn decode<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let value: Value = serde_json::from_str(text).map_err(|err| err.to_string())?;
    from_value(value)
}

/// Reads a `T` from an already parsed value.
fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    T::deserialize(value).map_err(|err| err.to_string())
}

/// Reads one event of a conversation's stream: `{"id", "conversation_id", "run_id"?,
/// "type", …the kind's own fields}`.
pub fn event(text: &str) -> Result<StreamEvent, String> {
    let Value::Object(mut fields) = serde_json::from_str(text).map_err(|err| err.to_string())?
    else {
        return Err("an event is a JSON object".to_owned());
    };
    let id = fields
        .get("id")
        .and_then(Value::as_i64)
        .ok_or("an event's `id` is an integer")?;
    let conversation_id = take(&mut fields, "conversation_id")?;
    let run_id = take(&mut fields, "run_id")?;
    let kind = match fields.get("type").and_then(Value::as_str).unwrap_or("") {
        "run_started" => EventKind::RunStarted {
            model: take(&mut fields, "model")?,
        },
        "text_delta" => EventKind::TextDelta {
            delta: take(&mut fields, "delta")?,
        },
        "message_added" => EventKind::MessageAdded {
            message: take(&mut fields, "message")?,
        },
        "tool_call_started" => EventKind::ToolCallStarted {
            tool_call_id: take(&mut fields, "tool_call_id")?,
            name: take(&mut fields, "name")?,
            arguments: take(&mut fields, "arguments")?,
        },
        "tool_call_finished" => EventKind::ToolCallFinished {
            tool_call_id: take(&mut fields, "tool_call_id")?,
            name: take(&mut fields, "name")?,
            outcome: take(&mut fields, "outcome")?,
        },
        "input_requested" => EventKind::InputRequested {
            request: take(&mut fields, "request")?,
        },
        "input_resolved" => EventKind::InputResolved {
            request: take(&mut fields, "request")?,
        },
        "run_status" => EventKind::RunStatus {
            run: take(&mut fields, "run")?,
        },
        "elicitation_completed" => EventKind::ElicitationCompleted {
            request_id: take(&mut fields, "request_id")?,
            tool_call_id: take(&mut fields, "tool_call_id")?,
        },
        other => return Err(format!("unknown event type `{other}`")),
    };
    Ok(StreamEvent {
        id,
        conversation_id,
        run_id,
        kind,
    })
}

/// Reads one field of an event; a missing field reads as `null` (so an absent optional
/// field is `None` and an absent required one an error naming it).
fn take<T: DeserializeOwned>(fields: &mut Map<String, Value>, name: &str) -> Result<T, String> {
    from_value(fields.remove(name).unwrap_or(Value::Null)).map_err(|err| format!("`{name}`: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use uuid::Uuid;

    /// The hand-written reader agrees with the protocol's own for every kind of event.
    #[test]
    fn every_event_reads_as_the_protocol_reads_it() {
        let conversation = Uuid::from_u128(7);
        let request_id = Uuid::from_u128(9);
        let request = json!({
            "id": request_id, "conversation_id": conversation, "tool_name": "lookup",
            "tool_call_id": "c1", "tool_args": {"q": 1}, "reason": "Which company?",
            "fields": [{"name": "company", "type": "text"}], "save_for": "call",
            "status": "pending", "created_at": "2025-01-01T00:00:00Z",
            "expires_at": "2025-01-01T01:00:00Z"
        });
        let kinds = [
            json!({"type": "run_started", "model": "offline"}),
            json!({"type": "text_delta", "delta": "Hel"}),
            json!({"type": "message_added", "message": {"id": Uuid::from_u128(3), "seq": 1,
                "role": "assistant", "content": [{"type": "text", "text": "hi"},
                {"type": "tool_call", "id": "c1", "name": "lookup", "arguments": {"q": 1}}],
                "created_at": "2025-01-01T00:00:00Z"}}),
            json!({"type": "tool_call_started", "tool_call_id": "c1", "name": "lookup",
                "arguments": {"q": 1}}),
            json!({"type": "tool_call_finished", "tool_call_id": "c1", "name": "lookup",
                "outcome": {"success": true, "result": {"n": 2}}}),
            json!({"type": "input_requested", "request": request}),
            json!({"type": "input_resolved", "request": request}),
            json!({"type": "run_status", "run": {"id": Uuid::from_u128(5),
                "conversation_id": conversation, "status": "waiting_for_input", "step": 2,
                "created_at": "2025-01-01T00:00:00Z", "updated_at": "2025-01-01T00:00:01Z"}}),
            json!({"type": "elicitation_completed", "request_id": request_id,
                "tool_call_id": "c1"}),
        ];
        assert_eq!(kinds.len(), EventKind::NAMES.len());
        for (n, kind) in kinds.into_iter().enumerate() {
            let mut body = json!({"id": n + 1, "conversation_id": conversation});
            if n % 2 == 0 {
                body["run_id"] = json!(Uuid::from_u128(5));
            }
            if let (Value::Object(body), Value::Object(kind)) = (&mut body, kind) {
                body.extend(kind);
            }
            let text = body.to_string();
            let expected: StreamEvent = serde_json::from_str(&text).expect("the protocol reads it");
            assert_eq!(event(&text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn a_malformed_event_is_refused_with_what_is_wrong() {
        let conversation = Uuid::from_u128(7);
        let cases = [
            ("[1]", "object"),
            (
                r#"{"conversation_id": "x", "type": "text_delta", "delta": ""}"#,
                "`id`",
            ),
            (
                &*json!({"id": 1, "conversation_id": conversation, "type": "text_delta"})
                    .to_string(),
                "`delta`",
            ),
            (
                &*json!({"id": 1, "conversation_id": conversation, "type": "shutdown"}).to_string(),
                "shutdown",
            ),
            (
                &*json!({"id": 1, "conversation_id": "not-a-uuid", "type": "text_delta",
                    "delta": ""})
                .to_string(),
                "`conversation_id`",
            ),
        ];
        for (text, names) in cases {
            let err = event(text).expect_err(text);
            assert!(err.contains(names), "{text}: {err}");
        }
    }
}
