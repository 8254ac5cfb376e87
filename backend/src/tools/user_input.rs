//! Tool user input requests: the service behind the action API and the executor.
//!
//! Every function runs inside the caller's transaction (`db::begin_as_user`), so
//! row-level security already limits it to the caller's rows; a row that belongs to
//! somebody else is simply not found.

use chrono::Utc;
use protocol::api::{
    CreateRequestParams, InputRequest, RequestStatus, SavedScope, SavedValue, SubmitResponseParams,
};
use protocol::fields::{self, FieldSpec, MASKED, SaveFor, mask_secrets};
use serde_json::{Map, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use crate::db::input_requests::{self, InputRequestRow, NewInputRequest};
use crate::db::{conversations, saved_inputs};
use crate::error::{Error, FieldErrors, Result, ResultExt};
use crate::vault::Vault;

/// Longest tool name, tool call id or reason accepted.
const MAX_NAME_LEN: usize = 200;
const MAX_REASON_LEN: usize = 2000;

/// What creating a request needs beyond the caller's parameters.
pub struct RequestContext<'a> {
    pub user_id: &'a str,
    pub run_id: Option<Uuid>,
    pub ttl: std::time::Duration,
    /// `executor` or `api`: only the executor's requests are retried on completion.
    pub origin: &'a str,
    pub original_user_request: Option<&'a str>,
}

impl InputRequestRow {
    fn status(&self) -> RequestStatus {
        let stored = RequestStatus::parse(&self.status).unwrap_or(RequestStatus::Pending);
        if stored == RequestStatus::Pending && self.expires_at <= Utc::now() {
            RequestStatus::Expired
        } else {
            stored
        }
    }

    pub fn fields(&self) -> &[FieldSpec] {
        &self.required_fields.0
    }

    /// The request as callers see it: secrets masked, expiry applied.
    pub fn to_api(&self) -> InputRequest {
        InputRequest {
            id: self.id,
            conversation_id: self.conversation_id,
            run_id: self.run_id,
            tool_name: self.tool_name.clone(),
            tool_call_id: self.tool_call_id.clone(),
            tool_args: Value::Object(mask_secrets(self.fields(), &self.tool_args.0)),
            reason: self.reason.clone(),
            fields: self.required_fields.0.clone(),
            save_for: SaveFor::parse(&self.save_for).unwrap_or_default(),
            user_inputs: self
                .user_inputs
                .as_ref()
                .map(|inputs| mask_secrets(self.fields(), &inputs.0)),
            status: self.status(),
            created_at: self.created_at,
            completed_at: self.completed_at,
            expires_at: self.expires_at,
        }
    }

    /// The submitted values in plain text, secrets opened: only for running the tool.
    pub fn open_inputs(&self, vault: &Vault) -> Result<Map<String, Value>> {
        let Some(inputs) = &self.user_inputs else {
            return Ok(Map::new());
        };
        inputs
            .0
            .iter()
            .map(|(name, value)| {
                let secret = self
                    .fields()
                    .iter()
                    .any(|f| &f.name == name && f.is_secret());
                let plain = if secret {
                    vault
                        .open(&self.user_id, name, value)
                        .map_err(|err| anyhow::anyhow!("opening saved value `{name}`: {err}"))?
                } else {
                    value.clone()
                };
                Ok((name.clone(), plain))
            })
            .collect()
    }
}

async fn ensure_conversation(conn: &mut PgConnection, id: Uuid) -> Result<()> {
    if conversations::exists(conn, id).await? {
        Ok(())
    } else {
        Err(Error::NotFound("conversation"))
    }
}

fn check_text(errors: &mut FieldErrors, name: &str, value: &str, max: usize) {
    if value.trim().is_empty() {
        errors.insert(name.to_owned(), "must not be empty".to_owned());
    } else if value.len() > max {
        errors.insert(name.to_owned(), format!("must be at most {max} characters"));
    }
}

/// Stores a new pending request after checking its field definitions.
pub async fn create_request(
    conn: &mut PgConnection,
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
    let specs = match fields::parse_field_specs(&params.fields) {
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
    if !errors.is_empty() {
        return Err(Error::unprocessable(
            "the request definition is invalid",
            errors,
        ));
    }
    let save_for = fields::effective_save_for(params.save_for, params.save_for_session);
    let tool_args = params.tool_args.unwrap_or_default();
    insert_request(
        conn,
        ctx,
        params.conversation_id,
        &params.tool_name,
        &params.tool_call_id,
        &tool_args,
        &params.reason,
        &specs,
        save_for,
    )
    .await
}

/// Stores a pending request whose fields are already known to be valid (the executor's
/// path, with definitions checked at start-up).
#[allow(clippy::too_many_arguments)]
pub async fn insert_request(
    conn: &mut PgConnection,
    ctx: &RequestContext<'_>,
    conversation_id: Uuid,
    tool_name: &str,
    tool_call_id: &str,
    tool_args: &Map<String, Value>,
    reason: &str,
    fields: &[FieldSpec],
    save_for: SaveFor,
) -> Result<InputRequestRow> {
    let ttl = chrono::Duration::from_std(ctx.ttl).unwrap_or(chrono::Duration::hours(24));
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
            expires_at: Utc::now() + ttl,
            origin: ctx.origin,
            original_user_request: ctx.original_user_request,
        },
    )
    .await
    .on_constraint("tool_user_input_requests_tool_call_id_key", |_| {
        Error::conflict(
            "duplicate_tool_call_id",
            format!("a request for tool call `{tool_call_id}` already exists"),
        )
    })?;
    // The insert only happens when the conversation is the caller's.
    inserted.ok_or(Error::NotFound("conversation"))
}

fn not_pending(row: &InputRequestRow) -> Error {
    let status = row.status();
    Error::conflict(
        "request_not_pending",
        format!("this request is already {}", status.as_str()),
    )
}

/// Validates the user's values, completes the request and remembers the values its
/// `save_for` asks for. The row lock makes a second or racing submit a 409.
pub async fn submit_response(
    conn: &mut PgConnection,
    vault: &Vault,
    user_id: &str,
    params: SubmitResponseParams,
) -> Result<InputRequestRow> {
    let row = input_requests::find_for_update(conn, &params.tool_call_id)
        .await?
        .ok_or(Error::NotFound("input request"))?;
    if row.status() != RequestStatus::Pending {
        return Err(not_pending(&row));
    }
    let accepted = fields::validate_inputs(row.fields(), &params.user_inputs)
        .map_err(|errors| Error::unprocessable("some values are not valid", errors))?;
    let request_scope = SaveFor::parse(&row.save_for).unwrap_or_default();
    let mut stored = Map::new();
    for (name, value) in &accepted {
        let Some(field) = row.fields().iter().find(|f| &f.name == name) else {
            continue;
        };
        let kept = if field.is_secret() {
            vault.seal(user_id, name, value)
        } else {
            value.clone()
        };
        let scope = match field.save_for.unwrap_or(request_scope) {
            SaveFor::Call => None,
            SaveFor::Session => Some(Some(row.conversation_id)),
            SaveFor::User => Some(None),
        };
        if let Some(conversation_id) = scope {
            saved_inputs::upsert(
                conn,
                user_id,
                conversation_id,
                name,
                &kept,
                field.is_secret(),
            )
            .await?;
        }
        stored.insert(name.clone(), kept);
    }
    Ok(input_requests::complete(conn, row.id, &stored).await?)
}

pub async fn cancel_request(
    conn: &mut PgConnection,
    tool_call_id: &str,
) -> Result<InputRequestRow> {
    let row = input_requests::find_for_update(conn, tool_call_id)
        .await?
        .ok_or(Error::NotFound("input request"))?;
    if row.status() != RequestStatus::Pending {
        return Err(not_pending(&row));
    }
    Ok(input_requests::cancel(conn, row.id).await?)
}

pub async fn get_pending(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> Result<Vec<InputRequestRow>> {
    // One round trip in the common case; only an empty answer needs to tell
    // "none pending" from "not your conversation".
    let rows = input_requests::list_pending(conn, conversation_id).await?;
    if rows.is_empty() {
        ensure_conversation(conn, conversation_id).await?;
    }
    Ok(rows)
}

/// The values remembered for the conversation and the user-wide ones, secrets masked.
pub async fn get_session_values(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> Result<Vec<SavedValue>> {
    let rows = saved_inputs::list_for_conversation(conn, conversation_id).await?;
    if rows.is_empty() {
        ensure_conversation(conn, conversation_id).await?;
    }
    Ok(rows
        .into_iter()
        .map(|row| SavedValue {
            scope: if row.conversation_id.is_some() {
                SavedScope::Session
            } else {
                SavedScope::User
            },
            value: if row.is_secret {
                Value::String(MASKED.to_owned())
            } else {
                row.value
            },
            name: row.name,
            is_secret: row.is_secret,
            updated_at: row.updated_at,
        })
        .collect())
}

pub async fn clear_session_values(conn: &mut PgConnection, conversation_id: Uuid) -> Result<u64> {
    ensure_conversation(conn, conversation_id).await?;
    Ok(saved_inputs::clear_conversation(conn, conversation_id).await?)
}

/// Remembered values for filling a tool call, in plain text: the conversation's
/// values win over user-wide ones.
pub async fn remembered_values(
    conn: &mut PgConnection,
    vault: &Vault,
    user_id: &str,
    conversation_id: Uuid,
) -> Result<Map<String, Value>> {
    let rows = saved_inputs::list_for_conversation(conn, conversation_id).await?;
    let mut values = Map::new();
    // Rows come conversation-first, so the first value for a name wins.
    for row in rows {
        if values.contains_key(&row.name) {
            continue;
        }
        let value = if row.is_secret {
            match vault.open(user_id, &row.name, &row.value) {
                Ok(value) => value,
                Err(err) => {
                    tracing::warn!(name = %row.name, error = %err, "a saved secret could not be opened; asking again");
                    continue;
                }
            }
        } else {
            row.value
        };
        values.insert(row.name, value);
    }
    Ok(values)
}
