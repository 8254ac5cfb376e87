//! Chat: messages, runs and the events of the per-conversation stream.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::{InputRequest, ToolOutcome};

/// One block of a message's content, as chat APIs use them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
// Wire types stay flat for readable (de)serialisation; messages are not hot enough in
// memory for the size of one variant to matter.
#[allow(clippy::large_enum_variant)]
pub enum ContentBlock {
    Text {
        text: String,
    },
    /// An image by URL (`https:` or a `data:` URL).
    Image {
        url: String,
    },
    /// Stands in for an image the model has already answered.
    ImageStub {
        text: String,
    },
    ToolCall {
        id: String,
        name: String,
        arguments: Map<String, Value>,
    },
    ToolResult {
        tool_call_id: String,
        name: String,
        outcome: ToolOutcome,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// A stored message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Message {
    pub id: Uuid,
    pub seq: i32,
    pub role: Role,
    pub content: Vec<ContentBlock>,
    /// The model that wrote an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl Message {
    /// The text blocks joined, for display and for the offline model.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageList {
    pub messages: Vec<Message>,
}

/// What the user posts: plain text, or content parts (text and images).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum PostContent {
    Text(String),
    Parts(Vec<PostPart>),
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PostPart {
    Text { text: String },
    Image { url: String },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    pub content: PostContent,
}

/// The answer to posting a message: a run started (202), or, for a `/context`
/// command, the reply written at once (200, `run_id` absent).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PostMessageResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    pub message: Message,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Message>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    WaitingForInput,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::WaitingForInput => "waiting_for_input",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "running" => Some(RunStatus::Running),
            "waiting_for_input" => Some(RunStatus::WaitingForInput),
            "completed" => Some(RunStatus::Completed),
            "failed" => Some(RunStatus::Failed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }

    pub fn is_active(self) -> bool {
        matches!(self, RunStatus::Running | RunStatus::WaitingForInput)
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Run {
    pub id: Uuid,
    pub conversation_id: Uuid,
    pub status: RunStatus,
    pub step: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// `GET /api/conversations/{id}`: the conversation and its active run, if any.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConversationDetail {
    pub conversation: crate::api::Conversation,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run: Option<Run>,
}

/// One event of a conversation's stream. On the wire (server-sent events) the SSE
/// `id` is [`StreamEvent::id`], the SSE `event` is the kind's name and `data` is this
/// whole object as JSON.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamEvent {
    /// Increases along a conversation's stream; resume with `?after=<id>` or
    /// `Last-Event-ID`.
    pub id: i64,
    pub conversation_id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
// Events are built, sent and dropped one at a time; boxing a variant would only make
// matching on them clumsier.
#[allow(clippy::large_enum_variant)]
pub enum EventKind {
    RunStarted {
        model: String,
    },
    /// A piece of the assistant's text as it is written.
    TextDelta {
        delta: String,
    },
    /// A message was stored (the user's, a finished assistant reply, a tool result).
    MessageAdded {
        message: Message,
    },
    ToolCallStarted {
        tool_call_id: String,
        name: String,
        arguments: Map<String, Value>,
    },
    ToolCallFinished {
        tool_call_id: String,
        name: String,
        outcome: ToolOutcome,
    },
    InputRequested {
        request: InputRequest,
    },
    /// A request was completed, cancelled or expired.
    InputResolved {
        request: InputRequest,
    },
    /// The run's status changed (waiting_for_input, running again, completed, failed).
    RunStatus {
        run: Run,
    },
}

impl EventKind {
    /// The SSE event name.
    pub fn name(&self) -> &'static str {
        match self {
            EventKind::RunStarted { .. } => "run_started",
            EventKind::TextDelta { .. } => "text_delta",
            EventKind::MessageAdded { .. } => "message_added",
            EventKind::ToolCallStarted { .. } => "tool_call_started",
            EventKind::ToolCallFinished { .. } => "tool_call_finished",
            EventKind::InputRequested { .. } => "input_requested",
            EventKind::InputResolved { .. } => "input_resolved",
            EventKind::RunStatus { .. } => "run_status",
        }
    }
}

/// A short-lived token for the event stream, which the browser's `EventSource` opens
/// without headers: `GET /api/conversations/{id}/events?token=…`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamToken {
    pub token: String,
    pub expires_at: DateTime<Utc>,
}

/// `GET /api/info`: what a client needs before signing in.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ServerInfo {
    pub version: String,
    pub dev_auth: bool,
    /// `offline` (the built-in model) or `openai-compatible`.
    pub model_provider: String,
    pub model: String,
}
