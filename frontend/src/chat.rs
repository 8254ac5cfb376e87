//! One conversation: its messages, tool calls, input cards, the streaming reply and the
//! message box.

use leptos::context::Provider;
use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::{InputRequest, RequestKind};
use protocol::chat::{ContentBlock, Message, Role, RunStatus};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::app::{AppState, InfoState};
use crate::approval_card::ApprovalCard;
use crate::conversations::refresh_conversations;
use crate::input_card::InputCard;
use crate::saved_values::SavedValuesPanel;
use crate::stream::{self, ChatStore, Link, RunView, ToolState};
use crate::util;

/// Whether the conversation could be opened.
#[derive(Clone, Debug, PartialEq)]
enum Loading {
    Pending,
    Ready,
    NotFound,
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
            <Composer store=Some(store)/>
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
            Ok(list) => store.add_messages(list.messages),
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
            data-state=move || format!("{:?}", store.link.get()).to_lowercase()
            role="status"
        >
            {move || match store.link.get() {
                Link::Connecting => "connecting…",
                Link::Live => "live",
                Link::Reconnecting if !app.online.get() => "offline — waiting for the network",
                Link::Reconnecting => "reconnecting…",
                Link::Stopped => "not live",
            }}
        </span>
    }
}

/// The tool call ids that appear in the conversation's stored messages.
fn stored_call_ids(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|block| match block {
            ContentBlock::ToolCall { id, .. } => Some(id.clone()),
            _ => None,
        })
        .collect()
}

#[component]
fn Timeline() -> impl IntoView {
    let store = expect_context::<ChatStore>();
    // Requests whose tool call is not on the page (made outside a run) go last.
    let loose_requests = Memo::new(move |_| {
        let mut ids = store.messages.with(|m| stored_call_ids(m));
        ids.extend(
            store
                .live_calls
                .with(|calls| calls.iter().map(|c| c.id.clone()).collect::<Vec<_>>()),
        );
        store.requests.with(|requests| {
            requests
                .iter()
                .filter(|r| !ids.contains(&r.tool_call_id))
                .map(|r| r.id)
                .collect::<Vec<_>>()
        })
    });
    let visible_messages = move || {
        store.messages.with(|messages| {
            messages
                .iter()
                .filter(|m| matches!(m.role, Role::User | Role::Assistant))
                .cloned()
                .collect::<Vec<_>>()
        })
    };
    view! {
        <ol class="timeline" data-testid="timeline" aria-label="Messages">
            <For each=visible_messages key=|m| m.id let:message>
                <MessageView message/>
            </For>
            <For each=move || store.live_calls.get() key=|c| c.id.clone() let:call>
                <li class="msg assistant live-call">
                    <ToolCallView id=call.id name=call.name arguments=call.arguments/>
                </li>
            </For>
            <Draft/>
            <For each=move || loose_requests.get() key=|id| *id let:request_id>
                <li class="msg card-row">
                    <RequestCard request_id/>
                </li>
            </For>
            <RunLine/>
        </ol>
        <Show when=move || {
            store.messages.with(Vec::is_empty) && store.draft.with(String::is_empty)
                && store.requests.with(Vec::is_empty)
        }>
            <p class="hint" data-testid="empty-conversation">
                "Ask something to begin. Try \u{201c}Get my P&L report for Q1 2025\u{201d} or \
                 \u{201c}Which customers do we have? Query the database.\u{201d}"
            </p>
        </Show>
    }
}

/// "answered by …", saying so when it is the built-in offline model.
fn model_label(model: &str, info: &InfoState) -> String {
    let offline = model == "toolgate-offline"
        || matches!(info, InfoState::Ready(i) if i.model_provider == "offline" && i.model == model);
    if offline {
        format!("{model} · offline model")
    } else {
        model.to_owned()
    }
}

#[component]
fn MessageView(message: Message) -> impl IntoView {
    let app = expect_context::<AppState>();
    let role = message.role;
    let text = message.text();
    let calls: Vec<(String, String, Map<String, Value>)> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::ToolCall {
                id,
                name,
                arguments,
            } => Some((id.clone(), name.clone(), arguments.clone())),
            _ => None,
        })
        .collect();
    let images: Vec<String> = message
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Image { url } => Some(url.clone()),
            ContentBlock::ImageStub { text } => Some(format!("[{text}]")),
            _ => None,
        })
        .collect();
    let time = util::short_time(&message.created_at);
    let model = message.model.clone();
    let (class, testid, who) = match role {
        Role::User => ("msg user", "message-user", "You"),
        _ => ("msg assistant", "message-assistant", "Assistant"),
    };
    view! {
        <li class=class data-testid=testid data-message-id=message.id.to_string()>
            <div class="msg-meta">
                <span class="who">{who}</span>
                {model
                    .map(|model| {
                        let label = move || model_label(&model, &app.info.get());
                        view! {
                            <span class="model" data-testid="message-model">
                                "answered by "
                                {label}
                            </span>
                        }
                    })}
                <time>{time}</time>
            </div>
            {(!text.is_empty())
                .then(|| view! { <div class="msg-text" data-testid="message-text">{text}</div> })}
            {(!images.is_empty())
                .then(|| {
                    view! {
                        <ul class="attachments">
                            {images.into_iter().map(|i| view! { <li>{i}</li> }).collect_view()}
                        </ul>
                    }
                })}
            {calls
                .into_iter()
                .map(|(id, name, arguments)| view! { <ToolCallView id name arguments/> })
                .collect_view()}
        </li>
    }
}

/// A tool call: its name and state, arguments folded away, and its input cards.
#[component]
fn ToolCallView(id: String, name: String, arguments: Map<String, Value>) -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let call_id = id.clone();
    let state = Memo::new(move |_| {
        let known = store.tools.with(|tools| tools.get(&call_id).cloned());
        known.unwrap_or_else(|| {
            if store.is_busy() {
                ToolState::Running
            } else {
                ToolState::Done(None)
            }
        })
    });
    let call_id = id.clone();
    let requests = move || {
        store.requests.with(|requests| {
            requests
                .iter()
                .filter(|r| r.tool_call_id == call_id)
                .map(|r| r.id)
                .collect::<Vec<Uuid>>()
        })
    };
    let arguments = util::pretty(&arguments);
    let tool = name.clone();
    view! {
        <div
            class="tool-call"
            data-testid="tool-call"
            data-tool-call-id=id
            data-tool=tool
            data-state=move || state.get().label()
        >
            <div class="tool-call-head">
                <span class="tool-icon" aria-hidden="true">"⚙"</span>
                <code class="tool-name">{name}</code>
                <span
                    class=move || format!("badge badge-{}", state.get().label().replace(' ', "-"))
                    data-testid="tool-state"
                >
                    {move || state.get().label()}
                </span>
            </div>
            <details class="tool-args">
                <summary>"Arguments"</summary>
                <pre>{arguments}</pre>
            </details>
            {move || match state.get() {
                ToolState::Failed(error) => {
                    Some(view! { <p class="tool-error" data-testid="tool-error">{error}</p> }.into_any())
                }
                ToolState::Done(Some(result)) => {
                    Some(
                        view! {
                            <details class="tool-result">
                                <summary>"Result"</summary>
                                <pre>{util::pretty(&result)}</pre>
                            </details>
                        }
                            .into_any(),
                    )
                }
                _ => None,
            }}
            <For each=requests key=|id| *id let:request_id>
                <RequestCard request_id/>
            </For>
        </div>
    }
}

/// A request's card: fields to fill in, or a call to approve.
#[component]
fn RequestCard(request_id: Uuid) -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let kind = store
        .requests
        .with_untracked(|requests| requests.iter().find(|r| r.id == request_id).map(|r| r.kind));
    match kind {
        Some(RequestKind::Approval) => view! { <ApprovalCard request_id/> }.into_any(),
        Some(RequestKind::Input) => view! { <InputCard request_id/> }.into_any(),
        None => ().into_any(),
    }
}

/// The assistant's reply while it is being written.
#[component]
fn Draft() -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let app = expect_context::<AppState>();
    view! {
        <Show when=move || !store.draft.with(String::is_empty)>
            <li class="msg assistant streaming" data-testid="assistant-draft" aria-busy="true">
                <div class="msg-meta">
                    <span class="who">"Assistant"</span>
                    {move || {
                        store
                            .draft_model
                            .get()
                            .map(|model| {
                                view! {
                                    <span class="model">
                                        "answering with "{model_label(&model, &app.info.get())}
                                    </span>
                                }
                            })
                    }}
                </div>
                <div class="msg-text">{move || store.draft.get()}<span class="caret" aria-hidden="true"></span></div>
            </li>
        </Show>
    }
}

/// What the run is doing, when the timeline itself does not show it.
#[component]
fn RunLine() -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let pending = move || {
        store.requests.with(|r: &Vec<InputRequest>| {
            r.iter()
                .any(|r| r.status == protocol::api::RequestStatus::Pending)
        })
    };
    move || {
        let run = store.run.get()?;
        let line = match run.status {
            RunStatus::Running if store.draft.with(String::is_empty) => {
                view! { <li class="run-line" role="status" data-testid="run-working">"Working…"</li> }.into_any()
            }
            RunStatus::WaitingForInput if pending() => {
                view! {
                    <li class="run-line" role="status" data-testid="run-waiting">
                        "Waiting for your answer above."
                    </li>
                }
                    .into_any()
            }
            RunStatus::Failed => {
                let error = run.error.unwrap_or_else(|| "no reason given".into());
                view! {
                    <li class="run-line run-failed" role="alert" data-testid="run-failed">
                        {format!("The run failed: {error}")}
                    </li>
                }
                    .into_any()
            }
            _ => return None,
        };
        Some(line)
    }
}

/// A conversation's title: the first line of its first message, shortened.
fn title_from(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title = format!("{}…", title.trim_end());
    }
    title
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

/// The message box. Inside a conversation it posts there; on the new-conversation page
/// it first creates the conversation.
#[component]
fn Composer(store: Option<ChatStore>) -> impl IntoView {
    let app = expect_context::<AppState>();
    let text = RwSignal::new(String::new());
    let sending = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let input = NodeRef::<leptos::html::Textarea>::new();
    // A conversation created for a message that then failed to send is reused on retry.
    let created = StoredValue::new(None::<Uuid>);
    let busy = move || store.is_some_and(|s| s.is_busy());

    let send = move || {
        let content = text.get_untracked().trim().to_owned();
        if content.is_empty() || sending.get_untracked() || busy() {
            return;
        }
        let Some(token) = app.token() else {
            return;
        };
        sending.set(true);
        error.set(None);
        spawn_local(async move {
            let target = match store.map(|s| s.id).or(created.get_value()) {
                Some(id) => Ok(id),
                None => api::create_conversation(&token, Some(title_from(&content)))
                    .await
                    .map(|conversation| {
                        let id = conversation.id;
                        created.set_value(Some(id));
                        app.conversations.update(|list| {
                            list.retain(|c| c.id != id);
                            list.insert(0, conversation);
                        });
                        id
                    }),
            };
            let posted = match target {
                Ok(id) => api::post_message(&token, id, &content)
                    .await
                    .map(|p| (id, p)),
                Err(err) => Err(err),
            };
            if sending.is_disposed() {
                return;
            }
            match posted {
                Ok((id, posted)) => {
                    app.reached();
                    text.set(String::new());
                    if let Some(input) = input.get_untracked() {
                        input.set_value("");
                    }
                    match store {
                        Some(store) => {
                            let mut added = vec![posted.message];
                            added.extend(posted.reply);
                            store.add_messages(added);
                            if let Some(run_id) = posted.run_id
                                && store.run.with_untracked(|r| r.as_ref().and_then(|r| r.id))
                                    != Some(run_id)
                            {
                                store.set_run(Some(RunView {
                                    id: Some(run_id),
                                    status: RunStatus::Running,
                                    model: None,
                                    error: None,
                                }));
                            }
                        }
                        None => {
                            app.select(Some(id));
                            request_animation_frame(|| {
                                util::focus_id("composer-input");
                            });
                        }
                    }
                }
                Err(err) if err.code() == Some("run_active") => error.set(Some(
                    "The agent is still working on your last message (or waiting for an answer above). Send this when it is done.".into(),
                )),
                Err(err) => {
                    if !app.report(&err) {
                        error.set(Some(err.message()));
                    } else if matches!(err, ApiError::Network) {
                        error.set(Some("Not sent: the server can't be reached. Your text is still here; press Send to try again.".into()));
                    }
                }
            }
            sending.set(false);
        });
    };

    let busy_hint = move || {
        let run = store?.run.get()?;
        match run.status {
            RunStatus::Running => Some("The agent is working…"),
            RunStatus::WaitingForInput => Some("Answer the request above to let the agent go on."),
            _ => None,
        }
    };

    view! {
        <form
            class="composer"
            data-testid="composer"
            on:submit=move |ev| {
                ev.prevent_default();
                send();
            }
        >
            <label for="composer-input" class="visually-hidden">"Message"</label>
            <textarea
                id="composer-input"
                data-testid="composer-input"
                node_ref=input
                rows="2"
                placeholder="Ask something…"
                aria-describedby="composer-keys composer-status"
                on:input=move |ev| text.set(event_target_value(&ev))
                on:keydown=move |ev| {
                    if ev.key() == "Enter" && !ev.shift_key() && !ev.is_composing() {
                        ev.prevent_default();
                        send();
                    }
                }
            ></textarea>
            <button
                type="submit"
                class="primary"
                data-testid="send"
                disabled=move || sending.get() || busy() || text.with(|t| t.trim().is_empty())
            >
                {move || if sending.get() { "Sending…" } else { "Send" }}
            </button>
            <p id="composer-status" class="composer-status" aria-live="polite">
                <span class="field-error" data-testid="composer-error">{move || error.get()}</span>
                <span class="hint">{busy_hint}</span>
                <span id="composer-keys" class="hint keys">"Enter sends · Shift+Enter for a new line"</span>
            </p>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_the_first_line_shortened() {
        assert_eq!(
            title_from("\n  Get my P&L report for Q1 2025\nthanks"),
            "Get my P&L report for Q1 2025"
        );
        let long = "word ".repeat(30);
        let title = title_from(&long);
        assert!(
            title.ends_with('…') && title.chars().count() <= 61,
            "{title}"
        );
    }

    #[test]
    fn the_offline_model_is_labelled_as_such() {
        assert_eq!(
            model_label("toolgate-offline", &InfoState::Loading),
            "toolgate-offline · offline model"
        );
        assert_eq!(model_label("gpt-4o", &InfoState::Loading), "gpt-4o");
    }
}
