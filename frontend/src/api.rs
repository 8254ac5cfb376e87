//! Every call the web chat makes to the server: JSON over `fetch`, and the URL of the
//! event stream. Nothing else in the app talks to the network.

use std::collections::BTreeMap;

use protocol::api::{
    ClearedValues, Conversation, ConversationList, DevTokenRequest, DevTokenResponse, ErrorBody,
    ErrorDetail, InputRequest, NewConversation, PendingRequests, SavedValue, SessionValues,
    SubmitResponseResult, ToolServers,
};
use protocol::approval::Decision;
use protocol::chat::{
    ConversationDetail, Message, MessageList, PinMessage, PostContent, PostMessage,
    PostMessageResponse, ServerInfo, StreamToken,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};
use uuid::Uuid;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{Headers, RequestInit, Response};

use crate::wire;

/// Why a call did not give its answer.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// No answer at all: the server is down or the network is gone.
    Network,
    /// The server answered with an error status and (usually) our JSON error body.
    Status { status: u16, detail: ErrorDetail },
    /// A success status with a body we could not read.
    Decode(String),
}

impl ApiError {
    pub fn status(&self) -> Option<u16> {
        match self {
            ApiError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    pub fn is_unauthorized(&self) -> bool {
        self.status() == Some(401)
    }

    pub fn code(&self) -> Option<&str> {
        match self {
            ApiError::Status { detail, .. } => Some(detail.code.as_str()),
            _ => None,
        }
    }

    /// Per-field messages of a 422 (or a 400 naming its fields).
    pub fn fields(&self) -> BTreeMap<String, String> {
        match self {
            ApiError::Status { detail, .. } => detail.fields.clone().unwrap_or_default(),
            _ => BTreeMap::new(),
        }
    }

    /// A sentence for a person.
    pub fn message(&self) -> String {
        match self {
            ApiError::Network => {
                "Can't reach the server. Check your connection, then try again.".to_owned()
            }
            ApiError::Status { status: 503, .. } => {
                "The server is up but can't work right now (its database is unavailable or busy). Try again in a moment.".to_owned()
            }
            ApiError::Status { detail, .. } => detail.message.clone(),
            ApiError::Decode(what) => format!("The server sent an answer this page can't read ({what})."),
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// One call: `body` is JSON text already, so the fetch itself is compiled once rather
/// than once per request type.
async fn call<T: DeserializeOwned>(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<String>,
) -> ApiResult<T> {
    let text = call_text(method, path, token, body).await?;
    let text = if text.trim().is_empty() {
        "null"
    } else {
        &text
    };
    wire::decode(text).map_err(ApiError::Decode)
}

/// A request body as JSON text.
fn json_body(body: &impl Serialize) -> ApiResult<Option<String>> {
    serde_json::to_string(body)
        .map(Some)
        .map_err(|err| ApiError::Decode(err.to_string()))
}

async fn call_text(
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<String>,
) -> ApiResult<String> {
    let window = web_sys::window().ok_or(ApiError::Network)?;
    let headers = Headers::new().map_err(|_| ApiError::Network)?;
    let _ = headers.set("Accept", "application/json");
    if let Some(token) = token {
        let _ = headers.set("Authorization", &format!("Bearer {token}"));
    }
    let init = RequestInit::new();
    init.set_method(method);
    if let Some(text) = body {
        let _ = headers.set("Content-Type", "application/json");
        init.set_body(&JsValue::from_str(&text));
    }
    init.set_headers(&headers);
    let response: Response = JsFuture::from(window.fetch_with_str_and_init(path, &init))
        .await
        .map_err(|_| ApiError::Network)?
        .dyn_into()
        .map_err(|_| ApiError::Network)?;
    let status = response.status();
    let text = match response.text() {
        Ok(promise) => JsFuture::from(promise)
            .await
            .map_err(|_| ApiError::Network)?
            .as_string()
            .unwrap_or_default(),
        Err(_) => String::new(),
    };
    if (200..300).contains(&status) {
        return Ok(text);
    }
    let detail = wire::decode::<ErrorBody>(&text)
        .map(|body| body.error)
        .unwrap_or_else(|_| ErrorDetail {
            code: format!("http_{status}"),
            message: match status {
                502..=504 => {
                    "The server is not answering right now. Try again in a moment.".to_owned()
                }
                _ => format!("The server answered {status} {}", response.status_text()),
            },
            fields: None,
        });
    Err(ApiError::Status { status, detail })
}

pub async fn server_info() -> ApiResult<ServerInfo> {
    call("GET", "/api/info", None, None).await
}

pub async fn dev_token(user_id: &str) -> ApiResult<DevTokenResponse> {
    let body = DevTokenRequest {
        user_id: user_id.to_owned(),
    };
    call("POST", "/api/dev/token", None, json_body(&body)?).await
}

/// The tools the assistant may call, and the MCP servers they come from.
pub async fn tool_servers(token: &str) -> ApiResult<ToolServers> {
    call("GET", "/api/tools", Some(token), None).await
}

/// Every conversation of the user, most recently active first, read a page at a time.
pub async fn list_conversations(token: &str) -> ApiResult<Vec<Conversation>> {
    let mut list: ConversationList = call("GET", "/api/conversations", Some(token), None).await?;
    let mut all = std::mem::take(&mut list.conversations);
    while let Some(before) = list.next_before.take() {
        // The server's own text: digits, dots and hex, nothing to escape.
        let path = format!("/api/conversations?before={before}");
        list = call("GET", &path, Some(token), None).await?;
        if list.conversations.is_empty() {
            break;
        }
        all.append(&mut list.conversations);
    }
    Ok(all)
}

pub async fn create_conversation(token: &str, title: Option<String>) -> ApiResult<Conversation> {
    let body = NewConversation { title };
    call("POST", "/api/conversations", Some(token), json_body(&body)?).await
}

/// Deletes the conversation with all it holds.
pub async fn delete_conversation(token: &str, id: Uuid) -> ApiResult<()> {
    let path = format!("/api/conversations/{id}");
    call("DELETE", &path, Some(token), None).await
}

pub async fn conversation_detail(token: &str, id: Uuid) -> ApiResult<ConversationDetail> {
    let path = format!("/api/conversations/{id}");
    call("GET", &path, Some(token), None).await
}

/// Every message of the conversation, read a page at a time.
pub async fn list_messages(token: &str, id: Uuid) -> ApiResult<MessageList> {
    let mut path = format!("/api/conversations/{id}/messages");
    let mut all: MessageList = call("GET", &path, Some(token), None).await?;
    while let Some(after) = all.next_after_seq.take() {
        path = format!("/api/conversations/{id}/messages?after_seq={after}");
        let page: MessageList = call("GET", &path, Some(token), None).await?;
        // A page that does not move on would ask for ever.
        if page.messages.first().is_none_or(|first| first.seq <= after) {
            break;
        }
        all.messages.extend(page.messages);
        all.next_after_seq = page.next_after_seq;
    }
    Ok(all)
}

/// Posts `text`; sent again under the same `idempotency_key`, it is posted once.
pub async fn post_message(
    token: &str,
    id: Uuid,
    text: &str,
    idempotency_key: Option<Uuid>,
) -> ApiResult<PostMessageResponse> {
    let path = format!("/api/conversations/{id}/messages");
    let body = PostMessage {
        content: PostContent::Text(text.to_owned()),
        idempotency_key,
    };
    call("POST", &path, Some(token), json_body(&body)?).await
}

pub async fn pin_message(
    token: &str,
    conversation_id: Uuid,
    message_id: Uuid,
    pinned: bool,
) -> ApiResult<Message> {
    let path = format!("/api/conversations/{conversation_id}/messages/{message_id}/pin");
    call(
        "PUT",
        &path,
        Some(token),
        json_body(&PinMessage { pinned })?,
    )
    .await
}

pub async fn stream_token(token: &str, id: Uuid) -> ApiResult<StreamToken> {
    let path = format!("/api/conversations/{id}/stream-token");
    call("POST", &path, Some(token), None).await
}

/// The event stream's address; `EventSource` sends no headers, so the short-lived
/// stream token rides in the query.
pub fn events_url(id: Uuid, stream_token: &str, after: i64) -> String {
    let token = String::from(js_sys::encode_uri_component(stream_token));
    format!("/api/conversations/{id}/events?token={token}&after={after}")
}

async fn action<T: DeserializeOwned>(token: &str, body: Value) -> ApiResult<T> {
    call(
        "POST",
        "/api/tool-user-input",
        Some(token),
        json_body(&body)?,
    )
    .await
}

pub async fn get_pending(token: &str, conversation_id: Uuid) -> ApiResult<Vec<InputRequest>> {
    let body = json!({"action": "get_pending", "conversation_id": conversation_id});
    let pending: PendingRequests = action(token, body).await?;
    Ok(pending.requests)
}

pub async fn submit_response(
    token: &str,
    tool_call_id: &str,
    user_inputs: Map<String, Value>,
) -> ApiResult<SubmitResponseResult> {
    let body = json!({"action": "submit_response", "tool_call_id": tool_call_id,
        "user_inputs": user_inputs});
    action(token, body).await
}

/// The user's answer to an approval request. `arguments` only with an edit, `message`
/// only with a rejection; `digest` is the request's `arguments_digest`, always sent so a
/// decision only covers the arguments the card showed.
pub async fn submit_decision(
    token: &str,
    tool_call_id: &str,
    decision: Decision,
    arguments: Option<Map<String, Value>>,
    message: Option<String>,
    digest: Option<String>,
) -> ApiResult<SubmitResponseResult> {
    let mut body = json!({"action": "submit_decision", "tool_call_id": tool_call_id,
        "decision": decision.as_str()});
    if let Some(object) = body.as_object_mut() {
        if let Some(arguments) = arguments {
            object.insert("arguments".into(), Value::Object(arguments));
        }
        if let Some(message) = message {
            object.insert("message".into(), Value::String(message));
        }
        if let Some(digest) = digest {
            object.insert("arguments_digest".into(), Value::String(digest));
        }
    }
    action(token, body).await
}

/// The user will not give what an input request asks for; the model is told so.
pub async fn decline_request(
    token: &str,
    tool_call_id: &str,
    message: Option<String>,
) -> ApiResult<InputRequest> {
    let mut body = json!({"action": "decline_request", "tool_call_id": tool_call_id});
    if let (Some(object), Some(message)) = (body.as_object_mut(), message) {
        object.insert("message".into(), Value::String(message));
    }
    action(token, body).await
}

pub async fn cancel_request(token: &str, tool_call_id: &str) -> ApiResult<InputRequest> {
    let body = json!({"action": "cancel_request", "tool_call_id": tool_call_id});
    action(token, body).await
}

pub async fn get_session_values(token: &str, conversation_id: Uuid) -> ApiResult<SessionValues> {
    let body = json!({"action": "get_session_values", "conversation_id": conversation_id});
    action(token, body).await
}

/// Forgets one remembered value (this conversation's or a user-wide one).
pub async fn delete_saved_value(
    token: &str,
    conversation_id: Uuid,
    saved: &SavedValue,
) -> ApiResult<ClearedValues> {
    let body = json!({"action": "delete_saved_value", "conversation_id": conversation_id,
        "scope": saved.scope, "key": saved.key});
    action(token, body).await
}

pub async fn clear_session_values(token: &str, conversation_id: Uuid) -> ApiResult<ClearedValues> {
    let body = json!({"action": "clear_session_values", "conversation_id": conversation_id});
    action(token, body).await
}
