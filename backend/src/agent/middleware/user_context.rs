//! The user's original words and the ids reach every model call of a run, also on
//! later steps, and every tool call (the executor's tool context).

use futures::future::BoxFuture;
use protocol::api::ToolOutcome;

use super::{Ctx, Middleware, ToolNext};
use crate::agent::model::ModelRequest;
use crate::error::Result;
use crate::tools::executor::ToolCall;

pub struct UserContext;

pub fn section(ctx: &Ctx<'_>) -> String {
    format!(
        "The user's original request: {}\nConversation id: {}\nUser id: {}",
        ctx.run.original_user_request, ctx.run.conversation_id, ctx.run.user_id
    )
}

impl Middleware for UserContext {
    fn name(&self) -> &'static str {
        "user_context"
    }

    fn before_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            request.append_system_section(&section(ctx));
            Ok(())
        })
    }

    fn around_tool<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        mut call: ToolCall,
        next: ToolNext<'a>,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        if call.original_user_request.is_none() {
            call.original_user_request = Some(ctx.run.original_user_request.clone());
        }
        next(call)
    }
}
