//! Values the user asked to remember, bound to the tool they were given to.
//!
//! A value belongs to (user, scope, tool, field); a field with a `memory_key` shares it
//! with every field of that key. A secret crosses a `memory_key` only between tools of
//! the same origin, and only into a secret field, so no tool receives a secret it was
//! not given merely by naming a field like it.

use std::sync::Arc;

use protocol::api::{SavedScope, SavedValue};
use protocol::fields::{FieldSpec, MASKED, SaveFor};
use serde_json::{Map, Value};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::registry::{Tool, ToolRegistry};
use crate::db::saved_inputs::{self, NewSavedInput, SavedInputRow, binding_for};
use crate::error::{Error, Result};
use crate::vault::Vault;

/// Where a field's submitted value is remembered, if anywhere.
pub fn scope_of(
    field: &FieldSpec,
    request_scope: SaveFor,
    conversation_id: Uuid,
) -> Option<Option<Uuid>> {
    match field.save_for.unwrap_or(request_scope) {
        SaveFor::Call => None,
        SaveFor::Session => Some(Some(conversation_id)),
        SaveFor::User => Some(None),
    }
}

/// Forgets the remembered value a card showed pre-filled in `tool_name`'s field (`shown`)
/// and the user cleared, in the conversation's or the user's memory, wherever it holds
/// exactly that value; nothing else.
pub async fn forget_shown(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    tool_name: &str,
    field: &FieldSpec,
    shown: &Value,
) -> Result<()> {
    let binding = saved_inputs::binding_for(tool_name, &field.name, field.memory_key.as_deref());
    saved_inputs::delete_shown(conn, conversation_id, &binding, shown).await?;
    Ok(())
}

/// Who made the card a remembered value was given on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CardMaker {
    /// toolgate, from the tool's own definition (the executor, an MCP server's question).
    Toolgate,
    /// A caller of the API, who chose the card's fields, wording, choices and defaults.
    Caller,
}

/// Remembers one accepted value of `tool_name`'s field; `kept` is already sealed when
/// the field is secret. A value given on a card a caller made is not the user's own to
/// a field only the user fills (the caller chose what the card offered and said, and
/// may be as hostile as the model), whichever tool it names.
pub async fn remember(
    conn: &mut PgConnection,
    user_id: &str,
    conversation_id: Option<Uuid>,
    tool_name: &str,
    field: &FieldSpec,
    kept: &Value,
    maker: CardMaker,
) -> Result<()> {
    saved_inputs::upsert(
        conn,
        NewSavedInput {
            user_id,
            conversation_id,
            tool_name,
            memory_key: field.memory_key.as_deref(),
            name: &field.name,
            label: field.label.as_deref(),
            value: kept,
            is_secret: field.is_secret(),
            model_proposed: field.model_may_fill || maker == CardMaker::Caller,
        },
    )
    .await?;
    Ok(())
}

/// The remembered values `tool` may receive, in plain text, by field name; the
/// conversation's win over user-wide ones.
pub async fn for_tool(
    conn: &mut PgConnection,
    vault: &Vault,
    registry: &ToolRegistry,
    user_id: &str,
    conversation_id: Uuid,
    tool: &Tool,
) -> Result<Map<String, Value>> {
    if tool.fields().is_empty() {
        return Ok(Map::new());
    }
    let rows = saved_inputs::list_for_conversation(conn, conversation_id).await?;
    let mut values = Map::new();
    for field in tool.fields() {
        let binding = binding_for(&tool.name, &field.name, field.memory_key.as_deref());
        // Rows come conversation-first, so the first match is the narrowest scope.
        let Some(row) = rows.iter().find(|row| row.binding == binding) else {
            continue;
        };
        if !may_receive(registry, tool, field, row) {
            continue;
        }
        let value = if row.is_secret {
            match vault.open(user_id, &row.name, &row.value) {
                Ok(value) => value,
                Err(err) => {
                    tracing::warn!(field = %field.name, error = %err, "a saved secret could not be opened; asking again");
                    continue;
                }
            }
        } else {
            row.value.clone()
        };
        values.insert(field.name.clone(), value);
    }
    Ok(values)
}

/// A keyed value crosses tools only with the same secrecy, and a secret only between
/// tools of one origin whose giver still exists. A field only the user fills takes no
/// value given through a field the model may fill, in any tool (its own too): the card
/// offered the model's value there, so it is not the user's own. That mark is stored
/// with the value, so it holds whatever the tools say later.
fn may_receive(
    registry: &ToolRegistry,
    tool: &Tool,
    field: &FieldSpec,
    row: &SavedInputRow,
) -> bool {
    if row.is_secret != field.is_secret() {
        return false;
    }
    // The giver is looked up only where the row alone does not decide.
    let giver = || {
        row.tool_name
            .as_deref()
            .and_then(|giver| registry.get(giver))
    };
    if !field.model_may_fill && model_proposed(row, giver) {
        return false;
    }
    !row.is_secret
        || row.tool_name.as_deref() == Some(tool.name.as_str())
        || giver().is_some_and(|giver| giver.origin == tool.origin)
}

/// Whether a remembered value was the model's proposal. A value remembered before that
/// was recorded is judged by its giver's configuration: proposed if the giver has a
/// field the model may fill under its binding, or if the giver is gone.
fn model_proposed(row: &SavedInputRow, giver: impl FnOnce() -> Option<Arc<Tool>>) -> bool {
    row.model_proposed.unwrap_or_else(|| {
        giver().is_none_or(|giver| {
            giver.fields().iter().any(|given| {
                given.model_may_fill
                    && binding_for(&giver.name, &given.name, given.memory_key.as_deref())
                        == row.binding
            })
        })
    })
}

/// The values remembered for a conversation and the user-wide ones, as the user sees
/// them: secrets masked, each with the tool or key it belongs to. One round trip, outside
/// any transaction (the read sets the identity for its own statement); an unknown
/// conversation, or another user's, is `NotFound`.
pub async fn list(pool: &PgPool, user_id: &str, conversation_id: Uuid) -> Result<Vec<SavedValue>> {
    let rows = saved_inputs::list_for_conversation_as(pool, user_id, conversation_id)
        .await?
        .ok_or(Error::NotFound("conversation"))?;
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
            label: row.label,
            is_secret: row.is_secret,
            tool_name: row.tool_name,
            memory_key: row.memory_key,
            key: row.binding,
            updated_at: row.updated_at,
        })
        .collect())
}
