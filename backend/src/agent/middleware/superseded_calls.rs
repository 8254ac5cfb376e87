//! For tools with a key argument, only the newest call that ran per (tool, key value)
//! stays in the model's context: older calls that ran and their results are dropped;
//! calls that did not run (failed, rejected) and the user's messages always stay.

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};

use super::{Ctx, Middleware};
use crate::agent::history;
use crate::agent::model::ModelRequest;
use crate::error::Result;
use crate::tools::registry::ToolRegistry;

pub struct SupersededCalls;

pub fn drop_superseded(request: &mut ModelRequest, tools: &ToolRegistry) {
    let key_of = |name: &str| tools.get(name).and_then(|t| t.key_argument.clone());
    let (_, superseded) = history::keyed_calls(&request.messages, &key_of);
    if superseded.is_empty() {
        return;
    }
    for message in &mut request.messages {
        if message.role == Role::User {
            continue;
        }
        message.content.retain(|block| match block {
            ContentBlock::ToolCall { id, .. } => !superseded.contains(id),
            ContentBlock::ToolResult { tool_call_id, .. } => !superseded.contains(tool_call_id),
            _ => true,
        });
    }
    request
        .messages
        .retain(|m| m.role == Role::User || !m.content.is_empty());
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
