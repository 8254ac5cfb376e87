//! An image the model has already answered is replaced by a short text stub, so it is
//! not sent (and paid for) again on every later call.

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};

use super::{Ctx, Middleware};
use crate::agent::model::ModelRequest;
use crate::error::Result;

pub struct ProcessedImages;

pub const STUB: &str = "[image already processed]";

pub fn replace_answered_images(request: &mut ModelRequest) {
    let Some(last_answer) = request
        .messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
    else {
        return;
    };
    for message in &mut request.messages[..last_answer] {
        for block in &mut message.content {
            if matches!(block, ContentBlock::Image { .. }) {
                *block = ContentBlock::ImageStub {
                    text: STUB.to_owned(),
                };
            }
        }
    }
}

impl Middleware for ProcessedImages {
    fn name(&self) -> &'static str {
        "processed_images"
    }

    fn before_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            replace_answered_images(request);
            Ok(())
        })
    }
}
