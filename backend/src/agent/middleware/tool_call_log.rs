//! Logs every tool call the agent makes: tool, id, outcome and duration. Arguments are
//! left out: they can carry values the user typed.

use std::time::Instant;

use futures::future::BoxFuture;
use protocol::api::ToolOutcome;

use super::{Ctx, Middleware, ToolNext};
use crate::error::Result;
use crate::tools::executor::ToolCall;

pub struct ToolCallLog;

impl Middleware for ToolCallLog {
    fn name(&self) -> &'static str {
        "tool_call_log"
    }

    fn around_tool<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        call: ToolCall,
        next: ToolNext<'a>,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        Box::pin(async move {
            let started = Instant::now();
            let (tool, id) = (call.tool_name.clone(), call.tool_call_id.clone());
            let outcome = next(call).await;
            let label = match &outcome {
                Ok(o) if o.requires_user_input => "requires_user_input",
                Ok(o) if o.success => "success",
                Ok(_) => "failure",
                Err(_) => "error",
            };
            tracing::info!(
                run_id = %ctx.run.run_id,
                step = ctx.run.step,
                tool = %tool,
                tool_call_id = %id,
                outcome = label,
                duration_ms = started.elapsed().as_millis() as u64,
                "agent tool call"
            );
            outcome
        })
    }
}
