//! The messages of conversations this server has recently run, held so that a step's
//! read need not send them again: a message's content never changes once written, and
//! at 1,000 messages writing their contents out was half of what the read cost.
//!
//! The database stays the authority. A step names what it holds (the conversation and
//! its last sequence number); the read answers the newer messages whole and, of the
//! held ones, which are pinned now and the last one's id (migration
//! `step_inputs_known_history` says why that is enough). Held messages are used only
//! under the user who read them and when that id matches; on any difference the step
//! reads again in full. Entries are bounded in number and in size, least recently used
//! first out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use protocol::chat::{ContentBlock, Message};
use serde_json::Value;
use uuid::Uuid;

/// Conversations held at most.
const MAX_CONVERSATIONS: usize = 512;
/// Bytes of message content held at most (estimated), all conversations together.
const MAX_BYTES: usize = 64 << 20;

/// What is held of one conversation: its messages up to `through_seq`, in order.
#[derive(Debug)]
pub struct HeldHistory {
    pub user_id: String,
    pub through_seq: i32,
    pub messages: Vec<Arc<Message>>,
    bytes: usize,
}

impl HeldHistory {
    /// `messages`, all of the conversation up to the newest one's sequence number;
    /// `known` is what was held of them before (its size is not estimated again).
    pub fn new(user_id: &str, messages: Vec<Arc<Message>>, known: Option<&HeldHistory>) -> Self {
        let (known_bytes, known_through) =
            known.map_or((0, 0), |held| (held.bytes, held.through_seq));
        let newer: usize = messages
            .iter()
            .filter(|message| message.seq > known_through)
            .map(|message| estimated_bytes(message))
            .sum();
        HeldHistory {
            user_id: user_id.to_owned(),
            through_seq: messages.last().map_or(0, |message| message.seq),
            bytes: known_bytes + newer,
            messages,
        }
    }
}

impl HeldHistory {
    /// The whole history: the held messages, pinned as `pinned` (the sequence numbers
    /// pinned now, in order) says, then `newer`.
    pub fn followed_by(&self, pinned: &[i32], newer: Vec<Arc<Message>>) -> Vec<Arc<Message>> {
        let mut history = Vec::with_capacity(self.messages.len() + newer.len());
        history.extend(self.messages.iter().map(|message| {
            let pinned_now = pinned.binary_search(&message.seq).is_ok();
            if message.pinned == pinned_now {
                message.clone()
            } else {
                Arc::new(Message {
                    pinned: pinned_now,
                    ..Message::clone(message)
                })
            }
        }));
        history.extend(newer);
        history
    }

    /// The id of the last held message.
    pub fn last_id(&self) -> Option<Uuid> {
        self.messages.last().map(|message| message.id)
    }
}

struct Entry {
    held: Arc<HeldHistory>,
    last_used: u64,
}

#[derive(Default)]
struct Entries {
    by_conversation: HashMap<Uuid, Entry>,
    bytes: usize,
    clock: u64,
}

/// The server's held conversations (see the module's documentation).
#[derive(Default)]
pub struct HistoryCache {
    entries: Mutex<Entries>,
}

impl HistoryCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// What is held of `conversation_id` for `user_id`; nothing for another user.
    pub fn get(&self, user_id: &str, conversation_id: Uuid) -> Option<Arc<HeldHistory>> {
        let mut entries = self.lock();
        entries.clock += 1;
        let now = entries.clock;
        let entry = entries.by_conversation.get_mut(&conversation_id)?;
        if entry.held.user_id != user_id {
            return None;
        }
        entry.last_used = now;
        Some(entry.held.clone())
    }

    /// Holds `held` for `conversation_id` in place of what was held; a conversation
    /// larger than a quarter of the whole is not held.
    pub fn put(&self, conversation_id: Uuid, held: HeldHistory) {
        let mut entries = self.lock();
        if let Some(old) = entries.by_conversation.remove(&conversation_id) {
            entries.bytes -= old.held.bytes;
        }
        if held.bytes > MAX_BYTES / 4 {
            return;
        }
        while entries.by_conversation.len() >= MAX_CONVERSATIONS
            || entries.bytes + held.bytes > MAX_BYTES
        {
            let Some(oldest) = entries
                .by_conversation
                .iter()
                .min_by_key(|(_, entry)| entry.last_used)
                .map(|(id, _)| *id)
            else {
                break;
            };
            if let Some(evicted) = entries.by_conversation.remove(&oldest) {
                entries.bytes -= evicted.held.bytes;
            }
        }
        entries.clock += 1;
        let last_used = entries.clock;
        entries.bytes += held.bytes;
        entries.by_conversation.insert(
            conversation_id,
            Entry {
                held: Arc::new(held),
                last_used,
            },
        );
    }

    /// Conversations held and their estimated bytes.
    pub fn size(&self) -> (usize, usize) {
        let entries = self.lock();
        (entries.by_conversation.len(), entries.bytes)
    }
}

/// About what a message takes in memory: its strings and JSON values, walked without
/// writing them out.
fn estimated_bytes(message: &Message) -> usize {
    fn value_bytes(value: &Value) -> usize {
        match value {
            Value::String(text) => 24 + text.len(),
            Value::Array(items) => 24 + items.iter().map(value_bytes).sum::<usize>(),
            Value::Object(map) => {
                24 + map
                    .iter()
                    .map(|(key, value)| key.len() + value_bytes(value))
                    .sum::<usize>()
            }
            _ => 16,
        }
    }
    let blocks: usize = message
        .content
        .iter()
        .map(|block| {
            32 + match block {
                ContentBlock::Text { text } | ContentBlock::ImageStub { text } => text.len(),
                ContentBlock::Image { url } => url.len(),
                ContentBlock::ToolCall {
                    id,
                    name,
                    arguments,
                } => {
                    id.len()
                        + name.len()
                        + arguments
                            .iter()
                            .map(|(key, value)| key.len() + value_bytes(value))
                            .sum::<usize>()
                }
                ContentBlock::ToolResult {
                    tool_call_id,
                    name,
                    outcome,
                } => {
                    // A request the call waits on is a few small strings.
                    let requests = usize::from(outcome.user_input_request.is_some())
                        + usize::from(outcome.approval_request.is_some());
                    tool_call_id.len()
                        + name.len()
                        + outcome.result.as_ref().map_or(0, value_bytes)
                        + outcome.error.as_ref().map_or(0, String::len)
                        + 1024 * requests
                }
            }
        })
        .sum();
    128 + blocks + message.model.as_ref().map_or(0, String::len)
}

#[cfg(test)]
mod tests {
    use chrono::Utc;
    use protocol::chat::Role;

    use super::*;

    fn messages(count: i32, words: &str) -> Vec<Arc<Message>> {
        (1..=count)
            .map(|seq| {
                Arc::new(Message {
                    id: Uuid::new_v4(),
                    seq,
                    role: Role::User,
                    content: vec![ContentBlock::Text { text: words.into() }],
                    model: None,
                    run_id: None,
                    pinned: false,
                    created_at: Utc::now(),
                })
            })
            .collect()
    }

    #[test]
    fn the_held_history_takes_the_pinned_flags_as_read_and_the_newer_messages_after_it() {
        let mut all = messages(5, "hi");
        Arc::make_mut(&mut all[1]).pinned = true;
        let newer = all.split_off(3);
        let held = HeldHistory::new("alice", all.clone(), None);
        let history = held.followed_by(&[1, 3], newer.clone());
        assert_eq!(
            history.iter().map(|m| m.id).collect::<Vec<_>>(),
            all.iter().chain(&newer).map(|m| m.id).collect::<Vec<_>>()
        );
        assert_eq!(
            history.iter().map(|m| m.pinned).collect::<Vec<_>>(),
            [true, false, true, false, false],
            "pinned as read now, not as held"
        );
        assert_eq!(held.last_id(), Some(all[2].id));
    }

    #[test]
    fn a_conversation_is_held_for_its_user_alone() {
        let cache = HistoryCache::default();
        let conversation = Uuid::new_v4();
        cache.put(
            conversation,
            HeldHistory::new("alice", messages(3, "hi"), None),
        );
        assert_eq!(
            cache.get("alice", conversation).map(|h| h.through_seq),
            Some(3)
        );
        assert!(cache.get("bob", conversation).is_none());
        assert!(cache.get("alice", Uuid::new_v4()).is_none());
    }

    #[test]
    fn the_least_recently_used_conversations_go_first_when_full() {
        let cache = HistoryCache::default();
        let conversations: Vec<Uuid> = (0..MAX_CONVERSATIONS).map(|_| Uuid::new_v4()).collect();
        for conversation in &conversations {
            cache.put(
                *conversation,
                HeldHistory::new("alice", messages(1, "hi"), None),
            );
        }
        // The first is used again; the second is now the least recently used.
        assert!(cache.get("alice", conversations[0]).is_some());
        cache.put(
            Uuid::new_v4(),
            HeldHistory::new("alice", messages(1, "hi"), None),
        );
        assert_eq!(cache.size().0, MAX_CONVERSATIONS);
        assert!(cache.get("alice", conversations[0]).is_some());
        assert!(cache.get("alice", conversations[1]).is_none());
    }

    #[test]
    fn held_bytes_stay_bounded_and_a_huge_conversation_is_not_held() {
        let cache = HistoryCache::default();
        let long = "x".repeat(1 << 20);
        // Each conversation holds about 8 MiB: at most eight fit in 64 MiB.
        for _ in 0..20 {
            cache.put(
                Uuid::new_v4(),
                HeldHistory::new("alice", messages(8, &long), None),
            );
            assert!(cache.size().1 <= MAX_BYTES);
        }
        assert!(cache.size().0 <= 8);
        let huge = Uuid::new_v4();
        cache.put(huge, HeldHistory::new("alice", messages(20, &long), None));
        assert!(cache.get("alice", huge).is_none());
        assert!(cache.size().1 <= MAX_BYTES);
    }
}
