//! Appends the user's memory notes, the available skills and the tool instructions to
//! the system message, each as its own block. The caller's blocks are never changed.

use futures::future::BoxFuture;

use super::{Ctx, Middleware};
use crate::agent::model::ModelRequest;
use crate::error::Result;

pub struct SystemSections;

pub const TOOL_INSTRUCTIONS: &str = "Tool instructions: when a tool answers requires_user_input, the user is shown a form for the missing values; do not ask for them in your reply, and do not guess them. Values the user gave are remembered as the tool says.";

impl Middleware for SystemSections {
    fn name(&self) -> &'static str {
        "system_sections"
    }

    fn before_model<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        request: &'a mut ModelRequest,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let notes = &ctx.inputs.memory_notes;
            if !notes.is_empty() {
                let listed: Vec<String> = notes.iter().map(|n| format!("- {n}")).collect();
                request.append_system_section(&format!(
                    "What the user asked you to remember:\n{}",
                    listed.join("\n")
                ));
            }
            let skills = &ctx.inputs.skills;
            if !skills.is_empty() {
                let listed: Vec<String> = skills
                    .iter()
                    .map(|s| format!("- {}: {}", s.name, s.description))
                    .collect();
                request.append_system_section(&format!(
                    "Skills you can read with the read_skill tool when one fits the task:\n{}",
                    listed.join("\n")
                ));
            }
            if !request.tools.is_empty() {
                request.append_system_section(TOOL_INSTRUCTIONS);
            }
            Ok(())
        })
    }
}
