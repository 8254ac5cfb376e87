//! Tools and the universal executor.

pub mod digest;
pub mod executor;
pub mod identifiers;
pub mod kinds;
pub mod mcp;
pub mod redact;
pub mod registry;
pub mod remembered;
pub mod template;

use serde_json::{Map, Value};
use uuid::Uuid;

/// What every tool execution knows beyond its values: who asked, where, and the
/// user's own words, so a tool can act on the full intent and not only on the agent's
/// reading of it.
#[derive(Clone, Debug)]
pub struct ToolContext {
    pub user_id: String,
    pub conversation_id: Uuid,
    pub run_id: Option<Uuid>,
    pub tool_call_id: String,
    pub original_user_request: Option<String>,
    /// The agent's own arguments, its interpretation of the request.
    pub arguments: Map<String, Value>,
}

#[cfg(test)]
impl ToolContext {
    /// Alice's call `call_1` in the nil conversation, asking for her P&L: for tests of
    /// what renders the context.
    pub fn sample() -> Self {
        ToolContext {
            user_id: "alice".into(),
            conversation_id: Uuid::nil(),
            run_id: None,
            tool_call_id: "call_1".into(),
            original_user_request: Some("Get my P&L".into()),
            arguments: Map::new(),
        }
    }
}

/// The tool call a result belongs to: what a run records it under.
#[derive(Clone, Debug)]
pub struct CallRef {
    pub run_id: Option<Uuid>,
    pub conversation_id: Uuid,
    pub tool_call_id: String,
    pub tool_name: String,
}
