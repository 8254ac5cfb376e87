//! The call's arguments on an approval card: how each is labelled and edited, the
//! input for one, and an edited text read back as the value the tool gets.

use std::collections::BTreeMap;

use leptos::prelude::*;
use protocol::FieldSpec;
use protocol::api::InputRequest;
use protocol::approval::Decision;
use protocol::unseen;
use serde_json::Value;
use uuid::Uuid;

use crate::value_text::{self, RevealedNote};

/// How an argument is edited.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Editor {
    /// A string, edited as it is.
    Text { multiline: bool },
    /// A string the tool's field offers choices for.
    Choice(Vec<(String, String)>),
    /// Anything else, edited as JSON text.
    Json { multiline: bool },
}

/// One argument of the call, with what the card needs to show and edit it.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Arg {
    pub(super) name: String,
    pub(super) label: String,
    pub(super) help: Option<String>,
    pub(super) editor: Editor,
}

/// The call's arguments, in the order the request holds them.
pub(super) fn arguments_of(request: &InputRequest) -> Vec<(String, Value)> {
    match &request.tool_args {
        Value::Object(map) => map.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        _ => Vec::new(),
    }
}

/// A field of the tool with the argument's name gives it a label people understand.
fn field_named<'a>(fields: &'a [FieldSpec], name: &str) -> Option<&'a FieldSpec> {
    fields.iter().find(|f| f.name == name)
}

/// The label an argument is shown under: its field's, else its name, with what cannot be
/// seen written out (two keys must not read the same). An argument that is no field but
/// reads like one (`Database` beside the field `database`, labelled "Database") says so,
/// so that a decoy row cannot pass for the field.
pub(super) fn label_of(fields: &[FieldSpec], name: &str) -> String {
    if let Some(field) = field_named(fields, name) {
        return field.label().to_owned();
    }
    let shown = unseen::written_out(name);
    let reads_like = |text: &str| {
        // Letters that look Latin as the Latin ones (`Dаtabase` with a Cyrillic `а`);
        // otherwise ASCII case only: Unicode's case tables would weigh on the bundle.
        let plain = |t: &str| -> String {
            t.chars()
                .filter(|c| c.is_alphanumeric())
                .map(protocol::unseen::as_latin)
                .collect()
        };
        !plain(text).is_empty() && plain(text) == plain(name)
    };
    if fields
        .iter()
        .any(|f| reads_like(&f.name) || reads_like(f.label()))
    {
        format!("{shown} (not the field)")
    } else {
        shown
    }
}

/// How a value reads on the card: strings as they are, the rest as indented JSON; what
/// a reader cannot see, what would reorder the text, and letters that only look Latin
/// among Latin ones, written out.
pub(super) fn shown(value: &Value) -> (String, bool) {
    (
        unseen::written_out(&draft_of(value)),
        !matches!(value, Value::String(_)),
    )
}

pub(super) fn describe(request: &InputRequest) -> Vec<Arg> {
    let schema = request.arguments_schema.as_ref();
    arguments_of(request)
        .into_iter()
        .map(|(name, value)| {
            let field = field_named(&request.fields, &name);
            let help = schema
                .and_then(|s| s.get("properties"))
                .and_then(|p| p.get(&name))
                .and_then(|p| p.get("description"))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| field.and_then(|f| f.description.clone()));
            let editor = match (&value, field) {
                (Value::String(_), Some(field)) if !field.options.is_empty() => Editor::Choice(
                    field
                        .options
                        .iter()
                        .map(|o| (o.value.clone(), o.label.clone()))
                        .collect(),
                ),
                (Value::String(text), field) => Editor::Text {
                    multiline: text.contains('\n')
                        || text.chars().count() > 80
                        || field.is_some_and(|f| f.kind == protocol::FieldType::Textarea),
                },
                (other, _) => Editor::Json {
                    multiline: value_text::pretty(other).contains('\n'),
                },
            };
            Arg {
                label: label_of(&request.fields, &name),
                name,
                help,
                editor,
            }
        })
        .collect()
}

/// The text an argument's input starts from: the value itself, so that sending it
/// unchanged sends the same value.
pub(super) fn draft_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => value_text::pretty(other),
    }
}

/// An edited argument back to JSON: strings as typed, the rest parsed.
pub(super) fn parse_draft(editor: &Editor, text: &str) -> Result<Value, String> {
    match editor {
        Editor::Text { .. } | Editor::Choice(_) => Ok(Value::String(text.to_owned())),
        Editor::Json { .. } => serde_json::from_str(text).map_err(|err| {
            format!(
                "Not valid JSON ({err}). Write a number, true or false, null, a list or an object."
            )
        }),
    }
}

/// The argument a server message keyed `arguments.<name>` (or deeper, or just the
/// argument's own name) is about.
pub(super) fn argument_key<'a>(key: &str, names: &'a [String]) -> Option<&'a String> {
    let Some(rest) = key.strip_prefix("arguments.") else {
        return names.iter().find(|name| name.as_str() == key);
    };
    names.iter().find(|name| {
        rest == name.as_str()
            || rest
                .strip_prefix(name.as_str())
                .is_some_and(|tail| tail.starts_with('.') || tail.starts_with('['))
    })
}

pub(super) fn arg_input_id(request: Uuid, index: usize) -> String {
    format!("a-{}-{index}", request.simple())
}

/// One argument's input in edit mode, labelled, with its help and its error.
#[component]
pub(super) fn ArgInput(
    index: usize,
    arg: Arg,
    request_id: Uuid,
    drafts: RwSignal<BTreeMap<String, String>>,
    parse_errors: Memo<BTreeMap<String, String>>,
    server_errors: RwSignal<BTreeMap<String, String>>,
    sending: RwSignal<Option<Decision>>,
) -> impl IntoView {
    let id = arg_input_id(request_id, index);
    let help_id = format!("{id}-help");
    let error_id = format!("{id}-error");
    let name = StoredValue::new(arg.name.clone());
    let error = Memo::new(move |_| {
        let name = name.get_value();
        server_errors
            .with(|e| e.get(&name).cloned())
            .or_else(|| parse_errors.with(|e| e.get(&name).cloned()))
    });
    let invalid = move || error.with(Option::is_some).to_string();
    let initial = drafts.with_untracked(|d| d.get(&arg.name).cloned().unwrap_or_default());
    let set = move |text: String| {
        let name = name.get_value();
        drafts.update(|d| {
            d.insert(name.clone(), text);
        });
        if server_errors.with_untracked(|e| e.contains_key(&name)) {
            server_errors.update(|e| {
                e.remove(&name);
            });
        }
    };
    let is_json = matches!(arg.editor, Editor::Json { .. });
    let help = match (&arg.help, is_json) {
        (Some(help), true) => Some(format!("{help} (written as JSON)")),
        (Some(help), false) => Some(help.clone()),
        (None, true) => {
            Some("Written as JSON: a number, true or false, a list or an object.".into())
        }
        (None, false) => None,
    };
    let revealed_id = format!("{id}-revealed");
    let described_by = if help.is_some() {
        format!("{help_id} {revealed_id} {error_id}")
    } else {
        format!("{revealed_id} {error_id}")
    };
    let testid = format!("approval-arg-{}", arg.name);
    let locked = move || sending.get().is_some();
    // An input shows hidden or reordering characters as they act, and look-alike letters
    // as the letters they imitate: what will run is written out beneath it whenever it
    // holds one.
    let one_line = matches!(
        arg.editor,
        Editor::Text { multiline: false } | Editor::Json { multiline: false }
    );
    let reads_as = Memo::new(move |_| {
        let name = name.get_value();
        drafts.with(|d| value_text::revealed(d.get(&name)?, one_line))
    });
    let control = match arg.editor.clone() {
        Editor::Choice(options) => {
            let chosen = initial.clone();
            let known = options.iter().any(|(value, _)| *value == chosen);
            view! {
                <select
                    id=id.clone()
                    class="field-input"
                    data-testid=testid
                    aria-invalid=invalid
                    aria-describedby=described_by
                    disabled=locked
                    on:change=move |ev| set(event_target_value(&ev))
                >
                    {(!known)
                        .then(|| {
                            let shown = unseen::written_out(&chosen);
                            view! { <option value=chosen.clone() selected=true>{shown}</option> }
                        })}
                    {options
                        .into_iter()
                        .map(|(value, label)| {
                            let selected = value == initial;
                            view! { <option value=value selected=selected>{label}</option> }
                        })
                        .collect_view()}
                </select>
            }
            .into_any()
        }
        Editor::Text { multiline: true } | Editor::Json { multiline: true } => view! {
            <textarea
                id=id.clone()
                class="field-input"
                class:code=is_json
                data-testid=testid
                rows="3"
                spellcheck=(!is_json).to_string()
                prop:value=initial
                aria-invalid=invalid
                aria-describedby=described_by
                disabled=locked
                on:input=move |ev| set(event_target_value(&ev))
            ></textarea>
        }
        .into_any(),
        Editor::Text { multiline: false } | Editor::Json { multiline: false } => view! {
            <input
                id=id.clone()
                type="text"
                class="field-input"
                class:code=is_json
                data-testid=testid
                autocomplete="off"
                spellcheck=(!is_json).to_string()
                prop:value=initial
                aria-invalid=invalid
                aria-describedby=described_by
                disabled=locked
                on:input=move |ev| set(event_target_value(&ev))
            />
        }
        .into_any(),
    };
    let title = arg.name.clone();
    view! {
        <div class="field" data-testid="approval-arg" data-arg=arg.name.clone()>
            <label class="field-label" for=id title=title>
                {arg.label.clone()}
            </label>
            {control}
            {move || {
                reads_as
                    .get()
                    .map(|text| {
                        view! {
                            <RevealedNote
                                text
                                id=revealed_id.clone()
                                testid="approval-arg-revealed"
                            />
                        }
                    })
            }}
            {help.map(|text| view! { <p class="help" id=help_id>{text}</p> })}
            <p
                class="field-error"
                id=error_id
                role="alert"
                data-testid="approval-arg-error"
            >
                {move || error.get()}
            </p>
        </div>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(args: Value) -> InputRequest {
        serde_json::from_value(json!({
            "id": Uuid::nil(), "conversation_id": Uuid::nil(), "tool_name": "query_database",
            "tool_call_id": "call_1", "tool_args": args, "reason": "r",
            "fields": [
                {"name": "database", "label": "Database", "type": "select",
                 "options": ["production", "staging"]},
                {"name": "production_reason", "label": "Why?", "type": "textarea"}
            ],
            "save_for": "call", "status": "pending", "kind": "approval",
            "allowed_decisions": ["approve", "edit", "reject"],
            "created_at": "2025-01-01T00:00:00Z", "expires_at": "2025-01-02T00:00:00Z"
        }))
        .expect("request")
    }

    #[test]
    fn arguments_take_their_field_labels_and_editors() {
        let r = request(json!({"query": "select 1", "database": "production",
            "production_reason": "audit", "limit": 5}));
        let args = describe(&r);
        let by_name = |n: &str| args.iter().find(|a| a.name == n).cloned().expect(n);
        assert_eq!(by_name("database").label, "Database");
        assert!(matches!(by_name("database").editor, Editor::Choice(_)));
        assert_eq!(
            by_name("production_reason").editor,
            Editor::Text { multiline: true }
        );
        assert_eq!(by_name("query").label, "query");
        assert_eq!(by_name("query").editor, Editor::Text { multiline: false });
        assert_eq!(by_name("limit").editor, Editor::Json { multiline: false });
    }

    #[test]
    fn hidden_characters_in_values_and_names_are_shown() {
        let (text, structured) = shown(&json!("rm -rf /tmp/\u{202E}gol.txt"));
        assert_eq!(text, "rm -rf /tmp/⟨U+202E⟩gol.txt");
        assert!(!structured);
        let (text, structured) = shown(&json!({"to": "ops@example.com\u{200B}"}));
        assert!(text.contains("ops@example.com⟨U+200B⟩"), "{text}");
        assert!(structured);
        let r = request(json!({"to": "a", "to\u{200B}": "b"}));
        assert_eq!(label_of(&r.fields, "to\u{200B}"), "to⟨U+200B⟩");
        assert_eq!(label_of(&r.fields, "database"), "Database");
        // A decoy named like a field, or like its label, says it is not the field.
        assert_eq!(label_of(&r.fields, "Database"), "Database (not the field)");
        assert_eq!(
            label_of(&r.fields, "production-reason"),
            "production-reason (not the field)"
        );
        assert_eq!(label_of(&r.fields, "query"), "query");
        // Letters that only look Latin make no other name, and are written out.
        assert_eq!(
            label_of(&r.fields, "D\u{0430}tabase"),
            "D⟨U+0430⟩tabase (not the field)"
        );
        assert_eq!(
            label_of(&r.fields, "\u{FF24}atabase"),
            "⟨U+FF24⟩atabase (not the field)"
        );
        // The edit form starts from the value itself: sent unchanged, it is the same.
        assert_eq!(draft_of(&json!("a\u{202E}b")), "a\u{202E}b");
    }

    #[test]
    fn edited_values_keep_their_kind() {
        let json_editor = Editor::Json { multiline: false };
        assert_eq!(parse_draft(&json_editor, "42"), Ok(json!(42)));
        assert!(parse_draft(&json_editor, "{oops").is_err());
        assert_eq!(
            parse_draft(&Editor::Text { multiline: false }, "42"),
            Ok(json!("42"))
        );
    }

    #[test]
    fn server_messages_find_their_argument() {
        let names = ["query".to_owned(), "filters".to_owned()];
        assert_eq!(argument_key("arguments.query", &names), Some(&names[0]));
        assert_eq!(
            argument_key("arguments.filters.country", &names),
            Some(&names[1])
        );
        assert_eq!(argument_key("arguments.queryx", &names), None);
        assert_eq!(argument_key("query", &names), Some(&names[0]));
        assert_eq!(argument_key("arguments", &names), None);
        assert_eq!(argument_key("decision", &names), None);
    }
}
