//! The page's address: which conversation is open (`#/c/<id>`).

use uuid::Uuid;
use wasm_bindgen::JsValue;

/// The conversation named in the address (`#/c/<id>`).
pub fn conversation() -> Option<Uuid> {
    let hash = web_sys::window()?.location().hash().ok()?;
    let id = hash.strip_prefix("#/c/")?;
    Uuid::parse_str(id).ok()
}

/// Names `id` in the address (or no conversation), without reloading the page.
pub fn set_conversation(id: Option<Uuid>) {
    let Some(window) = web_sys::window() else {
        return;
    };
    let wanted = id.map(|id| format!("#/c/{id}")).unwrap_or_default();
    let location = window.location();
    if location.hash().unwrap_or_default() != wanted {
        if wanted.is_empty() {
            // Drop the fragment without adding a history entry or scrolling.
            if let Ok(history) = window.history() {
                let path = location.pathname().unwrap_or_else(|_| "/".into());
                let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(&path));
            }
        } else {
            let _ = location.set_hash(&wanted);
        }
    }
}
