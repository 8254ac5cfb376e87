//! Chat commands answered by the server without calling the model:
//! `/context pipeline show|add <stage>|remove <stage>|reorder <from> <to>|config <stage> key=value…`,
//! `/pin`, `/unpin`, `/remember <note>` and `/help`.

use sqlx::PgConnection;
use uuid::Uuid;

use super::middleware::{PipelineConfig, STAGES};
use crate::config::SummaryConfig;
use crate::db::{conversations, memory, messages};
use crate::error::Result;

/// The model name stored on command replies, so they stay out of the model's context.
pub const COMMAND_MODEL: &str = "toolgate-command";

const HELP: &str = "Commands:\n\
/context pipeline show — the stages and their settings\n\
/context pipeline add <stage> — add a stage (collect, filter, transform, validate)\n\
/context pipeline remove <stage> — take a stage out\n\
/context pipeline reorder <from> <to> — move a stage (positions or names)\n\
/context pipeline config <stage> key=value … — change a setting, e.g. filter token_budget=4000 (older turns are summarised past it)\n\
/pin — keep your previous message in the assistant's context for good (your first request always is)\n\
/unpin — stop keeping the messages you pinned (your first request stays)\n\
/remember <note> — something the assistant should always know about you";

/// What a command needs to know of the server's settings.
pub struct CommandSettings<'a> {
    pub max_notes: u32,
    /// Set when summarisation is in the middleware chain.
    pub summary: Option<&'a SummaryConfig>,
}

/// Answers a command; `Ok(text)` is the reply, also for a command typed wrongly.
pub async fn run(
    conn: &mut PgConnection,
    user_id: &str,
    conversation_id: Uuid,
    text: &str,
    settings: &CommandSettings<'_>,
) -> Result<String> {
    let max_notes = settings.max_notes;
    let words: Vec<&str> = text.split_whitespace().collect();
    match words.as_slice() {
        ["/help", ..] => Ok(HELP.to_owned()),
        ["/pin", ..] => {
            let Some((previous, head)) = messages::latest_request(conn, conversation_id).await?
            else {
                return Ok("There is no message of yours to pin yet.".to_owned());
            };
            messages::set_pinned(conn, conversation_id, previous, true).await?;
            let shown: String = head.chars().take(80).collect();
            Ok(format!(
                "Pinned: \"{shown}\". It stays in my context word for word, however long the conversation gets."
            ))
        }
        ["/unpin", ..] => Ok(match messages::unpin_all(conn, conversation_id).await? {
            0 => "Nothing was pinned. (Your first request is always kept.)".to_owned(),
            n => format!("Unpinned {n} message(s). Your first request is still kept."),
        }),
        ["/remember"] => Ok("Tell me what to remember: /remember <note>".to_owned()),
        ["/remember", ..] => {
            let note = text.trim().trim_start_matches("/remember").trim();
            if note.chars().count() > 500 {
                return Ok("That note is too long: 500 characters at most.".to_owned());
            }
            if !memory::add_within(conn, user_id, note, max_notes).await? {
                return Ok(format!(
                    "I already keep {max_notes} notes for you, the most I keep; nothing was added."
                ));
            }
            Ok(format!("I will remember: {note}"))
        }
        ["/context", "pipeline", rest @ ..] => {
            let mut config =
                super::middleware::context_pipeline_config(conn, conversation_id).await?;
            let reply = match apply(&mut config, rest) {
                Ok(Some(change)) => {
                    conversations::set_context_pipeline(
                        conn,
                        conversation_id,
                        &serde_json::to_value(&config).unwrap_or_default(),
                    )
                    .await?;
                    format!("{change}\n\n{}", config.describe(settings.summary))
                }
                Ok(None) => config.describe(settings.summary),
                Err(problem) => format!("{problem}\n\n{HELP}"),
            };
            Ok(reply)
        }
        _ => Ok(HELP.to_owned()),
    }
}

fn stage_name(word: &str) -> std::result::Result<String, String> {
    if STAGES.contains(&word) {
        Ok(word.to_owned())
    } else {
        Err(format!(
            "Unknown stage `{word}`; the stages are {}.",
            STAGES.join(", ")
        ))
    }
}

/// Applies one pipeline command; `Ok(None)` for `show`. Settings that do not work
/// together (a ceiling at or below the budget) are refused with the reason.
fn apply(
    config: &mut PipelineConfig,
    words: &[&str],
) -> std::result::Result<Option<String>, String> {
    match words {
        [] | ["show"] => Ok(None),
        ["add", stage] => {
            let stage = stage_name(stage)?;
            if config.stages.contains(&stage) {
                return Err(format!("`{stage}` is already in the pipeline."));
            }
            config.stages.push(stage.clone());
            Ok(Some(format!("Added {stage}.")))
        }
        ["remove", stage] => {
            let stage = stage_name(stage)?;
            let before = config.stages.len();
            config.stages.retain(|s| s != &stage);
            if config.stages.len() == before {
                return Err(format!("`{stage}` is not in the pipeline."));
            }
            Ok(Some(format!("Removed {stage}.")))
        }
        ["reorder", from, to] => {
            let position = |word: &str| -> std::result::Result<usize, String> {
                if let Ok(n) = word.parse::<usize>() {
                    return (1..=config.stages.len())
                        .contains(&n)
                        .then_some(n - 1)
                        .ok_or_else(|| {
                            format!("Position {n} is outside 1–{}.", config.stages.len())
                        });
                }
                config
                    .stages
                    .iter()
                    .position(|s| s == word)
                    .ok_or_else(|| format!("`{word}` is not in the pipeline."))
            };
            let (from, to) = (position(from)?, position(to)?);
            let stage = config.stages.remove(from);
            config.stages.insert(to, stage.clone());
            Ok(Some(format!("Moved {stage} to position {}.", to + 1)))
        }
        ["config", stage, settings @ ..] if !settings.is_empty() => {
            let stage = stage_name(stage)?;
            for setting in settings {
                let (key, value) = setting
                    .split_once('=')
                    .ok_or_else(|| format!("Write settings as key=value, not `{setting}`."))?;
                config.set(&stage, key, value)?;
            }
            config.check()?;
            Ok(Some(format!("Updated {stage}: {}.", settings.join(", "))))
        }
        _ => Err("I did not understand that pipeline command.".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_commands_are_commands() {
        use protocol::chat::{ContentBlock, command_text};
        let text = |t: &str| vec![ContentBlock::Text { text: t.to_owned() }];
        assert!(command_text(&text("/pin")).is_some());
        assert!(command_text(&text("/unpin")).is_some());
        assert!(command_text(&text("/pinned is a word")).is_none());
        assert!(command_text(&text("/etc/nginx.conf fails, fix it")).is_none());
        // With an image, the words are for the model, whatever they are.
        let mut with_image = text("/help with this chart");
        with_image.push(ContentBlock::Image {
            url: "data:image/png;base64,iVBORw0KGgo=".to_owned(),
        });
        assert!(command_text(&with_image).is_none());
    }

    #[test]
    fn pipeline_commands_change_the_config() {
        let mut config = PipelineConfig::default();
        assert_eq!(
            apply(&mut config, &["remove", "transform"])
                .ok()
                .flatten()
                .as_deref(),
            Some("Removed transform.")
        );
        assert!(apply(&mut config, &["remove", "transform"]).is_err());
        assert!(apply(&mut config, &["add", "transform"]).is_ok());
        assert_eq!(config.stages.last().map(String::as_str), Some("transform"));
        assert!(apply(&mut config, &["reorder", "4", "1"]).is_ok());
        assert_eq!(config.stages[0], "transform");
        assert!(apply(&mut config, &["reorder", "validate", "collect"]).is_ok());
        assert!(apply(&mut config, &["config", "filter", "token_budget=500"]).is_ok());
        assert!(config.describe(None).contains("token_budget=500"));
        assert!(apply(&mut config, &["config", "filter", "token_budget"]).is_err());
        assert!(apply(&mut config, &["add", "bogus"]).is_err());
        assert!(
            apply(&mut config, &["add", "enrich"]).is_err(),
            "a retired stage"
        );
        assert!(apply(&mut config, &["explode"]).is_err());
    }

    #[test]
    fn a_budget_below_the_threshold_starts_summarising_there_and_a_low_ceiling_is_refused() {
        let summary = SummaryConfig {
            threshold_tokens: 6000,
            keep_messages: 6,
        };
        let mut config = PipelineConfig::default();
        let shown = config.describe(Some(&summary));
        assert!(shown.contains("Past 6000 tokens"), "{shown}");
        assert!(shown.contains("first request"), "{shown}");
        assert!(!shown.contains("Warning"), "{shown}");

        assert!(apply(&mut config, &["config", "filter", "token_budget=4000"]).is_ok());
        let shown = config.describe(Some(&summary));
        assert!(
            shown.contains("Past 4000 tokens (this conversation's filter.token_budget)"),
            "{shown}"
        );
        assert!(shown.contains("Nothing leaves the context but into a summary"));

        let refused = apply(&mut config, &["config", "validate", "max_tokens=3000"])
            .expect_err("a ceiling under the budget");
        assert!(refused.contains("validate.max_tokens=3000"), "{refused}");
        assert!(
            refused.contains("summarised down to the budget"),
            "{refused}"
        );
    }
}
