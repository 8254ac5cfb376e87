//! Picks the model: a multimodal one when images are present, a long-context one past
//! a token threshold, the default otherwise. Unset alternatives fall back to the default.

use futures::future::BoxFuture;

use super::{Ctx, Middleware};
use crate::agent::model::ModelRequest;
use crate::agent::tokens;
use crate::error::Result;

pub struct ModelRouting;

impl Middleware for ModelRouting {
    fn name(&self) -> &'static str {
        "model_routing"
    }

    fn before_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let llm = ctx.llm;
            if request.messages.iter().any(|m| m.has_image()) {
                if let Some(vision) = &llm.vision_model {
                    request.model = vision.clone();
                }
            } else if let Some(long) = &llm.long_context_model
                && tokens::count_request(request) > llm.long_context_threshold
            {
                request.model = long.clone();
            }
            Ok(())
        })
    }
}
