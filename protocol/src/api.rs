//! Request and response bodies of the public HTTP API.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use uuid::Uuid;

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
    pub user_id: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DevTokenResponse {
    pub token: String,
    pub user_id: String,
    pub expires_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct NewConversation {
    #[serde(default)]
    pub title: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Conversation {
    pub id: Uuid,
    pub title: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ConversationList {
    pub conversations: Vec<Conversation>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum RequestStatus {
    Pending,
    Completed,
    Cancelled,
    Expired,
}

impl RequestStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RequestStatus::Pending => "pending",
            RequestStatus::Completed => "completed",
            RequestStatus::Cancelled => "cancelled",
            RequestStatus::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(RequestStatus::Pending),
            "completed" => Some(RequestStatus::Completed),
            "cancelled" => Some(RequestStatus::Cancelled),
            "expired" => Some(RequestStatus::Expired),
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
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
}

/// `create_request`: fields are read one by one so a bad definition is reported
/// against its own name.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateRequestParams {
    pub conversation_id: Uuid,
    pub tool_name: String,
    pub tool_call_id: String,
    pub reason: String,
    pub fields: Vec<Value>,
    #[serde(default)]
    pub save_for_session: bool,
    #[serde(default)]
    pub save_for: Option<SaveFor>,
    #[serde(default)]
    pub tool_args: Option<Map<String, Value>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct SubmitResponseParams {
    pub tool_call_id: String,
    pub user_inputs: Map<String, Value>,
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
    pub value: Value,
    pub is_secret: bool,
    pub scope: SavedScope,
    pub updated_at: DateTime<Utc>,
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
    pub tool_name: String,
    pub tool_call_id: String,
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
}

impl ToolOutcome {
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
    pub kind: String,
    pub enabled: bool,
    /// Why the tool cannot run now, when it cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable_reason: Option<String>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolList {
    pub tools: Vec<ToolInfo>,
}
