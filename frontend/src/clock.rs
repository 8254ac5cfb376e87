//! The browser's clock: now, waiting, and times shown in the reader's locale.

use chrono::{DateTime, Utc};
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

/// Milliseconds since the epoch, from the browser's clock.
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Milliseconds since the epoch of a moment, as the browser's `Date` takes them.
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
