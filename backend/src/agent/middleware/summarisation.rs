//! Past a token threshold, older messages are replaced by one summary the model writes;
//! the newest messages stay, and a tool call is never separated from its result. The
//! summary is stored, so each stretch of history is summarised once.

use futures::future::BoxFuture;
use protocol::chat::Role;

use super::{Ctx, Middleware};
use crate::agent::model::{ChatMessage, ModelRequest, Purpose};
use crate::agent::tokens;
use crate::db::{self, summaries};
use crate::error::{Error, Result};

pub struct Summarisation;

pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:";

/// Where to cut so the kept tail keeps at least `keep` messages and does not start with
/// tool results whose call would be summarised away.
pub fn cut_point(messages: &[ChatMessage], keep: usize) -> usize {
    let mut cut = messages.len().saturating_sub(keep);
    while cut > 0 && messages[cut].role == Role::Tool {
        cut -= 1;
    }
    cut
}

impl Middleware for Summarisation {
    fn name(&self) -> &'static str {
        "summarisation"
    }

    fn before_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let settings = &ctx.state.config.summary;
            let mut tx = db::begin_as_user(&ctx.state.db, &ctx.run.user_id).await?;
            let latest = summaries::latest(&mut tx, ctx.run.conversation_id).await?;
            tx.commit().await?;
            if let Some((through_seq, summary)) = latest {
                request
                    .messages
                    .retain(|m| m.seq.is_none_or(|seq| seq > through_seq));
                request.messages.insert(
                    0,
                    ChatMessage::text(Role::System, format!("{SUMMARY_PREFIX}\n{summary}")),
                );
            }
            if tokens::count_request(request) <= settings.threshold_tokens {
                return Ok(());
            }
            let cut = cut_point(&request.messages, settings.keep_messages);
            if cut == 0 {
                return Ok(());
            }
            let Some(through_seq) = request.messages[..cut].iter().filter_map(|m| m.seq).max()
            else {
                return Ok(());
            };
            let older: Vec<ChatMessage> = request.messages[..cut].to_vec();
            let summary_request = ModelRequest {
                model: request.model.clone(),
                system: vec!["Summarise the conversation so far in a few sentences: what the user wants, what the tools returned, and what is still open. Keep names, numbers and ids.".to_owned()],
                messages: older,
                tools: Vec::new(),
                purpose: Purpose::Summary,
            };
            let ignore = |_delta: String| {};
            let reply = ctx
                .provider
                .complete(&summary_request, &ignore)
                .await
                .map_err(|err| {
                    Error::Internal(anyhow::anyhow!("summarising the conversation: {err}"))
                })?;
            let mut tx = db::begin_as_user(&ctx.state.db, &ctx.run.user_id).await?;
            summaries::insert(
                &mut tx,
                ctx.run.conversation_id,
                &ctx.run.user_id,
                through_seq,
                &reply.text,
            )
            .await?;
            tx.commit().await?;
            request.messages.drain(..cut);
            request.messages.insert(
                0,
                ChatMessage::text(Role::System, format!("{SUMMARY_PREFIX}\n{}", reply.text)),
            );
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::api::ToolOutcome;
    use protocol::chat::ContentBlock;

    fn message(role: Role) -> ChatMessage {
        let content = match role {
            Role::Tool => vec![ContentBlock::ToolResult {
                tool_call_id: "c".into(),
                name: "t".into(),
                outcome: ToolOutcome::ok(serde_json::json!(1)),
            }],
            _ => vec![ContentBlock::Text { text: "x".into() }],
        };
        ChatMessage {
            role,
            content,
            seq: Some(1),
        }
    }

    #[test]
    fn the_cut_never_separates_a_tool_call_from_its_results() {
        let messages = vec![
            message(Role::User),
            message(Role::Assistant),
            message(Role::Tool),
            message(Role::Tool),
            message(Role::Assistant),
        ];
        // Keeping 3 would start the tail at a tool result: the call comes along.
        assert_eq!(cut_point(&messages, 3), 1);
        assert_eq!(cut_point(&messages, 1), 4);
        assert_eq!(cut_point(&messages, 10), 0);
    }
}
