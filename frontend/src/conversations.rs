//! The conversation list: newest first, a button for a new one, switching.

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::Conversation;

use crate::api;
use crate::state::AppState;
use crate::{clock, focus};

/// Loads the caller's conversations again (after a new one, or a run that named one).
pub fn refresh_conversations(app: AppState) {
    let Some(token) = app.token() else {
        return;
    };
    spawn_local(async move {
        match api::list_conversations(&token).await {
            Ok(list) => {
                app.reached();
                if app.token().as_deref() == Some(token.as_str()) {
                    app.show_conversations(list);
                }
            }
            Err(err) => {
                app.report(&err);
            }
        }
    });
}

#[component]
pub fn ConversationList() -> impl IntoView {
    let app = expect_context::<AppState>();
    let loaded = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    // On small screens the list folds away behind a button.
    let open = RwSignal::new(false);

    Effect::new(move |_| {
        app.reload.track();
        let Some(token) = app.session.with(|s| s.as_ref().map(|s| s.token.clone())) else {
            return;
        };
        spawn_local(async move {
            match api::list_conversations(&token).await {
                // Only for the session that asked: after a sign-out (and someone
                // else's sign-in) a late answer must not show the last user's titles.
                Ok(_) if app.token().as_deref() != Some(token.as_str()) => {}
                Ok(list) => {
                    app.reached();
                    app.show_conversations(list);
                    error.set(None);
                }
                Err(err) => {
                    if !app.report(&err) {
                        error.set(Some(err.message()));
                    }
                }
            }
            loaded.set(true);
        });
    });

    let new_conversation = move |_| {
        open.set(false);
        app.select(None);
        request_animation_frame(|| {
            focus::move_to("composer-input");
        });
    };

    view! {
        <nav class="sidebar" class:open=move || open.get() aria-label="Conversations">
            <div class="sidebar-head">
                <button
                    type="button"
                    class="sidebar-toggle"
                    aria-expanded=move || open.get().to_string()
                    aria-controls="conversation-list"
                    on:click=move |_| open.update(|o| *o = !*o)
                >
                    {move || format!("Conversations ({})", app.conversations.with(Vec::len))}
                </button>
                <button
                    type="button"
                    class="primary"
                    data-testid="new-conversation"
                    on:click=new_conversation
                >
                    "New conversation"
                </button>
            </div>
            <p class="field-error" role="alert">
                {move || error.get()}
            </p>
            <ul id="conversation-list" class="conversation-list" data-testid="conversation-list">
                <For
                    each=move || app.conversations.get()
                    key=|c| (c.id, c.title.clone())
                    children=move |conversation: Conversation| {
                        view! { <ConversationItem conversation open/> }
                    }
                />
            </ul>
            <Show when=move || loaded.get() && app.conversations.with(Vec::is_empty)>
                <p class="hint" data-testid="no-conversations">"No conversations yet."</p>
            </Show>
        </nav>
    }
}

#[component]
fn ConversationItem(conversation: Conversation, open: RwSignal<bool>) -> impl IntoView {
    let app = expect_context::<AppState>();
    let id = conversation.id;
    let selected = move || app.current.get() == Some(id);
    view! {
        <li>
            <button
                type="button"
                class="conversation-item"
                class:selected=selected
                aria-current=move || if selected() { "page" } else { "false" }
                data-testid="conversation-item"
                data-conversation-id=id.to_string()
                on:click=move |_| {
                    open.set(false);
                    app.select(Some(id));
                }
            >
                <span class="conversation-title">{conversation.title.clone()}</span>
                <time class="conversation-time" datetime=conversation.created_at.to_rfc3339()>
                    {clock::short_time(&conversation.created_at)}
                </time>
            </button>
        </li>
    }
}
