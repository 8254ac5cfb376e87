//! For tools with a key argument, only the newest call that ran per (tool, key value)
//! stays in the model's context: older calls that ran and their results are dropped.
//! A call that did not run (failed, rejected) keeps its result, which may carry the
//! user's reason; once a newer call for the same key follows it, its arguments are
//! left out but the key, so a model retrying a large write that keeps failing does not
//! fill the context with copies. The user's messages always stay.

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};
use serde_json::{Map, Value};

use super::{Ctx, Middleware};
use crate::agent::history;
use crate::agent::model::ModelRequest;
use crate::error::Result;
use crate::tools::registry::ToolRegistry;

pub struct SupersededCalls;

/// What stands in a retried call's arguments for those left out.
const LEFT_OUT: (&str, &str) = (
    "…",
    "the other arguments are left out: this call did not succeed, and a newer call for the same key followed",
);

pub fn drop_superseded(request: &mut ModelRequest, tools: &ToolRegistry) {
    let key_of = |name: &str| tools.get(name).and_then(|t| t.key_argument.clone());
    drop_superseded_by(request, &key_of);
}

fn drop_superseded_by(request: &mut ModelRequest, key_of: &dyn Fn(&str) -> Option<String>) {
    let calls = history::keyed_calls(&request.messages, key_of);
    if calls.superseded.is_empty() && calls.retried.is_empty() {
        return;
    }
    for message in &mut request.messages {
        if message.role == Role::User {
            continue;
        }
        message.content.retain(|block| match block {
            ContentBlock::ToolCall { id, .. } => !calls.superseded.contains(id),
            ContentBlock::ToolResult { tool_call_id, .. } => {
                !calls.superseded.contains(tool_call_id)
            }
            _ => true,
        });
        for block in &mut message.content {
            if let ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } = block
                && calls.retried.contains(id)
            {
                *arguments = key_only(arguments, key_of(name).as_deref());
            }
        }
    }
    request
        .messages
        .retain(|m| m.role == Role::User || !m.content.is_empty());
}

/// A retried call's arguments: its key argument, and a note for the rest.
fn key_only(arguments: &Map<String, Value>, key: Option<&str>) -> Map<String, Value> {
    let mut kept: Map<String, Value> = key
        .and_then(|key| Some((key.to_owned(), arguments.get(key)?.clone())))
        .into_iter()
        .collect();
    if arguments.len() > kept.len() {
        kept.insert(LEFT_OUT.0.to_owned(), Value::String(LEFT_OUT.1.to_owned()));
    }
    kept
}

impl Middleware for SupersededCalls {
    fn name(&self) -> &'static str {
        "superseded_calls"
    }

    fn before_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            drop_superseded(request, ctx.tools);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::agent::history::tests::{answer, call, failure, result, user, write_file_key};
    use crate::agent::model::Purpose;

    fn failed(id: &str, why: &str) -> crate::agent::model::ChatMessage {
        failure(id, "write_file", why)
    }

    #[test]
    fn retries_of_a_failing_write_keep_their_results_but_not_their_payloads() {
        let big = "x".repeat(20_000);
        let write =
            |id: &str, text: &str| call(id, "write_file", json!({"path": "/s.py", "text": text}));
        let mut request = ModelRequest {
            model: "m".to_owned(),
            system: Vec::new(),
            messages: vec![
                user("write v1"),
                write("w1", "v1"),
                result("w1", "write_file", json!("ok")),
                answer("wrote v1"),
                user("now the big version"),
                write("w2", &big),
                failed(
                    "w2",
                    "The user rejected this call. The user said: \"not that one\"",
                ),
                write("w3", &big),
                failed("w3", "HTTP 500"),
                write("w4", &big),
                failed("w4", "HTTP 500"),
            ],
            tools: Vec::new(),
            purpose: Purpose::Chat,
        };
        drop_superseded_by(&mut request, &write_file_key);
        let sent = format!("{:?}", request.messages);
        // One copy of the payload: the newest attempt's, which the model may retry.
        assert_eq!(sent.matches(&big).count(), 1, "payload copies");
        // Every attempt keeps its call (with its key) and its result, the user's reason
        // included; the version that ran is still there.
        for id in ["w1", "w2", "w3", "w4"] {
            assert_eq!(
                sent.matches(&format!("\"{id}\"")).count(),
                2,
                "{id}: {sent:.300}"
            );
        }
        assert!(sent.contains("not that one"));
        assert_eq!(sent.matches("/s.py").count(), 4);
        assert!(sent.contains(LEFT_OUT.1));
    }
}
