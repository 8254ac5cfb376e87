//! A stored request as callers see it, and its values for running the tool.

use protocol::api::{InputRequest, RequestKind, RequestStatus};
use protocol::approval::Decision;
use protocol::fields::{FieldSpec, SaveFor, mask_secrets};
use serde_json::{Map, Value};

use crate::db::input_requests::InputRequestRow;
use crate::error::Result;
use crate::tools::CallRef;
use crate::vault::Vault;

impl InputRequestRow {
    /// The stored status, with a pending request past its expiry (when read, by the
    /// database's clock) counted as expired.
    pub fn status(&self) -> RequestStatus {
        let stored = self.status;
        if stored == RequestStatus::Pending && self.past_due {
            RequestStatus::Expired
        } else {
            stored
        }
    }

    pub fn kind(&self) -> RequestKind {
        self.kind
    }

    pub fn fields(&self) -> &[FieldSpec] {
        &self.required_fields.0
    }

    /// Whether the executor asked (and so retries the tool when the user has answered).
    pub fn from_executor(&self) -> bool {
        self.origin == "executor"
    }

    /// Whether an MCP server asked while its tool ran.
    pub fn from_mcp(&self) -> bool {
        self.origin == "mcp"
    }

    /// Whether a caller of the API made it (`create_request`), fields and all.
    pub fn from_api(&self) -> bool {
        self.origin == "api"
    }

    /// The status as stored, without counting a past expiry.
    pub fn stored_status(&self) -> RequestStatus {
        self.status
    }

    /// The tool call the request belongs to: for an MCP server's question, the call
    /// that is waiting, not the question's own id.
    pub fn call_ref(&self) -> CallRef {
        CallRef {
            run_id: self.run_id,
            conversation_id: self.conversation_id,
            tool_call_id: self
                .elicitation
                .as_ref()
                .map_or_else(|| self.tool_call_id.clone(), |e| e.0.tool_call_id.clone()),
            tool_name: self.tool_name.clone(),
        }
    }

    /// The request as callers see it: secrets masked, expiry applied.
    pub fn to_api(&self) -> InputRequest {
        let approval = self.kind() == RequestKind::Approval;
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
            // An approval carries values from an earlier card; they were shown there.
            user_inputs: if approval {
                None
            } else {
                self.user_inputs
                    .as_ref()
                    .map(|inputs| mask_secrets(self.fields(), &inputs.0))
            },
            status: self.status(),
            created_at: self.created_at,
            completed_at: self.completed_at,
            expires_at: self.expires_at,
            kind: self.kind(),
            allowed_decisions: self.allowed_decisions.0.clone(),
            arguments_digest: self.arguments_digest.clone(),
            note: self.note.clone(),
            arguments_schema: None,
            decision: self.decision.as_deref().and_then(Decision::parse),
            message: self.decision_message.clone(),
            elicitation: self.elicitation.as_ref().map(|e| e.0.clone()),
            from_api: self.from_api(),
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
                // A cleared field is `null`, never sealed.
                let plain = if secret && !value.is_null() {
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
