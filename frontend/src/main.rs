//! toolgate's web chat, rendered in the browser.

use leptos::prelude::*;

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}

#[component]
fn App() -> impl IntoView {
    view! {
        <main class="app" data-mounted="true">
            <h1>"toolgate"</h1>
            <p>"The web chat is being built. The API is served under /api (see /api/docs)."</p>
        </main>
    }
}
