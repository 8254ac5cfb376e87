use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use protocol::api::{Conversation, ConversationList, NewConversation};
use serde::Deserialize;
use utoipa::IntoParams;
use uuid::Uuid;

use super::json::ApiJson;
use super::paging;
use super::path::ApiPath;
use super::query::{ApiQuery, QueryRules};
use crate::auth::AuthUser;
use crate::db::conversations::ListPlace;
use crate::db::{self, conversations, input_requests, runs};
use crate::error::{Error, FieldErrors, Result};
use crate::state::AppState;

const MAX_TITLE_LEN: usize = 200;
const DEFAULT_TITLE: &str = "New conversation";

/// Starts a conversation for the caller.
#[utoipa::path(post, path = "/api/conversations", tag = "conversations", request_body = NewConversation,
    security(("bearer" = [])), responses(
    (status = 201, body = Conversation),
    (status = 400, description = "Malformed body (not JSON, a key given twice, a wrong type)", body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 422, body = protocol::api::ErrorBody)))]
pub async fn create_conversation(
    State(state): State<AppState>,
    user: AuthUser,
    body: Option<ApiJson<NewConversation>>,
) -> Result<(StatusCode, Json<Conversation>)> {
    let title = body
        .and_then(|ApiJson(body)| body.title)
        .unwrap_or_default();
    // Counted before trimming, as the OpenAPI document's maxLength counts.
    let problem = if title.chars().count() > MAX_TITLE_LEN {
        Some(format!("must be at most {MAX_TITLE_LEN} characters"))
    } else if title.contains('\0') {
        Some("must not contain NUL characters".to_owned())
    } else {
        None
    };
    if let Some(problem) = problem {
        let fields = FieldErrors::from([("title".to_owned(), problem)]);
        return Err(Error::unprocessable("invalid conversation", fields));
    }
    let title = match title.trim() {
        "" => DEFAULT_TITLE,
        title => title,
    };
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let conversation = conversations::insert(&mut tx, &user.user_id, title).await?;
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(conversation)))
}

/// Deletes one of the caller's conversations with everything it holds: its messages,
/// runs, requests, events and the values saved for it alone (values saved for the user
/// stay). The log of its tool calls stays, no longer tied to it. Refused with 409 while
/// a run of it is in progress or waiting (`run_active`: the run would go on writing to
/// it) or a request of it waits for an answer (`request_pending`: a tool, an MCP server
/// above all, waits on it).
#[utoipa::path(delete, path = "/api/conversations/{id}", tag = "conversations",
    params(("id" = Uuid, Path, description = "Conversation id")), security(("bearer" = [])), responses(
    (status = 204, description = "Deleted"),
    (status = 400, body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 404, description = "No such conversation of the caller's", body = protocol::api::ErrorBody),
    (status = 409, description = "A run of it is active (`run_active`), or a request of it waits for an answer (`request_pending`)", body = protocol::api::ErrorBody)))]
pub async fn delete_conversation(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
) -> Result<StatusCode> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    if !conversations::lock_for_deleting(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    if runs::active_for_conversation(&mut tx, conversation_id)
        .await?
        .is_some()
    {
        return Err(Error::conflict(
            "run_active",
            "a run of this conversation is in progress or waiting for an answer; let it finish (answer its request), then delete the conversation",
        ));
    }
    // One past its time, which no card shows any more, does not count.
    if input_requests::count_waiting(&mut tx, conversation_id, 1).await? > 0 {
        return Err(Error::conflict(
            "request_pending",
            "a request of this conversation waits for your answer; answer or cancel it, then delete the conversation",
        ));
    }
    conversations::delete(&mut tx, conversation_id).await?;
    tx.commit().await?;
    state.agent.history.forget(conversation_id);
    tracing::info!(user = %user.user_id, conversation = %conversation_id, "conversation deleted");
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ConversationPage {
    /// Only conversations after this place in the list (a page's `next_before`); from
    /// the most recently active one when absent.
    #[param(pattern = r"^-?[0-9]{1,16}\.-?[0-9]{1,16}\.[0-9a-f]{32}$")]
    before: Option<String>,
    /// Most conversations in the page (1 to 500; 100 when absent).
    #[param(minimum = 1, maximum = 500)]
    limit: Option<u32>,
}

impl QueryRules for ConversationPage {
    const FIELD: &'static str = "query";
    const EXPECTED: &'static str =
        "`before` is a page's `next_before` and `limit` a whole number from 1 to 500";
}

/// A page's end as the text a client sends back: `<updated_at µs>.<created_at µs>.<id>`.
fn place_text(place: ListPlace) -> String {
    format!(
        "{}.{}.{}",
        place.updated_at.timestamp_micros(),
        place.created_at.timestamp_micros(),
        place.id.simple()
    )
}

/// Digits a time of a page end may have: 16 reach ±316 years around 1970, which the
/// database can hold (a time it cannot would fail the query, not the request).
const MAX_MICROS_DIGITS: usize = 16;

fn read_place(text: &str) -> Option<ListPlace> {
    // A pattern's `$` also matches before one last line end, as Python reads it.
    let text = text.strip_suffix('\n').unwrap_or(text);
    let mut parts = text.split('.');
    let mut micros = || {
        let part = parts.next()?;
        let digits = part.strip_prefix('-').unwrap_or(part);
        if digits.is_empty()
            || digits.len() > MAX_MICROS_DIGITS
            || !digits.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        part.parse::<i64>()
            .ok()
            .and_then(chrono::DateTime::from_timestamp_micros)
    };
    let (updated_at, created_at) = (micros()?, micros()?);
    let id = Uuid::try_parse(parts.next()?).ok()?;
    parts.next().is_none().then_some(ListPlace {
        updated_at,
        created_at,
        id,
    })
}

/// The caller's conversations, most recently active first, a page at a time: ask
/// again with `before=<next_before>` while the answer has `next_before`.
#[utoipa::path(get, path = "/api/conversations", tag = "conversations",
    params(ConversationPage), security(("bearer" = [])), responses(
    (status = 200, body = ConversationList), (status = 400, body = protocol::api::ErrorBody),
    (status = 401, body = protocol::api::ErrorBody),
    (status = 422, body = protocol::api::ErrorBody)))]
pub async fn list_conversations(
    State(state): State<AppState>,
    user: AuthUser,
    ApiQuery(query): ApiQuery<ConversationPage>,
) -> Result<Json<ConversationList>> {
    let limit = paging::limit(query.limit)?;
    let after = match query.before.as_deref() {
        None => None,
        Some(text) => Some(read_place(text).ok_or_else(|| {
            Error::unprocessable(
                "invalid page",
                FieldErrors::from([(
                    "before".to_owned(),
                    "must be a `next_before` this server gave".to_owned(),
                )]),
            )
        })?),
    };
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let (conversations, last) = conversations::page(&mut tx, after, limit).await?;
    tx.commit().await?;
    Ok(Json(ConversationList {
        conversations,
        next_before: last.map(place_text),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_end_reads_back_as_itself_and_nothing_else_reads() {
        let place = ListPlace {
            updated_at: chrono::DateTime::from_timestamp_micros(1_764_201_600_123_456)
                .expect("time"),
            created_at: chrono::DateTime::from_timestamp_micros(-5).expect("time"),
            id: Uuid::new_v4(),
        };
        assert_eq!(read_place(&place_text(place)), Some(place));
        // What the OpenAPI document's pattern allows all reads.
        for text in [
            "0.0.00000000000000000000000000000000",
            "-9999999999999999.9999999999999999.ffffffffffffffffffffffffffffffff",
        ] {
            assert!(read_place(text).is_some(), "{text}");
        }
        for wrong in [
            "",
            "1.2",
            "1.2.3",
            "x.2.00000000000000000000000000000000",
            "1.2.00000000000000000000000000000000.4",
            "99999999999999999999.2.00000000000000000000000000000000",
            // Within i64 and chrono, but before the database's first day (4713 BC).
            "-300000000000000000.0.00000000000000000000000000000000",
            "+1.2.00000000000000000000000000000000",
            "1.-.00000000000000000000000000000000",
            "1.2.0000000000000000000000000000000\u{0}",
            "1..00000000000000000000000000000000",
        ] {
            assert_eq!(read_place(wrong), None, "{wrong:?}");
        }
    }
}
