//! Model providers behind [`ModelProvider`](super::model::ModelProvider).

pub mod offline;
pub mod openai;
mod sse;

use std::sync::Arc;

use super::model::ModelProvider;
use crate::config::LlmConfig;

/// The OpenAI-compatible endpoint when one is configured, the offline model otherwise.
pub fn from_config(config: &LlmConfig) -> anyhow::Result<Arc<dyn ModelProvider>> {
    Ok(match &config.base_url {
        Some(base_url) => Arc::new(openai::OpenAiCompatible::new(
            base_url,
            config.api_key.as_deref(),
            config.model.as_deref().unwrap_or("gpt-4o-mini"),
            config.quiet_limit,
            config.answer_limit,
        )?),
        None => Arc::new(offline::OfflineModel),
    })
}
