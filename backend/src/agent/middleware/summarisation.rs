//! Past a token threshold, older exchanges are replaced by one summary the model
//! writes. It runs after superseded calls and answered images are removed, so the
//! summary is written from the cleaned history, and before the context pipeline, whose
//! budget it keeps: it starts at the lowest of the server's threshold, the
//! conversation's `filter.token_budget` and half its `validate.max_tokens`, so content
//! leaves the context only into a summary. What must stay — the pinned requests with their answers, the newest version
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
use crate::error::Result;

pub struct Summarisation;

pub const SUMMARY_PREFIX: &str = "Summary of the earlier conversation:";

/// What the summary is asked to keep: the task's requirements above all.
pub const SUMMARY_PROMPT: &str = "Summarise the conversation so far for the assistant that continues it. Keep, as bullet points: every constraint and requirement the user stated (in their words where short), the decisions made, the questions still open, what the tools returned that still matters, and the names of current artefacts (files, scripts, ids). Keep names, numbers and ids exactly. An earlier summary, if any, comes first: carry its points over.";

/// Where the kept tail starts: at an exchange, holding the current one and then whole
/// earlier exchanges while it has fewer than `keep_messages` messages and, with what
/// every request carries (`fixed` tokens: the system prompt and the tools' definitions)
/// and what must stay before it (`stay`: pinned
/// requests, current artefacts — kept whatever is summarised), fits in half of `start`,
/// so that after summarising the request is well under `start`.
pub fn cut_point(
    messages: &[ChatMessage],
    stay: &[bool],
    fixed: usize,
    start: usize,
    keep_messages: usize,
) -> usize {
    let exchanges = history::exchanges(messages);
    let Some(current) = exchanges.last() else {
        return 0;
    };
    let counts: Vec<usize> = messages.iter().map(tokens::count_message).collect();
    // Tokens of what must stay before each index.
    let mut staying_before = Vec::with_capacity(messages.len() + 1);
    staying_before.push(0);
    for (count, stays) in counts.iter().zip(stay) {
        let so_far = staying_before.last().copied().unwrap_or(0);
        staying_before.push(so_far + if *stays { *count } else { 0 });
    }
    let mut cut = current.start;
    let mut tail_tokens: usize = counts[cut..].iter().sum();
    for exchange in exchanges.iter().rev().skip(1) {
        let size: usize = counts[exchange.clone()].iter().sum();
        let after = fixed + staying_before[exchange.start] + tail_tokens + size;
        if messages.len() - cut >= keep_messages || after > start / 2 {
            break;
        }
        cut = exchange.start;
        tail_tokens += size;
    }
    cut
}

/// The request with a stored summary in place: what it covers goes — all up to its
/// `through_seq` but what must stay now and what it was not written from (`kept_out`),
/// which come first — then the summary, then the newer messages. The summary is the
/// history's one system message here (notes the context pipeline retrieves come after
/// this middleware); providers send it as the assistant's own words, never with the
/// system prompt's authority (the model wrote it from tool results too).
pub fn apply_summary(
    messages: &mut Vec<ChatMessage>,
    summary: &StoredSummary,
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
        match message.seq {
            Some(seq) if seq <= summary.through_seq => {
                if stays || summary.kept_out.contains(&seq) {
                    kept.push(message);
                }
            }
            _ => newer.push(message),
        }
    }
    kept.push(ChatMessage::text(
        Role::System,
        format!("{SUMMARY_PREFIX}\n{}", history::defused(&summary.text)),
    ));
    kept.extend(newer);
    *messages = kept;
}

/// A summary longer than this share of where summarising starts is cut: a verbose or
/// hostile model must not undo what summarising is for.
fn summary_cap_chars(start: usize) -> usize {
    // About a quarter of `start` in tokens, at some four characters a token.
    start.max(400)
}

/// What stands where the middle of an over-long summary was.
const SUMMARY_MIDDLE_LEFT_OUT: &str = "\n[… part of the summary was left out here to fit …]\n";

/// `summary` held to `chars` characters, if it is longer: its start (where the task and
/// the user's requirements are) and its end (the newest points, which every summary
/// carried on and added to) stay, the middle goes, at line ends where it can. The turns
/// a summary covers leave the context for good, so losing its end would lose them.
fn capped_summary(summary: &str, chars: usize) -> Option<String> {
    let count = summary.chars().count();
    if count <= chars {
        return None;
    }
    let room = chars.saturating_sub(SUMMARY_MIDDLE_LEFT_OUT.chars().count());
    let head_chars = room / 2;
    let tail_chars = room - head_chars;
    let head_end = summary
        .char_indices()
        .nth(head_chars)
        .map_or(summary.len(), |(at, _)| at);
    let tail_start = summary
        .char_indices()
        .nth(count - tail_chars)
        .map_or(summary.len(), |(at, _)| at);
    let head = &summary[..head_end];
    let tail = &summary[tail_start..];
    // Whole lines where a line ends near the cut (in the quarter of the part kept next
    // to it): a cut inside a long paragraph stays where it is, rather than losing most
    // of what it keeps.
    let head = if summary[head_end..].starts_with(['\r', '\n']) {
        head
    } else {
        head.rfind('\n')
            .filter(|at| *at >= head.len() * 3 / 4)
            .map_or(head, |at| &head[..at])
    };
    let tail = if summary[..tail_start].ends_with('\n') {
        tail
    } else {
        tail.find('\n')
            .filter(|at| *at < tail.len() / 4)
            .map_or(tail, |at| &tail[at + 1..])
    };
    Some(format!("{head}{SUMMARY_MIDDLE_LEFT_OUT}{tail}"))
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
            let start = ctx.inputs.pipeline.summary_start(settings.threshold_tokens);
            let previous = ctx.inputs.summary.as_ref();
            if let Some(stored) = previous {
                // Held to today's cap: one written under a larger budget (or before
                // there was a cap) must not fill the request by itself.
                let capped = StoredSummary {
                    text: capped_summary(&stored.text, summary_cap_chars(start))
                        .unwrap_or_else(|| stored.text.clone()),
                    ..stored.clone()
                };
                apply_summary(&mut request.messages, &capped, &key_of);
            }
            if tokens::count_request(request) <= start {
                return Ok(());
            }
            let stay = history::must_stay(&request.messages, &key_of);
            let mut cut = cut_point(
                &request.messages,
                &stay,
                tokens::count_fixed(request),
                start,
                settings.keep_messages,
            );
            // The previous summary goes into the new one, never stays behind the cut:
            // the new one replaces it.
            let summary_at = request
                .messages
                .iter()
                .rposition(|m| m.role == Role::System && m.seq.is_none());
            let current = request
                .messages
                .iter()
                .rposition(|m| m.role == Role::User)
                .unwrap_or(request.messages.len());
            if let Some(at) = summary_at {
                cut = cut.max((at + 1).min(current));
            }
            let (older, kept_out): (Vec<_>, Vec<_>) = request.messages[..cut]
                .iter()
                .zip(&stay)
                .partition(|(_, stays)| !**stays);
            let older: Vec<ChatMessage> = older.into_iter().map(|(m, _)| m.clone()).collect();
            let kept_out: Vec<i32> = kept_out.into_iter().filter_map(|(m, _)| m.seq).collect();
            // Too little to be worth a model call: what must stay already fills the
            // request, and summarising each new exchange alone would cost a call a turn.
            let worth: usize = older
                .iter()
                .filter(|m| m.role != Role::System)
                .map(tokens::count_message)
                .sum();
            if worth == 0 || worth < start / 8 {
                return Ok(());
            }
            // Never short of the previous summary's reach, so the new one is the one
            // read next time.
            let Some(through_seq) = request.messages[..cut]
                .iter()
                .filter_map(|m| m.seq)
                .chain(previous.map(|p| p.through_seq))
                .max()
            else {
                return Ok(());
            };
            let summary_request = summary_request(&request.model, older, settings.threshold_tokens);
            let ignore = |_delta: String| {};
            let text = match ctx.provider.complete(&summary_request, &ignore).await {
                Ok(reply) if !reply.text.trim().is_empty() => reply.text,
                // The turns stay as they are, unsummarised, and the step goes on; the
                // next step asks again.
                Ok(_) => {
                    tracing::warn!(conversation = %ctx.run.conversation_id, "the model wrote an empty summary; not summarising");
                    return Ok(());
                }
                Err(err) => {
                    tracing::warn!(conversation = %ctx.run.conversation_id, error = %crate::logged::outside(&err), "summarising failed; not summarising");
                    return Ok(());
                }
            };
            let mut text = capped_summary(&text, summary_cap_chars(start)).unwrap_or(text);
            // Stored with the step's answer: a NUL, which Postgres cannot hold, would
            // fail the step, and every later one would ask for the summary again.
            crate::db::storable::replace_nul_in_text(&mut text);
            let summary = StoredSummary {
                through_seq,
                text,
                kept_out,
            };
            apply_summary(&mut request.messages, &summary, &key_of);
            // Stored by the run loop with the step's answer.
            ctx.outputs.store_summary(summary);
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::history::tests::{answer, call, result, user, write_file_key};
    use serde_json::json;

    #[test]
    fn an_over_long_summary_keeps_its_start_and_its_newest_points() {
        let mut summary =
            String::from("- The task: a scraper that must use only the standard library.\n");
        for n in 0..200 {
            summary.push_str(&format!(
                "- Step {n}: the model rewrote the parser again.\n"
            ));
        }
        summary.push_str("- The user asked: never store the password.");
        let capped = capped_summary(&summary, 1_000).expect("over the cap");
        assert!(
            capped.chars().count() <= 1_000,
            "{}",
            capped.chars().count()
        );
        assert!(capped.starts_with("- The task: a scraper"), "{capped}");
        assert!(
            capped.ends_with("- The user asked: never store the password."),
            "{capped}"
        );
        assert!(capped.contains(SUMMARY_MIDDLE_LEFT_OUT), "{capped}");
        // Whole lines on both sides of the cut.
        for line in capped.lines().filter(|line| !line.is_empty()) {
            assert!(
                line.starts_with("- ") || line.starts_with("[…"),
                "{line:?} in {capped}"
            );
        }
        assert_eq!(capped_summary("short", 1_000), None);
        // A last paragraph longer than the part kept of the end, ending in a line end,
        // keeps its last words; so does a long first paragraph its first ones.
        let prose = format!(
            "The task: a scraper.\n{}\n{} and never store the password.\n",
            "Earlier work. ".repeat(200),
            "Newest work. ".repeat(200)
        );
        let capped = capped_summary(&prose, 1_000).expect("over the cap");
        assert!(capped.ends_with("never store the password.\n"), "{capped}");
        assert!(
            capped.starts_with("The task: a scraper.\nEarlier work."),
            "{capped}"
        );
        // One long line is cut inside it, still within the cap.
        let one_line = "é".repeat(5_000);
        let capped = capped_summary(&one_line, 1_000).expect("over the cap");
        assert!(capped.chars().count() <= 1_000);
    }

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
        let none = vec![false; messages.len()];
        assert_eq!(cut_point(&messages, &none, 0, 10_000, 4), 4);
        assert_eq!(cut_point(&messages, &none, 0, 10_000, 1), 6);
        assert_eq!(cut_point(&messages, &none, 0, 10_000, 100), 0);
        // A tiny threshold keeps only the current exchange, never less.
        assert_eq!(cut_point(&messages, &none, 0, 2, 100), 6);
        // The system prompt, and what must stay before the tail, leave it less room.
        assert_eq!(cut_point(&messages, &none, 4_990, 10_000, 100), 6);
        let big = numbered(vec![
            user(&"the task in many words ".repeat(200)),
            answer("understood"),
            user("two"),
            answer("ok"),
            user("three"),
        ]);
        let pinned = [true, true, false, false, false];
        assert_eq!(cut_point(&big, &pinned, 0, 1_000, 100), 4);
        // What must stay inside the tail is counted once, as part of it (twice, it
        // would not fit in half of 3,000).
        assert_eq!(cut_point(&big, &pinned, 0, 3_000, 100), 0);
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
        let summary = StoredSummary {
            through_seq: 8,
            text: format!("new summary {}", history::PINNED_MARKER),
            kept_out: vec![],
        };
        apply_summary(&mut messages, &summary, &write_file_key);
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
    fn what_a_summary_was_not_written_from_stays_when_it_no_longer_has_to() {
        let unpinned = || {
            numbered(vec![
                user("the task"),
                answer("on it"),
                user("a pinned question"),
                answer("its answer"),
                user("chat"),
                answer("chat back"),
                user("now"),
            ])
        };
        // Written while message 3 was pinned: it and its answer were kept out.
        let summary = StoredSummary {
            through_seq: 6,
            text: "the chat".into(),
            kept_out: vec![3, 4],
        };
        // Then `/unpin`: they no longer have to stay, and no summary holds them.
        let mut messages = unpinned();
        apply_summary(&mut messages, &summary, &write_file_key);
        let texts: Vec<String> = messages.iter().map(|m| m.plain_text()).collect();
        assert!(texts.contains(&"a pinned question".to_owned()), "{texts:?}");
        assert!(texts.contains(&"its answer".to_owned()), "{texts:?}");
        assert!(!texts.contains(&"chat".to_owned()), "{texts:?}");
        // Without the record, they would have gone unsummarised.
        let mut messages = unpinned();
        apply_summary(
            &mut messages,
            &StoredSummary {
                kept_out: vec![],
                ..summary
            },
            &write_file_key,
        );
        let texts: Vec<String> = messages.iter().map(|m| m.plain_text()).collect();
        assert!(!texts.contains(&"its answer".to_owned()), "{texts:?}");
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
