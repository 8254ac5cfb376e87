//! The app shell: the page frame and the problem banner.

use std::time::Duration;

use leptos::prelude::*;

use crate::auth::{Session, SignIn};
use crate::chat::{ChatView, NewChat};
use crate::conversations::ConversationList;
use crate::state::{AppState, InfoState, load_info};
use crate::{address, clock};

#[component]
pub fn App() -> impl IntoView {
    let app = AppState::new();
    provide_context(app);

    Effect::new(move |_| {
        app.reload.track();
        load_info(app);
    });
    let _ = window_event_listener(leptos::ev::online, move |_| {
        app.online.set(true);
        app.retry();
    });
    let _ = window_event_listener(leptos::ev::offline, move |_| app.online.set(false));
    // Fired when another tab of this site changes what the browser keeps.
    let _ = window_event_listener(leptos::ev::storage, move |_| app.follow_kept_session());
    let _ = window_event_listener(leptos::ev::hashchange, move |_| {
        let id = address::conversation();
        if app.current.get_untracked() != id {
            app.current.set(id);
        }
    });
    set_interval(
        move || {
            app.now_ms.set(clock::now_ms());
            // A token that runs out while the page is open signs the user out.
            if app
                .session
                .with_untracked(|s| s.as_ref().is_some_and(Session::expired))
            {
                app.session_expired();
            }
        },
        Duration::from_secs(5),
    );

    // Only who is signed in changes the page: a new token of the same user (taken up
    // from another tab) leaves the chat and its open cards as they are, while another
    // user gets a page of their own.
    let signed_in = Memo::new(move |_| {
        app.session
            .with(|session| session.as_ref().map(|s| s.user_id.clone()))
    });
    view! {
        <div class="app" data-mounted="true" data-testid="app">
            <Banner/>
            {move || {
                if signed_in.with(Option::is_some) {
                    view! { <Workspace/> }.into_any()
                } else {
                    view! {
                        <main class="signed-out" id="main">
                            <SignIn/>
                        </main>
                    }
                        .into_any()
                }
            }}
        </div>
    }
}

/// Offline, server unreachable: plain words and a way to try again.
#[component]
fn Banner() -> impl IntoView {
    let app = expect_context::<AppState>();
    view! {
        <div class="banner-area" aria-live="assertive">
            <Show when=move || !app.online.get()>
                <div class="banner banner-offline" role="alert" data-testid="offline-banner">
                    <span>"You are offline. The chat reconnects by itself when the network is back."</span>
                </div>
            </Show>
            {move || {
                app.notice
                    .get()
                    .map(|notice| {
                        view! {
                            <div class="banner banner-error" role="alert" data-testid="error-banner">
                                <span>{notice.message}</span>
                                <button type="button" data-testid="retry" on:click=move |_| app.retry()>
                                    "Retry"
                                </button>
                            </div>
                        }
                    })
            }}
        </div>
    }
}

#[component]
fn Workspace() -> impl IntoView {
    let app = expect_context::<AppState>();
    let user = move || {
        app.session
            .with(|s| s.as_ref().map(|s| s.user_id.clone()))
            .unwrap_or_default()
    };
    view! {
        <header class="topbar">
            <span class="brand">"toolgate"</span>
            <ModelBadge/>
            <span class="user" data-testid="signed-in-user" title="Signed in as">
                {user}
            </span>
            <button type="button" class="link-button" data-testid="sign-out" on:click=move |_| app.sign_out()>
                "Sign out"
            </button>
        </header>
        // Outside the views that come and go, so it is there before it speaks.
        <p class="visually-hidden" role="status" data-testid="announcement">
            {move || app.announcement.get()}
        </p>
        <div class="workspace">
            <ConversationList/>
            <main class="chat-area" id="main">
                {move || match app.current.get() {
                    Some(id) => view! { <ChatView id=id/> }.into_any(),
                    None => view! { <NewChat/> }.into_any(),
                }}
            </main>
        </div>
    }
}

/// Which model answers; the built-in offline model says so.
#[component]
fn ModelBadge() -> impl IntoView {
    let app = expect_context::<AppState>();
    move || match app.info.get() {
        InfoState::Ready(info) => {
            let offline = info.model_provider == "offline";
            let text = if offline {
                format!("{} · offline model, no network", info.model)
            } else {
                format!("{} · {}", info.model, info.model_provider)
            };
            view! {
                <span class="model-badge" class:offline=offline data-testid="model-badge" title="The model that answers">
                    {text}
                </span>
            }
            .into_any()
        }
        _ => ().into_any(),
    }
}
