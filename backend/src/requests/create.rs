//! How requests begin: created through the action API or by the executor, and listed
//! while they wait.
//!
//! Every function runs inside the caller's transaction (`db::begin_as_user`), so
//! row-level security already limits it to the caller's rows; a row that belongs to
//! somebody else is simply not found.

use protocol::api::{CreateRequestParams, Elicitation, RequestKind};
use protocol::approval::Decision;
use protocol::chat::EventKind;
use protocol::fields::{self, FieldSpec, SaveFor};
use protocol::unseen;
use serde_json::{Map, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::db::input_requests::{self, InputRequestRow, NewInputRequest};
use crate::db::{self, conversations, events};
use crate::error::{Error, FieldErrors, Result, ResultExt};
use crate::tools::mcp::stateless::RetryState;

/// Longest tool name, tool call id or reason accepted.
const MAX_NAME_LEN: usize = 200;
const MAX_REASON_LEN: usize = 2000;

/// What creating a request needs beyond the caller's parameters.
pub struct RequestContext<'a> {
    pub user_id: &'a str,
    pub run_id: Option<Uuid>,
    pub ttl: std::time::Duration,
    /// Most requests waiting for the user at once in one conversation.
    pub max_waiting: u32,
    /// `executor` or `api`: only the executor's requests are retried on completion.
    pub origin: &'a str,
    pub original_user_request: Option<&'a str>,
}

/// Not found unless the conversation is the caller's.
pub async fn ensure_conversation(conn: &mut PgConnection, id: Uuid) -> Result<()> {
    if conversations::exists(conn, id).await? {
        Ok(())
    } else {
        Err(Error::NotFound("conversation"))
    }
}

fn check_text(errors: &mut FieldErrors, name: &str, value: &str, max: usize) {
    if value.trim().is_empty() {
        errors.insert(name.to_owned(), "must not be empty".to_owned());
    } else if value.chars().count() > max {
        errors.insert(name.to_owned(), format!("must be at most {max} characters"));
    }
}

/// Stores a new pending request after checking its field definitions, which happens
/// before its transaction begins: a check may wait its turn ([`super::off_the_workers`])
/// and take a while, and no pooled connection is held meanwhile.
pub async fn create_request(
    pool: &PgPool,
    ctx: &RequestContext<'_>,
    params: CreateRequestParams,
) -> Result<InputRequestRow> {
    let mut errors = FieldErrors::new();
    check_text(&mut errors, "tool_name", &params.tool_name, MAX_NAME_LEN);
    check_text(
        &mut errors,
        "tool_call_id",
        &params.tool_call_id,
        MAX_NAME_LEN,
    );
    check_text(&mut errors, "reason", &params.reason, MAX_REASON_LEN);
    if let Some(why) = params
        .tool_args
        .as_ref()
        .and_then(|arguments| super::arguments_too_large(arguments, super::MAX_ARGUMENTS_BYTES))
    {
        errors.insert("tool_args".to_owned(), why);
    }
    let raw_fields = params.fields;
    let parsed = super::off_the_workers(ctx.user_id, super::Holding::Nothing, move || {
        fields::parse_field_specs(&raw_fields)
    })
    .await?;
    let specs = match parsed {
        Ok(specs) if specs.is_empty() => {
            errors.insert("fields".into(), "at least one field is required".into());
            Vec::new()
        }
        Ok(specs) => specs,
        Err(field_errors) => {
            for (name, message) in field_errors {
                errors.insert(format!("fields.{name}"), message);
            }
            Vec::new()
        }
    };
    // A warning is toolgate's own voice on a card (the caution on a form that asks for a
    // password); a caller speaking in it would vouch for its own card.
    for spec in specs.iter().filter(|spec| spec.warning.is_some()) {
        errors.insert(
            format!("fields.{}.warning", spec.name),
            "is toolgate's own caution, not a caller's".to_owned(),
        );
    }
    if !errors.is_empty() {
        return Err(Error::unprocessable(
            "the request definition is invalid",
            errors,
        ));
    }
    // What the card says is a caller's words: shown with every character the user cannot
    // see, or that reorders what they see, written out, as an MCP server's question is;
    // the limits hold for what is shown and stored.
    let mut specs = specs;
    for spec in &mut specs {
        if let Some(problem) = spec.write_out_words() {
            errors.insert(format!("fields.{}", spec.name), problem);
        }
    }
    let reason = unseen::written_out(&params.reason);
    if reason.chars().count() > MAX_REASON_LEN {
        errors.insert(
            "reason".to_owned(),
            format!(
                "must be at most {MAX_REASON_LEN} characters once its hidden and look-alike characters are written out"
            ),
        );
    }
    if !errors.is_empty() {
        return Err(Error::unprocessable(
            "the request definition is invalid",
            errors,
        ));
    }
    let save_for = fields::effective_save_for(params.save_for, params.save_for_session);
    // What a caller declares secret is never stored in the clear, wherever it is put.
    let tool_args = fields::mask_secrets(&specs, &params.tool_args.unwrap_or_default());
    let mut tx = db::begin_as_user(pool, ctx.user_id).await?;
    let row = insert_request(
        &mut tx,
        ctx,
        params.conversation_id,
        &params.tool_name,
        &params.tool_call_id,
        &tool_args,
        Ask::Input {
            reason: &reason,
            fields: &specs,
            save_for,
        },
    )
    .await?;
    tx.commit().await?;
    Ok(row)
}

/// What is asked: values for fields, approval of exact arguments, or an MCP server's
/// question while its tool runs.
pub enum Ask<'a> {
    Input {
        reason: &'a str,
        fields: &'a [FieldSpec],
        save_for: SaveFor,
    },
    Approval {
        reason: &'a str,
        /// Toolgate's own words beside the reason (see `InputRequest::note`).
        note: Option<&'a str>,
        /// The tool's fields, so the card can label the arguments that fill them.
        fields: &'a [FieldSpec],
        decisions: &'a [Decision],
        digest: &'a str,
        /// Values given on an earlier card of the same call (secrets sealed).
        carried: Option<&'a Map<String, Value>>,
    },
    Elicitation {
        reason: &'a str,
        fields: &'a [FieldSpec],
        save_for: SaveFor,
        elicitation: &'a Elicitation,
        /// This process, whose live session waits for the answer.
        held_by: Uuid,
    },
    /// An MCP server's question with nothing waiting on it: answered, the tool is
    /// called again with what `retry` keeps.
    Stateless {
        reason: &'a str,
        fields: &'a [FieldSpec],
        save_for: SaveFor,
        elicitation: &'a Elicitation,
        retry: &'a RetryState,
    },
}

/// Stores a pending request whose definition is already known to be valid (the
/// executor's path, with definitions checked at start-up). `tool_args` must already be
/// free of anything that may not be stored (see `Tool::storable_arguments`).
pub async fn insert_request(
    conn: &mut PgConnection,
    ctx: &RequestContext<'_>,
    conversation_id: Uuid,
    tool_name: &str,
    tool_call_id: &str,
    tool_args: &Map<String, Value>,
    ask: Ask<'_>,
) -> Result<InputRequestRow> {
    let mut elicitation = None;
    let mut held_by = None;
    let mut retry_state = None;
    let mut note = None;
    let (kind, reason, fields, save_for, decisions, digest, carried) = match ask {
        Ask::Input {
            reason,
            fields,
            save_for,
        } => (
            RequestKind::Input,
            reason,
            fields,
            save_for,
            &[][..],
            None,
            None,
        ),
        Ask::Approval {
            reason,
            note: said,
            fields,
            decisions,
            digest,
            carried,
        } => {
            note = said;
            (
                RequestKind::Approval,
                reason,
                fields,
                SaveFor::Call,
                decisions,
                Some(digest),
                carried,
            )
        }
        Ask::Elicitation {
            reason,
            fields,
            save_for,
            elicitation: asked,
            held_by: holder,
        } => {
            elicitation = Some(asked);
            held_by = Some(holder);
            (
                RequestKind::Input,
                reason,
                fields,
                save_for,
                &[][..],
                None,
                None,
            )
        }
        Ask::Stateless {
            reason,
            fields,
            save_for,
            elicitation: asked,
            retry,
        } => {
            elicitation = Some(asked);
            retry_state = Some(retry);
            (
                RequestKind::Input,
                reason,
                fields,
                save_for,
                &[][..],
                None,
                None,
            )
        }
    };
    // The conversation's writer lock comes first, as in every writer (see
    // `conversations::lock_for_writing`): an MCP server's question is stored by a
    // transaction that already holds it, and one that took it after the counting
    // below would deadlock with it.
    if !conversations::lock_for_writing(conn, conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    // The unique key holds one request of each kind per id; a model that gives one id
    // to two calls (an input request and an approval, say) would leave two cards that
    // one answer or cancel by id cannot tell apart.
    if input_requests::call_id_taken(conn, ctx.user_id, tool_call_id, tool_name, conversation_id)
        .await?
    {
        return Err(duplicate_call_id(tool_call_id));
    }
    // Every card waits on the user's screen and in every read of what waits: a caller
    // (or a model) that asks without end fills neither.
    let most = ctx.max_waiting;
    if input_requests::count_waiting(conn, conversation_id, most).await? >= i64::from(most) {
        return Err(Error::conflict(
            "too_many_pending",
            format!(
                "{most} requests already wait for the user in this conversation; \
                 they must be answered, declined or cancelled before another is made"
            ),
        ));
    }
    let inserted = input_requests::insert(
        conn,
        NewInputRequest {
            user_id: ctx.user_id,
            conversation_id,
            run_id: ctx.run_id,
            tool_name,
            tool_call_id,
            tool_args,
            reason,
            fields,
            save_for: save_for.as_str(),
            ttl: ctx.ttl,
            origin: ctx.origin,
            original_user_request: ctx.original_user_request,
            kind: kind.as_str(),
            allowed_decisions: decisions,
            arguments_digest: digest,
            user_inputs: carried,
            elicitation,
            held_by,
            retry_state,
            note,
        },
    )
    .await
    .on_constraint("tool_user_input_requests_call_key", |_| {
        duplicate_call_id(tool_call_id)
    })?;
    // The insert only happens when the conversation is the caller's.
    let row = inserted.ok_or(Error::NotFound("conversation"))?;
    // A run announces its requests when it records that it waits, and an MCP server's
    // question is announced where it is asked; one made outside a run (the action API,
    // `/api/tools/execute`) is announced here, so an open chat shows its card at once.
    if ctx.run_id.is_none() && elicitation.is_none() {
        let announced = EventKind::InputRequested {
            request: row.to_api(),
        };
        events::append(conn, conversation_id, ctx.user_id, None, &announced).await?;
    }
    Ok(row)
}

/// The conversation's requests still waiting for the caller, in one round trip (no
/// transaction: the read sets the identity for its own statement).
pub async fn get_pending(
    pool: &PgPool,
    user_id: &str,
    conversation_id: Uuid,
) -> Result<Vec<InputRequestRow>> {
    input_requests::list_pending_as(pool, user_id, conversation_id)
        .await?
        .ok_or(Error::NotFound("conversation"))
}

fn duplicate_call_id(tool_call_id: &str) -> Error {
    Error::conflict(
        "duplicate_tool_call_id",
        format!("a request for tool call `{tool_call_id}` already exists"),
    )
}
