//! `tool_call_log`: every tool call, with secrets already redacted by the caller.

use serde_json::{Map, Value};
use sqlx::PgConnection;
use sqlx::types::Json;
use uuid::Uuid;

pub struct ToolCallRecord<'a> {
    pub user_id: &'a str,
    pub conversation_id: Uuid,
    pub run_id: Option<Uuid>,
    pub tool_name: &'a str,
    pub tool_call_id: &'a str,
    pub redacted_arguments: &'a Map<String, Value>,
    /// Arguments that tried to set user-only fields and were ignored.
    pub ignored_arguments: &'a [String],
    pub outcome: &'a str,
    pub error: Option<&'a str>,
    pub duration_ms: f64,
}

/// Logs a tool call. The row names the conversation as it stands when it is written:
/// one deleted while the call ran leaves the row without it (its lock waits out a
/// deletion under way) rather than failing the record of what ran.
pub async fn insert(conn: &mut PgConnection, record: ToolCallRecord<'_>) -> sqlx::Result<()> {
    sqlx::query!(
        "insert into tool_call_log
             (user_id, conversation_id, run_id, tool_name, tool_call_id, arguments,
              ignored_arguments, outcome, error, duration_ms)
         values ($1, (select c.id from conversations c where c.id = $2 for key share),
                 $3, $4, $5, $6, $7, $8, $9, $10)",
        record.user_id,
        record.conversation_id,
        record.run_id,
        record.tool_name,
        record.tool_call_id,
        Json(record.redacted_arguments) as _,
        record.ignored_arguments,
        record.outcome,
        record.error,
        record.duration_ms
    )
    .execute(conn)
    .await?;
    Ok(())
}
