//! The middleware chain around the model and the tools. Each built-in is its own file
//! and can be left out or reordered with `TOOLGATE_MIDDLEWARE`.
//!
//! Hooks: `before_model` (may rewrite the request), `around_model`, `after_model`, and
//! `around_tool` for each tool call.

mod context_pipeline;
mod model_routing;
mod processed_images;
mod summarisation;
mod superseded_calls;
mod system_sections;
mod tool_call_log;
mod user_context;

pub use context_pipeline::{PipelineConfig, STAGES, load as context_pipeline_config};

use futures::future::BoxFuture;
use protocol::api::ToolOutcome;

use super::model::{DeltaSink, ModelError, ModelProvider, ModelReply, ModelRequest, RunContext};
use crate::error::{Error, Result};
use crate::state::AppState;
use crate::tools::executor::ToolCall;

/// What a middleware can reach.
pub struct Ctx<'a> {
    pub run: &'a RunContext,
    pub state: &'a AppState,
    pub provider: &'a dyn ModelProvider,
}

pub type ModelNext<'a> =
    Box<dyn FnOnce(ModelRequest) -> BoxFuture<'a, Result<ModelReply, ModelError>> + Send + 'a>;
pub type ToolNext<'a> = Box<dyn FnOnce(ToolCall) -> BoxFuture<'a, Result<ToolOutcome>> + Send + 'a>;

pub trait Middleware: Send + Sync {
    fn name(&self) -> &'static str;

    fn before_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        _request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn around_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        request: ModelRequest,
        next: ModelNext<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        next(request)
    }

    fn after_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        _reply: &'a mut ModelReply,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn around_tool<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        call: ToolCall,
        next: ToolNext<'a>,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        next(call)
    }
}

/// The built-ins by name, in the default order.
pub const DEFAULT_ORDER: &[&str] = &[
    "user_context",
    "system_sections",
    "summarisation",
    "superseded_calls",
    "processed_images",
    "context_pipeline",
    "model_routing",
    "tool_call_log",
];

fn built_in(name: &str) -> Option<Box<dyn Middleware>> {
    Some(match name {
        "user_context" => Box::new(user_context::UserContext),
        "system_sections" => Box::new(system_sections::SystemSections),
        "summarisation" => Box::new(summarisation::Summarisation),
        "superseded_calls" => Box::new(superseded_calls::SupersededCalls),
        "processed_images" => Box::new(processed_images::ProcessedImages),
        "context_pipeline" => Box::new(context_pipeline::ContextPipeline),
        "model_routing" => Box::new(model_routing::ModelRouting),
        "tool_call_log" => Box::new(tool_call_log::ToolCallLog),
        _ => return None,
    })
}

pub struct Chain {
    middleware: Vec<Box<dyn Middleware>>,
}

impl Chain {
    /// Builds the chain in the configured order; an unknown name is an error at start-up.
    pub fn from_names(names: &[String]) -> anyhow::Result<Self> {
        let mut middleware = Vec::new();
        for name in names {
            let found = built_in(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "TOOLGATE_MIDDLEWARE names unknown middleware `{name}`; known: {}",
                    DEFAULT_ORDER.join(", ")
                )
            })?;
            middleware.push(found);
        }
        Ok(Chain { middleware })
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.middleware.iter().map(|m| m.name()).collect()
    }

    pub async fn before_model(&self, ctx: &Ctx<'_>, request: &mut ModelRequest) -> Result<()> {
        for middleware in &self.middleware {
            middleware.before_model(ctx, request).await?;
        }
        Ok(())
    }

    pub async fn after_model(&self, ctx: &Ctx<'_>, reply: &mut ModelReply) -> Result<()> {
        for middleware in self.middleware.iter().rev() {
            middleware.after_model(ctx, reply).await?;
        }
        Ok(())
    }

    pub fn call_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: ModelRequest,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.call_model_from(0, ctx, request, deltas)
    }

    fn call_model_from<'a>(
        &'a self,
        index: usize,
        ctx: &'a Ctx<'a>,
        request: ModelRequest,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        match self.middleware.get(index) {
            None => Box::pin(async move { ctx.provider.complete(&request, deltas).await }),
            Some(middleware) => {
                let next: ModelNext<'a> =
                    Box::new(move |request| self.call_model_from(index + 1, ctx, request, deltas));
                middleware.around_model(ctx, request, next)
            }
        }
    }

    pub fn call_tool<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        call: ToolCall,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        self.call_tool_from(0, ctx, call)
    }

    fn call_tool_from<'a>(
        &'a self,
        index: usize,
        ctx: &'a Ctx<'a>,
        call: ToolCall,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        match self.middleware.get(index) {
            None => Box::pin(async move {
                match crate::tools::executor::execute(ctx.state, &ctx.run.user_id, call.clone())
                    .await
                {
                    Err(Error::NotFound("tool")) => Ok(ToolOutcome::failed(format!(
                        "there is no tool named `{}`",
                        call.tool_name
                    ))),
                    other => other,
                }
            }),
            Some(middleware) => {
                let next: ToolNext<'a> =
                    Box::new(move |call| self.call_tool_from(index + 1, ctx, call));
                middleware.around_tool(ctx, call, next)
            }
        }
    }
}
