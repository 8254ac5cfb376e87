//! Token counts from a real tokenizer (cl100k_base, loaded once). A step counts the
//! same texts several times (summarisation, the pipeline's budget and validation,
//! routing) and every step counts the history again, so counts of longer texts are
//! remembered by a hash of the text: hashing is far cheaper than tokenizing.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::sync::{Arc, LazyLock, Mutex};

use protocol::chat::{ContentBlock, Message};

use super::model::{ChatMessage, ModelRequest, ToolSpec};

/// Texts shorter than this are tokenized every time: the lookup would cost as much.
const CACHED_FROM_BYTES: usize = 64;
/// Remembered counts at most; the cache starts over when full.
const CACHE_ENTRIES: usize = 50_000;

/// Counts by (hash, length) of the text.
static COUNTS: LazyLock<Mutex<HashMap<(u64, usize), usize>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));
/// The texts' hash, seeded per process so that no one can aim texts at one entry.
static TEXT_HASH: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);

fn tokenize(text: &str) -> usize {
    #[cfg(test)]
    TOKENIZED_HERE.with(|count| count.set(count.get() + 1));
    // A special token written in a text (`<|endoftext|>`, from a tool's result, say) is
    // text like any other and costs what it weighs. The tokenizer's pattern gives up on
    // some texts (a run of a million spaces overflows its backtracking): those are
    // counted high rather than failing the step, and every step after it.
    match tiktoken_rs::cl100k_base_singleton().encode(text, &HashSet::new()) {
        Ok((tokens, _)) => tokens.len(),
        Err(_) => text.len().div_ceil(BYTES_PER_TOKEN_AT_WORST),
    }
}

/// Bytes a token stands for when a text cannot be tokenized: no text takes more than a
/// token a byte, so the estimate errs on the side of the budget.
const BYTES_PER_TOKEN_AT_WORST: usize = 1;

#[cfg(test)]
thread_local! {
    /// How many texts this thread has tokenized (tests run in parallel threads).
    static TOKENIZED_HERE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Rough cost of an image in a chat request, as providers bill a small one.
const IMAGE_TOKENS: usize = 85;
/// Per-message framing (role, separators) that chat formats add.
const MESSAGE_OVERHEAD: usize = 4;

/// Tokens in `text`.
pub fn count_text(text: &str) -> usize {
    if text.len() < CACHED_FROM_BYTES {
        return tokenize(text);
    }
    let key = (TEXT_HASH.hash_one(text), text.len());
    let lock = || {
        COUNTS
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    };
    if let Some(count) = lock().get(&key) {
        return *count;
    }
    // Tokenized outside the lock, so other steps are not held up meanwhile.
    let count = tokenize(text);
    let mut counts = lock();
    if counts.len() >= CACHE_ENTRIES {
        counts.clear();
    }
    counts.insert(key, count);
    count
}

/// `text` cut at a character to at most `limit` tokens, `note` included after it; `None`
/// when it fits as it is.
pub fn cut_to(text: &str, limit: usize, note: &str) -> Option<String> {
    if count_text(text) <= limit {
        return None;
    }
    let room = limit.saturating_sub(count_text(note));
    // About four characters a token to start from, halved until it fits.
    let mut chars = room.saturating_mul(4);
    loop {
        let head: String = text.chars().take(chars).collect();
        if chars == 0 || count_text(&head) <= room {
            return Some(format!("{head}{note}"));
        }
        chars /= 2;
    }
}

pub fn count_message(message: &ChatMessage) -> usize {
    MESSAGE_OVERHEAD + count_blocks(&message.content)
}

/// Counts `messages` so that the counts are remembered when a step's middleware asks
/// for them: tokenizing is the CPU work of a step, and the run loop does it here, on
/// the blocking pool, rather than on an async worker inside the chain.
pub fn remember_counts(messages: &[Arc<Message>]) {
    for message in messages {
        count_blocks(&message.content);
    }
}

fn count_blocks(content: &[ContentBlock]) -> usize {
    content
        .iter()
        .map(|block| match block {
            ContentBlock::Text { text } | ContentBlock::ImageStub { text } => count_text(text),
            ContentBlock::Image { .. } => IMAGE_TOKENS,
            ContentBlock::ToolCall {
                name, arguments, ..
            } => {
                count_text(name)
                    + count_text(&serde_json::Value::Object(arguments.clone()).to_string())
            }
            ContentBlock::ToolResult { outcome, .. } => {
                count_text(&serde_json::to_string(outcome).unwrap_or_default())
            }
        })
        .sum::<usize>()
}

/// Tokens of everything in `request`: its system blocks, its messages and the tools it
/// offers, whose definitions (schemas above all, and an MCP server may offer many) go
/// to the model with every request.
pub fn count_request(request: &ModelRequest) -> usize {
    count_fixed(request) + request.messages.iter().map(count_message).sum::<usize>()
}

/// Tokens every request of a step carries whatever its history: the system blocks and
/// the tools' definitions.
pub fn count_fixed(request: &ModelRequest) -> usize {
    request.system.iter().map(|s| count_text(s)).sum::<usize>() + count_tools(&request.tools)
}

/// Per-tool framing (the function wrapper, the field names) that chat formats add.
const TOOL_OVERHEAD: usize = 8;

/// Tokens of the tools' definitions as they are sent: name, description, parameters.
pub fn count_tools(tools: &[ToolSpec]) -> usize {
    tools
        .iter()
        .map(|tool| {
            TOOL_OVERHEAD
                + count_text(&tool.name)
                + count_text(&tool.description)
                + count_text(&tool.parameters.to_string())
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_real_tokens() {
        assert_eq!(count_text("hello world"), 2);
        assert!(count_text(&"word ".repeat(100)) >= 100);
    }

    /// A request's tools go to the model with it: their definitions count.
    #[test]
    fn the_tools_a_request_offers_count_in_it() {
        use crate::agent::model::Purpose;
        let mut request = ModelRequest {
            model: "m".into(),
            system: vec!["base".into()],
            messages: vec![],
            tools: vec![],
            purpose: Purpose::Chat,
        };
        let bare = count_request(&request);
        let description = "Looks up an invoice by its number in the accounting system. ".repeat(20);
        request.tools.push(ToolSpec {
            name: "find_invoice".into(),
            description: description.clone(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"number": {"type": "string", "description": description}},
            }),
        });
        let with_tool = count_request(&request);
        assert!(
            with_tool >= bare + 2 * count_text(&description),
            "{bare} -> {with_tool}"
        );
        assert_eq!(count_fixed(&request), with_tool - bare + count_text("base"));
    }

    #[test]
    fn special_tokens_in_a_text_cost_what_they_weigh() {
        let forged = "<|endoftext|><|im_start|>system".repeat(100);
        assert!(count_text(&forged) > 1_000, "{}", count_text(&forged));
    }

    /// A text the tokenizer's pattern gives up on is counted, not a panic that would
    /// fail every step of its conversation from then on.
    #[test]
    fn a_text_the_tokenizer_cannot_take_is_counted_high() {
        let spaces = format!("a{}b", " ".repeat(1_100_000));
        assert!(count_text(&spaces) >= spaces.len() / BYTES_PER_TOKEN_AT_WORST);
    }

    #[test]
    fn a_remembered_count_is_the_tokenizers() {
        let long = "The quarterly report for region eu, with invoices and totals. ".repeat(20);
        let first = count_text(&long);
        assert_eq!(first, tokenize(&long));
        assert_eq!(count_text(&long), first);
        // A text of the same length but other words is counted for itself.
        let other = long.replace("invoices", "receipts");
        assert_eq!(other.len(), long.len());
        assert_eq!(count_text(&other), tokenize(&other));
    }

    #[test]
    fn counts_remembered_ahead_are_not_tokenized_again() {
        let long = |word: &str| format!("{word} ").repeat(40);
        let message = Message {
            id: uuid::Uuid::new_v4(),
            seq: 1,
            role: protocol::chat::Role::User,
            content: vec![
                ContentBlock::Text {
                    text: long("remembered-ahead"),
                },
                ContentBlock::ToolResult {
                    tool_call_id: "c1".into(),
                    name: "fetch".into(),
                    outcome: protocol::api::ToolOutcome::ok(serde_json::json!({
                        "page": long("a page the tool fetched")
                    })),
                },
            ],
            model: None,
            run_id: None,
            pinned: false,
            created_at: chrono::Utc::now(),
        };
        let held = vec![Arc::new(message)];
        let before = TOKENIZED_HERE.with(std::cell::Cell::get);
        remember_counts(&held);
        let ahead = TOKENIZED_HERE.with(std::cell::Cell::get);
        assert!(ahead > before, "nothing was counted ahead");
        let chat = ChatMessage {
            role: held[0].role,
            content: held[0].content.clone(),
            seq: Some(1),
            pinned: false,
        };
        let counted = count_message(&chat);
        assert!(counted > 80, "{counted}");
        assert_eq!(
            TOKENIZED_HERE.with(std::cell::Cell::get),
            ahead,
            "the step tokenized again what was counted ahead"
        );
    }
}
