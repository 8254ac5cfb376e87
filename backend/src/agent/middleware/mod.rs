//! The middleware chain around the model and the tools. Each built-in is its own file
//! and can be left out or reordered with `TOOLGATE_MIDDLEWARE`.
//!
//! Hooks: `before_model` (may rewrite the request), `around_model`, `after_model`, and
//! `around_tool` for each tool call.

mod context_pipeline;
mod model_routing;
mod processed_images;
mod summarisation;
mod superseded_calls;
mod system_sections;
mod tool_call_log;
mod user_context;

pub use context_pipeline::{
    MAX_RETRIEVAL_LIMIT, PipelineConfig, STAGES, load as context_pipeline_config,
};

use futures::future::BoxFuture;
use protocol::api::ToolOutcome;

use super::model::{DeltaSink, ModelError, ModelProvider, ModelReply, ModelRequest, RunContext};
use super::step_inputs::{StepInputs, StepOutputs};
use crate::config::{LlmConfig, SummaryConfig};
use crate::error::{Error, Result};
use crate::tools::executor::{Executor, ToolCall};
use crate::tools::registry::ToolRegistry;

/// What a middleware can reach: the run, what the run loop loaded for the step, a place
/// for what the run loop should write, the tool registry, its settings, and the model
/// (for a summary). No database, vault or HTTP client: middleware transform.
pub struct Ctx<'a> {
    pub run: &'a RunContext,
    pub inputs: &'a StepInputs,
    pub outputs: &'a StepOutputs,
    pub tools: &'a ToolRegistry,
    pub summary: &'a SummaryConfig,
    pub llm: &'a LlmConfig,
    pub provider: &'a dyn ModelProvider,
}

/// Names a tool's key argument, for the history's keyed artefacts.
fn key_of<'a>(ctx: &'a Ctx<'a>) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        ctx.tools
            .get(name)
            .and_then(|tool| tool.key_argument.clone())
    }
}

pub type ModelNext<'a> =
    Box<dyn FnOnce(ModelRequest) -> BoxFuture<'a, Result<ModelReply, ModelError>> + Send + 'a>;
pub type ToolNext<'a> = Box<dyn FnOnce(ToolCall) -> BoxFuture<'a, Result<ToolOutcome>> + Send + 'a>;

pub trait Middleware: Send + Sync {
    fn name(&self) -> &'static str;

    fn before_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        _request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn around_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        request: ModelRequest,
        next: ModelNext<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        next(request)
    }

    fn after_model<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        _reply: &'a mut ModelReply,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    fn around_tool<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        call: ToolCall,
        next: ToolNext<'a>,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        next(call)
    }
}

/// The built-ins by name, in the default order: the history is cleaned (superseded
/// calls, answered images) before it is summarised, and summarised down to the context
/// pipeline's budget before the pipeline runs.
pub const DEFAULT_ORDER: &[&str] = &[
    "user_context",
    "system_sections",
    "superseded_calls",
    "processed_images",
    "summarisation",
    "context_pipeline",
    "model_routing",
    "tool_call_log",
];

/// Pairs that must keep this order when both are in the chain, with the reason.
const MUST_PRECEDE: &[(&str, &str, &str)] = &[
    (
        "superseded_calls",
        "summarisation",
        "summaries are written from the cleaned history",
    ),
    (
        "processed_images",
        "summarisation",
        "summaries are written from the cleaned history",
    ),
    (
        "summarisation",
        "context_pipeline",
        "it keeps the pipeline's budget by summarising, so content leaves the context only into a summary",
    ),
];

/// Middleware that needs another in the chain, with the reason.
const NEEDS: &[(&str, &str, &str)] = &[(
    "context_pipeline",
    "summarisation",
    "the pipeline's budget is kept by summarising older exchanges, never by dropping them",
)];

/// Refuses an order in which a middleware would see what an earlier one should have
/// cleaned, or a chain whose budget nothing would keep.
pub fn check_order(names: &[String]) -> anyhow::Result<()> {
    let position = |name: &str| names.iter().position(|n| n == name);
    for (needing, needed, why) in NEEDS {
        if position(needing).is_some() && position(needed).is_none() {
            anyhow::bail!(
                "TOOLGATE_MIDDLEWARE has `{needing}` without `{needed}`; add `{needed}` before it: {why}"
            );
        }
    }
    for (first, then, why) in MUST_PRECEDE {
        if let (Some(a), Some(b)) = (position(first), position(then))
            && a > b
        {
            anyhow::bail!(
                "TOOLGATE_MIDDLEWARE puts `{then}` before `{first}`; `{first}` must come first: {why}"
            );
        }
    }
    Ok(())
}

fn built_in(name: &str) -> Option<Box<dyn Middleware>> {
    Some(match name {
        "user_context" => Box::new(user_context::UserContext),
        "system_sections" => Box::new(system_sections::SystemSections),
        "summarisation" => Box::new(summarisation::Summarisation),
        "superseded_calls" => Box::new(superseded_calls::SupersededCalls),
        "processed_images" => Box::new(processed_images::ProcessedImages),
        "context_pipeline" => Box::new(context_pipeline::ContextPipeline),
        "model_routing" => Box::new(model_routing::ModelRouting),
        "tool_call_log" => Box::new(tool_call_log::ToolCallLog),
        _ => return None,
    })
}

pub struct Chain {
    middleware: Vec<Box<dyn Middleware>>,
}

impl Chain {
    /// Builds the chain in the configured order; an unknown name is an error at start-up.
    pub fn from_names(names: &[String]) -> anyhow::Result<Self> {
        check_order(names)?;
        let mut middleware = Vec::new();
        for name in names {
            let found = built_in(name).ok_or_else(|| {
                anyhow::anyhow!(
                    "TOOLGATE_MIDDLEWARE names unknown middleware `{name}`; known: {}",
                    DEFAULT_ORDER.join(", ")
                )
            })?;
            middleware.push(found);
        }
        Ok(Chain { middleware })
    }

    /// Whether a middleware of the chain reads what retrieval finds (the context
    /// pipeline's collect stage), so a step's load searches for it.
    pub fn retrieves(&self) -> bool {
        self.middleware
            .iter()
            .any(|middleware| middleware.name() == "context_pipeline")
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.middleware.iter().map(|m| m.name()).collect()
    }

    pub async fn before_model(&self, ctx: &Ctx<'_>, request: &mut ModelRequest) -> Result<()> {
        for middleware in &self.middleware {
            middleware.before_model(ctx, request).await?;
        }
        Ok(())
    }

    pub async fn after_model(&self, ctx: &Ctx<'_>, reply: &mut ModelReply) -> Result<()> {
        for middleware in self.middleware.iter().rev() {
            middleware.after_model(ctx, reply).await?;
        }
        Ok(())
    }

    pub fn call_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: ModelRequest,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        self.call_model_from(0, ctx, request, deltas)
    }

    fn call_model_from<'a>(
        &'a self,
        index: usize,
        ctx: &'a Ctx<'a>,
        request: ModelRequest,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        match self.middleware.get(index) {
            None => Box::pin(async move { ctx.provider.complete(&request, deltas).await }),
            Some(middleware) => {
                let next: ModelNext<'a> =
                    Box::new(move |request| self.call_model_from(index + 1, ctx, request, deltas));
                middleware.around_model(ctx, request, next)
            }
        }
    }

    /// Runs a tool call through the chain's `around_tool` hooks to `executor`.
    pub fn call_tool<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        executor: &'a Executor,
        call: ToolCall,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        self.call_tool_from(0, ctx, executor, call)
    }

    fn call_tool_from<'a>(
        &'a self,
        index: usize,
        ctx: &'a Ctx<'a>,
        executor: &'a Executor,
        call: ToolCall,
    ) -> BoxFuture<'a, Result<ToolOutcome>> {
        match self.middleware.get(index) {
            None => Box::pin(async move {
                match crate::tools::executor::execute(executor, &ctx.run.user_id, call.clone())
                    .await
                {
                    Err(Error::NotFound("tool")) => Ok(ToolOutcome::failed(format!(
                        "there is no tool named `{}`",
                        call.tool_name
                    ))),
                    // The model's mistake, for it to correct: not the run's failure.
                    Err(Error::Conflict {
                        code: "duplicate_tool_call_id",
                        message,
                    }) => Ok(ToolOutcome::failed(format!(
                        "{message}; give each call an id of its own"
                    ))),
                    other => other,
                }
            }),
            Some(middleware) => {
                let next: ToolNext<'a> =
                    Box::new(move |call| self.call_tool_from(index + 1, ctx, executor, call));
                middleware.around_tool(ctx, call, next)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use protocol::chat::{ContentBlock, Message, Role};
    use uuid::Uuid;

    use super::*;
    use crate::agent::model::{ChatMessage, ModelReply, Purpose, RunContext};
    use crate::agent::step_inputs::StoredSummary;

    /// A model that keeps what it was asked and answers every request with `SUMMARY`,
    /// or with its `reply` (`Err`: the endpoint cannot be reached).
    #[derive(Default)]
    struct RecordingModel {
        asked: Mutex<Vec<ModelRequest>>,
        reply: Option<std::result::Result<String, ()>>,
    }

    impl RecordingModel {
        fn answering(reply: std::result::Result<String, ()>) -> Self {
            RecordingModel {
                reply: Some(reply),
                ..RecordingModel::default()
            }
        }
    }

    impl ModelProvider for RecordingModel {
        fn kind(&self) -> &'static str {
            "recording"
        }

        fn default_model(&self) -> &str {
            "m"
        }

        fn complete<'a>(
            &'a self,
            request: &'a ModelRequest,
            _deltas: DeltaSink<'a>,
        ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
            self.asked.lock().expect("lock").push(request.clone());
            let reply = self.reply.clone().unwrap_or_else(|| Ok("SUMMARY".into()));
            Box::pin(async move {
                let text = reply.map_err(|()| ModelError::Unreachable("down".into()))?;
                Ok(ModelReply {
                    text,
                    tool_calls: vec![],
                    model: "m".into(),
                })
            })
        }
    }

    fn stored(seq: i32, role: Role, text: &str) -> Arc<Message> {
        Arc::new(Message {
            id: Uuid::new_v4(),
            seq,
            role,
            content: vec![ContentBlock::Text { text: text.into() }],
            model: None,
            run_id: None,
            pinned: false,
            created_at: chrono::Utc::now(),
        })
    }

    fn run() -> RunContext {
        RunContext {
            user_id: "u".into(),
            conversation_id: Uuid::new_v4(),
            run_id: Uuid::new_v4(),
            step: 0,
            original_user_request: "invoices for acme".into(),
        }
    }

    fn llm() -> LlmConfig {
        LlmConfig {
            base_url: None,
            api_key: None,
            model: None,
            vision_model: None,
            long_context_model: None,
            long_context_threshold: 12_000,
            quiet_limit: std::time::Duration::from_secs(300),
            answer_limit: std::time::Duration::from_secs(3600),
        }
    }

    fn request_of(history: &[Arc<Message>]) -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            system: vec!["base".into()],
            messages: history
                .iter()
                .map(|m| ChatMessage {
                    role: m.role,
                    content: m.content.clone(),
                    seq: Some(m.seq),
                    pinned: m.seq == 1 || m.pinned,
                })
                .collect(),
            tools: vec![],
            purpose: Purpose::Chat,
        }
    }

    /// Runs the `before_model` hooks of a chain of built-ins on `history` with `inputs`,
    /// without a server.
    async fn before_model(
        chain: &[&str],
        inputs: &StepInputs,
        summary: &SummaryConfig,
        model: &RecordingModel,
    ) -> (ModelRequest, StepOutputs) {
        let chain = Chain::from_names(&names(chain)).expect("built-ins in order");
        let (run, tools, llm, outputs) = (
            run(),
            ToolRegistry::default(),
            llm(),
            StepOutputs::default(),
        );
        let ctx = Ctx {
            run: &run,
            inputs,
            outputs: &outputs,
            tools: &tools,
            summary,
            llm: &llm,
            provider: model,
        };
        let mut request = request_of(&inputs.history);
        chain
            .before_model(&ctx, &mut request)
            .await
            .expect("before_model");
        (request, outputs)
    }

    fn summary_at(threshold_tokens: usize) -> SummaryConfig {
        SummaryConfig {
            threshold_tokens,
            keep_messages: 2,
        }
    }

    #[tokio::test]
    async fn system_sections_come_from_the_loaded_notes_and_skills() {
        let inputs = StepInputs {
            history: vec![stored(1, Role::User, "hi")],
            memory_notes: vec!["I prefer metric units".into()],
            skills: vec![crate::agent::skills::Skill {
                name: "invoices".into(),
                description: "how to read an invoice".into(),
                path: "invoices.md".into(),
            }],
            ..StepInputs::default()
        };
        let model = RecordingModel::default();
        let (request, _) =
            before_model(&["system_sections"], &inputs, &summary_at(6000), &model).await;
        let system = request.system.join("");
        assert!(system.contains("- I prefer metric units"), "{system}");
        assert!(
            system.contains("- invoices: how to read an invoice"),
            "{system}"
        );
    }

    #[tokio::test]
    async fn the_pipeline_adds_what_the_run_loop_retrieved() {
        let inputs = StepInputs {
            history: vec![stored(1, Role::User, "invoices for acme")],
            retrieved: vec!["acme pays in euros".into()],
            ..StepInputs::default()
        };
        let model = RecordingModel::default();
        let (request, _) = before_model(
            &["summarisation", "context_pipeline"],
            &inputs,
            &summary_at(6000),
            &model,
        )
        .await;
        // Quoted right before the current turn, never in the system prompt.
        assert!(!request.system.join("").contains("acme pays"));
        let [notes, current] = request.messages.as_slice() else {
            panic!("{:?}", request.messages);
        };
        assert_eq!((notes.role, notes.seq), (Role::System, None));
        assert!(notes.plain_text().contains("- acme pays in euros"));
        assert_eq!(current.plain_text(), "invoices for acme");
    }

    #[tokio::test]
    async fn a_new_summary_is_handed_back_and_a_stored_one_is_used_without_the_model() {
        let filler = "words about the weather and other things ".repeat(30);
        let mut history = vec![stored(1, Role::User, "the task")];
        for n in 0..6 {
            history.push(stored(2 + 2 * n, Role::Assistant, &filler));
            history.push(stored(3 + 2 * n, Role::User, &format!("question {n}")));
        }
        let inputs = StepInputs {
            history,
            ..StepInputs::default()
        };
        let model = RecordingModel::default();
        let (request, outputs) =
            before_model(&["summarisation"], &inputs, &summary_at(300), &model).await;
        let written = outputs.take_summary().expect("a summary to store");
        assert_eq!(written.text, "SUMMARY");
        assert_eq!(model.asked.lock().expect("lock").len(), 1);
        assert!(format!("{:?}", request.messages).contains("SUMMARY"));
        assert!(
            !format!("{:?}", model.asked.lock().expect("lock")[0].messages).contains("the task"),
            "the pinned request is not summarised"
        );

        let again = StepInputs {
            summary: Some(written),
            ..inputs
        };
        let model = RecordingModel::default();
        let (request, outputs) =
            before_model(&["summarisation"], &again, &summary_at(300), &model).await;
        assert!(outputs.take_summary().is_none());
        assert!(
            model.asked.lock().expect("lock").is_empty(),
            "no model call"
        );
        assert!(format!("{:?}", request.messages).contains("SUMMARY"));
        assert!(format!("{:?}", request.messages).contains("the task"));
    }

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    #[test]
    fn the_default_order_is_accepted() {
        assert!(Chain::from_names(&names(DEFAULT_ORDER)).is_ok());
    }

    #[test]
    fn a_misordered_chain_is_refused_with_the_reason() {
        let Err(err) = Chain::from_names(&names(&["summarisation", "superseded_calls"])) else {
            panic!("summarising before cleaning was accepted");
        };
        assert!(err.to_string().contains("cleaned history"), "{err}");
        let Err(err) = Chain::from_names(&names(&["context_pipeline", "summarisation"])) else {
            panic!("trimming before summarising was accepted");
        };
        assert!(err.to_string().contains("only into a summary"), "{err}");
        let Err(err) = Chain::from_names(&names(&["system_sections", "context_pipeline"])) else {
            panic!("a budget without summarisation was accepted");
        };
        assert!(
            err.to_string()
                .contains("has `context_pipeline` without `summarisation`"),
            "{err}"
        );
        assert!(Chain::from_names(&names(&["summarisation"])).is_ok());
    }

    /// The task, then six long answers each followed by a short question (some 1,500
    /// tokens), every message's text its own.
    fn long_chat() -> Vec<Arc<Message>> {
        let filler = "words about the weather and other things ".repeat(30);
        let mut history = vec![stored(1, Role::User, "the task")];
        for n in 0..6 {
            history.push(stored(
                2 + 2 * n,
                Role::Assistant,
                &format!("answer {n}: {filler}"),
            ));
            history.push(stored(3 + 2 * n, Role::User, &format!("question {n}")));
        }
        history
    }

    #[tokio::test]
    async fn past_the_pipelines_lower_budget_older_turns_go_into_a_summary_not_away() {
        let history = long_chat();
        let mut pipeline = PipelineConfig::default();
        pipeline
            .set("filter", "token_budget", "600")
            .expect("valid");
        let mut inputs = StepInputs {
            history,
            pipeline,
            ..StepInputs::default()
        };
        let full = request_of(&inputs.history);
        assert!(tokens_of(&full) > 600 && tokens_of(&full) < 6000);
        let chain = ["summarisation", "context_pipeline"];

        // The budget is where summarising starts, and what leaves the request is what
        // the summary was written from.
        let model = RecordingModel::default();
        let (request, outputs) = before_model(&chain, &inputs, &summary_at(6000), &model).await;
        let written = outputs.take_summary().expect("a summary past the budget");
        assert!(tokens_of(&request) <= 600, "{} tokens", tokens_of(&request));
        let asked = format!("{:?}", model.asked.lock().expect("lock")[0].messages);
        let kept = format!("{:?}", request.messages);
        for message in &full.messages {
            // The pipeline's transform stage trims the text it keeps.
            let text = message.plain_text().trim().to_owned();
            assert!(
                kept.contains(&text) || asked.contains(&text),
                "`{}` left the context without a summary",
                text.chars().take(20).collect::<String>()
            );
        }
        assert_eq!(written.through_seq, 12);
        assert_eq!(written.kept_out, vec![1, 2], "the pinned exchange");
        assert!(kept.contains("the task") && kept.contains("question 5"));

        // Without the filter in the pipeline, the server's threshold is where it starts.
        inputs.pipeline.stages.retain(|stage| stage != "filter");
        let model = RecordingModel::default();
        let (request, outputs) = before_model(&chain, &inputs, &summary_at(6000), &model).await;
        assert!(outputs.take_summary().is_none());
        assert!(model.asked.lock().expect("lock").is_empty());
        assert_eq!(request.messages.len(), full.messages.len());
    }

    #[tokio::test]
    async fn a_failed_empty_or_oversized_summary_loses_nothing_and_is_capped() {
        let history = long_chat();
        let inputs = StepInputs {
            history,
            ..StepInputs::default()
        };
        let full = request_of(&inputs.history);
        for reply in [Err(()), Ok(String::new()), Ok("   ".to_owned())] {
            let model = RecordingModel::answering(reply);
            let (request, outputs) =
                before_model(&["summarisation"], &inputs, &summary_at(600), &model).await;
            assert_eq!(model.asked.lock().expect("lock").len(), 1, "it asked");
            assert!(outputs.take_summary().is_none());
            assert_eq!(request.messages, full.messages, "nothing went");
        }
        let model = RecordingModel::answering(Ok("SUMMARY ".repeat(5_000)));
        let (request, outputs) =
            before_model(&["summarisation"], &inputs, &summary_at(600), &model).await;
        let written = outputs.take_summary().expect("a summary");
        assert!(
            written.text.chars().count() < 1_000,
            "{}",
            written.text.len()
        );
        assert!(tokens_of(&request) < 1_000, "{}", tokens_of(&request));
    }

    #[tokio::test]
    async fn a_second_summary_carries_the_first_and_what_it_left_out() {
        let filler = "words about the weather and other things ".repeat(30);
        let spec = "the spec: every report in euros, due on Fridays";
        let mut history = vec![
            stored(1, Role::User, "the task"),
            stored(2, Role::Assistant, "on it"),
            // Pinned when the first summary was written; unpinned since.
            stored(3, Role::User, spec),
            stored(4, Role::Assistant, "noted"),
        ];
        for n in 0..6 {
            history.push(stored(5 + 2 * n, Role::User, &format!("question {n}")));
            history.push(stored(
                6 + 2 * n,
                Role::Assistant,
                &format!("answer {n}: {filler}"),
            ));
        }
        history.push(stored(17, Role::User, "and now?"));
        let inputs = StepInputs {
            history,
            summary: Some(StoredSummary {
                through_seq: 8,
                text: "FIRST SUMMARY".into(),
                kept_out: vec![1, 2, 3, 4],
            }),
            ..StepInputs::default()
        };
        let model = RecordingModel::default();
        let (request, outputs) =
            before_model(&["summarisation"], &inputs, &summary_at(600), &model).await;
        let written = outputs.take_summary().expect("a second summary");
        let asked = format!("{:?}", model.asked.lock().expect("lock")[0].messages);
        assert!(asked.contains("FIRST SUMMARY"), "the first is carried over");
        assert!(asked.contains(spec), "what the first left out goes in");
        assert!(written.through_seq >= 8, "{}", written.through_seq);
        assert_eq!(written.kept_out, vec![1, 2], "only the task stays");
        let kept = format!("{:?}", request.messages);
        assert!(!kept.contains("FIRST SUMMARY") && kept.contains("SUMMARY"));
        assert!(kept.contains("the task") && kept.contains("and now?"));
    }

    #[tokio::test]
    async fn a_first_summary_in_the_kept_tail_still_goes_into_the_second() {
        // The first summary sits after a pinned exchange short enough to be kept in
        // the tail; the bulk before it (an unpinned spec) is what gets summarised.
        let spec = format!(
            "the spec: {}",
            "words about the weather and other things ".repeat(90)
        );
        let mut pinned = stored(5, Role::User, "a pinned note");
        Arc::make_mut(&mut pinned).pinned = true;
        let inputs = StepInputs {
            history: vec![
                stored(1, Role::User, "the task"),
                stored(2, Role::Assistant, "on it"),
                stored(3, Role::User, &spec),
                stored(4, Role::Assistant, "noted"),
                pinned,
                stored(6, Role::Assistant, "kept"),
                stored(7, Role::User, "and now?"),
            ],
            summary: Some(StoredSummary {
                through_seq: 6,
                text: "FIRST SUMMARY".into(),
                kept_out: vec![1, 2, 3, 4, 5, 6],
            }),
            ..StepInputs::default()
        };
        let settings = SummaryConfig {
            threshold_tokens: 600,
            keep_messages: 6,
        };
        let model = RecordingModel::default();
        let (request, outputs) = before_model(&["summarisation"], &inputs, &settings, &model).await;
        let written = outputs.take_summary().expect("a second summary");
        let asked = format!("{:?}", model.asked.lock().expect("lock")[0].messages);
        assert!(asked.contains("FIRST SUMMARY"), "the first was left behind");
        assert!(asked.contains("the spec"));
        assert_eq!(written.through_seq, 6);
        let kept = format!("{:?}", request.messages);
        assert!(kept.contains("a pinned note"), "{kept}");
        assert!(!kept.contains("the spec"), "{kept}");
    }

    fn tokens_of(request: &ModelRequest) -> usize {
        crate::agent::tokens::count_request(request)
    }
}
