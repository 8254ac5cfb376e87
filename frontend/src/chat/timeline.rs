//! The conversation as it happens: messages, tool calls with their state and cards,
//! the assistant's draft and the run's status line.

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::InputRequest;
use protocol::chat::{ContentBlock, Message, Role, RunStatus};
use protocol::unseen;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api;
use crate::cards::RequestCard;
use crate::state::{AppState, InfoState};
use crate::stream::{ChatStore, ToolState, stored_calls};
use crate::{clock, value_text};

#[component]
pub(super) fn Timeline() -> impl IntoView {
    let store = expect_context::<ChatStore>();
    // Requests whose tool call is not on the page (made outside a run, or under the id
    // of a call of another tool) go last, under their own tool's name.
    let loose_requests = Memo::new(move |_| {
        let mut calls = store.messages.with(|m| stored_calls(m));
        calls.extend(store.live_calls.with(|live| {
            live.iter()
                .map(|c| (c.id.clone(), c.name.clone()))
                .collect::<Vec<_>>()
        }));
        store.requests.with(|requests| {
            requests
                .iter()
                .filter(|r| !calls.iter().any(|(id, name)| r.belongs_to(id, name)))
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

/// Pins a message of the user's so it stays in the assistant's context word for word.
/// The first request needs none: it always stays, and says so.
#[component]
fn PinToggle(message_id: Uuid) -> impl IntoView {
    let app = expect_context::<AppState>();
    let store = expect_context::<ChatStore>();
    let pinned = move || {
        store
            .messages
            .with(|messages| messages.iter().any(|m| m.id == message_id && m.pinned))
    };
    let first = move || {
        store.messages.with(|messages| {
            messages
                .iter()
                .find(|m| m.role == Role::User && !m.is_command())
                .map(|m| m.id)
        }) == Some(message_id)
    };
    let failed = RwSignal::new(false);
    let toggle = move |_| {
        let Some(token) = app.token() else {
            return;
        };
        let wanted = !pinned();
        spawn_local(async move {
            match api::pin_message(&token, store.id, message_id, wanted).await {
                Ok(message) => {
                    failed.set(false);
                    store.replace_message(message);
                }
                Err(_) => failed.set(true),
            }
        });
    };
    view! {
        <div class="pin-row">
            <Show
                when=first
                fallback=move || {
                    view! {
                        <button
                            type="button"
                            class="pin"
                            data-testid="pin-message"
                            aria-pressed=move || pinned().to_string()
                            title="Keep this message in the assistant's context, word for word"
                            on:click=toggle
                        >
                            {move || if pinned() { "\u{1f4cc} Pinned" } else { "Pin" }}
                        </button>
                    }
                }
            >
                <span
                    class="pin kept"
                    data-testid="pinned-task"
                    title="Your first request sets the task: it is always kept in the assistant's context"
                >
                    "\u{1f4cc} Task \u{2014} always kept"
                </span>
            </Show>
            <Show when=move || failed.get()>
                <span class="field-error" data-testid="pin-error">
                    "Not changed: the server could not be reached. Try again."
                </span>
            </Show>
        </div>
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
    let time = clock::short_time(&message.created_at);
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
            {(role == Role::User).then(|| view! { <PinToggle message_id=message.id/> })}
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
    let (call_id, call_name) = (id.clone(), name.clone());
    let requests = move || {
        store.requests.with(|requests| {
            requests
                .iter()
                .filter(|r| r.belongs_to(&call_id, &call_name))
                .map(|r| r.id)
                .collect::<Vec<Uuid>>()
        })
    };
    let arguments = value_text::pretty(&arguments);
    let tool = name.clone();
    let app = expect_context::<AppState>();
    app.want_tool_servers();
    let server_of = name.clone();
    let server = move || {
        app.tool_server(&server_of).map(|server| {
            view! {
                <span class="tool-server" data-testid="tool-server">
                    "from MCP server "
                    <code>{server}</code>
                </span>
            }
        })
    };
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
                <code class="tool-name">{unseen::written_out(&name)}</code>
                {server}
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
                                <pre>{value_text::pretty(&result)}</pre>
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offline_model_is_labelled_as_such() {
        assert_eq!(
            model_label("toolgate-offline", &InfoState::Loading),
            "toolgate-offline · offline model"
        );
        assert_eq!(model_label("gpt-4o", &InfoState::Loading), "gpt-4o");
    }
}
