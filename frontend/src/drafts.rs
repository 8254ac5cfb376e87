//! What the user has typed into a message box and not sent, kept as it is typed (in
//! this tab's `sessionStorage`, per user and conversation), so a reload, a visit to
//! another conversation or a session that runs out loses none of it: the message box
//! shows it again. Sending it, signing out on purpose, or another user signing in,
//! forgets it; closing the tab does too.

const PREFIX: &str = "toolgate.draft.";

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.session_storage().ok().flatten()
}

/// Where the draft of `user`'s message box in `conversation` (`None`: a new one) is kept.
pub fn key(user: &str, conversation: Option<uuid::Uuid>) -> String {
    match conversation {
        Some(id) => format!("{PREFIX}{user}.{id}"),
        None => format!("{PREFIX}{user}.new"),
    }
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

/// Forgets every draft but `user`'s (every draft when `None`).
pub fn forget_all_but(user: Option<&str>) {
    let Some(storage) = storage() else {
        return;
    };
    let count = storage.length().unwrap_or(0);
    let keys: Vec<String> = (0..count)
        .filter_map(|i| storage.key(i).ok().flatten())
        .filter(|key| {
            // `<user>.<conversation or "new">`: a user id may hold dots, the rest not.
            let owner = key
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.rsplit_once('.'))
                .map(|(owner, _)| owner);
            owner.is_some() && owner != user
        })
        .collect();
    for key in keys {
        let _ = storage.remove_item(&key);
    }
}
