//! Parts of the web chat whose code the page fetches when it first shows them.
//!
//! The input and approval cards (with the field checks they share with the server) and
//! the list of remembered values are the largest part of the web chat that a visit may
//! never need. Their builders are split points (`wasm_split`, module `cards`):
//! the build moves what only they reach into a WebAssembly module of its own, which the
//! browser fetches the first time one of them runs. The split points are
//! `cards::card_view` and `saved_values::saved_values_list`.
//!
//! [`Deferred`] shows such a part: a line while its module is fetched, then the part; or,
//! when the module cannot be fetched, a notice with a way to try again, and another try
//! by itself when the browser is back online or the user retries the app.

use std::future::Future;

use leptos::prelude::*;

use crate::state::AppState;

/// A split-off module could not be fetched: the network is gone, or the server was
/// updated since this page loaded and no longer has its module.
pub struct Unavailable;

impl From<leptos::wasm_split::SplitLoaderError> for Unavailable {
    fn from(_: leptos::wasm_split::SplitLoaderError) -> Self {
        Unavailable
    }
}

/// Shows what `load` builds once its module is in. `what` names it in the words shown
/// meanwhile ("the card").
#[component]
pub fn Deferred<L, F>(load: L, what: &'static str) -> impl IntoView
where
    L: Fn() -> F + Copy + Send + Sync + 'static,
    F: Future<Output = Result<AnyView, Unavailable>> + Send + 'static,
{
    let app = expect_context::<AppState>();
    // Bumped to try again, and only after a failure: a part that is shown is never
    // built twice, which would lose what the user typed into it.
    let attempt = RwSignal::new(0u32);
    let failed = RwSignal::new(false);
    Effect::new(move |_| {
        app.reload.track();
        if app.online.get() && failed.get_untracked() {
            attempt.update(|n| *n += 1);
        }
    });
    let part = move || {
        attempt.track();
        Suspend::new(async move {
            match load().await {
                Ok(view) => {
                    failed.set(false);
                    view
                }
                Err(Unavailable) => {
                    failed.set(true);
                    view! {
                        <div class="notice notice-error" role="alert" data-testid="deferred-unavailable">
                            <span>
                                {format!(
                                    "Could not load {what}. Check your connection, or reload the page if the server was updated.",
                                )}
                            </span>
                            <button
                                type="button"
                                data-testid="deferred-retry"
                                on:click=move |_| attempt.update(|n| *n += 1)
                            >
                                "Try again"
                            </button>
                        </div>
                    }
                        .into_any()
                }
            }
        })
    };
    view! {
        <Suspense fallback=move || {
            view! {
                <p class="hint" role="status" data-testid="deferred-loading">
                    {format!("Loading {what}…")}
                </p>
            }
        }>{part}</Suspense>
    }
}
