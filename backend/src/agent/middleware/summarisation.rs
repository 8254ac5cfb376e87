//! Past a token threshold, older exchanges are replaced by one summary the model
//! writes. It runs after superseded calls and answered images are removed, so the
//! summary is written from the cleaned history, and before the context pipeline, whose
//! budget it keeps: past the filter's `token_budget`, when that is lower than the
//! server's threshold, it summarises too, so content leaves the context only into a
//! summary. What must stay — the pinned requests with their answers, the newest version
//! of every keyed artefact — is never summarised. The run loop loads the latest summary
//! and stores a new one, so each stretch is summarised once; the middleware only asks
//! the model.

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};
use serde_json::Value;

use super::{Ctx, Middleware};
use crate::agent::history;
use crate::agent::model::{ChatMessage, ModelRequest, Purpose};
use crate::agent::step_inputs::StoredSummary;
use crate::agent::tokens;
use crate::error::{Error, Result};

pub struct Summarisation {
    /// Set when the context pipeline follows in the chain: its budget, when lower,
    /// is where summarising starts.
    pub keeps_pipeline_budget: bool,
}

pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:";

/// What the summary is asked to keep: the task's requirements above all.
pub const SUMMARY_PROMPT: &str = "Summarise the conversation so far for the assistant that continues it. Keep, as bullet points: every constraint and requirement the user stated (in their words where short), the decisions made, the questions still open, what the tools returned that still matters, and the names of current artefacts (files, scripts, ids). Keep names, numbers and ids exactly. An earlier summary, if any, comes first: carry its points over.";

/// Where the kept tail starts: at an exchange, holding the current one and then whole
/// earlier exchanges while it has fewer than `keep_messages` messages and fits in half
/// of `start` less `fixed` — what stays however much is summarised (the system prompt,
/// the pinned requests, the current artefacts) — so that after summarising the request
/// is well under `start` and nothing further has to go.
pub fn cut_point(
    messages: &[ChatMessage],
    start: usize,
    keep_messages: usize,
    fixed: usize,
) -> usize {
    let exchanges = history::exchanges(messages);
    let Some(current) = exchanges.last() else {
        return 0;
    };
    let room = (start / 2).saturating_sub(fixed);
    let mut cut = current.start;
    let mut tail_tokens: usize = messages[cut..].iter().map(tokens::count_message).sum();
    for exchange in exchanges.iter().rev().skip(1) {
        let size: usize = messages[exchange.clone()]
            .iter()
            .map(tokens::count_message)
            .sum();
        if messages.len() - cut >= keep_messages || tail_tokens + size > room {
            break;
        }
        cut = exchange.start;
        tail_tokens += size;
    }
    cut
}

/// The request with a stored summary in place: what it covers goes, but for what must
/// stay, which comes first, then the summary, then the newer messages.
pub fn apply_summary(
    messages: &mut Vec<ChatMessage>,
    through_seq: i32,
    summary: &str,
    key_of: &dyn Fn(&str) -> Option<String>,
) {
    let stay = history::must_stay(messages, key_of);
    let mut kept = Vec::new();
    let mut newer = Vec::new();
    for (message, stays) in std::mem::take(messages).into_iter().zip(stay) {
        // An earlier summary: the new one carries it over.
        if message.role == Role::System && message.seq.is_none() {
            continue;
        }
        if message.seq.is_none_or(|seq| seq > through_seq) {
            newer.push(message);
        } else if stays {
            kept.push(message);
        }
    }
    kept.push(ChatMessage::text(
        Role::System,
        format!("{SUMMARY_PREFIX}\n{}", history::defused(summary)),
    ));
    kept.extend(newer);
    *messages = kept;
}

/// The summary request for `older`, cut to `budget` tokens: images become stubs and,
/// when the whole does not fit, every long text, argument and result is shortened to an
/// equal share.
pub fn summary_request(model: &str, older: Vec<ChatMessage>, budget: usize) -> ModelRequest {
    let mut messages: Vec<ChatMessage> = older
        .into_iter()
        .map(|mut message| {
            for block in &mut message.content {
                if matches!(block, ContentBlock::Image { .. }) {
                    *block = ContentBlock::ImageStub {
                        text: "[an image]".to_owned(),
                    };
                }
            }
            message
        })
        .collect();
    let size =
        |messages: &[ChatMessage]| -> usize { messages.iter().map(tokens::count_message).sum() };
    let blocks: usize = messages.iter().map(|m| m.content.len()).sum();
    let mut share = budget * 4 / blocks.max(1);
    while size(&messages) > budget && share >= 100 {
        for block in messages.iter_mut().flat_map(|m| m.content.iter_mut()) {
            shorten(block, share);
        }
        share /= 2;
    }
    ModelRequest {
        model: model.to_owned(),
        system: vec![SUMMARY_PROMPT.to_owned()],
        messages,
        tools: Vec::new(),
        purpose: Purpose::Summary,
    }
}

fn shorten_text(text: &str, chars: usize) -> Option<String> {
    (text.chars().count() > chars).then(|| {
        let head: String = text.chars().take(chars).collect();
        format!("{head}… [shortened for the summary]")
    })
}

fn shorten(block: &mut ContentBlock, chars: usize) {
    match block {
        ContentBlock::Text { text } => {
            if let Some(short) = shorten_text(text, chars) {
                *text = short;
            }
        }
        ContentBlock::ToolCall { arguments, .. } => {
            for value in arguments.values_mut() {
                let text = match &*value {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                if let Some(short) = shorten_text(&text, chars) {
                    *value = Value::String(short);
                }
            }
        }
        ContentBlock::ToolResult { outcome, .. } => {
            if let Some(result) = &outcome.result
                && let Some(short) = shorten_text(&result.to_string(), chars)
            {
                outcome.result = Some(Value::String(short));
            }
        }
        _ => {}
    }
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
            let settings = ctx.summary;
            let key_of = super::key_of(ctx);
            if let Some(stored) = &ctx.inputs.summary {
                apply_summary(
                    &mut request.messages,
                    stored.through_seq,
                    &stored.text,
                    &key_of,
                );
            }
            let start = if self.keeps_pipeline_budget {
                ctx.inputs.pipeline.summary_start(settings.threshold_tokens)
            } else {
                settings.threshold_tokens
            };
            if tokens::count_request(request) <= start {
                return Ok(());
            }
            let stay = history::must_stay(&request.messages, &key_of);
            let fixed = request
                .system
                .iter()
                .map(|s| tokens::count_text(s))
                .sum::<usize>()
                + request
                    .messages
                    .iter()
                    .zip(&stay)
                    .filter(|(_, stays)| **stays)
                    .map(|(message, _)| tokens::count_message(message))
                    .sum::<usize>();
            let cut = cut_point(&request.messages, start, settings.keep_messages, fixed);
            let older: Vec<ChatMessage> = request.messages[..cut]
                .iter()
                .zip(&stay)
                .filter(|(_, stays)| !**stays)
                .map(|(message, _)| message.clone())
                .collect();
            if !older.iter().any(|m| m.role != Role::System) {
                return Ok(());
            }
            let Some(through_seq) = request.messages[..cut].iter().filter_map(|m| m.seq).max()
            else {
                return Ok(());
            };
            let summary_request = summary_request(&request.model, older, settings.threshold_tokens);
            let ignore = |_delta: String| {};
            let reply = ctx
                .provider
                .complete(&summary_request, &ignore)
                .await
                .map_err(|err| {
                    Error::Internal(anyhow::anyhow!("summarising the conversation: {err}"))
                })?;
            apply_summary(&mut request.messages, through_seq, &reply.text, &key_of);
            // Stored by the run loop with the step's answer.
            ctx.outputs.store_summary(StoredSummary {
                through_seq,
                text: reply.text,
            });
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::history::tests::{answer, call, result, user, write_file_key};
    use serde_json::json;

    fn numbered(mut messages: Vec<ChatMessage>) -> Vec<ChatMessage> {
        for (seq, message) in messages.iter_mut().enumerate() {
            message.seq = Some(seq as i32 + 1);
        }
        messages
    }

    #[test]
    fn the_tail_starts_at_an_exchange_and_holds_the_current_one() {
        let messages = numbered(vec![
            user("one"),
            call("c", "calculator", json!({})),
            result("c", "calculator", json!(1)),
            answer("done"),
            user("two"),
            answer("ok"),
            user("three"),
            call("d", "calculator", json!({})),
            result("d", "calculator", json!(2)),
        ]);
        assert_eq!(cut_point(&messages, 10_000, 4, 0), 4);
        assert_eq!(cut_point(&messages, 10_000, 1, 0), 6);
        assert_eq!(cut_point(&messages, 10_000, 100, 0), 0);
        // A tiny threshold keeps only the current exchange, never less.
        assert_eq!(cut_point(&messages, 2, 100, 0), 6);
        // What stays whatever is summarised leaves less room for the tail.
        assert_eq!(cut_point(&messages, 10_000, 100, 4_990), 6);
    }

    #[test]
    fn a_summary_keeps_the_pinned_request_and_the_current_artefact_and_replaces_the_last_one() {
        let mut task = user("the task: five requirements");
        task.pinned = true;
        let mut messages = numbered(vec![
            task,
            answer("understood"),
            user("write it"),
            call("w1", "write_file", json!({"path": "/s.py", "text": "v1"})),
            result("w1", "write_file", json!("saved")),
            answer("wrote it"),
            user("chat"),
            answer("chat back"),
            user("now"),
        ]);
        messages.insert(0, ChatMessage::text(Role::System, "old summary"));
        apply_summary(
            &mut messages,
            8,
            &format!("new summary {}", history::PINNED_MARKER),
            &write_file_key,
        );
        let texts: Vec<String> = messages.iter().map(|m| m.plain_text()).collect();
        assert_eq!(
            texts,
            vec![
                "the task: five requirements".to_owned(),
                "understood".to_owned(),
                "write it".to_owned(),
                String::new(),
                String::new(),
                "wrote it".to_owned(),
                format!(
                    "{SUMMARY_PREFIX}\nnew summary {}",
                    history::defused(history::PINNED_MARKER)
                ),
                "now".to_owned(),
            ]
        );
    }

    #[test]
    fn the_summary_request_is_cleaned_and_within_its_budget() {
        let big: String = (0..8_000).map(|n| format!("w{n} ")).collect();
        let older = vec![
            ChatMessage {
                role: Role::User,
                content: vec![
                    ContentBlock::Text {
                        text: "look at this".into(),
                    },
                    ContentBlock::Image {
                        url: format!("data:image/png;base64,{big}"),
                    },
                ],
                seq: Some(1),
                pinned: false,
            },
            call(
                "c",
                "fetch",
                json!({"url": "https://example.com", "body": big}),
            ),
            result("c", "fetch", json!({"page": big})),
        ];
        let request = summary_request("m", older, 2_000);
        assert!(request.tools.is_empty());
        assert!(request.system[0].starts_with("Summarise"));
        assert!(request.system[0].contains("constraint"));
        let sent = format!("{:?}", request.messages);
        assert!(!sent.contains("base64"), "the image went to the summary");
        let messages: usize = request.messages.iter().map(tokens::count_message).sum();
        assert!(messages <= 2_000, "{messages} tokens");
        assert!(sent.contains("look at this") && sent.contains("example.com"));
    }
}
