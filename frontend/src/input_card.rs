//! The tool user input card: what a tool needs from the user, asked field by field and
//! checked as they type with the same rules (and words) as the server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::{InputRequest, RequestStatus};
use protocol::fields::{FieldErrors, is_empty, validate_inputs, with_defaults};
use protocol::{FieldSpec, FieldType, SaveFor, is_visible};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::app::AppState;
use crate::stream::ChatStore;
use crate::util;

/// The words under a field that will be remembered.
fn remember_note(scope: SaveFor) -> Option<&'static str> {
    match scope {
        SaveFor::Call => None,
        SaveFor::Session => Some("Remembered for this conversation"),
        SaveFor::User => Some("Remembered for all your conversations"),
    }
}

fn input_id(request: Uuid, field: &str) -> String {
    format!("f-{}-{field}", request.simple())
}

/// What a card starts with: defaults, and `false` for a checkbox nobody has ticked.
fn initial_values(fields: &[FieldSpec]) -> Map<String, Value> {
    let mut values = with_defaults(fields, &Map::new());
    for field in fields {
        if field.kind == FieldType::Boolean && !values.contains_key(&field.name) {
            values.insert(field.name.clone(), Value::Bool(false));
        }
    }
    values
}

/// Everything a field row needs, shared by the rows of one card.
#[derive(Clone, Copy)]
struct CardForm {
    request_id: Uuid,
    fields: StoredValue<Arc<Vec<FieldSpec>>>,
    values: RwSignal<Map<String, Value>>,
    touched: RwSignal<BTreeSet<String>>,
    server_errors: RwSignal<FieldErrors>,
    card_error: RwSignal<Option<String>>,
    check: Memo<Result<Map<String, Value>, FieldErrors>>,
    save_for: SaveFor,
    locked: Signal<bool>,
}

impl CardForm {
    fn set(&self, name: &str, value: Value) {
        self.values.update(|values| {
            values.insert(name.to_owned(), value);
        });
        if !self.touched.with_untracked(|t| t.contains(name)) {
            self.touched.update(|t| {
                t.insert(name.to_owned());
            });
        }
        if self.card_error.with_untracked(Option::is_some) {
            self.card_error.set(None);
        }
        if self.server_errors.with_untracked(|e| e.contains_key(name)) {
            self.server_errors.update(|e| {
                e.remove(name);
            });
        }
    }

    /// The message to show on a field: the server's, or ours once the user has been there.
    fn error(&self, name: &str) -> Option<String> {
        if let Some(message) = self.server_errors.with(|e| e.get(name).cloned()) {
            return Some(message);
        }
        if !self.touched.with(|t| t.contains(name)) {
            return None;
        }
        self.check.with(|check| match check {
            Err(errors) => errors.get(name).cloned(),
            Ok(_) => None,
        })
    }

    fn visible(&self, field: &FieldSpec) -> bool {
        let fields = self.fields.get_value();
        self.values
            .with(|values| is_visible(&fields, field, &with_defaults(&fields, values)))
    }

    /// The first shown field that is still empty, else the first with an error.
    fn first_to_fill(&self, errors: Option<&FieldErrors>) -> Option<String> {
        let fields = self.fields.get_value();
        let values = self.values.get_untracked();
        let effective = with_defaults(&fields, &values);
        let shown = || fields.iter().filter(|f| is_visible(&fields, f, &effective));
        if let Some(errors) = errors
            && let Some(field) = shown().find(|f| errors.contains_key(&f.name))
        {
            return Some(field.name.clone());
        }
        shown()
            .find(|f| values.get(&f.name).is_none_or(is_empty))
            .map(|f| f.name.clone())
    }

    fn focus_field(&self, name: &str) {
        let id = input_id(self.request_id, name);
        if !util::focus_id(&id) {
            // A multiselect: its first checkbox.
            util::focus_id(&format!("{id}-0"));
        }
    }
}

#[component]
pub fn InputCard(request_id: Uuid) -> impl IntoView {
    let store = expect_context::<ChatStore>();
    let app = expect_context::<AppState>();
    let request = Memo::new(move |_| {
        store
            .requests
            .with(|requests| requests.iter().find(|r| r.id == request_id).cloned())
    });
    let Some(first) = request.get_untracked() else {
        return ().into_any();
    };
    // Pending past its expiry counts as expired, even before the server says so.
    let status = Memo::new(move |_| {
        let Some(request) = request.get() else {
            return RequestStatus::Expired;
        };
        if request.status == RequestStatus::Pending
            && util::millis(&request.expires_at) <= app.now_ms.get()
        {
            RequestStatus::Expired
        } else {
            request.status
        }
    });
    let fields = Arc::new(first.fields.clone());
    let values = RwSignal::new(initial_values(&fields));
    let check_fields = fields.clone();
    let check = Memo::new(move |_| values.with(|values| validate_inputs(&check_fields, values)));
    let sending = RwSignal::new(false);
    let card_error = RwSignal::new(None::<String>);
    let form = CardForm {
        request_id,
        fields: StoredValue::new(fields),
        values,
        touched: RwSignal::new(BTreeSet::new()),
        server_errors: RwSignal::new(BTreeMap::new()),
        card_error,
        check,
        save_for: first.save_for,
        locked: Signal::derive(move || sending.get() || status.get() != RequestStatus::Pending),
    };
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
                        let moved_on = util::active_element().is_some_and(|el| {
                            el.closest(&format!("#{card_id}")).ok().flatten().is_none()
                        });
                        if !moved_on {
                            util::focus_id(&card_id);
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
                        util::focus_id(&format!("card-{}", request_id.simple()));
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

    // When a card appears, the first empty field gets the focus, unless the user is busy
    // in another card.
    if first.status == RequestStatus::Pending {
        request_animation_frame(move || {
            let elsewhere = util::active_element()
                .and_then(|el| el.closest(".input-card").ok().flatten())
                .is_some();
            if !elsewhere && let Some(name) = form.first_to_fill(None) {
                form.focus_field(&name);
            }
        });
    }

    let reason = first.reason.clone();
    let tool_name = first.tool_name.clone();
    let tool_attr = tool_name.clone();
    let title_id = format!("{heading_id}-title");
    let choices_id = format!("{heading_id}-choices");
    let labelled_by = title_id.clone();
    let body = move || match status.get() {
        RequestStatus::Pending => {
            let submit = submit.clone();
            let on_key = {
                let submit = submit.clone();
                let cancel = cancel.clone();
                move |ev: leptos::ev::KeyboardEvent| match ev.key().as_str() {
                    "Escape" => {
                        ev.prevent_default();
                        cancel();
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
                        <span class="hint keys">"Enter submits · Esc cancels"</span>
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
        }
        .into_any(),
        RequestStatus::Abandoned => view! {
            <p class="card-outcome" data-testid="card-abandoned">
                <span aria-hidden="true">"– "</span>
                "No longer needed: the assistant stopped before this was answered."
            </p>
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
                    <code>{tool_name}</code>
                </h2>
                <p class="card-reason" data-testid="card-reason">{reason}</p>
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
            let value = inputs.get(&field.name)?;
            let shown = if field.is_secret() {
                "hidden".to_owned()
            } else {
                util::plain(value)
            };
            Some((field.label().to_owned(), shown, field.is_secret()))
        })
        .collect();
    let scopes: BTreeSet<&'static str> = request
        .fields
        .iter()
        .filter(|f| inputs.contains_key(&f.name))
        .filter_map(|f| remember_note(f.save_for.unwrap_or(request.save_for)))
        .collect();
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

#[component]
fn FieldRow(field: FieldSpec, form: CardForm) -> impl IntoView {
    let id = input_id(form.request_id, &field.name);
    let help_id = format!("{id}-help");
    let error_id = format!("{id}-error");
    let name = field.name.clone();
    let shown_field = field.clone();
    let visible = Memo::new(move |_| form.visible(&shown_field));
    let error_name = name.clone();
    let error = Memo::new(move |_| form.error(&error_name));
    let scope = field.save_for.unwrap_or(form.save_for);
    let described_by = {
        let mut ids = vec![error_id.clone()];
        if field.description.is_some() {
            ids.insert(0, help_id.clone());
        }
        ids.join(" ")
    };
    let label = field.label().to_owned();
    let required = field.required;
    let is_group = field.kind == FieldType::Multiselect;
    let is_check = field.kind == FieldType::Boolean;
    let control = control(&field, form, &id, described_by, error);
    let label_view = if is_group {
        view! {
            <legend class="field-label">
                {label}
                {required.then(|| view! { <RequiredMark/> })}
            </legend>
        }
        .into_any()
    } else if is_check {
        ().into_any()
    } else {
        view! {
            <label class="field-label" for=id.clone()>
                {label}
                {required.then(|| view! { <RequiredMark/> })}
            </label>
        }
        .into_any()
    };
    let row_class = if is_group {
        "field field-group"
    } else {
        "field"
    };
    let inner = view! {
        {label_view}
        {control}
        {field
            .description
            .clone()
            .map(|text| view! { <p class="help" id=help_id.clone()>{text}</p> })}
        {remember_note(scope)
            .map(|note| view! { <p class="remember" data-testid="remember-note">{note}</p> })}
        <p class="field-error" id=error_id.clone() aria-live="polite" data-testid="field-error">
            {move || error.get()}
        </p>
    };
    // Hidden rather than removed, so a field that comes back keeps what was typed.
    let hidden = move || !visible.get();
    if is_group {
        view! {
            <fieldset class=row_class data-testid="field" data-field=name hidden=hidden>
                {inner}
            </fieldset>
        }
        .into_any()
    } else {
        view! {
            <div class=row_class data-testid="field" data-field=name hidden=hidden>
                {inner}
            </div>
        }
        .into_any()
    }
}

#[component]
fn RequiredMark() -> impl IntoView {
    view! {
        <span class="required" aria-hidden="true">" *"</span>
        <span class="visually-hidden">" (required)"</span>
    }
}

/// The input element for a field's type. Inputs start from the card's values and write
/// back on every keystroke; they are never overwritten while the user types.
fn control(
    field: &FieldSpec,
    form: CardForm,
    id: &str,
    described_by: String,
    error: Memo<Option<String>>,
) -> AnyView {
    let name = field.name.clone();
    let initial = form
        .values
        .with_untracked(|v| v.get(&name).cloned())
        .unwrap_or(Value::Null);
    let initial_text = match &initial {
        Value::Null => String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let invalid = move || error.with(Option::is_some).to_string();
    let required = field.required;
    let placeholder = field.placeholder.clone().unwrap_or_default();
    let locked = form.locked;
    let text_input = |kind: &'static str, autocomplete: &'static str| {
        let name = name.clone();
        view! {
            <input
                id=id.to_owned()
                name=name.clone()
                type=kind
                class="field-input"
                data-testid="field-input"
                prop:value=initial_text.clone()
                placeholder=placeholder.clone()
                autocomplete=autocomplete
                aria-required=required.to_string()
                aria-invalid=invalid
                aria-describedby=described_by.clone()
                disabled=move || locked.get()
                on:input=move |ev| form.set(&name, Value::String(event_target_value(&ev)))
            />
        }
        .into_any()
    };
    match field.kind {
        FieldType::Text => text_input("text", "off"),
        FieldType::Email => text_input("email", "email"),
        FieldType::Url => text_input("url", "url"),
        FieldType::Date => text_input("date", "off"),
        FieldType::Secret => text_input("password", "new-password"),
        FieldType::Number => {
            let min = field.min.map(|m| m.to_string());
            let max = field.max.map(|m| m.to_string());
            view! {
                <input
                    id=id.to_owned()
                    name=name.clone()
                    type="number"
                    step="any"
                    inputmode="decimal"
                    class="field-input"
                    data-testid="field-input"
                    min=min
                    max=max
                    prop:value=initial_text
                    placeholder=placeholder
                    aria-required=required.to_string()
                    aria-invalid=invalid
                    aria-describedby=described_by
                    disabled=move || locked.get()
                    on:input=move |ev| form.set(&name, Value::String(event_target_value(&ev)))
                />
            }
            .into_any()
        }
        FieldType::Textarea => view! {
            <textarea
                id=id.to_owned()
                name=name.clone()
                class="field-input"
                data-testid="field-input"
                rows="3"
                prop:value=initial_text
                placeholder=placeholder
                aria-required=required.to_string()
                aria-invalid=invalid
                aria-describedby=described_by
                disabled=move || locked.get()
                on:input=move |ev| form.set(&name, Value::String(event_target_value(&ev)))
            ></textarea>
        }
        .into_any(),
        FieldType::Select => {
            let options = field.options.clone();
            let chosen = initial_text.clone();
            let prompt = if field.placeholder.is_some() {
                placeholder
            } else {
                "Choose…".to_owned()
            };
            view! {
                <select
                    id=id.to_owned()
                    name=name.clone()
                    class="field-input"
                    data-testid="field-input"
                    aria-required=required.to_string()
                    aria-invalid=invalid
                    aria-describedby=described_by
                    disabled=move || locked.get()
                    on:change=move |ev| form.set(&name, Value::String(event_target_value(&ev)))
                >
                    <option value="" selected=chosen.is_empty()>{prompt}</option>
                    {options
                        .into_iter()
                        .map(|option| {
                            let selected = option.value == chosen;
                            view! {
                                <option value=option.value selected=selected>{option.label}</option>
                            }
                        })
                        .collect_view()}
                </select>
            }
            .into_any()
        }
        FieldType::Boolean => {
            let checked = initial == Value::Bool(true) || initial_text == "true";
            let label = field.label().to_owned();
            view! {
                <label class="check" for=id.to_owned()>
                    <input
                        id=id.to_owned()
                        name=name.clone()
                        type="checkbox"
                        data-testid="field-input"
                        prop:checked=checked
                        aria-invalid=invalid
                        aria-describedby=described_by
                        disabled=move || locked.get()
                        on:change=move |ev| form.set(&name, Value::Bool(event_target_checked(&ev)))
                    />
                    <span class="field-label">
                        {label}
                        {required.then(|| view! { <RequiredMark/> })}
                    </span>
                </label>
            }
            .into_any()
        }
        FieldType::Multiselect => {
            let chosen: Vec<String> = match &initial {
                Value::Array(items) => items.iter().map(util::plain).collect(),
                _ => Vec::new(),
            };
            let order: Vec<String> = field.options.iter().map(|o| o.value.clone()).collect();
            field
                .options
                .iter()
                .enumerate()
                .map(|(index, option)| {
                    let box_id = format!("{id}-{index}");
                    let for_id = box_id.clone();
                    let value = option.value.clone();
                    let name = name.clone();
                    let order = order.clone();
                    let checked = chosen.contains(&option.value);
                    view! {
                        <label class="check" for=for_id>
                            <input
                                id=box_id
                                type="checkbox"
                                data-testid="field-option"
                                value=value.clone()
                                prop:checked=checked
                                aria-describedby=described_by.clone()
                                disabled=move || locked.get()
                                on:change=move |ev| {
                                    let on = event_target_checked(&ev);
                                    let mut picked: Vec<String> = form
                                        .values
                                        .with_untracked(|v| match v.get(&name) {
                                            Some(Value::Array(items)) => {
                                                items.iter().map(util::plain).collect()
                                            }
                                            _ => Vec::new(),
                                        });
                                    picked.retain(|p| *p != value);
                                    if on {
                                        picked.push(value.clone());
                                    }
                                    picked.sort_by_key(|p| order.iter().position(|o| o == p));
                                    form.set(
                                        &name,
                                        Value::Array(picked.into_iter().map(Value::String).collect()),
                                    );
                                }
                            />
                            <span>{option.label.clone()}</span>
                        </label>
                    }
                })
                .collect_view()
                .into_any()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_card_starts_from_defaults_and_unticked_boxes() {
        let fields: Vec<FieldSpec> = serde_json::from_value(json!([
            {"name": "n", "type": "number", "default": 3},
            {"name": "b", "type": "boolean", "required": false},
            {"name": "t"}
        ]))
        .expect("fields");
        let values = initial_values(&fields);
        assert_eq!(values.get("n"), Some(&json!(3)));
        assert_eq!(values.get("b"), Some(&json!(false)));
        assert_eq!(values.get("t"), None);
    }

    #[test]
    fn remembered_notes_follow_save_for() {
        assert_eq!(remember_note(SaveFor::Call), None);
        assert_eq!(
            remember_note(SaveFor::Session),
            Some("Remembered for this conversation")
        );
        assert_eq!(
            remember_note(SaveFor::User),
            Some("Remembered for all your conversations")
        );
    }
}
