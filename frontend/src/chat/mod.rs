//! One conversation: its messages, tool calls, input cards, the streaming reply and the
//! message box.

use leptos::context::Provider;
use leptos::prelude::*;
use leptos::task::spawn_local;
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::conversations::refresh_conversations;
use crate::saved_values::SavedValuesPanel;
use crate::state::AppState;
use crate::stream::{self, ChatStore, Link, RunView};

mod composer;
mod delete;
mod timeline;

use composer::Composer;
use delete::DeleteConversation;
use timeline::Timeline;

/// Whether the conversation could be opened.
#[derive(Clone, Debug, PartialEq)]
enum Loading {
    Pending,
    Ready,
    NotFound,
    /// Deleted while open here (in another tab, or by another client).
    Deleted,
    Failed(String),
}

#[component]
pub fn ChatView(id: Uuid) -> impl IntoView {
    let store = ChatStore::new(id);
    // Components share their parent's owner; the provider gives this conversation its
    // own, so its state never leaks into whatever is shown next.
    view! {
        <Provider value=store>
            <ChatBody store/>
        </Provider>
    }
}

#[component]
fn ChatBody(store: ChatStore) -> impl IntoView {
    let app = expect_context::<AppState>();
    let id = store.id;
    let loading = RwSignal::new(Loading::Pending);
    let title = RwSignal::new(String::new());

    Effect::new(move |_| {
        app.reload.track();
        load(store, app, loading, title);
    });
    stream::follow(store, app);
    Effect::new(move |_| {
        if store.link.get() == Link::Deleted {
            loading.set(Loading::Deleted);
            let user = app
                .session
                .with_untracked(|s| s.as_ref().map(|s| s.user_id.clone()));
            app.forget_conversation(user.as_deref(), id);
        }
    });

    // A finished run may have named the conversation.
    Effect::new(move |previous: Option<u32>| {
        let finished = store.finished_runs.get();
        if previous.is_some_and(|p| p != finished) {
            refresh_conversations(app);
        }
        finished
    });
    Effect::new(move |_| {
        if let Some(found) = app
            .conversations
            .with(|list| list.iter().find(|c| c.id == id).map(|c| c.title.clone()))
        {
            title.set(found);
        }
    });

    // Keep the newest message in view while the reader is at the bottom.
    let scroller = NodeRef::<leptos::html::Div>::new();
    let stick = StoredValue::new(true);
    Effect::new(move |_| {
        store.messages.track();
        store.draft.track();
        store.requests.track();
        store.live_calls.track();
        loading.track();
        if stick.get_value() {
            request_animation_frame(move || {
                if let Some(el) = scroller.get_untracked() {
                    el.set_scroll_top(el.scroll_height());
                }
            });
        }
    });

    view! {
        <section class="chat" data-testid="chat" data-conversation-id=id.to_string() aria-labelledby="chat-title">
            <header class="chat-head">
                <h1 id="chat-title" data-testid="chat-title">
                    {move || title.get()}
                </h1>
                <LinkIndicator/>
                <SavedValuesPanel store/>
                <DeleteConversation id/>
            </header>
            <div class="scroller" node_ref=scroller on:scroll=move |_| {
                if let Some(el) = scroller.get_untracked() {
                    let gap = el.scroll_height() - el.scroll_top() - el.client_height();
                    stick.set_value(gap < 80);
                }
            }>
                {move || match loading.get() {
                    Loading::Pending => {
                        view! { <p class="hint" role="status">"Loading the conversation…"</p> }.into_any()
                    }
                    Loading::NotFound => {
                        view! {
                            <p class="notice notice-warn" role="alert" data-testid="not-found">
                                "This conversation does not exist, or it is not yours."
                            </p>
                        }
                            .into_any()
                    }
                    Loading::Deleted => {
                        view! {
                            <p class="notice notice-warn" role="alert" data-testid="deleted-elsewhere">
                                "This conversation has been deleted elsewhere (another tab, window or app)."
                            </p>
                        }
                            .into_any()
                    }
                    Loading::Failed(message) => {
                        view! {
                            <div class="notice notice-error" role="alert" data-testid="load-error">
                                <span>{message}</span>
                                <button type="button" on:click=move |_| app.retry()>"Retry"</button>
                            </div>
                        }
                            .into_any()
                    }
                    Loading::Ready => view! { <Timeline/> }.into_any(),
                }}
            </div>
            // Gone: nothing to send to, and a draft typed here would be kept for nothing.
            <Show when=move || loading.get() != Loading::Deleted>
                <Composer store=Some(store)/>
            </Show>
        </section>
    }
}

fn load(store: ChatStore, app: AppState, loading: RwSignal<Loading>, title: RwSignal<String>) {
    let Some(token) = app.token() else {
        return;
    };
    let id = store.id;
    spawn_local(async move {
        let detail = api::conversation_detail(&token, id).await;
        // The user may have moved on while we waited.
        if loading.is_disposed() {
            return;
        }
        match detail {
            Ok(detail) => {
                app.reached();
                title.set(detail.conversation.title.clone());
                if let Some(run) = &detail.active_run {
                    store.set_run(Some(RunView::from(run)));
                }
            }
            Err(ApiError::Status { status: 404, .. }) => {
                loading.set(Loading::NotFound);
                return;
            }
            Err(err) => {
                if !app.report(&err) {
                    loading.set(Loading::Failed(err.message()));
                }
                return;
            }
        }
        let messages = api::list_messages(&token, id).await;
        if loading.is_disposed() {
            return;
        }
        match messages {
            Ok(list) => store.add_current_messages(list.messages),
            Err(err) => {
                if !app.report(&err) {
                    loading.set(Loading::Failed(err.message()));
                }
                return;
            }
        }
        let pending = api::get_pending(&token, id).await;
        if loading.is_disposed() {
            return;
        }
        match pending {
            Ok(requests) => {
                for request in requests {
                    store.upsert_request(request);
                }
            }
            Err(err) => {
                app.report(&err);
            }
        }
        // Setting it again would rebuild the timeline and lose what cards hold.
        if loading.get_untracked() != Loading::Ready {
            loading.set(Loading::Ready);
        }
    });
}

#[component]
fn LinkIndicator() -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let app = expect_context::<AppState>();
    view! {
        <span
            class="link"
            data-testid="stream-status"
            data-state=move || store.link.get().name()
            role="status"
        >
            {move || match store.link.get() {
                Link::Connecting => "connecting…",
                Link::Live => "live",
                Link::Reconnecting if !app.online.get() => "offline — waiting for the network",
                Link::Reconnecting => "reconnecting…",
                Link::Stopped => "not live",
                Link::Deleted => "deleted",
            }}
        </span>
    }
}

/// A new conversation: it is created, titled after the first message, when that
/// message is sent.
#[component]
pub fn NewChat() -> impl IntoView {
    view! {
        <section class="chat" data-testid="new-chat" aria-labelledby="chat-title">
            <header class="chat-head">
                <h1 id="chat-title" data-testid="chat-title">"New conversation"</h1>
            </header>
            <div class="empty-state" data-testid="empty-state">
                <p>
                    "Ask for something, for example \u{201c}Get my P&L report for Q1 2025\u{201d} or \
                     \u{201c}Which customers do we have? Query the database.\u{201d} When a tool needs \
                     something only you know, a card asks for it here."
                </p>
            </div>
            <Composer store=None/>
        </section>
    }
}
