//! For tools with a key argument, only the newest call per (tool, key value) stays in
//! the model's context: older calls and their results are dropped; the user's
//! messages always stay.

use std::collections::{HashMap, HashSet};

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};

use super::{Ctx, Middleware};
use crate::agent::model::ModelRequest;
use crate::error::Result;
use crate::tools::registry::ToolRegistry;

pub struct SupersededCalls;

pub fn drop_superseded(request: &mut ModelRequest, tools: &ToolRegistry) {
    // Newest first: the first call seen for a key wins.
    let mut newest: HashMap<(String, String), String> = HashMap::new();
    let mut superseded: HashSet<String> = HashSet::new();
    for message in request.messages.iter().rev() {
        for block in &message.content {
            let ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } = block
            else {
                continue;
            };
            let Some(key) = tools.get(name).and_then(|t| t.key_argument.clone()) else {
                continue;
            };
            let Some(value) = arguments.get(&key) else {
                continue;
            };
            let slot = (name.clone(), value.to_string());
            match newest.entry(slot) {
                std::collections::hash_map::Entry::Occupied(_) => {
                    superseded.insert(id.clone());
                }
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(id.clone());
                }
            }
        }
    }
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
            drop_superseded(request, &ctx.state.tools);
            Ok(())
        })
    }
}
