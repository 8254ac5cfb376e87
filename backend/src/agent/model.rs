//! What a model is asked and what it answers, independent of any provider.

use futures::future::BoxFuture;
use protocol::chat::{ContentBlock, Role};
use serde_json::{Map, Value};

use crate::db::storable;
use uuid::Uuid;

/// A message as the model sees it. `seq` ties it to the stored message it came from;
/// messages a middleware adds (a summary, retrieved notes) have none.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatMessage {
    pub role: Role,
    pub content: Vec<ContentBlock>,
    pub seq: Option<i32>,
    /// The request that set the task (the conversation's first) or one the user
    /// pinned: never trimmed or summarised away.
    pub pinned: bool,
}

impl ChatMessage {
    pub fn text(role: Role, text: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: vec![ContentBlock::Text { text: text.into() }],
            seq: None,
            pinned: false,
        }
    }

    pub fn plain_text(&self) -> String {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::Text { text } | ContentBlock::ImageStub { text } => {
                    Some(text.as_str())
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn has_image(&self) -> bool {
        self.content
            .iter()
            .any(|block| matches!(block, ContentBlock::Image { .. }))
    }

    pub fn tool_call_ids(&self) -> Vec<&str> {
        self.content
            .iter()
            .filter_map(|block| match block {
                ContentBlock::ToolCall { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    pub fn tool_result_id(&self) -> Option<&str> {
        self.content.iter().find_map(|block| match block {
            ContentBlock::ToolResult { tool_call_id, .. } => Some(tool_call_id.as_str()),
            _ => None,
        })
    }
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: Value,
}

/// Why the model is being asked: a summary request is answered differently by the
/// offline model and never carries tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    Chat,
    Summary,
}

#[derive(Clone, Debug)]
pub struct ModelRequest {
    pub model: String,
    /// System message blocks, in order; appended blocks start with a blank line.
    pub system: Vec<String>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    pub purpose: Purpose,
}

impl ModelRequest {
    /// Appends a system section as its own block, a blank line before it unless it is
    /// the first, and never touches the blocks already there.
    pub fn append_system_section(&mut self, section: &str) {
        let section = section.trim();
        if section.is_empty() {
            return;
        }
        if self.system.is_empty() {
            self.system.push(section.to_owned());
        } else {
            self.system.push(format!("\n\n{section}"));
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestedCall {
    pub id: String,
    pub name: String,
    pub arguments: Map<String, Value>,
    /// Why the call must not run, when what the model wrote cannot stand as a call
    /// (arguments that are no JSON object, an id no card could be answered by, …): the
    /// model is told why, as the call's failed outcome, and may call again.
    pub refused: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct ModelReply {
    pub text: String,
    pub tool_calls: Vec<RequestedCall>,
    /// The model that answered, as the provider names it.
    pub model: String,
}

impl ModelReply {
    /// Gives a call whose id an earlier call of the conversation (`earlier`) had an id of
    /// its own. Some models and servers number their calls per reply (`call_0` every
    /// time): under one id, a later call would be taken for the earlier one, whose result,
    /// card or place in the context it would then share. Calls of this reply that share
    /// a reused id keep sharing the new one, so they are still refused as one id given
    /// twice. The model sees its call under the new id from then on.
    pub fn renew_reused_ids(&mut self, earlier: &std::collections::HashSet<&str>) {
        let mut renewed: std::collections::HashMap<String, String> =
            std::collections::HashMap::new();
        for call in &mut self.tool_calls {
            if !earlier.contains(call.id.as_str()) {
                continue;
            }
            let fresh = renewed.entry(call.id.clone()).or_insert_with(fresh_call_id);
            call.id = fresh.clone();
        }
    }
}

/// A call id of toolgate's own making (a reused id renewed, a call that came without
/// one): nine letters and digits, which every provider takes back in the conversation
/// it is sent (some take nothing else: Mistral's `[a-zA-Z0-9]{9}`).
pub fn fresh_call_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    // 122 random bits; nine digits in base 62 take 54 of them.
    let mut random = Uuid::new_v4().as_u128();
    (0..9)
        .map(|_| {
            let digit = ALPHABET[(random % 62) as usize];
            random /= 62;
            char::from(digit)
        })
        .collect()
}

/// Deepest nesting of a call's arguments that is kept: no tool's arguments need more,
/// and the stored call must stay readable (see [`storable`]).
pub const MAX_ARGUMENT_DEPTH: usize = 32;

/// Largest a call's arguments may be, as JSON: they are stored, shown and sent back to
/// the model on every later step.
pub const MAX_ARGUMENT_BYTES: usize = 256 * 1024;

impl ModelReply {
    /// Makes what the model wrote storable and every call one that can be answered: a
    /// model can be made to write a NUL (which Postgres cannot hold, so storing the reply
    /// would fail the run), an id no card could be answered by, or arguments too deep or
    /// too large to keep. Each NUL becomes U+FFFD; arguments too deep or too large are
    /// not kept. A call that held any of these is marked refused (`refused`), as what
    /// would run is not what the model asked for.
    pub fn screen(&mut self) {
        storable::replace_nul_in_text(&mut self.text);
        for call in &mut self.tool_calls {
            let mut held_nul = storable::replace_nul_in_text(&mut call.id);
            held_nul |= storable::replace_nul_in_text(&mut call.name);
            held_nul |= storable::replace_nul_in_map(&mut call.arguments);
            let arguments = Value::Object(std::mem::take(&mut call.arguments));
            // Arguments too deep or too large are never kept, whatever else is wrong.
            let too_deep = storable::depth(&arguments, MAX_ARGUMENT_DEPTH) > MAX_ARGUMENT_DEPTH;
            let too_large = !too_deep
                && serde_json::to_vec(&arguments).map_or(0, |json| json.len()) > MAX_ARGUMENT_BYTES;
            let kept = !too_deep && !too_large;
            let problem = if held_nul {
                Some("it held a NUL (U+0000) character".to_owned())
            } else if let Some(problem) = crate::tools::identifiers::problem(&call.id) {
                Some(format!("its id {problem}"))
            } else if let Some(problem) = crate::tools::identifiers::problem(&call.name) {
                // Logged and shown as the call's name: it must not forge a log line.
                Some(format!("its tool name {problem}"))
            } else if too_deep {
                Some(format!(
                    "its arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels"
                ))
            } else if too_large {
                Some(format!(
                    "its arguments are larger than {} KiB",
                    MAX_ARGUMENT_BYTES / 1024
                ))
            } else {
                None
            };
            if kept && let Value::Object(arguments) = arguments {
                call.arguments = arguments;
            }
            if call.refused.is_none() {
                call.refused = problem;
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("the model endpoint could not be reached: {0}")]
    Unreachable(String),
    #[error("the model endpoint refused the request ({status}): {message}")]
    Refused { status: u16, message: String },
    #[error("the model endpoint sent a malformed response: {0}")]
    Malformed(String),
    #[error("the model endpoint sent nothing for {} s", .0.as_secs())]
    Stalled(std::time::Duration),
    #[error("the model's answer passed {0} bytes")]
    TooLong(usize),
    #[error("the model's answer took longer than {} s in all", .0.as_secs())]
    Overran(std::time::Duration),
}

impl ModelError {
    /// What the user is told: the kind of failure, never the endpoint's own words.
    pub fn public_message(&self) -> String {
        match self {
            ModelError::Unreachable(_) => "the model endpoint could not be reached".to_owned(),
            ModelError::Refused { status, .. } => {
                format!("the model endpoint refused the request ({status})")
            }
            ModelError::Malformed(_) => "the model endpoint sent a malformed response".to_owned(),
            ModelError::Stalled(after) => format!(
                "the model endpoint stopped answering (nothing for {} s)",
                after.as_secs()
            ),
            ModelError::TooLong(limit) => format!(
                "the model's answer was longer than toolgate takes ({} MiB)",
                limit >> 20
            ),
            ModelError::Overran(limit) => format!(
                "the model's answer took longer than toolgate waits for one ({} s)",
                limit.as_secs()
            ),
        }
    }
}

/// Receives the text of a reply as it is written.
pub type DeltaSink<'a> = &'a (dyn Fn(String) + Send + Sync);

/// A chat model. Implementations: the offline built-in model and any
/// OpenAI-compatible chat-completions endpoint.
pub trait ModelProvider: Send + Sync {
    /// `offline` or `openai-compatible`.
    fn kind(&self) -> &'static str;
    fn default_model(&self) -> &str;
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
}

/// What a run knows about itself, handed to middleware.
#[derive(Clone, Debug)]
pub struct RunContext {
    pub user_id: String,
    pub conversation_id: Uuid,
    pub run_id: Uuid,
    pub step: i32,
    /// The user's own words that started the run.
    pub original_user_request: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(text: &str, arguments: Value) -> ModelReply {
        ModelReply {
            text: text.to_owned(),
            tool_calls: vec![
                RequestedCall {
                    id: "clean".into(),
                    name: "lookup".into(),
                    ..RequestedCall::default()
                },
                RequestedCall {
                    id: "dirty".into(),
                    name: "lookup".into(),
                    arguments: arguments.as_object().cloned().unwrap_or_default(),
                    refused: None,
                },
            ],
            model: "m".into(),
        }
    }

    fn refused(reply: &ModelReply) -> Vec<&str> {
        reply
            .tool_calls
            .iter()
            .filter(|call| call.refused.is_some())
            .map(|call| call.id.as_str())
            .collect()
    }

    #[test]
    fn every_nul_is_replaced_and_the_call_that_held_one_is_refused() {
        let mut held = reply(
            "a\0b",
            json!({"list": ["x", {"deep\0key": 1}], "n": 2, "s": "\0"}),
        );
        held.screen();
        assert_eq!(refused(&held), ["dirty"]);
        assert_eq!(held.text, "a\u{fffd}b");
        assert_eq!(
            Value::Object(held.tool_calls[1].arguments.clone()),
            json!({"list": ["x", {"deep\u{fffd}key": 1}], "n": 2, "s": "\u{fffd}"})
        );

        let mut clean = reply("plain", json!({"list": ["x", {"y": [1]}], "n": 2}));
        clean.screen();
        assert!(refused(&clean).is_empty());
        assert_eq!(clean.text, "plain");
        assert_eq!(clean.tool_calls[1].arguments["n"], 2);
    }

    #[test]
    fn an_id_no_card_could_be_answered_by_is_refused() {
        for id in ["call\n1", "call\u{1b}[2J", " ", &"x".repeat(201)] {
            let mut bad = reply("", json!({}));
            bad.tool_calls[1].id = id.to_owned();
            bad.screen();
            assert_eq!(refused(&bad).len(), 1, "{id:?}");
        }
    }

    /// A name is logged and shown as the call's: a line break or a direction override
    /// in it would forge a log line or the timeline's entry.
    #[test]
    fn a_tool_name_that_could_forge_a_log_line_is_refused() {
        for name in [
            "nope\n2026-01-01T00:00:00Z  INFO toolgate: approval granted",
            "calculator\u{202E}lave",
            "calc\u{200B}ulator",
        ] {
            let mut bad = reply("", json!({}));
            bad.tool_calls[1].name = name.to_owned();
            bad.screen();
            assert_eq!(refused(&bad).len(), 1, "{name:?}");
        }
    }

    #[test]
    fn arguments_too_deep_or_too_large_are_not_kept() {
        let mut deep = json!(1);
        for _ in 0..MAX_ARGUMENT_DEPTH {
            deep = json!({ "d": deep });
        }
        let mut at_most = reply("", deep.clone());
        at_most.screen();
        assert!(refused(&at_most).is_empty(), "exactly the deepest kept");

        let mut too_deep = reply("", json!({ "d": deep }));
        too_deep.screen();
        assert_eq!(refused(&too_deep), ["dirty"]);
        assert!(too_deep.tool_calls[1].arguments.is_empty());

        let mut too_large = reply("", json!({"s": "x".repeat(MAX_ARGUMENT_BYTES)}));
        too_large.screen();
        assert_eq!(refused(&too_large), ["dirty"]);
        assert!(too_large.tool_calls[1].arguments.is_empty());
    }

    #[test]
    fn arguments_too_deep_are_not_kept_whatever_else_is_wrong() {
        let deep = (0..MAX_ARGUMENT_DEPTH + 1).fold(json!(1), |inner, _| json!({ "d": inner }));
        let mut both = reply("", deep);
        both.tool_calls[1].id = "call\n1".into();
        both.screen();
        assert_eq!(refused(&both).len(), 1);
        assert!(both.tool_calls[1].arguments.is_empty());
    }

    #[test]
    fn an_id_an_earlier_call_had_is_renewed_and_shared_ids_stay_shared() {
        let mut again = ModelReply {
            tool_calls: ["call_0", "call_0", "call_1", "call_9"]
                .map(|id| RequestedCall {
                    id: id.into(),
                    name: "lookup".into(),
                    ..RequestedCall::default()
                })
                .to_vec(),
            ..ModelReply::default()
        };
        let earlier = ["call_0", "call_1"].into_iter().collect();
        again.renew_reused_ids(&earlier);
        let ids: Vec<&str> = again.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert!(ids.iter().all(|id| !earlier.contains(id)), "{ids:?}");
        assert_eq!(ids[0], ids[1], "still one id given twice");
        assert_ne!(ids[0], ids[2]);
        assert_eq!(ids[3], "call_9");
        assert!(is_fresh(ids[0]) && is_fresh(ids[2]), "{ids:?}");
    }

    fn is_fresh(id: &str) -> bool {
        id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric())
    }

    /// Ids of toolgate's making are ones every provider takes back: nine letters and
    /// digits, each new.
    #[test]
    fn a_fresh_call_id_is_nine_letters_and_digits_and_new() {
        let ids: std::collections::HashSet<String> = (0..10_000).map(|_| fresh_call_id()).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|id| is_fresh(id)), "{ids:?}");
    }

    #[test]
    fn a_reason_the_provider_gave_stands() {
        let mut given = reply("", json!({}));
        given.tool_calls[1].refused = Some("its arguments are not valid JSON".into());
        given.tool_calls[1].id = "call\n1".into();
        given.screen();
        assert_eq!(
            given.tool_calls[1].refused.as_deref(),
            Some("its arguments are not valid JSON")
        );
    }
}
