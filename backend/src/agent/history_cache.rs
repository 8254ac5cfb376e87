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
        // Freed after the lock is let go: dropping a large history takes a while.
        let mut released = Vec::new();
        let mut entries = self.lock();
        if let Some(old) = entries.by_conversation.remove(&conversation_id) {
            entries.bytes -= old.held.bytes;
            released.push(old);
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
                released.push(evicted);
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
        drop(entries);
        drop(released);
    }

    /// Lets go of what is held of a deleted conversation, rather than keeping its
    /// messages until they are evicted. (Another server, or a step that read them just
    /// before, may still hold them until then; none is served: the read names the
    /// conversation, which is gone.)
    pub fn forget(&self, conversation_id: Uuid) {
        let mut entries = self.lock();
        let released = entries.by_conversation.remove(&conversation_id);
        if let Some(entry) = &released {
            entries.bytes -= entry.held.bytes;
        }
        drop(entries);
        drop(released);
    }

    /// Conversations held and their estimated bytes.
    pub fn size(&self) -> (usize, usize) {
        let entries = self.lock();
        (entries.by_conversation.len(), entries.bytes)
    }
}

/// About what a message takes in memory: each block's and each JSON value's own size
/// (a block is as large as its largest kind) and the strings they point to, walked
/// without writing them out. Counting text alone would let a message of many tiny
/// blocks take thirty times what it is counted at.
fn estimated_bytes(message: &Message) -> usize {
    const NODE: usize = size_of::<Value>();
    // A map entry: its key and value, and the map's own bookkeeping.
    const ENTRY: usize = size_of::<String>() + NODE + 16;
    fn value_bytes(value: &Value) -> usize {
        NODE + match value {
            Value::String(text) => text.len(),
            Value::Array(items) => items.iter().map(value_bytes).sum::<usize>(),
            Value::Object(map) => map
                .iter()
                .map(|(key, value)| ENTRY + key.len() + value_bytes(value))
                .sum::<usize>(),
            _ => 0,
        }
    }
    let blocks: usize = message
        .content
        .iter()
        .map(|block| {
            size_of::<ContentBlock>()
                + match block {
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
                                .map(|(key, value)| ENTRY + key.len() + value_bytes(value))
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
    size_of::<Arc<Message>>()
        + size_of::<Message>()
        + blocks
        + message.model.as_ref().map_or(0, String::len)
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
    fn a_forgotten_conversation_is_held_no_more_and_its_bytes_are_free() {
        let cache = HistoryCache::default();
        let (kept, deleted) = (Uuid::new_v4(), Uuid::new_v4());
        cache.put(kept, HeldHistory::new("alice", messages(3, "kept"), None));
        let (_, kept_bytes) = cache.size();
        cache.put(
            deleted,
            HeldHistory::new("alice", messages(3, "gone"), None),
        );
        cache.forget(deleted);
        assert!(cache.get("alice", deleted).is_none());
        assert!(cache.get("alice", kept).is_some());
        assert_eq!(cache.size(), (1, kept_bytes));
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
    fn a_message_of_many_tiny_blocks_is_counted_at_what_its_blocks_take() {
        let blocks = 40_000;
        let mut tiny = messages(1, "a");
        Arc::make_mut(&mut tiny[0]).content = vec![ContentBlock::Text { text: "a".into() }; blocks];
        let counted = HeldHistory::new("alice", tiny.clone(), None).bytes;
        assert!(
            counted >= blocks * size_of::<ContentBlock>(),
            "{counted} bytes counted for {blocks} blocks of {} bytes",
            size_of::<ContentBlock>()
        );
        let cache = HistoryCache::default();
        let conversation = Uuid::new_v4();
        // A conversation of a few such messages passes a quarter of the cache: not held.
        let mut flood = tiny;
        for seq in 2..=16 {
            let mut next = Message::clone(&flood[0]);
            next.seq = seq;
            next.id = Uuid::new_v4();
            flood.push(Arc::new(next));
        }
        cache.put(conversation, HeldHistory::new("alice", flood, None));
        assert!(cache.get("alice", conversation).is_none());
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
