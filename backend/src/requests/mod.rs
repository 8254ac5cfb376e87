//! The life of a request to the user — values for a tool (`input`) or a yes to a call
//! (`approval`) — in one place.
//!
//! A request begins in [`create`] (the executor, or the action API), and ends exactly
//! once through [`endings`]: submitted, approved, edited, rejected, declined,
//! cancelled, expired, or abandoned by its run. Each ending writes its stream event in
//! the same transaction. [`follow_up`] then does what the ending means for the tool
//! and the run: retry the tool with the answer, or tell the run in [`words`] it can
//! act on, and resume the run when nothing else is open. Handlers, the run loop and the
//! background sweep only call these.

pub mod create;
pub mod endings;
mod follow_up;
mod row;
pub mod words;

pub use follow_up::{RunInbox, follow_up, outcome_of_settled};

use protocol::api::{InputRequest, RequestKind};
use protocol::unseen;
use serde_json::Value;

use crate::db::input_requests::InputRequestRow;
use crate::tools::registry::ToolRegistry;

/// Runs CPU work on values a caller sent (field rules, patterns) on the blocking pool,
/// so one heavy request never stalls other users' requests on the async workers.
pub(crate) async fn off_the_workers<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|err| anyhow::anyhow!("checking values on the blocking pool: {err}").into())
}

/// Largest arguments a caller may hand in, as JSON: with a request to create
/// (`tool_args`) or a call to run (`/api/tools/execute`). They are stored with the
/// request its card shows and read back with every read of what waits, so the body
/// limit alone would let one conversation's waiting cards hold a hundred times that
/// limit, and a read of them take many times more memory as it decodes them.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;

/// Why arguments larger than `most` bytes as JSON are refused ([`MAX_ARGUMENTS_BYTES`],
/// or for an edit of a model's call the model's own limit, so that any call the model
/// may make can be edited); `None` when they fit.
pub fn arguments_too_large(
    arguments: &serde_json::Map<String, serde_json::Value>,
    most: usize,
) -> Option<String> {
    (crate::db::storable::json_size(arguments) > most)
        .then(|| format!("must be at most {most} bytes as JSON"))
}

/// [`arguments_too_large`] as the caller's error (422), naming `field`.
pub fn ensure_arguments_fit(
    field: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
    most: usize,
) -> crate::error::Result<()> {
    match arguments_too_large(arguments, most) {
        Some(why) => Err(crate::error::Error::unprocessable(
            "the arguments are too large",
            crate::error::FieldErrors::from([(field.to_owned(), why)]),
        )),
        None => Ok(()),
    }
}

/// The request as callers see it, with the tool's argument schema on an approval so a
/// card can offer an edit.
pub fn describe(row: &InputRequestRow, tools: &ToolRegistry) -> InputRequest {
    let mut request = row.to_api();
    if request.kind == RequestKind::Approval {
        request.arguments_schema = tools
            .get(&row.tool_name)
            .map(|tool| shown_parameters(&tool.parameters));
    }
    request
}

/// A tool's parameters as an approval card shows them: each argument's description
/// (its server's words, shown beside the value the user approves) with every character
/// a person cannot see, or that reorders what they see, written out.
fn shown_parameters(parameters: &Value) -> Value {
    let mut shown = parameters.clone();
    let properties = shown
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|properties| properties.values_mut());
    for property in properties {
        if let Some(Value::String(description)) = property.get_mut("description") {
            *description = unseen::written_out(description);
        }
    }
    shown
}
