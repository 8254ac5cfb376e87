//! JSON values as a person reads them.

use leptos::prelude::*;
use protocol::fields::{FieldSpec, FieldType};
use protocol::unseen;
use serde_json::Value;

/// A JSON value as a person reads it: strings bare, the rest as JSON.
pub fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(plain).collect::<Vec<_>>().join(", "),
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        other => compact(other),
    }
}

/// A field's value as the user chose it, written out ([`unseen::written_out`]): a
/// select's choices by the labels its options showed (by the value where no option, or
/// more than one, has it, or two options' labels may be taken for one another: `Main`
/// and `Main ` look alike in a list), the rest as [`plain`].
pub fn chosen(field: &FieldSpec, value: &Value) -> String {
    let label = |choice: &Value| -> Option<String> {
        let choice = choice.as_str()?;
        let mut holding = field.options.iter().filter(|o| o.value == choice);
        let option = holding.next().filter(|_| holding.next().is_none())?;
        let looks = unseen::name_key(&option.label);
        let shared = field
            .options
            .iter()
            .filter(|o| unseen::name_key(&o.label) == looks)
            .count()
            > 1;
        (!shared).then(|| option.label.clone())
    };
    let text = match (field.kind, value) {
        (FieldType::Select, choice) => label(choice).unwrap_or_else(|| plain(choice)),
        (FieldType::Multiselect, Value::Array(choices)) => choices
            .iter()
            .map(|choice| label(choice).unwrap_or_else(|| plain(choice)))
            .collect::<Vec<_>>()
            .join(", "),
        (_, other) => plain(other),
    };
    unseen::written_out(&text)
}

/// A JSON value as JSON text on one line. (Through `serde_json::to_string`, as request
/// bodies are written, rather than `Display`, which would bring a second writer.)
pub fn compact(value: &Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// Indented JSON, for a value shown whole.
pub fn pretty(value: &impl serde::Serialize) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// `text` as a person deciding on it must read it ([`unseen::written_out`]), when that
/// differs from what an input shows of it: hidden or reordering characters act there,
/// and look-alike letters pass for the letters they imitate. A one-line input shows no
/// line break (browsers drop them from what it shows), so there they are written out
/// too.
pub fn revealed(text: &str, one_line: bool) -> Option<String> {
    let mut shown = unseen::written_out(text);
    // A carriage return is written out already, as every control character is.
    if one_line && shown.contains('\n') {
        shown = shown.replace('\n', "⟨U+000A⟩");
    }
    (shown != text).then_some(shown)
}

/// The note beneath an input whose text [`revealed`] writes out: what will be sent.
/// `id` is the note's, which the input names among what describes it.
#[component]
pub fn RevealedNote(text: String, id: String, testid: &'static str) -> impl IntoView {
    view! {
        <p class="help revealed" id=id data-testid=testid>
            "Holds characters that cannot be seen, or letters that only look Latin; it reads: "
            <code>{text}</code>
        </p>
    }
}

#[cfg(test)]
mod tests {
    use super::{chosen, revealed};
    use serde_json::json;

    #[test]
    fn a_choice_is_shown_by_the_label_the_user_chose_it_by() {
        let field = |kind: &str, options: serde_json::Value| -> protocol::fields::FieldSpec {
            serde_json::from_value(json!({"name": "f", "type": kind, "options": options}))
                .expect("field")
        };
        let region = field(
            "select",
            json!([{"value": "eu", "label": "Europe"}, {"value": "us", "label": "United\u{202E}States"}]),
        );
        assert_eq!(chosen(&region, &json!("eu")), "Europe");
        assert_eq!(chosen(&region, &json!("us")), "United⟨U+202E⟩States");
        // Not among the options (an older card's value): as it is.
        assert_eq!(chosen(&region, &json!("apac")), "apac");
        let checks = field(
            "multiselect",
            json!([{"value": "s", "label": "Smoke"}, {"value": "l", "label": "Load"}]),
        );
        assert_eq!(chosen(&checks, &json!(["l", "s"])), "Load, Smoke");
        // Two options one label: the label cannot tell which was sent.
        let twins = field(
            "select",
            json!([{"value": "prod", "label": "Main"}, {"value": "staging", "label": "Main "}]),
        );
        assert_eq!(chosen(&twins, &json!("staging")), "staging");
        let text = field("text", json!([]));
        assert_eq!(chosen(&text, &json!("a\u{200B}b")), "a⟨U+200B⟩b");
    }

    #[test]
    fn a_text_is_revealed_only_where_its_input_would_not_show_it_as_it_is() {
        assert_eq!(revealed("acme.com", true), None);
        assert_eq!(revealed("two\nlines", false), None);
        assert_eq!(
            revealed("alice@corp.com\nbob@evil.com", true).as_deref(),
            Some("alice@corp.com⟨U+000A⟩bob@evil.com")
        );
        assert_eq!(revealed("a\r\nb", false).as_deref(), Some("a⟨U+000D⟩\nb"));
        assert_eq!(
            revealed("invoice-\u{202E}fdp.exe", false).as_deref(),
            Some("invoice-⟨U+202E⟩fdp.exe")
        );
    }
}
