//! One input per field type. Inputs start from the card's values and write back on
//! every change; they are never overwritten while the user types.

use leptos::prelude::*;
use protocol::fields::fmt_number;
use protocol::{FieldSpec, FieldType};
use serde_json::Value;

use super::form::{CardForm, RequiredMark, part_id};
use crate::{local_time, value_text};

/// The input element for a field's type. Inputs start from the card's values and write
/// back on every keystroke; they are never overwritten while the user types.
pub(super) fn control(
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
        other => value_text::compact(other),
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
        FieldType::Datetime => view! {
            <input
                id=id.to_owned()
                name=name.clone()
                type="datetime-local"
                class="field-input"
                data-testid="field-input"
                prop:value=local_time::to_wall_time(&initial_text)
                aria-required=required.to_string()
                aria-invalid=invalid
                aria-describedby=described_by.clone()
                disabled=move || locked.get()
                on:input=move |ev| {
                    let typed = event_target_value(&ev);
                    form.set(&name, Value::String(local_time::with_browser_offset(&typed)))
                }
            />
        }
        .into_any(),
        FieldType::Secret => text_input("password", "new-password"),
        FieldType::Number | FieldType::Integer => {
            let min = field.min.map(fmt_number);
            let max = field.max.map(fmt_number);
            let whole = field.kind == FieldType::Integer;
            view! {
                <input
                    id=id.to_owned()
                    name=name.clone()
                    type="number"
                    step=if whole { "1" } else { "any" }
                    inputmode=if whole { "numeric" } else { "decimal" }
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
                Value::Array(items) => items.iter().map(value_text::plain).collect(),
                _ => Vec::new(),
            };
            let order: Vec<String> = field.options.iter().map(|o| o.value.clone()).collect();
            field
                .options
                .iter()
                .enumerate()
                .map(|(index, option)| {
                    let box_id = part_id(id, index);
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
                                    let before: Vec<String> = form
                                        .values
                                        .with_untracked(|v| match v.get(&name) {
                                            Some(Value::Array(items)) => {
                                                items.iter().map(value_text::plain).collect()
                                            }
                                            _ => Vec::new(),
                                        });
                                    // Values that are not options first, then the options
                                    // picked, in the options' order.
                                    let mut picked: Vec<String> = before
                                        .iter()
                                        .filter(|p| !order.contains(p))
                                        .cloned()
                                        .collect();
                                    picked.extend(order.iter().filter(|o| {
                                        if **o == value { on } else { before.contains(o) }
                                    }).cloned());
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
