//! Request and response bodies of the public HTTP API.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::approval::{ApprovalSpec, Decision};
use crate::fields::{FieldSpec, InputRequestSpec, SaveFor};

/// Every error the API returns: `{ "error": { "code", "message", "fields"? } }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `validation_failed`, `not_found`.
    pub code: String,
    pub message: String,
    /// Field name (or JSON path) → what is wrong with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fields: Option<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DevTokenRequest {
    /// 1 to 128 of letters, digits and `_ - . @`, optionally surrounded by white space.
    #[cfg_attr(
        feature = "openapi",
        schema(
            example = "alice",
            pattern = "^[\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]*[A-Za-z0-9_.@-]{1,128}[\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]*$"
        )
    )]
    pub user_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DevTokenResponse {
    pub token: String,
    pub user_id: String,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
    pub expires_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewConversation {
    #[serde(default)]
    /// Blank or absent: "New conversation".
    #[cfg_attr(
        feature = "openapi",
        schema(
            max_length = 200,
            pattern = "^[^\\x00]*$",
            example = "Quarterly numbers"
        )
    )]
    pub title: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Conversation {
    pub id: Uuid,
    pub title: String,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConversationList {
    /// One page of the conversations, most recently active first.
    pub conversations: Vec<Conversation>,
    /// More conversations may follow: ask again with `before` set to this. Absent on
    /// the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_before: Option<String>,
}

/// Where a request stands. `pending` moves exactly once to one of the others:
/// input requests end `completed`, `declined`, `cancelled`, `expired` or `abandoned`;
/// approval requests end `approved`, `rejected`, `cancelled`, `expired` or `abandoned`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RequestStatus {
    Pending,
    /// The user gave the values.
    Completed,
    /// The user said they will not give the values.
    Declined,
    /// The user let the call run (as it was, or edited).
    Approved,
    /// The user refused the call.
    Rejected,
    /// The user dismissed the card without an answer.
    Cancelled,
    /// Nobody answered in time.
    Expired,
    /// The run that asked ended before anyone answered.
    Abandoned,
}

impl RequestStatus {
    pub const ALL: [RequestStatus; 8] = [
        RequestStatus::Pending,
        RequestStatus::Completed,
        RequestStatus::Declined,
        RequestStatus::Approved,
        RequestStatus::Rejected,
        RequestStatus::Cancelled,
        RequestStatus::Expired,
        RequestStatus::Abandoned,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Completed => "completed",
            RequestStatus::Declined => "declined",
            RequestStatus::Approved => "approved",
            RequestStatus::Rejected => "rejected",
            RequestStatus::Cancelled => "cancelled",
            RequestStatus::Expired => "expired",
            RequestStatus::Abandoned => "abandoned",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        RequestStatus::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// What a request asks of the user: values for fields, or a yes to a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RequestKind {
    #[default]
    Input,
    Approval,
}

impl RequestKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Input => "input",
            RequestKind::Approval => "approval",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "input" => Some(RequestKind::Input),
            "approval" => Some(RequestKind::Approval),
            _ => None,
        }
    }
}

/// A stored tool user input request, as callers see it. Secret values in
/// `user_inputs` are always masked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputRequest {
    pub id: Uuid,
    pub conversation_id: Uuid,
    #[serde(default)]
    pub run_id: Option<Uuid>,
    pub tool_name: String,
    pub tool_call_id: String,
    pub tool_args: Value,
    pub reason: String,
    pub fields: Vec<FieldSpec>,
    pub save_for: SaveFor,
    #[serde(default)]
    pub user_inputs: Option<Map<String, Value>>,
    pub status: RequestStatus,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
    pub created_at: DateTime<Utc>,
    /// When the request was answered or otherwise ended.
    #[serde(default, deserialize_with = "crate::timestamp::deserialize_option")]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
    pub expires_at: DateTime<Utc>,
    /// `input` (fill in fields) or `approval` (allow a call with `tool_args`).
    #[serde(default)]
    pub kind: RequestKind,
    /// Approval: the answers the card offers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_decisions: Vec<Decision>,
    /// Approval: SHA-256 of the exact arguments being approved; send it back with the
    /// decision so a decision only ever covers what was shown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_digest: Option<String>,
    /// Approval: toolgate's own words beside the reason (which are the operator's or a
    /// caller's): arguments the tool's server may read as left out and run with its
    /// defaults instead, and defaults it fills in that the card does not show. Names and
    /// values in it are the server's, written out and quoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Approval: the tool's argument schema, for editing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_schema: Option<Value>,
    /// Approval: what the user decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The user's words with a rejection or a decline, passed on to the model; or why
    /// the request ended without an answer (its MCP server went away).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Present when an MCP server asked, through elicitation, while one of its tools ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation: Option<Elicitation>,
    /// Made by a caller of the API (`create_request`), who chose all it says: not asked
    /// by a tool of the chat. What is given on it fills no field only the user fills.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_api: bool,
}

impl InputRequest {
    /// The tool call this request holds up: for an MCP server's question, the call
    /// of the server's tool that asked (the request's own `tool_call_id` names the
    /// question, since one call may ask several).
    pub fn call_id(&self) -> &str {
        self.elicitation
            .as_ref()
            .map_or(&self.tool_call_id, |e| &e.tool_call_id)
    }

    /// Whether this request is about the call `id` of the tool `name`: its id alone is
    /// not enough, since a caller of the action API may give a request any id no other
    /// request has, a call's of another tool included.
    pub fn belongs_to(&self, id: &str, name: &str) -> bool {
        self.call_id() == id && self.tool_name == name
    }

    /// An MCP server's question in URL mode: a page to open, nothing to type.
    pub fn is_link(&self) -> bool {
        self.elicitation
            .as_ref()
            .is_some_and(|e| e.mode == ElicitationMode::Url)
    }
}

/// How an MCP server asks the user something while its tool runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ElicitationMode {
    /// Values for the request's fields.
    #[default]
    Form,
    /// A page to open outside the chat (sign-in, payment); nothing is typed here.
    Url,
}

/// Where an elicitation came from and, in URL mode, where it leads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Elicitation {
    /// The MCP server that is asking, as named in the tools file.
    pub server: String,
    pub mode: ElicitationMode,
    /// The tool call that is waiting for the answer.
    pub tool_call_id: String,
    /// URL mode: the page to open, only on the user's click.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// URL mode: the server's id for the interaction, named again when it completes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elicitation_id: Option<String>,
}

/// `create_request`: fields are read one by one so a bad definition is reported
/// against its own name.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRequestParams {
    pub conversation_id: Uuid,
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_name: String,
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_call_id: String,
    #[cfg_attr(
        feature = "openapi",
        schema(
            pattern = "^[^\\x00]*[^\\x00\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000][^\\x00]*$",
            max_length = 2000,
            example = "QuickBooks API requests require your Company ID (Realm ID)"
        )
    )]
    /// Why the user is asked, shown on the card: at most 2,000 characters as sent and
    /// once its hidden and look-alike characters are written out (`⟨U+200B⟩`).
    pub reason: String,
    /// What to ask; each definition is checked on its own, and a bad one is refused
    /// (422) under its own name.
    #[cfg_attr(
        feature = "openapi",
        schema(value_type = Vec<FieldSpec>, min_items = 1, max_items = 64)
    )]
    pub fields: Vec<Value>,
    #[serde(default)]
    pub save_for_session: bool,
    #[serde(default)]
    pub save_for: Option<SaveFor>,
    /// The arguments of the call the card is for, shown with it; at most 64 KiB as
    /// JSON (422 under `tool_args` beyond that).
    #[serde(default)]
    pub tool_args: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitResponseParams {
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_call_id: String,
    pub user_inputs: Map<String, Value>,
}

/// `submit_decision`: the user's answer to an approval request.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitDecisionParams {
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_call_id: String,
    pub decision: Decision,
    /// `edit`: the arguments to run with instead, checked against the tool's schema and
    /// fields.
    #[serde(default)]
    pub arguments: Option<Map<String, Value>>,
    /// `reject`: why, for the model.
    #[serde(default)]
    pub message: Option<String>,
    /// The `arguments_digest` the card showed; refused (409) when the request's
    /// arguments are no longer those.
    #[serde(default)]
    pub arguments_digest: Option<String>,
}

/// `decline_request`: the user will not give the values; `message` is passed to the
/// model.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeclineRequestParams {
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_call_id: String,
    #[serde(default)]
    pub message: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ConversationParams {
    pub conversation_id: Uuid,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ToolCallParams {
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_call_id: String,
}

/// The answer to `submit_response`: the completed request and, when the executor had
/// asked for the values, the outcome of retrying the tool with them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SubmitResponseResult {
    pub request: InputRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_result: Option<ToolOutcome>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingRequests {
    pub requests: Vec<InputRequest>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SavedScope {
    Session,
    User,
}

/// A remembered value. Secret values are masked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SavedValue {
    pub name: String,
    /// The field's label when it was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    pub value: Value,
    pub is_secret: bool,
    pub scope: SavedScope,
    /// The tool it was given to; only that tool receives it, unless `memory_key` says
    /// it is shared. Absent on a value kept from before values were bound to tools
    /// that no single tool claims: it is shown, never used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// The key tools share it under, when the field declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_key: Option<String>,
    /// Names this value (with `scope`) for `delete_saved_value`.
    pub key: String,
    #[serde(deserialize_with = "crate::timestamp::deserialize")]
    pub updated_at: DateTime<Utc>,
}

/// `delete_saved_value`: forget one remembered value, of this conversation or
/// user-wide.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct DeleteSavedValueParams {
    pub conversation_id: Uuid,
    pub scope: SavedScope,
    /// The value's `key`, as `get_session_values` lists it.
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub key: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SessionValues {
    pub conversation_id: Uuid,
    pub values: Vec<SavedValue>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ClearedValues {
    pub conversation_id: Uuid,
    pub cleared: u64,
}

/// `POST /api/tools/execute`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ExecuteToolParams {
    pub conversation_id: Uuid,
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_name: String,
    #[cfg_attr(
        feature = "openapi",
        schema(
            min_length = 1,
            max_length = 200,
            pattern = "^[^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb][^\\x00-\\x1f\\x7f-\\x9f\\xad\\u034f\\u0600-\\u0605\\u061c\\u06dd\\u070f\\u0890\\u0891\\u08e2\\u115f\\u1160\\u17b4\\u17b5\\u180b-\\u180f\\u200b-\\u200f\\u2028-\\u202e\\u2060-\\u206f\\u2800\\u3164\\ufe00-\\ufe0d\\ufeff\\uffa0\\ufff0-\\ufffb]*$"
        )
    )]
    pub tool_call_id: String,
    /// At most 64 KiB as JSON (422 under `arguments` beyond that).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    #[serde(default)]
    pub original_user_request: Option<String>,
}

/// What a tool call came to, in the seed's shape.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolOutcome {
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_user_input: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_input_request: Option<InputRequest>,
    /// The call waits for the user's approval; `approval_request` is the stored request.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub requires_approval: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_request: Option<InputRequest>,
}

impl ToolOutcome {
    /// The call waits for the user: for values or for approval.
    pub fn is_waiting(&self) -> bool {
        self.requires_user_input || self.requires_approval
    }

    /// The request the call waits on, if it waits.
    pub fn waiting_on(&self) -> Option<&InputRequest> {
        self.user_input_request
            .as_ref()
            .or(self.approval_request.as_ref())
    }

    pub fn ok(result: Value) -> Self {
        ToolOutcome {
            success: true,
            result: Some(result),
            ..ToolOutcome::default()
        }
    }

    pub fn failed(error: impl Into<String>) -> Self {
        ToolOutcome {
            success: false,
            error: Some(error.into()),
            ..ToolOutcome::default()
        }
    }
}

/// Where a tool comes from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ToolOrigin {
    /// Part of toolgate.
    Builtin,
    /// Defined in the tools file.
    #[default]
    ToolsFile,
    /// Offered by an MCP server named in the tools file.
    Mcp,
}

/// A tool as `GET /api/tools` lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_user_input: Option<InputRequestSpec>,
    /// When calls wait for the user's approval; absent when they never do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requires_approval: Option<ApprovalSpec>,
    pub kind: String,
    #[serde(default)]
    pub origin: ToolOrigin,
    /// The MCP server the tool comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    pub enabled: bool,
    /// Whether a call can run now: enabled, configured, and its server (if any) reached.
    #[serde(default)]
    pub available: bool,
    /// Why the tool cannot run now, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
}

/// What the web chat reads of `GET /api/tools`: which MCP server each tool comes from.
/// Reading only this keeps the tools' full descriptions (schemas, fields, rules) out of
/// the browser's decoder; a test keeps it in step with [`ToolList`].
#[derive(Clone, Debug, Deserialize)]
pub struct ToolServers {
    pub tools: Vec<ToolServer>,
}

/// One tool of [`ToolServers`].
#[derive(Clone, Debug, Deserialize)]
pub struct ToolServer {
    pub name: String,
    /// The MCP server the tool comes from; none for the tools file's own.
    #[serde(default)]
    pub server: Option<String>,
}

/// Where toolgate stands with an MCP server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum McpServerStatus {
    /// Not yet reached since start-up.
    Connecting,
    /// Reached; its tools are listed.
    Connected,
    /// Down or failing; toolgate retries with backoff.
    Unavailable,
    /// Switched off in the tools file.
    Disabled,
}

/// An MCP server of the tools file, as `GET /api/tools` lists it.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct McpServerInfo {
    pub name: String,
    /// `stdio` or `http`.
    pub transport: String,
    pub status: McpServerStatus,
    /// Why it is unavailable, in words any caller may see.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The protocol revision agreed with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    /// How many of its tools are listed.
    pub tools: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolList {
    pub tools: Vec<ToolInfo>,
    /// The MCP servers of the tools file, reached or not.
    #[serde(default)]
    pub servers: Vec<McpServerInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str, server: Option<&str>) -> ToolInfo {
        ToolInfo {
            name: name.to_owned(),
            description: "d".to_owned(),
            parameters: serde_json::json!({"type": "object"}),
            requires_user_input: None,
            requires_approval: None,
            kind: "mcp".to_owned(),
            origin: ToolOrigin::default(),
            server: server.map(str::to_owned),
            enabled: true,
            available: true,
            unavailable_reason: None,
        }
    }

    #[test]
    fn a_tool_listing_reads_as_its_tools_servers() {
        let list = ToolList {
            tools: vec![tool("lookup", None), tool("files__read", Some("files"))],
            servers: Vec::new(),
        };
        let text = serde_json::to_string(&list).expect("listing");
        let servers: ToolServers = serde_json::from_str(&text).expect("servers");
        let read: Vec<(String, Option<String>)> = servers
            .tools
            .into_iter()
            .map(|t| (t.name, t.server))
            .collect();
        assert_eq!(
            read,
            [
                ("lookup".to_owned(), None),
                ("files__read".to_owned(), Some("files".to_owned()))
            ]
        );
    }
}
