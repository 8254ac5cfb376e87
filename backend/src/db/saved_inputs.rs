//! `saved_tool_inputs`: values remembered for a conversation (`conversation_id` set)
//! or for all of a user's conversations (`conversation_id` null).
//!
//! A value belongs to the tool it was given to and the field it was given for, or,
//! when the field declares a `memory_key`, to that key (`binding` is the generated
//! column that says which). Rows from before values were bound have neither: see
//! [`attribute_legacy`].

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::not_found_as_none;

#[derive(Debug, Clone)]
pub struct SavedInputRow {
    pub conversation_id: Option<Uuid>,
    /// The field it was given for.
    pub name: String,
    /// Sealed by the vault when `is_secret`.
    pub value: Value,
    pub is_secret: bool,
    pub updated_at: DateTime<Utc>,
    /// The tool it was given to; `None` only on unattributed legacy rows.
    pub tool_name: Option<String>,
    pub memory_key: Option<String>,
    pub label: Option<String>,
    /// `key:<memory_key>`, `tool:<tool>:<field>` or `legacy:<field>`.
    pub binding: String,
    /// Not the user's own: given through a field the model may fill, whose card offered
    /// the model's value, or on a card a caller of the API made; `None` on values
    /// remembered before that was recorded.
    pub model_proposed: Option<bool>,
}

/// The binding a field's value is remembered under.
pub fn binding_for(tool_name: &str, field_name: &str, memory_key: Option<&str>) -> String {
    match memory_key {
        Some(key) => format!("key:{key}"),
        None => format!("tool:{tool_name}:{field_name}"),
    }
}

/// A value to remember.
pub struct NewSavedInput<'a> {
    pub user_id: &'a str,
    pub conversation_id: Option<Uuid>,
    pub tool_name: &'a str,
    pub memory_key: Option<&'a str>,
    pub name: &'a str,
    pub label: Option<&'a str>,
    pub value: &'a Value,
    pub is_secret: bool,
    pub model_proposed: bool,
}

pub async fn upsert(conn: &mut PgConnection, new: NewSavedInput<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into saved_tool_inputs
             (user_id, conversation_id, tool_name, memory_key, name, label, value, is_secret,
              model_proposed)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         on conflict on constraint saved_tool_inputs_binding
         do update set value = excluded.value, is_secret = excluded.is_secret,
                       tool_name = excluded.tool_name, name = excluded.name,
                       label = excluded.label, model_proposed = excluded.model_proposed,
                       updated_at = now()",
        new.user_id,
        new.conversation_id,
        new.tool_name,
        new.memory_key,
        new.name,
        new.label,
        new.value,
        new.is_secret,
        new.model_proposed
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The conversation's values followed by the user-wide ones; nothing at all when the
/// conversation is not the caller's.
pub async fn list_for_conversation(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<Vec<SavedInputRow>> {
    sqlx::query_as!(
        SavedInputRow,
        r#"select conversation_id, name, value, is_secret, updated_at, tool_name, memory_key,
                  label, binding as "binding!", model_proposed
           from saved_tool_inputs
           where (conversation_id = $1 or conversation_id is null)
             and exists (select 1 from conversations where id = $1)
           order by conversation_id nulls last, binding"#,
        conversation_id
    )
    .fetch_all(conn)
    .await
}

/// [`list_for_conversation`] in one round trip as `user_id` (the function sets the
/// identity for its own statement; see the migration `one_trip_reads`). `None` when the
/// conversation is not the caller's. It takes the pool, never a transaction, in which the
/// identity would outlive the call.
pub async fn list_for_conversation_as(
    pool: &PgPool,
    user_id: &str,
    conversation_id: Uuid,
) -> sqlx::Result<Option<Vec<SavedInputRow>>> {
    not_found_as_none(
        sqlx::query_as!(
            SavedInputRow,
            r#"select conversation_id, name as "name!", value as "value!",
                      is_secret as "is_secret!", updated_at as "updated_at!", tool_name,
                      memory_key, label, binding as "binding!",
                      model_proposed
               from toolgate_session_values($1, $2)"#,
            user_id,
            conversation_id
        )
        .fetch_all(pool)
        .await,
    )
}

pub async fn clear_conversation(
    conn: &mut PgConnection,
    conversation_id: Uuid,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "delete from saved_tool_inputs where conversation_id = $1",
        conversation_id
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Forgets one value: the conversation's (`conversation_id` set) or a user-wide one.
pub async fn delete(
    conn: &mut PgConnection,
    conversation_id: Option<Uuid>,
    binding: &str,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "delete from saved_tool_inputs
         where conversation_id is not distinct from $1 and binding = $2",
        conversation_id,
        binding
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// Forgets a value a card showed pre-filled and the user cleared: the rows under
/// `binding`, the conversation's or the user's, that hold exactly `value` in the clear
/// (a sealed secret never equals a shown value).
pub async fn delete_shown(
    conn: &mut PgConnection,
    conversation_id: Uuid,
    binding: &str,
    value: &Value,
) -> sqlx::Result<u64> {
    let done = sqlx::query!(
        "delete from saved_tool_inputs
         where binding = $2 and not is_secret and value = $3
           and (conversation_id = $1 or conversation_id is null)",
        conversation_id,
        binding,
        value
    )
    .execute(conn)
    .await?;
    Ok(done.rows_affected())
}

/// A field some tool declares, as [`attribute_legacy`] matches rows against.
#[derive(Clone, Debug)]
pub struct FieldClaim {
    pub tool_name: String,
    pub field_name: String,
    pub memory_key: Option<String>,
    pub is_secret: bool,
    pub label: Option<String>,
    pub model_may_fill: bool,
}

/// What [`attribute_legacy`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Attribution {
    /// Rows moved to the tools (or keys) that claim them.
    pub attributed: usize,
    /// Rows left unattributed: no tool declares the field, or a secret several tools
    /// claim. They are listed to their owner and never given to a tool.
    pub left: usize,
}

/// Binds the values remembered before values were bound to tools. A row goes to every
/// binding that claims its field name with the same secrecy (a tool's own field, or a
/// shared `memory_key`), except that a secret claimed by more than one binding stays
/// unattributed: guessing would hand it to a tool it was never given to. A bound value
/// already there wins over the legacy one. Runs at start-up, across users.
pub async fn attribute_legacy(
    conn: &mut PgConnection,
    claims: &[FieldClaim],
) -> sqlx::Result<Attribution> {
    struct Legacy {
        user_id: String,
        conversation_id: Option<Uuid>,
        name: String,
        value: Value,
        is_secret: bool,
    }
    let rows = sqlx::query_as!(
        Legacy,
        "select user_id, conversation_id, name, value, is_secret from saved_tool_inputs
         where tool_name is null and memory_key is null
         for update"
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut done = Attribution::default();
    for row in rows {
        let mut targets: Vec<&FieldClaim> = Vec::new();
        for claim in claims
            .iter()
            .filter(|c| c.field_name == row.name && c.is_secret == row.is_secret)
        {
            let binding = binding_for(
                &claim.tool_name,
                &claim.field_name,
                claim.memory_key.as_deref(),
            );
            let seen = targets.iter().any(|t| {
                binding_for(&t.tool_name, &t.field_name, t.memory_key.as_deref()) == binding
            });
            if !seen {
                targets.push(claim);
            }
        }
        if targets.is_empty() || (row.is_secret && targets.len() > 1) {
            done.left += 1;
            continue;
        }
        // Which field it was given through is not known: if any field of its name lets
        // the model fill it, it may have been the model's proposal.
        let model_proposed = claims
            .iter()
            .any(|claim| claim.field_name == row.name && claim.model_may_fill);
        for claim in targets {
            sqlx::query!(
                "insert into saved_tool_inputs
                     (user_id, conversation_id, tool_name, memory_key, name, label, value, is_secret,
                      model_proposed)
                 values ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 on conflict on constraint saved_tool_inputs_binding do nothing",
                &row.user_id,
                row.conversation_id,
                &claim.tool_name,
                claim.memory_key.as_deref(),
                &row.name,
                claim.label.as_deref(),
                &row.value,
                row.is_secret,
                model_proposed
            )
            .execute(&mut *conn)
            .await?;
        }
        sqlx::query!(
            "delete from saved_tool_inputs
             where user_id = $1 and conversation_id is not distinct from $2
               and binding = 'legacy:' || $3",
            &row.user_id,
            row.conversation_id,
            &row.name
        )
        .execute(&mut *conn)
        .await?;
        done.attributed += 1;
    }
    Ok(done)
}
