//! Keyboard focus: moving it to an element and reading where it is.

use wasm_bindgen::JsCast;

/// Moves keyboard focus to the element with `id`, if it exists.
pub fn move_to(id: &str) -> bool {
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
pub fn active() -> Option<web_sys::Element> {
    let document = web_sys::window()?.document()?;
    let active = document.active_element()?;
    let body = document.body()?;
    (active != *body.unchecked_ref::<web_sys::Element>()).then_some(active)
}

/// Whether the user is busy where a newly shown card must not take the keyboard from
/// them: typing (a text entry holding text, the message box included), or working in
/// another card that still waits. Keys meant for that place would otherwise land in the
/// new card: the rest of a sentence in a form a tool asked for, an Enter that sends it.
/// The card itself (`card_id`) and the other card of the same call (`call`) do not count;
/// nor does an empty message box, where the focus stays after a message is sent.
pub fn busy_elsewhere(card_id: &str, call: &str) -> bool {
    let Some(active) = active() else {
        return false;
    };
    let card = active.closest(".input-card").ok().flatten();
    let own = card.as_ref().is_some_and(|card| {
        card.id() == card_id || card.get_attribute("data-tool-call-id").as_deref() == Some(call)
    });
    if own {
        return false;
    }
    let waiting_card =
        card.is_some_and(|card| card.get_attribute("data-status").as_deref() == Some("pending"));
    waiting_card || holds_typed_text(&active)
}

/// Whether the focus is in a text entry (the message box, most likely, right after a
/// message was sent from it).
pub fn in_text_entry() -> bool {
    active().is_some_and(|element| is_text_entry(&element))
}

fn is_text_entry(element: &web_sys::Element) -> bool {
    match element.tag_name().to_ascii_lowercase().as_str() {
        "textarea" => true,
        "input" => !matches!(
            element
                .get_attribute("type")
                .unwrap_or_default()
                .to_ascii_lowercase()
                .as_str(),
            "button" | "submit" | "reset" | "checkbox" | "radio"
        ),
        _ => false,
    }
}

/// A text entry with something typed in it.
fn holds_typed_text(element: &web_sys::Element) -> bool {
    is_text_entry(element)
        && js_sys::Reflect::get(element, &wasm_bindgen::JsValue::from_str("value"))
            .ok()
            .and_then(|value| value.as_string())
            .is_some_and(|value| !value.is_empty())
}
