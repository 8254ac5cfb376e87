//! toolgate's web chat, rendered in the browser.

mod api;
mod app;
mod approval_card;
mod auth;
mod chat;
mod conversations;
mod input_card;
mod local_time;
mod saved_values;
mod state;
mod stream;
mod util;
mod wire;

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}
