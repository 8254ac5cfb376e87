//! What the page knows of one conversation (messages, live tool calls, requests, the
//! run), and how each stream event changes it.

use std::collections::HashMap;

use leptos::prelude::*;
use protocol::api::{InputRequest, RequestKind, RequestStatus, ToolOutcome};
use protocol::chat::{ContentBlock, EventKind, Message, Role, Run, RunStatus, StreamEvent};
use serde_json::{Map, Value};
use uuid::Uuid;

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
    /// The server ended the stream because the conversation was deleted (elsewhere).
    Deleted,
}

impl Link {
    /// The state's name, as the page marks it (`data-state`).
    pub fn name(self) -> &'static str {
        match self {
            Link::Connecting => "connecting",
            Link::Live => "live",
            Link::Reconnecting => "reconnecting",
            Link::Stopped => "stopped",
            Link::Deleted => "deleted",
        }
    }
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

/// The tool calls (id and tool name) that appear in stored messages.
pub fn stored_calls(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter_map(|block| match block {
            ContentBlock::ToolCall { id, name, .. } => Some((id.clone(), name.clone())),
            _ => None,
        })
        .collect()
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

    /// A card's request as it is now, and the status it shows: pending past its expiry
    /// counts as expired (`now_ms` ticks), even before the server says so.
    pub fn watch_request(
        &self,
        request_id: Uuid,
        now_ms: RwSignal<f64>,
    ) -> (Memo<Option<InputRequest>>, Memo<RequestStatus>) {
        let requests = self.requests;
        let request = Memo::new(move |_| {
            requests.with(|requests| requests.iter().find(|r| r.id == request_id).cloned())
        });
        let status = Memo::new(move |_| {
            let Some(request) = request.get() else {
                return RequestStatus::Expired;
            };
            if request.status == RequestStatus::Pending
                && crate::clock::millis(&request.expires_at) <= now_ms.get()
            {
                RequestStatus::Expired
            } else {
                request.status
            }
        });
        (request, status)
    }

    /// Puts a changed message (pinned or unpinned) in place of the one shown.
    pub fn replace_message(&self, changed: Message) {
        self.messages.update(|messages| {
            if let Some(shown) = messages.iter_mut().find(|m| m.id == changed.id) {
                *shown = changed;
            }
        });
    }

    /// The conversation's messages as the server holds them now (its list): those the
    /// stream showed already take this newer state (a pin may have changed since the
    /// event was written), the others are added.
    pub fn add_current_messages(&self, current: Vec<Message>) {
        for message in &current {
            self.replace_message(message.clone());
        }
        self.add_messages(current);
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
            // Inserted in place rather than sorted: each sort instantiation costs the
            // bundle kilobytes.
            for message in incoming {
                if !messages.iter().any(|m| m.id == message.id) {
                    let at = messages.partition_point(|m| m.seq <= message.seq);
                    messages.insert(at, message);
                }
            }
        });
        let known = self
            .messages
            .with_untracked(|messages| stored_calls(messages));
        let stored = |call: &LiveCall| known.iter().any(|(id, _)| *id == call.id);
        if self
            .live_calls
            .with_untracked(|calls| calls.iter().any(stored))
        {
            self.live_calls.update(|calls| calls.retain(|c| !stored(c)));
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

    /// Whether the call `request` names is on the page as a call of another tool.
    fn call_of_another_tool(&self, request: &InputRequest) -> bool {
        let id = request.call_id();
        let live = self.live_calls.with_untracked(|calls| {
            calls
                .iter()
                .find(|c| c.id == id)
                .map(|c| c.name != request.tool_name)
        });
        live.unwrap_or_else(|| {
            self.messages.with_untracked(|messages| {
                stored_calls(messages)
                    .iter()
                    .any(|(stored, name)| stored == id && *name != request.tool_name)
            })
        })
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
                // A request under the id of a call of another tool says nothing of
                // that call.
                if request.status == RequestStatus::Pending && !self.call_of_another_tool(&request)
                {
                    let state = match request.kind {
                        RequestKind::Input => ToolState::NeedsInput,
                        RequestKind::Approval => ToolState::NeedsApproval,
                    };
                    self.tools.update(|tools| {
                        tools.insert(request.call_id().to_owned(), state);
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
            // The card's own change arrives as `input_resolved`; this only says the
            // server has finished its side.
            EventKind::ElicitationCompleted { .. } => {}
        }
    }
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
        crate::wire::event(&body.to_string()).expect("event")
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
    fn the_list_read_after_the_stream_keeps_a_pin_the_stream_never_saw() {
        let id = new_id();
        let store = ChatStore::new(id);
        let as_added: Message =
            serde_json::from_value(message(id, 1, "user", json!([]))).expect("message");
        store.add_messages(vec![as_added.clone()]);
        let pinned_since = Message {
            pinned: true,
            ..as_added
        };
        store.add_current_messages(vec![pinned_since]);
        let shown: Vec<bool> = store
            .messages
            .with_untracked(|m| m.iter().map(|m| m.pinned).collect());
        assert_eq!(shown, [true]);
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
}
