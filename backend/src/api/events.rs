//! The conversation's event stream (server-sent events). The browser's EventSource
//! sends no headers, so besides `Authorization: Bearer` the stream accepts a
//! short-lived stream token in `?token=`, good for this one conversation only. Events
//! replay from `?after=<id>` or `Last-Event-ID`, so a client that reconnects misses
//! nothing.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use protocol::chat::{
    STREAM_DELETED_DATA, STREAM_DELETED_EVENT, STREAM_EXPIRED_DATA, STREAM_EXPIRED_EVENT,
    StreamEvent, StreamToken,
};
use protocol::fields::FieldErrors;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tokio_stream::wrappers::ReceiverStream;
use utoipa::IntoParams;
use uuid::Uuid;

use super::path::ApiPath;
use super::query::{ApiQuery, QueryRules};
use crate::auth::{self, AuthUser};
use crate::db::listener::Following;
use crate::db::{self, conversations, events};
use crate::error::{Error, Result};
use crate::state::AppState;

const STREAM_TOKEN_MINUTES: i64 = 10;
/// Streams also look for news this often, in case a notification was missed.
const POLL_EVERY: Duration = Duration::from_secs(5);
const BATCH: usize = 500;
/// A stream whose client has read nothing for this long, with events waiting, ends.
const STALLED_AFTER: Duration = Duration::from_secs(30);

/// A token for opening this conversation's event stream from a browser.
#[utoipa::path(post, path = "/api/conversations/{id}/stream-token", tag = "chat",
    params(("id" = Uuid, Path, description = "Conversation id")), security(("bearer" = [])), responses(
    (status = 200, body = StreamToken), (status = 404, body = protocol::api::ErrorBody)))]
pub async fn create_stream_token(
    State(state): State<AppState>,
    user: AuthUser,
    ApiPath(conversation_id): ApiPath<Uuid>,
) -> Result<Json<StreamToken>> {
    let mut tx = db::begin_as_user(&state.db, &user.user_id).await?;
    if !conversations::exists(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    tx.commit().await?;
    // No longer than the token that asks for it, so a stream cannot outlive the session:
    // a stolen token about to expire buys no more time.
    let left = user.expires_at - chrono::Utc::now().timestamp();
    let lifetime =
        chrono::Duration::minutes(STREAM_TOKEN_MINUTES).min(chrono::Duration::seconds(left.max(1)));
    let (token, exp) = state
        .jwt
        .sign_stream(&user.user_id, conversation_id, lifetime)?;
    Ok(Json(StreamToken {
        token,
        expires_at: chrono::DateTime::from_timestamp(exp, 0).unwrap_or_else(chrono::Utc::now),
    }))
}

// `token` takes any text, so only `after` can fail to parse.
impl QueryRules for StreamQuery {
    const FIELD: &'static str = "after";
    const EXPECTED: &'static str = "must be a whole number (an event id)";
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
    /// Stream token, for clients that cannot send headers (see the `stream_token`
    /// security scheme).
    #[param(ignore)]
    token: Option<String>,
    /// Replay events after this id; with `Last-Event-ID` too, after the later of the
    /// two.
    #[param(minimum = -9223372036854775808_i64, maximum = 9223372036854775807_i64)]
    after: Option<i64>,
}

/// Run events of the conversation as server-sent events: `id` is the event id,
/// `event` its kind, `data` the whole event as JSON. When the token that opened it
/// expires, the stream sends a last event named `expired` (data
/// `{"reason":"token_expired"}`) and ends; open it again with a fresh token and `after`.
/// When the conversation is deleted, the stream sends a last event named `deleted` (data
/// `{"reason":"conversation_deleted"}`) as the deletion commits (within a few seconds
/// where its notice is missed), and ends.
#[utoipa::path(get, path = "/api/conversations/{id}/events", tag = "chat",
    params(("id" = Uuid, Path, description = "Conversation id"), StreamQuery),
    security(("bearer" = []), ("stream_token" = [])),
    responses(
        (status = 200, description = "Server-sent events; each event's `data` is one StreamEvent, except a last one without an id: `expired` (data `{\"reason\":\"token_expired\"}`), sent when the token that opened the stream expires, or `deleted` (data `{\"reason\":\"conversation_deleted\"}`), sent when the conversation is deleted (within a few seconds even where the notice of it is missed)", content_type = "text/event-stream", body = StreamEvent),
        (status = 400, description = "`after` or `Last-Event-ID` is not an event id", body = protocol::api::ErrorBody),
        (status = 401, description = "No bearer token or stream token, or one that is invalid, expired or for another conversation", body = protocol::api::ErrorBody),
        (status = 404, body = protocol::api::ErrorBody),
        (status = 429, description = "Too many event streams open, or over the request allowance", body = protocol::api::ErrorBody)))]
pub async fn stream_events(
    State(state): State<AppState>,
    ApiPath(conversation_id): ApiPath<Uuid>,
    ApiQuery(query): ApiQuery<StreamQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    let verified = match (&query.token, headers.contains_key(AUTHORIZATION)) {
        (Some(token), _) => {
            let verified = state.jwt.verify_stream(token, conversation_id)?;
            // The request allowance counts bearer requests as they come in; a stream
            // token's user is only known here, and is charged unless that same user's
            // valid bearer token already paid for the request.
            let paid =
                auth::bearer_user(&state, &headers).is_ok_and(|bearer| bearer == verified.user_id);
            if !paid {
                state.limits.spend_request(&verified.user_id).await?;
            }
            verified
        }
        (None, true) => auth::bearer(&state, &headers)?,
        (None, false) => {
            return Err(Error::Unauthorized(
                "the event stream needs `Authorization: Bearer` or a stream token in `?token=`"
                    .into(),
            ));
        }
    };
    // A reconnecting EventSource sends `Last-Event-ID` to the URL it first opened, whose
    // `after` is older: the later of the two is where the client is.
    let after = query.after.max(last_event_id(&headers)?).unwrap_or(0);
    let user_id = verified.user_id;
    // The stream ends when the token that opened it does: a client keeps reading only
    // as long as it could open the stream again, and reconnects with a fresh token.
    let seconds_left = verified.expires_at - chrono::Utc::now().timestamp();
    let until =
        tokio::time::Instant::now() + Duration::from_secs(u64::try_from(seconds_left).unwrap_or(0));
    // The user's stream place is held both by the relay and by the response body: it
    // is free again once the connection has taken (or dropped) the last event and the
    // relay has stopped reading, so a user who opens streams and hangs up at once
    // cannot leave more reads running than they may have streams open.
    let slot = Arc::new(state.limits.open_stream(&user_id)?);
    let relay_slot = Arc::clone(&slot);
    let mut tx = db::begin_as_user(&state.db, &user_id).await?;
    if !conversations::exists(&mut tx, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    tx.commit().await?;

    let (sender, receiver) = mpsc::channel::<Outgoing>(64);
    // Followed before the first read, so nothing written in between is missed.
    let following = state.events.follow(conversation_id);
    tokio::spawn(async move {
        let _place = relay_slot;
        let ended = relay(
            state,
            user_id,
            conversation_id,
            after,
            following,
            &sender,
            until,
        )
        .await;
        if ended == Ended::Deleted {
            let _ =
                tokio::time::timeout(Duration::from_secs(2), sender.send(Outgoing::Deleted)).await;
        } else if tokio::time::Instant::now() >= until {
            // Said to a client that still reads, if slowly; one that stopped reading is
            // not waited for long.
            let _ =
                tokio::time::timeout(Duration::from_secs(2), sender.send(Outgoing::Expired)).await;
        }
    });
    let stream = ReceiverStream::new(receiver).map(move |outgoing| {
        let _place = &slot;
        Ok(match outgoing {
            Outgoing::Event(event) => Event::default()
                .id(event.id.to_string())
                .event(event.kind.name())
                .data(serde_json::to_string(&event).unwrap_or_default()),
            Outgoing::Expired => Event::default()
                .event(STREAM_EXPIRED_EVENT)
                .data(STREAM_EXPIRED_DATA),
            Outgoing::Deleted => Event::default()
                .event(STREAM_DELETED_EVENT)
                .data(STREAM_DELETED_DATA),
        })
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// What a stream's relay hands its response.
enum Outgoing {
    Event(Box<StreamEvent>),
    /// The token that opened the stream has expired; the stream ends after this.
    Expired,
    /// The conversation has been deleted; the stream ends after this.
    Deleted,
}

/// Why a relay stopped.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The client went away, the token expired, the server is stopping, or the client
    /// stopped reading.
    Stopped,
    /// The conversation is gone.
    Deleted,
}

/// Sends stored events to one client until it goes away, its token expires, the
/// server shuts down or the conversation is deleted. The stream reads for itself to
/// catch up (at the start, after falling behind, when told of a deletion, and on the
/// periodic look, which also finds a deletion whose notification was missed);
/// otherwise it takes the batches the server reads once for every stream of the
/// conversation.
async fn relay(
    state: AppState,
    user_id: String,
    conversation_id: Uuid,
    mut after: i64,
    mut following: Following,
    sender: &mpsc::Sender<Outgoing>,
    until: tokio::time::Instant,
) -> Ended {
    let mut shutdown = state.shutdown.clone();
    let mut behind = true;
    loop {
        if behind {
            match catch_up(&state, &user_id, conversation_id, &mut after, sender, until).await {
                Ok(CaughtUp::Yes) => behind = false,
                Ok(CaughtUp::Stopped) => return Ended::Stopped,
                Ok(CaughtUp::Deleted) => return Ended::Deleted,
                Err(err) => {
                    tracing::warn!(error = %err, "event stream could not read events; retrying");
                }
            }
        }
        tokio::select! {
            // Expiry first: a batch that arrives at the same moment is not sent.
            biased;
            () = tokio::time::sleep_until(until) => return Ended::Stopped,
            () = sender.closed() => return Ended::Stopped,
            _ = shutdown.changed() => return Ended::Stopped,
            batch = following.next() => match batch {
                Some(batch) if !batch.gone && batch.complete_after <= after => {
                    let sent = after;
                    for event in batch.events.iter().filter(|event| event.id > sent) {
                        after = event.id;
                        if !send_before(sender, event.clone(), until).await {
                            return Ended::Stopped;
                        }
                    }
                }
                // Missed batches, one that starts past what this stream has sent, or
                // word that the conversation is gone.
                _ => behind = true,
            },
            () = tokio::time::sleep(POLL_EVERY) => behind = true,
        }
    }
}

/// Sends one event unless the client is gone, the token expires first or the client
/// has read nothing for [`STALLED_AFTER`]; `false` when it was not sent, and the stream
/// ends. A stream waiting on a client that stopped reading would stop taking the
/// server's batches, which every conversation's events share, and hold them in memory
/// until its token expired; a client that was only slow opens the stream again after
/// the last event it got and misses nothing.
async fn send_before(
    sender: &mpsc::Sender<Outgoing>,
    event: StreamEvent,
    until: tokio::time::Instant,
) -> bool {
    send_unless_stalled(sender, event, until, STALLED_AFTER).await
}

async fn send_unless_stalled(
    sender: &mpsc::Sender<Outgoing>,
    event: StreamEvent,
    until: tokio::time::Instant,
    stalled_after: Duration,
) -> bool {
    // `timeout_at` tries the send before it looks at the clock: a send that could go at
    // once would still go after the expiry.
    let now = tokio::time::Instant::now();
    if now >= until {
        return false;
    }
    let give_up = until.min(now + stalled_after);
    matches!(
        tokio::time::timeout_at(give_up, sender.send(Outgoing::Event(Box::new(event)))).await,
        Ok(Ok(()))
    )
}

/// How a catch-up ended.
enum CaughtUp {
    /// Everything stored has been sent.
    Yes,
    /// The client is gone or the token has expired: nothing more is read.
    Stopped,
    /// The conversation is gone.
    Deleted,
}

/// Sends what the stream has not sent yet, read as the user.
async fn catch_up(
    state: &AppState,
    user_id: &str,
    conversation_id: Uuid,
    after: &mut i64,
    sender: &mpsc::Sender<Outgoing>,
    until: tokio::time::Instant,
) -> std::result::Result<CaughtUp, sqlx::Error> {
    loop {
        // A client that hung up is not read for: a stream opened and dropped at once
        // must not leave a read behind it.
        if tokio::time::Instant::now() >= until || sender.is_closed() {
            return Ok(CaughtUp::Stopped);
        }
        let mut tx = db::begin_as_user(&state.db, user_id).await?;
        let (batch, more) = events::after(&mut tx, conversation_id, *after, BATCH).await?;
        // A deleted conversation has no events left; only then is it looked for.
        let deleted = batch.is_empty() && !conversations::exists(&mut tx, conversation_id).await?;
        tx.commit().await?;
        if deleted {
            return Ok(CaughtUp::Deleted);
        }
        for event in batch {
            *after = event.id;
            if !send_before(sender, event, until).await {
                return Ok(CaughtUp::Stopped);
            }
        }
        if !more {
            return Ok(CaughtUp::Yes);
        }
    }
}

/// The `Last-Event-ID` a request sends, if any (an empty one is none, as an EventSource
/// that has seen no id sends none); one that is not an event id is refused, not read
/// as "from the start", which would replay the whole conversation.
fn last_event_id(headers: &HeaderMap) -> Result<Option<i64>> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = value.to_str().map(str::trim).unwrap_or("?");
    if text.is_empty() {
        return Ok(None);
    }
    text.parse::<i64>()
        .map(Some)
        .map_err(|_| Error::BadRequest {
            message: "invalid header: `Last-Event-ID` must be an event id (a whole number)".into(),
            fields: Some(FieldErrors::from([(
                "Last-Event-ID".to_owned(),
                "must be an event id (a whole number)".to_owned(),
            )])),
        })
}

#[cfg(test)]
mod tests {
    use protocol::chat::EventKind;

    use super::*;

    fn delta(id: i64) -> StreamEvent {
        StreamEvent {
            id,
            conversation_id: Uuid::nil(),
            run_id: None,
            kind: EventKind::TextDelta {
                delta: "words".to_owned(),
            },
        }
    }

    /// Once the token has expired nothing more goes out, even with room to send it.
    #[tokio::test]
    async fn nothing_is_sent_once_the_token_has_expired() {
        let (sender, mut receiver) = mpsc::channel(4);
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        assert!(send_before(&sender, delta(1), later).await);
        let expired = tokio::time::Instant::now();
        assert!(!send_before(&sender, delta(2), expired).await);
        drop(sender);
        let mut sent = Vec::new();
        while let Some(Outgoing::Event(event)) = receiver.recv().await {
            sent.push(event.id);
        }
        assert_eq!(sent, [1]);
    }

    /// A client that stops reading does not hold its stream (and the batches every
    /// stream shares) until its token expires: the send gives up, the stream ends.
    #[tokio::test]
    async fn a_client_that_stopped_reading_is_given_up_on() {
        let (sender, receiver) = mpsc::channel(1);
        let day = tokio::time::Instant::now() + Duration::from_secs(86_400);
        let stalled = Duration::from_millis(200);
        assert!(send_unless_stalled(&sender, delta(1), day, stalled).await);
        let started = tokio::time::Instant::now();
        let sent = tokio::time::timeout(
            Duration::from_secs(10),
            send_unless_stalled(&sender, delta(2), day, stalled),
        )
        .await
        .expect("given up after the stall, not at the token's expiry");
        assert!(!sent, "the client reads nothing");
        assert!(started.elapsed() >= stalled);
        drop(receiver);
    }
}
