//! Deleting the open conversation: asked once more in place (Escape or "Keep it" says
//! no), then gone with all it holds, its draft included.

use leptos::prelude::*;
use leptos::task::spawn_local;
use uuid::Uuid;

use crate::state::AppState;
use crate::{api, focus};

/// Moves the focus to `button` once the page has drawn it (it may be drawn anew).
fn focus_soon(button: NodeRef<leptos::html::Button>) {
    request_animation_frame(move || {
        if let Some(button) = button.get_untracked() {
            let _ = button.focus();
        }
    });
}

#[component]
pub(super) fn DeleteConversation(id: Uuid) -> impl IntoView {
    let app = expect_context::<AppState>();
    let asking = RwSignal::new(false);
    let deleting = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let ask = NodeRef::<leptos::html::Button>::new();
    let keep = NodeRef::<leptos::html::Button>::new();

    let start_asking = move |_| {
        asking.set(true);
        // The safe answer first: Enter by habit keeps the conversation.
        focus_soon(keep);
    };
    let stop_asking = move || {
        asking.set(false);
        error.set(None);
        focus_soon(ask);
    };

    let delete = move |_| {
        let Some(token) = app.token() else {
            return;
        };
        let user = app
            .session
            .with_untracked(|s| s.as_ref().map(|s| s.user_id.clone()));
        deleting.set(true);
        error.set(None);
        spawn_local(async move {
            let deleted = api::delete_conversation(&token, id).await;
            // Gone already (another tab) is gone as well; forgotten even when this page
            // went meanwhile.
            if matches!(
                deleted,
                Ok(()) | Err(api::ApiError::Status { status: 404, .. })
            ) {
                app.reached();
                app.forget_conversation(user.as_deref(), id);
                app.announce("Conversation deleted.");
                if app.current.get_untracked() == Some(id) {
                    app.select(None);
                    request_animation_frame(|| {
                        focus::move_to("composer-input");
                    });
                }
                return;
            }
            if deleting.is_disposed() {
                return;
            }
            deleting.set(false);
            // The buttons were disabled meanwhile, which took the focus away.
            focus_soon(keep);
            match deleted {
                Err(err) if err.code() == Some("run_active") => error.set(Some(
                    "The agent is still working here, or waiting for an answer above. Delete the conversation when it is done.".into(),
                )),
                Err(err) if err.code() == Some("request_pending") => error.set(Some(
                    "A request above waits for your answer. Answer or cancel it, then delete the conversation.".into(),
                )),
                Err(err) => {
                    if !app.report(&err) {
                        error.set(Some(err.message()));
                    }
                }
                Ok(()) => {}
            }
        });
    };

    view! {
        <div class="delete-conversation" data-testid="delete-conversation">
            <Show
                when=move || asking.get()
                fallback=move || {
                    view! {
                        <button
                            type="button"
                            node_ref=ask
                            aria-label="Delete this conversation"
                            data-testid="delete-conversation-ask"
                            on:click=start_asking
                        >
                            "Delete"
                        </button>
                    }
                }
            >
                <span
                    role="group"
                    aria-labelledby="delete-conversation-question"
                    on:keydown=move |event: web_sys::KeyboardEvent| {
                        if event.key() == "Escape" && !deleting.get_untracked() {
                            event.prevent_default();
                            stop_asking();
                        }
                    }
                >
                    <span class="hint" id="delete-conversation-question">
                        "Delete this conversation and all in it?"
                    </span>
                    <button
                        type="button"
                        class="danger"
                        data-testid="delete-conversation-confirm"
                        disabled=move || deleting.get()
                        on:click=delete
                    >
                        {move || if deleting.get() { "Deleting…" } else { "Delete for good" }}
                    </button>
                    <button
                        type="button"
                        node_ref=keep
                        data-testid="delete-conversation-keep"
                        disabled=move || deleting.get()
                        on:click=move |_| stop_asking()
                    >
                        "Keep it"
                    </button>
                </span>
            </Show>
            <p class="field-error" role="alert" data-testid="delete-conversation-error">
                {move || error.get()}
            </p>
        </div>
    }
}
