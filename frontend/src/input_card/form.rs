//! The card's form: the values typed so far, the checks run on them as they change,
//! and one row per field (label, control, help, warning, error).

use std::collections::BTreeSet;
use std::sync::Arc;

use leptos::prelude::*;
use protocol::fields::{FieldErrors, is_empty, validate_field, with_defaults};
use protocol::{FieldSpec, FieldType, SaveFor, is_visible};
use serde_json::{Map, Value};
use uuid::Uuid;

use super::controls::control;
use crate::focus;
use crate::value_text::{self, RevealedNote};

/// The words under a field that will be remembered.
pub(super) fn remember_note(scope: SaveFor) -> Option<&'static str> {
    match scope {
        SaveFor::Call => None,
        SaveFor::Session => Some("Remembered for this conversation"),
        SaveFor::User => Some("Remembered for all your conversations"),
    }
}

pub(super) fn input_id(request: Uuid, field: &str) -> String {
    format!("f-{}-{field}", request.simple())
}

/// The id of a part of a field's row (a choice, its help, its error): `:` appears in no
/// field name (letters, digits, `_`, `-`, `.`), so no other field's input or part (a
/// field named `plan-0` or `plan-error` beside `plan`) has it.
pub(super) fn part_id(input_id: &str, part: impl std::fmt::Display) -> String {
    format!("{input_id}:{part}")
}

/// What a card starts with: defaults in their normal form, and `false` for a checkbox
/// nobody has ticked. A default as its maker wrote it (`"+5"`, `" 2030-01-01"`) may be
/// one an input cannot show, which would show it empty while sending it.
pub(super) fn initial_values(fields: &[FieldSpec]) -> Map<String, Value> {
    let mut values = with_defaults(fields, &Map::new());
    for field in fields {
        if let Some(value) = values.get_mut(&field.name)
            && let Ok(Some(normal)) = validate_field(field, Some(value))
        {
            *value = normal;
        }
        if field.kind == FieldType::Boolean && !values.contains_key(&field.name) {
            values.insert(field.name.clone(), Value::Bool(false));
        }
    }
    values
}

/// What the user changed in a card: the values of fields that may be kept (see
/// [`keepable`]) and are not what the card offered (`offered`, [`initial_values`]), a
/// cleared one included.
pub(super) fn typed(
    fields: &[FieldSpec],
    values: &Map<String, Value>,
    offered: &Map<String, Value>,
) -> Map<String, Value> {
    fields
        .iter()
        .filter(|field| keepable(field))
        .filter_map(|field| {
            let value = values.get(&field.name)?;
            (offered.get(&field.name) != Some(value)).then(|| (field.name.clone(), value.clone()))
        })
        .collect()
}

/// What [`typed`] kept under `key` ([`crate::drafts::card_key`]) for these fields: a
/// field no longer there, or no longer [`keepable`], is left out.
pub(super) fn kept_typed(key: &str, fields: &[FieldSpec]) -> Map<String, Value> {
    let kept = crate::drafts::kept(key);
    let Ok(Value::Object(kept)) = serde_json::from_str::<Value>(&kept) else {
        return Map::new();
    };
    kept.into_iter()
        .filter(|(name, _)| {
            fields
                .iter()
                .any(|field| &field.name == name && keepable(field))
        })
        .collect()
}

/// Whether what is typed into a field may be kept in the tab: not a secret, nor a field
/// toolgate warns about (on a form that asks for a password, what is typed anywhere may
/// be one).
fn keepable(field: &FieldSpec) -> bool {
    !field.is_secret() && field.warning.is_none()
}

/// Everything a field row needs, shared by the rows of one card.
#[derive(Clone, Copy)]
pub(super) struct CardForm {
    pub(super) request_id: Uuid,
    pub(super) fields: StoredValue<Arc<Vec<FieldSpec>>>,
    pub(super) values: RwSignal<Map<String, Value>>,
    pub(super) touched: RwSignal<BTreeSet<String>>,
    pub(super) server_errors: RwSignal<FieldErrors>,
    pub(super) card_error: RwSignal<Option<String>>,
    pub(super) check: Memo<Result<Map<String, Value>, FieldErrors>>,
    pub(super) save_for: SaveFor,
    pub(super) locked: Signal<bool>,
}

impl CardForm {
    pub(super) fn set(&self, name: &str, value: Value) {
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
    pub(super) fn error(&self, name: &str) -> Option<String> {
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

    pub(super) fn visible(&self, field: &FieldSpec) -> bool {
        let fields = self.fields.get_value();
        self.values
            .with(|values| is_visible(&fields, field, &with_defaults(&fields, values)))
    }

    /// The first shown field that is still empty, else the first with an error.
    pub(super) fn first_to_fill(&self, errors: Option<&FieldErrors>) -> Option<String> {
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

    pub(super) fn focus_field(&self, name: &str) {
        let id = input_id(self.request_id, name);
        if !focus::move_to(&id) {
            // A multiselect: its first checkbox.
            focus::move_to(&part_id(&id, 0));
        }
    }
}

#[component]
pub(super) fn FieldRow(field: FieldSpec, form: CardForm) -> impl IntoView {
    let id = input_id(form.request_id, &field.name);
    let help_id = part_id(&id, "help");
    let error_id = part_id(&id, "error");
    let name = field.name.clone();
    let shown_field = field.clone();
    let visible = Memo::new(move |_| form.visible(&shown_field));
    let error_name = name.clone();
    let error = Memo::new(move |_| form.error(&error_name));
    let scope = field.save_for.unwrap_or(form.save_for);
    let warning_id = part_id(&id, "warning");
    let revealed_id = part_id(&id, "revealed");
    // A text shows hidden or reordering characters as they act, and look-alike letters
    // as the letters they imitate, whoever wrote it (the model proposing it, the card's
    // maker as its default, a paste): what will be sent is written out beneath it
    // whenever it holds one. Never a secret's, which is not shown at all.
    let shows_text = matches!(
        field.kind,
        FieldType::Text | FieldType::Textarea | FieldType::Email | FieldType::Url
    );
    let described_by = {
        let mut ids = vec![error_id.clone()];
        if shows_text {
            ids.insert(0, revealed_id.clone());
        }
        if field.warning.is_some() {
            ids.insert(0, warning_id.clone());
        }
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
    let one_line = field.kind != FieldType::Textarea;
    let revealed_name = name.clone();
    let reads_as = Memo::new(move |_| {
        if !shows_text {
            return None;
        }
        form.values
            .with(|values| value_text::revealed(values.get(&revealed_name)?.as_str()?, one_line))
    });
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
        {move || {
            reads_as
                .get()
                .map(|text| {
                    view! { <RevealedNote text id=revealed_id.clone() testid="field-revealed"/> }
                })
        }}
        {field
            .description
            .clone()
            .map(|text| view! { <p class="help" id=help_id.clone()>{text}</p> })}
        {field
            .warning
            .clone()
            .map(|text| {
                view! {
                    <p
                        class="field-warning"
                        id=warning_id.clone()
                        role="note"
                        data-testid="field-warning"
                    >
                        <span aria-hidden="true">"⚠ "</span>
                        {text}
                    </p>
                }
            })}
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
pub(super) fn RequiredMark() -> impl IntoView {
    view! {
        <span class="required" aria-hidden="true">" *"</span>
        <span class="visually-hidden">" (required)"</span>
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

    /// What survives a reload is what the user changed, never a secret nor what is
    /// typed into a field toolgate warns about.
    #[test]
    fn what_is_kept_of_a_card_is_what_was_changed_and_may_be_kept() {
        let mut fields: Vec<FieldSpec> = serde_json::from_value(json!([
            {"name": "region", "default": "eu"},
            {"name": "note"},
            {"name": "key", "type": "secret"},
            {"name": "user"}
        ]))
        .expect("fields");
        fields[3].warning = Some("This form asks for a password".into());
        let offered = initial_values(&fields);
        let values = json!({"region": "us", "note": "hello", "key": "s3cret", "user": "pw?"});
        let kept = typed(&fields, values.as_object().expect("object"), &offered);
        assert_eq!(
            Value::Object(kept),
            json!({"region": "us", "note": "hello"})
        );
        let unchanged = json!({"region": "eu"});
        assert!(typed(&fields, unchanged.as_object().expect("object"), &offered).is_empty());
    }

    #[test]
    fn a_card_starts_from_defaults_as_they_will_be_sent() {
        // As written, an input would show these empty and the card send them anyway.
        let fields: Vec<FieldSpec> = serde_json::from_value(json!([
            {"name": "n", "type": "number", "default": "+5"},
            {"name": "i", "type": "integer", "default": " 7"},
            {"name": "d", "type": "date", "default": " 2030-01-01"},
            {"name": "t", "type": "text", "default": 12}
        ]))
        .expect("fields");
        let values = initial_values(&fields);
        assert_eq!(values.get("n"), Some(&json!(5)));
        assert_eq!(values.get("i"), Some(&json!(7)));
        assert_eq!(values.get("d"), Some(&json!("2030-01-01")));
        assert_eq!(values.get("t"), Some(&json!("12")));
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
