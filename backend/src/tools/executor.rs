//! The universal tool executor: every tool call, from the agent loop or any outside
//! caller, goes through `execute`.
//!
//! enabled and configured? → fill each field of `requires_user_input` from the user
//! only (a submitted card, or a value remembered for this tool; the call's arguments
//! only where the field says `model_may_fill`) → a required visible field still
//! missing: store a pending input request → validate → a call that needs approval:
//! store a pending approval request bound to a digest of its exact arguments →
//! otherwise run, log.

use std::sync::Arc;
use std::time::{Duration, Instant};

use protocol::api::{RequestKind, ToolOutcome};
use protocol::{fields, unseen};
use serde_json::{Map, Value};
use sqlx::PgPool;
use uuid::Uuid;

use super::digest;
use super::kinds::calculator;
use super::mcp::{CallContext, McpHub, McpTarget};
use super::registry::{Runner, Tool, ToolRegistry};
use super::remembered;
use super::{CallRef, ToolContext};
use crate::db::input_requests::{self, InputRequestRow};
use crate::db::{self, conversations, tool_calls};
use crate::error::{Error, FieldErrors, Result};
use crate::requests::{self, create::Ask, create::RequestContext};
use crate::vault::Vault;

/// What running a tool call reaches, and nothing else of the server: the pool (each
/// transaction carries the caller's identity), the registry, the vault for remembered
/// secrets, the MCP servers, and how long a new request waits for its user.
#[derive(Clone)]
pub struct Executor {
    pub pool: PgPool,
    pub tools: Arc<ToolRegistry>,
    pub vault: Arc<Vault>,
    pub mcp: Arc<McpHub>,
    pub input_ttl: Duration,
    /// Most requests waiting at once in one conversation.
    pub max_waiting: u32,
}

impl Executor {
    /// The longest one call of `tool_name` may work (time spent waiting for the user
    /// aside); zero for a tool that answers at once or no longer exists.
    pub fn longest_call(&self, tool_name: &str) -> Duration {
        match self
            .tools
            .get(tool_name)
            .as_deref()
            .map(|tool| &tool.runner)
        {
            Some(Runner::Http(http)) => http.longest_call(),
            Some(Runner::Sql(sql)) => sql.longest_call(),
            Some(Runner::Mcp(target)) => self.mcp.call_timeout(&target.server),
            Some(Runner::Calculator | Runner::ReadSkill(_)) | None => Duration::ZERO,
        }
    }
}

/// One tool call as the executor receives it.
#[derive(Clone, Debug)]
pub struct ToolCall {
    pub conversation_id: Uuid,
    pub run_id: Option<Uuid>,
    pub tool_name: String,
    pub tool_call_id: String,
    pub arguments: Map<String, Value>,
    pub original_user_request: Option<String>,
}

/// The values a call runs with, and the arguments that tried to set user-only fields.
struct Filled {
    values: Map<String, Value>,
    ignored: Vec<String>,
}

/// Runs one tool call for `user_id`. A failing tool is an outcome, not an error;
/// errors are the caller's mistakes (unknown tool or conversation, reused call id) or
/// the database's.
pub async fn execute(executor: &Executor, user_id: &str, call: ToolCall) -> Result<ToolOutcome> {
    let tool = executor
        .tools
        .get(&call.tool_name)
        .ok_or(Error::NotFound("tool"))?;
    // Refused before anything runs: the log could not store it after the call was made.
    if let Some(field) = field_with_nul(&call) {
        return Err(Error::unprocessable(
            "the request holds a NUL (U+0000) character, which cannot be stored",
            FieldErrors::from([(field, "must not contain NUL (U+0000) characters".to_owned())]),
        ));
    }
    let started = Instant::now();
    let mut tx = db::begin_as_user(&executor.pool, user_id).await?;
    if !conversations::exists(&mut tx, call.conversation_id).await? {
        return Err(Error::NotFound("conversation"));
    }
    let log = CallLog {
        user_id,
        tool: &tool,
        call: &call,
        started,
    };
    if let Some(reason) = tool.unavailable_reason() {
        let outcome = ToolOutcome::failed(reason);
        log.write(&mut tx, &outcome, "rejected", &[]).await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    // Before any card: the user must not answer for a call that cannot run as shown.
    if let Some(refusal) = one_name_refusal(&tool, &call.arguments) {
        let outcome = ToolOutcome::failed(refusal);
        log.write(&mut tx, &outcome, "failure", &[]).await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    let remembered = remembered::for_tool(
        &mut tx,
        &executor.vault,
        &executor.tools,
        user_id,
        call.conversation_id,
        &tool,
    )
    .await?;
    let filled = fill_fields(&tool, &call.arguments, &remembered, &Map::new());
    if !filled.ignored.is_empty() {
        tracing::warn!(tool = %tool.name, ignored = ?filled.ignored, "arguments aimed at user-only fields, or named like a field, were ignored");
    }
    let ctx = RequestContext {
        user_id,
        run_id: call.run_id,
        ttl: executor.input_ttl,
        max_waiting: executor.max_waiting,
        origin: "executor",
        original_user_request: call.original_user_request.as_deref(),
    };
    if let Some(spec) = &tool.input_spec
        && !fields::missing_fields(&spec.fields, &filled.values).is_empty()
    {
        let fields = card_fields(&spec.fields, &filled.values);
        let row = requests::create::insert_request(
            &mut tx,
            &ctx,
            call.conversation_id,
            &tool.name,
            &call.tool_call_id,
            &tool.storable_arguments(&call.arguments),
            Ask::Input {
                reason: &spec.reason,
                fields: &fields,
                save_for: spec.save_for(),
            },
        )
        .await?;
        let outcome = ToolOutcome {
            success: false,
            error: Some(spec.reason.clone()),
            requires_user_input: true,
            user_input_request: Some(requests::describe(&row, &executor.tools)),
            ..ToolOutcome::default()
        };
        log.write(&mut tx, &outcome, "requires_user_input", &filled.ignored)
            .await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    let validated = match validate(&tool, &call, filled.values, Defaults::WhenAsking) {
        Ok(validated) => validated,
        Err(problem) => {
            let outcome = ToolOutcome::failed(problem);
            log.write(&mut tx, &outcome, "failure", &filled.ignored)
                .await?;
            tx.commit().await?;
            return Ok(outcome);
        }
    };
    if validated.waits {
        let outcome = ask_approval(&mut tx, executor, &ctx, &tool, &call, &validated, None).await?;
        log.write(&mut tx, &outcome, "requires_approval", &filled.ignored)
            .await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    // Nothing to ask: no transaction stays open while the tool runs.
    tx.commit().await?;
    let outcome = run(executor, user_id, &tool, &call, &validated.values).await;
    // The tool has run: its outcome is what the caller must get even when the log cannot
    // be written, or a call told it failed would be made again and act twice.
    let logged = async {
        let mut tx = db::begin_recording_as_user(&executor.pool, user_id).await?;
        log.write(&mut tx, &outcome, outcome_label(&outcome), &filled.ignored)
            .await?;
        tx.commit().await?;
        Ok::<_, Error>(())
    }
    .await;
    if let Err(err) = logged {
        tracing::error!(tool = %tool.name, tool_call_id = %call.tool_call_id, error = %err, "a tool call ran but could not be logged");
    }
    Ok(outcome)
}

/// The first part of the call (`arguments.<name>`, whose name or value holds it at any
/// depth, or `original_user_request`) that holds a NUL character, which Postgres can
/// store neither in text nor in JSON.
fn field_with_nul(call: &ToolCall) -> Option<String> {
    call.arguments
        .iter()
        .find(|(name, value)| name.contains('\0') || holds_nul(value))
        .map(|(name, _)| format!("arguments.{}", name.replace('\0', "\\u0000")))
        .or_else(|| {
            call.original_user_request
                .as_deref()
                .is_some_and(|text| text.contains('\0'))
                .then(|| "original_user_request".to_owned())
        })
}

/// Whether a value holds a NUL at any depth, in a text or an object's key.
fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map
            .iter()
            .any(|(key, item)| key.contains('\0') || holds_nul(item)),
        _ => false,
    }
}

/// Stores an approval request for exactly these values (secrets left out: they are
/// neither shown nor part of the digest) and answers `requires_approval`.
async fn ask_approval(
    conn: &mut sqlx::PgConnection,
    executor: &Executor,
    ctx: &RequestContext<'_>,
    tool: &Tool,
    call: &ToolCall,
    validated: &Validated,
    carried: Option<&Map<String, Value>>,
) -> Result<ToolOutcome> {
    let shown = tool.approvable_values(&validated.values);
    let digest = digest::of_arguments(&tool.name, &shown);
    let reason = tool.approval_reason();
    let decisions = tool
        .approval
        .as_ref()
        .map(|rule| rule.decisions.clone())
        .unwrap_or_default();
    let row = requests::create::insert_request(
        conn,
        ctx,
        call.conversation_id,
        &tool.name,
        &call.tool_call_id,
        &shown,
        Ask::Approval {
            reason: &reason,
            note: validated.note.as_deref(),
            fields: tool.fields(),
            decisions: &decisions,
            digest: &digest,
            carried,
        },
    )
    .await?;
    Ok(ToolOutcome {
        success: false,
        error: Some(reason),
        requires_approval: true,
        approval_request: Some(requests::describe(&row, &executor.tools)),
        ..ToolOutcome::default()
    })
}

/// Runs the tool of a request the user has just answered: an input request with the
/// stored arguments plus the submitted values (asking for approval next when the call
/// needs it), an approval with exactly the arguments approved. The outcome is kept on
/// the request.
pub async fn retry(
    executor: &Executor,
    user_id: &str,
    row: &InputRequestRow,
) -> Result<ToolOutcome> {
    let call = ToolCall {
        conversation_id: row.conversation_id,
        run_id: row.run_id,
        tool_name: row.tool_name.clone(),
        tool_call_id: row.tool_call_id.clone(),
        arguments: row.tool_args.0.clone(),
        original_user_request: row.original_user_request.clone(),
    };
    let started = Instant::now();
    let tool = executor.tools.get(&row.tool_name);
    let outcome = match &tool {
        None => ToolOutcome::failed(format!("the tool `{}` no longer exists", row.tool_name)),
        Some(tool) => match tool.unavailable_reason() {
            Some(reason) => ToolOutcome::failed(reason),
            None => retry_with_answer(executor, user_id, tool, row, &call).await?,
        },
    };
    let mut tx = db::begin_recording_as_user(&executor.pool, user_id).await?;
    input_requests::set_tool_result(
        &mut tx,
        row.id,
        &serde_json::to_value(&outcome).unwrap_or_default(),
    )
    .await?;
    if let Some(tool) = &tool {
        let log = CallLog {
            user_id,
            tool,
            call: &call,
            started,
        };
        log.write(&mut tx, &outcome, outcome_label(&outcome), &[])
            .await?;
    }
    tx.commit().await?;
    Ok(outcome)
}

async fn retry_with_answer(
    executor: &Executor,
    user_id: &str,
    tool: &Arc<Tool>,
    row: &InputRequestRow,
    call: &ToolCall,
) -> Result<ToolOutcome> {
    let approval = row.kind() == RequestKind::Approval;
    let mut answered = row.open_inputs(&executor.vault)?;
    if approval {
        // The approved arguments fill the fields they name: the user saw (or wrote) them.
        for (name, value) in &call.arguments {
            if tool.field(name).is_some_and(|f| !f.is_secret()) {
                answered.insert(name.clone(), value.clone());
            }
        }
        // A field the card showed no value for (or the user's edit cleared) has none:
        // not a default, not an earlier card's value, not memory, which would make the
        // call differ from what was approved.
        for field in tool.fields() {
            if !field.is_secret() && !call.arguments.contains_key(&field.name) {
                answered.insert(field.name.clone(), Value::Null);
            }
        }
    }
    let mut tx = db::begin_as_user(&executor.pool, user_id).await?;
    let remembered = remembered::for_tool(
        &mut tx,
        &executor.vault,
        &executor.tools,
        user_id,
        row.conversation_id,
        tool,
    )
    .await?;
    let filled = fill_fields(tool, &call.arguments, &remembered, &answered);
    if let Some(spec) = &tool.input_spec {
        let missing = fields::missing_fields(&spec.fields, &filled.values);
        if !missing.is_empty() {
            let names: Vec<&str> = missing.iter().map(|f| f.label()).collect();
            return Ok(ToolOutcome::failed(format!(
                "still missing: {}",
                names.join(", ")
            )));
        }
    }
    // Approved arguments run as approved: the server's defaults were written out on
    // the card, or the user's edit left them out.
    let defaults = if approval {
        Defaults::LeftToServer
    } else {
        Defaults::WhenAsking
    };
    let validated = match validate(tool, call, filled.values, defaults) {
        Ok(validated) => validated,
        Err(problem) => return Ok(ToolOutcome::failed(problem)),
    };
    if approval {
        let now = digest::of_arguments(&tool.name, &tool.approvable_values(&validated.values));
        if Some(&now) != row.arguments_digest.as_ref() {
            return Ok(ToolOutcome::failed(
                "not run: the arguments are not the ones the user approved; ask for approval again",
            ));
        }
    } else if validated.waits {
        let ctx = RequestContext {
            user_id,
            run_id: row.run_id,
            ttl: executor.input_ttl,
            max_waiting: executor.max_waiting,
            origin: "executor",
            original_user_request: row.original_user_request.as_deref(),
        };
        let carried = row.user_inputs.as_ref().map(|inputs| &inputs.0);
        let outcome =
            ask_approval(&mut tx, executor, &ctx, tool, call, &validated, carried).await?;
        tx.commit().await?;
        return Ok(outcome);
    }
    tx.commit().await?;
    Ok(run(executor, user_id, tool, call, &validated.values).await)
}

/// Why a call whose arguments hold a name a service may take for another
/// ([`Tool::names_read_as_one`]) is refused, if they do.
fn one_name_refusal(tool: &Tool, arguments: &Map<String, Value>) -> Option<String> {
    let (first, second) = tool.names_read_as_one(arguments)?;
    Some(format!(
        "invalid arguments: `{first}` and `{second}` are one name to a service that reads names loosely (case, look-alike letters, `_` and `-`); send only one, by the name the tool declares"
    ))
}

/// The values the tool runs with: its arguments, then for each field the first of
/// submitted, argument (only where `model_may_fill`), remembered. An argument aimed
/// at a user-only field is dropped and named in `ignored`; a value that breaks its
/// field's rules is dropped, so the user is asked for it rather than the tool failing.
fn fill_fields(
    tool: &Tool,
    arguments: &Map<String, Value>,
    remembered: &Map<String, Value>,
    submitted: &Map<String, Value>,
) -> Filled {
    let mut values = arguments.clone();
    let mut ignored = Vec::new();
    // An argument named like a field but not as it (`Database`, `api_key ` for `apiKey`)
    // is dropped: the tool's server may read it as the field, which only its own
    // sources fill.
    for name in arguments.keys() {
        if tool.field_variant(name).is_some() {
            values.remove(name);
            ignored.push(name.clone());
        }
    }
    for field in tool.fields() {
        let from_arguments = arguments
            .get(&field.name)
            .filter(|value| !fields::is_empty(value));
        if from_arguments.is_some() && !field.model_may_fill {
            ignored.push(field.name.clone());
        }
        // An answer the user cleared is the answer: nothing else fills it (`null` keeps
        // a default from filling it either).
        if submitted.get(&field.name).is_some_and(fields::is_empty) {
            values.insert(field.name.clone(), Value::Null);
            continue;
        }
        let candidate = [
            submitted.get(&field.name),
            from_arguments.filter(|_| field.model_may_fill),
            remembered.get(&field.name),
        ]
        .into_iter()
        .flatten()
        .find(|value| !fields::is_empty(value));
        match candidate.map(|value| fields::validate_field(field, Some(value))) {
            Some(Ok(Some(normal))) => {
                values.insert(field.name.clone(), normal);
            }
            _ => {
                values.remove(&field.name);
            }
        }
    }
    Filled { values, ignored }
}

/// The card's fields, with what the model was allowed to fill (`model_may_fill`)
/// offered as the default: the user sees it, keeps or changes it. A field only the user
/// fills that already has a value (remembered from the user's own answer) is not asked
/// again, nor shown, since the model reads the card: the retry takes it from memory. It
/// stays, blank as before, when another field's `visible_if` looks at it.
fn card_fields(
    fields: &[protocol::FieldSpec],
    values: &Map<String, Value>,
) -> Vec<protocol::FieldSpec> {
    let watched = |name: &str| {
        fields
            .iter()
            .any(|f| f.visible_if.as_ref().is_some_and(|rule| rule.field == name))
    };
    fields
        .iter()
        .filter(|field| {
            field.model_may_fill || !values.contains_key(&field.name) || watched(&field.name)
        })
        .map(|field| {
            let mut field = field.clone();
            if field.model_may_fill
                && let Some(value) = values.get(&field.name)
            {
                field.default = Some(value.clone());
            }
            field
        })
        .collect()
}

/// A call's values once checked.
struct Validated {
    /// In their normal form, the server's defaults written out when the call waits.
    values: Map<String, Value>,
    /// Whether the call waits for the user's yes.
    waits: bool,
    /// Said beside the tool's reason on the card, in toolgate's own words: values its
    /// server may read as left out, running with its defaults instead ([`stand_ins`]),
    /// and defaults it fills in unseen.
    note: Option<String>,
}

/// Checks every value against its field and the arguments against the tool's schema;
/// the values in their normal form and whether the call waits for approval, or what is
/// wrong.
fn validate(
    tool: &Tool,
    call: &ToolCall,
    values: Map<String, Value>,
    defaults: Defaults,
) -> Result<Validated, String> {
    let mut values = values;
    if let Some(spec) = &tool.input_spec {
        let field_values: Map<String, Value> = values
            .iter()
            .filter(|(name, _)| spec.fields.iter().any(|f| &f.name == *name))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        match fields::validate_inputs(&spec.fields, &field_values) {
            Ok(accepted) => {
                // A field its rule hides is no value of this call, whoever filled it (a
                // model's argument, a value remembered from a call that showed it): the
                // user was never shown it.
                for field in &spec.fields {
                    if !accepted.contains_key(&field.name) {
                        values.remove(&field.name);
                    }
                }
                values.extend(accepted)
            }
            Err(errors) => {
                let text: Vec<String> = errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                return Err(format!("invalid values: {}", text.join("; ")));
            }
        }
    }
    let model_arguments: Map<String, Value> = call
        .arguments
        .iter()
        .filter(|(name, _)| tool.field(name).is_none())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(refusal) = one_name_refusal(tool, &call.arguments) {
        return Err(refusal);
    }
    let problems = tool.argument_errors(&Value::Object(model_arguments.clone()));
    if !problems.is_empty() {
        return Err(format!("invalid arguments: {}", problems.join("; ")));
    }
    if defaults == Defaults::LeftToServer {
        // Approved arguments: the yes is given, the call waits no more.
        return Ok(Validated {
            values,
            waits: false,
            note: None,
        });
    }
    // Only a call that waits for the user's yes is sent with them: the card must show
    // what runs, while a call that runs at once keeps the arguments as the model sent
    // them (a server may read an argument left out as "leave it as it is").
    let left_out = left_out_defaults(tool, &model_arguments, &values);
    let written = with_server_defaults(tool, &left_out, model_arguments, values.clone());
    // Shown on the card as sent, but perhaps not run so: said beside it.
    let stand_ins = stand_ins(tool, &written);
    let waiting = |written: Map<String, Value>| {
        let note = [stand_in_note(&stand_ins), unshown_note(&left_out, &written)]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        Ok(Validated {
            values: written,
            waits: true,
            note: (!note.is_empty()).then(|| note.join("; ")),
        })
    };
    // Asked of the call as the card would show it and of the call as it would run (with
    // a `null` the card shows as its default, which a server may read as false).
    if tool.needs_approval(&written) || tool.needs_approval(&values) {
        return waiting(written);
    }
    // A hostile server may declare thousands of defaults (untyped, for the model to send
    // empty, or left out past those written out): past the most weighed one by one, the
    // call waits rather than weigh them all.
    let unshown = left_out
        .keys()
        .filter(|name| !given(&written, name))
        .count();
    if stand_ins.len() > MOST_DEFAULTS || unshown > MOST_DEFAULTS {
        return waiting(written);
    }
    if let Some(refusal) = unshown_deciding_defaults(tool, &written, &left_out) {
        return Err(refusal);
    }
    // A value its server may read as a default that needs the user's yes: the call
    // waits, sent as the model wrote it (a server taking the value as given runs what
    // the card shows), and the card names the default.
    let mut probe = written.clone();
    let mut decides = |stand_in: &StandIn| {
        let sent = probe.insert(stand_in.name.clone(), stand_in.default.clone());
        let decides = tool.needs_approval(&probe);
        if let Some(sent) = sent {
            probe.insert(stand_in.name.clone(), sent);
        }
        decides
    };
    if stand_ins.iter().any(&mut decides) {
        return waiting(written);
    }
    Ok(Validated {
        values,
        waits: false,
        note: None,
    })
}

/// An argument sent with a value its server may not take as given, running with its
/// default instead.
struct StandIn {
    name: String,
    sent: Value,
    default: Value,
}

/// The call's arguments its server may read as left out and replace with its default
/// ([`may_be_read_as_left_out`]), where that default is another value.
fn stand_ins(tool: &Tool, written: &Map<String, Value>) -> Vec<StandIn> {
    tool.server_defaults()
        .into_iter()
        .filter_map(|(name, default)| {
            let sent = written.get(&name)?;
            (*sent != default && may_be_read_as_left_out(sent, &default)).then(|| StandIn {
                sent: sent.clone(),
                name,
                default,
            })
        })
        .collect()
}

/// Whether a server may read `sent` as left out and use `default` instead: what
/// JavaScript's `||` and Python's `or` pass over (`null`, `false`, `0`, `""`, and
/// `[]` or `{}`), text that is blank once trimmed by any of them (JavaScript's `trim`
/// also takes the byte order mark, Python's `strip` control characters; invisible
/// ones are taken as blank too), and a value of another JSON type than the default
/// (`args["mode"].as_str().unwrap_or("delete")`), or a number of another kind (`-1` or
/// `0.5` for a default of `0`: `as_u64().unwrap_or(0)`), which a schema may let
/// through.
fn may_be_read_as_left_out(sent: &Value, default: &Value) -> bool {
    let empty = match sent {
        Value::Null => true,
        Value::Bool(flag) => !flag,
        Value::Number(number) => number.as_f64() == Some(0.0),
        Value::String(text) => text
            .chars()
            .all(|c| c.is_whitespace() || unseen::is_unseen(c)),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    };
    let kind = |number: &serde_json::Number| (number.is_u64(), number.is_i64());
    let another_kind = match (sent, default) {
        (Value::Number(sent), Value::Number(default)) => kind(sent) != kind(default),
        _ => std::mem::discriminant(sent) != std::mem::discriminant(default),
    };
    empty || another_kind
}

/// What the card says of the stand-ins beside the tool's reason (at most five named).
fn stand_in_note(stand_ins: &[StandIn]) -> Option<String> {
    let said = first_few(
        stand_ins.iter().map(|stand_in| {
            format!(
                "`{}` is sent as {}, which its server may read as left out and run with the default its schema gives: {}",
                shown_cut(&stand_in.name),
                shown_cut(&stand_in.sent.to_string()),
                shown_cut(&stand_in.default.to_string())
            )
        }),
        "more like it",
    );
    (!said.is_empty()).then(|| said.join("; "))
}

/// The first five of `items`, then how many `more` there are (`"3 more"`): what a card
/// or the model reads of a list a hostile server may make as long as it likes.
fn first_few(items: impl ExactSizeIterator<Item = String>, more: &str) -> Vec<String> {
    const NAMED: usize = 5;
    let count = items.len();
    let mut named: Vec<String> = items.take(NAMED).collect();
    if count > NAMED {
        named.push(format!("{} {more}", count - NAMED));
    }
    named
}

/// What the card says of the arguments left out whose server defaults it cannot show
/// (past the most written out, or breaking the schema): the server fills them in
/// unseen, so the user is at least told which (at most five named).
fn unshown_note(left_out: &Map<String, Value>, written: &Map<String, Value>) -> Option<String> {
    let unshown: Vec<&String> = left_out
        .keys()
        .filter(|name| !written.contains_key(*name))
        .collect();
    let named = first_few(
        unshown.iter().map(|name| format!("`{}`", shown_cut(name))),
        "more",
    );
    (!named.is_empty()).then(|| {
        format!(
            "its server fills {} with defaults of its own, not shown here",
            named.join(", ")
        )
    })
}

/// A server's name or value as the card and the model read it: hidden characters
/// written out, at most 80 characters.
fn shown_cut(text: &str) -> String {
    unseen::written_out(text).chars().take(80).collect()
}

/// Why a call that does not wait as written out cannot run: its server would fill in a
/// default that makes it wait, which the card could not show (past the most written
/// out, or breaking the schema beside the model's arguments). Neither run unasked nor
/// ask with the deciding value unseen; the model may send the argument itself.
fn unshown_deciding_defaults(
    tool: &Tool,
    written: &Map<String, Value>,
    left_out: &Map<String, Value>,
) -> Option<String> {
    let mut probe = written.clone();
    let mut deciding = Vec::new();
    for (name, default) in left_out {
        // Written out already; one sent as `null` is not.
        if given(written, name) {
            continue;
        }
        let sent = probe.insert(name.clone(), default.clone());
        if tool.needs_approval(&probe) {
            deciding.push(name.clone());
        }
        match sent {
            Some(sent) => probe.insert(name.clone(), sent),
            None => probe.remove(name),
        };
    }
    if deciding.is_empty() {
        return None;
    }
    // A server's names, as long and as many as it likes: the model reads a bounded part.
    let named = first_few(
        deciding.iter().map(|name| format!("`{}`", shown_cut(name))),
        "more",
    );
    Some(format!(
        "the tool's server would fill {} with a default that needs the user's approval, \
         and that default cannot be shown to them; send {} explicitly",
        named.join(", "),
        if deciding.len() == 1 { "it" } else { "them" }
    ))
}

/// Every default the tool's server declares for what the call left out (or sent as
/// `null`), however many and whether or not they fit its schema: what the server runs
/// with, which decides whether the call waits even where the card cannot show it.
fn left_out_defaults(
    tool: &Tool,
    model_arguments: &Map<String, Value>,
    values: &Map<String, Value>,
) -> Map<String, Value> {
    tool.server_defaults()
        .into_iter()
        .filter(|(name, _)| !given(values, name) && !given(model_arguments, name))
        .collect()
}

/// Whether `map` gives `name` a value: `null` counts as left out, as many a server
/// reads it (`args.mode ?? "delete"`).
fn given(map: &Map<String, Value>, name: &str) -> bool {
    map.get(name).is_some_and(|value| !value.is_null())
}

/// Whether [`validate`] writes out the server's defaults for what a call left out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Defaults {
    /// When the call is to wait for approval (see [`Tool::server_defaults`]).
    WhenAsking,
    /// Never: approved arguments, which run as the user approved them.
    LeftToServer,
}

/// The most defaults written out for one call: a hostile server's schema may declare
/// thousands, each a schema check when they do not all fit at once.
const MOST_DEFAULTS: usize = 64;

/// `values` with the defaults the tool's server declares for what the call left out,
/// written out (see [`Tool::server_defaults`]). An argument sent as `null` counts as left
/// out: many a server reads it so (`args.mode ?? "delete"`), so whether the call waits
/// for the user's yes is asked of the default, which the card then shows. A default
/// that breaks the server's own schema (alone or beside the others), or holds a NUL
/// (which cannot be stored), is left to the server as before.
fn with_server_defaults(
    tool: &Tool,
    left_out: &Map<String, Value>,
    mut model_arguments: Map<String, Value>,
    mut values: Map<String, Value>,
) -> Map<String, Value> {
    let defaults: Vec<(String, Value)> = left_out
        .iter()
        .filter(|(name, default)| !name.contains('\0') && !holds_nul(default))
        .take(MOST_DEFAULTS)
        .map(|(name, default)| (name.clone(), default.clone()))
        .collect();
    if defaults.is_empty() {
        return values;
    }
    let fits = |arguments: &Map<String, Value>| {
        tool.argument_errors(&Value::Object(arguments.clone()))
            .is_empty()
    };
    // Most often they all fit at once: one check.
    let mut all = model_arguments.clone();
    all.extend(defaults.iter().cloned());
    if fits(&all) {
        values.extend(defaults);
        return values;
    }
    for (name, default) in defaults {
        model_arguments.insert(name.clone(), default.clone());
        if fits(&model_arguments) {
            values.insert(name, default);
        } else {
            model_arguments.remove(&name);
        }
    }
    values
}

/// Runs the tool; its outcome keeps none of the call's secrets (see [`super::redact`]).
async fn run(
    executor: &Executor,
    user_id: &str,
    tool: &Arc<Tool>,
    call: &ToolCall,
    values: &Map<String, Value>,
) -> ToolOutcome {
    if let Runner::Mcp(target) = &tool.runner {
        // Masked where the server's call ends, before anyone waiting on it sees it.
        return run_mcp(executor, user_id, tool, target, call, values).await;
    }
    let context = ToolContext {
        user_id: user_id.to_owned(),
        conversation_id: call.conversation_id,
        run_id: call.run_id,
        tool_call_id: call.tool_call_id.clone(),
        original_user_request: call.original_user_request.clone(),
        arguments: tool.storable_arguments(&call.arguments),
    };
    let result = match &tool.runner {
        Runner::Http(http) => {
            // An optional field left empty (or hidden by its rule) is sent as nothing,
            // not a failed call; a `null` the model wrote for an argument still fails
            // in a URL (`?account=` may read as "all accounts").
            let left_empty: Vec<String> = tool
                .fields()
                .iter()
                .filter(|field| !field.required && !values.contains_key(&field.name))
                .map(|field| field.name.clone())
                .collect();
            http.run(values, &left_empty, &context).await
        }
        Runner::Sql(sql) => sql.run(values, &context).await,
        Runner::Calculator => calculator::run(values),
        Runner::ReadSkill(dir) => {
            let name = values
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            crate::agent::skills::read(dir, name)
                .map(|text| serde_json::json!({ "name": name, "instructions": text }))
                .ok_or_else(|| format!("there is no skill named `{name}`"))
        }
        Runner::Mcp(_) => Err("an MCP tool runs through its server".to_owned()),
    };
    let outcome = match result {
        Ok(result) => ToolOutcome::ok(result),
        Err(error) => ToolOutcome::failed(error),
    };
    tool.redactions(values).outcome(outcome)
}

/// An MCP tool: the values (arguments and the user's fields) go to the server in the
/// user's own session. A question the server asks meanwhile is this call's
/// `requires_user_input`; the call goes on once it is answered.
async fn run_mcp(
    executor: &Executor,
    user_id: &str,
    tool: &Tool,
    target: &McpTarget,
    call: &ToolCall,
    values: &Map<String, Value>,
) -> ToolOutcome {
    let secret_fields = tool
        .fields()
        .iter()
        .filter(|field| field.is_secret())
        .map(|field| field.name.clone())
        .collect();
    let context = CallContext {
        user_id: user_id.to_owned(),
        call: CallRef {
            run_id: call.run_id,
            conversation_id: call.conversation_id,
            tool_call_id: call.tool_call_id.clone(),
            tool_name: tool.name.clone(),
        },
    };
    executor
        .mcp
        .call(target, context, values.clone(), secret_fields)
        .await
}

fn outcome_label(outcome: &ToolOutcome) -> &'static str {
    if outcome.requires_approval {
        "requires_approval"
    } else if outcome.requires_user_input {
        "requires_user_input"
    } else if outcome.success {
        "success"
    } else {
        "failure"
    }
}

/// One call's entry in `tool_call_log` and the server log.
struct CallLog<'a> {
    user_id: &'a str,
    tool: &'a Tool,
    call: &'a ToolCall,
    started: Instant,
}

impl CallLog<'_> {
    async fn write(
        &self,
        conn: &mut sqlx::PgConnection,
        outcome: &ToolOutcome,
        label: &str,
        ignored: &[String],
    ) -> Result<()> {
        // Only what may be stored: user-only fields the call tried to set are named in
        // `ignored_arguments`, never kept, and secrets are masked.
        let arguments = self
            .tool
            .masked_arguments(&self.tool.storable_arguments(&self.call.arguments));
        tracing::info!(
            tool = %self.tool.name,
            tool_call_id = ?self.call.tool_call_id,
            conversation_id = %self.call.conversation_id,
            outcome = label,
            "tool call"
        );
        tool_calls::insert(
            conn,
            tool_calls::ToolCallRecord {
                user_id: self.user_id,
                conversation_id: self.call.conversation_id,
                run_id: self.call.run_id,
                tool_name: &self.tool.name,
                tool_call_id: &self.call.tool_call_id,
                redacted_arguments: &arguments,
                ignored_arguments: ignored,
                outcome: label,
                error: outcome.error.as_deref(),
                duration_ms: self.started.elapsed().as_secs_f64() * 1000.0,
            },
        )
        .await?;
        Ok(())
    }
}

/// The executor on its own: a real Postgres (a database of its own, migrated), the
/// registry from a tools file, no HTTP server and no model.
#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write;

    use serde_json::json;

    use super::*;
    use crate::db::listener::EventHub;
    use crate::tools::mcp::{HubDeps, McpConfig};

    /// An http tool the tests never let run: it needs a user-only account first.
    const TOOLS: &str = r#"
[[tools]]
name = "lookup_account"
description = "Look an account up"
kind = "http"
[tools.parameters]
type = "object"
[tools.parameters.properties.region]
type = "string"
[tools.requires_user_input]
reason = "Which account?"
[[tools.requires_user_input.fields]]
name = "account"
type = "text"
[tools.http]
method = "GET"
url = "https://accounts.example.invalid/{account}"
"#;

    pub(crate) struct Fixture {
        pub(crate) executor: Executor,
        /// The tools file `ToolRegistry::load` read, removed on drop.
        tools_file: std::path::PathBuf,
    }

    impl Drop for Fixture {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.tools_file);
        }
    }

    /// An executor on a fresh, migrated database with the `lookup_account` tool, which
    /// asks for an account only the user knows.
    pub(crate) async fn fixture() -> Fixture {
        let pool = db::tests::scratch_pool().await;
        let path =
            std::env::temp_dir().join(format!("toolgate_tools_{}.toml", Uuid::new_v4().simple()));
        std::fs::File::create(&path)
            .and_then(|mut file| file.write_all(TOOLS.as_bytes()))
            .expect("tools file");
        let (registry, _) = ToolRegistry::load(Some(&path), None).expect("tools file");
        let tools = Arc::new(registry);
        let vault = Arc::new(Vault::new(&[7; 32]));
        let (mcp, _deliveries) = McpHub::start(
            McpConfig::default(),
            HubDeps {
                pool: pool.clone(),
                registry: tools.clone(),
                events: EventHub::start(pool.clone()),
                input_ttl: Duration::from_secs(600),
                max_waiting: 100,
                vault: vault.clone(),
                instance: Uuid::new_v4(),
            },
        );
        Fixture {
            executor: Executor {
                pool,
                tools,
                vault,
                mcp,
                input_ttl: Duration::from_secs(600),
                max_waiting: 100,
            },
            tools_file: path,
        }
    }

    pub(crate) async fn conversation_of(executor: &Executor, user: &str) -> Uuid {
        let mut tx = db::begin_as_user(&executor.pool, user).await.expect("tx");
        let conversation = conversations::insert(&mut tx, user, "t")
            .await
            .expect("conversation");
        tx.commit().await.expect("commit");
        conversation.id
    }

    pub(crate) fn call(conversation_id: Uuid, tool: &str, id: &str, arguments: Value) -> ToolCall {
        ToolCall {
            conversation_id,
            run_id: None,
            tool_name: tool.to_owned(),
            tool_call_id: id.to_owned(),
            arguments: arguments.as_object().cloned().unwrap_or_default(),
            original_user_request: None,
        }
    }

    #[test]
    fn an_answer_the_user_cleared_is_filled_from_nothing_else() {
        let tools = crate::tools::registry::parse_tools_file(
            r#"
[[tools]]
name = "send_note"
description = "Sends a note"
kind = "http"
requires_approval = false
parameters = { type = "object", properties = { cc = { type = "string" } } }
[tools.requires_user_input]
reason = "Who gets it"
save_for_session = true
fields = [ { name = "to", type = "text" }, { name = "cc", type = "text", required = false, model_may_fill = true } ]
[tools.http]
url = "https://api.example.com/note/{to}"
"#,
        )
        .expect("valid");
        let tool = &tools[0];
        let object = |value: Value| value.as_object().cloned().unwrap_or_default();
        let arguments = object(json!({"cc": "proposed@example.com"}));
        let remembered = object(json!({"cc": "remembered@example.com"}));
        // Cleared on the card: neither the proposal nor memory fills it.
        let filled = fill_fields(
            tool,
            &arguments,
            &remembered,
            &object(json!({"to": "ann", "cc": null})),
        );
        assert_eq!(filled.values.get("cc"), Some(&Value::Null));
        // Left out of the answers: the proposal, as before.
        let filled = fill_fields(tool, &arguments, &remembered, &object(json!({"to": "ann"})));
        assert_eq!(
            filled.values.get("cc"),
            Some(&json!("proposed@example.com"))
        );
    }

    #[test]
    fn an_argument_named_like_a_field_is_dropped_and_named() {
        let tools = crate::tools::registry::parse_tools_file(
            r#"
[[tools]]
name = "pay"
description = "Pays"
kind = "http"
requires_approval = false
parameters = { type = "object", properties = { memo = { type = "string" }, accountId = { type = "string" } } }
[tools.requires_user_input]
reason = "Which account"
fields = [ { name = "account_id", type = "text" } ]
[tools.http]
url = "https://api.example.com/pay/{account_id}"
"#,
        )
        .expect("valid");
        let tool = &tools[0];
        let object = |value: Value| value.as_object().cloned().unwrap_or_default();
        for spelling in [
            "Account_ID",
            "account-id ",
            "account\u{200B}_id",
            "ａｃｃｏｕｎｔ_ｉｄ",
        ] {
            let mut arguments = object(json!({"memo": "rent"}));
            arguments.insert(spelling.to_owned(), json!("attacker-account"));
            let filled = fill_fields(tool, &arguments, &Map::new(), &Map::new());
            assert_eq!(
                filled.values,
                object(json!({"memo": "rent"})),
                "{spelling:?} reached the tool"
            );
            assert_eq!(filled.ignored, vec![spelling.to_owned()]);
        }
        // A name the tool's own schema declares is its server's to tell apart.
        let arguments = object(json!({"memo": "rent", "accountId": "ledger-7"}));
        let filled = fill_fields(tool, &arguments, &Map::new(), &Map::new());
        assert_eq!(filled.values, arguments);
        assert!(filled.ignored.is_empty());
    }

    /// `arguments` (the model's, all of them) with the server's defaults written out.
    fn written_out(tool: &Tool, arguments: Map<String, Value>) -> Map<String, Value> {
        let left_out = left_out_defaults(tool, &arguments, &arguments);
        with_server_defaults(tool, &left_out, arguments.clone(), arguments)
    }

    /// An MCP tool that waits for approval when `mode` is `delete`, its server's default
    /// (`modes`: the values its schema takes); beside `mode`, `options` more defaulted
    /// arguments whose names sort before it.
    fn deleting_tool(options: usize, modes: Value) -> Tool {
        let mut properties: Map<String, Value> = (0..options)
            .map(|i| {
                (
                    format!("a_{i:03}"),
                    json!({"type": "integer", "default": i}),
                )
            })
            .collect();
        properties.insert("mode".into(), json!({"enum": modes, "default": "delete"}));
        let approval =
            serde_json::from_value(json!({"when": [{"field": "mode", "equals": "delete"}]}))
                .expect("approval");
        mcp_tool("clean_up", properties, Some(approval))
    }

    /// The test server `t`'s tool `remote_name`, taking `properties`.
    fn mcp_tool(
        remote_name: &str,
        properties: Map<String, Value>,
        approval: Option<protocol::approval::ApprovalSpec>,
    ) -> Tool {
        Tool::assemble(crate::tools::registry::ToolParts {
            name: format!("t__{remote_name}"),
            description: format!("The test server's {remote_name}"),
            parameters: json!({"type": "object", "properties": properties}),
            input_spec: None,
            enabled: true,
            key_argument: None,
            approval,
            origin: crate::tools::registry::ToolOrigin::Mcp { server: "t".into() },
            runner: Runner::Mcp(McpTarget {
                server: "t".into(),
                remote_name: remote_name.into(),
            }),
        })
        .expect("tool")
    }

    /// A default that makes a call wait is never left to the server unseen: past the
    /// most written out, or breaking the schema, the call is refused (and sent with the
    /// argument given, it waits as any other); one written out makes it wait.
    #[test]
    fn a_default_that_decides_approval_is_never_left_to_the_server_unseen() {
        let outcome = |tool: &Tool, arguments: Value| {
            let call = call(Uuid::nil(), &tool.name, "call_1", arguments);
            validate(tool, &call, call.arguments.clone(), Defaults::WhenAsking)
                .map(|validated| (validated.waits, validated.values.get("mode").cloned()))
        };
        let modes = json!(["archive", "delete"]);
        let few = deleting_tool(3, modes.clone());
        assert_eq!(outcome(&few, json!({})), Ok((true, Some(json!("delete")))));
        let many = deleting_tool(MOST_DEFAULTS + 1, modes.clone());
        // Past the most written out, or breaking the schema (`delete` not among them).
        for tool in [&many, &deleting_tool(0, json!(["archive"]))] {
            let refused = outcome(tool, json!({})).expect_err("refused");
            assert!(refused.contains("`mode`"), "{refused}");
        }
        // Sent as `null` where the schema takes one (`Optional[...] = "delete"`): left
        // out, as its server reads it.
        let nullable = deleting_tool(MOST_DEFAULTS + 1, json!(["archive", "delete", null]));
        let refused = outcome(&nullable, json!({"mode": null})).expect_err("refused");
        assert!(refused.contains("`mode`"), "{refused}");
        assert_eq!(
            outcome(&many, json!({"mode": "delete"})),
            Ok((true, Some(json!("delete"))))
        );
        // Past the most weighed one by one (a hostile server's thousands), the call
        // waits, and its card names some of what it cannot show.
        let hundreds = deleting_tool(2 * MOST_DEFAULTS + 1, modes.clone());
        let everything = call(Uuid::nil(), &hundreds.name, "call_1", json!({}));
        let waited = validate(
            &hundreds,
            &everything,
            everything.arguments.clone(),
            Defaults::WhenAsking,
        )
        .map(|validated| (validated.waits, validated.note));
        assert_eq!(
            waited,
            Ok((
                true,
                Some(
                    "its server fills `a_064`, `a_065`, `a_066`, `a_067`, `a_068`, 61 more \
                     with defaults of its own, not shown here"
                        .to_owned()
                )
            ))
        );
        // Waiting anyway, the card names the defaults it cannot show.
        let deleting = call(Uuid::nil(), &many.name, "call_1", json!({"mode": "delete"}));
        let note = validate(
            &many,
            &deleting,
            deleting.arguments.clone(),
            Defaults::WhenAsking,
        )
        .map(|validated| validated.note);
        assert_eq!(
            note,
            Ok(Some(
                "its server fills `a_064` with defaults of its own, not shown here".to_owned()
            ))
        );
        assert_eq!(
            outcome(&many, json!({"mode": "archive"})),
            Ok((false, Some(json!("archive"))))
        );
    }

    /// A value a server may read as left out (`args.mode || "delete"`, blank text, a
    /// value of another type than the default) waits when the default it may stand for
    /// would, sent as the model wrote it and with the default named; a call that waits
    /// anyway names it too. A value taken as given, or whose default decides nothing,
    /// runs.
    #[test]
    fn a_value_standing_for_a_default_that_needs_approval_waits_and_is_named() {
        let tidy = |approval: Value| {
            let properties = json!({
                "mode": {"default": "delete"},
                "note": {"default": "kept"},
            });
            mcp_tool(
                "tidy",
                properties.as_object().cloned().unwrap_or_default(),
                Some(serde_json::from_value(approval).expect("approval")),
            )
        };
        let when_deleting = tidy(json!({"when": [{"field": "mode", "equals": "delete"}]}));
        let outcome = |tool: &Tool, arguments: Value| {
            let call = call(Uuid::nil(), &tool.name, "call_1", arguments);
            validate(tool, &call, call.arguments.clone(), Defaults::WhenAsking)
                .map(|validated| (validated.waits, validated.values, validated.note))
        };
        let named = |note: Option<String>, sent: &Value| {
            let note = note.unwrap_or_default();
            assert!(
                note.contains(&format!(
                    "`mode` is sent as {}, which its server may read",
                    unseen::written_out(&sent.to_string())
                )) && note.ends_with(r#"the default its schema gives: "delete""#),
                "{note}"
            );
        };
        for sent in [
            json!(""),
            json!("  "),
            json!("\u{FEFF}"),
            json!("\u{1F}\u{200B}"),
            json!(0),
            json!(0.0),
            json!(false),
            json!(true),
            json!(1),
            json!([]),
            json!(["archive"]),
            json!({}),
        ] {
            let (waits, values, note) =
                outcome(&when_deleting, json!({"mode": sent})).expect("valid");
            assert!(waits, "{sent} ran unasked");
            assert_eq!(
                values.get("mode"),
                Some(&sent),
                "{sent} was not sent as written"
            );
            named(note, &sent);
        }
        for runs in [
            json!({"mode": "archive"}),
            json!({"mode": "archive", "note": ""}),
        ] {
            let (waits, _, note) = outcome(&when_deleting, runs.clone()).expect("valid");
            assert!(!waits && note.is_none(), "{runs} waited");
        }
        // A number of another kind than the default (`as_u64().unwrap_or(0)`).
        let keeping = mcp_tool(
            "purge",
            json!({"keep_days": {"default": 0}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            Some(
                serde_json::from_value(json!({"when": [{"field": "keep_days", "equals": 0}]}))
                    .expect("approval"),
            ),
        );
        for (sent, waits) in [(json!(-1), true), (json!(0.5), true), (json!(7), false)] {
            let (waited, _, _) = outcome(&keeping, json!({"keep_days": sent})).expect("valid");
            assert_eq!(waited, waits, "keep_days = {sent}");
        }
        // Past the most weighed one by one (a hostile server's thousands), the call
        // waits.
        let names = (0..=MOST_DEFAULTS).map(|i| format!("o_{i:03}"));
        let many = mcp_tool(
            "many",
            names
                .clone()
                .map(|name| (name, json!({"default": "x"})))
                .collect(),
            Some(
                serde_json::from_value(json!({"when": [{"field": "never", "equals": "y"}]}))
                    .expect("approval"),
            ),
        );
        let empties: Map<String, Value> = names.map(|name| (name, json!(""))).collect();
        let (waits, _, note) = outcome(&many, Value::Object(empties)).expect("valid");
        assert!(waits);
        assert!(note.is_some_and(|note| note.ends_with("60 more like it")));
        // `null` for a default of `true` where `false` needs approval: the call as it
        // would run (`if not dry_run`), not only as the card would show it, is asked of.
        let dry = mcp_tool(
            "sweep",
            json!({"dry_run": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": true}})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            Some(
                serde_json::from_value(json!({"when": [{"field": "dry_run", "equals": false}]}))
                    .expect("approval"),
            ),
        );
        let (waits, values, _) = outcome(&dry, json!({"dry_run": null})).expect("valid");
        assert!(waits, "a null read as false ran unasked");
        assert_eq!(values.get("dry_run"), Some(&json!(true)));
        let (waits, _, _) = outcome(&dry, json!({"dry_run": true})).expect("valid");
        assert!(!waits);
        // Waiting anyway (every call of it, as an MCP tool's by default), the card
        // still says what the server may run instead of what it shows.
        let always = tidy(json!({}));
        let (waits, _, note) = outcome(&always, json!({"mode": ""})).expect("valid");
        assert!(waits);
        named(note, &json!(""));
        let (_, _, note) = outcome(&always, json!({"mode": "archive"})).expect("valid");
        assert_eq!(note, None);
    }

    /// An MCP tool whose input schema has `count` optional integer arguments, each with
    /// a default; `odd_ones_break` gives every odd one a default its own schema refuses.
    fn tool_with_defaults(count: usize, odd_ones_break: bool) -> Tool {
        let properties: Map<String, Value> = (0..count)
            .map(|i| {
                let default = if odd_ones_break && i % 2 == 1 {
                    json!("not a number")
                } else {
                    json!(i)
                };
                (
                    format!("option_{i:03}"),
                    json!({"type": "integer", "default": default}),
                )
            })
            .collect();
        mcp_tool("many", properties, None)
    }

    /// A server that declares defaults without end cannot make one call check its
    /// schema without end, nor grow the approval card past what a person reads.
    #[test]
    fn at_most_so_many_server_defaults_are_written_out() {
        let tool = tool_with_defaults(MOST_DEFAULTS * 3, false);
        let written = written_out(&tool, Map::new());
        assert_eq!(written.len(), MOST_DEFAULTS);
        // The model's own arguments are never replaced, and do not count.
        let model = json!({"option_000": 7})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let written = written_out(&tool, model);
        assert_eq!(written.get("option_000"), Some(&json!(7)));
        assert_eq!(written.len(), MOST_DEFAULTS + 1);
    }

    /// Defaults that break the server's own schema stay with the server; the ones
    /// that fit are still written out.
    #[test]
    fn a_default_that_breaks_the_schema_is_left_to_the_server() {
        let tool = tool_with_defaults(6, true);
        let written = written_out(&tool, Map::new());
        let names: Vec<&str> = written.keys().map(String::as_str).collect();
        assert_eq!(names, ["option_000", "option_002", "option_004"]);
    }

    #[tokio::test]
    async fn a_tool_runs_and_its_call_is_logged_for_its_user() {
        let fx = fixture().await;
        let conversation = conversation_of(&fx.executor, "ann").await;
        let outcome = execute(
            &fx.executor,
            "ann",
            call(
                conversation,
                "calculator",
                "call_1",
                json!({"expression": "2 + 3"}),
            ),
        )
        .await
        .expect("executed");
        assert!(outcome.success, "{outcome:?}");
        let mut tx = db::begin_as_user(&fx.executor.pool, "ann")
            .await
            .expect("tx");
        let logged: i64 = sqlx::query_scalar("select count(*) from tool_call_log")
            .fetch_one(&mut *tx)
            .await
            .expect("log");
        assert_eq!(logged, 1);
    }

    #[tokio::test]
    async fn a_model_argument_aimed_at_a_user_only_field_never_fills_it() {
        let fx = fixture().await;
        let conversation = conversation_of(&fx.executor, "ann").await;
        let outcome = execute(
            &fx.executor,
            "ann",
            call(
                conversation,
                "lookup_account",
                "call_2",
                json!({"account": "attackers-account", "region": "eu"}),
            ),
        )
        .await
        .expect("executed");
        assert!(outcome.requires_user_input, "{outcome:?}");
        let request = outcome.user_input_request.expect("a card");
        assert_eq!(request.fields[0].name, "account");
        assert_eq!(
            request.fields[0].default, None,
            "not prefilled by the model"
        );
        assert!(!request.tool_args.to_string().contains("attackers-account"));
    }

    #[tokio::test]
    async fn another_users_conversation_and_an_unknown_tool_are_not_found() {
        let fx = fixture().await;
        let anns = conversation_of(&fx.executor, "ann").await;
        let stolen = execute(
            &fx.executor,
            "bob",
            call(anns, "calculator", "call_3", json!({"expression": "1"})),
        )
        .await;
        assert!(
            matches!(stolen, Err(Error::NotFound("conversation"))),
            "{stolen:?}"
        );
        let unknown = execute(
            &fx.executor,
            "ann",
            call(anns, "no_such_tool", "call_4", json!({})),
        )
        .await;
        assert!(
            matches!(unknown, Err(Error::NotFound("tool"))),
            "{unknown:?}"
        );
    }
}
