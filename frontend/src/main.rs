//! toolgate's web chat, rendered in the browser.

mod address;
mod api;
mod app;
mod approval_card;
mod auth;
mod cards;
mod chat;
mod clock;
mod conversations;
mod deferred;
mod drafts;
mod focus;
mod input_card;
mod local_time;
mod ordered;
mod resend;
mod saved_values;
mod state;
mod stream;
mod value_text;
mod wire;

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(app::App);
}
