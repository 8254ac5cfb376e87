//! The approval card: a tool call that waits for the user's yes. It shows the exact
//! arguments that will run and offers the decisions the tool allows: approve as shown,
//! edit the arguments and run those, or reject with an optional word for the assistant.

mod arguments;

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::{InputRequest, RequestStatus};
use protocol::approval::Decision;
use protocol::unseen;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::state::AppState;
use crate::stream::{ChatStore, ToolState};
use crate::{clock, focus, ordered};

use arguments::{
    ArgInput, arg_input_id, argument_key, arguments_of, describe, draft_of, label_of, parse_draft,
    shown,
};

/// How long after the choices appear a click on Approve is taken for one aimed at
/// what was there before (the second click of a double-click, or an impatient second
/// click on the Submit that made this card): no one has read the arguments yet. As
/// browsers hold back their own permission prompts' buttons for a moment. The button
/// looks so for as long (`first-look` in style.css, its duration set from this).
const FIRST_LOOK_MS: u32 = 1000;

/// What the pending card is showing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Choose,
    Edit,
    Reject,
}

fn outcome_text(request: &InputRequest, status: RequestStatus) -> &'static str {
    match status {
        RequestStatus::Approved if request.decision == Some(Decision::Edit) => {
            "Approved with your changes; the tool ran."
        }
        RequestStatus::Approved => "Approved; the tool ran.",
        RequestStatus::Rejected => "Rejected. The assistant was told.",
        RequestStatus::Cancelled => "Cancelled. The tool did not run.",
        RequestStatus::Expired => {
            "This request expired before anyone decided. The tool did not run; ask again to get a new one."
        }
        RequestStatus::Abandoned => {
            "No longer needed: the assistant stopped before a decision. The tool did not run."
        }
        RequestStatus::Declined => "Declined. The tool did not run.",
        RequestStatus::Completed => "Answered.",
        RequestStatus::Pending => "",
    }
}

fn kicker(status: RequestStatus) -> &'static str {
    match status {
        RequestStatus::Pending => "Approval needed · ",
        RequestStatus::Approved => "Approved · ",
        RequestStatus::Rejected => "Rejected · ",
        RequestStatus::Completed => "Answered · ",
        RequestStatus::Declined => "Declined · ",
        RequestStatus::Cancelled => "Cancelled · ",
        RequestStatus::Expired => "Expired · ",
        RequestStatus::Abandoned => "No longer needed · ",
    }
}

#[component]
pub fn ApprovalCard(request_id: Uuid) -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let app = expect_context::<AppState>();
    let (request, status) = store.watch_request(request_id, app.now_ms);
    let Some(first) = request.get_untracked() else {
        return ().into_any();
    };

    let simple = request_id.simple().to_string();
    let card_id = format!("card-{simple}");
    let title_id = format!("{card_id}-title");
    let approve_id = format!("{card_id}-approve");
    let edit_id = format!("{card_id}-edit");
    let reject_id = format!("{card_id}-reject");
    let reject_message_id = format!("{card_id}-reject-message");
    let keys_id = format!("{card_id}-keys");

    let allowed = first.allowed_decisions.clone();
    let can_edit = allowed.contains(&Decision::Edit);
    let can_reject = allowed.contains(&Decision::Reject);
    // Approve is the card's point; a request that names no decisions still offers it.
    let can_approve = allowed.is_empty() || allowed.contains(&Decision::Approve);

    let args = StoredValue::new(describe(&first));
    let names: Vec<String> = args.with_value(|a| a.iter().map(|a| a.name.clone()).collect());
    let names = StoredValue::new(names);
    let drafts = RwSignal::new(ordered::map_of(
        arguments_of(&first)
            .into_iter()
            .map(|(name, value)| (name, draft_of(&value))),
    ));
    let parse_errors = Memo::new(move |_| {
        drafts.with(|drafts| {
            args.with_value(|args| {
                ordered::map_of(args.iter().filter_map(|arg| {
                    let text = drafts.get(&arg.name)?;
                    parse_draft(&arg.editor, text)
                        .err()
                        .map(|e| (arg.name.clone(), e))
                }))
            })
        })
    });
    let server_errors = RwSignal::new(BTreeMap::<String, String>::new());
    let card_error = RwSignal::new(None::<String>);
    let mode = RwSignal::new(Mode::Choose);
    let sending = RwSignal::new(None::<Decision>);
    let reject_message = RwSignal::new(String::new());
    let tool_call_id = StoredValue::new(first.tool_call_id.clone());

    // The server may change the arguments under the card (it answers 409
    // `arguments_changed`, then the card is refreshed): start editing from the new ones.
    Effect::new(move |previous: Option<Value>| {
        let current = request.with(|r| {
            r.as_ref()
                .map(|r| r.tool_args.clone())
                .unwrap_or(Value::Null)
        });
        if previous.is_some_and(|previous| previous != current)
            && let Some(now) = request.get_untracked()
            && now.status == RequestStatus::Pending
        {
            let described = describe(&now);
            names.set_value(described.iter().map(|a| a.name.clone()).collect());
            args.set_value(described);
            drafts.set(ordered::map_of(
                arguments_of(&now)
                    .into_iter()
                    .map(|(name, value)| (name, draft_of(&value))),
            ));
            server_errors.set(BTreeMap::new());
            if mode.get_untracked() == Mode::Edit {
                mode.set(Mode::Choose);
            }
        }
        current
    });

    let focus = move |id: String| {
        request_animation_frame(move || {
            focus::move_to(&id);
        });
    };
    let focus_card = move || focus(format!("card-{}", request_id.simple()));
    let focus_arg = move |name: &str| {
        if let Some(index) = names.with_value(|n| n.iter().position(|n| n == name)) {
            focus(arg_input_id(request_id, index));
        }
    };

    // A refused decision: messages about one argument go under its input, the rest on
    // the card.
    let failed = move |err: ApiError| {
        if app.report(&err) {
            if matches!(err, ApiError::Network) {
                card_error.set(Some(
                    "Not sent: the server can't be reached. Nothing was decided; try again.".into(),
                ));
            }
            return;
        }
        match (err.status(), err.code()) {
            (Some(422), _) => {
                let mut known = BTreeMap::new();
                let mut other = Vec::new();
                names.with_value(|names| {
                    for (key, message) in err.fields() {
                        match argument_key(&key, names) {
                            Some(name) => {
                                known.insert(name.clone(), message);
                            }
                            None if key == "arguments" || key == "decision" => {
                                other.push(message);
                            }
                            None => other.push(format!("{key}: {message}")),
                        }
                    }
                });
                let mut message = err.message();
                if !other.is_empty() {
                    message = format!("{message} ({})", other.join("; "));
                }
                card_error.set(Some(message));
                let first_bad = names
                    .with_value(|names| names.iter().find(|n| known.contains_key(*n)).cloned());
                if !known.is_empty() && can_edit {
                    server_errors.set(known);
                    if mode.get_untracked() != Mode::Edit {
                        mode.set(Mode::Edit);
                    }
                    if let Some(name) = first_bad {
                        focus_arg(&name);
                    }
                } else if !known.is_empty() {
                    let listed: Vec<String> =
                        known.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    card_error.set(Some(format!("{} ({})", err.message(), listed.join("; "))));
                }
            }
            (Some(409), Some("arguments_changed")) => {
                card_error.set(Some(
                    "The arguments changed since this card was shown; it now shows the new ones. \
                     Check them and decide again."
                        .into(),
                ));
                crate::stream::refresh_pending(store, app);
            }
            (Some(409), _) => {
                card_error.set(Some(format!(
                    "{} It may have been decided, cancelled or expired elsewhere.",
                    err.message()
                )));
                crate::stream::refresh_pending(store, app);
            }
            _ => card_error.set(Some(err.message())),
        }
    };

    let decide = move |decision: Decision,
                       arguments: Option<Map<String, Value>>,
                       message: Option<String>| {
        if sending.get_untracked().is_some() || status.get_untracked() != RequestStatus::Pending {
            return;
        }
        let Some(token) = app.token() else {
            return;
        };
        let digest =
            request.with_untracked(|r| r.as_ref().and_then(|r| r.arguments_digest.clone()));
        let tool_call_id = tool_call_id.get_value();
        sending.set(Some(decision));
        card_error.set(None);
        spawn_local(async move {
            let answer =
                api::submit_decision(&token, &tool_call_id, decision, arguments, message, digest)
                    .await;
            if sending.is_disposed() {
                return;
            }
            match answer {
                Ok(done) => {
                    app.reached();
                    server_errors.set(BTreeMap::new());
                    if let Some(outcome) = &done.tool_result {
                        if let Some(next) = outcome.waiting_on() {
                            store.upsert_request(next.clone());
                        }
                        let state = ToolState::from_outcome(outcome);
                        store.tools.update(|tools| {
                            tools.insert(tool_call_id.clone(), state);
                        });
                    }
                    store.upsert_request(done.request);
                    focus_card();
                }
                Err(err) => failed(err),
            }
            sending.set(None);
        });
    };

    let approve = move || decide(Decision::Approve, None, None);
    let run_edited = move || {
        if let Some(name) = parse_errors.with_untracked(|e| e.keys().next().cloned()) {
            card_error.set(Some("Some arguments need attention.".into()));
            focus_arg(&name);
            return;
        }
        let original = request.with_untracked(|r| match r.as_ref().map(|r| &r.tool_args) {
            Some(Value::Object(map)) => map.clone(),
            _ => Map::new(),
        });
        let mut edited = original.clone();
        drafts.with_untracked(|drafts| {
            args.with_value(|args| {
                for arg in args {
                    if let Some(text) = drafts.get(&arg.name)
                        && let Ok(value) = parse_draft(&arg.editor, text)
                    {
                        edited.insert(arg.name.clone(), value);
                    }
                }
            })
        });
        if edited == original {
            // Nothing changed: that is a plain approval of what was shown.
            decide(Decision::Approve, None, None);
        } else {
            decide(Decision::Edit, Some(edited), None);
        }
    };
    let reject = move || {
        let message = reject_message.get_untracked().trim().to_owned();
        decide(
            Decision::Reject,
            None,
            (!message.is_empty()).then_some(message),
        );
    };

    let open_edit = move || {
        card_error.set(None);
        mode.set(Mode::Edit);
        if names.with_value(Vec::is_empty) {
            focus(format!("card-{}-run", request_id.simple()));
        } else {
            focus(arg_input_id(request_id, 0));
        }
    };
    let open_reject = {
        let reject_message_id = reject_message_id.clone();
        move || {
            card_error.set(None);
            mode.set(Mode::Reject);
            focus(reject_message_id.clone());
        }
    };
    // Back to the choice, the focus on the button that left it.
    let back = move || {
        let from = mode.get_untracked();
        card_error.set(None);
        mode.set(Mode::Choose);
        let button = match from {
            Mode::Reject => "reject",
            _ => "edit",
        };
        focus(format!("card-{}-{button}", request_id.simple()));
    };

    // When a card appears, the card itself gets the focus (Tab then reaches Approve),
    // unless the user is busy elsewhere. Never the Approve button: an Enter or a Space
    // meant for something else (the rest of a message, scrolling the page) would approve
    // a call whose arguments the user has not read.
    if first.status == RequestStatus::Pending {
        let card_id = card_id.clone();
        let call = first.tool_call_id.clone();
        request_animation_frame(move || {
            if !focus::busy_elsewhere(&card_id, &call) {
                focus::move_to(&card_id);
            }
        });
    }

    let busy = move || sending.get().is_some();
    let choose_view = {
        let keys_id = keys_id.clone();
        move || {
            // A pointer's click (on Submit of the card before, say, a double-click's
            // second or an impatient one of its own) that lands on Approve where it has
            // just appeared approves nothing: the user has not seen these arguments.
            // Only in the first moment; keys' clicks (`detail` 0) count at once, since
            // the focus never starts on Approve.
            let shown_at = clock::now_ms();
            let approve_clicked = move |ev: leptos::ev::MouseEvent| {
                if ev.detail() >= 1 && clock::now_ms() - shown_at < f64::from(FIRST_LOOK_MS) {
                    return;
                }
                approve();
            };
            let approve_id = approve_id.clone();
            let edit_id = edit_id.clone();
            let reject_id = reject_id.clone();
            let open_reject = open_reject.clone();
            let keys_id = keys_id.clone();
            view! {
                <div class="card-actions" role="group" aria-label="Your decision">
                    {can_approve
                        .then(|| {
                            view! {
                                <button
                                    type="button"
                                    class="primary first-look"
                                    style=format!("animation-duration: {FIRST_LOOK_MS}ms")
                                    id=approve_id
                                    data-testid="approval-approve"
                                    aria-describedby=keys_id.clone()
                                    disabled=busy
                                    on:click=approve_clicked
                                >
                                    {move || {
                                        if sending.get() == Some(Decision::Approve) {
                                            "Approving…"
                                        } else {
                                            "Approve"
                                        }
                                    }}
                                </button>
                            }
                        })}
                    {can_edit
                        .then(|| {
                            view! {
                                <button
                                    type="button"
                                    id=edit_id
                                    data-testid="approval-edit"
                                    title="Change the arguments, then run with yours"
                                    disabled=busy
                                    on:click=move |_| open_edit()
                                >
                                    "Edit"
                                </button>
                            }
                        })}
                    {can_reject
                        .then(|| {
                            view! {
                                <button
                                    type="button"
                                    id=reject_id
                                    data-testid="approval-reject"
                                    title="Don't run it; the assistant is told"
                                    disabled=busy
                                    on:click=move |_| open_reject()
                                >
                                    "Reject"
                                </button>
                            }
                        })}
                    <span class="hint keys" id=keys_id>
                        "Approve runs the tool with exactly these arguments"
                    </span>
                </div>
            }
        }
    };

    let edit_view = move || {
        let on_key = form_keys(back, run_edited);
        let rows = args
            .get_value()
            .into_iter()
            .enumerate()
            .map(|(index, arg)| {
                view! { <ArgInput index arg request_id drafts parse_errors server_errors sending/> }
            })
            .collect_view();
        view! {
            <form
                class="card-form"
                novalidate
                data-testid="approval-edit-form"
                on:submit=move |ev| {
                    ev.prevent_default();
                    run_edited();
                }
                on:keydown=on_key
            >
                <div class="card-fields">{rows}</div>
                <FormActions
                    send_class="primary"
                    send_label="Run with these arguments"
                    send_testid="approval-edit-submit"
                    send_id=format!("card-{}-run", request_id.simple())
                    back_testid="approval-edit-back"
                    busy=Signal::derive(busy)
                    back=Callback::new(move |()| back())
                />
            </form>
        }
    };

    let reject_view = move || {
        let on_key = form_keys(back, reject);
        let message_id = reject_message_id.clone();
        view! {
            <form
                class="card-form"
                novalidate
                data-testid="approval-reject-form"
                on:submit=move |ev| {
                    ev.prevent_default();
                    reject();
                }
                on:keydown=on_key
            >
                <div class="field">
                    <label class="field-label" for=message_id.clone()>
                        "Tell the assistant why (optional)"
                    </label>
                    <textarea
                        id=message_id
                        class="field-input"
                        data-testid="approval-reject-message"
                        rows="2"
                        prop:value=reject_message.get_untracked()
                        disabled=busy
                        on:input=move |ev| reject_message.set(event_target_value(&ev))
                    ></textarea>
                </div>
                <FormActions
                    send_class="danger"
                    send_label="Reject the call"
                    send_testid="approval-reject-confirm"
                    back_testid="approval-reject-back"
                    busy=Signal::derive(busy)
                    back=Callback::new(move |()| back())
                />
            </form>
        }
    };

    let body = move || match status.get() {
        RequestStatus::Pending => {
            let actions = match mode.get() {
                Mode::Choose => choose_view().into_any(),
                Mode::Edit => edit_view().into_any(),
                Mode::Reject => reject_view().into_any(),
            };
            view! {
                {actions}
                <p class="card-error" role="alert" data-testid="card-error">
                    {move || card_error.get()}
                </p>
            }
            .into_any()
        }
        settled => {
            let (text, message) = request.with(|r| match r {
                Some(r) => (outcome_text(r, settled), r.message.clone()),
                None => (outcome_text_missing(settled), None),
            });
            let mark = match settled {
                RequestStatus::Approved => "✓ ",
                RequestStatus::Expired => "⌛ ",
                _ => "✕ ",
            };
            view! {
                <p class="card-outcome" data-testid="approval-outcome">
                    <span
                        class:done-mark=settled == RequestStatus::Approved
                        aria-hidden="true"
                    >
                        {mark}
                    </span>
                    {text}
                </p>
                {message
                    .filter(|_| settled == RequestStatus::Rejected)
                    .map(|message| {
                        view! {
                            <p class="card-message" data-testid="approval-message">
                                "Your words: \u{201c}"{message}"\u{201d}"
                            </p>
                        }
                    })}
            }
            .into_any()
        }
    };

    // The arguments as they stand: after an edit, the ones that ran.
    let shown_args = move || {
        request.with(|r| {
            r.as_ref()
                .map(|r| {
                    arguments_of(r)
                        .into_iter()
                        .map(|(name, value)| (label_of(&r.fields, &name), name, value))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    };
    let args_view = move || {
        let rows = shown_args();
        if rows.is_empty() {
            return view! { <p class="hint" data-testid="approval-no-args">"No arguments."</p> }
                .into_any();
        }
        view! {
            <dl class="approval-args" data-testid="approval-args">
                {rows
                    .into_iter()
                    .map(|(label, name, value)| {
                        let (text, structured) = shown(&value);
                        let title = name.clone();
                        view! {
                            <div class="approval-arg" data-arg=name>
                                <dt title=title>{label}</dt>
                                <dd class:structured=structured data-testid="approval-arg-value">
                                    {if structured {
                                        view! { <pre>{text}</pre> }.into_any()
                                    } else {
                                        view! { <span class="arg-text">{text}</span> }.into_any()
                                    }}
                                </dd>
                            </div>
                        }
                    })
                    .collect_view()}
            </dl>
        }
        .into_any()
    };

    let reason = first.reason.clone();
    // Toolgate's words, apart from the reason (the operator's): what the tool's server
    // may run instead of what the card shows.
    let note = first.note.clone().map(|note| {
        view! {
            <p class="field-warning card-note" data-testid="card-note">
                "Note from toolgate: "{note}
            </p>
        }
    });
    let tool_name = first.tool_name.clone();
    let tool_attr = tool_name.clone();
    let labelled_by = title_id.clone();
    view! {
        <section
            class="input-card approval-card"
            id=card_id
            tabindex="-1"
            data-testid="approval-card"
            data-request-id=request_id.to_string()
            data-tool-call-id=tool_call_id.get_value()
            data-tool=tool_attr
            data-status=move || status.get().as_str()
            data-mode=move || match mode.get() {
                Mode::Choose => "choose",
                Mode::Edit => "edit",
                Mode::Reject => "reject",
            }
            aria-labelledby=labelled_by
        >
            <header class="card-head">
                <h2 class="card-title" id=title_id>
                    <span class="card-kicker">{move || kicker(status.get())}</span>
                    <code>{unseen::written_out(&tool_name)}</code>
                </h2>
                <p class="card-reason" data-testid="card-reason">{reason}</p>
                {note}
            </header>
            <Show when=move || mode.get() != Mode::Edit || status.get() != RequestStatus::Pending>
                {args_view}
            </Show>
            {body}
        </section>
    }
    .into_any()
}

/// The edit and reject forms' keys: Esc goes back to the choices, Ctrl+Enter (⌘+Enter)
/// sends.
fn form_keys(
    back: impl Fn() + Copy + 'static,
    send: impl Fn() + Copy + 'static,
) -> impl Fn(leptos::ev::KeyboardEvent) + Copy + 'static {
    move |ev| match ev.key().as_str() {
        "Escape" => {
            ev.prevent_default();
            back();
        }
        "Enter" if !ev.is_composing() && (ev.ctrl_key() || ev.meta_key()) => {
            ev.prevent_default();
            send();
        }
        _ => {}
    }
}

/// Under the edit and reject forms: the send button, named for what it does, and Back.
#[component]
fn FormActions(
    send_class: &'static str,
    send_label: &'static str,
    send_testid: &'static str,
    #[prop(optional, into)] send_id: Option<String>,
    back_testid: &'static str,
    busy: Signal<bool>,
    back: Callback<()>,
) -> impl IntoView {
    view! {
        <div class="card-actions">
            <button
                type="submit"
                class=send_class
                id=send_id
                data-testid=send_testid
                disabled=busy
            >
                {move || if busy.get() { "Sending…" } else { send_label }}
            </button>
            <button
                type="button"
                data-testid=back_testid
                disabled=busy
                on:click=move |_| back.run(())
            >
                "Back"
            </button>
            <span class="hint keys">"Esc goes back"</span>
        </div>
    }
}

fn outcome_text_missing(status: RequestStatus) -> &'static str {
    match status {
        RequestStatus::Approved => "Approved; the tool ran.",
        RequestStatus::Rejected => "Rejected. The assistant was told.",
        _ => "This request is no longer waiting.",
    }
}
