//! `tool_user_input_requests`: what a tool asked the user, and what they answered.

use chrono::{DateTime, Utc};
use protocol::FieldSpec;
use protocol::api::{Elicitation, RequestKind, RequestStatus};

use super::not_found_as_none;
use crate::tools::mcp::stateless::RetryState;
use protocol::approval::Decision;
use serde_json::{Map, Value};
use sqlx::postgres::types::PgInterval;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// Reads [`InputRequestRow`]s: `$prefix` (the statement up to its columns) + the row's
/// columns + `$suffix`, with the statement's arguments. One column list for every query
/// of the table, checked against the database at compile time.
macro_rules! request_rows {
    ($prefix:literal, $suffix:literal $(, $argument:expr)* $(,)?) => {
        sqlx::query_as!(
            InputRequestRow,
            $prefix
                + r#" id as "id!", user_id as "user_id!",
                      conversation_id as "conversation_id!", run_id,
                      tool_name as "tool_name!", tool_call_id as "tool_call_id!",
                      tool_args as "tool_args!: Json<Map<String, Value>>", reason as "reason!",
                      required_fields as "required_fields!: Json<Vec<FieldSpec>>",
                      user_inputs as "user_inputs: Json<Map<String, Value>>",
                      save_for as "save_for!", status as "status!: RequestStatus",
                      created_at as "created_at!", completed_at, expires_at as "expires_at!",
                      expires_at <= now() as "past_due!",
                      origin as "origin!", original_user_request, tool_result,
                      kind as "kind!: RequestKind",
                      allowed_decisions as "allowed_decisions!: Json<Vec<Decision>>",
                      arguments_digest, decision, decision_message, decided_by,
                      elicitation as "elicitation: Json<Elicitation>", held_by,
                      retry_state as "retry_state: Json<RetryState>", note "#
                + $suffix
            $(, $argument)*
        )
    };
}

/// A stored request. `user_inputs` holds secret values sealed by the vault.
#[derive(Debug, Clone)]
pub struct InputRequestRow {
    pub id: Uuid,
    pub user_id: String,
    pub conversation_id: Uuid,
    pub run_id: Option<Uuid>,
    pub tool_name: String,
    pub tool_call_id: String,
    pub tool_args: Json<Map<String, Value>>,
    pub reason: String,
    pub required_fields: Json<Vec<FieldSpec>>,
    pub user_inputs: Option<Json<Map<String, Value>>>,
    pub save_for: String,
    pub status: RequestStatus,
    pub created_at: DateTime<Utc>,
    pub completed_at: Option<DateTime<Utc>>,
    pub expires_at: DateTime<Utc>,
    /// Past `expires_at` when read, by the database's clock (the one the expiry sweep
    /// and every ending read, whatever the clock of the server that reads the row).
    pub past_due: bool,
    /// `executor` when the universal executor asked, `api` for the action API.
    pub origin: String,
    pub original_user_request: Option<String>,
    /// The outcome of retrying the tool with the submitted values.
    pub tool_result: Option<Value>,
    /// `input` or `approval`.
    pub kind: RequestKind,
    pub allowed_decisions: Json<Vec<Decision>>,
    /// Approval: the digest of the arguments being approved.
    pub arguments_digest: Option<String>,
    pub decision: Option<String>,
    /// The user's words with a rejection or a decline.
    pub decision_message: Option<String>,
    pub decided_by: Option<String>,
    /// An MCP server's question: which server, which call, URL mode's link.
    pub elicitation: Option<Json<Elicitation>>,
    /// The toolgate process whose live MCP session waits for the answer.
    pub held_by: Option<Uuid>,
    /// A stateless question: what calling the tool again needs.
    pub retry_state: Option<Json<RetryState>>,
    /// Approval: toolgate's own words beside the reason (see `InputRequest::note`).
    pub note: Option<String>,
}

pub struct NewInputRequest<'a> {
    pub user_id: &'a str,
    pub conversation_id: Uuid,
    pub run_id: Option<Uuid>,
    pub tool_name: &'a str,
    pub tool_call_id: &'a str,
    pub tool_args: &'a Map<String, Value>,
    pub reason: &'a str,
    pub fields: &'a [FieldSpec],
    pub save_for: &'a str,
    /// How long it waits for an answer, from when the database stores it.
    pub ttl: std::time::Duration,
    pub origin: &'a str,
    pub original_user_request: Option<&'a str>,
    pub kind: &'a str,
    pub allowed_decisions: &'a [Decision],
    pub arguments_digest: Option<&'a str>,
    /// Values carried over from an earlier request of the same call (secrets sealed).
    pub user_inputs: Option<&'a Map<String, Value>>,
    pub elicitation: Option<&'a Elicitation>,
    pub held_by: Option<Uuid>,
    pub retry_state: Option<&'a RetryState>,
    pub note: Option<&'a str>,
}

/// Stores a request if its conversation is visible to the caller; `None` otherwise.
pub async fn insert(
    conn: &mut PgConnection,
    new: NewInputRequest<'_>,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "insert into tool_user_input_requests
             (id, user_id, conversation_id, run_id, tool_name, tool_call_id, tool_args,
              reason, required_fields, save_for, expires_at, origin, original_user_request,
              kind, allowed_decisions, arguments_digest, user_inputs, elicitation, held_by,
              retry_state, note)
         select $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, now() + $11::interval, $12, $13,
                $14, $15, $16, $17, $18, $19, $20, $21
         where exists (select 1 from conversations where id = $3)
         returning",
        "",
        Uuid::new_v4(),
        new.user_id,
        new.conversation_id,
        new.run_id,
        new.tool_name,
        new.tool_call_id,
        Json(new.tool_args) as _,
        new.reason,
        Json(new.fields) as _,
        new.save_for,
        PgInterval {
            months: 0,
            days: 0,
            microseconds: i64::try_from(new.ttl.as_micros()).unwrap_or(i64::MAX),
        },
        new.origin,
        new.original_user_request,
        new.kind,
        Json(new.allowed_decisions) as _,
        new.arguments_digest,
        new.user_inputs.map(Json) as _,
        new.elicitation.map(Json) as _,
        new.held_by,
        new.retry_state.map(Json) as _,
        new.note,
    )
    .fetch_optional(conn)
    .await
}

/// The caller's request with this id.
pub async fn find(conn: &mut PgConnection, id: Uuid) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!("select", "from tool_user_input_requests where id = $1", id,)
        .fetch_optional(conn)
        .await
}

/// The caller's pending input request for a tool call, read without a lock.
pub async fn pending_input(
    conn: &mut PgConnection,
    tool_call_id: &str,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests
         where tool_call_id = $1 and kind = 'input' and status = 'pending'
         limit 1",
        tool_call_id,
    )
    .fetch_optional(conn)
    .await
}

/// The caller's request with this id, locked, if it is still pending.
pub async fn pending_for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests
         where id = $1 and status = 'pending'
         for update",
        id,
    )
    .fetch_optional(conn)
    .await
}

/// A request, however it stands, locked.
pub async fn for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests where id = $1 for update",
        id,
    )
    .fetch_optional(conn)
    .await
}

/// The questions of one stateless round, locked.
pub async fn round_for_update(
    conn: &mut PgConnection,
    round: Uuid,
) -> sqlx::Result<Vec<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests
         where retry_state ->> 'round' = $1::uuid::text
         order by created_at
         for update",
        round,
    )
    .fetch_all(conn)
    .await
}

/// Marks a stateless round as answered; `false` when it already was, so the call is
/// made again exactly once.
pub async fn claim_round(conn: &mut PgConnection, round: Uuid) -> sqlx::Result<bool> {
    let claimed = sqlx::query!(
        r#"update tool_user_input_requests
         set retry_state = retry_state || '{"retried": true}'::jsonb
         where retry_state ->> 'round' = $1::uuid::text
           and not coalesce((retry_state ->> 'retried')::boolean, false)"#,
        round
    )
    .execute(conn)
    .await?;
    Ok(claimed.rows_affected() > 0)
}

/// The ids of an MCP call's questions still waiting for the user: the call
/// `call_tool_call_id` of `conversation_id` (the same id may name a call of another
/// conversation).
pub async fn pending_elicitations_of_call(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    call_tool_call_id: &str,
) -> sqlx::Result<Vec<Uuid>> {
    sqlx::query_scalar!(
        "select id from tool_user_input_requests
         where origin = 'mcp' and status = 'pending' and held_by is not null
           and conversation_id = $1 and elicitation ->> 'tool_call_id' = $2
         order by created_at",
        conversation_id,
        call_tool_call_id
    )
    .fetch_all(conn)
    .await
}

/// Whether `tool_call_id` already belongs to another call of `user_id`: a request of it
/// still waits, or one was for another tool or conversation. One id is one call, so an
/// answer, a decision or a cancel by id always reaches the card the user sees.
///
/// Takes a lock on the user's id until the transaction ends first, so two calls given
/// the same id at once (a model's reply runs its calls side by side) are told apart:
/// the second looks only once the first has committed its request. Call it inside the
/// transaction that inserts the request.
pub async fn call_id_taken(
    conn: &mut PgConnection,
    user_id: &str,
    tool_call_id: &str,
    tool_name: &str,
    conversation_id: Uuid,
) -> sqlx::Result<bool> {
    sqlx::query!(
        "select pg_advisory_xact_lock(hashtextextended($1 || chr(1) || $2, 7301))",
        user_id,
        tool_call_id,
    )
    .execute(&mut *conn)
    .await?;
    sqlx::query_scalar!(
        r#"select exists(
             select 1 from tool_user_input_requests
             where user_id = $1 and tool_call_id = $2
               and (status = 'pending' or tool_name <> $3 or conversation_id <> $4)
           ) as "taken!""#,
        user_id,
        tool_call_id,
        tool_name,
        conversation_id,
    )
    .fetch_one(conn)
    .await
}

/// Which of `ids` a request of the user's already carries, in any of their conversations:
/// a request's id is the user's, once (see [`call_id_taken`]).
pub async fn ids_in_use(
    conn: &mut PgConnection,
    user_id: &str,
    ids: &[String],
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        r#"select distinct tool_call_id as "tool_call_id!" from tool_user_input_requests
           where user_id = $1 and tool_call_id = any($2)"#,
        user_id,
        ids,
    )
    .fetch_all(conn)
    .await
}

/// The newest URL-mode question of `server` with this elicitation id that this process
/// holds for `user_id`, however it stands (background path: the caller names the user).
pub async fn find_elicitation(
    conn: &mut PgConnection,
    holder: Uuid,
    server: &str,
    user_id: &str,
    elicitation_id: &str,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests
         where held_by = $1 and elicitation ->> 'server' = $2 and user_id = $3
           and elicitation ->> 'elicitation_id' = $4
         order by created_at desc limit 1",
        holder,
        server,
        user_id,
        elicitation_id,
    )
    .fetch_optional(conn)
    .await
}

/// Pending MCP questions whose process is gone (no heartbeat for `silence`), with their
/// conversation (background path).
pub async fn orphaned(
    conn: &mut PgConnection,
    silence: chrono::Duration,
) -> sqlx::Result<Vec<(Uuid, Uuid)>> {
    let rows = sqlx::query!(
        "select q.id, q.conversation_id from tool_user_input_requests q
         where q.status = 'pending' and q.held_by is not null
           and not exists (select 1 from server_instances i
                           where i.id = q.held_by and i.heartbeat_at > now() - $1::interval)
         limit 500",
        silence as _
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.id, row.conversation_id))
        .collect())
}

/// Reads the caller's request for a tool call and locks it for the rest of the
/// transaction, so two answers to one request are serialised. Its conversation's writer
/// lock is taken first, in the same statement (the lock order every writer keeps; see
/// `conversations::lock_for_writing`). A call can have an input request and then an
/// approval request: `kind` picks one, `None` prefers the pending one, else the newest.
pub async fn find_for_update(
    conn: &mut PgConnection,
    tool_call_id: &str,
    kind: Option<&str>,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "with conversation as (
             select c.id from conversations c
             where c.id in (select conversation_id from tool_user_input_requests
                            where tool_call_id = $1)
             order by c.id
             for no key update)
         select",
        "from tool_user_input_requests
         where tool_call_id = $1 and ($2::text is null or kind = $2)
           and conversation_id in (select id from conversation)
         order by status = 'pending' desc, created_at desc
         limit 1
         for update of tool_user_input_requests",
        tool_call_id,
        kind,
    )
    .fetch_optional(conn)
    .await
}

/// How many of the conversation's requests wait for the user now (not yet expired),
/// counted up to `up_to`.
///
/// Call it inside the transaction that inserts the request, holding the conversation's
/// writer lock (`conversations::lock_for_writing`), so requests made side by side are
/// counted one after the other.
pub async fn count_waiting(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    up_to: u32,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"select count(*) as "waiting!" from (
             select 1 from tool_user_input_requests
             where conversation_id = $1 and status = 'pending' and expires_at > now()
             limit $2
           ) as waiting"#,
        conversation_id,
        i64::from(up_to),
    )
    .fetch_one(conn)
    .await
}

/// The conversation's requests still waiting for the user, oldest first, read in one
/// round trip as `user_id` (the function sets the identity for its own statement; see
/// the migration `one_trip_reads`). `None` when the conversation is not the caller's.
/// It takes the pool, never a transaction, in which the identity would outlive the call.
pub async fn list_pending_as(
    pool: &PgPool,
    user_id: &str,
    conversation_id: Uuid,
) -> sqlx::Result<Option<Vec<InputRequestRow>>> {
    not_found_as_none(
        request_rows!(
            "select",
            "from toolgate_pending_requests($1, $2)",
            user_id,
            conversation_id,
        )
        .fetch_all(pool)
        .await,
    )
}

/// How a pending request ends, as stored.
pub struct Settlement<'a> {
    pub status: &'a str,
    pub user_inputs: Option<&'a Map<String, Value>>,
    /// Approval: the arguments decided on (changed by an edit) and their digest.
    pub tool_args: Option<&'a Map<String, Value>>,
    pub arguments_digest: Option<&'a str>,
    pub decision: Option<&'a str>,
    pub message: Option<&'a str>,
    pub decided_by: Option<&'a str>,
    /// Only before the request's time runs out, by the database's clock: the clock the
    /// sweep that expires it reads, whatever the clock of the server that answers.
    pub in_time: bool,
}

/// Moves a pending request to its ending; `None` when it is no longer pending (or,
/// for an ending `in_time`, past its time), so a request ends exactly once even
/// without a lock.
pub async fn settle(
    conn: &mut PgConnection,
    id: Uuid,
    settlement: Settlement<'_>,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "update tool_user_input_requests
         set status = $2, completed_at = now(),
             user_inputs = coalesce($3, user_inputs),
             tool_args = coalesce($4, tool_args),
             arguments_digest = coalesce($5, arguments_digest),
             decision = $6, decision_message = $7, decided_by = $8
         where id = $1 and status = 'pending' and (not $9 or expires_at > now())
         returning",
        "",
        id,
        settlement.status,
        settlement.user_inputs.map(Json) as _,
        settlement.tool_args.map(Json) as _,
        settlement.arguments_digest,
        settlement.decision,
        settlement.message,
        settlement.decided_by,
        settlement.in_time,
    )
    .fetch_optional(conn)
    .await
}

/// Pending requests past their expiry (id, conversation), oldest first.
pub async fn overdue(conn: &mut PgConnection) -> sqlx::Result<Vec<(Uuid, Uuid)>> {
    let rows = sqlx::query!(
        "select id, conversation_id from tool_user_input_requests
         where status = 'pending' and expires_at <= now()
         order by expires_at
         limit 500"
    )
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.id, row.conversation_id))
        .collect())
}

/// One request, locked, if it is still pending past its expiry; left alone when another
/// transaction holds it (that one is settling it).
pub async fn overdue_for_update(
    conn: &mut PgConnection,
    id: Uuid,
) -> sqlx::Result<Option<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests
         where id = $1 and status = 'pending' and expires_at <= now()
         for update skip locked",
        id,
    )
    .fetch_optional(conn)
    .await
}

/// How long until the next pending request expires (by the database's clock; none
/// when none is pending, nothing when one is overdue already).
pub async fn next_expiry_in(conn: &mut PgConnection) -> sqlx::Result<Option<std::time::Duration>> {
    let seconds = sqlx::query_scalar!(
        "select extract(epoch from min(expires_at) - now())::float8
         from tool_user_input_requests where status = 'pending'"
    )
    .fetch_one(conn)
    .await?;
    Ok(seconds.map(|seconds| std::time::Duration::from_secs_f64(seconds.clamp(0.0, 86_400.0))))
}

/// A run's pending requests, locked.
pub async fn pending_for_run_for_update(
    conn: &mut PgConnection,
    run_id: Uuid,
) -> sqlx::Result<Vec<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests
         where run_id = $1 and status = 'pending'
         order by created_at
         for update",
        run_id,
    )
    .fetch_all(conn)
    .await
}

pub async fn set_tool_result(
    conn: &mut PgConnection,
    id: Uuid,
    outcome: &Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update tool_user_input_requests set tool_result = $2 where id = $1",
        id,
        outcome
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Requests of a run still waiting for the user.
pub async fn count_pending_for_run(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"select count(*) as "count!" from tool_user_input_requests
           where run_id = $1 and status = 'pending'"#,
        run_id
    )
    .fetch_one(conn)
    .await
}

/// Whether the run must wait: one of its requests waits for the user, or was settled
/// but its outcome has not reached the run as a tool result yet (the follow-up that
/// delivers it, such as the tool run again with the answer or an MCP server's reply to
/// it, is still under way). Going on then would call the model without that result.
pub async fn holds_run(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select exists (
             select 1 from tool_user_input_requests q
             where q.run_id = $1
               and (q.status = 'pending'
                    -- Only a result written since the request counts, as below.
                    or not exists (select 1 from messages m
                                   where m.conversation_id = q.conversation_id
                                     and m.role = 'tool'
                                     and m.created_at >= q.created_at
                                     and m.content @> jsonb_build_array(jsonb_build_object(
                                         'tool_call_id',
                                         coalesce(q.elicitation ->> 'tool_call_id', q.tool_call_id)))))
           ) as "holds!""#,
        run_id
    )
    .fetch_one(conn)
    .await
}

/// Whether the call `tool_call_id` already has its tool result: one written since the
/// call's newest request. A delivery offered twice (its first commit's answer lost), or
/// one that comes after the recovery sweep recorded what happened to the request, must
/// not write a second.
pub async fn result_recorded(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    tool_call_id: &str,
) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"select exists (
             select 1 from messages m
             where m.conversation_id = $1 and m.role = 'tool'
               and m.content @> jsonb_build_array(jsonb_build_object('tool_call_id', $2::text))
               and m.created_at >= (select max(q.created_at) from tool_user_input_requests q
                                    where q.conversation_id = $1
                                      and coalesce(q.elicitation ->> 'tool_call_id',
                                                   q.tool_call_id) = $2)
           ) as "recorded!""#,
        conversation_id,
        tool_call_id
    )
    .fetch_one(conn)
    .await
}

/// Lets go of an MCP call's settled questions: no live session will report what the
/// call did, so the recovery sweep may record what happened to them and resume the run.
pub async fn release_call(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    tool_call_id: &str,
) -> sqlx::Result<()> {
    sqlx::query!(
        "update tool_user_input_requests set held_by = null
         where conversation_id = $1 and elicitation ->> 'tool_call_id' = $2
           and status <> 'pending'",
        conversation_id,
        tool_call_id
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A run's settled requests whose outcome never reached the run as a tool result.
pub async fn settled_without_result(
    conn: &mut PgConnection,
    run_id: Uuid,
) -> sqlx::Result<Vec<InputRequestRow>> {
    request_rows!(
        "select",
        "from tool_user_input_requests q
         where q.run_id = $1 and q.status <> 'pending'
           -- Only a result written since the request counts: an earlier call the model
           -- gave the same id is not this one's.
           and not exists (select 1 from messages m
                           where m.conversation_id = q.conversation_id and m.role = 'tool'
                             and m.created_at >= q.created_at
                             and m.content @> jsonb_build_array(jsonb_build_object('tool_call_id',
                                 coalesce(q.elicitation ->> 'tool_call_id', q.tool_call_id))))
         order by q.created_at",
        run_id,
    )
    .fetch_all(conn)
    .await
}
