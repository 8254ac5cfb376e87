//! `messages`: a conversation's history, in order.

use chrono::{DateTime, Utc};
use protocol::chat::{ContentBlock, Message, Role};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

struct MessageRow {
    id: Uuid,
    seq: i32,
    role: Role,
    content: Json<Vec<ContentBlock>>,
    model: Option<String>,
    run_id: Option<Uuid>,
    pinned: bool,
    created_at: DateTime<Utc>,
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
                      model, run_id, pinned, created_at "#
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
    // Marks the conversation active and, as an update, holds its row until commit: the
    // insert below (a new statement, so a fresh snapshot) sees every earlier writer's
    // message and takes the next number.
    sqlx::query!(
        "update conversations set updated_at = now() where id = $1",
        new.conversation_id
    )
    .execute(&mut *conn)
    .await?;
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
        "insert into messages (id, conversation_id, user_id, seq, role, content, model, run_id, text_content)
         values ($1, $2, $3,
                 (select coalesce(max(seq), 0) + 1 from messages where conversation_id = $2),
                 $4, $5, $6, $7, $8)
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
    )
    .fetch_one(conn)
    .await?;
    Ok(row.into())
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
