//! A conversation's messages: read them, post one (which starts a run, or answers a
//! chat command at once), and the conversation with its active run.

use std::net::IpAddr;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use protocol::chat::{
    ContentBlock, ConversationDetail, EventKind, MAX_IMAGES, MAX_PARTS, MAX_TEXT_CHARS, Message,
    MessageList, PinMessage, PostContent, PostMessage, PostMessageResponse, PostPart, Role,
};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::json::ApiJson;
use super::paging;
use super::path::ApiPath;
use super::query::{ApiQuery, QueryRules};
use crate::agent::{self, commands};
use crate::auth::AuthUser;
use crate::db::messages::{self, NewMessage};
use crate::db::{self, conversations, events, runs};
use crate::error::{Error, FieldErrors, Result, ResultExt};
use crate::state::AppState;
use crate::tools::kinds::http::egress::{self, AddressClass};

fn invalid(message: &str) -> Error {
    Error::unprocessable(
        "invalid message",
        FieldErrors::from([("content".to_owned(), message.to_owned())]),
    )
}

/// An image's address is handed to the model's server, which may fetch it from where
/// it runs: an address inside that network (loopback, private, link-local, metadata)
/// would have it fetch for the caller what the caller cannot reach. Such an address
/// written in the URL is refused here, by the rules http tools connect by; a name is
/// not resolved here (the model's server resolves it itself, later), so a model server
/// that fetches images needs egress rules of its own. What is stored and sent on is the
/// URL as read here, written out again: a parser that reads the caller's spelling
/// otherwise (`http://a.example\@127.0.0.1/` is host `a.example` here, `127.0.0.1` to
/// some) then reads the host checked here.
fn check_image_url(url: &str) -> std::result::Result<String, String> {
    if url.starts_with("data:image/") {
        return Ok(url.to_owned());
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return Err("an image must be an http(s) URL or a data:image/… URL".to_owned());
    }
    // Read as a browser would, so `http://2130706433/` is the 127.0.0.1 it reaches.
    let parsed =
        reqwest::Url::parse(url).map_err(|err| format!("the image URL is not valid: {err}"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("an image URL must not hold a user name or password".to_owned());
    }
    let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
    let host = host.trim_end_matches('.');
    if host.is_empty() || host == "localhost" || host.ends_with(".localhost") {
        return Err("an image URL must name a public host".to_owned());
    }
    match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(ip) if egress::classify(ip) != AddressClass::Public => Err(format!(
            "an image URL must point at a public address, not {ip}"
        )),
        _ => Ok(parsed.into()),
    }
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
                let url = check_image_url(&url).map_err(|reason| invalid(&reason))?;
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
/// message while a run is active is refused with 409 `run_active`, and one to a
/// conversation that holds the most message content one may with 409
/// `conversation_full`. Sent again under its `idempotency_key`, a message is not posted
/// twice: the answer is the first post's.
#[utoipa::path(post, path = "/api/conversations/{id}/messages", tag = "chat", request_body = PostMessage,
    params(("id" = Uuid, Path, description = "Conversation id")), security(("bearer" = [])), responses(
    (status = 202, description = "A run started (or, for a message sent again under its `idempotency_key`, was started then)", body = PostMessageResponse),
    (status = 200, description = "A chat command, answered at once (or then)", body = PostMessageResponse),
    (status = 400, description = "Malformed body (not JSON, a key given twice, a wrong type)", body = protocol::api::ErrorBody),
    (status = 404, body = protocol::api::ErrorBody),
    (status = 409, description = "A run is already active (`run_active`), the conversation holds the most messages one may (`conversation_full`), or a message was posted under the same `idempotency_key` at the same moment (`already_posted`; send again to read it)", body = protocol::api::ErrorBody),
    (status = 422, description = "Content that breaks the rules, or an `idempotency_key` this conversation holds for another message", body = protocol::api::ErrorBody)))]
pub async fn post_message(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
    ApiJson(body): ApiJson<PostMessage>,
) -> Result<(StatusCode, Json<PostMessageResponse>)> {
    let content = content_blocks(body.content)?;
    let Some(key) = body.idempotency_key else {
        return post(&state, &user, conversation_id, content, None).await;
    };
    if let Some(first) = first_post(&state, &user, conversation_id, key, &content).await? {
        return Ok(first);
    }
    match post(&state, &user, conversation_id, content.clone(), Some(key)).await {
        Ok(answer) => Ok(answer),
        // Another request under the key may have posted meanwhile: this one then broke
        // the key's index, or a check its message passed (a run now active, the
        // conversation now full). Its message is the answer.
        Err(err) => match first_post(&state, &user, conversation_id, key, &content).await? {
            Some(first) => Ok(first),
            None => Err(err),
        },
    }
}

/// The answer to the message posted earlier to the conversation under `key`, as it
/// was first given (202 with its run, or 200 with a command's reply); `None` when the
/// conversation holds no message under the key (or is not the caller's). The same key
/// with other content is a 422: a client that reuses keys would otherwise lose the
/// second message without a word.
async fn first_post(
    state: &AppState,
    user: &AuthUser,
    conversation_id: Uuid,
    key: Uuid,
    content: &[ContentBlock],
) -> Result<Option<(StatusCode, Json<PostMessageResponse>)>> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let found =
        messages::posted_under_key(&mut tx, conversation_id, key, commands::COMMAND_MODEL).await?;
    tx.commit().await?;
    let Some((message, reply)) = found else {
        return Ok(None);
    };
    if message.content != content {
        return Err(Error::unprocessable(
            "idempotency key already used",
            FieldErrors::from([(
                "idempotency_key".to_owned(),
                "this conversation holds another message posted under this key; pick a new key for each message"
                    .to_owned(),
            )]),
        ));
    }
    let status = match message.run_id {
        Some(_) => StatusCode::ACCEPTED,
        None => StatusCode::OK,
    };
    Ok(Some((
        status,
        Json(PostMessageResponse {
            run_id: message.run_id,
            message,
            reply,
        }),
    )))
}

/// Posts the message: a command answered at once, or a run started.
async fn post(
    state: &AppState,
    user: &AuthUser,
    conversation_id: Uuid,
    content: Vec<ContentBlock>,
    idempotency_key: Option<Uuid>,
) -> Result<(StatusCode, Json<PostMessageResponse>)> {
    if let Some(text) = protocol::chat::command_text(&content) {
        let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
        if !conversations::exists(&mut tx, conversation_id).await? {
            return Err(Error::NotFound("conversation"));
        }
        // Counted first: a conversation already full does no command's work.
        let limits = &state.config.limits;
        let message = messages::append_within(
            &mut tx,
            NewMessage {
                conversation_id,
                user_id: &user.user_id,
                role: Role::User,
                content: &content,
                model: None,
                run_id: None,
            },
            limits.conversation_bytes(),
            idempotency_key,
        )
        .await
        .on_constraint(messages::IDEMPOTENCY_KEY_INDEX, |_| agent::already_posted())?;
        let Some(message) = message else {
            return Err(agent::not_appended(&mut tx, conversation_id, limits).await);
        };
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
    let started = agent::start_run(
        &state.runner(),
        &user.user_id,
        conversation_id,
        content,
        idempotency_key,
    )
    .await?;
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
    (status = 404, description = "No such user message in the caller's conversation", body = protocol::api::ErrorBody)))]
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

/// About how much content one page carries (more only when its one message is larger):
/// a long conversation is read in pages, never held whole in memory for one answer.
const MAX_PAGE_BYTES: usize = 4 << 20;

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MessagePage {
    /// Only messages after this `seq` (a page's `next_after_seq`); from the first
    /// message when absent.
    #[param(minimum = -2147483648_i64, maximum = 2147483647_i64)]
    after_seq: Option<i32>,
    /// Most messages in the page (1 to 500; 100 when absent). A page also ends after
    /// about 4 MiB of content.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

impl QueryRules for MessagePage {
    const FIELD: &'static str = "query";
    const EXPECTED: &'static str =
        "`after_seq` is a whole number and `limit` a whole number from 1 to 500";
}

/// The conversation's messages in order, a page at a time: ask again with
/// `after_seq=<next_after_seq>` while the answer has `next_after_seq`.
#[utoipa::path(get, path = "/api/conversations/{id}/messages", tag = "chat",
    params(("id" = Uuid, Path, description = "Conversation id"), MessagePage),
    security(("bearer" = [])), responses(
    (status = 200, body = MessageList), (status = 400, body = protocol::api::ErrorBody),
    (status = 404, body = protocol::api::ErrorBody),
    (status = 422, body = protocol::api::ErrorBody)))]
pub async fn list_messages(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<MessagePage>,
) -> Result<Json<MessageList>> {
    let limit = paging::limit(query.limit)?;
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    if !conversations::exists(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    let (messages, more) = messages::page(
        &mut tx,
        conversation_id,
        query.after_seq.unwrap_or(i32::MIN),
        limit,
        MAX_PAGE_BYTES,
    )
    .await?;
    tx.commit().await?;
    let next_after_seq = more.then(|| messages.last().map(|m| m.seq)).flatten();
    Ok(Json(MessageList {
        messages,
        next_after_seq,
    }))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_url_inside_the_model_servers_network_is_refused() {
        for url in [
            "http://127.0.0.1/cat.png",
            "http://2130706433/cat.png",
            "http://0x7f.1/cat.png",
            "http://[::1]/cat.png",
            "http://[::ffff:127.0.0.1]/cat.png",
            "http://169.254.169.254/latest/meta-data/iam/",
            "http://10.0.0.5/cat.png",
            "https://192.168.1.1:8443/cat.png",
            "http://0.0.0.0/",
            "http://localhost:8080/cat.png",
            "http://LOCALHOST./cat.png",
            "http://metadata.localhost/",
            "http://[fd00:ec2::254]/",
            "http://exa mple.com/cat.png",
            "ftp://example.com/cat.png",
            "file:///etc/passwd",
            // Credentials would go to the model's server, and `user@` hides the host.
            "http://example.com@127.0.0.1/cat.png",
            "https://me:secret@example.com/cat.png",
        ] {
            assert!(check_image_url(url).is_err(), "{url} was accepted");
        }
        for url in [
            "https://upload.wikimedia.org/cat.png",
            "http://93.184.215.14/cat.png",
            "https://[2606:4700::1111]/cat.png",
            "data:image/png;base64,iVBORw0KGgo=",
        ] {
            assert_eq!(check_image_url(url).as_deref(), Ok(url), "{url}");
        }
    }

    #[test]
    fn an_image_url_goes_on_as_it_was_checked_not_as_it_was_spelled() {
        // Python's urllib reads host 127.0.0.1 in the first; a browser, example.com.
        assert_eq!(
            check_image_url("http://example.com\\@127.0.0.1/cat.png").as_deref(),
            Ok("http://example.com/@127.0.0.1/cat.png")
        );
        assert_eq!(
            check_image_url("https://Example.COM/a b.png").as_deref(),
            Ok("https://example.com/a%20b.png")
        );
    }
}
