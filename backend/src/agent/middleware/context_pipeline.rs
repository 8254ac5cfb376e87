//! The context pipeline: ordered stages over what the model will receive, with a token
//! budget, configured per conversation (`/context pipeline …` in the chat).
//!
//! - collect: adds notes retrieved from the user's other conversations (full-text search)
//! - enrich: scores each message's relevance to the user's request
//! - filter: drops duplicates, then the least relevant older turns past `token_budget`
//! - transform: tidies message text
//! - validate: enforces `max_tokens`, trimming further or failing the step clearly

use std::collections::{BTreeMap, HashSet};

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Ctx, Middleware};
use crate::agent::model::{ChatMessage, ModelRequest};
use crate::agent::tokens;
use crate::db::{self, conversations, messages};
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

    /// The pipeline as the `show` command prints it.
    pub fn describe(&self) -> String {
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
        lines.join("\n")
    }
}

pub async fn load(
    conn: &mut sqlx::PgConnection,
    conversation_id: uuid::Uuid,
) -> Result<PipelineConfig> {
    Ok(conversations::context_pipeline(conn, conversation_id)
        .await?
        .and_then(|value| serde_json::from_value(value).ok())
        .unwrap_or_default())
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
            let mut tx = db::begin_as_user(&ctx.state.db, &ctx.run.user_id).await?;
            let config = load(&mut tx, ctx.run.conversation_id).await?;
            let mut retrieved = Vec::new();
            if config.stages.iter().any(|s| s == "collect") && config.flag("collect", "retrieval") {
                retrieved = messages::search_other_conversations(
                    &mut tx,
                    ctx.run.conversation_id,
                    &ctx.run.original_user_request,
                    config.number("collect", "retrieval_limit"),
                )
                .await?;
            }
            tx.commit().await?;
            run_stages(&config, request, &ctx.run.original_user_request, &retrieved)
        })
    }
}

/// The stages themselves, without I/O: `retrieved` is what collect found.
pub fn run_stages(
    config: &PipelineConfig,
    request: &mut ModelRequest,
    original_request: &str,
    retrieved: &[String],
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
                    dedupe(request, &mut scores);
                }
                let budget = config.number("filter", "token_budget") as usize;
                trim_to_budget(request, &mut scores, budget);
            }
            "transform" if config.flag("transform", "trim") => tidy(request),
            "validate" => {
                let max = config.number("validate", "max_tokens") as usize;
                trim_to_budget(request, &mut scores, max);
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

fn dedupe(request: &mut ModelRequest, scores: &mut Vec<f64>) {
    let protected = protected_from(request);
    let mut seen = HashSet::new();
    let mut keep = Vec::with_capacity(request.messages.len());
    for (index, message) in request.messages.iter().enumerate() {
        let plain = message
            .content
            .iter()
            .all(|b| matches!(b, ContentBlock::Text { .. }));
        let key = (message.role, message.plain_text());
        keep.push(index >= protected || !plain || seen.insert(key));
    }
    retain_by(request, scores, &keep);
}

/// Drops whole turns — an assistant message with its tool results, or a single
/// message — least relevant first, until the request fits `budget`.
fn trim_to_budget(request: &mut ModelRequest, scores: &mut Vec<f64>, budget: usize) {
    // Counted once: re-tokenising the whole request per dropped turn made long
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
    let protected = protected_from(request);
    let score = |range: &std::ops::Range<usize>| -> f64 {
        range
            .clone()
            .map(|i| scores.get(i).copied().unwrap_or(i as f64 / 1000.0))
            .fold(f64::MIN, f64::max)
    };
    let mut candidates: Vec<std::ops::Range<usize>> = units(&request.messages[..protected])
        .into_iter()
        .filter(|range| request.messages[range.start].role != Role::System || range.start > 0)
        .collect();
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

/// Groups messages so a tool call and its results form one unit.
fn units(messages: &[ChatMessage]) -> Vec<std::ops::Range<usize>> {
    let mut units = Vec::new();
    let mut index = 0;
    while index < messages.len() {
        let mut end = index + 1;
        if !messages[index].tool_call_ids().is_empty() {
            while end < messages.len() && messages[end].role == Role::Tool {
                end += 1;
            }
        }
        units.push(index..end);
        index = end;
    }
    units
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
    use crate::agent::model::Purpose;

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
        run_stages(&config, &mut req, "and the acme invoice for march?", &[]).expect("fits");
        let texts: Vec<String> = req.messages.iter().map(|m| m.plain_text()).collect();
        assert!(!texts.iter().any(|t| t.contains("weather")), "{texts:?}");
        assert_eq!(
            texts.last().map(String::as_str),
            Some("and the acme invoice for march?")
        );
        assert!(tokens::count_request(&req) <= 80);
    }

    #[test]
    fn validate_fails_clearly_when_even_the_current_turn_is_too_big() {
        let mut req = request(&[(Role::User, &"long ".repeat(400))]);
        let mut config = PipelineConfig::default();
        config.set("validate", "max_tokens", "100").expect("valid");
        let err = run_stages(&config, &mut req, "long", &[]).expect_err("too big");
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
                .describe()
                .contains("1. collect (retrieval=false, retrieval_limit=3)")
        );
    }
}
