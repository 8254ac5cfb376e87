use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use protocol::api::{Conversation, ConversationList, NewConversation};

use super::json::ApiJson;
use crate::auth::AuthUser;
use crate::db::{self, conversations};
use crate::error::{Error, FieldErrors, Result};
use crate::state::AppState;

const MAX_TITLE_LEN: usize = 200;
const DEFAULT_TITLE: &str = "New conversation";

/// Starts a conversation for the caller.
#[utoipa::path(post, path = "/api/conversations", tag = "conversations", request_body = NewConversation,
    security(("bearer" = [])), responses(
    (status = 201, body = Conversation),
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

/// The caller's conversations, newest first.
#[utoipa::path(get, path = "/api/conversations", tag = "conversations", security(("bearer" = [])),
    responses((status = 200, body = ConversationList), (status = 401, body = protocol::api::ErrorBody)))]
pub async fn list_conversations(
    State(state): State<AppState>,
    user: AuthUser,
) -> Result<Json<ConversationList>> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    let conversations = conversations::list(&mut tx).await?;
    tx.commit().await?;
    Ok(Json(ConversationList { conversations }))
}
