//! Chat: messages, runs and the events of the per-conversation stream.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::{InputRequest, ToolOutcome};

/// One block of a message's content, as chat APIs use them.
///
/// Read by hand ([`ContentBlock::deserialize`]) in one pass over the block's fields:
/// serde's derived reader for an internally tagged enum buffers each block whole before
/// reading it, which costs time on every stored message a step loads and code size in
/// the web chat.
#[derive(Clone, Debug, PartialEq, Serialize)]
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

impl<'de> Deserialize<'de> for ContentBlock {
    /// Reads `{"type": …, …the variant's fields}` as the derived reader would: an
    /// unknown `type` or a missing field is an error naming it; other fields are ignored.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Kind {
            Text,
            Image,
            ImageStub,
            ToolCall,
            ToolResult,
        }
        /// Every field of every kind of block.
        #[derive(Deserialize)]
        struct Fields {
            #[serde(rename = "type")]
            kind: Kind,
            text: Option<String>,
            url: Option<String>,
            id: Option<String>,
            name: Option<String>,
            arguments: Option<Map<String, Value>>,
            tool_call_id: Option<String>,
            outcome: Option<ToolOutcome>,
        }
        fn required<T, E: serde::de::Error>(value: Option<T>, field: &'static str) -> Result<T, E> {
            value.ok_or_else(|| E::missing_field(field))
        }
        let fields = Fields::deserialize(deserializer)?;
        Ok(match fields.kind {
            Kind::Text => ContentBlock::Text {
                text: required(fields.text, "text")?,
            },
            Kind::Image => ContentBlock::Image {
                url: required(fields.url, "url")?,
            },
            Kind::ImageStub => ContentBlock::ImageStub {
                text: required(fields.text, "text")?,
            },
            Kind::ToolCall => ContentBlock::ToolCall {
                id: required(fields.id, "id")?,
                name: required(fields.name, "name")?,
                arguments: required(fields.arguments, "arguments")?,
            },
            Kind::ToolResult => ContentBlock::ToolResult {
                tool_call_id: required(fields.tool_call_id, "tool_call_id")?,
                name: required(fields.name, "name")?,
                outcome: required(fields.outcome, "outcome")?,
            },
        })
    }
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
    /// Pinned by the user: kept verbatim in the model's context, never trimmed or
    /// summarised away. (The conversation's first request is always kept so, pinned or
    /// not.)
    #[serde(default)]
    pub pinned: bool,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
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

    /// A chat command the server answered itself (see [`command_text`]): never part of
    /// the model's context, and never the request that sets the conversation's task.
    pub fn is_command(&self) -> bool {
        self.role == Role::User && command_text(&self.content).is_some()
    }
}

/// The chat commands the server answers itself, at once.
pub const COMMANDS: [&str; 5] = ["/context", "/remember", "/help", "/pin", "/unpin"];

/// The command a user's message gives, if it is one: text alone (a message with an
/// image is for the model, whatever its words) whose first word is one of
/// [`COMMANDS`]; its text blocks joined as [`Message::text`] joins them.
pub fn command_text(content: &[ContentBlock]) -> Option<String> {
    let mut texts = Vec::with_capacity(content.len());
    for block in content {
        match block {
            ContentBlock::Text { text } => texts.push(text.as_str()),
            _ => return None,
        }
    }
    let text = texts.join("\n");
    let first = text.split_whitespace().next()?;
    COMMANDS.contains(&first).then_some(text)
}

/// Whether a text-only message whose words (text blocks joined as [`command_text`]
/// joins them) begin with `head` is a command, as [`command_text`] decides; `whole` when
/// `head` is all of them. `None` when a cut `head` is too short to tell.
pub fn is_command_start(head: &str, whole: bool) -> Option<bool> {
    let rest = head.trim_start();
    match rest.find(char::is_whitespace) {
        Some(end) => Some(COMMANDS.contains(&&rest[..end])),
        None if whole => Some(COMMANDS.contains(&rest)),
        None => {
            let longest = COMMANDS.iter().map(|c| c.len()).max().unwrap_or(0);
            (rest.len() > longest).then_some(false)
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct MessageList {
    /// One page of the messages, in order.
    pub messages: Vec<Message>,
    /// More messages may follow: ask again with `after_seq` set to this (the last
    /// message's `seq`). Absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_after_seq: Option<i32>,
}

/// What the user posts: plain text, or content parts (text and images).
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum PostContent {
    Text(String),
    Parts(Vec<PostPart>),
}

// Written by hand rather than `untagged`, which drops what was wrong with a part
// ("did not match any variant"): a part's own error reaches the caller, at its index.
impl<'de> Deserialize<'de> for PostContent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Content;
        impl<'de> serde::de::Visitor<'de> for Content {
            type Value = PostContent;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a text or a list of content parts")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<PostContent, E> {
                Ok(PostContent::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<PostContent, E> {
                Ok(PostContent::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<PostContent, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = seq.next_element()? {
                    parts.push(part);
                }
                Ok(PostContent::Parts(parts))
            }
        }
        deserializer.deserialize_any(Content)
    }
}

/// Longest text of a message, or of one text part of it, in characters.
pub const MAX_TEXT_CHARS: usize = 20_000;
/// Most images one message may carry.
pub const MAX_IMAGES: usize = 4;
/// Most parts (texts and images) one message may have.
pub const MAX_PARTS: usize = 8;

/// A JSON Schema pattern met by text with no NUL character (Postgres cannot store it)
/// and at least one character that is not white space (as Rust's `char::is_whitespace`
/// has it), i.e. text that is not blank once trimmed.
pub const NOT_BLANK_PATTERN: &str = "^[^\\x00]*[^\\x00\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\x00]*$";

/// The JSON Schema of [`PostContent`], written by hand: an untagged enum of a bare
/// string and a list, with limits on the string and on how many parts are images
/// (`maxContains`, which utoipa's types cannot carry, so the served document uses this).
#[cfg(feature = "openapi")]
pub fn post_content_schema() -> Value {
    {
        serde_json::json!({
            "description": "Plain text, or content parts (text and images). Not blank; at most \
                8 parts, of which at most 4 images.",
            "oneOf": [
                {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_TEXT_CHARS,
                    "pattern": NOT_BLANK_PATTERN,
                    "example": "Show me the P&L for last quarter",
                },
                {
                    "type": "array",
                    "items": {
                        "oneOf": [
                            {
                                "type": "object",
                                "properties": {
                                    "type": { "type": "string", "enum": ["text"] },
                                    "text": {
                                        "type": "string",
                                        "minLength": 1,
                                        "maxLength": MAX_TEXT_CHARS,
                                        "pattern": NOT_BLANK_PATTERN,
                                    },
                                },
                                "required": ["type", "text"],
                                "additionalProperties": false,
                            },
                            {
                                "type": "object",
                                "description": "An `http(s)` URL or a `data:image/…` URL.",
                                "properties": {
                                    "type": { "type": "string", "enum": ["image"] },
                                    "url": { "type": "string", "pattern": "^(https?://|data:image/)" },
                                },
                                "required": ["type", "url"],
                                "additionalProperties": false,
                            },
                        ],
                    },
                    "minItems": 1,
                    "maxItems": MAX_PARTS,
                    "contains": {
                        "type": "object",
                        "properties": { "type": { "const": "image" } },
                        "required": ["type"],
                    },
                    "minContains": 0,
                    "maxContains": MAX_IMAGES,
                },
            ],
        })
    }
}

#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for PostContent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::RefOr::T(serde_json::from_value(post_content_schema()).unwrap_or_default())
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for PostContent {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        schemas.push((
            <PostPart as utoipa::ToSchema>::name().into_owned(),
            <PostPart as utoipa::PartialSchema>::schema(),
        ));
        <PostPart as utoipa::ToSchema>::schemas(schemas);
    }
}

/// One part of a posted message. A text part must not be blank.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum PostPart {
    Text {
        #[cfg_attr(
            feature = "openapi",
            schema(
                min_length = 1,
                max_length = 20000,
                pattern = "^[^\\x00]*[^\\x00\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\x00]*$"
            )
        )]
        text: String,
    },
    /// An `http(s)` URL or a `data:image/…` URL.
    Image {
        #[cfg_attr(feature = "openapi", schema(pattern = "^(https?://|data:image/)"))]
        url: String,
    },
}

// Read by hand: serde's internally tagged enums also take a variant's number as its
// tag (`"type": 0`), which the document rightly calls invalid.
impl<'de> Deserialize<'de> for PostPart {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        enum Kind {
            Text,
            Image,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Written {
            #[serde(rename = "type")]
            kind: String,
            #[serde(default)]
            text: Option<String>,
            #[serde(default)]
            url: Option<String>,
        }
        let written = Written::deserialize(deserializer)?;
        let kind = match written.kind.as_str() {
            "text" => Kind::Text,
            "image" => Kind::Image,
            other => {
                return Err(serde::de::Error::unknown_variant(other, &["text", "image"]));
            }
        };
        match (kind, written.text, written.url) {
            (Kind::Text, Some(text), None) => Ok(PostPart::Text { text }),
            (Kind::Image, None, Some(url)) => Ok(PostPart::Image { url }),
            (Kind::Text, _, _) => Err(serde::de::Error::custom(
                "a text part has `text` and nothing else",
            )),
            (Kind::Image, _, _) => Err(serde::de::Error::custom(
                "an image part has `url` and nothing else",
            )),
        }
    }
}

/// Pins (or unpins) one of the user's own messages: a pinned message is kept verbatim in
/// the model's context, never trimmed or summarised away.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PinMessage {
    pub pinned: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct PostMessage {
    pub content: PostContent,
    /// A key the client picks for this message: a fresh UUID for each message, kept
    /// while the same message is sent again. Posting again under a key the conversation
    /// already holds posts nothing and answers as the first post did (its message, and
    /// its run or command reply); under it with other content, a 422.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<Uuid>,
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
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
    pub created_at: DateTime<Utc>,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
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
    /// An MCP server said the interaction behind a URL-mode request is complete.
    ElicitationCompleted {
        request_id: Uuid,
        tool_call_id: String,
    },
}

/// The SSE event a stream sends last when the token that opened it expires, just
/// before it ends (its data: [`STREAM_EXPIRED_DATA`]). A client that gets it opens the
/// stream again with a fresh token and `after`, with no need to say it lost the
/// connection.
pub const STREAM_EXPIRED_EVENT: &str = "expired";

/// The data of [`STREAM_EXPIRED_EVENT`]: why the stream ends.
pub const STREAM_EXPIRED_DATA: &str = r#"{"reason":"token_expired"}"#;

/// The SSE event a stream sends last when its conversation has been deleted (in another
/// tab, or by another client), just before it ends (its data: [`STREAM_DELETED_DATA`]).
/// Opening the stream again would answer 404.
pub const STREAM_DELETED_EVENT: &str = "deleted";

/// The data of [`STREAM_DELETED_EVENT`]: why the stream ends.
pub const STREAM_DELETED_DATA: &str = r#"{"reason":"conversation_deleted"}"#;

impl EventKind {
    /// Every SSE event name, for clients that register a listener per name.
    pub const NAMES: [&'static str; 9] = [
        "run_started",
        "text_delta",
        "message_added",
        "tool_call_started",
        "tool_call_finished",
        "input_requested",
        "input_resolved",
        "run_status",
        "elicitation_completed",
    ];

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
            EventKind::ElicitationCompleted { .. } => "elicitation_completed",
        }
    }
}

/// A short-lived token for the event stream, which the browser's `EventSource` opens
/// without headers: `GET /api/conversations/{id}/events?token=…`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StreamToken {
    pub token: String,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
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
    /// What one request's fields and values may hold on this server; the card checks
    /// the same.
    #[serde(default)]
    pub input_limits: crate::fields::InputLimits,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_of_a_messages_words_tells_a_command_as_the_whole_does() {
        let texts = [
            "/pin",
            "  /help me",
            "/remember\tI use vim",
            "/helpful advice",
            "/he",
            "\u{3000}/unpin",
            "please /pin",
            "",
            "   ",
            "/context pipeline show",
            "/pinned: a forged mark",
        ];
        for text in texts {
            let whole = command_text(&[ContentBlock::Text { text: text.into() }]).is_some();
            let chars: Vec<char> = text.chars().collect();
            for cut in 0..=chars.len() {
                let head: String = chars[..cut].iter().collect();
                let told = is_command_start(&head, cut == chars.len());
                assert!(
                    told.is_none_or(|told| told == whole),
                    "{text:?} cut at {cut}: {told:?}, the whole says {whole}"
                );
            }
            assert_eq!(is_command_start(text, true), Some(whole), "{text:?}");
        }
        // A long first word tells at once that it is none.
        assert_eq!(is_command_start("/rememberedthings", false), Some(false));
    }

    #[test]
    fn event_names_are_the_wire_tags_and_all_listed() {
        let events = [
            EventKind::RunStarted { model: "m".into() },
            EventKind::TextDelta { delta: "d".into() },
            EventKind::ToolCallStarted {
                tool_call_id: "c".into(),
                name: "t".into(),
                arguments: Map::new(),
            },
            EventKind::ElicitationCompleted {
                request_id: Uuid::nil(),
                tool_call_id: "c".into(),
            },
        ];
        for event in events {
            let tag = serde_json::to_value(&event).expect("json")["type"].clone();
            assert_eq!(tag, event.name());
            assert!(EventKind::NAMES.contains(&event.name()));
        }
        let mut names = EventKind::NAMES.to_vec();
        names.dedup();
        assert_eq!(names.len(), EventKind::NAMES.len());
    }

    /// The hand-written reader of a content block reads what it writes, refuses what the
    /// derived one refused, and ignores the fields of other kinds.
    #[test]
    fn content_blocks_read_back_what_they_write() {
        let blocks = vec![
            ContentBlock::Text { text: "hi".into() },
            ContentBlock::Image {
                url: "https://example.com/a.png".into(),
            },
            ContentBlock::ImageStub {
                text: "[image]".into(),
            },
            ContentBlock::ToolCall {
                id: "c1".into(),
                name: "lookup".into(),
                arguments: serde_json::json!({"q": [1, {"type": "text"}]})
                    .as_object()
                    .cloned()
                    .expect("object"),
            },
            ContentBlock::ToolResult {
                tool_call_id: "c1".into(),
                name: "lookup".into(),
                outcome: ToolOutcome::ok(serde_json::json!({"n": 2})),
            },
        ];
        let text = serde_json::to_string(&blocks).expect("json");
        let read: Vec<ContentBlock> = serde_json::from_str(&text).expect("read back");
        assert_eq!(read, blocks);
        let read: Vec<ContentBlock> =
            serde_json::from_value(serde_json::from_str(&text).expect("value")).expect("value");
        assert_eq!(read, blocks);

        let extra: ContentBlock =
            serde_json::from_str(r#"{"text": "a", "url": "b", "type": "text", "later": 1}"#)
                .expect("extra fields are ignored");
        assert_eq!(extra, ContentBlock::Text { text: "a".into() });
        for (text, names) in [
            (r#"{"text": "a"}"#, "missing field `type`"),
            (
                r#"{"type": "video", "url": "a"}"#,
                "unknown variant `video`",
            ),
            (r#"{"type": "image", "text": "a"}"#, "missing field `url`"),
            (
                r#"{"type": "tool_call", "id": "c", "name": "t"}"#,
                "missing field `arguments`",
            ),
            (r#"{"type": "text", "text": 5}"#, "invalid type"),
        ] {
            let err = serde_json::from_str::<ContentBlock>(text).expect_err(text);
            assert!(err.to_string().contains(names), "{text}: {err}");
        }
    }
}
