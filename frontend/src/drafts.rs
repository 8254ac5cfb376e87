//! What the user has typed into a message box or a card and not sent, kept as it is
//! typed (in this tab's `sessionStorage`, per user and conversation or card), so a
//! reload, a visit to another conversation or a session that runs out loses none of it:
//! the message box or card shows it again. Sending it, signing out on purpose, or
//! another user signing in, forgets it; closing the tab does too.

const PREFIX: &str = "toolgate.draft.";
/// Beside each draft, how it was sent ([`crate::resend`]).
const SENDING_PREFIX: &str = "toolgate.sending.";

/// This tab's `sessionStorage`, where drafts and what is kept beside them live.
pub(crate) fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.session_storage().ok().flatten()
}

/// Where the draft of `user`'s message box in `conversation` (`None`: a new one) is kept.
pub fn key(user: &str, conversation: Option<uuid::Uuid>) -> String {
    match conversation {
        Some(id) => format!("{PREFIX}{user}.{id}"),
        None => format!("{PREFIX}{user}.new"),
    }
}

/// Where what `user` typed into the card of request `request` is kept (the values of
/// its fields that are not secrets, as JSON).
pub fn card_key(user: &str, request: uuid::Uuid) -> String {
    format!("{PREFIX}{user}.card-{}", request.simple())
}

/// The draft kept under `key` (empty when none is).
pub fn kept(key: &str) -> String {
    storage()
        .and_then(|storage| storage.get_item(key).ok().flatten())
        .unwrap_or_default()
}

/// Keeps `text` under `key`; empty text keeps nothing. A full or refused storage keeps
/// nothing either, rather than an older draft.
pub fn save(key: &str, text: &str) {
    let Some(storage) = storage() else {
        return;
    };
    if text.is_empty() || storage.set_item(key, text).is_err() {
        let _ = storage.remove_item(key);
    }
}

/// Forgets the draft under `key` and what is kept beside it: its conversation is gone.
pub fn forget(key: &str) {
    if let Some(storage) = storage() {
        let _ = storage.remove_item(key);
        let _ = storage.remove_item(&beside(key));
    }
}

/// Where what is kept about sending the draft under `draft` is kept ([`crate::resend`]):
/// beside it, with the same owner.
pub fn beside(draft: &str) -> String {
    format!(
        "{SENDING_PREFIX}{}",
        draft.strip_prefix(PREFIX).unwrap_or(draft)
    )
}

/// Whose a kept entry is: `<prefix><user>.<conversation or "new">`, where a user id may
/// hold dots and the rest not; `None` for what is not a draft or kept beside one.
fn owner_of(key: &str) -> Option<&str> {
    key.strip_prefix(PREFIX)
        .or_else(|| key.strip_prefix(SENDING_PREFIX))
        .and_then(|rest| rest.rsplit_once('.'))
        .map(|(owner, _)| owner)
}

/// Forgets every draft (and what is kept beside it) but `user`'s (every one when `None`).
pub fn forget_all_but(user: Option<&str>) {
    let Some(storage) = storage() else {
        return;
    };
    let count = storage.length().unwrap_or(0);
    let keys: Vec<String> = (0..count)
        .filter_map(|i| storage.key(i).ok().flatten())
        .filter(|key| owner_of(key).is_some_and(|owner| Some(owner) != user))
        .collect();
    for key in keys {
        let _ = storage.remove_item(&key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_beside_a_draft_has_the_drafts_owner() {
        let draft = key("alice.example", None);
        assert_eq!(beside(&draft), "toolgate.sending.alice.example.new");
        assert_eq!(owner_of(&draft), Some("alice.example"));
        assert_eq!(owner_of(&beside(&draft)), Some("alice.example"));
        let id = uuid::Uuid::from_u128(7);
        assert_eq!(owner_of(&beside(&key("bob", Some(id)))), Some("bob"));
        assert_eq!(
            owner_of(&card_key("carol.example", id)),
            Some("carol.example")
        );
        assert_eq!(owner_of("toolgate.session"), None);
    }
}
