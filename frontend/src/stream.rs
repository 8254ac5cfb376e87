//! A conversation's live state and the event stream that feeds it.
//!
//! The stream is an `EventSource` opened with a short-lived stream token. When it drops
//! (network loss, server restart, token expiry) it is closed and opened again with a
//! fresh token and `after=<last event id seen>`, so the server replays whatever was
//! missed. Every event is applied idempotently: messages and requests by id, statuses by
//! last write, so a replay or an overlap with the REST snapshot changes nothing.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use futures::channel::oneshot;
use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::{InputRequest, RequestKind, RequestStatus, ToolOutcome};
use protocol::chat::{ContentBlock, EventKind, Message, Role, Run, RunStatus, StreamEvent};
use send_wrapper::SendWrapper;
use serde_json::{Map, Value};
use uuid::Uuid;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{EventSource, MessageEvent};

use crate::api::{self, ApiError};
use crate::app::AppState;
use crate::util;

/// Where a tool call stands.
#[derive(Clone, Debug, PartialEq)]
pub enum ToolState {
    Running,
    NeedsInput,
    NeedsApproval,
    Done(Option<Value>),
    Failed(String),
}

impl ToolState {
    pub fn from_outcome(outcome: &ToolOutcome) -> Self {
        if outcome.success {
            ToolState::Done(outcome.result.clone())
        } else if outcome.requires_approval {
            ToolState::NeedsApproval
        } else if outcome.requires_user_input {
            ToolState::NeedsInput
        } else {
            ToolState::Failed(
                outcome
                    .error
                    .clone()
                    .unwrap_or_else(|| "the tool failed".into()),
            )
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            ToolState::Running => "running",
            ToolState::NeedsInput => "needs input",
            ToolState::NeedsApproval => "needs approval",
            ToolState::Done(_) => "done",
            ToolState::Failed(_) => "failed",
        }
    }
}

/// A tool call the stream announced before any stored message carried it.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// The state of the stream connection, for the little indicator in the header.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Link {
    Connecting,
    Live,
    Reconnecting,
    Stopped,
}

/// The current run, as far as the page knows.
#[derive(Clone, Debug, PartialEq)]
pub struct RunView {
    pub id: Option<Uuid>,
    pub status: RunStatus,
    pub model: Option<String>,
    pub error: Option<String>,
}

impl From<&Run> for RunView {
    fn from(run: &Run) -> Self {
        RunView {
            id: Some(run.id),
            status: run.status,
            model: run.model.clone(),
            error: run.error.clone(),
        }
    }
}

/// Everything the chat view shows for one conversation.
#[derive(Clone, Copy)]
pub struct ChatStore {
    pub id: Uuid,
    pub messages: RwSignal<Vec<Message>>,
    /// The assistant's text as it streams in, until the finished message is stored.
    pub draft: RwSignal<String>,
    pub draft_model: RwSignal<Option<String>>,
    pub tools: RwSignal<HashMap<String, ToolState>>,
    pub live_calls: RwSignal<Vec<LiveCall>>,
    pub requests: RwSignal<Vec<InputRequest>>,
    pub run: RwSignal<Option<RunView>>,
    pub link: RwSignal<Link>,
    /// Bumped when remembered values may have changed.
    pub saved_version: RwSignal<u32>,
    /// Bumped when the conversation list may have changed (a title).
    pub finished_runs: RwSignal<u32>,
}

impl ChatStore {
    pub fn new(id: Uuid) -> Self {
        ChatStore {
            id,
            messages: RwSignal::new(Vec::new()),
            draft: RwSignal::new(String::new()),
            draft_model: RwSignal::new(None),
            tools: RwSignal::new(HashMap::new()),
            live_calls: RwSignal::new(Vec::new()),
            requests: RwSignal::new(Vec::new()),
            run: RwSignal::new(None),
            link: RwSignal::new(Link::Connecting),
            saved_version: RwSignal::new(0),
            finished_runs: RwSignal::new(0),
        }
    }

    /// Adds messages not seen yet, keeping the conversation's order.
    pub fn add_messages(&self, incoming: Vec<Message>) {
        if incoming.is_empty() {
            return;
        }
        for message in &incoming {
            self.note_results(message);
        }
        let assistant_arrived = incoming.iter().any(|m| m.role == Role::Assistant);
        self.messages.update(|messages| {
            for message in incoming {
                if !messages.iter().any(|m| m.id == message.id) {
                    messages.push(message);
                }
            }
            messages.sort_by_key(|m| m.seq);
        });
        let known: Vec<String> = self.messages.with_untracked(|messages| {
            messages
                .iter()
                .flat_map(|m| m.content.iter())
                .filter_map(|block| match block {
                    ContentBlock::ToolCall { id, .. } => Some(id.clone()),
                    _ => None,
                })
                .collect()
        });
        if self
            .live_calls
            .with_untracked(|calls| calls.iter().any(|c| known.contains(&c.id)))
        {
            self.live_calls
                .update(|calls| calls.retain(|c| !known.contains(&c.id)));
        }
        if assistant_arrived && !self.draft.with_untracked(String::is_empty) {
            self.draft.set(String::new());
        }
    }

    fn note_results(&self, message: &Message) {
        for block in &message.content {
            if let ContentBlock::ToolResult {
                tool_call_id,
                outcome,
                ..
            } = block
            {
                let state = ToolState::from_outcome(outcome);
                self.tools.update(|tools| {
                    tools.insert(tool_call_id.clone(), state);
                });
            }
        }
    }

    /// Adds or updates a request. A request never goes back to pending once it has
    /// been answered, cancelled or expired, whatever order the news arrives in.
    pub fn upsert_request(&self, request: InputRequest) {
        if request.conversation_id != self.id {
            return;
        }
        self.requests.update(
            |requests| match requests.iter_mut().find(|r| r.id == request.id) {
                Some(existing) => {
                    let downgrade = existing.status != RequestStatus::Pending
                        && request.status == RequestStatus::Pending;
                    if !downgrade && *existing != request {
                        *existing = request;
                    }
                }
                None => requests.push(request),
            },
        );
    }

    pub fn set_run(&self, run: Option<RunView>) {
        let finished = run.as_ref().is_some_and(|r| !r.status.is_active());
        let was_active = self
            .run
            .with_untracked(|r| r.as_ref().is_some_and(|r| r.status.is_active()));
        self.run.set(run);
        if finished {
            if !self.draft.with_untracked(String::is_empty) {
                self.draft.set(String::new());
            }
            if was_active {
                self.finished_runs.update(|n| *n += 1);
            }
        }
    }

    pub fn is_busy(&self) -> bool {
        self.run
            .with(|r| r.as_ref().is_some_and(|r| r.status.is_active()))
    }

    /// Applies one stream event.
    pub fn apply(&self, event: StreamEvent) {
        match event.kind {
            EventKind::RunStarted { model } => {
                self.draft.set(String::new());
                self.draft_model.set(Some(model.clone()));
                self.set_run(Some(RunView {
                    id: event.run_id,
                    status: RunStatus::Running,
                    model: Some(model),
                    error: None,
                }));
            }
            EventKind::TextDelta { delta } => self.draft.update(|draft| draft.push_str(&delta)),
            EventKind::MessageAdded { message } => self.add_messages(vec![message]),
            EventKind::ToolCallStarted {
                tool_call_id,
                name,
                arguments,
            } => {
                let known = self.messages.with_untracked(|messages| {
                    messages.iter().flat_map(|m| m.content.iter()).any(
                        |block| matches!(block, ContentBlock::ToolCall { id, .. } if *id == tool_call_id),
                    )
                });
                if !known
                    && !self
                        .live_calls
                        .with_untracked(|calls| calls.iter().any(|c| c.id == tool_call_id))
                {
                    self.live_calls.update(|calls| {
                        calls.push(LiveCall {
                            id: tool_call_id.clone(),
                            name,
                            arguments,
                        })
                    });
                }
                self.tools.update(|tools| {
                    tools.insert(tool_call_id, ToolState::Running);
                });
            }
            EventKind::ToolCallFinished {
                tool_call_id,
                outcome,
                ..
            } => {
                if let Some(request) = outcome.user_input_request.clone() {
                    self.upsert_request(request);
                }
                if let Some(request) = outcome.approval_request.clone() {
                    self.upsert_request(request);
                }
                self.tools.update(|tools| {
                    tools.insert(tool_call_id, ToolState::from_outcome(&outcome));
                });
            }
            EventKind::InputRequested { request } => {
                if request.status == RequestStatus::Pending {
                    let state = match request.kind {
                        RequestKind::Input => ToolState::NeedsInput,
                        RequestKind::Approval => ToolState::NeedsApproval,
                    };
                    self.tools.update(|tools| {
                        tools.insert(request.tool_call_id.clone(), state);
                    });
                }
                self.upsert_request(request);
            }
            EventKind::InputResolved { request } => {
                if request.status == RequestStatus::Completed {
                    self.saved_version.update(|n| *n += 1);
                }
                self.upsert_request(request);
            }
            EventKind::RunStatus { run } => self.set_run(Some(RunView::from(&run))),
        }
    }
}

/// The SSE event names the server sends; `EventSource` only delivers named events to
/// listeners registered for their name.
const EVENT_NAMES: [&str; 9] = [
    "run_started",
    "text_delta",
    "message_added",
    "tool_call_started",
    "tool_call_finished",
    "input_requested",
    "input_resolved",
    "run_status",
    "message",
];

type EventListener = Closure<dyn FnMut(MessageEvent)>;
type StateListener = Closure<dyn FnMut(web_sys::Event)>;

struct Connection {
    alive: Cell<bool>,
    /// Failed attempts in a row; an opened stream resets it.
    failures: Cell<u32>,
    last_event: Cell<i64>,
    source: RefCell<Option<EventSource>>,
    closed: RefCell<Option<oneshot::Sender<()>>>,
    listeners: RefCell<Vec<EventListener>>,
    on_open: RefCell<Option<StateListener>>,
    on_error: RefCell<Option<StateListener>>,
}

impl Connection {
    fn close_source(&self) {
        if let Some(source) = self.source.borrow_mut().take() {
            source.set_onopen(None);
            source.set_onerror(None);
            source.close();
        }
        if let Some(closed) = self.closed.borrow_mut().take() {
            let _ = closed.send(());
        }
    }
}

/// Keeps `store` fed from the conversation's event stream until the calling component
/// is cleaned up.
pub fn follow(store: ChatStore, app: AppState) {
    let connection = Rc::new(Connection {
        alive: Cell::new(true),
        failures: Cell::new(0),
        last_event: Cell::new(0),
        source: RefCell::new(None),
        closed: RefCell::new(None),
        listeners: RefCell::new(Vec::new()),
        on_open: RefCell::new(None),
        on_error: RefCell::new(None),
    });
    let guard = SendWrapper::new(connection.clone());
    on_cleanup(move || {
        guard.alive.set(false);
        guard.close_source();
    });
    spawn_local(run(connection, store, app));
}

async fn run(connection: Rc<Connection>, store: ChatStore, app: AppState) {
    let failed = |connection: &Connection| {
        let failures = connection.failures.get() + 1;
        connection.failures.set(failures);
        backoff(failures)
    };
    while connection.alive.get() {
        let Some(token) = app.token() else {
            break;
        };
        store.link.set(if connection.failures.get() == 0 {
            Link::Connecting
        } else {
            Link::Reconnecting
        });
        let stream_token = match api::stream_token(&token, store.id).await {
            Ok(stream_token) => stream_token,
            Err(err) => {
                if !connection.alive.get() {
                    break;
                }
                match err {
                    ApiError::Status { status: 401, .. } => {
                        app.session_expired();
                        break;
                    }
                    ApiError::Status {
                        status: 404 | 405, ..
                    } => {
                        store.link.set(Link::Stopped);
                        break;
                    }
                    _ => {
                        util::sleep(failed(&connection)).await;
                        continue;
                    }
                }
            }
        };
        if !connection.alive.get() {
            break;
        }
        let url = api::events_url(store.id, &stream_token.token, connection.last_event.get());
        let Ok(source) = EventSource::new(&url) else {
            util::sleep(failed(&connection)).await;
            continue;
        };
        let (closed_tx, closed_rx) = oneshot::channel();
        *connection.closed.borrow_mut() = Some(closed_tx);
        attach(&connection, &source, store, app);
        *connection.source.borrow_mut() = Some(source);
        let _ = closed_rx.await;
        connection.listeners.borrow_mut().clear();
        if !connection.alive.get() {
            break;
        }
        store.link.set(Link::Reconnecting);
        util::sleep(failed(&connection)).await;
        // A fresh stream may have missed requests made outside any run.
        if connection.alive.get() {
            refresh_pending(store, app);
        }
    }
}

fn backoff(failures: u32) -> u32 {
    (250 * 2u32.saturating_pow(failures.min(6))).min(8_000)
}

fn attach(connection: &Rc<Connection>, source: &EventSource, store: ChatStore, app: AppState) {
    let mut listeners = connection.listeners.borrow_mut();
    for name in EVENT_NAMES {
        let weak = Rc::downgrade(connection);
        let listener = EventListener::new(move |event: MessageEvent| {
            let Some(connection) = weak.upgrade() else {
                return;
            };
            if !connection.alive.get() {
                return;
            }
            let Some(data) = event.data().as_string() else {
                return;
            };
            let Ok(event) = serde_json::from_str::<StreamEvent>(&data) else {
                return;
            };
            if event.id <= connection.last_event.get() {
                return;
            }
            connection.last_event.set(event.id);
            store.apply(event);
        });
        let _ = source.add_event_listener_with_callback(name, listener.as_ref().unchecked_ref());
        listeners.push(listener);
    }
    drop(listeners);

    let weak = Rc::downgrade(connection);
    let on_open = StateListener::new(move |_| {
        if let Some(connection) = weak.upgrade() {
            connection.failures.set(0);
        }
        store.link.set(Link::Live);
        app.reached();
    });
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    *connection.on_open.borrow_mut() = Some(on_open);

    let weak = Rc::downgrade(connection);
    let on_error = StateListener::new(move |_| {
        // The browser would retry with the same (maybe expired) token; we retry with a
        // fresh one and the last event id instead.
        if let Some(connection) = weak.upgrade() {
            connection.close_source();
        }
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    *connection.on_error.borrow_mut() = Some(on_error);
}

/// Asks for the conversation's pending requests (they also come back after a reload).
pub fn refresh_pending(store: ChatStore, app: AppState) {
    let Some(token) = app.token() else {
        return;
    };
    spawn_local(async move {
        match api::get_pending(&token, store.id).await {
            Ok(requests) => {
                for request in requests {
                    store.upsert_request(request);
                }
            }
            Err(err) => {
                app.report(&err);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn new_id() -> Uuid {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Uuid::from_u128(u128::from(NEXT.fetch_add(1, Ordering::Relaxed)))
    }

    fn event(id: i64, conversation: Uuid, kind: Value) -> StreamEvent {
        let mut body = json!({"id": id, "conversation_id": conversation});
        if let (Value::Object(body), Value::Object(kind)) = (&mut body, kind) {
            body.extend(kind);
        }
        serde_json::from_value(body).expect("event")
    }

    fn message(conversation: Uuid, seq: i32, role: &str, content: Value) -> Value {
        let _ = conversation;
        json!({"id": new_id(), "seq": seq, "role": role, "content": content,
               "created_at": "2025-01-01T00:00:00Z"})
    }

    fn request(conversation: Uuid, id: Uuid, status: &str) -> Value {
        json!({"id": id, "conversation_id": conversation, "tool_name": "t",
               "tool_call_id": "call_1", "tool_args": {}, "reason": "r", "fields": [],
               "save_for": "session", "status": status,
               "created_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-02T00:00:00Z"})
    }

    #[test]
    fn streamed_text_gives_way_to_the_stored_reply() {
        let id = new_id();
        let store = ChatStore::new(id);
        store.apply(event(
            1,
            id,
            json!({"type": "run_started", "model": "toolgate-offline"}),
        ));
        store.apply(event(2, id, json!({"type": "text_delta", "delta": "Hel"})));
        store.apply(event(3, id, json!({"type": "text_delta", "delta": "lo"})));
        assert_eq!(store.draft.get_untracked(), "Hello");
        assert!(store.is_busy());
        let reply = message(
            id,
            2,
            "assistant",
            json!([{"type": "text", "text": "Hello"}]),
        );
        store.apply(event(
            4,
            id,
            json!({"type": "message_added", "message": reply}),
        ));
        assert_eq!(store.draft.get_untracked(), "");
        assert_eq!(store.messages.with_untracked(Vec::len), 1);
    }

    #[test]
    fn the_same_message_twice_is_shown_once_in_order() {
        let id = new_id();
        let store = ChatStore::new(id);
        let second: Message =
            serde_json::from_value(message(id, 2, "assistant", json!([]))).expect("message");
        let first: Message =
            serde_json::from_value(message(id, 1, "user", json!([]))).expect("message");
        store.add_messages(vec![second.clone()]);
        store.add_messages(vec![first.clone(), second.clone()]);
        let seqs: Vec<i32> = store
            .messages
            .with_untracked(|m| m.iter().map(|m| m.seq).collect());
        assert_eq!(seqs, [1, 2]);
    }

    #[test]
    fn an_answered_request_never_turns_pending_again() {
        let id = new_id();
        let store = ChatStore::new(id);
        let request_id = new_id();
        let pending: InputRequest =
            serde_json::from_value(request(id, request_id, "pending")).expect("request");
        let done: InputRequest =
            serde_json::from_value(request(id, request_id, "completed")).expect("request");
        store.upsert_request(pending.clone());
        store.upsert_request(done);
        // A pending list fetched before the answer arrives late.
        store.upsert_request(pending);
        assert_eq!(
            store.requests.with_untracked(|r| r[0].status),
            RequestStatus::Completed
        );
        let other: InputRequest =
            serde_json::from_value(request(new_id(), new_id(), "pending")).expect("request");
        store.upsert_request(other);
        assert_eq!(
            store.requests.with_untracked(Vec::len),
            1,
            "another conversation's request is ignored"
        );
    }

    #[test]
    fn tool_calls_move_from_running_to_needing_input_to_done() {
        let id = new_id();
        let store = ChatStore::new(id);
        store.apply(event(
            1,
            id,
            json!({"type": "tool_call_started", "tool_call_id": "call_1", "name": "t",
                   "arguments": {"a": 1}}),
        ));
        assert_eq!(store.live_calls.with_untracked(Vec::len), 1);
        assert_eq!(
            store.tools.with_untracked(|t| t.get("call_1").cloned()),
            Some(ToolState::Running)
        );
        store.apply(event(
            2,
            id,
            json!({"type": "input_requested", "request": request(id, new_id(), "pending")}),
        ));
        assert_eq!(
            store.tools.with_untracked(|t| t.get("call_1").cloned()),
            Some(ToolState::NeedsInput)
        );
        store.apply(event(
            3,
            id,
            json!({"type": "tool_call_finished", "tool_call_id": "call_1", "name": "t",
                   "outcome": {"success": false, "error": "boom"}}),
        ));
        assert_eq!(
            store.tools.with_untracked(|t| t.get("call_1").cloned()),
            Some(ToolState::Failed("boom".into()))
        );
        // Once a stored message carries the call, it is no longer shown on its own.
        let call = message(
            id,
            2,
            "assistant",
            json!([{"type": "tool_call", "id": "call_1", "name": "t", "arguments": {}}]),
        );
        store.apply(event(
            4,
            id,
            json!({"type": "message_added", "message": call}),
        ));
        assert_eq!(store.live_calls.with_untracked(Vec::len), 0);
    }

    #[test]
    fn reconnecting_backs_off_but_not_forever() {
        assert_eq!(backoff(1), 500);
        assert!(backoff(3) > backoff(2));
        assert_eq!(backoff(50), 8_000);
    }
}
