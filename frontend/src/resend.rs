//! How a message was sent, kept beside its draft until its message box shows another
//! text: the idempotency key it went under and, from a new-conversation box, the
//! conversation made for it. Sent again (its answer was lost on the way, or the user
//! left while it was sent, came back to the box still showing it and pressed Send), it
//! goes under the same key into the same conversation, and the server posts it once.
//!
//! The text itself is not kept here a second time, only its length and a fingerprint
//! of it: enough to tell an edited text, which is another message, from the same one.

use uuid::Uuid;

use crate::drafts;

/// How the text of one message box is being sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sending {
    /// The idempotency key the message goes under.
    pub key: Uuid,
    /// The conversation made for it by a new-conversation box, once made.
    pub conversation: Option<Uuid>,
}

/// How to send `text` from the box whose draft is kept under `draft`: as it was last
/// sent while that was this same text (that send may have been posted), else under a
/// fresh key, kept until the box shows another text ([`shown`]). `None` where the
/// browser has no random numbers to make a key.
pub fn for_text(draft: &str, text: &str) -> Option<Sending> {
    let at = drafts::beside(draft);
    let storage = drafts::storage();
    if let Some(sending) = storage
        .as_ref()
        .and_then(|storage| storage.get_item(&at).ok().flatten())
        .and_then(|kept| kept_for(&kept, text))
    {
        return Some(sending);
    }
    let sending = Sending {
        key: fresh_key()?,
        conversation: None,
    };
    keep(draft, sending, text);
    Some(sending)
}

/// Keeps how `text` is being sent from the box whose draft is kept under `draft` (with
/// the conversation made for it, once made). A full or refused storage keeps nothing.
pub fn keep(draft: &str, sending: Sending, text: &str) {
    let Some(storage) = drafts::storage() else {
        return;
    };
    let at = drafts::beside(draft);
    if storage.set_item(&at, &entry(sending, text)).is_err() {
        let _ = storage.remove_item(&at);
    }
}

/// The box whose draft is kept under `draft` shows `text`: what was kept for another
/// text goes, so the same words sent on purpose later (a second "yes") are a new
/// message. Not when a send ends: a box opened while it was under way still shows its
/// text, and Send there must not post it twice.
pub fn shown(draft: &str, text: &str) {
    forget_if(draft, |kept| kept_for(kept, text.trim()).is_none());
}

/// The conversation `id` is deleted: a new-conversation box whose send was made it (its
/// draft kept under `draft`) makes another the next time, rather than posting into it.
pub fn conversation_deleted(draft: &str, id: Uuid) {
    forget_if(draft, |kept| conversation_of(kept) == Some(id));
}

/// Forgets what is kept beside the draft under `draft` when `stale` says it should go.
fn forget_if(draft: &str, stale: impl FnOnce(&str) -> bool) {
    let Some(storage) = drafts::storage() else {
        return;
    };
    let at = drafts::beside(draft);
    if let Ok(Some(kept)) = storage.get_item(&at)
        && stale(&kept)
    {
        let _ = storage.remove_item(&at);
    }
}

/// The conversation named in a kept entry, if any.
fn conversation_of(kept: &str) -> Option<Uuid> {
    Uuid::parse_str(kept.split(' ').nth(1)?).ok()
}

/// As kept: the key, the conversation (`-` for none yet) and the text's fingerprint.
fn entry(sending: Sending, text: &str) -> String {
    let conversation = sending
        .conversation
        .map_or_else(|| "-".to_owned(), |id| id.to_string());
    format!("{} {conversation} {}", sending.key, fingerprint(text))
}

/// What was kept, when it was kept for `text`.
fn kept_for(kept: &str, text: &str) -> Option<Sending> {
    let mut parts = kept.split(' ');
    let (key, conversation, print) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || print != fingerprint(text) {
        return None;
    }
    Some(Sending {
        key: Uuid::parse_str(key).ok()?,
        conversation: match conversation {
            "-" => None,
            id => Some(Uuid::parse_str(id).ok()?),
        },
    })
}

/// The text's length and its 64-bit FNV-1a hash: tells one text from another that a
/// user edited, which is all it is for (nothing here is secret from this tab).
fn fingerprint(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{}:{hash:016x}", text.len())
}

/// A random (version 4) UUID from the browser's `crypto.getRandomValues`, which, unlike
/// `crypto.randomUUID`, pages served over plain http have too.
fn fresh_key() -> Option<Uuid> {
    let crypto = web_sys::window()?.crypto().ok()?;
    let mut bytes = [0u8; 16];
    crypto.get_random_values_with_u8_array(&mut bytes).ok()?;
    Some(uuid::Builder::from_random_bytes(bytes).into_uuid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_is_kept_for_the_text_it_was_sent_with_only() {
        let sending = Sending {
            key: Uuid::from_u128(0x1234),
            conversation: None,
        };
        let kept = entry(sending, "hello\nworld");
        assert_eq!(kept_for(&kept, "hello\nworld"), Some(sending));
        // An edited text is another message: it goes under a fresh key.
        assert_eq!(kept_for(&kept, "hello"), None);
        assert_eq!(kept_for(&kept, "hello\nworld!"), None);
        assert_eq!(kept_for(&kept, "hello\nworle"), None);
        assert!(!kept.contains("hello"), "{kept}");
        let made = Sending {
            conversation: Some(Uuid::from_u128(0x99)),
            ..sending
        };
        assert_eq!(kept_for(&entry(made, "hi"), "hi"), Some(made));
        assert_eq!(conversation_of(&entry(made, "hi")), made.conversation);
        assert_eq!(conversation_of(&entry(sending, "hi")), None);
    }

    #[test]
    fn a_damaged_entry_is_no_send() {
        let print = fingerprint("hello");
        for kept in [
            String::new(),
            format!("not-a-key - {print}"),
            format!("{} nope {print}", Uuid::from_u128(1)),
            format!("{} - {print} extra", Uuid::from_u128(1)),
        ] {
            assert_eq!(kept_for(&kept, "hello"), None, "{kept}");
        }
    }
}
