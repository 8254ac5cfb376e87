//! The message box, and the title a new conversation takes from its first message.

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::chat::RunStatus;
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::resend::{self, Sending};
use crate::state::AppState;
use crate::stream::{ChatStore, RunView};
use crate::{drafts, focus};

/// A conversation's title: the first line of its first message, shortened.
fn title_from(text: &str) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let mut title: String = line.chars().take(60).collect();
    if line.chars().count() > 60 {
        title = format!("{}…", title.trim_end());
    }
    title
}

/// What is left in a message box holding `now` once `sent` (what it held when Send was
/// pressed) has gone: what was typed after it. `None` when the text was changed in
/// between, which is left as it is.
fn unsent_rest(now: &str, sent: &str) -> Option<String> {
    now.strip_prefix(sent)
        .map(|rest| rest.trim_start().to_owned())
}

/// The message box. Inside a conversation it posts there; on the new-conversation page
/// it first creates the conversation.
#[component]
pub(super) fn Composer(store: Option<ChatStore>) -> impl IntoView {
    let app = expect_context::<AppState>();
    let user = app
        .session
        .with_untracked(|s| s.as_ref().map(|s| s.user_id.clone()))
        .unwrap_or_default();
    let draft_key = drafts::key(&user, store.map(|s| s.id));
    let text = RwSignal::new(drafts::kept(&draft_key));
    // Kept as it is typed; a sign-out on purpose forgets it before the box goes.
    let draft_key = StoredValue::new(draft_key);
    Effect::new(move |_| {
        text.with(|typed| {
            draft_key.with_value(|key| {
                drafts::save(key, typed);
                resend::shown(key, typed);
            })
        })
    });
    let sending = RwSignal::new(false);
    let error = RwSignal::new(None::<String>);
    let input = NodeRef::<leptos::html::Textarea>::new();
    // A conversation created for a message that then failed to send is reused on retry.
    let created = StoredValue::new(None::<Uuid>);
    let busy = move || store.is_some_and(|s| s.is_busy());

    let send = move || {
        let typed = text.get_untracked();
        let content = typed.trim().to_owned();
        if content.is_empty() || sending.get_untracked() || busy() {
            return;
        }
        let Some(token) = app.token() else {
            return;
        };
        sending.set(true);
        error.set(None);
        let key = draft_key.get_value();
        let sending_as = resend::for_text(&key, &content);
        spawn_local(async move {
            let target = match store
                .map(|s| s.id)
                .or(created.get_value())
                .or(sending_as.and_then(|s| s.conversation))
            {
                Some(id) => Ok(id),
                None => api::create_conversation(&token, Some(title_from(&content)))
                    .await
                    .map(|conversation| {
                        let id = conversation.id;
                        created.set_value(Some(id));
                        if let Some(sending_as) = sending_as {
                            let made = Sending {
                                conversation: Some(id),
                                ..sending_as
                            };
                            resend::keep(&key, made, &content);
                        }
                        app.conversations.update(|list| {
                            list.retain(|c| c.id != id);
                            list.insert(0, conversation);
                        });
                        id
                    }),
            };
            let posted = match target {
                Ok(id) => api::post_message(&token, id, &content, sending_as.map(|s| s.key))
                    .await
                    .map(|p| (id, p)),
                Err(err) => Err(err),
            };
            // Sent: its draft goes, even if this box went meanwhile (the user moved to
            // another conversation), so coming back does not offer it again.
            if posted.is_ok()
                && let Some(rest) = unsent_rest(&drafts::kept(&key), &typed)
            {
                drafts::save(&key, &rest);
            }
            if sending.is_disposed() {
                return;
            }
            match posted {
                Ok((id, posted)) => {
                    app.reached();
                    if let Some(rest) = unsent_rest(&text.get_untracked(), &typed) {
                        if let Some(input) = input.get_untracked() {
                            input.set_value(&rest);
                        }
                        text.set(rest);
                    }
                    match store {
                        Some(store) => {
                            // Sent again, the answer is the first send's, whose run the
                            // conversation has already shown (and may have ended).
                            let known = store.messages.with_untracked(|shown| {
                                shown.iter().any(|m| m.id == posted.message.id)
                            });
                            let mut added = vec![posted.message];
                            added.extend(posted.reply);
                            store.add_messages(added);
                            if let Some(run_id) = posted.run_id
                                && !known
                                && store.run.with_untracked(|r| r.as_ref().and_then(|r| r.id))
                                    != Some(run_id)
                            {
                                store.set_run(Some(RunView {
                                    id: Some(run_id),
                                    status: RunStatus::Running,
                                    model: None,
                                    error: None,
                                }));
                            }
                        }
                        None => {
                            app.select(Some(id));
                            request_animation_frame(|| {
                                focus::move_to("composer-input");
                            });
                        }
                    }
                }
                Err(err) if err.code() == Some("run_active") => error.set(Some(
                    "The agent is still working on your last message (or waiting for an answer above). Send this when it is done.".into(),
                )),
                Err(err) => {
                    if !app.report(&err) {
                        error.set(Some(err.message()));
                    } else if matches!(err, ApiError::Network) {
                        error.set(Some("Not sent: the server can't be reached. Your text is still here; press Send to try again.".into()));
                    }
                }
            }
            sending.set(false);
        });
    };

    let busy_hint = move || {
        let run = store?.run.get()?;
        match run.status {
            RunStatus::Running => Some("The agent is working…"),
            RunStatus::WaitingForInput => Some("Answer the request above to let the agent go on."),
            _ => None,
        }
    };

    view! {
        <form
            class="composer"
            data-testid="composer"
            on:submit=move |ev| {
                ev.prevent_default();
                send();
            }
        >
            <label for="composer-input" class="visually-hidden">"Message"</label>
            <textarea
                id="composer-input"
                data-testid="composer-input"
                node_ref=input
                rows="2"
                placeholder="Ask something…"
                aria-describedby="composer-keys composer-status"
                prop:value=text.get_untracked()
                on:input=move |ev| text.set(event_target_value(&ev))
                on:keydown=move |ev| {
                    if ev.key() == "Enter" && !ev.shift_key() && !ev.is_composing() {
                        ev.prevent_default();
                        send();
                    }
                }
            ></textarea>
            <button
                type="submit"
                class="primary"
                data-testid="send"
                disabled=move || sending.get() || busy() || text.with(|t| t.trim().is_empty())
            >
                {move || if sending.get() { "Sending…" } else { "Send" }}
            </button>
            <p id="composer-status" class="composer-status" aria-live="polite">
                <span class="field-error" data-testid="composer-error">{move || error.get()}</span>
                <span class="hint">{busy_hint}</span>
                <span id="composer-keys" class="hint keys">"Enter sends · Shift+Enter for a new line"</span>
            </p>
        </form>
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_typed_while_sending_stays_and_nothing_else() {
        assert_eq!(unsent_rest("hello", "hello").as_deref(), Some(""));
        assert_eq!(
            unsent_rest("hello\nand more", "hello").as_deref(),
            Some("and more")
        );
        assert_eq!(unsent_rest("hullo", "hello"), None);
    }

    #[test]
    fn a_title_is_the_first_line_shortened() {
        assert_eq!(
            title_from("\n  Get my P&L report for Q1 2025\nthanks"),
            "Get my P&L report for Q1 2025"
        );
        let long = "word ".repeat(30);
        let title = title_from(&long);
        assert!(
            title.ends_with('…') && title.chars().count() <= 61,
            "{title}"
        );
    }
}
