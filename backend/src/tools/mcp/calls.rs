//! A call to an MCP tool, and the questions its server asks while it runs.
//!
//! A call runs in its user's own session, one call at a time, so an elicitation belongs
//! to exactly that call and that user. The question becomes a stored input request (the
//! web chat's card, validated by `protocol` on both sides), announced in the same
//! transaction; the executor hands `requires_user_input` back while the call goes on.
//! When the request ends (answered, declined, cancelled, expired) the answer goes back
//! to the server, and whatever the call does next reaches whoever waits: the caller of
//! `submit_response`, and the run, which records the call's result when it finishes.
//! If the session ends while a card is open, the card ends saying so, and the call ends
//! with a failure the model can explain. Nothing is answered twice: a request moves once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use protocol::api::{Elicitation, ElicitationMode, InputRequest, RequestStatus, ToolOutcome};
use protocol::chat::EventKind;
use protocol::fields::{FieldSpec, SaveFor};
use protocol::unseen;
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, InputRequiredResult,
};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, broadcast, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::config::ServerConfig;
use super::session::{Session, SessionShared};
use super::{CallContext, Delivery, McpHub, McpTarget, elicitation, stateless};
use crate::db::input_requests::{self, InputRequestRow};
use crate::db::{self, conversations, events, storable};
use crate::error::Result;
use crate::requests::create::{Ask, RequestContext, insert_request};
use crate::requests::endings;
use crate::tools::redact::Redactions;
use crate::vault::Vault;

/// Longest text of a result the model is given.
const MAX_RESULT_CHARS: usize = 100_000;
/// Longest excerpt of a server's error message.
const MAX_ERROR_CHARS: usize = 2_000;
/// Longest question shown on a card.
const MAX_MESSAGE_CHARS: usize = 2_000;
/// Most questions one call may ask; past it the server's questions are cancelled.
pub(super) const MAX_QUESTIONS_PER_CALL: usize = 20;
/// Largest structured result the model is given, serialised.
const MAX_STRUCTURED_BYTES: usize = 100_000;
/// How long the outcome of a finished call that had asked stays around for a late
/// `submit_response` to read.
const KEEP_FINISHED: Duration = Duration::from_secs(600);

/// Where a call stands.
#[derive(Clone, Debug)]
pub enum CallState {
    Running,
    /// Waiting for the user's answer to this request.
    Asked(Box<InputRequest>),
    Finished(Box<ToolOutcome>),
}

/// A call under way, as its session and the elicitation handler see it.
pub struct CallSlot {
    context: CallContext,
    server: String,
    elicitation_timeout: Duration,
    state: watch::Sender<CallState>,
    /// A question was shown, so the executor has already answered: the call's end goes
    /// to whoever waits for the answer and, for a run's call, to the run (`delivers`).
    asked: AtomicBool,
    /// Questions waiting for the user now (a server may ask several at once): while
    /// any does, the call's own clock stands still, and the call is said to wait for
    /// the latest of them.
    open_questions: Mutex<Vec<InputRequest>>,
    /// Questions asked so far; a server asking without end is refused.
    questions: AtomicUsize,
    /// The call's first question, which a run's step waits on.
    first_question: std::sync::OnceLock<InputRequest>,
    /// The call's end goes to its run as a delivery (set by `finish` before it says the
    /// call finished), so the step must not record it too.
    delivers: AtomicBool,
    /// The call's own secrets: masked in what the server answers and in what it asks,
    /// and carried by its session for the calls after it. The secrets the user gives in
    /// answer to the server's questions join them.
    redactions: Mutex<Arc<Redactions>>,
    /// The own secrets of the session's latest calls before this one (a server may keep
    /// a value one call gave it and say it in another's answer): masked here too.
    earlier: Vec<Arc<Redactions>>,
    /// Those secrets the user gave in answer, for questions the call leaves for a
    /// later round.
    answered: Mutex<Vec<String>>,
    /// The call's session work is over ([`CallSlot::mark_over`]): a question stored
    /// after that, too late for the call's end to see it, is ended by whoever stored it.
    over: AtomicBool,
}

impl CallSlot {
    /// Marks the call's session work over, under the lock its questions are published
    /// under: a question is either published before (and ended with the call's other
    /// open questions) or sees the mark and ends itself.
    fn mark_over(&self) {
        let _open = self
            .open_questions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        self.over.store(true, Ordering::SeqCst);
    }

    /// The secrets masked in what the server says next: the call's own so far and the
    /// session's earlier calls'.
    pub fn redactions(&self) -> Arc<Redactions> {
        let own = self.own_redactions();
        if self.earlier.is_empty() {
            return own;
        }
        Arc::new(own.joined(self.earlier.iter().map(Arc::as_ref)))
    }

    /// The call's own secrets so far, which its session carries for the calls after it.
    pub fn own_redactions(&self) -> Arc<Redactions> {
        self.redactions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The user gave these secrets in answer to one of the server's questions: they are
    /// masked in all the server says after, its standard error in `session` included.
    /// Under the call's locks, so two answers at once both count.
    fn answered_with(&self, secrets: &[String], session: &SessionShared) {
        let mut answered = self.answered.lock().unwrap_or_else(|p| p.into_inner());
        let new: Vec<String> = secrets
            .iter()
            .filter(|secret| !answered.contains(secret))
            .cloned()
            .collect();
        if new.is_empty() {
            return;
        }
        let mut redactions = self.redactions.lock().unwrap_or_else(|p| p.into_inner());
        let before = redactions.clone();
        *redactions = Arc::new(before.adding(new.iter().map(String::as_str)));
        session.carrying_instead(&before, redactions.clone());
        answered.extend(new);
    }

    /// The secrets the user gave in answer to this call's questions.
    fn answered_secrets(&self) -> Vec<String> {
        self.answered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A call the hub remembers, for those who wait for what it does next.
pub struct CallEntry {
    context: CallContext,
    state: watch::Receiver<CallState>,
    finished_at: Option<Instant>,
}

/// What became of a settled request of an MCP server.
pub enum AfterAnswer {
    /// The call lives here; this is what it did next (finished, or asked again).
    Outcome(Box<ToolOutcome>),
    /// Another toolgate process holds the call; it carries on from here.
    Elsewhere,
    /// Nobody holds the call any more (its process stopped): the run must be told.
    Orphaned,
}

/// A call under way: its user, its conversation and its id. A model names its calls
/// (some number them `call_0` in every reply), so one id may be live in two of a user's
/// conversations at once; each keeps its own call.
pub(super) type CallKey = (String, Uuid, String);

fn key(context: &CallContext) -> CallKey {
    (
        context.user_id.clone(),
        context.call.conversation_id,
        context.call.tool_call_id.clone(),
    )
}

/// The outcome the executor hands back while the call waits for `request`.
pub(super) fn waiting_for(request: InputRequest) -> ToolOutcome {
    ToolOutcome {
        success: false,
        error: Some(request.reason.clone()),
        requires_user_input: true,
        user_input_request: Some(request),
        ..ToolOutcome::default()
    }
}

pub async fn start(
    hub: &Arc<McpHub>,
    target: &McpTarget,
    context: CallContext,
    arguments: Map<String, Value>,
    secret_fields: Vec<String>,
) -> ToolOutcome {
    let Some(server) = hub.servers.get(&target.server) else {
        return ToolOutcome::failed(format!("there is no MCP server named `{}`", target.server));
    };
    if hub.is_stopping() {
        return ToolOutcome::failed("toolgate is restarting; call the tool again in a moment");
    }
    let taken = match server.take_session(hub, &context.user_id).await {
        Ok(taken) => taken,
        Err(unreachable) => {
            tracing::warn!(server = %target.server, detail = %server.config.settings_redactions().logged(&unreachable.detail), "MCP call could not start");
            return ToolOutcome::failed(unreachable.public);
        }
    };
    let (state, mut watching) = watch::channel(CallState::Running);
    let slot = Arc::new(CallSlot {
        context: context.clone(),
        server: target.server.clone(),
        elicitation_timeout: server.config.elicitation_timeout,
        state,
        asked: AtomicBool::new(false),
        open_questions: Mutex::default(),
        questions: AtomicUsize::new(0),
        first_question: std::sync::OnceLock::new(),
        delivers: AtomicBool::new(false),
        redactions: Mutex::new(Arc::new(call_redactions(
            &server.config,
            &arguments,
            &secret_fields,
        ))),
        earlier: taken.session.shared.carried(),
        answered: Mutex::default(),
        over: AtomicBool::new(false),
    });
    hub.calls.lock().unwrap_or_else(|p| p.into_inner()).insert(
        key(&context),
        CallEntry {
            context: context.clone(),
            state: watching.clone(),
            finished_at: None,
        },
    );
    let (task_hub, config, remote) = (
        hub.clone(),
        server.config.clone(),
        target.remote_name.clone(),
    );
    let watched = slot.clone();
    tokio::spawn(async move {
        let ended = {
            let session = &taken.session;
            session.shared.set_current(Some(slot.clone()));
            let ended = run(session, &config, &slot, remote.clone(), arguments.clone()).await;
            // Before the session forgets the call: a question that still finds it (on
            // either branch below, parked questions aside) ends itself.
            slot.mark_over();
            session.shared.set_current(None);
            session.touch();
            drop(taken);
            ended
        };
        match ended {
            Ended::Outcome(outcome) => {
                // A secret the user gave the tool never reaches the model, even when the
                // server repeats it in its answer.
                let shown = slot.redactions().outcome(*outcome);
                finish(&task_hub, &slot, shown).await
            }
            Ended::Asks(required) => {
                let asking = stateless::Asking {
                    server: &config.name,
                    remote_name: &remote,
                    arguments: &arguments,
                    secret_fields: &secret_fields,
                    round_number: 1,
                    redactions: &slot.redactions(),
                    answered_secrets: &slot.answered_secrets(),
                };
                let outcome = stateless::park(&task_hub, &slot.context, asking, *required).await;
                if outcome.requires_user_input {
                    // Nothing waits on this session: the questions carry the call on.
                    task_hub
                        .calls
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key(&slot.context));
                    let _ = slot.state.send(CallState::Finished(Box::new(outcome)));
                } else {
                    finish(&task_hub, &slot, outcome).await;
                }
            }
        }
    });
    let first = watching
        .wait_for(|state| !matches!(state, CallState::Running))
        .await
        .map(|state| state.clone());
    // The call may have asked, been answered and finished before this wait looked (the
    // watch keeps only the newest state): when `finish` hands its outcome to the run,
    // here the call waits on its question like any call that asked, or the run would
    // record its result twice.
    let asked_first = watched
        .first_question
        .get()
        .filter(|_| watched.delivers.load(Ordering::SeqCst));
    match (first, asked_first) {
        (Ok(CallState::Asked(request)), _) => waiting_for(*request),
        (Ok(CallState::Finished(_)), Some(question)) => waiting_for(question.clone()),
        (Ok(CallState::Finished(outcome)), None) => *outcome,
        _ => ToolOutcome::failed("the call to the MCP server ended unexpectedly"),
    }
}

/// How large a server's structured content is as it will be stored, under `structured`
/// in the result: parts too deep to read back are kept as their JSON text then, which is
/// longer than the JSON they were (every quote escaped).
fn stored_size(structured: &Value) -> usize {
    let mut as_stored = json!({ "structured": structured });
    storable::flatten_deeper_than(&mut as_stored, storable::MAX_RESULT_DEPTH);
    serde_json::to_vec(&as_stored["structured"]).map_or(usize::MAX, |bytes| bytes.len())
}

/// A call's secrets: the values of its secret fields (in plain text in `arguments`) and
/// what the environment gives the server's settings.
pub(super) fn call_redactions(
    config: &ServerConfig,
    arguments: &Map<String, Value>,
    secret_fields: &[String],
) -> Redactions {
    let secrets: Vec<String> = secret_fields
        .iter()
        .filter_map(|name| arguments.get(name).and_then(Value::as_str))
        .map(str::to_owned)
        .chain(config.secret_env_values())
        .collect();
    Redactions::new(secrets.iter().map(String::as_str))
}

/// How a call ended: with an outcome, or with the server's questions (2026-07-28),
/// to be asked and the call made again.
enum Ended {
    Outcome(Box<ToolOutcome>),
    Asks(Box<InputRequiredResult>),
}

/// Makes the call, timing only the time not spent waiting for the user.
async fn run(
    session: &Session,
    config: &ServerConfig,
    slot: &CallSlot,
    remote: String,
    arguments: Map<String, Value>,
) -> Ended {
    const TICK: Duration = Duration::from_millis(250);
    let call = session
        .peer
        .call_tool_once(CallToolRequestParams::new(remote).with_arguments(arguments));
    tokio::pin!(call);
    let mut busy = Duration::ZERO;
    loop {
        tokio::select! {
            result = &mut call => return match result {
                Ok(CallToolResponse::Complete(result)) => {
                    Ended::Outcome(Box::new(outcome_of(&config.name, Ok(result), &slot.redactions())))
                }
                Ok(CallToolResponse::InputRequired(required)) => Ended::Asks(Box::new(required)),
                Ok(_) => Ended::Outcome(Box::new(ToolOutcome::failed(format!(
                    "the MCP server `{}` answered in a way toolgate does not take (a task)",
                    config.name
                )))),
                Err(err) => Ended::Outcome(Box::new(outcome_of(&config.name, Err(err), &slot.redactions()))),
            },
            () = tokio::time::sleep(TICK) => {
                if slot.open_questions.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
                    busy += TICK;
                }
                if busy >= config.call_timeout {
                    return Ended::Outcome(Box::new(ToolOutcome::failed(format!(
                        "the MCP server `{}` did not finish the call within {} s",
                        config.name,
                        config.call_timeout.as_secs()
                    ))));
                }
            }
        }
    }
}

/// The kind of a block that is not text, as the protocol names it.
fn content_kind(block: &rmcp::model::ContentBlock) -> &'static str {
    use rmcp::model::ContentBlock;
    match block {
        ContentBlock::Text(_) => "text",
        ContentBlock::Image(_) => "image",
        ContentBlock::Audio(_) => "audio",
        ContentBlock::Resource(_) => "resource",
        ContentBlock::ResourceLink(_) => "resource_link",
        _ => "content",
    }
}

fn excerpt(text: &str, most: usize) -> String {
    let mut cut: String = text.chars().take(most).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// A server's answer as a tool outcome: the text and structured content it returned, or
/// why the call failed, in words the model can pass on. Its texts are masked before
/// they are cut, so a cut never leaves part of a secret behind; the caller masks the
/// whole outcome as well.
pub(super) fn outcome_of(
    server: &str,
    result: Result<CallToolResult, ServiceError>,
    redactions: &Redactions,
) -> ToolOutcome {
    match result {
        Ok(result) => {
            let mut texts = Vec::new();
            // Counted by kind, not listed: a server may send millions of empty blocks.
            let mut other = std::collections::BTreeMap::<&str, u64>::new();
            for block in &result.content {
                match block.as_text() {
                    Some(text) => texts.push(text.text.clone()),
                    None => *other.entry(content_kind(block)).or_default() += 1,
                }
            }
            let mut joined = texts.join("\n");
            redactions.text(&mut joined);
            let text = excerpt(&joined, MAX_RESULT_CHARS);
            if result.is_error == Some(true) {
                return ToolOutcome::failed(format!(
                    "the tool of the MCP server `{server}` failed: {}",
                    excerpt(&text, MAX_ERROR_CHARS)
                ));
            }
            let mut value = json!({ "text": text });
            if let Some(structured) = result.structured_content
                && !structured.is_null()
            {
                let size = stored_size(&structured);
                if size <= MAX_STRUCTURED_BYTES {
                    value["structured"] = structured;
                } else {
                    value["structured_omitted"] =
                        json!(format!("{size} bytes, more than {MAX_STRUCTURED_BYTES}"));
                }
            }
            if !other.is_empty() {
                value["omitted"] = json!(other);
            }
            ToolOutcome::ok(value)
        }
        Err(ServiceError::McpError(error)) => {
            let mut message = error.message.to_string();
            redactions.text(&mut message);
            ToolOutcome::failed(format!(
                "the MCP server `{server}` refused the call: {}",
                excerpt(&message, MAX_ERROR_CHARS)
            ))
        }
        Err(ServiceError::TransportClosed | ServiceError::TransportSend(_)) => ToolOutcome::failed(
            format!("the MCP server `{server}` ended the session before the tool finished"),
        ),
        Err(ServiceError::Timeout { timeout }) => ToolOutcome::failed(format!(
            "the MCP server `{server}` did not answer within {} s",
            timeout.as_secs()
        )),
        Err(other) => {
            tracing::warn!(%server, error = %redactions.logged(&other), "MCP call failed");
            ToolOutcome::failed(format!("the call to the MCP server `{server}` failed"))
        }
    }
}

/// The call is over: its open questions end with it, and its outcome goes to whoever
/// waits (the executor, a `submit_response`, the run).
async fn finish(hub: &Arc<McpHub>, slot: &CallSlot, outcome: ToolOutcome) {
    slot.mark_over();
    let message = ended_before_answered(&slot.server);
    if let Err(err) = end_open_questions(hub, &slot.context, &message).await {
        tracing::warn!(error = %err, "could not end an MCP call's open questions");
    }
    let asked = slot.asked.load(Ordering::SeqCst);
    let delivers = asked && slot.context.call.run_id.is_some();
    slot.delivers.store(delivers, Ordering::SeqCst);
    let _ = slot
        .state
        .send(CallState::Finished(Box::new(outcome.clone())));
    let mut calls = hub.calls.lock().unwrap_or_else(|p| p.into_inner());
    if !asked {
        calls.remove(&key(&slot.context));
        return;
    }
    if let Some(entry) = calls.get_mut(&key(&slot.context)) {
        entry.finished_at = Some(Instant::now());
    }
    drop(calls);
    if delivers {
        let _ = hub.deliveries.send(Delivery {
            user_id: slot.context.user_id.clone(),
            call: slot.context.call.clone(),
            outcome,
        });
    }
}

/// Why a question of a call that has ended is over.
fn ended_before_answered(server: &str) -> String {
    format!("the tool of the MCP server `{server}` ended before this was answered")
}

/// Ends, with `message`, the call's questions still open.
async fn end_open_questions(hub: &McpHub, context: &CallContext, message: &str) -> Result<()> {
    let mut tx = db::begin_as_user(&hub.deps.pool, &context.user_id).await?;
    conversations::lock_for_writing(&mut tx, context.call.conversation_id).await?;
    let call = &context.call;
    for id in input_requests::pending_elicitations_of_call(
        &mut tx,
        call.conversation_id,
        &call.tool_call_id,
    )
    .await?
    {
        endings::abandon_question(&mut tx, id, message).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The server asks something while a call runs: a card for the call's user, and the
/// answer back to the server once they give it.
pub async fn on_elicitation(
    shared: &Arc<SessionShared>,
    request: ElicitRequestParams,
    withdrawn: CancellationToken,
) -> ElicitResult {
    let server = shared.server.as_str();
    // A question no user saw is cancelled, never declined: `decline` tells the server a
    // person said no, and a server may remember that answer or act on it.
    let cancel = ElicitResult::new(ElicitationAction::Cancel);
    let Some(hub) = shared.hub.upgrade() else {
        return cancel;
    };
    let Some(slot) = shared.current() else {
        tracing::warn!(%server, "cancelled an elicitation that came outside any call");
        return cancel;
    };
    if slot.questions.fetch_add(1, Ordering::SeqCst) >= MAX_QUESTIONS_PER_CALL {
        tracing::warn!(%server, "cancelled a question past the most one call may ask");
        return cancel;
    }
    let question = match Question::of(&request, server, &slot.redactions()) {
        Ok(question) => question,
        Err(reason) => {
            tracing::warn!(%server, reason = %slot.redactions().logged(&reason), "cancelled an elicitation toolgate cannot show");
            return cancel;
        }
    };
    let row = match store_question(&hub, &slot, &question).await {
        Ok(row) => row,
        Err(err) => {
            tracing::error!(%server, error = %err, "could not store an MCP server's question");
            return cancel;
        }
    };
    // Published under the lock the call's end marks it over under (`mark_over`).
    let published = {
        let mut open = slot
            .open_questions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let over = slot.over.load(Ordering::SeqCst);
        if !over {
            let _ = slot.first_question.set(row.to_api());
            slot.asked.store(true, Ordering::SeqCst);
            open.push(row.to_api());
            let _ = slot.state.send(CallState::Asked(Box::new(row.to_api())));
        }
        !over
    };
    // Stored as the call ended, after its end ended its open questions: no call waits
    // for the answer, and the card would be left open until its time ran out.
    if !published {
        tracing::warn!(%server, "cancelled a question that came as its call ended");
        let message = ended_before_answered(server);
        if let Err(err) = end_open_questions(&hub, &slot.context, &message).await {
            tracing::warn!(error = %err, "could not end a question that came as its call ended");
        }
        return cancel;
    }
    let answer = wait_for_answer(&hub, shared, &slot, &row, withdrawn).await;
    {
        // Told under the lock, so two answers at once cannot leave an answered question
        // as the one the call waits for.
        let mut open = slot
            .open_questions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        open.retain(|question| question.id != row.id);
        let now = match open.last() {
            Some(question) => CallState::Asked(Box::new(question.clone())),
            None => CallState::Running,
        };
        // A call that has finished meanwhile stays finished.
        slot.state.send_if_modified(|state| {
            let finished = matches!(state, CallState::Finished(_));
            if !finished {
                *state = now;
            }
            !finished
        });
    }
    answer
}

/// An elicitation as toolgate shows it.
pub(super) struct Question {
    pub message: String,
    pub mode: ElicitationMode,
    pub fields: Vec<FieldSpec>,
    pub url: Option<String>,
    pub elicitation_id: Option<String>,
}

impl Question {
    /// The server's question, its words masked where they repeat a secret of the call
    /// (the user's secret values, the server's environment): a hostile server must not
    /// show the operator's key to the user, nor have it stored. A question whose link,
    /// field names, choices or defaults carry one is refused: they go back to the server
    /// as they are, so they cannot be masked.
    pub(super) fn of(
        request: &ElicitRequestParams,
        server: &str,
        redactions: &Redactions,
    ) -> std::result::Result<Question, String> {
        // Why a question is refused is logged; it may quote a name that is a secret.
        Self::read(request, server, redactions).map_err(|mut reason| {
            redactions.text(&mut reason);
            reason
        })
    }

    fn read(
        request: &ElicitRequestParams,
        server: &str,
        redactions: &Redactions,
    ) -> std::result::Result<Question, String> {
        let (message, mode, fields, url, elicitation_id) = match request {
            ElicitRequestParams::FormElicitationParams {
                message,
                requested_schema,
                ..
            } => (
                message,
                ElicitationMode::Form,
                elicitation::fields_of(requested_schema, message, server)?,
                None,
                None,
            ),
            ElicitRequestParams::UrlElicitationParams {
                message,
                url,
                elicitation_id,
                ..
            } => {
                // Both go back as they are: the link to the browser, the id to the server
                // (its completion notice names it). The link is read raw too, since the
                // parser lowercases its host.
                if redactions.finds(url) || redactions.finds(elicitation_id) {
                    return Err("its link or id carries a secret of the call".to_owned());
                }
                // Kept with the card and matched against completion notices.
                if !elicitation_id.is_empty()
                    && let Some(problem) = crate::tools::identifiers::problem(elicitation_id)
                {
                    return Err(format!("its id {problem}"));
                }
                (
                    message,
                    ElicitationMode::Url,
                    Vec::new(),
                    Some(elicitation::checked_url(url)?),
                    Some(elicitation_id.clone()).filter(|id| !id.is_empty()),
                )
            }
            _ => return Err("an elicitation mode toolgate does not know".to_owned()),
        };
        let mut message = message.trim().to_owned();
        // Masked before the cut, which could otherwise leave part of a secret behind.
        redactions.text(&mut message);
        // Shown as the user must read it: a direction override the server, or a value it
        // quotes, slips in would reorder what the user reads (`Pay 10 to …`).
        let message = if message.is_empty() {
            format!("The MCP server `{server}` asks:")
        } else {
            excerpt(&unseen::written_out(&message), MAX_MESSAGE_CHARS)
        };
        if url.as_deref().is_some_and(|url| redactions.finds(url)) {
            return Err("its link carries a secret of the call".to_owned());
        }
        let mut fields = fields;
        for field in &mut fields {
            masked_field(field, redactions)?;
            if field.write_out_words().is_some()
                && let Some(problem) = field.cut_descriptions_to_fit()
            {
                return Err(format!("field `{}`: {problem}", field.name));
            }
        }
        Ok(Question {
            message,
            mode,
            fields,
            url,
            elicitation_id,
        })
    }
}

/// `field` with its words masked; refused when what goes back to the server as it is (its
/// name, its choices' values, its default, its pattern) or its bounds carry a secret.
fn masked_field(field: &mut FieldSpec, redactions: &Redactions) -> std::result::Result<(), String> {
    let bounds =
        [field.min, field.max].map(|bound| bound.map(|n| n.to_string()).unwrap_or_default());
    let returned = field
        .options
        .iter()
        .map(|option| option.value.as_str())
        .chain([
            field.name.as_str(),
            field.validation.as_deref().unwrap_or_default(),
        ]);
    let default = field
        .default
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    if returned
        .chain([default.as_str()])
        .chain(bounds.iter().map(String::as_str))
        .any(|text| redactions.finds(text))
    {
        return Err(format!(
            "the field `{}` carries a secret of the call",
            field.name
        ));
    }
    for text in [
        &mut field.label,
        &mut field.description,
        &mut field.placeholder,
        &mut field.warning,
    ]
    .into_iter()
    .flatten()
    {
        redactions.text(text);
    }
    for option in &mut field.options {
        redactions.text(&mut option.label);
    }
    Ok(())
}

/// Stores the question as a pending request of the call's user and announces it, in one
/// transaction.
async fn store_question(
    hub: &McpHub,
    slot: &CallSlot,
    question: &Question,
) -> Result<InputRequestRow> {
    let call = &slot.context.call;
    let mut tx = db::begin_as_user(&hub.deps.pool, &slot.context.user_id).await?;
    conversations::lock_for_writing(&mut tx, call.conversation_id).await?;
    let context = RequestContext {
        user_id: &slot.context.user_id,
        run_id: call.run_id,
        ttl: hub.deps.input_ttl.min(slot.elicitation_timeout),
        max_waiting: hub.deps.max_waiting,
        origin: "mcp",
        original_user_request: None,
    };
    let elicitation = Elicitation {
        server: slot.server.clone(),
        mode: question.mode,
        tool_call_id: call.tool_call_id.clone(),
        url: question.url.clone(),
        elicitation_id: question.elicitation_id.clone(),
    };
    let row = insert_request(
        &mut tx,
        &context,
        call.conversation_id,
        &call.tool_name,
        &format!("elicitation-{}", Uuid::new_v4()),
        &Map::new(),
        Ask::Elicitation {
            reason: &question.message,
            fields: &question.fields,
            save_for: SaveFor::Call,
            elicitation: &elicitation,
            held_by: hub.deps.instance,
        },
    )
    .await?;
    let announced = EventKind::InputRequested {
        request: row.to_api(),
    };
    events::append(
        &mut tx,
        call.conversation_id,
        &slot.context.user_id,
        call.run_id,
        &announced,
    )
    .await?;
    tx.commit().await?;
    Ok(row)
}

async fn news_for(news: &mut broadcast::Receiver<Uuid>, conversation_id: Uuid) {
    loop {
        match news.recv().await {
            Ok(id) if id == conversation_id => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
        }
    }
}

/// Waits until the request is settled — here, by another process, or by expiry — and
/// answers the server accordingly. When the server withdraws the question or the
/// session ends first, the request ends saying so.
async fn wait_for_answer(
    hub: &Arc<McpHub>,
    shared: &SessionShared,
    slot: &CallSlot,
    row: &InputRequestRow,
    withdrawn: CancellationToken,
) -> ElicitResult {
    let server = shared.server.as_str();
    let wake = hub.waiter(row.id);
    let mut news = hub.deps.events.subscribe();
    let mut closed = shared.closed.subscribe();
    let ended = loop {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        match read_request(hub, row).await {
            Ok(Some(current)) if current.status() != RequestStatus::Pending => {
                hub.forget_waiter(row.id);
                let (answer, secrets) = answer_of(&current, &hub.deps.vault);
                slot.answered_with(&secrets, shared);
                return answer;
            }
            Ok(Some(_)) => {}
            // Gone with its conversation: nobody is left to answer it.
            Ok(None) => {
                break format!(
                    "the conversation of the MCP server `{server}`'s question was deleted"
                );
            }
            Err(err) => {
                tracing::warn!(%server, error = %err, "could not read an MCP question's state")
            }
        }
        tokio::select! {
            () = woken => {}
            () = news_for(&mut news, row.conversation_id) => {}
            () = withdrawn.cancelled() => break format!("the MCP server `{server}` withdrew the question"),
            _ = closed.wait_for(|closed| *closed) => {
                break format!("the MCP server `{server}` ended the session before this was answered");
            }
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    };
    hub.forget_waiter(row.id);
    let context = CallContext {
        user_id: row.user_id.clone(),
        call: row.call_ref(),
    };
    if let Err(err) = end_open_questions(hub, &context, &ended).await {
        tracing::warn!(%server, error = %err, "could not end an MCP question");
    }
    ElicitResult::new(ElicitationAction::Cancel)
}

async fn read_request(hub: &McpHub, row: &InputRequestRow) -> Result<Option<InputRequestRow>> {
    let mut tx = db::begin_as_user(&hub.deps.pool, &row.user_id).await?;
    let current = input_requests::find(&mut tx, row.id).await?;
    tx.commit().await?;
    Ok(current)
}

/// What the server is told: the accepted values, or that the user declined or did not
/// answer; and the secrets among the values, to mask in what the server says next.
pub(super) fn answer_of(row: &InputRequestRow, vault: &Vault) -> (ElicitResult, Vec<String>) {
    match row.status() {
        RequestStatus::Completed => {
            let accepted = ElicitResult::new(ElicitationAction::Accept);
            let url_mode = row
                .elicitation
                .as_ref()
                .is_some_and(|e| e.0.mode == ElicitationMode::Url);
            if url_mode {
                return (accepted, Vec::new());
            }
            let mut answered = row
                .user_inputs
                .as_ref()
                .map(|inputs| inputs.0.clone())
                .unwrap_or_default();
            // Secrets are kept sealed; the server that asked gets them as given.
            let mut secrets = Vec::new();
            for field in row.fields().iter().filter(|f| f.is_secret()) {
                let Some(sealed) = answered.get(&field.name).filter(|v| !v.is_null()).cloned()
                else {
                    continue;
                };
                let Ok(opened) = vault.open(&row.user_id, &field.name, &sealed) else {
                    tracing::error!(request = %row.id, field = %field.name, "could not open a secret answer to an MCP server's question");
                    return (ElicitResult::new(ElicitationAction::Cancel), Vec::new());
                };
                if let Some(text) = opened.as_str() {
                    secrets.push(text.to_owned());
                }
                answered.insert(field.name.clone(), opened);
            }
            let content = elicitation::content_of(row.fields(), &answered);
            (accepted.with_content(content), secrets)
        }
        RequestStatus::Declined => (ElicitResult::new(ElicitationAction::Decline), Vec::new()),
        _ => (ElicitResult::new(ElicitationAction::Cancel), Vec::new()),
    }
}

/// The server says a URL-mode interaction is complete: a card still open completes (the
/// server is told it was accepted), and the web chat is told either way.
///
/// Only a question of the session's own user: servers often number their questions per
/// session, so another user's question may carry the same id, and a notice on one
/// user's session must never answer another user's card.
pub async fn on_elicitation_complete(shared: &SessionShared, elicitation_id: &str) {
    let Some(hub) = shared.hub.upgrade() else {
        return;
    };
    let Some(owner) = shared.owner.as_deref() else {
        tracing::debug!(server = %shared.server, "ignored a completion notice on the tool-list session");
        return;
    };
    // Each question's completion is recorded once, however often (or however many
    // times at once) the server says it; one not recorded may be said again.
    if !shared.first_completion_of(elicitation_id) {
        return;
    }
    // One recorded at a time, and only so many waiting: a server that floods notices
    // holds one database connection and a bounded queue, not the pool every user shares.
    let Some(_turn) = shared.completion_turn().await else {
        shared.forget_completion_of(elicitation_id);
        tracing::debug!(server = %shared.server, "dropped a completion notice: too many wait");
        return;
    };
    match complete_url_question(&hub, &shared.server, owner, elicitation_id).await {
        Ok(true) => {}
        Ok(false) => shared.forget_completion_of(elicitation_id),
        Err(err) => {
            shared.forget_completion_of(elicitation_id);
            tracing::warn!(server = %shared.server, error = %err, "could not record an elicitation's completion");
        }
    }
}

/// Records the completion of the user's question the server names: one still waiting
/// completes; one the user accepted (they went to the link) is announced done, once.
/// A declined, cancelled or abandoned one is over, and nothing is said. Whether there
/// was one to record.
async fn complete_url_question(
    hub: &Arc<McpHub>,
    server: &str,
    user_id: &str,
    elicitation_id: &str,
) -> Result<bool> {
    let mut tx = db::begin_background(&hub.deps.pool).await?;
    let found = input_requests::find_elicitation(
        &mut tx,
        hub.deps.instance,
        server,
        user_id,
        elicitation_id,
    )
    .await?;
    tx.commit().await?;
    // Past its time, the question is the sweep's to expire, not the server's to close.
    let Some(row) = found.filter(|row| row.status() != RequestStatus::Expired) else {
        return Ok(false);
    };
    let mut tx = db::begin_as_user(&hub.deps.pool, &row.user_id).await?;
    conversations::lock_for_writing(&mut tx, row.conversation_id).await?;
    // As it stands now, under its lock: the user may have answered it meanwhile.
    let Some(row) = input_requests::for_update(&mut tx, row.id).await? else {
        return Ok(false);
    };
    let announce = match row.status() {
        RequestStatus::Pending => endings::complete_url_question(&mut tx, row.id)
            .await?
            .is_some(),
        // The user went to the link and said so; now the server says it is done.
        RequestStatus::Completed => {
            !events::completion_announced(&mut tx, row.conversation_id, row.id).await?
        }
        // Declined, cancelled, abandoned, or past its time: over, nothing to say.
        _ => false,
    };
    if !announce {
        return Ok(true);
    }
    let done = EventKind::ElicitationCompleted {
        request_id: row.id,
        tool_call_id: row.tool_call_id.clone(),
    };
    events::append(
        &mut tx,
        row.conversation_id,
        &row.user_id,
        row.run_id,
        &done,
    )
    .await?;
    tx.commit().await?;
    if let Some(wake) = hub.waiter_if_any(row.id) {
        wake.notify_one();
    }
    Ok(true)
}

pub async fn after_answer(hub: &Arc<McpHub>, row: &InputRequestRow) -> Result<AfterAnswer> {
    if let Some(wake) = hub.waiter_if_any(row.id) {
        wake.notify_one();
    }
    let call = row.call_ref();
    let entry = hub
        .calls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(
            row.user_id.clone(),
            call.conversation_id,
            call.tool_call_id.clone(),
        ))
        .map(|entry| entry.state.clone());
    let Some(mut state) = entry else {
        return if row.held_by == Some(hub.deps.instance) || holder_alive(hub, row).await? {
            Ok(AfterAnswer::Elsewhere)
        } else {
            Ok(AfterAnswer::Orphaned)
        };
    };
    let next = tokio::time::timeout(
        hub.longest_call(),
        state.wait_for(|state| match state {
            CallState::Finished(_) => true,
            CallState::Asked(request) => request.id != row.id,
            CallState::Running => false,
        }),
    )
    .await;
    Ok(AfterAnswer::Outcome(Box::new(match next {
        Ok(Ok(state)) => match &*state {
            CallState::Finished(outcome) => (**outcome).clone(),
            CallState::Asked(request) => waiting_for((**request).clone()),
            CallState::Running => ToolOutcome::failed("the call is still running"),
        },
        _ => ToolOutcome::failed(
            "the tool is still running; its result will appear in the conversation",
        ),
    })))
}

async fn holder_alive(hub: &McpHub, row: &InputRequestRow) -> Result<bool> {
    let Some(holder) = row.held_by else {
        return Ok(false);
    };
    let mut tx = db::begin_background(&hub.deps.pool).await?;
    let alive = db::instances::is_alive(&mut tx, holder).await?;
    tx.commit().await?;
    Ok(alive)
}

/// Ends every open question of every call under way here (the server is stopping).
pub async fn end_all(hub: &Arc<McpHub>, why: &str) {
    let asking: Vec<CallContext> = hub
        .calls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|entry| matches!(&*entry.state.borrow(), CallState::Asked(_)))
        .map(|entry| entry.context.clone())
        .collect();
    let message = format!("{why} while this was open, so the tool did not finish");
    for context in asking {
        if let Err(err) = end_open_questions(hub, &context, &message).await {
            tracing::warn!(error = %err, "could not end an MCP question at shutdown");
        }
    }
}

/// Drops finished calls nobody asked about for a while.
pub fn forget_finished(hub: &McpHub) {
    hub.calls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|_, entry| {
            entry
                .finished_at
                .is_none_or(|at| at.elapsed() < KEEP_FINISHED)
        });
}

impl McpHub {
    fn waiter(&self, request: Uuid) -> Arc<Notify> {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(request)
            .or_default()
            .clone()
    }

    fn waiter_if_any(&self, request: Uuid) -> Option<Arc<Notify>> {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&request)
            .cloned()
    }

    fn forget_waiter(&self, request: Uuid) {
        self.waiters
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&request);
    }

    /// The longest any server's call may run, for those who wait for one.
    fn longest_call(&self) -> Duration {
        self.servers
            .values()
            .map(|server| server.config.call_timeout)
            .max()
            .unwrap_or(Duration::from_secs(120))
            + Duration::from_secs(5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn structured_content_is_measured_as_it_will_be_stored() {
        let bottom: Map<String, Value> =
            (0..8_000).map(|i| (format!("k{i}"), json!("v"))).collect();
        let deep = (0..storable::MAX_RESULT_DEPTH)
            .fold(Value::Object(bottom), |inner, _| json!({ "d": inner }));
        let raw = serde_json::to_vec(&deep).map_or(0, |bytes| bytes.len());
        assert!(raw <= MAX_STRUCTURED_BYTES, "{raw}");
        assert!(
            stored_size(&deep) > MAX_STRUCTURED_BYTES,
            "{}",
            stored_size(&deep)
        );
        let mut result = CallToolResult::success(vec![rmcp::model::ContentBlock::text("deep")]);
        result.structured_content = Some(deep);
        let outcome = outcome_of("files", Ok(result), &Redactions::new([]));
        let stored = outcome.result.unwrap_or_default();
        assert!(stored.get("structured").is_none(), "{stored}");
        assert!(stored["structured_omitted"].is_string());

        let shallow = json!({"rows": [1, 2, 3]});
        assert_eq!(stored_size(&shallow), shallow.to_string().len());
    }

    /// A server that answers with a flood of empty blocks gets a count of them stored,
    /// not a list as long as the flood.
    #[test]
    fn blocks_that_are_not_text_are_counted_by_kind() {
        let mut blocks = vec![rmcp::model::ContentBlock::text("chart below")];
        blocks.extend((0..100_000).map(|_| rmcp::model::ContentBlock::image("", "image/png")));
        blocks.push(rmcp::model::ContentBlock::audio("", "audio/wav"));
        let outcome = outcome_of(
            "files",
            Ok(CallToolResult::success(blocks)),
            &Redactions::new([]),
        );
        let stored = outcome.result.unwrap_or_default();
        assert_eq!(stored["omitted"], json!({"image": 100_000, "audio": 1}));
        assert!(storable::json_size(&stored) < 100, "{stored}");
    }

    #[test]
    fn results_keep_text_and_structure_and_errors_say_which_server() {
        let result = CallToolResult::success(vec![rmcp::model::ContentBlock::text("hello")]);
        let none = Redactions::new([]);
        let outcome = outcome_of("files", Ok(result), &none);
        assert!(outcome.success);
        assert_eq!(
            outcome.result.as_ref().map(|r| r["text"].clone()),
            Some(json!("hello"))
        );
        let failed = outcome_of("files", Err(ServiceError::TransportClosed), &none);
        assert!(
            failed
                .error
                .unwrap_or_default()
                .contains("`files` ended the session")
        );
    }

    fn asked(params: Value) -> ElicitRequestParams {
        serde_json::from_value(params).expect("an elicitation")
    }

    /// A server's words that hide or reorder characters (`Pay 10 to 12\u{202E}34`) or
    /// pass look-alike letters for Latin ones are shown written out: in its question,
    /// its fields' labels and descriptions and its choices' titles; the values that go
    /// back to it stay as they are.
    #[test]
    fn a_questions_words_are_shown_as_they_must_be_read() {
        let question = Question::of(
            &asked(json!({"mode": "form",
                "message": "Pay 10 to account 12\u{202E}34?",
                "requestedSchema": {"type": "object", "properties": {
                    "go": {"type": "string", "title": "Send to p\u{0430}ypal",
                        "description": "Hidden\u{E0080} data",
                        "oneOf": [{"const": "yes\u{200B}", "title": "Ca\u{200B}ncel"}]}}}})),
            "files",
            &Redactions::new([]),
        )
        .expect("asked");
        assert_eq!(question.message, "Pay 10 to account 12⟨U+202E⟩34?");
        let field = &question.fields[0];
        assert_eq!(field.label.as_deref(), Some("Send to p⟨U+0430⟩ypal"));
        assert_eq!(field.description.as_deref(), Some("Hidden⟨U+E0080⟩ data"));
        assert_eq!(field.options[0].label, "Ca⟨U+200B⟩ncel");
        assert_eq!(field.options[0].value, "yes\u{200B}");
    }

    /// A hostile server repeats a secret of the call in its question: the words are shown
    /// masked; where it would go back to the server as it is, the question is refused.
    #[test]
    fn a_question_repeating_a_secret_shows_it_masked_or_is_not_asked() {
        const SECRET: &str = "zq9Xk2Lm7Pw4";
        let redactions = Redactions::new([SECRET]);
        let form = |property: Value| {
            asked(
                json!({"mode": "form", "message": format!("Is {SECRET} the key to use?"),
                "requestedSchema": {"type": "object", "properties": {"choice": property}}}),
            )
        };
        let worded = form(json!({"type": "boolean", "title": format!("Use {SECRET}"),
            "description": format!("The key {SECRET}, as given")}));
        let question = Question::of(&worded, "files", &redactions).expect("asked");
        let shown = format!("{} {:?}", question.message, question.fields);
        assert!(!shown.contains(&SECRET[..4]), "{shown}");
        assert!(
            question.message.contains(protocol::fields::MASKED),
            "{shown}"
        );
        // Without secrets the same question is shown as the server wrote it.
        let plain = Question::of(&worded, "files", &Redactions::new([])).expect("asked");
        assert!(plain.message.contains(SECRET));

        for property in [
            json!({"type": "string", "enum": [SECRET, "other"]}),
            json!({"type": "string", "default": format!("key={SECRET}")}),
        ] {
            let err = Question::of(&form(property.clone()), "files", &redactions)
                .err()
                .unwrap_or_else(|| panic!("asked with {property}"));
            assert!(err.contains("`choice`") && !err.contains(SECRET), "{err}");
        }
        let link = |url: String, id: &str| {
            asked(
                json!({"mode": "url", "message": "Connect your account", "url": url,
                "elicitationId": id}),
            )
        };
        for (url, id) in [
            (
                format!("https://auth.example.com/connect?key={SECRET}"),
                "e-1",
            ),
            // The parser lowercases a host; the link is read as the server wrote it.
            (format!("https://{SECRET}.auth.example.com/connect"), "e-1"),
            ("https://auth.example.com/connect".to_owned(), SECRET),
        ] {
            let err = Question::of(&link(url.clone(), id), "files", &redactions)
                .err()
                .unwrap_or_else(|| panic!("offered: {url} {id}"));
            assert!(!err.contains(SECRET), "{err}");
        }
        // Why a question was refused is logged, masked even when a name is the secret.
        let named = asked(json!({"mode": "form", "message": "Your key?",
            "requestedSchema": {"type": "object", "properties": {SECRET: {"type": "string"}}}}));
        let err = Question::of(&named, "files", &redactions)
            .err()
            .unwrap_or_else(|| panic!("asked for a field named after the secret"));
        assert!(!err.contains(SECRET), "{err}");
        // A number is a secret too: a bound that repeats one is not shown.
        let numeric = Redactions::new(["48291375"]);
        let bounded = form(json!({"type": "integer", "maximum": 48_291_375}));
        assert!(Question::of(&bounded, "files", &numeric).is_err());
    }

    /// A secret that straddles the cut is masked whole, not left half behind.
    #[test]
    fn a_secret_across_the_cut_leaves_nothing_of_itself() {
        const SECRET: &str = "zq9Xk2Lm7Pw4";
        let long = format!("{}{SECRET} and more", "a".repeat(MAX_RESULT_CHARS - 5));
        let redactions = Redactions::new([SECRET]);
        let result = CallToolResult::success(vec![rmcp::model::ContentBlock::text(long.clone())]);
        let outcome = redactions.outcome(outcome_of("files", Ok(result), &redactions));
        let text = outcome
            .result
            .map(|r| r["text"].to_string())
            .unwrap_or_default();
        assert!(!text.contains(&SECRET[..5]), "{}", &text[text.len() - 40..]);
        let refused = CallToolResult::error(vec![rmcp::model::ContentBlock::text(long)]);
        let outcome = redactions.outcome(outcome_of("files", Ok(refused), &redactions));
        assert!(!outcome.error.unwrap_or_default().contains(&SECRET[..3]));
    }
}
