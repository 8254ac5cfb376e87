//! An MCP server's elicitation as toolgate's input request: the `requestedSchema`
//! converted field by field into the same field specifications the web chat's card and
//! the server validate with, and the user's accepted values converted back into the
//! `content` the server expects. A schema toolgate cannot show is refused with a reason
//! (the caller cancels it: no user saw it), never shown half-converted.

use std::borrow::Cow;

use protocol::fields::{self, FieldSpec, FieldType, SelectOption};
use protocol::unseen::{self, is_unseen};
use rmcp::model::{
    ElicitationSchema, EnumSchema, MultiSelectEnumSchema, PrimitiveSchemaDefinition,
    SingleSelectEnumSchema, StringFormat,
};
use serde_json::{Map, Value};

/// Longest URL a URL-mode card shows.
const MAX_URL_CHARS: usize = 2048;

/// Words that suggest a form field wants a secret, which MCP forms must not ask for.
const SENSITIVE_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "pass word",
    "passwort",
    "authenticator",
    "recovery code",
    "recovery phrase",
    "seed phrase",
    "mnemonic",
    "secret",
    "api key",
    "api_key",
    "apikey",
    "access key",
    "private key",
    "token",
    "credential",
    "pin code",
    "one-time code",
    "one time code",
    "passcode",
    "verification code",
    "security code",
    "2fa",
    "kennwort",
    "mot de passe",
    "contraseña",
    "credit card",
    "card number",
    "cvv",
    "social security",
];

/// The card's fields for a form-mode elicitation, in the server's order. A field that
/// asks for a password or a key, in its own words or by the question's `message`,
/// carries a warning.
pub fn fields_of(
    schema: &ElicitationSchema,
    message: &str,
    server: &str,
) -> Result<Vec<FieldSpec>, String> {
    let message_asks_for_secret = sounds_sensitive(message);
    // Counted before anything looks through the lists: matching names below takes time
    // that grows with the square of their lengths.
    let most = fields::limits().fields;
    let longest = [
        schema.properties.len(),
        schema.required.as_ref().map_or(0, Vec::len),
        schema.property_order.as_ref().map_or(0, Vec::len),
    ]
    .into_iter()
    .max()
    .unwrap_or(0);
    if longest > most {
        return Err(format!("the form lists {longest} fields; at most {most}"));
    }
    let required: Vec<&str> = schema
        .required
        .iter()
        .flatten()
        .map(String::as_str)
        .collect();
    for name in &required {
        if !schema.properties.contains_key(*name) {
            return Err(format!("`{name}` is required but not a property"));
        }
    }
    let mut order: Vec<&str> = schema
        .property_order
        .iter()
        .flatten()
        .map(String::as_str)
        .filter(|name| schema.properties.contains_key(*name))
        .collect();
    for name in schema.properties.keys() {
        if !order.contains(&name.as_str()) {
            order.push(name);
        }
    }
    let mut specs = Vec::with_capacity(order.len());
    for name in order {
        let definition = &schema.properties[name];
        let mut field = field_of(name, definition)?;
        field.required = required.contains(&name);
        let typed = matches!(
            field.kind,
            FieldType::Text
                | FieldType::Textarea
                | FieldType::Secret
                | FieldType::Number
                | FieldType::Integer
                | FieldType::Email
                | FieldType::Url
        );
        // A field that speaks of a password or a key is treated as one: typed unseen,
        // kept sealed, and masked in what the server says after it has it. So is every
        // text field of a question that asks for one, whatever its fields say (one
        // named for a hint must not leave the next in the clear). A number (a PIN)
        // cannot be kept sealed as text is, nor can an address: such a form is refused.
        let sensitive = looks_sensitive(&field);
        match field.kind {
            FieldType::Text | FieldType::Textarea if sensitive || message_asks_for_secret => {
                field.kind = FieldType::Secret;
            }
            FieldType::Number | FieldType::Integer if sensitive || message_asks_for_secret => {
                return Err(not_sealable(name));
            }
            FieldType::Email | FieldType::Url if sensitive => return Err(not_sealable(name)),
            _ => {}
        }
        if sensitive || (message_asks_for_secret && typed) {
            field.warning = Some(format!(
                "This looks like a request for a password or a key. MCP servers must not ask for those in a form; only answer if you trust `{server}`."
            ));
        }
        specs.push(field);
    }
    if specs.is_empty() {
        return Err("the form has no fields".to_owned());
    }
    fields::check_field_specs(&specs).map_err(|errors| {
        errors
            .iter()
            .map(|(field, problem)| format!("{field}: {problem}"))
            .collect::<Vec<_>>()
            .join("; ")
    })?;
    Ok(specs)
}

/// A secret asked for as a number (a PIN) or an address would be answered as one,
/// which cannot be kept sealed and masked as a secret's text is.
fn not_sealable(name: &str) -> String {
    format!(
        "`{name}` asks for a password or a code as a number or an address, which toolgate cannot keep sealed"
    )
}

fn text(value: &Option<Cow<'static, str>>) -> Option<String> {
    value
        .as_deref()
        .map(str::trim)
        .filter(|text| !text.is_empty())
        .map(str::to_owned)
}

fn options(values: &[String]) -> Vec<SelectOption> {
    values
        .iter()
        .map(|value| SelectOption {
            value: value.clone(),
            label: value.clone(),
        })
        .collect()
}

fn titled(choices: &[rmcp::model::ConstTitle]) -> Vec<SelectOption> {
    choices
        .iter()
        .map(|choice| SelectOption {
            value: choice.const_.clone(),
            label: choice.title.clone(),
        })
        .collect()
}

/// A multi-select, whether its choices come titled or as bare values.
fn multiselect(
    field: &mut FieldSpec,
    choices: Vec<SelectOption>,
    (min_items, max_items): (Option<u64>, Option<u64>),
    default: &Option<Vec<String>>,
) {
    field.kind = FieldType::Multiselect;
    field.options = choices;
    field.min = min_items.map(|n| n as f64);
    field.max = max_items.map(|n| n as f64);
    field.default = default
        .clone()
        .map(|items| Value::Array(items.into_iter().map(Value::String).collect()));
}

fn field_of(name: &str, definition: &PrimitiveSchemaDefinition) -> Result<FieldSpec, String> {
    let mut field = FieldSpec::text(name);
    let (title, description) = match definition {
        PrimitiveSchemaDefinition::String(string) => {
            field.kind = match string.format {
                None => FieldType::Text,
                Some(StringFormat::Email) => FieldType::Email,
                Some(StringFormat::Uri) => FieldType::Url,
                Some(StringFormat::Date) => FieldType::Date,
                Some(StringFormat::DateTime) => FieldType::Datetime,
                Some(other) => return Err(format!("`{name}`: unsupported format {other:?}")),
            };
            if field.kind == FieldType::Text {
                field.min = string.min_length.map(f64::from);
                field.max = string.max_length.map(f64::from);
            }
            field.default = string.default.clone().map(Value::String);
            (&string.title, &string.description)
        }
        PrimitiveSchemaDefinition::Number(number) => {
            field.kind = FieldType::Number;
            field.min = number.minimum;
            field.max = number.maximum;
            field.default = number
                .default
                .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number));
            (&number.title, &number.description)
        }
        PrimitiveSchemaDefinition::Integer(integer) => {
            field.kind = FieldType::Integer;
            field.min = integer.minimum.map(|n| n as f64);
            field.max = integer.maximum.map(|n| n as f64);
            field.default = integer.default.map(Value::from);
            (&integer.title, &integer.description)
        }
        PrimitiveSchemaDefinition::Boolean(boolean) => {
            field.kind = FieldType::Boolean;
            field.default = boolean.default.map(Value::Bool);
            (&boolean.title, &boolean.description)
        }
        PrimitiveSchemaDefinition::Enum(EnumSchema::Single(SingleSelectEnumSchema::Untitled(
            single,
        ))) => {
            field.kind = FieldType::Select;
            field.options = options(&single.enum_);
            field.default = single.default.clone().map(Value::String);
            (&single.title, &single.description)
        }
        PrimitiveSchemaDefinition::Enum(EnumSchema::Single(SingleSelectEnumSchema::Titled(
            single,
        ))) => {
            field.kind = FieldType::Select;
            field.options = titled(&single.one_of);
            field.default = single.default.clone().map(Value::String);
            (&single.title, &single.description)
        }
        PrimitiveSchemaDefinition::Enum(EnumSchema::Legacy(legacy)) => {
            field.kind = FieldType::Select;
            field.options = match &legacy.enum_names {
                Some(names) if names.len() == legacy.enum_.len() => legacy
                    .enum_
                    .iter()
                    .zip(names)
                    .map(|(value, label)| SelectOption {
                        value: value.clone(),
                        label: label.clone(),
                    })
                    .collect(),
                Some(_) => {
                    return Err(format!(
                        "`{name}`: enumNames does not match enum one for one"
                    ));
                }
                None => options(&legacy.enum_),
            };
            field.default = legacy.default.clone().map(Value::String);
            (&legacy.title, &legacy.description)
        }
        PrimitiveSchemaDefinition::Enum(EnumSchema::Multi(MultiSelectEnumSchema::Untitled(
            multi,
        ))) => {
            multiselect(
                &mut field,
                options(&multi.items.enum_),
                (multi.min_items, multi.max_items),
                &multi.default,
            );
            (&multi.title, &multi.description)
        }
        PrimitiveSchemaDefinition::Enum(EnumSchema::Multi(MultiSelectEnumSchema::Titled(
            multi,
        ))) => {
            multiselect(
                &mut field,
                titled(&multi.items.any_of),
                (multi.min_items, multi.max_items),
                &multi.default,
            );
            (&multi.title, &multi.description)
        }
        _ => return Err(format!("`{name}`: a kind of property toolgate cannot show")),
    };
    field.label = text(title);
    field.description = text(description);
    Ok(field)
}

/// Whether a field asks, in its name, label or description, for what forms must not.
/// The words are read as a person sees them: without invisible characters (which would
/// split `pass\u{200B}word` unseen) and with look-alike and styled letters read as the
/// Latin ones they imitate (`раssword` in Cyrillic, fullwidth `ＰＩＮ`).
fn looks_sensitive(field: &FieldSpec) -> bool {
    sounds_sensitive(&format!(
        "{} {} {}",
        field.name.replace(['_', '-'], " "),
        field.label.as_deref().unwrap_or_default(),
        field.description.as_deref().unwrap_or_default()
    ))
}

/// Whether `text` speaks of a password, a key or the like, read as [`looks_sensitive`]
/// says.
fn sounds_sensitive(text: &str) -> bool {
    let said: String = text
        .chars()
        .filter(|c| !is_unseen(*c))
        .map(unseen::folded)
        .collect();
    SENSITIVE_WORDS.iter().any(|word| said.contains(word))
        || said
            .split(|c: char| !c.is_alphanumeric())
            .any(|word| matches!(word, "pin" | "otp" | "mfa" | "ssn" | "cvc"))
}

/// The URL of a URL-mode elicitation, if it is one a card may offer: http(s), with a
/// host, no user name or password in it (`https://bank.example@evil.example/` reads as
/// the bank), and not absurdly long.
pub fn checked_url(url: &str) -> Result<String, String> {
    if url.chars().count() > MAX_URL_CHARS {
        return Err(format!("the URL is longer than {MAX_URL_CHARS} characters"));
    }
    if url.chars().any(char::is_control) {
        return Err("the URL holds control characters".to_owned());
    }
    let parsed = reqwest::Url::parse(url).map_err(|err| format!("not a URL: {err}"))?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return Err(format!("a `{}:` URL cannot be opened", parsed.scheme()));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err("the URL has no host".to_owned());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the URL carries a user name or password".to_owned());
    }
    Ok(parsed.to_string())
}

/// The `content` of an accepted form: each field the user answered, as the schema
/// types it (numbers as numbers, booleans as booleans, multi-selects as arrays).
pub fn content_of(fields: &[FieldSpec], answered: &Map<String, Value>) -> Value {
    let content: Map<String, Value> = fields
        .iter()
        .filter_map(|field| {
            answered
                .get(&field.name)
                .filter(|value| !fields::is_empty(value))
                .map(|value| (field.name.clone(), value.clone()))
        })
        .collect();
    Value::Object(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> ElicitationSchema {
        serde_json::from_value(value).expect("an elicitation schema")
    }

    fn every_kind() -> ElicitationSchema {
        schema(json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "title": "Your name", "minLength": 2, "maxLength": 40},
                "email": {"type": "string", "format": "email"},
                "homepage": {"type": "string", "format": "uri"},
                "birthday": {"type": "string", "format": "date"},
                "meeting": {"type": "string", "format": "date-time"},
                "age": {"type": "integer", "minimum": 0, "maximum": 150, "default": 30},
                "budget": {"type": "number", "minimum": 0.5, "maximum": 1000.5},
                "subscribe": {"type": "boolean", "default": true},
                "colour": {"type": "string", "enum": ["red", "green", "blue"], "default": "green"},
                "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
                "legacy_pick": {"type": "string", "enum": ["a", "b"], "enumNames": ["Option A", "Option B"]},
                "toppings": {"type": "array", "items": {"type": "string", "enum": ["cheese", "ham"]}, "minItems": 1, "maxItems": 2, "default": ["cheese"]},
                "extras": {"type": "array", "items": {"anyOf": [{"const": "x1", "title": "Extra one"}]}, "maxItems": 1}
            },
            "required": ["name", "colour"]
        }))
    }

    #[test]
    fn every_kind_of_the_spec_becomes_a_field() {
        let fields = fields_of(&every_kind(), "", "test").expect("convertible");
        let kind = |name: &str| {
            fields
                .iter()
                .find(|f| f.name == name)
                .unwrap_or_else(|| panic!("{name} missing"))
                .clone()
        };
        assert_eq!(kind("name").kind, FieldType::Text);
        assert_eq!(
            (kind("name").min, kind("name").max),
            (Some(2.0), Some(40.0))
        );
        assert_eq!(kind("name").label.as_deref(), Some("Your name"));
        assert!(kind("name").required && kind("colour").required);
        assert!(!kind("email").required);
        assert_eq!(kind("email").kind, FieldType::Email);
        assert_eq!(kind("homepage").kind, FieldType::Url);
        assert_eq!(kind("birthday").kind, FieldType::Date);
        assert_eq!(kind("meeting").kind, FieldType::Datetime);
        assert_eq!(kind("age").kind, FieldType::Integer);
        assert_eq!(kind("age").default, Some(json!(30)));
        assert_eq!(kind("budget").kind, FieldType::Number);
        assert_eq!(kind("budget").min, Some(0.5));
        assert_eq!(kind("subscribe").default, Some(json!(true)));
        assert_eq!(kind("colour").kind, FieldType::Select);
        assert_eq!(kind("colour").default, Some(json!("green")));
        assert_eq!(kind("size").options[1].label, "Large");
        assert_eq!(kind("legacy_pick").options[0].label, "Option A");
        assert_eq!(kind("toppings").kind, FieldType::Multiselect);
        assert_eq!(
            (kind("toppings").min, kind("toppings").max),
            (Some(1.0), Some(2.0))
        );
        assert_eq!(kind("toppings").default, Some(json!(["cheese"])));
        assert_eq!(kind("extras").options[0].label, "Extra one");
    }

    #[test]
    fn a_default_of_every_kind_becomes_the_fields_valid_default() {
        let fields = fields_of(
            &schema(json!({"type": "object", "properties": {
                "name": {"type": "string", "default": "Ada"},
                "email": {"type": "string", "format": "email", "default": "ada@example.com"},
                "homepage": {"type": "string", "format": "uri", "default": "https://example.com"},
                "birthday": {"type": "string", "format": "date", "default": "1815-12-10"},
                "meeting": {"type": "string", "format": "date-time", "default": "2025-03-31T17:30:00+02:00"},
                "age": {"type": "integer", "default": 36},
                "budget": {"type": "number", "default": 2.5},
                "subscribe": {"type": "boolean", "default": false},
                "colour": {"type": "string", "enum": ["red", "green"], "default": "red"},
                "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}], "default": "l"},
                "legacy_pick": {"type": "string", "enum": ["a", "b"], "enumNames": ["Option A", "Option B"], "default": "b"},
                "toppings": {"type": "array", "items": {"type": "string", "enum": ["cheese", "ham"]}, "default": ["ham"]},
                "extras": {"type": "array", "items": {"anyOf": [{"const": "x1", "title": "Extra one"}, {"const": "x2", "title": "Extra two"}]}, "default": ["x2"]}
            }})),
            "",
            "test",
        )
        .expect("convertible");
        let expected = [
            ("name", json!("Ada")),
            ("email", json!("ada@example.com")),
            ("homepage", json!("https://example.com")),
            ("birthday", json!("1815-12-10")),
            ("meeting", json!("2025-03-31T17:30:00+02:00")),
            ("age", json!(36)),
            ("budget", json!(2.5)),
            ("subscribe", json!(false)),
            ("colour", json!("red")),
            ("size", json!("l")),
            ("legacy_pick", json!("b")),
            ("toppings", json!(["ham"])),
            ("extras", json!(["x2"])),
        ];
        for (name, default) in expected {
            let field = fields
                .iter()
                .find(|f| f.name == name)
                .unwrap_or_else(|| panic!("{name} missing"));
            assert_eq!(field.default, Some(default), "{name}");
        }
        // Each default is one the field itself accepts, so the card can show it as is.
        fields::check_field_specs(&fields).expect("every default is valid for its field");
    }

    #[test]
    fn the_converted_fields_validate_what_the_card_sends_and_answer_typed_content() {
        let fields = fields_of(&every_kind(), "", "test").expect("convertible");
        let inputs = json!({"name": "Ada", "colour": "blue", "age": "41", "subscribe": "false",
            "toppings": ["ham"], "meeting": "2025-03-31T17:30+02:00"});
        let accepted =
            fields::validate_inputs(&fields, inputs.as_object().expect("object")).expect("valid");
        let content = content_of(&fields, &accepted);
        assert_eq!(content["age"], json!(41));
        assert_eq!(content["subscribe"], json!(false));
        assert_eq!(content["toppings"], json!(["ham"]));
        assert_eq!(content["meeting"], json!("2025-03-31T17:30:00+02:00"));
        let bad = json!({"name": "A", "colour": "pink", "toppings": ["ham", "cheese", "ham"]});
        let errors = fields::validate_inputs(&fields, bad.as_object().expect("object"))
            .expect_err("invalid");
        assert!(errors.contains_key("name") && errors.contains_key("colour"));
    }

    #[test]
    fn a_field_asking_for_a_secret_carries_a_warning() {
        let fields = fields_of(
            &schema(json!({"type": "object", "properties": {
                "password": {"type": "string", "description": "Your account password"},
                "city": {"type": "string"}}})),
            "Sign in",
            "files",
        )
        .expect("convertible");
        let warning = fields[1].warning.as_deref().unwrap_or_default();
        assert_eq!(fields[1].name, "password");
        assert!(warning.contains("`files`"), "{warning}");
        assert_eq!(fields[0].warning, None);
    }

    #[test]
    fn a_secret_asked_for_in_disguise_still_carries_the_warning() {
        for (label, description) in [
            // An invisible space splits the word; look-alike Cyrillic letters.
            ("Pass\u{200B}word", ""),
            ("\u{0420}\u{0430}ssword", ""),
            ("Your to\u{2060}ken", ""),
            // Other words for the same.
            ("Passcode", ""),
            ("Code", "The 6-digit OTP from your app"),
            ("2FA code", ""),
            ("Personal access token (PAT)", ""),
            ("Kennwort", ""),
            ("Passwort", ""),
            ("Authenticator code", ""),
            ("MFA", ""),
            ("Wallet seed phrase", ""),
            ("Card CVC", ""),
            ("SSN", ""),
            // Small capitals, and a default-ignorable character Unicode reserves.
            ("ᴘᴀꜱꜱᴡᴏʀᴅ", ""),
            ("Pass\u{E0080}word", ""),
            // A Greek capital Nu, read as `n` in its own case (`ν` would read `v`).
            ("PI\u{039D}", ""),
        ] {
            let fields = fields_of(
                &schema(json!({"type": "object", "properties": {
                    "answer": {"type": "string", "title": label, "description": description}}})),
                "",
                "files",
            )
            .expect("convertible");
            assert!(
                fields[0].warning.is_some(),
                "no warning for {label:?} {description:?}"
            );
        }
        for label in ["City", "Topic", "Hotpot recipe", "Spinach", "Option"] {
            let fields = fields_of(
                &schema(json!({"type": "object", "properties": {
                    "answer": {"type": "string", "title": label}}})),
                "What should we call the trip?",
                "files",
            )
            .expect("convertible");
            assert_eq!(fields[0].warning, None, "{label}");
        }
        // The question's own words ask for it; the field is called anything.
        let fields = fields_of(
            &schema(json!({"type": "object", "properties": {
                "answer": {"type": "string", "title": "Answer"},
                "remember": {"type": "boolean", "title": "Remember me"}}})),
            "Your session expired: enter your pass\u{200B}word to continue",
            "files",
        )
        .expect("convertible");
        assert!(fields[0].warning.is_some(), "{fields:?}");
        assert_eq!(
            fields[0].kind,
            FieldType::Secret,
            "the one text field is the password asked for"
        );
        assert_eq!(fields[1].warning, None, "a tick box takes no password");
        // Two text fields under such words: which one is meant cannot be told, so
        // both are taken for secrets; a field that says it is the password leaves the
        // others as they are.
        for (properties, secret) in [
            (
                json!({"user": {"type": "string"}, "answer": {"type": "string"}}),
                vec!["answer", "user"],
            ),
            (
                json!({"user": {"type": "string"}, "password": {"type": "string"}}),
                vec!["password", "user"],
            ),
        ] {
            let fields = fields_of(
                &schema(json!({"type": "object", "properties": properties})),
                "Enter your password to continue",
                "files",
            )
            .expect("convertible");
            let secrets: Vec<&str> = fields
                .iter()
                .filter(|field| field.is_secret())
                .map(|field| field.name.as_str())
                .collect();
            assert_eq!(secrets, secret, "{fields:?}");
        }
        // A field named for a hint does not leave the others in the clear.
        let fields = fields_of(
            &schema(json!({"type": "object", "properties": {
                "password_hint": {"type": "string", "title": "Password hint"},
                "answer": {"type": "string"}}})),
            "Enter your password",
            "files",
        )
        .expect("convertible");
        assert!(fields.iter().all(FieldSpec::is_secret), "{fields:?}");
        // A PIN asked for as a number, by the question or by the field, is not shown:
        // alone, beside a text field or a tick box, or beside a field named for a hint;
        // nor is an address named for a password.
        for (properties, message) in [
            (
                json!({"code": {"type": "integer", "title": "Code"}}),
                "Enter your card's PIN",
            ),
            (
                json!({"code": {"type": "integer", "title": "PIN code"}}),
                "Sign in",
            ),
            (
                json!({"code": {"type": "integer"}, "note": {"type": "string"}}),
                "Enter your card's PIN",
            ),
            (
                json!({"code": {"type": "integer"}, "note": {"type": "boolean"}}),
                "Enter your card's PIN",
            ),
            (
                json!({"pin_hint": {"type": "string"}, "code": {"type": "integer"}}),
                "Enter your card's PIN",
            ),
            (
                json!({"password": {"type": "string", "format": "uri"}}),
                "Where to sign in",
            ),
        ] {
            let refused = fields_of(
                &schema(json!({"type": "object", "properties": properties})),
                message,
                "files",
            );
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|why| why.contains("cannot keep sealed")),
                "{properties} under {message:?}: {refused:?}"
            );
        }
    }

    #[test]
    fn a_form_of_too_many_fields_is_refused_before_its_names_are_matched() {
        let names: Vec<String> = (0..50_000).map(|n| format!("field_{n:05}")).collect();
        let properties: Map<String, Value> = names
            .iter()
            .map(|name| (name.clone(), json!({"type": "string"})))
            .collect();
        let huge = schema(json!({"type": "object", "properties": properties,
            "required": names}));
        assert_eq!(
            fields_of(&huge, "", "test").map(|_| ()),
            Err("the form lists 50000 fields; at most 64".to_owned())
        );
        let long_required = schema(json!({"type": "object",
            "properties": {"a": {"type": "string"}},
            "required": vec!["a"; 65]}));
        assert_eq!(
            fields_of(&long_required, "", "test").map(|_| ()),
            Err("the form lists 65 fields; at most 64".to_owned())
        );
    }

    #[test]
    fn shapes_toolgate_cannot_show_are_refused_with_a_reason() {
        let bad_name = schema(json!({"type": "object", "properties": {
            "white space": {"type": "string"}}}));
        assert!(fields_of(&bad_name, "", "s").is_err());
        let empty = schema(json!({"type": "object", "properties": {}}));
        assert!(fields_of(&empty, "", "s").is_err());
        let ghost = schema(
            json!({"type": "object", "properties": {"a": {"type": "string"}},
            "required": ["b"]}),
        );
        assert!(fields_of(&ghost, "", "s").unwrap_err().contains("`b`"));
    }

    #[test]
    fn only_plain_web_urls_are_offered() {
        assert!(checked_url("https://auth.example.com/sign-in?x=1").is_ok());
        for bad in [
            "javascript:alert(1)",
            "data:text/html,hi",
            "file:///etc/passwd",
            "https://bank.example@evil.example/",
            "https://user:pw@evil.example/",
            "https://",
            "https://example.com/\u{1b}[31m",
        ] {
            assert!(checked_url(bad).is_err(), "{bad}");
        }
    }
}
