//! The context pipeline: ordered stages over what the model will receive, with a token
//! budget, configured per conversation (`/context pipeline …` in the chat).
//!
//! - collect: adds notes retrieved from the user's other conversations (full-text search)
//! - enrich: scores each message's relevance to the user's request
//! - filter: drops repeated exchanges, then the least relevant older exchanges past
//!   `token_budget` — whole, so no question loses its answer and no result its call;
//!   pinned requests and the newest version of each keyed artefact always stay
//! - transform: tidies message text
//! - validate: enforces `max_tokens`, trimming further or failing the step clearly

use std::collections::{BTreeMap, HashSet};

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Ctx, Middleware};
use crate::agent::history;
use crate::agent::model::ModelRequest;
use crate::agent::tokens;
use crate::config::SummaryConfig;
use crate::db::conversations;
use crate::error::{Error, FieldErrors, Result};

pub const STAGES: [&str; 5] = ["collect", "enrich", "filter", "transform", "validate"];

/// Each stage's settings: name, kind, default.
const SETTINGS: &[(&str, &str, Kind)] = &[
    ("collect", "retrieval", Kind::Bool(true)),
    ("collect", "retrieval_limit", Kind::Int(3, 0, 20)),
    ("enrich", "recency_weight", Kind::Int(50, 0, 100)),
    ("filter", "dedupe", Kind::Bool(true)),
    ("filter", "token_budget", Kind::Int(8000, 50, 1_000_000)),
    ("transform", "trim", Kind::Bool(true)),
    ("validate", "max_tokens", Kind::Int(16000, 50, 1_000_000)),
];

#[derive(Clone, Copy)]
enum Kind {
    Bool(bool),
    /// Default, min, max.
    Int(i64, i64, i64),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PipelineConfig {
    pub stages: Vec<String>,
    #[serde(default)]
    pub config: BTreeMap<String, BTreeMap<String, Value>>,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            stages: STAGES.iter().map(|s| (*s).to_owned()).collect(),
            config: BTreeMap::new(),
        }
    }
}

impl PipelineConfig {
    /// The configuration as stored with the conversation; the defaults when none is, or
    /// when what is stored no longer reads.
    pub fn from_stored(stored: Option<Value>) -> Self {
        stored
            .and_then(|value| serde_json::from_value(value).ok())
            .unwrap_or_default()
    }

    fn setting(&self, stage: &str, key: &str) -> Value {
        if let Some(value) = self.config.get(stage).and_then(|c| c.get(key)) {
            return value.clone();
        }
        match SETTINGS.iter().find(|(s, k, _)| *s == stage && *k == key) {
            Some((_, _, Kind::Bool(default))) => json!(default),
            Some((_, _, Kind::Int(default, _, _))) => json!(default),
            None => Value::Null,
        }
    }

    fn flag(&self, stage: &str, key: &str) -> bool {
        self.setting(stage, key).as_bool().unwrap_or(false)
    }

    fn number(&self, stage: &str, key: &str) -> i64 {
        self.setting(stage, key).as_i64().unwrap_or(0)
    }

    /// Sets `key=value` on a stage, checking the key and the value.
    pub fn set(&mut self, stage: &str, key: &str, value: &str) -> std::result::Result<(), String> {
        let Some((_, _, kind)) = SETTINGS.iter().find(|(s, k, _)| *s == stage && *k == key) else {
            let known: Vec<&str> = SETTINGS
                .iter()
                .filter(|(s, _, _)| *s == stage)
                .map(|(_, k, _)| *k)
                .collect();
            return Err(if known.is_empty() {
                format!("unknown stage `{stage}`; stages are {}", STAGES.join(", "))
            } else {
                format!(
                    "`{stage}` has no setting `{key}`; it has {}",
                    known.join(", ")
                )
            });
        };
        let parsed = match kind {
            Kind::Bool(_) => match value {
                "true" | "on" | "1" => json!(true),
                "false" | "off" | "0" => json!(false),
                _ => return Err(format!("{stage}.{key} must be true or false")),
            },
            Kind::Int(_, min, max) => match value.parse::<i64>() {
                Ok(n) if (*min..=*max).contains(&n) => json!(n),
                _ => {
                    return Err(format!(
                        "{stage}.{key} must be a whole number from {min} to {max}"
                    ));
                }
            },
        };
        self.config
            .entry(stage.to_owned())
            .or_default()
            .insert(key.to_owned(), parsed);
        Ok(())
    }

    /// How many retrieved notes the collect stage wants, when it is on and retrieval
    /// with it.
    pub fn retrieval_limit(&self) -> Option<i64> {
        (self.stages.iter().any(|s| s == "collect") && self.flag("collect", "retrieval"))
            .then(|| self.number("collect", "retrieval_limit"))
            .filter(|limit| *limit > 0)
    }

    /// Refuses a budget at or below the point where summarisation starts: the filter
    /// (or validate) would drop content that should have gone into a summary.
    pub fn check_against_summary(&self, threshold: usize) -> std::result::Result<(), String> {
        for (stage, key) in [("filter", "token_budget"), ("validate", "max_tokens")] {
            let value = self.number(stage, key);
            if value <= threshold as i64 {
                return Err(format!(
                    "{stage}.{key}={value} is not above {threshold}, where summarisation starts: older turns must leave the context only into a summary, so keep it above {threshold}."
                ));
            }
        }
        Ok(())
    }

    /// The pipeline as the `show` command prints it, with how it works with
    /// summarisation (`summary`, when that is in the chain).
    pub fn describe(&self, summary: Option<&SummaryConfig>) -> String {
        let mut lines = vec!["Context pipeline:".to_owned()];
        for (index, stage) in self.stages.iter().enumerate() {
            let settings: Vec<String> = SETTINGS
                .iter()
                .filter(|(s, _, _)| s == stage)
                .map(|(s, k, _)| format!("{k}={}", self.setting(s, k)))
                .collect();
            lines.push(format!("{}. {stage} ({})", index + 1, settings.join(", ")));
        }
        let off: Vec<&str> = STAGES
            .iter()
            .filter(|s| !self.stages.iter().any(|x| x == *s))
            .copied()
            .collect();
        if !off.is_empty() {
            lines.push(format!("Not in the pipeline: {}", off.join(", ")));
        }
        let budget = self.number("filter", "token_budget");
        // A budget set before summarisation came first, or under a lower threshold.
        if let Some(problem) =
            summary.and_then(|s| self.check_against_summary(s.threshold_tokens).err())
        {
            lines.push(format!("Warning: {problem}"));
        }
        lines.push(match summary {
            Some(summary) => format!(
                "Summarisation starts past {} tokens and keeps the newest exchanges (up to {} messages); the filter's budget of {budget} is above it, so older turns leave the context only into a summary.",
                summary.threshold_tokens, summary.keep_messages
            ),
            None => format!(
                "Summarisation is off: past the budget of {budget} tokens the least relevant older exchanges are dropped, each whole."
            ),
        });
        lines.push("Never trimmed or summarised: your first request and the messages you pin (/pin), with their answers, and the newest version of each keyed artefact.".to_owned());
        lines.join("\n")
    }
}

pub async fn load(
    conn: &mut sqlx::PgConnection,
    conversation_id: uuid::Uuid,
) -> Result<PipelineConfig> {
    Ok(PipelineConfig::from_stored(
        conversations::context_pipeline(conn, conversation_id).await?,
    ))
}

pub struct ContextPipeline;

impl Middleware for ContextPipeline {
    fn name(&self) -> &'static str {
        "context_pipeline"
    }

    fn before_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            run_stages(
                &ctx.inputs.pipeline,
                request,
                &ctx.run.original_user_request,
                &ctx.inputs.retrieved,
                &super::key_of(ctx),
            )
        })
    }
}

/// The stages themselves, without I/O: `retrieved` is what collect found, `key_of`
/// names a tool's key argument.
pub fn run_stages(
    config: &PipelineConfig,
    request: &mut ModelRequest,
    original_request: &str,
    retrieved: &[String],
    key_of: &dyn Fn(&str) -> Option<String>,
) -> Result<()> {
    let mut scores: Vec<f64> = Vec::new();
    for stage in &config.stages {
        match stage.as_str() {
            "collect" if !retrieved.is_empty() => {
                let notes: Vec<String> = retrieved
                    .iter()
                    .map(|t| format!("- {}", t.chars().take(300).collect::<String>()))
                    .collect();
                request.append_system_section(&format!(
                    "Notes from the user's earlier conversations:\n{}",
                    notes.join("\n")
                ));
            }
            "enrich" => {
                scores = relevance(
                    request,
                    original_request,
                    config.number("enrich", "recency_weight"),
                )
            }
            "filter" => {
                if config.flag("filter", "dedupe") {
                    dedupe(request, &mut scores, key_of);
                }
                let budget = config.number("filter", "token_budget") as usize;
                trim_to_budget(request, &mut scores, budget, key_of);
            }
            "transform" if config.flag("transform", "trim") => tidy(request),
            "validate" => {
                let max = config.number("validate", "max_tokens") as usize;
                trim_to_budget(request, &mut scores, max, key_of);
                let used = tokens::count_request(request);
                if used > max {
                    return Err(Error::unprocessable(
                        format!(
                            "the conversation needs {used} tokens, more than the context pipeline's limit of {max}"
                        ),
                        FieldErrors::from([(
                            "validate.max_tokens".to_owned(),
                            format!("{used} > {max}"),
                        )]),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn word_set(text: &str) -> HashSet<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 3)
        .map(str::to_owned)
        .collect()
}

/// Word overlap with the request, plus a weight for recency (0–100).
fn relevance(request: &ModelRequest, original: &str, recency_weight: i64) -> Vec<f64> {
    let wanted = word_set(original);
    let count = request.messages.len().max(1) as f64;
    request
        .messages
        .iter()
        .enumerate()
        .map(|(index, message)| {
            let words = word_set(&message.plain_text());
            let overlap = if wanted.is_empty() {
                0.0
            } else {
                words.intersection(&wanted).count() as f64 / wanted.len() as f64
            };
            overlap + (recency_weight as f64 / 100.0) * (index as f64 / count)
        })
        .collect()
}

/// The current turn (the last user message and everything after it) is never dropped.
fn protected_from(request: &ModelRequest) -> usize {
    request
        .messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(request.messages.len())
}

/// Drops an older exchange of plain text that repeats an earlier one word for word.
fn dedupe(
    request: &mut ModelRequest,
    scores: &mut Vec<f64>,
    key_of: &dyn Fn(&str) -> Option<String>,
) {
    let current = protected_from(request);
    let stay = history::must_stay(&request.messages, key_of);
    let mut seen = HashSet::new();
    let mut keep = vec![true; request.messages.len()];
    for exchange in history::exchanges(&request.messages[..current]) {
        let messages = &request.messages[exchange.clone()];
        let plain = messages.iter().all(|m| {
            m.role != Role::System
                && m.content
                    .iter()
                    .all(|b| matches!(b, ContentBlock::Text { .. }))
        });
        if !plain || exchange.clone().any(|i| stay[i]) {
            continue;
        }
        let key: Vec<(Role, String)> = messages.iter().map(|m| (m.role, m.plain_text())).collect();
        if !seen.insert(key) {
            keep[exchange].iter_mut().for_each(|k| *k = false);
        }
    }
    retain_by(request, scores, &keep);
}

/// What trimming may drop, each piece whole: an exchange, or, in an exchange that must
/// keep its request (pinned, or holding a current artefact), a unit that is neither the
/// request, the artefact nor the final answer. Summaries are never dropped.
fn droppable(
    request: &ModelRequest,
    key_of: &dyn Fn(&str) -> Option<String>,
) -> Vec<std::ops::Range<usize>> {
    let messages = &request.messages;
    let current = protected_from(request);
    let stay = history::must_stay(messages, key_of);
    let mut pieces = Vec::new();
    for exchange in history::exchanges(&messages[..current]) {
        let whole = messages[exchange.start].role == Role::User
            && !exchange
                .clone()
                .any(|i| stay[i] || messages[i].role == Role::System);
        if whole {
            pieces.push(exchange);
            continue;
        }
        pieces.extend(
            history::units(messages, exchange)
                .into_iter()
                .filter(|unit| {
                    !unit
                        .clone()
                        .any(|i| stay[i] || messages[i].role == Role::System)
                }),
        );
    }
    pieces
}

/// Drops whole exchanges (or droppable units of exchanges that must stay), least
/// relevant first, until the request fits `budget`.
fn trim_to_budget(
    request: &mut ModelRequest,
    scores: &mut Vec<f64>,
    budget: usize,
    key_of: &dyn Fn(&str) -> Option<String>,
) {
    // Counted once: re-tokenising the whole request per dropped piece made long
    // conversations quadratic.
    let counts: Vec<usize> = request.messages.iter().map(tokens::count_message).collect();
    let mut total = request
        .system
        .iter()
        .map(|s| tokens::count_text(s))
        .sum::<usize>()
        + counts.iter().sum::<usize>();
    if total <= budget {
        return;
    }
    let score = |range: &std::ops::Range<usize>| -> f64 {
        range
            .clone()
            .map(|i| scores.get(i).copied().unwrap_or(i as f64 / 1000.0))
            .fold(f64::MIN, f64::max)
    };
    let mut candidates = droppable(request, key_of);
    candidates.sort_by(|a, b| score(a).total_cmp(&score(b)).then(a.start.cmp(&b.start)));
    let mut keep = vec![true; request.messages.len()];
    for victim in candidates {
        if total <= budget {
            break;
        }
        for index in victim {
            keep[index] = false;
            total -= counts[index];
        }
    }
    retain_by(request, scores, &keep);
}

fn retain_by(request: &mut ModelRequest, scores: &mut Vec<f64>, keep: &[bool]) {
    let mut index = 0;
    request.messages.retain(|_| {
        let kept = keep.get(index).copied().unwrap_or(true);
        index += 1;
        kept
    });
    if !scores.is_empty() {
        let mut index = 0;
        scores.retain(|_| {
            let kept = keep.get(index).copied().unwrap_or(true);
            index += 1;
            kept
        });
    }
}

fn tidy(request: &mut ModelRequest) {
    for message in &mut request.messages {
        for block in &mut message.content {
            if let ContentBlock::Text { text } = block {
                let mut tidied = text.trim().to_owned();
                while tidied.contains("\n\n\n") {
                    tidied = tidied.replace("\n\n\n", "\n\n");
                }
                *text = tidied;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::history::tests::{answer, call, result, user, write_file_key};
    use crate::agent::model::{ChatMessage, Purpose};
    use serde_json::json;

    fn no_keys(_: &str) -> Option<String> {
        None
    }

    fn request(texts: &[(Role, &str)]) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: vec!["base".into()],
            messages: texts
                .iter()
                .map(|(r, t)| ChatMessage::text(*r, *t))
                .collect(),
            tools: vec![],
            purpose: Purpose::Chat,
        }
    }

    #[test]
    fn the_budget_drops_least_relevant_older_turns_and_keeps_the_current_one() {
        let filler = "unrelated chatter about the weather ".repeat(20);
        let mut req = request(&[
            (Role::User, &filler),
            (Role::Assistant, &filler),
            (Role::User, "invoice totals for acme please"),
            (Role::Assistant, "acme invoice totals are 10"),
            (Role::User, "and the acme invoice for march?"),
        ]);
        let mut config = PipelineConfig::default();
        config.set("filter", "token_budget", "80").expect("valid");
        run_stages(
            &config,
            &mut req,
            "and the acme invoice for march?",
            &[],
            &no_keys,
        )
        .expect("fits");
        let texts: Vec<String> = req.messages.iter().map(|m| m.plain_text()).collect();
        assert!(!texts.iter().any(|t| t.contains("weather")), "{texts:?}");
        assert_eq!(
            texts.last().map(String::as_str),
            Some("and the acme invoice for march?")
        );
        assert!(tokens::count_request(&req) <= 80);
    }

    /// No user message (but the current one) goes without an answer, no tool result
    /// without its call, no call without its result.
    fn assert_whole(messages: &[ChatMessage]) {
        let last_user = messages.iter().rposition(|m| m.role == Role::User);
        for (index, message) in messages.iter().enumerate() {
            if message.role == Role::User && Some(index) != last_user {
                assert_eq!(
                    messages.get(index + 1).map(|m| m.role),
                    Some(Role::Assistant),
                    "unanswered question at {index}: {messages:?}"
                );
            }
            for id in message.tool_call_ids() {
                assert!(
                    messages.iter().any(|m| m.tool_result_id() == Some(id)),
                    "call {id} lost its result"
                );
            }
            if let Some(id) = message.tool_result_id() {
                assert!(
                    messages.iter().any(|m| m.tool_call_ids().contains(&id)),
                    "result {id} lost its call"
                );
            }
        }
    }

    #[test]
    fn trimming_drops_whole_exchanges_and_keeps_the_pinned_request_with_its_answer() {
        let filler = "unrelated chatter about the weather ".repeat(20);
        let mut task = user("Write a scraper; it must use only the standard library.");
        task.pinned = true;
        let mut messages = vec![
            task,
            call("c1", "calculator", json!({"expression": "1+1"})),
            result("c1", "calculator", json!(filler.clone())),
            answer("Started on the scraper."),
        ];
        for n in 0..10 {
            messages.push(user(&format!("question {n} {filler}")));
            messages.push(answer(&format!("answer {n} {filler}")));
        }
        messages.push(user("what next?"));
        let mut req = request(&[]);
        req.messages = messages;
        let mut config = PipelineConfig::default();
        config.set("filter", "token_budget", "400").expect("valid");
        run_stages(&config, &mut req, "what next?", &[], &no_keys).expect("fits");

        assert_whole(&req.messages);
        let texts: Vec<String> = req.messages.iter().map(|m| m.plain_text()).collect();
        assert_eq!(
            texts[0],
            "Write a scraper; it must use only the standard library."
        );
        assert_eq!(texts[1], "Started on the scraper.", "{texts:?}");
        assert!(req.messages.iter().all(|m| m.tool_result_id().is_none()));
        assert!(texts.iter().filter(|t| t.starts_with("question")).count() < 10);
        assert_eq!(texts.last().map(String::as_str), Some("what next?"));
    }

    #[test]
    fn trimming_keeps_the_newest_version_of_a_keyed_artefact() {
        let filler = "unrelated chatter about the weather ".repeat(20);
        let mut req = request(&[]);
        for version in 1..=3 {
            req.messages
                .push(user(&format!("rewrite the script {filler}")));
            req.messages.push(call(
                &format!("w{version}"),
                "write_file",
                json!({"path": "/tmp/scraper.py", "text": format!("version {version} {filler}")}),
            ));
            req.messages
                .push(result(&format!("w{version}"), "write_file", json!("saved")));
            req.messages
                .push(answer(&format!("wrote version {version}")));
        }
        req.messages.push(user("run it"));
        let mut config = PipelineConfig::default();
        config.set("filter", "token_budget", "300").expect("valid");
        config
            .set("validate", "max_tokens", "100000")
            .expect("valid");
        run_stages(&config, &mut req, "run it", &[], &write_file_key).expect("fits");

        assert_whole(&req.messages);
        let ids: Vec<&str> = req
            .messages
            .iter()
            .flat_map(|m| m.tool_call_ids())
            .collect();
        assert_eq!(ids, vec!["w3"], "{:?}", req.messages);
    }

    #[test]
    fn a_repeated_exchange_goes_whole() {
        let mut req = request(&[
            (Role::User, "hello"),
            (Role::Assistant, "hi"),
            (Role::User, "hello"),
            (Role::Assistant, "hi"),
            (Role::User, "hello"),
        ]);
        run_stages(&PipelineConfig::default(), &mut req, "hello", &[], &no_keys).expect("fits");
        assert_eq!(req.messages.len(), 3);
        assert_whole(&req.messages);
    }

    #[test]
    fn validate_fails_clearly_when_even_the_current_turn_is_too_big() {
        let mut req = request(&[(Role::User, &"long ".repeat(400))]);
        let mut config = PipelineConfig::default();
        config.set("validate", "max_tokens", "100").expect("valid");
        let err = run_stages(&config, &mut req, "long", &[], &no_keys).expect_err("too big");
        assert!(err.to_string().contains("validation failed"), "{err}");
    }

    #[test]
    fn settings_are_checked() {
        let mut config = PipelineConfig::default();
        assert!(config.set("filter", "token_budget", "lots").is_err());
        assert!(config.set("filter", "colour", "1").is_err());
        assert!(config.set("nope", "x", "1").is_err());
        assert!(config.set("collect", "retrieval", "false").is_ok());
        assert!(
            config
                .describe(None)
                .contains("1. collect (retrieval=false, retrieval_limit=3)")
        );
    }
}
