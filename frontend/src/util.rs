//! Small browser helpers shared by the components.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// Milliseconds since the epoch, from the browser's clock.
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

pub fn millis(at: &DateTime<Utc>) -> f64 {
    at.timestamp_millis() as f64
}

/// Waits without blocking the page.
pub async fn sleep(ms: u32) {
    let promise = js_sys::Promise::new(&mut |resolve, _| {
        if let Some(window) = web_sys::window() {
            let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(
                &resolve,
                ms.min(i32::MAX as u32) as i32,
            );
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// A time of day (or date, when not today) in the reader's locale.
pub fn short_time(at: &DateTime<Utc>) -> String {
    let date = js_sys::Date::new(&JsValue::from_f64(millis(at)));
    let today = js_sys::Date::new_0();
    let same_day = date.to_date_string() == today.to_date_string();
    let text = if same_day {
        date.to_locale_time_string("default")
    } else {
        date.to_locale_date_string("default", &JsValue::UNDEFINED)
    };
    text.into()
}

/// A JSON value as a person reads it: strings bare, the rest as JSON.
pub fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        other => other.to_string(),
    }
}

pub fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// Moves keyboard focus to the element with `id`, if it exists.
pub fn focus_id(id: &str) -> bool {
    let Some(element) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
    else {
        return false;
    };
    match element.dyn_into::<web_sys::HtmlElement>() {
        Ok(element) => element.focus().is_ok(),
        Err(_) => false,
    }
}

/// The element that has focus, if any other than the page itself.
pub fn active_element() -> Option<web_sys::Element> {
    let document = web_sys::window()?.document()?;
    let active = document.active_element()?;
    let body = document.body()?;
    (active != *body.unchecked_ref::<web_sys::Element>()).then_some(active)
}

/// The conversation named in the address (`#/c/<id>`).
pub fn conversation_from_hash() -> Option<Uuid> {
    let hash = web_sys::window()?.location().hash().ok()?;
    let id = hash.strip_prefix("#/c/")?;
    Uuid::parse_str(id).ok()
}

pub fn set_hash_conversation(id: Option<Uuid>) {
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
