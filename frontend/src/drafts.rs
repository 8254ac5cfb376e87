//! What the user typed into the message box and has not sent, kept in this tab's
//! `sessionStorage` per user and conversation: a token that runs out signs the user out
//! and takes the message box away, and signing in again brings the text back. Signing
//! out on purpose forgets every draft.

const PREFIX: &str = "toolgate.draft.";

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.session_storage().ok().flatten()
}

/// Where the draft of `user`'s message box in `conversation` (`None`: a new one) lives.
pub fn key(user: &str, conversation: Option<uuid::Uuid>) -> String {
    match conversation {
        Some(id) => format!("{PREFIX}{user}.{id}"),
        None => format!("{PREFIX}{user}.new"),
    }
}

pub fn load(key: &str) -> String {
    storage()
        .and_then(|s| s.get_item(key).ok().flatten())
        .unwrap_or_default()
}

/// Keeps `text` under `key`; empty text forgets it. A full or refused storage keeps
/// nothing, and the message box works as before.
pub fn save(key: &str, text: &str) {
    if let Some(storage) = storage() {
        let _ = if text.is_empty() {
            storage.remove_item(key)
        } else {
            storage.set_item(key, text)
        };
    }
}

/// Forgets every draft of this tab.
pub fn forget_all() {
    let Some(storage) = storage() else {
        return;
    };
    let count = storage.length().unwrap_or(0);
    let keys: Vec<String> = (0..count)
        .filter_map(|i| storage.key(i).ok().flatten())
        .filter(|key| key.starts_with(PREFIX))
        .collect();
    for key in keys {
        let _ = storage.remove_item(&key);
    }
}
