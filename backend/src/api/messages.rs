//! A conversation's messages: read them, post one (which starts a run, or answers a
//! chat command at once), and the conversation with its active run.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use protocol::chat::{
    ContentBlock, ConversationDetail, EventKind, MAX_IMAGES, MAX_PARTS, MAX_TEXT_CHARS, Message,
    MessageList, PinMessage, PostContent, PostMessage, PostMessageResponse, PostPart, Role,
};
use uuid::Uuid;

use super::json::ApiJson;
use super::path::ApiPath;
use crate::agent::{self, commands};
use crate::auth::AuthUser;
use crate::db::messages::{self, NewMessage};
use crate::db::{self, conversations, events, runs};
use crate::error::{Error, FieldErrors, Result};
use crate::state::AppState;

fn invalid(message: &str) -> Error {
    Error::unprocessable(
        "invalid message",
        FieldErrors::from([("content".to_owned(), message.to_owned())]),
    )
}

/// The posted content as stored blocks, checked.
fn content_blocks(content: PostContent) -> Result<Vec<ContentBlock>> {
    let parts = match content {
        PostContent::Text(text) => vec![PostPart::Text { text }],
        PostContent::Parts(parts) => parts,
    };
    if parts.len() > MAX_PARTS {
        return Err(invalid(&format!("at most {MAX_PARTS} parts per message")));
    }
    let mut blocks = Vec::new();
    let mut images = 0;
    for part in parts {
        match part {
            PostPart::Text { text } => {
                // Counted before trimming, as the OpenAPI document's maxLength counts.
                if text.chars().count() > MAX_TEXT_CHARS {
                    return Err(invalid(&format!(
                        "text is longer than {MAX_TEXT_CHARS} characters"
                    )));
                }
                if text.contains('\0') {
                    return Err(invalid("text must not contain NUL characters"));
                }
                let text = text.trim();
                if text.is_empty() {
                    return Err(invalid("a message needs text or an image"));
                }
                blocks.push(ContentBlock::Text {
                    text: text.to_owned(),
                });
            }
            PostPart::Image { url } => {
                images += 1;
                let allowed = url.starts_with("https://")
                    || url.starts_with("http://")
                    || url.starts_with("data:image/");
                if !allowed {
                    return Err(invalid(
                        "an image must be an http(s) URL or a data:image/… URL",
                    ));
                }
                blocks.push(ContentBlock::Image { url });
            }
        }
    }
    if images > MAX_IMAGES {
        return Err(invalid(&format!("at most {MAX_IMAGES} images per message")));
    }
    if blocks.is_empty() {
        return Err(invalid("a message needs text or an image"));
    }
    Ok(blocks)
}

/// Posts a user message. It starts a run (202) that goes on without the client; a
/// `/context`, `/remember` or `/help` command is answered at once (200). A second
/// message while a run is active is refused with 409 `run_active`.
#[utoipa::path(post, path = "/api/conversations/{id}/messages", tag = "chat", request_body = PostMessage,
    params(("id" = Uuid, Path, description = "Conversation id")), security(("bearer" = [])), responses(
    (status = 202, description = "A run started", body = PostMessageResponse),
    (status = 200, description = "A chat command, answered at once", body = PostMessageResponse),
    (status = 404, body = protocol::api::ErrorBody),
    (status = 409, description = "A run is already active", body = protocol::api::ErrorBody),
    (status = 422, body = protocol::api::ErrorBody)))]
pub async fn post_message(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<(StatusCode, Json<PostMessageResponse>)> {
    let content = content_blocks(body.content)?;
    let only_text = content
        .iter()
        .all(|b| matches!(b, ContentBlock::Text { .. }));
    let text: String = content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect();
    if only_text && commands::is_command(&text) {
        let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
        if !conversations::exists(&mut tx, conversation_id).await? {
            return Err(Error::NotFound("conversation"));
        }
        let reply_text = commands::run(
            &mut tx,
            &user.user_id,
            conversation_id,
            &text,
            &commands::CommandSettings {
                max_notes: state.config.limits.memory_notes,
                summary: state
                    .agent
                    .chain
                    .names()
                    .contains(&"summarisation")
                    .then_some(&state.config.summary),
            },
        )
        .await?;
        let message = messages::append(
            &mut tx,
            NewMessage {
                conversation_id,
                user_id: &user.user_id,
                role: Role::User,
                content: &content,
                model: None,
                run_id: None,
            },
        )
        .await?;
        let reply = messages::append(
            &mut tx,
            NewMessage {
                conversation_id,
                user_id: &user.user_id,
                role: Role::Assistant,
                content: &[ContentBlock::Text { text: reply_text }],
                model: Some(commands::COMMAND_MODEL),
                run_id: None,
            },
        )
        .await?;
        for added in [&message, &reply] {
            let kind = EventKind::MessageAdded {
                message: added.clone(),
            };
            events::append(&mut tx, conversation_id, &user.user_id, None, &kind).await?;
        }
        tx.commit().await?;
        return Ok((
            StatusCode::OK,
            Json(PostMessageResponse {
                run_id: None,
                message,
                reply: Some(reply),
            }),
        ));
    }
    let started =
        agent::start_run(&state.runner(), &user.user_id, conversation_id, content).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(PostMessageResponse {
            run_id: Some(started.run.id),
            message: started.message,
            reply: None,
        }),
    ))
}

/// Pins or unpins one of the caller's own messages in the conversation. Only user
/// messages can be pinned: they are what set the task.
#[utoipa::path(put, path = "/api/conversations/{id}/messages/{message_id}/pin", tag = "chat",
    request_body = PinMessage,
    params(("id" = Uuid, Path, description = "Conversation id"),
           ("message_id" = Uuid, Path, description = "A user message of the conversation")),
    security(("bearer" = [])), responses(
    (status = 200, description = "The message as it is now", body = Message),
    (status = 400, body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 404, description = "No such user message in the caller's conversation", body = protocol::api::ErrorBody),
    (status = 422, body = protocol::api::ErrorBody)))]
pub async fn pin_message(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath((conversation_id, message_id)): ApiPath<(Uuid, Uuid)>,
    ApiJson(body): ApiJson<PinMessage>,
) -> Result<Json<Message>> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let message = messages::set_pinned(&mut tx, conversation_id, message_id, body.pinned)
        .await?
        .ok_or(Error::NotFound("message"))?;
    tx.commit().await?;
    Ok(Json(message))
}

/// The conversation's messages in order.
#[utoipa::path(get, path = "/api/conversations/{id}/messages", tag = "chat",
    params(("id" = Uuid, Path, description = "Conversation id")), security(("bearer" = [])), responses(
    (status = 200, body = MessageList), (status = 404, body = protocol::api::ErrorBody)))]
pub async fn list_messages(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
) -> Result<Json<MessageList>> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    if !conversations::exists(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    let messages = messages::list(&mut tx, conversation_id).await?;
    tx.commit().await?;
    Ok(Json(MessageList { messages }))
}

/// The conversation and its active run, if any.
#[utoipa::path(get, path = "/api/conversations/{id}", tag = "conversations",
    params(("id" = Uuid, Path, description = "Conversation id")), security(("bearer" = [])), responses(
    (status = 200, body = ConversationDetail), (status = 404, body = protocol::api::ErrorBody)))]
pub async fn get_conversation(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
) -> Result<Json<ConversationDetail>> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let conversation = conversations::find(&mut tx, conversation_id)
        .await?
        .ok_or(Error::NotFound("conversation"))?;
    let active_run = runs::active_for_conversation(&mut tx, conversation_id)
        .await?
        .map(|run| run.to_api());
    tx.commit().await?;
    Ok(Json(ConversationDetail {
        conversation,
        active_run,
    }))
}
