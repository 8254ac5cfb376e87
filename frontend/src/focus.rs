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
