//! The tool user input card: what a tool needs from the user, asked field by field and
//! checked as they type with the same rules (and words) as the server. This file holds
//! the card (status, actions, outcome); `form` the values and rows, `controls` one
//! input per field type, `link` the URL-mode step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::{InputRequest, RequestStatus};
use protocol::fields::{FieldErrors, is_empty, validate_inputs, with_cleared};
use protocol::unseen;
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::state::AppState;
use crate::stream::ChatStore;
use crate::{drafts, focus, ordered, value_text};

mod controls;
mod form;
mod link;

use form::{CardForm, FieldRow, initial_values, kept_typed, remember_note, typed};
use link::LinkStep;

#[component]
pub fn InputCard(request_id: Uuid) -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let app = expect_context::<AppState>();
    let (request, status) = store.watch_request(request_id, app.now_ms);
    let Some(first) = request.get_untracked() else {
        return ().into_any();
    };
    let fields = Arc::new(first.fields.clone());
    let offered = initial_values(&fields);
    // What the user typed and did not send is kept across a reload (never a secret).
    let typing_key = app
        .session
        .with_untracked(|s| s.as_ref().map(|s| drafts::card_key(&s.user_id, request_id)));
    let kept = typing_key
        .as_deref()
        .map(|key| kept_typed(key, &fields))
        .unwrap_or_default();
    let mut start = offered.clone();
    start.extend(kept.clone());
    let values = RwSignal::new(start);
    let check_fields = fields.clone();
    let check = Memo::new(move |_| values.with(|values| validate_inputs(&check_fields, values)));
    let sending = RwSignal::new(false);
    let card_error = RwSignal::new(None::<String>);
    let form = CardForm {
        request_id,
        fields: StoredValue::new(fields.clone()),
        values,
        touched: RwSignal::new(kept.keys().cloned().collect::<BTreeSet<_>>()),
        server_errors: RwSignal::new(BTreeMap::new()),
        card_error,
        check,
        save_for: first.save_for,
        locked: Signal::derive(move || sending.get() || status.get() != RequestStatus::Pending),
    };
    if let Some(key) = typing_key {
        let fields = fields.clone();
        Effect::new(move |_| {
            // Sent, declined or cancelled, nothing typed is wanted again; expired or
            // no longer needed, it is listed on the card ([`Unsent`]).
            match status.get() {
                RequestStatus::Pending | RequestStatus::Expired | RequestStatus::Abandoned => {
                    let typed = values.with(|values| typed(&fields, values, &offered));
                    let text = if typed.is_empty() {
                        String::new()
                    } else {
                        value_text::compact(&serde_json::Value::Object(typed))
                    };
                    drafts::save(&key, &text);
                }
                _ => drafts::forget(&key),
            }
        });
    }
    let tool_call_id = first.tool_call_id.clone();
    let heading_id = format!("card-{}", request_id.simple());

    let submit = {
        let tool_call_id = tool_call_id.clone();
        move || {
            if sending.get_untracked() || status.get_untracked() != RequestStatus::Pending {
                return;
            }
            let accepted = match check.get_untracked() {
                Ok(accepted) => accepted,
                Err(errors) => {
                    form.touched.update(|t| t.extend(errors.keys().cloned()));
                    card_error.set(Some("Some fields need attention.".into()));
                    if let Some(name) = form.first_to_fill(Some(&errors)) {
                        form.focus_field(&name);
                    }
                    return;
                }
            };
            // What the user cleared is sent as cleared, not left out: left out, a field
            // would take its default (the value the card was pre-filled with) again.
            let fields = form.fields.get_value();
            let accepted = values.with_untracked(|values| with_cleared(&fields, values, &accepted));
            let Some(token) = app.token() else {
                return;
            };
            let tool_call_id = tool_call_id.clone();
            sending.set(true);
            card_error.set(None);
            spawn_local(async move {
                let answer = api::submit_response(&token, &tool_call_id, accepted).await;
                if sending.is_disposed() {
                    return;
                }
                match answer {
                    Ok(done) => {
                        app.reached();
                        store.upsert_request(done.request);
                        // The call may now wait on the user's approval: show that card
                        // without waiting for the stream.
                        if let Some(next) = done.tool_result.as_ref().and_then(|o| o.waiting_on()) {
                            store.upsert_request(next.clone());
                        }
                        store.saved_version.update(|n| *n += 1);
                        // The focus stays where it is when a card that followed this
                        // one (an approval) has already taken it.
                        let card_id = format!("card-{}", request_id.simple());
                        let moved_on = focus::active().is_some_and(|el| {
                            el.closest(&format!("#{card_id}")).ok().flatten().is_none()
                        });
                        if !moved_on {
                            focus::move_to(&card_id);
                        }
                    }
                    Err(err) => {
                        submit_failed(&err, form, card_error, app, store);
                    }
                }
                sending.set(false);
            });
        }
    };
    // Cancel and decline end the card the same way; only the request sent differs.
    let end_card = {
        let tool_call_id = tool_call_id.clone();
        move |declining: bool| {
            if sending.get_untracked() || status.get_untracked() != RequestStatus::Pending {
                return;
            }
            let Some(token) = app.token() else {
                return;
            };
            let tool_call_id = tool_call_id.clone();
            sending.set(true);
            card_error.set(None);
            spawn_local(async move {
                let answer = if declining {
                    api::decline_request(&token, &tool_call_id, None).await
                } else {
                    api::cancel_request(&token, &tool_call_id).await
                };
                if sending.is_disposed() {
                    return;
                }
                match answer {
                    Ok(ended) => {
                        app.reached();
                        store.upsert_request(ended);
                        focus::move_to(&format!("card-{}", request_id.simple()));
                    }
                    Err(err) => {
                        if !app.report(&err) {
                            card_error.set(Some(err.message()));
                        }
                        if err.status() == Some(409) {
                            stream_refresh(store, app);
                        }
                    }
                }
                sending.set(false);
            });
        }
    };
    let cancel = {
        let end_card = end_card.clone();
        move || end_card(false)
    };
    let decline = move || end_card(true);

    // When a card appears, the focus moves to it unless the user is busy elsewhere
    // (typing, or in another card). From the message box a message was just sent from,
    // to the card itself: keys meant for a next message must not fill in, pick from or
    // send a form a tool asks. From nowhere in particular, to the first empty field.
    if first.status == RequestStatus::Pending {
        let card_id = format!("card-{}", request_id.simple());
        let call = first.tool_call_id.clone();
        request_animation_frame(move || {
            let elsewhere = focus::active()
                .and_then(|el| el.closest(".input-card").ok().flatten())
                .is_some();
            if elsewhere || focus::busy_elsewhere(&card_id, &call) {
                return;
            }
            if focus::in_text_entry() {
                focus::move_to(&card_id);
            } else if let Some(name) = form.first_to_fill(None) {
                form.focus_field(&name);
            }
        });
    }

    let is_link = first.is_link();
    let asking_server = first.elicitation.as_ref().map(|e| e.server.clone());
    let from_api = first.from_api;
    let link = first
        .elicitation
        .as_ref()
        .and_then(|e| e.url.clone())
        .unwrap_or_default();
    let reason = first.reason.clone();
    let tool_name = first.tool_name.clone();
    let tool_attr = tool_name.clone();
    let title_id = format!("{heading_id}-title");
    let choices_id = format!("{heading_id}-choices");
    let labelled_by = title_id.clone();
    let body = move || match status.get() {
        RequestStatus::Pending if is_link => {
            let done = submit.clone();
            let cancel = cancel.clone();
            let decline = decline.clone();
            view! {
                <LinkStep
                    url=link.clone()
                    sending
                    card_error
                    on_done=Callback::new(move |()| done())
                    on_decline=Callback::new(move |()| decline())
                    on_cancel=Callback::new(move |()| cancel())
                />
            }
            .into_any()
        }
        RequestStatus::Completed if is_link => view! {
            <p class="card-outcome card-done" data-testid="card-completed">
                <span class="done-mark" aria-hidden="true">"✓ "</span>
                "Done. The server was told you finished on its page."
            </p>
        }
        .into_any(),
        RequestStatus::Pending => {
            let submit = submit.clone();
            // Esc also closes an autocomplete list, a date picker or an input method's
            // choices, and a cancel is final: it takes Esc twice in a row.
            let escape_armed = RwSignal::new(false);
            let disarm = move || {
                if escape_armed.get_untracked() {
                    escape_armed.set(false);
                }
            };
            let on_key = {
                let submit = submit.clone();
                let cancel = cancel.clone();
                move |ev: leptos::ev::KeyboardEvent| {
                    let key = ev.key();
                    if key != "Escape" {
                        disarm();
                    }
                    match key.as_str() {
                        // A held key repeats: that is not a second press.
                        "Escape" if ev.is_composing() || ev.repeat() => {}
                        "Escape" => {
                            ev.prevent_default();
                            if escape_armed.get_untracked() {
                                cancel();
                            } else {
                                escape_armed.set(true);
                            }
                        }
                        "Enter" if !ev.is_composing() => {
                            let in_textarea = ev
                                .target()
                                .and_then(|t| {
                                    use wasm_bindgen::JsCast;
                                    t.dyn_into::<web_sys::Element>().ok()
                                })
                                .is_some_and(|el| el.tag_name().eq_ignore_ascii_case("textarea"));
                            let is_button = ev
                                .target()
                                .and_then(|t| {
                                    use wasm_bindgen::JsCast;
                                    t.dyn_into::<web_sys::Element>().ok()
                                })
                                .is_some_and(|el| el.tag_name().eq_ignore_ascii_case("button"));
                            if is_button {
                                return;
                            }
                            if !in_textarea || ev.ctrl_key() || ev.meta_key() {
                                ev.prevent_default();
                                submit();
                            }
                        }
                        _ => {}
                    }
                }
            };
            let cancel = cancel.clone();
            let decline = decline.clone();
            let choices_id = choices_id.clone();
            view! {
                <form
                    class="card-form"
                    novalidate
                    on:submit=move |ev| {
                        ev.prevent_default();
                        submit();
                    }
                    on:keydown=on_key
                    // Moving to another field, or clicking, starts over: the next Esc
                    // closes what that field opened.
                    on:focusin=move |_| disarm()
                    on:pointerdown=move |_| disarm()
                >
                    <div class="card-fields">
                        {form
                            .fields
                            .get_value()
                            .iter()
                            .cloned()
                            .map(|field| view! { <FieldRow field form/> })
                            .collect_view()}
                    </div>
                    <p class="card-error" role="alert" data-testid="card-error">
                        {move || card_error.get()}
                    </p>
                    <div class="card-actions">
                        <button
                            type="submit"
                            class="primary"
                            data-testid="card-submit"
                            disabled=move || sending.get() || check.with(Result::is_err)
                        >
                            {move || if sending.get() { "Sending…" } else { "Submit" }}
                        </button>
                        <button
                            type="button"
                            data-testid="card-decline"
                            title="Tell the assistant you won't provide this"
                            aria-describedby=choices_id.clone()
                            disabled=move || sending.get()
                            on:click=move |_| decline()
                        >
                            "Decline"
                        </button>
                        <button
                            type="button"
                            data-testid="card-cancel"
                            title="Dismiss without answering"
                            aria-describedby=choices_id.clone()
                            disabled=move || sending.get()
                            on:click=move |_| cancel()
                        >
                            "Cancel"
                        </button>
                        <span class="hint keys" role="status" data-testid="card-keys">
                            {move || {
                                if escape_armed.get() {
                                    "Press Esc again to cancel this request"
                                } else {
                                    "Enter submits · Esc twice cancels"
                                }
                            }}
                        </span>
                    </div>
                    <p class="hint card-choices" id=choices_id data-testid="card-choices">
                        "Decline tells the assistant you won't provide this, so it stops asking. \
                         Cancel just dismisses the card."
                    </p>
                </form>
            }
            .into_any()
        }
        RequestStatus::Completed => view! { <Completed request/> }.into_any(),
        RequestStatus::Cancelled => view! {
            <p class="card-outcome" data-testid="card-cancelled">
                <span aria-hidden="true">"✕ "</span>
                "Cancelled. The tool was not given these values."
            </p>
        }
        .into_any(),
        RequestStatus::Declined => {
            let message = request.with(|r| r.as_ref().and_then(|r| r.message.clone()));
            view! {
                <p class="card-outcome" data-testid="card-declined">
                    <span aria-hidden="true">"✕ "</span>
                    "Declined. The assistant was told you won't provide this."
                </p>
                {message
                    .map(|message| {
                        view! {
                            <p class="card-message" data-testid="card-message">
                                "Your words: \u{201c}"{message}"\u{201d}"
                            </p>
                        }
                    })}
            }
            .into_any()
        }
        RequestStatus::Expired => view! {
            <p class="card-outcome" data-testid="card-expired">
                <span aria-hidden="true">"⌛ "</span>
                "This request expired before it was answered. Ask again to get a new one."
            </p>
            <Unsent form/>
        }
        .into_any(),
        RequestStatus::Abandoned => view! {
            <p class="card-outcome" data-testid="card-abandoned">
                <span aria-hidden="true">"– "</span>
                "No longer needed: the assistant stopped before this was answered."
            </p>
            <Unsent form/>
        }
        .into_any(),
        // Only approval requests end these ways; shown plainly should one ever come here.
        other @ (RequestStatus::Approved | RequestStatus::Rejected) => view! {
            <p class="card-outcome" data-testid="card-settled">
                {format!("This request was {}.", other.as_str())}
            </p>
        }
        .into_any(),
    };

    view! {
        <section
            class="input-card"
            id=heading_id
            tabindex="-1"
            data-testid="input-card"
            data-request-id=request_id.to_string()
            data-tool-call-id=tool_call_id
            data-tool=tool_attr
            data-status=move || status.get().as_str()
            aria-labelledby=labelled_by
        >
            <header class="card-head">
                <h2 class="card-title" id=title_id>
                    <span class="card-kicker">
                        {move || match status.get() {
                            RequestStatus::Pending => "Input needed · ",
                            RequestStatus::Completed => "Input sent · ",
                            RequestStatus::Cancelled => "Input cancelled · ",
                            RequestStatus::Declined => "Input declined · ",
                            RequestStatus::Expired => "Input expired · ",
                            RequestStatus::Abandoned => "Input no longer needed · ",
                            RequestStatus::Approved => "Approved · ",
                            RequestStatus::Rejected => "Rejected · ",
                        }}
                    </span>
                    <code>{unseen::written_out(&tool_name)}</code>
                </h2>
                <p class="card-reason" data-testid="card-reason">{reason}</p>
                {asking_server
                    .map(|server| {
                        view! {
                            <p class="card-server" data-testid="card-server">
                                "Asked by the MCP server "
                                <code>{server}</code>
                                " while its tool runs"
                            </p>
                        }
                    })}
                {from_api
                    .then(|| {
                        view! {
                            <p class="card-server" data-testid="card-from-api">
                                "Asked by a program through toolgate's API, not by a tool of this chat: "
                                "check what it asks for before you answer."
                            </p>
                        }
                    })}
            </header>
            {body}
        </section>
    }
    .into_any()
}

fn stream_refresh(store: ChatStore, app: AppState) {
    crate::stream::refresh_pending(store, app);
}

fn submit_failed(
    err: &ApiError,
    form: CardForm,
    card_error: RwSignal<Option<String>>,
    app: AppState,
    store: ChatStore,
) {
    if app.report(err) {
        if matches!(err, ApiError::Network) {
            card_error.set(Some(
                "Not sent: the server can't be reached. Your answers are still here; press Submit to try again.".into(),
            ));
        }
        return;
    }
    match err.status() {
        Some(422) => {
            let fields = err.fields();
            let names: Vec<String> = form
                .fields
                .get_value()
                .iter()
                .map(|f| f.name.clone())
                .collect();
            let (known, unknown): (FieldErrors, FieldErrors) = fields
                .into_iter()
                .partition(|(name, _)| names.contains(name));
            let mut message = err.message();
            if !unknown.is_empty() {
                let extra: Vec<String> = unknown.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                message = format!("{message} ({})", extra.join("; "));
            }
            card_error.set(Some(message));
            let first = form.first_to_fill(Some(&known));
            form.server_errors.set(known);
            if let Some(name) = first {
                form.focus_field(&name);
            }
        }
        Some(409) => {
            card_error.set(Some(format!(
                "{} It may have been answered, cancelled or expired elsewhere.",
                err.message()
            )));
            stream_refresh(store, app);
        }
        _ => card_error.set(Some(err.message())),
    }
}

/// What the user had typed into a card that ended unanswered (its time ran out, the
/// assistant stopped), so that none of it is lost: a new card can take it again. Only
/// what they changed (not what the card offered) in fields still shown; secrets are
/// never shown back.
#[component]
fn Unsent(form: CardForm) -> impl IntoView {
    let fields = form.fields.get_value();
    let changed = form
        .values
        .with_untracked(|values| typed(&fields, values, &initial_values(&fields)));
    let rows: Vec<(String, String)> = fields
        .iter()
        .filter(|field| form.visible(field))
        .filter_map(|field| {
            let value = changed.get(&field.name).filter(|value| !is_empty(value))?;
            Some((field.label().to_owned(), value_text::chosen(field, value)))
        })
        .collect();
    (!rows.is_empty()).then(|| {
        view! {
            <div class="card-unsent" data-testid="card-unsent">
                <p class="hint">"What you had typed, not sent:"</p>
                <dl class="sent-values">
                    {rows
                        .into_iter()
                        .map(|(label, value)| {
                            view! {
                                <div class="sent-value">
                                    <dt>{label}</dt>
                                    <dd data-testid="unsent-value">{value}</dd>
                                </div>
                            }
                        })
                        .collect_view()}
                </dl>
            </div>
        }
    })
}

/// The compact card after a submit: what was sent, secrets never shown back.
#[component]
fn Completed(request: Memo<Option<InputRequest>>) -> impl IntoView {
    let Some(request) = request.get_untracked() else {
        return ().into_any();
    };
    let inputs = request.user_inputs.clone().unwrap_or_default();
    let rows: Vec<(String, String, bool)> = request
        .fields
        .iter()
        .filter_map(|field| {
            // A cleared field is sent as `null`: nothing to show.
            let value = inputs.get(&field.name).filter(|value| !value.is_null())?;
            // As the card showed it: hidden and reordering characters written out.
            let shown = if field.is_secret() {
                "hidden".to_owned()
            } else {
                value_text::chosen(field, value)
            };
            Some((field.label().to_owned(), shown, field.is_secret()))
        })
        .collect();
    let scopes = ordered::set_of(
        request
            .fields
            .iter()
            .filter(|f| inputs.get(&f.name).is_some_and(|value| !value.is_null()))
            .filter_map(|f| remember_note(f.save_for.unwrap_or(request.save_for))),
    );
    view! {
        <div class="card-outcome card-done" data-testid="card-completed">
            <p>
                <span class="done-mark" aria-hidden="true">"✓ "</span>
                "Sent. The tool goes on with these values."
            </p>
            <dl class="sent-values">
                {rows
                    .into_iter()
                    .map(|(label, value, secret)| {
                        view! {
                            <div class="sent-value">
                                <dt>{label}</dt>
                                <dd class:secret=secret data-testid="sent-value">{value}</dd>
                            </div>
                        }
                    })
                    .collect_view()}
            </dl>
            {scopes
                .into_iter()
                .map(|note| view! { <p class="remember" data-testid="remember-note">{note}</p> })
                .collect_view()}
        </div>
    }
    .into_any()
}
