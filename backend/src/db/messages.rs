//! `messages`: a conversation's history, in order.

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use protocol::chat::{ContentBlock, Message, Role};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

use super::batch::SizedBatch;
use super::storable;

struct MessageRow {
    id: Uuid,
    seq: i32,
    role: Role,
    content: Json<Vec<ContentBlock>>,
    model: Option<String>,
    run_id: Option<Uuid>,
    pinned: bool,
    created_at: DateTime<Utc>,
    /// The content's size as JSON (`content_bytes`; in a page, counted from the
    /// content for a message stored without it).
    content_bytes: Option<i32>,
}

impl From<MessageRow> for Message {
    fn from(row: MessageRow) -> Self {
        Message {
            id: row.id,
            seq: row.seq,
            role: row.role,
            content: row.content.0,
            model: row.model,
            run_id: row.run_id,
            pinned: row.pinned,
            created_at: row.created_at,
        }
    }
}

pub struct NewMessage<'a> {
    pub conversation_id: Uuid,
    pub user_id: &'a str,
    pub role: Role,
    pub content: &'a [ContentBlock],
    pub model: Option<&'a str>,
    pub run_id: Option<Uuid>,
}

/// Reads [`MessageRow`]s: `$prefix` (the statement up to its columns) + the row's
/// columns + `$suffix`, with the statement's arguments. One column list for every query
/// of the table, checked against the database at compile time.
macro_rules! message_rows {
    ($prefix:literal, $suffix:literal $(, $argument:expr)* $(,)?) => {
        sqlx::query_as!(
            MessageRow,
            $prefix
                + r#" id, seq, role as "role: Role", content as "content: Json<Vec<ContentBlock>>",
                      model, run_id, pinned, created_at, content_bytes as "content_bytes?" "#
                + $suffix
            $(, $argument)*
        )
    };
}

/// How much of a message's words is kept for search (`text_content`): the search index
/// holds at most 1 MB of words per message (a longer text of distinct words fails the
/// insert), and a note retrieved from it is cut far shorter anyway. The message's content
/// is stored whole.
const MAX_SEARCHED_BYTES: usize = 256 * 1024;

/// Appends a message in two statements. The conversation row is locked so parallel
/// writers (tool results of one step) take consecutive sequence numbers.
pub async fn append(conn: &mut PgConnection, new: NewMessage<'_>) -> sqlx::Result<Message> {
    append_within(conn, new, i64::MAX, None)
        .await?
        .ok_or(sqlx::Error::RowNotFound)
}

/// The unique index on a conversation's idempotency keys: a message posted under a key
/// another message of the conversation already holds breaks it.
pub const IDEMPOTENCY_KEY_INDEX: &str = "messages_idempotency_key";

/// [`append`], unless the conversation would then hold more than `most_bytes` of
/// message content (`conversations.content_bytes`): `None`, and nothing is written.
/// Also `None` for a conversation the caller cannot see. A user's message keeps the
/// `idempotency_key` its client posted it under; one the conversation already holds
/// fails on [`IDEMPOTENCY_KEY_INDEX`].
pub async fn append_within(
    conn: &mut PgConnection,
    new: NewMessage<'_>,
    most_bytes: i64,
    idempotency_key: Option<Uuid>,
) -> sqlx::Result<Option<Message>> {
    let bytes = i64::try_from(storable::json_size(&new.content)).unwrap_or(i64::MAX);
    // Marks the conversation active, counts the content and, as an update, holds its
    // row until commit: the insert below (a new statement, so a fresh snapshot) sees
    // every earlier writer's message and takes the next number. The count is checked
    // and raised in the same statement, so two writers at once cannot both pass it.
    let counted = sqlx::query_scalar!(
        "update conversations set updated_at = now(), content_bytes = content_bytes + $2::bigint
         where id = $1 and content_bytes <= $3::bigint - $2::bigint
         returning id",
        new.conversation_id,
        bytes,
        most_bytes
    )
    .fetch_optional(&mut *conn)
    .await?;
    if counted.is_none() {
        return Ok(None);
    }
    let mut text: String = new
        .content
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n");
    if text.len() > MAX_SEARCHED_BYTES {
        let end = (0..=MAX_SEARCHED_BYTES)
            .rev()
            .find(|&at| text.is_char_boundary(at))
            .unwrap_or(0);
        text.truncate(end);
    }
    let row = message_rows!(
        "insert into messages (id, conversation_id, user_id, seq, role, content, model, run_id, text_content, content_bytes, idempotency_key)
         values ($1, $2, $3,
                 (select coalesce(max(seq), 0) + 1 from messages where conversation_id = $2),
                 $4, $5, $6, $7, $8, $9, $10)
         returning",
        "",
        Uuid::new_v4(),
        new.conversation_id,
        new.user_id,
        new.role.as_str(),
        Json(new.content) as _,
        new.model,
        new.run_id,
        text,
        i32::try_from(bytes).unwrap_or(i32::MAX),
        idempotency_key,
    )
    .fetch_one(conn)
    .await?;
    Ok(Some(row.into()))
}

/// The message the caller posted to the conversation under `idempotency_key`, and,
/// when it started no run, the reply `reply_model` wrote right after it (a command's).
pub async fn posted_under_key(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    idempotency_key: Uuid,
    reply_model: &str,
) -> sqlx::Result<Option<(Message, Option<Message>)>> {
    let mut rows = message_rows!(
        "select",
        "from messages
         where conversation_id = $1
           and (idempotency_key = $2
                or (role = 'assistant' and model = $3
                    and seq = (select posted.seq + 1 from messages posted
                               where posted.conversation_id = $1
                                 and posted.idempotency_key = $2
                                 and posted.run_id is null)))
         order by seq",
        conversation_id,
        idempotency_key,
        reply_model,
    )
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(Message::from);
    Ok(rows.next().map(|posted| (posted, rows.next())))
}

pub async fn list(conn: &mut PgConnection, conversation_id: Uuid) -> sqlx::Result<Vec<Message>> {
    let rows = message_rows!(
        "select",
        "from messages where conversation_id = $1 order by seq",
        conversation_id,
    )
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// One page of a conversation's messages: those after `after_seq`, in order, at most
/// `limit` of them and no more than about `max_bytes` of content (at least one message,
/// however large); and whether more may follow. The database stops sending at that
/// size too, by each message's `content_bytes` (one stored without it, 0, counts by its
/// content; both sides count the same): one message past it, which tells that more
/// follow, and no other.
pub async fn page(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    after_seq: i32,
    limit: usize,
    max_bytes: usize,
) -> sqlx::Result<(Vec<Message>, bool)> {
    let ask = i64::try_from(limit).unwrap_or(i64::MAX).saturating_add(1);
    // At least one message, however large: a budget of 0 would send none.
    let most = i64::try_from(max_bytes.max(1)).unwrap_or(i64::MAX);
    // `before_previous`: the size of every message before the one before this one.
    let mut rows = message_rows!(
        "select",
        "from (select counted.*,
                      coalesce(sum(counted.content_bytes) over (order by counted.seq
                          rows between unbounded preceding and 2 preceding), 0)
                          as before_previous
               from (select m.id, m.seq, m.role, m.content, m.model, m.run_id, m.pinned,
                            m.created_at,
                            coalesce(nullif(m.content_bytes, 0), octet_length(m.content::text))
                                as content_bytes
                     from messages m
                     where m.conversation_id = $1 and m.seq > $2
                     order by m.seq limit $3) as counted) as sized
         where sized.before_previous < $4
         order by sized.seq",
        conversation_id,
        after_seq,
        ask,
        most,
    )
    .fetch(conn);
    let mut page = SizedBatch::new(limit, max_bytes);
    while let Some(row) = rows.try_next().await? {
        if page.is_full() {
            return Ok(page.finish(true));
        }
        // Never absent here (the query counts a message stored without its size).
        let size = row.content_bytes.unwrap_or(-1);
        page.take(row.into(), size);
    }
    Ok(page.finish(false))
}

pub async fn find(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<Message>> {
    let row = message_rows!("select", "from messages where id = $1", id)
        .fetch_optional(conn)
        .await?;
    Ok(row.map(Into::into))
}

/// Pins or unpins one of the caller's user messages; `None` when there is no such user
/// message in the conversation.
pub async fn set_pinned(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    message_id: Uuid,
    pinned: bool,
) -> sqlx::Result<Option<Message>> {
    let row = message_rows!(
        "update messages set pinned = $3
         where conversation_id = $1 and id = $2 and role = 'user'
         returning",
        "",
        conversation_id,
        message_id,
        pinned,
    )
    .fetch_optional(conn)
    .await?;
    Ok(row.map(Into::into))
}

/// The words read of each message [`latest_request`] looks at: past the longest
/// command, so a cut start still tells one.
const HEAD_CHARS: i32 = 256;

/// User messages read at a time by [`latest_request`].
const HEADS_AT_A_TIME: i64 = 32;

/// The most of the user's latest messages [`latest_request`] looks through.
const MOST_HEADS: usize = 1024;

/// The user's latest message that is no chat command: its id and the start of its
/// words; `None` also when the latest [`MOST_HEADS`] are all commands. Read newest first
/// by the start of their words, a few at a time, not whole: a conversation may hold
/// many commands and much content.
pub async fn latest_request(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Option<(Uuid, String)>> {
    let mut before = i32::MAX;
    let mut looked = 0;
    while looked < MOST_HEADS {
        let heads = sqlx::query!(
            r#"select id, seq, left(text_content, $3 + 1) as "head!",
                      not jsonb_path_exists(content, '$[*] ? (@.type != "text")') as "text_only!"
               from messages
               where conversation_id = $1 and role = 'user' and seq < $2
               order by seq desc
               limit $4"#,
            conversation_id,
            before,
            HEAD_CHARS,
            HEADS_AT_A_TIME
        )
        .fetch_all(&mut *conn)
        .await?;
        let Some(last) = heads.last() else {
            return Ok(None);
        };
        before = last.seq;
        looked += heads.len();
        for row in heads {
            if !row.text_only {
                return Ok(Some((row.id, row.head)));
            }
            let whole = row.head.chars().count() <= HEAD_CHARS as usize;
            let command = match protocol::chat::is_command_start(&row.head, whole) {
                Some(command) => command,
                // Blanks longer than the start read: the message itself tells.
                None => find(conn, row.id)
                    .await?
                    .is_some_and(|message| message.is_command()),
            };
            if !command {
                return Ok(Some((row.id, row.head)));
            }
        }
    }
    Ok(None)
}

/// Unpins every pinned message of the conversation; how many were.
pub async fn unpin_all(conn: &mut PgConnection, conversation_id: Uuid) -> sqlx::Result<u64> {
    let unpinned = sqlx::query!(
        "update messages set pinned = false where conversation_id = $1 and pinned",
        conversation_id
    )
    .execute(conn)
    .await?;
    Ok(unpinned.rows_affected())
}

/// A tool call of a run that has no result yet.
pub struct OpenCall {
    pub tool_call_id: String,
    pub tool_name: String,
}

/// The run's tool calls without a result written since the call, oldest first.
pub async fn open_calls_of_run(
    conn: &mut PgConnection,
    run_id: Uuid,
) -> sqlx::Result<Vec<OpenCall>> {
    sqlx::query_as!(
        OpenCall,
        r#"select c.id as "tool_call_id!", c.name as "tool_name!"
           from messages m
           cross join lateral jsonb_to_recordset(m.content) as c(type text, id text, name text)
           where m.run_id = $1 and m.role = 'assistant' and c.type = 'tool_call'
             and not exists (select 1 from messages r
                             where r.conversation_id = m.conversation_id and r.role = 'tool'
                               and r.created_at >= m.created_at
                               and r.content @> jsonb_build_array(jsonb_build_object(
                                   'tool_call_id', c.id)))
           order by m.seq"#,
        run_id
    )
    .fetch_all(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, conversations};

    #[tokio::test]
    async fn the_latest_request_is_the_users_last_message_that_is_no_command() {
        let pool = db::tests::scratch_pool().await;
        let mut tx = db::begin_as_user(&pool, "pia").await.expect("tx");
        let conversation = conversations::insert(&mut tx, "pia", "t")
            .await
            .expect("conversation")
            .id;
        async fn say(
            conn: &mut PgConnection,
            conversation_id: Uuid,
            role: Role,
            content: Vec<ContentBlock>,
        ) -> Uuid {
            let new = NewMessage {
                conversation_id,
                user_id: "pia",
                role,
                content: &content,
                model: None,
                run_id: None,
            };
            append(conn, new).await.expect("message").id
        }
        let text = |text: &str| ContentBlock::Text { text: text.into() };
        say(
            &mut tx,
            conversation,
            Role::User,
            vec![text("the first request")],
        )
        .await;
        // An image makes it a message for the model, whatever its words.
        let with_image = say(
            &mut tx,
            conversation,
            Role::User,
            vec![
                text("/help with this picture"),
                ContentBlock::Image {
                    url: "https://example.com/a.png".into(),
                },
            ],
        )
        .await;
        say(
            &mut tx,
            conversation,
            Role::Assistant,
            vec![text("a long answer")],
        )
        .await;
        // More commands than one read takes, one of them led by more blanks than the
        // start read holds.
        for n in 0..40 {
            say(
                &mut tx,
                conversation,
                Role::User,
                vec![text(&format!("/help {n}"))],
            )
            .await;
        }
        say(
            &mut tx,
            conversation,
            Role::User,
            vec![text(&format!("{}/pin", " ".repeat(400)))],
        )
        .await;
        let latest = latest_request(&mut tx, conversation).await.expect("read");
        assert_eq!(
            latest,
            Some((with_image, "/help with this picture".to_owned()))
        );
        // A request of blanks first, longer than the start read: not a command.
        let blank_led = say(
            &mut tx,
            conversation,
            Role::User,
            vec![text(&format!("{}fix it", " ".repeat(400)))],
        )
        .await;
        let latest = latest_request(&mut tx, conversation).await.expect("read");
        assert_eq!(latest.map(|(id, _)| id), Some(blank_led));
    }

    #[tokio::test]
    async fn a_page_ends_at_its_limit_or_its_size_and_says_whether_more_follow() {
        let pool = db::tests::scratch_pool().await;
        let mut tx = db::begin_as_user(&pool, "pat").await.expect("tx");
        let conversation = conversations::insert(&mut tx, "pat", "t")
            .await
            .expect("conversation")
            .id;
        for n in 0..5 {
            let content = [ContentBlock::Text {
                text: format!("{n}{}", "x".repeat(999)),
            }];
            append(
                &mut tx,
                NewMessage {
                    conversation_id: conversation,
                    user_id: "pat",
                    role: Role::User,
                    content: &content,
                    model: None,
                    run_id: None,
                },
            )
            .await
            .expect("message");
        }
        let seqs = |page: &[Message]| page.iter().map(|m| m.seq).collect::<Vec<_>>();

        let (first, more) = page(&mut tx, conversation, i32::MIN, 2, 1 << 20)
            .await
            .expect("page");
        assert_eq!((seqs(&first), more), (vec![1, 2], true));
        let (last, more) = page(&mut tx, conversation, 4, 2, 1 << 20)
            .await
            .expect("page");
        assert_eq!((seqs(&last), more), (vec![5], false));
        let (exactly, more) = page(&mut tx, conversation, 3, 2, 1 << 20)
            .await
            .expect("page");
        assert_eq!((seqs(&exactly), more), (vec![4, 5], false));
        // Each message is over 1,000 bytes as JSON: a 2,500-byte page holds three.
        let (sized, more) = page(&mut tx, conversation, i32::MIN, 100, 2_500)
            .await
            .expect("page");
        assert_eq!((seqs(&sized), more), (vec![1, 2, 3], true));
        // One message larger than a page is still a page.
        let (one, more) = page(&mut tx, conversation, 0, 100, 10).await.expect("page");
        assert_eq!((seqs(&one), more), (vec![1], true));
        let (one, more) = page(&mut tx, conversation, 0, 100, 0).await.expect("page");
        assert_eq!((seqs(&one), more), (vec![1], true), "a budget of nothing");
        let (none, more) = page(&mut tx, conversation, 5, 100, 10).await.expect("page");
        assert_eq!((seqs(&none), more), (vec![], false));
    }
}
