//! Token counts from a real tokenizer (cl100k_base, loaded once).

use protocol::chat::ContentBlock;

use super::model::{ChatMessage, ModelRequest};

/// Rough cost of an image in a chat request, as providers bill a small one.
const IMAGE_TOKENS: usize = 85;
/// Per-message framing (role, separators) that chat formats add.
const MESSAGE_OVERHEAD: usize = 4;

pub fn count_text(text: &str) -> usize {
    tiktoken_rs::cl100k_base_singleton()
        .encode_with_special_tokens(text)
        .len()
}

pub fn count_message(message: &ChatMessage) -> usize {
    MESSAGE_OVERHEAD
        + message
            .content
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

pub fn count_request(request: &ModelRequest) -> usize {
    request.system.iter().map(|s| count_text(s)).sum::<usize>()
        + request.messages.iter().map(count_message).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_real_tokens() {
        assert_eq!(count_text("hello world"), 2);
        assert!(count_text(&"word ".repeat(100)) >= 100);
    }
}
