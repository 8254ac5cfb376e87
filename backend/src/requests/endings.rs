//! Every way a pending request ends. Each ending locks the row, checks it is still
//! pending and of the right kind, moves it exactly once and writes its
//! `input_resolved` event in the caller's transaction.

use protocol::api::{
    DeclineRequestParams, RequestKind, RequestStatus, SubmitDecisionParams, SubmitResponseParams,
};
use protocol::approval::Decision;
use protocol::chat::EventKind;
use protocol::fields::{self, SaveFor};
use serde_json::{Map, Value};
use sqlx::PgConnection;
use uuid::Uuid;

use super::Holding;
use crate::db::events;
use crate::db::input_requests::{self, InputRequestRow, Settlement};
use crate::error::{Error, FieldErrors, Result};
use crate::tools::digest;
use crate::tools::registry::{Tool, ToolRegistry};
use crate::tools::remembered::{self, CardMaker};
use crate::vault::Vault;

/// Longest message a user may attach to a rejection or a decline.
const MAX_MESSAGE_LEN: usize = 2000;

/// What the endings that check or keep values need.
#[derive(Clone, Copy)]
pub struct Deps<'a> {
    pub vault: &'a Vault,
    pub tools: &'a ToolRegistry,
}

async fn locked(
    conn: &mut PgConnection,
    tool_call_id: &str,
    kind: Option<RequestKind>,
) -> Result<InputRequestRow> {
    // The request of the kind asked about first; of any kind only to say it is the
    // other kind.
    let of_kind = match kind {
        Some(kind) => {
            input_requests::find_for_update(conn, tool_call_id, Some(kind.as_str())).await?
        }
        None => None,
    };
    let row = match of_kind {
        Some(row) => row,
        None => input_requests::find_for_update(conn, tool_call_id, None)
            .await?
            .ok_or(Error::NotFound("request"))?,
    };
    if row.status() != RequestStatus::Pending {
        return Err(not_pending(&row));
    }
    match kind {
        Some(RequestKind::Input) if row.kind() == RequestKind::Approval => Err(Error::conflict(
            "wrong_request_kind",
            "this request asks for approval: answer it with submit_decision",
        )),
        Some(RequestKind::Approval) if row.kind() == RequestKind::Input => Err(Error::conflict(
            "wrong_request_kind",
            "this request asks for values: answer it with submit_response",
        )),
        _ => Ok(row),
    }
}

fn not_pending(row: &InputRequestRow) -> Error {
    Error::conflict(
        "request_not_pending",
        format!("this request is already {}", row.status().as_str()),
    )
}

/// Stores the ending and announces it, once.
async fn settle(
    conn: &mut PgConnection,
    row: &InputRequestRow,
    settlement: Settlement<'_>,
) -> Result<InputRequestRow> {
    let settled = input_requests::settle(conn, row.id, settlement)
        .await?
        .ok_or_else(|| not_pending(row))?;
    announce(conn, &settled).await?;
    Ok(settled)
}

async fn announce(conn: &mut PgConnection, row: &InputRequestRow) -> Result<()> {
    let kind = EventKind::InputResolved {
        request: row.to_api(),
    };
    events::append(conn, row.conversation_id, &row.user_id, row.run_id, &kind).await?;
    Ok(())
}

fn check_message(message: Option<&str>) -> Result<Option<String>> {
    let Some(message) = message.map(str::trim).filter(|m| !m.is_empty()) else {
        return Ok(None);
    };
    if message.chars().count() > MAX_MESSAGE_LEN {
        return Err(Error::unprocessable(
            "the message is too long",
            FieldErrors::from([(
                "message".to_owned(),
                format!("must be at most {MAX_MESSAGE_LEN} characters"),
            )]),
        ));
    }
    Ok(Some(message.to_owned()))
}

/// A user's answer, with its values checked against the fields of the request it
/// answers (the one of that id pending when it was checked).
pub struct Answer {
    params: SubmitResponseParams,
    checked: Option<CheckedValues>,
}

struct CheckedValues {
    request_id: Uuid,
    accepted: Map<String, Value>,
    cleared: Map<String, Value>,
}

/// Checks the user's values against the fields of the request they answer, before any
/// transaction or lock is taken: a caller's patterns matched against a caller's values
/// may take a while, and neither the conversation's other writers nor the pool's
/// connections wait for that. Values that are not valid are refused here (422).
pub async fn check_answer(
    pool: &sqlx::PgPool,
    user_id: &str,
    params: SubmitResponseParams,
) -> Result<Answer> {
    let mut tx = crate::db::begin_as_user(pool, user_id).await?;
    let pending = input_requests::pending_input(&mut tx, &params.tool_call_id).await?;
    tx.commit().await?;
    // Not pending, past its time or not the caller's: the ending says which, under its
    // lock.
    let Some(row) = pending.filter(|row| row.status() == RequestStatus::Pending) else {
        return Ok(Answer {
            params,
            checked: None,
        });
    };
    let checked = check_values(&row, &params.user_inputs, Holding::Nothing).await?;
    Ok(Answer {
        params,
        checked: Some(checked),
    })
}

async fn check_values(
    row: &InputRequestRow,
    inputs: &Map<String, Value>,
    holding: Holding,
) -> Result<CheckedValues> {
    let (definition, inputs) = (row.fields().to_vec(), inputs.clone());
    let (accepted, cleared) = super::off_the_workers(&row.user_id, holding, move || {
        fields::validate_inputs(&definition, &inputs).map(|accepted| {
            let sent = fields::with_cleared(&definition, &inputs, &accepted);
            (accepted, sent)
        })
    })
    .await?
    .map_err(|errors| Error::unprocessable("some values are not valid", errors))?;
    Ok(CheckedValues {
        request_id: row.id,
        accepted,
        cleared,
    })
}

/// The user's values (checked by [`check_answer`]): remembered as the request's
/// `save_for` asks (bound to the tool), secrets sealed.
pub async fn submit(
    conn: &mut PgConnection,
    deps: Deps<'_>,
    user_id: &str,
    answer: Answer,
) -> Result<InputRequestRow> {
    let row = locked(conn, &answer.params.tool_call_id, Some(RequestKind::Input)).await?;
    // A request's fields never change; checked against another request of the same id
    // (the one checked ended, and a new one came, in between), the values are checked
    // again.
    let CheckedValues {
        accepted, cleared, ..
    } = match answer.checked {
        Some(checked) if checked.request_id == row.id => checked,
        _ => check_values(&row, &answer.params.user_inputs, Holding::Lock).await?,
    };
    let request_scope = SaveFor::parse(&row.save_for).unwrap_or_default();
    let mut stored = Map::new();
    for (name, value) in &accepted {
        let Some(field) = row.fields().iter().find(|f| &f.name == name) else {
            continue;
        };
        let kept = if field.is_secret() {
            deps.vault.seal(user_id, name, value)
        } else {
            value.clone()
        };
        if let Some(scope) = remembered::scope_of(field, request_scope, row.conversation_id) {
            let maker = if row.from_api() {
                CardMaker::Caller
            } else {
                CardMaker::Toolgate
            };
            remembered::remember(conn, user_id, scope, &row.tool_name, field, &kept, maker).await?;
        }
        stored.insert(name.clone(), kept);
    }
    // What the user cleared is kept as cleared (`null`): the retry takes it as the answer
    // and fills it from nowhere else (not the model's proposal, not memory).
    for (name, value) in cleared {
        if !value.is_null() {
            continue;
        }
        // Nor is it used on a later call: a remembered value the card showed pre-filled
        // (only a field the model may fill is) is forgotten.
        if let Some(field) = row.fields().iter().find(|f| f.name == name)
            && field.model_may_fill
            && !field.is_secret()
            && let Some(shown) = &field.default
        {
            remembered::forget_shown(conn, row.conversation_id, &row.tool_name, field, shown)
                .await?;
        }
        stored.insert(name, Value::Null);
    }
    settle(
        conn,
        &row,
        Settlement {
            status: RequestStatus::Completed.as_str(),
            user_inputs: Some(&stored),
            tool_args: None,
            arguments_digest: None,
            decision: None,
            message: None,
            decided_by: Some(user_id),
            in_time: true,
        },
    )
    .await
}

/// The user's decision on an approval. It covers only the arguments the card showed
/// (`arguments_digest`); an edit is checked against the tool's schema and fields and
/// becomes the arguments approved.
pub async fn decide(
    conn: &mut PgConnection,
    deps: Deps<'_>,
    user_id: &str,
    params: SubmitDecisionParams,
) -> Result<InputRequestRow> {
    let row = locked(conn, &params.tool_call_id, Some(RequestKind::Approval)).await?;
    if !row.allowed_decisions.0.contains(&params.decision) {
        let allowed: Vec<&str> = row.allowed_decisions.0.iter().map(|d| d.as_str()).collect();
        return Err(Error::unprocessable(
            "this decision is not offered",
            FieldErrors::from([(
                "decision".to_owned(),
                format!("must be one of: {}", allowed.join(", ")),
            )]),
        ));
    }
    if let Some(shown) = &params.arguments_digest
        && Some(shown) != row.arguments_digest.as_ref()
    {
        return Err(Error::conflict(
            "arguments_changed",
            "the arguments are no longer the ones shown; reload the request and decide again",
        ));
    }
    let message = check_message(params.message.as_deref())?;
    if params.decision != Decision::Edit && params.arguments.is_some() {
        return Err(Error::unprocessable(
            "arguments go with an edit",
            FieldErrors::from([(
                "arguments".to_owned(),
                "only an `edit` decision takes arguments".to_owned(),
            )]),
        ));
    }
    let (status, edited) = match params.decision {
        Decision::Approve => (RequestStatus::Approved, None),
        Decision::Reject => (RequestStatus::Rejected, None),
        Decision::Edit => {
            let tool = deps
                .tools
                .get(&row.tool_name)
                .ok_or_else(|| Error::conflict("tool_gone", "the tool no longer exists"))?;
            let Some(arguments) = params.arguments else {
                return Err(Error::unprocessable(
                    "an edit needs the arguments",
                    FieldErrors::from([(
                        "arguments".to_owned(),
                        "the edited arguments are required".to_owned(),
                    )]),
                ));
            };
            super::ensure_arguments_fit(
                "arguments",
                &arguments,
                crate::agent::model::MAX_ARGUMENT_BYTES,
            )?;
            let edited = super::off_the_workers(&row.user_id, Holding::Lock, move || {
                check_edit(&tool, &arguments)
            })
            .await?
            .map_err(|errors| Error::unprocessable("some arguments are not valid", errors))?;
            (RequestStatus::Approved, Some(edited))
        }
    };
    let edited_digest = edited
        .as_ref()
        .map(|arguments| digest::of_arguments(&row.tool_name, arguments));
    settle(
        conn,
        &row,
        Settlement {
            status: status.as_str(),
            user_inputs: None,
            tool_args: edited.as_ref(),
            arguments_digest: edited_digest.as_deref(),
            decision: Some(params.decision.as_str()),
            message: message.as_deref(),
            decided_by: Some(user_id),
            in_time: true,
        },
    )
    .await
}

/// An edit, normalised the way the executor will run it; errors keyed
/// `arguments.<name>`.
fn check_edit(
    tool: &Tool,
    arguments: &Map<String, Value>,
) -> Result<Map<String, Value>, FieldErrors> {
    let mut errors = FieldErrors::new();
    let mut edited = arguments.clone();
    let mut field_values = Map::new();
    for (name, value) in arguments {
        if let Some(field) = tool.field_variant(name) {
            // The executor would drop it, and the call differ from what was approved.
            errors.insert(
                format!("arguments.{name}"),
                format!("reads as the field `{}`: name it exactly", field.name),
            );
            continue;
        }
        match tool.field(name) {
            Some(field) if field.is_secret() => {
                errors.insert(
                    format!("arguments.{name}"),
                    "a secret is neither shown nor edited here".to_owned(),
                );
            }
            Some(_) => {
                field_values.insert(name.clone(), value.clone());
            }
            None => {}
        }
    }
    let plain_fields: Vec<_> = tool
        .fields()
        .iter()
        .filter(|f| !f.is_secret())
        .cloned()
        .collect();
    match fields::validate_inputs(&plain_fields, &field_values) {
        Ok(accepted) => {
            // As the executor will run it: a field its rule now hides is no argument.
            for field in &plain_fields {
                if !accepted.contains_key(&field.name) {
                    edited.remove(&field.name);
                }
            }
            edited.extend(accepted)
        }
        Err(field_errors) => {
            for (name, message) in field_errors {
                errors.insert(format!("arguments.{name}"), message);
            }
        }
    }
    let model_arguments: Map<String, Value> = arguments
        .iter()
        .filter(|(name, _)| tool.field(name).is_none())
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    for (path, message) in tool.argument_problems(&Value::Object(model_arguments)) {
        let key = if path.is_empty() {
            "arguments".to_owned()
        } else {
            format!("arguments.{path}")
        };
        errors.entry(key).or_insert(message);
    }
    if errors.is_empty() {
        Ok(edited)
    } else {
        Err(errors)
    }
}

/// The user will not give the values: unlike a cancel, the model is told not to ask
/// again.
pub async fn decline(
    conn: &mut PgConnection,
    user_id: &str,
    params: DeclineRequestParams,
) -> Result<InputRequestRow> {
    let row = locked(conn, &params.tool_call_id, Some(RequestKind::Input)).await?;
    let message = check_message(params.message.as_deref())?;
    settle(
        conn,
        &row,
        Settlement {
            status: RequestStatus::Declined.as_str(),
            user_inputs: None,
            tool_args: None,
            arguments_digest: None,
            decision: None,
            message: message.as_deref(),
            decided_by: Some(user_id),
            in_time: true,
        },
    )
    .await
}

/// The user dismissed the card without an answer.
pub async fn cancel(
    conn: &mut PgConnection,
    user_id: &str,
    tool_call_id: &str,
) -> Result<InputRequestRow> {
    let row = locked(conn, tool_call_id, None).await?;
    settle(conn, &row, ending(RequestStatus::Cancelled, Some(user_id))).await
}

/// An ending without values; a user's or a server's answer counts only in time, while
/// expiring and abandoning end a request whenever they come.
fn ending(status: RequestStatus, decided_by: Option<&str>) -> Settlement<'_> {
    Settlement {
        status: status.as_str(),
        user_inputs: None,
        tool_args: None,
        arguments_digest: None,
        decision: None,
        message: None,
        decided_by,
        in_time: !matches!(status, RequestStatus::Expired | RequestStatus::Abandoned),
    }
}

/// Expires one request nobody answered in time (background path), if it is still
/// pending; the caller holds its conversation's writer lock.
pub async fn expire(conn: &mut PgConnection, id: Uuid) -> Result<Option<InputRequestRow>> {
    let Some(row) = input_requests::overdue_for_update(conn, id).await? else {
        return Ok(None);
    };
    settle(conn, &row, ending(RequestStatus::Expired, None))
        .await
        .map(Some)
}

/// Ends an MCP server's question that can no longer be answered (the call ended, the
/// server withdrew it, the session or the process holding it went away), saying why.
pub async fn abandon_question(
    conn: &mut PgConnection,
    id: Uuid,
    why: &str,
) -> Result<Option<InputRequestRow>> {
    let Some(row) = input_requests::pending_for_update(conn, id).await? else {
        return Ok(None);
    };
    let mut settlement = ending(RequestStatus::Abandoned, None);
    settlement.message = Some(why);
    settle(conn, &row, settlement).await.map(Some)
}

/// A URL-mode question the server says is complete: still pending and not past its
/// time, it completes as if the user had confirmed it. One past its time stays for the
/// sweep to expire, as any other ending finds it expired.
pub async fn complete_url_question(
    conn: &mut PgConnection,
    id: Uuid,
) -> Result<Option<InputRequestRow>> {
    let Some(row) = input_requests::pending_for_update(conn, id).await? else {
        return Ok(None);
    };
    if row.status() != RequestStatus::Pending {
        return Ok(None);
    }
    settle(conn, &row, ending(RequestStatus::Completed, None))
        .await
        .map(Some)
}

/// Ends the requests of a run that ended without them (it failed, or was stopped).
pub async fn abandon_run(conn: &mut PgConnection, run_id: Uuid) -> Result<Vec<InputRequestRow>> {
    let mut abandoned = Vec::new();
    for row in input_requests::pending_for_run_for_update(conn, run_id).await? {
        abandoned.push(settle(conn, &row, ending(RequestStatus::Abandoned, None)).await?);
    }
    Ok(abandoned)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::db;
    use crate::tools::executor::tests::{call, conversation_of, fixture};

    /// An executor with a card for `call_id` waiting in a conversation of `ann`'s.
    async fn a_card(call_id: &str) -> crate::tools::executor::tests::Fixture {
        let fx = fixture().await;
        let conversation = conversation_of(&fx.executor, "ann").await;
        let outcome = crate::tools::executor::execute(
            &fx.executor,
            "ann",
            call(conversation, "lookup_account", call_id, json!({})),
        )
        .await
        .expect("executed");
        assert!(outcome.requires_user_input, "{outcome:?}");
        fx
    }

    /// The server that answers may run ahead of or behind the database, whose clock the
    /// sweep reads: an answer counts only while the database holds the request in time.
    #[tokio::test]
    async fn an_answer_in_time_is_judged_by_the_databases_clock() {
        let fx = a_card("call_late").await;
        let mut tx = db::begin_background(&fx.executor.pool).await.expect("tx");
        let row = input_requests::find_for_update(&mut tx, "call_late", None)
            .await
            .expect("read")
            .expect("the card");
        sqlx::query("update tool_user_input_requests set expires_at = now() - interval '1 second' where id = $1")
            .bind(row.id)
            .execute(&mut *tx)
            .await
            .expect("backdated");
        let answer = ending(RequestStatus::Completed, Some("ann"));
        assert!(answer.in_time);
        let settled = input_requests::settle(&mut tx, row.id, answer)
            .await
            .expect("settle");
        assert!(settled.is_none(), "answered past its time: {settled:?}");
        let expired = input_requests::settle(&mut tx, row.id, ending(RequestStatus::Expired, None))
            .await
            .expect("settle");
        assert_eq!(
            expired.map(|row| row.stored_status()),
            Some(RequestStatus::Expired)
        );
    }

    /// Nor does the server's own clock end a request the database still holds in time:
    /// here the database's clock (a transaction's, which stands still) is behind it.
    #[tokio::test]
    async fn a_request_the_database_holds_in_time_is_answered_whatever_the_servers_clock() {
        let fx = a_card("call_on_time").await;
        let pool = &fx.executor.pool;
        let mut tx = db::begin_background(pool).await.expect("tx");
        sqlx::query(
            "update tool_user_input_requests set expires_at = clock_timestamp() + interval '1 second'
             where tool_call_id = 'call_on_time'",
        )
        .execute(&mut *tx)
        .await
        .expect("a second left");
        tx.commit().await.expect("commit");
        let mut tx = db::begin_as_user(pool, "ann").await.expect("tx");
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let declined = decline(
            &mut tx,
            "ann",
            DeclineRequestParams {
                tool_call_id: "call_on_time".to_owned(),
                message: None,
            },
        )
        .await
        .expect("declined in time");
        assert_eq!(declined.stored_status(), RequestStatus::Declined);
    }
}
