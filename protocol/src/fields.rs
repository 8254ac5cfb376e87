//! What a tool asks of the user, and the rules a value must follow.
//!
//! `check_field_specs` judges a definition (run when a tool is loaded and when a
//! request is created); `validate_inputs` judges what the user typed (run in the card
//! as they type and on the server when they submit).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, RwLock};

use regex_lite::{Regex, RegexBuilder};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Field name → what is wrong with it.
pub type FieldErrors = BTreeMap<String, String>;

/// How much one request's field definitions and values may ask of the server and the
/// card. The defaults suit most deployments; a server may change them (the
/// `TOOLGATE_MAX_*` settings of the README), and the web chat applies the server's,
/// which `GET /api/info` tells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InputLimits {
    /// Most fields one request may ask for.
    pub fields: usize,
    /// Most options a select or multiselect may offer.
    pub options: usize,
    /// Longest `validation` pattern, in characters.
    pub pattern_chars: usize,
    /// Most memory a compiled pattern may take: `(?:a*){2000}` is short but compiles
    /// huge.
    pub pattern_bytes: usize,
    /// Deepest nesting of groups and repetitions in a pattern.
    pub pattern_nesting: u32,
    /// Longest value any field accepts, in characters.
    pub value_chars: usize,
    /// Longest label, description, placeholder, option or default of a definition.
    pub definition_chars: usize,
    /// Longest chain of `visible_if` rules (a field shown by a field shown by …).
    pub visible_if_depth: usize,
}

impl InputLimits {
    pub const DEFAULT: InputLimits = InputLimits {
        fields: 64,
        options: 200,
        pattern_chars: 500,
        pattern_bytes: 16 * 1024,
        pattern_nesting: 16,
        value_chars: 20_000,
        definition_chars: 2_000,
        visible_if_depth: 8,
    };
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits::DEFAULT
    }
}

static LIMITS: RwLock<InputLimits> = RwLock::new(InputLimits::DEFAULT);

/// The limits every check of this process applies.
pub fn limits() -> InputLimits {
    *LIMITS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Sets the limits every later check of this process applies: the server at start-up,
/// the web chat when the server has said which it uses.
pub fn set_limits(limits: InputLimits) {
    *LIMITS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = limits;
}

/// What a tool needs from the user before it can run.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct InputRequestSpec {
    pub reason: String,
    pub fields: Vec<FieldSpec>,
    /// The seed's flag; `true` means `save_for: session`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub save_for_session: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_for: Option<SaveFor>,
}

impl InputRequestSpec {
    /// How long submitted values are remembered unless a field says otherwise.
    pub fn save_for(&self) -> SaveFor {
        effective_save_for(self.save_for, self.save_for_session)
    }
}

/// `save_for` wins over the seed's `save_for_session` flag; neither means `call`.
pub fn effective_save_for(save_for: Option<SaveFor>, save_for_session: bool) -> SaveFor {
    match (save_for, save_for_session) {
        (Some(scope), _) => scope,
        (None, true) => SaveFor::Session,
        (None, false) => SaveFor::Call,
    }
}

/// How long a submitted value is remembered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum SaveFor {
    /// Only for the tool call that asked.
    #[default]
    Call,
    /// For the rest of the conversation.
    Session,
    /// For every conversation of the user.
    User,
}

impl SaveFor {
    pub fn as_str(self) -> &'static str {
        match self {
            SaveFor::Call => "call",
            SaveFor::Session => "session",
            SaveFor::User => "user",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "call" => Some(SaveFor::Call),
            "session" => Some(SaveFor::Session),
            "user" => Some(SaveFor::User),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    #[default]
    Text,
    Number,
    Select,
    Boolean,
    Date,
    Email,
    Url,
    Textarea,
    Secret,
    Multiselect,
    /// A whole number.
    Integer,
    /// A date and time with its offset from UTC (RFC 3339), e.g. `2025-03-31T17:30:00+02:00`.
    Datetime,
}

impl FieldType {
    pub const ALL: [FieldType; 12] = [
        FieldType::Text,
        FieldType::Number,
        FieldType::Select,
        FieldType::Boolean,
        FieldType::Date,
        FieldType::Email,
        FieldType::Url,
        FieldType::Textarea,
        FieldType::Secret,
        FieldType::Multiselect,
        FieldType::Integer,
        FieldType::Datetime,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FieldType::Text => "text",
            FieldType::Number => "number",
            FieldType::Select => "select",
            FieldType::Boolean => "boolean",
            FieldType::Date => "date",
            FieldType::Email => "email",
            FieldType::Url => "url",
            FieldType::Textarea => "textarea",
            FieldType::Secret => "secret",
            FieldType::Multiselect => "multiselect",
            FieldType::Integer => "integer",
            FieldType::Datetime => "datetime",
        }
    }

    fn has_options(self) -> bool {
        matches!(self, FieldType::Select | FieldType::Multiselect)
    }
}

/// One choice of a select or multiselect field. Written either as a bare string or
/// as `{ "value": …, "label": … }`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SelectOption {
    pub value: String,
    pub label: String,
}

// Written by hand: read as a bare string or an object whose label may be left out;
// always written back as an object with both.
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for SelectOption {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        let schema = serde_json::json!({
            "description": "One choice of a select or multiselect field: a bare string (value and \
                label alike), or `value` with an optional `label`. The server always answers \
                with both.",
            "oneOf": [
                { "type": "string", "example": "production" },
                {
                    "type": "object",
                    "properties": {
                        "value": { "type": "string" },
                        "label": { "type": ["string", "null"] },
                    },
                    "required": ["value"],
                    "example": { "value": "staging", "label": "Staging" },
                },
            ],
        });
        utoipa::openapi::RefOr::T(serde_json::from_value(schema).unwrap_or_default())
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for SelectOption {}

impl<'de> Deserialize<'de> for SelectOption {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Bare(String),
            Full {
                value: String,
                #[serde(default)]
                label: Option<String>,
            },
        }
        Ok(match Written::deserialize(deserializer)? {
            Written::Bare(value) => SelectOption {
                label: value.clone(),
                value,
            },
            Written::Full { value, label } => SelectOption {
                label: label.unwrap_or_else(|| value.clone()),
                value,
            },
        })
    }
}

/// Shows a field only when another field has a given value (`equals`), one of several
/// (`one_of`), or, with neither, any non-empty value other than `false`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VisibleIf {
    pub field: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub equals: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub one_of: Option<Vec<Value>>,
}

impl VisibleIf {
    /// Whether the named value meets the rule.
    pub fn holds(&self, values: &Map<String, Value>) -> bool {
        let actual = values.get(&self.field);
        if let Some(expected) = &self.equals {
            actual.is_some_and(|a| loosely_equal(a, expected))
        } else if let Some(choices) = &self.one_of {
            actual.is_some_and(|a| choices.iter().any(|c| loosely_equal(a, c)))
        } else {
            actual.is_some_and(|a| !is_empty(a) && a != &Value::Bool(false))
        }
    }

    /// Whether the named value may be what the rule names, read as a service receiving
    /// it might: what [`holds`](Self::holds) accepts, and also any item of a list (a
    /// multiselect's value is one) or of a comma-separated text, text without regard to
    /// case, surrounding spaces, invisible characters or styled and look-alike letters
    /// (fullwidth, bold, circled, Cyrillic; a value holding any other character that
    /// compatibility normalisation changes is taken to hold anything), numbers by
    /// value, and any object (which could mean anything). For approval conditions, where
    /// a call the rule means must not slip by written another way (`["production"]`,
    /// `"Production "`, `"staging,production"`, `"５"` for `5`). The field is also
    /// looked for under any name a service might take for its own
    /// ([`name_key`](crate::unseen::name_key): `Database`, `data_base`, `databaſe`), as
    /// a service that matches names loosely would read `{"Database": "production"}`.
    pub fn may_hold(&self, values: &Map<String, Value>) -> bool {
        if self.holds(values) {
            return true;
        }
        // `None`: any value but an empty one or `false`.
        let expected: Option<Vec<&Value>> = match (&self.equals, &self.one_of) {
            (Some(expected), _) => Some(vec![expected]),
            (None, Some(choices)) => Some(choices.iter().collect()),
            (None, None) => None,
        };
        self.values_named(values).any(|actual| match &expected {
            Some(expected) => any_item(actual, &|item| {
                expected.iter().any(|e| same_meaning(item, e))
            }),
            None => !is_empty(actual) && actual != &Value::Bool(false),
        })
    }

    /// [`may_hold`](Self::may_hold), read as a service deciding on the value itself
    /// (`if (args.force)`, `if not args.get("dry_run")`), for approval conditions: a
    /// rule naming no value (`{field = "force"}`), or `true`, holds for any value
    /// JavaScript or Python takes as true (`" "`, `"no"`, `1`, `[]`, `{}`); a rule naming
    /// `false` for any value either takes as false (`0`, `""`, `[]`, `{}`, `null`), and
    /// for the value left out under the rule's own name (`if (!args.dry_run)` reads it
    /// as false, whatever `DryRun` says).
    pub fn may_hold_for_a_service(&self, values: &Map<String, Value>) -> bool {
        if self.may_hold(values) {
            return true;
        }
        let expected: Vec<&Value> = match (&self.equals, &self.one_of) {
            (Some(expected), _) => vec![expected],
            (None, Some(choices)) => choices.iter().collect(),
            (None, None) => vec![&Value::Bool(true)],
        };
        // Left out under the rule's own name (a look-alike name beside it is not it, to a
        // service reading names strictly), the value is false and null to a service.
        if !values.contains_key(&self.field)
            && expected
                .iter()
                .any(|expected| matches!(expected, Value::Bool(false) | Value::Null))
        {
            return true;
        }
        self.values_named(values).any(|actual| {
            expected.iter().any(|expected| match expected {
                Value::Bool(true) => true_to_a_service(actual),
                Value::Bool(false) => false_to_a_service(actual),
                _ => false,
            })
        })
    }

    /// The values under the rule's field or any name a service may take for it
    /// ([`name_key`](crate::unseen::name_key)).
    fn values_named<'a>(
        &'a self,
        values: &'a Map<String, Value>,
    ) -> impl Iterator<Item = &'a Value> {
        let field = crate::unseen::name_key(&self.field);
        values
            .iter()
            .filter(move |(name, _)| **name == self.field || crate::unseen::name_key(name) == field)
            .map(|(_, value)| value)
    }
}

/// Whether JavaScript or Python takes `value` as true (`[]` and `{}` are, to the
/// first).
fn true_to_a_service(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(number) => number.as_f64() != Some(0.0),
        Value::String(text) => !text.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Whether JavaScript or Python takes `value` as false (`[]` and `{}` are, to the
/// second).
fn false_to_a_service(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(flag) => !flag,
        Value::Number(number) => number.as_f64() == Some(0.0),
        Value::String(text) => text.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

/// Whether `matches` accepts `value` or, for a list, any item at any depth; an object
/// is accepted as it is (it could hold anything).
fn any_item(value: &Value, matches: &impl Fn(&Value) -> bool) -> bool {
    match value {
        Value::Array(items) => items.iter().any(|item| any_item(item, matches)),
        Value::Object(_) => true,
        Value::String(text) if text.contains([',', ';']) => {
            matches(value)
                || text
                    .split([',', ';'])
                    .any(|part| matches(&Value::String(part.to_owned())))
        }
        other => matches(other),
    }
}

/// [`loosely_equal`], or the same text once [`plain`], or the same number.
fn same_meaning(actual: &Value, expected: &Value) -> bool {
    if loosely_equal(actual, expected) {
        return true;
    }
    let (Some(actual), Some(expected)) = (scalar_text(actual), scalar_text(expected)) else {
        return false;
    };
    let (actual, expected) = (plain(&actual), plain(&expected));
    // What compatibility normalisation may still read as other letters (a ligature `ﬁ`,
    // a squared `㎏`) could be the value meant: asked about rather than guessed.
    actual.chars().any(may_read_otherwise)
        || actual == expected
        || matches!(
            (actual.parse::<f64>(), expected.parse::<f64>()),
            (Ok(a), Ok(e)) if a == e
        )
}

/// Whether `c` is of the blocks whose characters Unicode's compatibility normalisation
/// (NFKC) turns into others: letterlike symbols, number forms, enclosed and squared
/// letters, modifier letters, ligatures, half- and fullwidth forms, mathematical
/// alphanumerics.
fn may_read_otherwise(c: char) -> bool {
    matches!(
        c,
        '\u{02B0}'..='\u{02FF}'
            | '\u{1D2C}'..='\u{1DBF}'
            | '\u{2070}'..='\u{218F}'
            | '\u{2460}'..='\u{24FF}'
            | '\u{3200}'..='\u{33FF}'
            | '\u{FB00}'..='\u{FB4F}'
            | '\u{FF00}'..='\u{FFEF}'
            | '\u{1D400}'..='\u{1D7FF}'
            | '\u{1F100}'..='\u{1F1FF}'
    )
}

/// Text as a reader, or a service that normalises what it receives, may take it:
/// without invisible characters, trimmed, in lower case, and with styled and look-alike
/// letters and digits as the ASCII ones they imitate ([`as_latin`](crate::unseen::as_latin):
/// fullwidth, mathematical bold `𝐩𝐫𝐨𝐝`, circled `ⓟⓡⓞⓓ`, which Unicode's compatibility
/// normalisation turns into `prod`; Cyrillic `рrоd` too, for a rule should rather ask
/// once too often than let a call slip by).
fn plain(text: &str) -> String {
    let plain: String = text
        .chars()
        .filter(|c| !crate::unseen::is_unseen(*c))
        .map(|c| match c {
            '\u{3000}' => ' ',
            _ => crate::unseen::folded(c),
        })
        .collect();
    plain.trim().to_owned()
}

/// One value the user is asked for.
///
/// Rules across a definition's fields, checked with the rest (422 naming the field):
/// names are unique within a request; `visible_if` names another field of the same
/// request, and its rules form no cycle and no chain deeper than 8; `min` is not above
/// `max`; a `default` passes its own field's checks; `validation` is a valid regular
/// expression (Rust `regex` syntax, matched against the whole value).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    #[cfg_attr(
        feature = "openapi",
        schema(pattern = "^[A-Za-z0-9_.-]{1,100}$", example = "quickbooks_realm_id")
    )]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: FieldType,
    #[serde(default = "required_by_default")]
    pub required: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placeholder: Option<String>,
    /// A regular expression the whole value must match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<SelectOption>,
    /// Number: smallest value. Text, textarea, secret: fewest characters.
    /// Multiselect: fewest choices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Like `min`, the other way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visible_if: Option<VisibleIf>,
    /// Overrides the request's `save_for` for this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub save_for: Option<SaveFor>,
    /// Lets the call's arguments fill this field (a value the model can read from the
    /// user's own words, such as a date). Off by default: a field of
    /// `requires_user_input` is filled only by the user. Never allowed on a secret.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub model_may_fill: bool,
    /// Tools whose fields name the same key share a remembered value; without one, a
    /// remembered value belongs to the tool it was given to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(pattern = "^[A-Za-z0-9_.-]{1,100}$"))]
    pub memory_key: Option<String>,
    /// A caution shown with the field, e.g. when a form from an MCP server seems to ask
    /// for a password or a key, which such forms must not do. toolgate's own words: a
    /// card made through the API may not carry one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(read_only))]
    pub warning: Option<String>,
}

fn required_by_default() -> bool {
    true
}

impl FieldSpec {
    /// Writes out, in the words a card shows (its label, description, placeholder and
    /// choices' titles), each character a person cannot see or that reorders what they
    /// see, and letters that only look Latin ([`crate::unseen::written_out`]): for a
    /// field that someone outside toolgate wrote (an MCP server, a caller of the API).
    /// Its name, values and default are left as they are: they go back as written.
    ///
    /// Written out, a text may grow past what a definition may hold: why, if so (the
    /// field is then not to be shown).
    #[must_use]
    pub fn write_out_words(&mut self) -> Option<String> {
        for words in [
            &mut self.label,
            &mut self.description,
            &mut self.placeholder,
        ]
        .into_iter()
        .flatten()
        {
            *words = crate::unseen::written_out(words);
        }
        for option in &mut self.options {
            option.label = crate::unseen::written_out(&option.label);
        }
        self.words_past_limits()
    }

    /// Cuts what only describes the field (its description and placeholder) to what a
    /// definition may hold, as a question's message is cut; why it still does not fit,
    /// if so (a label or a choice cut short would no longer say what it is).
    pub fn cut_descriptions_to_fit(&mut self) -> Option<String> {
        let most = limits().definition_chars;
        for words in [&mut self.description, &mut self.placeholder]
            .into_iter()
            .flatten()
        {
            if words.chars().count() > most {
                *words = words.chars().take(most - 1).chain(['…']).collect();
            }
        }
        self.words_past_limits()
    }

    fn words_past_limits(&self) -> Option<String> {
        oversized_text(self).map(|problem| {
            format!("{problem} once its hidden and look-alike characters are written out")
        })
    }
}

impl FieldSpec {
    /// A plain required text field; handy for tools defined in code and for tests.
    pub fn text(name: &str) -> Self {
        FieldSpec {
            name: name.to_owned(),
            label: None,
            description: None,
            kind: FieldType::Text,
            required: true,
            placeholder: None,
            validation: None,
            options: Vec::new(),
            min: None,
            max: None,
            default: None,
            visible_if: None,
            save_for: None,
            model_may_fill: false,
            memory_key: None,
            warning: None,
        }
    }

    pub fn label(&self) -> &str {
        self.label.as_deref().unwrap_or(&self.name)
    }

    pub fn is_secret(&self) -> bool {
        self.kind == FieldType::Secret
    }
}

/// Reads field definitions one by one, so a bad one is reported against its own name
/// rather than failing the whole document, then checks them together.
pub fn parse_field_specs(raw: &[Value]) -> Result<Vec<FieldSpec>, FieldErrors> {
    let mut errors = FieldErrors::new();
    // Refused before any per-field work, so a huge list costs nothing.
    if raw.len() > limits().fields {
        errors.insert("fields".to_owned(), too_many_fields(raw.len()));
        return Err(errors);
    }
    let mut specs = Vec::with_capacity(raw.len());
    for (index, value) in raw.iter().enumerate() {
        let key = value
            .get("name")
            .and_then(Value::as_str)
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .unwrap_or_else(|| format!("fields[{index}]"));
        if let Some(kind) = value.get("type") {
            let known = kind
                .as_str()
                .is_some_and(|kind| FieldType::ALL.iter().any(|t| t.as_str() == kind));
            if !known {
                errors.insert(key, unknown_type_message(kind));
                continue;
            }
        }
        match serde_json::from_value::<FieldSpec>(value.clone()) {
            Ok(spec) => specs.push(spec),
            Err(err) => {
                errors.insert(key, format!("invalid field definition: {err}"));
            }
        }
    }
    if let Err(more) = check_field_specs(&specs) {
        for (name, message) in more {
            errors.entry(name).or_insert(message);
        }
    }
    if errors.is_empty() {
        Ok(specs)
    } else {
        Err(errors)
    }
}

fn unknown_type_message(kind: &Value) -> String {
    let names: Vec<&str> = FieldType::ALL.iter().map(|t| t.as_str()).collect();
    let shown = match kind {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    format!(
        "unknown type `{shown}`; expected one of {}",
        names.join(", ")
    )
}

/// Checks a set of field definitions: names, regular expressions, options, bounds,
/// `visible_if` references and defaults. Errors are keyed by field name.
pub fn check_field_specs(fields: &[FieldSpec]) -> Result<(), FieldErrors> {
    let mut errors = FieldErrors::new();
    let limits = limits();
    if fields.len() > limits.fields {
        errors.insert("fields".to_owned(), too_many_fields(fields.len()));
        return Err(errors);
    }
    let mut seen = HashSet::new();
    let names: HashSet<&str> = fields.iter().map(|f| f.name.as_str()).collect();
    for (index, field) in fields.iter().enumerate() {
        let key = if field.name.is_empty() {
            format!("fields[{index}]")
        } else {
            field.name.clone()
        };
        let mut problem = None;
        if field.name.is_empty() {
            problem = Some("a field needs a name".to_owned());
        } else if !is_identifier(&field.name) {
            problem = Some(
                "a field name may use only letters, digits, `_`, `-` and `.`, 1 to 100 of them"
                    .into(),
            );
        } else if !seen.insert(field.name.as_str()) {
            problem = Some("duplicate field name".to_owned());
        } else if field.is_secret() && field.model_may_fill {
            problem =
                Some("a secret field is filled only by the user: remove model_may_fill".to_owned());
        } else if let Some(key) = &field.memory_key
            && !is_identifier(key)
        {
            problem = Some(
                "memory_key may use only letters, digits, `_`, `-` and `.`, 1 to 100 of them"
                    .to_owned(),
            );
        } else if let Some(text) = oversized_text(field) {
            problem = Some(text);
        } else if field.options.len() > limits.options {
            problem = Some(format!("at most {} options", limits.options));
        } else if let Some(pattern) = &field.validation
            && pattern.chars().count() > limits.pattern_chars
        {
            problem = Some(format!(
                "validation may be at most {} characters",
                limits.pattern_chars
            ));
        } else if let Some(pattern) = &field.validation
            && let Err(err) = compile_anchored(pattern)
        {
            problem = Some(format!(
                "validation is not a valid regular expression: {err}"
            ));
        } else if field.kind.has_options() && field.options.is_empty() {
            problem = Some(format!("a {} field needs options", field.kind.as_str()));
        } else if !field.kind.has_options() && !field.options.is_empty() {
            problem = Some(format!(
                "options are only for select and multiselect fields, not {}",
                field.kind.as_str()
            ));
        } else if let (Some(min), Some(max)) = (field.min, field.max)
            && min > max
        {
            problem = Some(format!("min ({min}) is greater than max ({max})"));
        } else if let Some(rule) = &field.visible_if {
            if rule.field == field.name {
                problem = Some("visible_if cannot name the field itself".to_owned());
            } else if !names.contains(rule.field.as_str()) {
                problem = Some(format!("visible_if names unknown field `{}`", rule.field));
            }
        }
        if problem.is_none()
            && let Some(default) = &field.default
            && let Err(message) = validate_value(field, default)
        {
            problem = Some(format!("default is not valid: {message}"));
        }
        if let Some(problem) = problem {
            errors.entry(key).or_insert(problem);
        }
    }
    if errors.is_empty()
        && let Some((name, problem)) = visibility_problem(fields)
    {
        errors.insert(name, problem);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Field names and memory keys: short, and safe in logs, URLs and HTML ids.
fn is_identifier(name: &str) -> bool {
    (1..=100).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn too_many_fields(count: usize) -> String {
    format!("at most {} fields, not {count}", limits().fields)
}

/// The first text of a definition longer than a card can sensibly show.
fn oversized_text(field: &FieldSpec) -> Option<String> {
    let most = limits().definition_chars;
    let long = |text: &str| text.chars().count() > most;
    let named = [
        ("label", field.label.as_deref()),
        ("description", field.description.as_deref()),
        ("placeholder", field.placeholder.as_deref()),
        ("warning", field.warning.as_deref()),
    ];
    if let Some((name, _)) = named.iter().find(|(_, text)| text.is_some_and(long)) {
        return Some(format!("{name} may be at most {most} characters"));
    }
    if field
        .options
        .iter()
        .any(|o| long(&o.value) || long(&o.label))
    {
        return Some(format!("an option may be at most {most} characters"));
    }
    if field
        .default
        .as_ref()
        .is_some_and(|d| d.to_string().chars().count() > most)
    {
        return Some(format!("default may be at most {most} characters"));
    }
    None
}

/// A `visible_if` chain that loops or is deeper than [`InputLimits::visible_if_depth`]. Each walk
/// stops after that many steps, so the check is linear in the number of fields.
fn visibility_problem(fields: &[FieldSpec]) -> Option<(String, String)> {
    let parent: HashMap<&str, &str> = fields
        .iter()
        .filter_map(|f| {
            f.visible_if
                .as_ref()
                .map(|r| (f.name.as_str(), r.field.as_str()))
        })
        .collect();
    let depth = limits().visible_if_depth;
    for start in parent.keys() {
        let mut current = *start;
        for _ in 0..depth {
            match parent.get(current) {
                Some(next) if next == start => {
                    return Some((
                        (*start).to_owned(),
                        "visible_if rules form a cycle".to_owned(),
                    ));
                }
                Some(next) => current = next,
                None => break,
            }
        }
        if parent.contains_key(current) {
            return Some((
                (*start).to_owned(),
                format!("visible_if chains may be at most {depth} deep"),
            ));
        }
    }
    None
}

/// Whether a field is shown (and so asked), given the values so far. A field hidden by
/// a field that is itself hidden is hidden too. Rules are read as leniently as approval
/// conditions ([`VisibleIf::may_hold`]): the value that decides may be the model's
/// (`"External "`), which the tool's service may well read as the one the rule names,
/// so when in doubt the field is shown and the user asked.
pub fn is_visible(fields: &[FieldSpec], field: &FieldSpec, values: &Map<String, Value>) -> bool {
    let mut current = field;
    for _ in 0..=limits().visible_if_depth {
        let Some(rule) = &current.visible_if else {
            return true;
        };
        if !rule.may_hold(values) {
            return false;
        }
        match fields.iter().find(|f| f.name == rule.field) {
            Some(parent) => current = parent,
            None => return true,
        }
    }
    // Only reachable through a cycle or a chain too deep, which `check_field_specs`
    // refuses.
    false
}

/// `"true"` from a form equals `true` in a rule; `"3"` equals `3`.
fn loosely_equal(actual: &Value, expected: &Value) -> bool {
    actual == expected || scalar_text(actual) == scalar_text(expected)
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

/// A value the user has not really given: absent, null, blank text or an empty list.
pub fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::String(text) => text.trim().is_empty(),
        Value::Array(items) => items.is_empty(),
        _ => false,
    }
}

/// Validates one field's value. `Ok(None)` means an optional field left empty;
/// `Ok(Some(v))` is the value in its normal form (numbers as numbers, booleans as
/// booleans).
pub fn validate_field(field: &FieldSpec, value: Option<&Value>) -> Result<Option<Value>, String> {
    match value {
        None => required_or_none(field),
        Some(value) if is_empty(value) => required_or_none(field),
        Some(value) => validate_value(field, value).map(Some),
    }
}

fn required_or_none(field: &FieldSpec) -> Result<Option<Value>, String> {
    if field.required {
        Err("This field is required".to_owned())
    } else {
        Ok(None)
    }
}

fn validate_value(field: &FieldSpec, value: &Value) -> Result<Value, String> {
    let limits = limits();
    let normal = match field.kind {
        FieldType::Text | FieldType::Textarea | FieldType::Secret => {
            let text = as_text(value).ok_or("Must be text")?;
            let length = text.chars().count();
            if length > limits.value_chars {
                return Err(format!("Must be at most {} characters", limits.value_chars));
            }
            let length = length as f64;
            if let Some(min) = field.min
                && length < min
            {
                return Err(format!("Must be at least {} characters", fmt_number(min)));
            }
            if let Some(max) = field.max
                && length > max
            {
                return Err(format!("Must be at most {} characters", fmt_number(max)));
            }
            Value::String(text)
        }
        FieldType::Integer => {
            let number = as_number(value)
                .filter(|n| n.fract() == 0.0 && n.abs() < 9.0e15)
                .ok_or("Must be a whole number")?;
            if let Some(min) = field.min
                && number < min
            {
                return Err(format!("Must be at least {}", fmt_number(min)));
            }
            if let Some(max) = field.max
                && number > max
            {
                return Err(format!("Must be at most {}", fmt_number(max)));
            }
            number_value(number)
        }
        FieldType::Datetime => {
            let text = as_text(value).ok_or(DATETIME_FORMAT)?;
            Value::String(normal_datetime(text.trim()).ok_or(DATETIME_FORMAT)?)
        }
        FieldType::Number => {
            let number = as_number(value).ok_or("Must be a number")?;
            if !kept_exactly(value, number) {
                return Err("Has too many digits to be kept exactly".into());
            }
            if let Some(min) = field.min
                && number < min
            {
                return Err(format!("Must be at least {}", fmt_number(min)));
            }
            if let Some(max) = field.max
                && number > max
            {
                return Err(format!("Must be at most {}", fmt_number(max)));
            }
            number_value(number)
        }
        FieldType::Select => {
            let text = as_text(value).ok_or("Must be one of the options")?;
            if !field.options.iter().any(|o| o.value == text) {
                return Err(one_of_message(field));
            }
            Value::String(text)
        }
        FieldType::Multiselect => {
            let items = value.as_array().ok_or("Must be a list of options")?;
            if items.len() > limits.options {
                return Err(format!("Choose at most {}", limits.options));
            }
            let mut chosen = Vec::with_capacity(items.len());
            for item in items {
                let text = as_text(item).ok_or("Must be a list of options")?;
                if !field.options.iter().any(|o| o.value == text) {
                    return Err(format!("`{text}` is not one of the options"));
                }
                if !chosen.contains(&text) {
                    chosen.push(text);
                }
            }
            let count = chosen.len() as f64;
            if let Some(min) = field.min
                && count < min
            {
                return Err(format!("Choose at least {}", fmt_number(min)));
            }
            if let Some(max) = field.max
                && count > max
            {
                return Err(format!("Choose at most {}", fmt_number(max)));
            }
            Value::Array(chosen.into_iter().map(Value::String).collect())
        }
        FieldType::Boolean => Value::Bool(as_bool(value).ok_or("Must be true or false")?),
        FieldType::Date => {
            let text = as_text(value).ok_or("Must be a date (YYYY-MM-DD)")?;
            if !is_date(text.trim()) {
                return Err("Must be a date (YYYY-MM-DD)".to_owned());
            }
            Value::String(text.trim().to_owned())
        }
        FieldType::Email => {
            let text = as_text(value).ok_or("Must be an email address")?;
            if !is_email(text.trim()) {
                return Err("Must be an email address".to_owned());
            }
            Value::String(text.trim().to_owned())
        }
        FieldType::Url => {
            let text = as_text(value).ok_or("Must be a URL starting with http:// or https://")?;
            if !is_url(text.trim()) {
                return Err("Must be a URL starting with http:// or https://".to_owned());
            }
            Value::String(text.trim().to_owned())
        }
    };
    if normal
        .as_str()
        .is_some_and(|text| text.chars().count() > limits.value_chars)
    {
        return Err(format!("Must be at most {} characters", limits.value_chars));
    }
    if let Some(pattern) = &field.validation {
        let subject = match &normal {
            Value::String(text) => Some(text.clone()),
            Value::Number(number) => Some(number.to_string()),
            _ => None,
        };
        if let Some(subject) = subject {
            let regex = compile_anchored(pattern)
                .map_err(|_| "This field's format rule is broken".to_owned())?;
            if !regex.is_match(&subject) {
                return Err("Does not match the expected format".to_owned());
            }
        }
    }
    Ok(normal)
}

/// Validates everything the user submitted for a request. Defaults fill what was left
/// out, hidden fields are dropped, and a name that is not a field is an error. On
/// success the map holds each visible field's value in its normal form.
pub fn validate_inputs(
    fields: &[FieldSpec],
    inputs: &Map<String, Value>,
) -> Result<Map<String, Value>, FieldErrors> {
    let mut errors = FieldErrors::new();
    for name in inputs.keys() {
        if !fields.iter().any(|f| &f.name == name) {
            errors.insert(name.clone(), "Not a field of this request".to_owned());
        }
    }
    let effective = with_defaults(fields, inputs);
    let mut accepted = Map::new();
    for field in fields {
        if !is_visible(fields, field, &effective) {
            continue;
        }
        match validate_field(field, effective.get(&field.name)) {
            Ok(Some(value)) => {
                accepted.insert(field.name.clone(), value);
            }
            Ok(None) => {}
            Err(message) => {
                errors.insert(field.name.clone(), message);
            }
        }
    }
    if errors.is_empty() {
        Ok(accepted)
    } else {
        Err(errors)
    }
}

/// The values with each field's default filled in where the values leave the field out.
/// A field they name keeps what they give it, even empty: a default is what a card is
/// pre-filled with (perhaps the model's proposal), and a user who clears it means it
/// empty.
pub fn with_defaults(fields: &[FieldSpec], values: &Map<String, Value>) -> Map<String, Value> {
    let mut effective = values.clone();
    for field in fields {
        if !effective.contains_key(&field.name)
            && let Some(default) = &field.default
        {
            effective.insert(field.name.clone(), default.clone());
        }
    }
    effective
}

/// A card's answers as sent: what [`validate_inputs`] accepted, and `null` for each shown
/// field the values name without a value, so that what the user cleared stays cleared
/// rather than being filled again by a default, a proposal or memory.
pub fn with_cleared(
    fields: &[FieldSpec],
    values: &Map<String, Value>,
    accepted: &Map<String, Value>,
) -> Map<String, Value> {
    let mut sent = accepted.clone();
    let effective = with_defaults(fields, values);
    for field in fields {
        let cleared =
            values.get(&field.name).is_some_and(is_empty) && !accepted.contains_key(&field.name);
        if cleared && is_visible(fields, field, &effective) {
            sent.insert(field.name.clone(), Value::Null);
        }
    }
    sent
}

/// The required fields that are shown but still have no value. A default decides
/// visibility but does not count as an answer: it only pre-fills the card.
pub fn missing_fields<'a>(
    fields: &'a [FieldSpec],
    values: &Map<String, Value>,
) -> Vec<&'a FieldSpec> {
    let effective = with_defaults(fields, values);
    fields
        .iter()
        .filter(|f| f.required && is_visible(fields, f, &effective))
        .filter(|f| values.get(&f.name).is_none_or(is_empty))
        .collect()
}

/// What a secret looks like anywhere but inside the tool that uses it.
pub const MASKED: &str = "••••••••";

/// Replaces the value of every secret field with [`MASKED`].
pub fn mask_secrets(fields: &[FieldSpec], values: &Map<String, Value>) -> Map<String, Value> {
    values
        .iter()
        .map(|(name, value)| {
            let secret = fields.iter().any(|f| &f.name == name && f.is_secret());
            // A cleared value (`null`) holds nothing to hide.
            let shown = if secret && !value.is_null() {
                Value::String(MASKED.to_owned())
            } else {
                value.clone()
            };
            (name.clone(), shown)
        })
        .collect()
}

fn one_of_message(field: &FieldSpec) -> String {
    let labels: Vec<&str> = field.options.iter().map(|o| o.label.as_str()).collect();
    format!("Must be one of: {}", labels.join(", "))
}

fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        _ => None,
    }
}

fn as_number(value: &Value) -> Option<f64> {
    let number = match value {
        Value::Number(number) => number.as_f64()?,
        Value::String(text) => text.trim().parse::<f64>().ok()?,
        _ => return None,
    };
    number.is_finite().then_some(number)
}

/// Whether `number`, read from `value`, is the whole number written there when it is
/// one (digits alone): past 2^53 a float rounds it, and the tool would get another
/// number than the user gave.
fn kept_exactly(value: &Value, number: f64) -> bool {
    // A JSON number past u64 was read as a float already: written whole, it was rounded.
    if let Value::Number(json) = value
        && json.is_f64()
        && number.fract() == 0.0
        && number.abs() >= 9_007_199_254_740_992.0
    {
        return false;
    }
    let Some(text) = as_text(value) else {
        return true;
    };
    let digits = text.trim().trim_start_matches(['+', '-']);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match text.trim().parse::<i128>() {
        // The float of a whole number below 2^127 converts back exactly.
        Ok(whole) => number as i128 == whole,
        // Past i128, far past what a float keeps of it.
        Err(_) => false,
    }
}

fn number_value(number: f64) -> Value {
    if number.fract() == 0.0 && number.abs() < 9.0e15 {
        Value::from(number as i64)
    } else {
        serde_json::Number::from_f64(number).map_or(Value::Null, Value::Number)
    }
}

/// A number as JSON writes it (`5`, not `5.0`): how limits are shown, in messages and in
/// the card's inputs alike.
pub fn fmt_number(number: f64) -> String {
    // `to_string` rather than `Display`: the browser then carries one JSON writer.
    serde_json::to_string(&number_value(number)).unwrap_or_default()
}

fn as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(flag) => Some(*flag),
        Value::String(text) => match text.trim() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        },
        _ => None,
    }
}

fn is_date(text: &str) -> bool {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes[4] != b'-' || bytes[7] != b'-' {
        return false;
    }
    let digits = |range: std::ops::Range<usize>| -> Option<u32> {
        let part = &text[range];
        part.bytes()
            .all(|b| b.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (Some(year), Some(month), Some(day)) = (digits(0..4), digits(5..7), digits(8..10)) else {
        return false;
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days_in_month).contains(&day)
}

const DATETIME_FORMAT: &str =
    "Must be a date and time with its time zone, like 2025-03-31T17:30:00+02:00";

/// An RFC 3339 date and time in its normal form (seconds always written), or `None`.
/// `2025-03-31T17:30+02:00` becomes `2025-03-31T17:30:00+02:00`; a lower-case `t`/`z`
/// is accepted.
fn normal_datetime(text: &str) -> Option<String> {
    let (date, rest) = text.split_at_checked(10)?;
    if !is_date(date) {
        return None;
    }
    let rest = rest.strip_prefix(['T', 't'])?;
    let zone_at = rest.find(['Z', 'z', '+', '-']).filter(|at| *at >= 5)?;
    let (time, zone) = rest.split_at(zone_at);
    let two_digits = |part: &str, most: u32| -> Option<u32> {
        (part.len() == 2 && part.bytes().all(|b| b.is_ascii_digit()))
            .then(|| part.parse().ok())
            .flatten()
            .filter(|n| *n <= most)
    };
    let mut parts = time.splitn(3, ':');
    let hour = two_digits(parts.next()?, 23)?;
    let minute = two_digits(parts.next()?, 59)?;
    let seconds = match parts.next() {
        None => "00".to_owned(),
        Some(seconds) => {
            let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
            two_digits(whole, 60)?;
            if !fraction.bytes().all(|b| b.is_ascii_digit()) || seconds.ends_with('.') {
                return None;
            }
            seconds.to_owned()
        }
    };
    let zone = match zone {
        "Z" | "z" => "Z".to_owned(),
        offset => {
            let (sign, rest) = offset.split_at_checked(1)?;
            if sign != "+" && sign != "-" {
                return None;
            }
            let (hours, minutes) = rest.split_once(':')?;
            two_digits(hours, 23)?;
            two_digits(minutes, 59)?;
            format!("{sign}{hours}:{minutes}")
        }
    };
    Some(format!("{date}T{hour:02}:{minute:02}:{seconds}{zone}"))
}

fn is_email(text: &str) -> bool {
    let Some((local, domain)) = text.rsplit_once('@') else {
        return false;
    };
    let clean =
        |part: &str| !part.is_empty() && !part.chars().any(|c| c.is_whitespace() || c == '@');
    clean(local)
        && clean(domain)
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !domain.contains("..")
}

fn is_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    let Some(rest) = rest else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = host.rsplit_once('@').map_or(host, |(_, host)| host);
    !host.is_empty() && !host.starts_with(':') && !text.chars().any(char::is_whitespace)
}

/// Compiles `^(?:pattern)$` so the rule covers the whole value, caching the result:
/// the same few patterns are checked on every keystroke and every submit.
fn compile_anchored(pattern: &str) -> Result<Regex, regex_lite::Error> {
    static CACHE: Mutex<Option<HashMap<String, Regex>>> = Mutex::new(None);
    let mut guard = CACHE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let cache = guard.get_or_insert_with(HashMap::new);
    if let Some(regex) = cache.get(pattern) {
        return Ok(regex.clone());
    }
    let regex = RegexBuilder::new(&format!("^(?:{pattern})$"))
        .size_limit(limits().pattern_bytes)
        .nest_limit(limits().pattern_nesting)
        .build()?;
    if cache.len() >= 512 {
        cache.clear();
    }
    cache.insert(pattern.to_owned(), regex.clone());
    Ok(regex)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn field(value: Value) -> FieldSpec {
        serde_json::from_value(value).expect("valid field")
    }

    fn inputs(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("object")
    }

    #[test]
    fn seed_realm_id_field_matches_whole_value_only() {
        let realm = field(
            json!({"name": "quickbooks_realm_id", "label": "QuickBooks Company ID",
            "type": "text", "required": true, "validation": "^[0-9]{10,20}$"}),
        );
        assert_eq!(
            validate_field(&realm, Some(&json!("9130346988354456"))),
            Ok(Some(json!("9130346988354456")))
        );
        let partial = field(json!({"name": "id", "validation": "[0-9]{3}"}));
        assert_eq!(
            validate_field(&partial, Some(&json!("abc1234"))),
            Err("Does not match the expected format".to_owned())
        );
        assert!(validate_field(&partial, Some(&json!("123"))).is_ok());
    }

    #[test]
    fn required_field_left_blank_is_refused_and_optional_is_not() {
        let required = FieldSpec::text("a");
        assert_eq!(
            validate_field(&required, Some(&json!("  "))),
            Err("This field is required".to_owned())
        );
        let optional = field(json!({"name": "b", "required": false}));
        assert_eq!(validate_field(&optional, None), Ok(None));
    }

    #[test]
    fn integers_are_whole_and_bounded() {
        let n = field(json!({"name": "n", "type": "integer", "min": 0, "max": 150}));
        assert_eq!(validate_field(&n, Some(&json!("42"))), Ok(Some(json!(42))));
        assert_eq!(validate_field(&n, Some(&json!(7.0))), Ok(Some(json!(7))));
        for bad in [json!(2.5), json!("2.5"), json!("many"), json!(true)] {
            assert_eq!(
                validate_field(&n, Some(&bad)),
                Err("Must be a whole number".into()),
                "{bad}"
            );
        }
        assert_eq!(
            validate_field(&n, Some(&json!(151))),
            Err("Must be at most 150".into())
        );
    }

    #[test]
    fn datetimes_need_a_time_zone_and_come_back_with_seconds() {
        let when = field(json!({"name": "when", "type": "datetime"}));
        let accepted = |text: &str| validate_field(&when, Some(&json!(text)));
        assert_eq!(
            accepted("2025-03-31T17:30+02:00"),
            Ok(Some(json!("2025-03-31T17:30:00+02:00")))
        );
        assert_eq!(
            accepted("2025-03-31t17:30:15.250z"),
            Ok(Some(json!("2025-03-31T17:30:15.250Z")))
        );
        for bad in [
            "2025-03-31T17:30",
            "2025-02-30T10:00Z",
            "2025-03-31 17:30Z",
            "2025-03-31T24:00Z",
            "2025-03-31T17:30+2:00",
            "2025-03-31T17:30:1.Z",
            "2025-03-31T17:30:00.Z",
            "2025-03-31T17:30Z02:00",
            "2025-03-31T17:30z02:00",
            "yesterday",
        ] {
            assert!(accepted(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn numbers_parse_from_text_and_respect_bounds() {
        let n = field(json!({"name": "n", "type": "number", "min": 1, "max": 10}));
        assert_eq!(validate_field(&n, Some(&json!("7"))), Ok(Some(json!(7))));
        assert_eq!(validate_field(&n, Some(&json!(2.5))), Ok(Some(json!(2.5))));
        assert_eq!(
            validate_field(&n, Some(&json!("seven"))),
            Err("Must be a number".into())
        );
        assert_eq!(
            validate_field(&n, Some(&json!(0))),
            Err("Must be at least 1".into())
        );
        assert_eq!(
            validate_field(&n, Some(&json!(11))),
            Err("Must be at most 10".into())
        );
    }

    #[test]
    fn a_whole_number_a_float_would_round_is_refused_not_changed() {
        let n = field(json!({"name": "n", "type": "number"}));
        let too_long = "Has too many digits to be kept exactly";
        for given in [
            json!(12345678901234567_u64),
            json!("12345678901234567"),
            json!("1".repeat(45)),
            serde_json::from_str("123456789012345678901").expect("a JSON number"),
        ] {
            assert_eq!(
                validate_field(&n, Some(&given)),
                Err(too_long.into()),
                "{given}"
            );
        }
        // Exactly representable, and numbers written as floats, pass as they are.
        assert_eq!(
            validate_field(&n, Some(&json!(9007199254740992_u64))),
            Ok(Some(json!(9007199254740992.0)))
        );
        assert_eq!(
            validate_field(&n, Some(&json!("1e20"))),
            Ok(Some(json!(1e20)))
        );
    }

    #[test]
    fn well_formed_email_url_date_and_boolean() {
        let email = field(json!({"name": "e", "type": "email"}));
        assert!(validate_field(&email, Some(&json!("a@b.co"))).is_ok());
        for bad in ["a@b", "ab.co", "a b@c.de", "a@.de"] {
            assert!(validate_field(&email, Some(&json!(bad))).is_err(), "{bad}");
        }
        let url = field(json!({"name": "u", "type": "url"}));
        assert!(validate_field(&url, Some(&json!("https://example.com/x"))).is_ok());
        for bad in ["example.com", "ftp://x", "https://", "http://a b"] {
            assert!(validate_field(&url, Some(&json!(bad))).is_err(), "{bad}");
        }
        let date = field(json!({"name": "d", "type": "date"}));
        assert!(validate_field(&date, Some(&json!("2024-02-29"))).is_ok());
        for bad in ["2023-02-29", "2024-13-01", "2024-1-01", "yesterday"] {
            assert!(validate_field(&date, Some(&json!(bad))).is_err(), "{bad}");
        }
        let flag = field(json!({"name": "f", "type": "boolean"}));
        assert_eq!(
            validate_field(&flag, Some(&json!("false"))),
            Ok(Some(json!(false)))
        );
        assert!(validate_field(&flag, Some(&json!("maybe"))).is_err());
    }

    #[test]
    fn select_and_multiselect_accept_only_their_options() {
        let db = field(json!({"name": "db", "type": "select",
            "options": ["production", {"value": "staging", "label": "Staging"}]}));
        assert!(validate_field(&db, Some(&json!("staging"))).is_ok());
        assert_eq!(
            validate_field(&db, Some(&json!("prod"))),
            Err("Must be one of: production, Staging".into())
        );
        let tags = field(
            json!({"name": "t", "type": "multiselect", "options": ["a", "b", "c"], "max": 2}),
        );
        assert_eq!(
            validate_field(&tags, Some(&json!(["a", "b", "a"]))),
            Ok(Some(json!(["a", "b"])))
        );
        assert!(validate_field(&tags, Some(&json!(["a", "z"]))).is_err());
        assert_eq!(
            validate_field(&tags, Some(&json!(["a", "b", "c"]))),
            Err("Choose at most 2".into())
        );
    }

    #[test]
    fn text_bounds_count_characters() {
        let pin = field(json!({"name": "pin", "type": "secret", "min": 4, "max": 6}));
        assert!(validate_field(&pin, Some(&json!("1234"))).is_ok());
        assert_eq!(
            validate_field(&pin, Some(&json!("123"))),
            Err("Must be at least 4 characters".into())
        );
    }

    #[test]
    fn definitions_with_mistakes_are_named() {
        let raw = vec![
            json!({"name": "a", "type": "colour"}),
            json!({"name": "b", "validation": "([0-9]"}),
            json!({"name": "c", "type": "select"}),
            json!({"name": "d", "type": "number", "min": 5, "max": 1}),
            json!({"name": "e", "visible_if": {"field": "nope"}}),
        ];
        let errors = parse_field_specs(&raw).expect_err("all bad");
        assert!(
            errors["a"].starts_with("unknown type `colour`"),
            "{errors:?}"
        );
        assert!(errors["b"].starts_with("validation is not a valid regular expression"));
        assert_eq!(errors["c"], "a select field needs options");
        assert_eq!(errors["d"], "min (5) is greater than max (1)");
        assert_eq!(errors["e"], "visible_if names unknown field `nope`");

        let duplicate = vec![json!({"name": "x"}), json!({"name": "x"})];
        assert_eq!(
            parse_field_specs(&duplicate).expect_err("dup")["x"],
            "duplicate field name"
        );
    }

    #[test]
    fn visible_if_hides_fields_and_their_dependants() {
        let fields = parse_field_specs(&[
            json!({"name": "auth", "type": "select", "options": ["none", "token"]}),
            json!({"name": "token", "type": "secret", "visible_if": {"field": "auth", "equals": "token"}}),
            json!({"name": "scope", "visible_if": {"field": "token"}}),
        ])
        .expect("valid");
        let accepted =
            validate_inputs(&fields, &inputs(json!({"auth": "none"}))).expect("hidden not asked");
        assert_eq!(accepted, inputs(json!({"auth": "none"})));
        let errors =
            validate_inputs(&fields, &inputs(json!({"auth": "token"}))).expect_err("asked");
        assert_eq!(errors["token"], "This field is required");
        let values = inputs(json!({"auth": "none", "token": "t"}));
        assert!(!is_visible(&fields, &fields[2], &values));
        // Written another way, the value still shows what it may mean.
        for auth in [json!("Token "), json!("TOKEN"), json!(["token"])] {
            let values = inputs(json!({"auth": auth}));
            assert!(is_visible(&fields, &fields[1], &values), "{auth}");
        }
    }

    #[test]
    fn submit_reports_every_bad_field_and_unknown_names() {
        let fields = parse_field_specs(&[
            json!({"name": "n", "type": "number"}),
            json!({"name": "e", "type": "email"}),
        ])
        .expect("valid");
        let errors = validate_inputs(&fields, &inputs(json!({"n": "x", "e": "y", "zz": 1})))
            .expect_err("bad");
        assert_eq!(errors.len(), 3);
        assert_eq!(errors["zz"], "Not a field of this request");
    }

    #[test]
    fn an_answer_that_names_a_field_keeps_it_even_empty() {
        let fields = vec![
            field(json!({"name": "date", "type": "date", "default": "2030-01-01"})),
            field(
                json!({"name": "cc", "type": "text", "required": false, "default": "x@example.com"}),
            ),
            field(json!({"name": "bcc", "type": "text", "required": false,
                "visible_if": {"field": "cc"}})),
        ];
        // Left out: the defaults stand.
        assert_eq!(
            validate_inputs(&fields, &inputs(json!({}))),
            Ok(inputs(json!({"date": "2030-01-01", "cc": "x@example.com"})))
        );
        // Cleared: a required field is asked for, an optional one stays empty, and what
        // it showed goes with it.
        let errors = validate_inputs(&fields, &inputs(json!({"date": "", "cc": ""})))
            .expect_err("the date is required");
        assert!(errors.contains_key("date") && !errors.contains_key("cc"));
        let values = inputs(json!({"date": "2031-02-03", "cc": "", "bcc": "b@example.com"}));
        let accepted = validate_inputs(&fields, &values).expect("valid");
        assert_eq!(accepted, inputs(json!({"date": "2031-02-03"})));
        // Sent: the cleared field named, as null; the hidden one not at all.
        assert_eq!(
            with_cleared(&fields, &values, &accepted),
            inputs(json!({"date": "2031-02-03", "cc": null}))
        );
    }

    #[test]
    fn defaults_fill_and_missing_lists_only_visible_required() {
        let fields = parse_field_specs(&[
            json!({"name": "region", "type": "select", "options": ["eu", "us"], "default": "eu"}),
            json!({"name": "id"}),
        ])
        .expect("valid");
        let accepted = validate_inputs(&fields, &inputs(json!({"id": "7"}))).expect("ok");
        assert_eq!(accepted["region"], json!("eu"));
        // A default pre-fills the card; it is not an answer.
        let missing = missing_fields(&fields, &Map::new());
        assert_eq!(
            missing.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["region", "id"]
        );
    }

    #[test]
    fn definitions_that_would_cost_too_much_are_refused() {
        let slow = parse_field_specs(&[json!({"name": "a", "validation": "(?:a*){2000}"})])
            .expect_err("compiles too large");
        assert!(
            slow["a"].starts_with("validation is not a valid regular expression"),
            "{slow:?}"
        );
        let long = parse_field_specs(&[json!({"name": "a", "validation": "a".repeat(501)})])
            .expect_err("too long");
        assert!(long["a"].contains("at most 500 characters"), "{long:?}");
        let many: Vec<Value> = (0..2000)
            .map(|i| json!({"name": format!("f{i}")}))
            .collect();
        assert_eq!(
            parse_field_specs(&many).expect_err("too many")["fields"],
            "at most 64 fields, not 2000"
        );
        let chain: Vec<Value> = (0..10)
            .map(|i| match i {
                0 => json!({"name": "f0"}),
                _ => {
                    json!({"name": format!("f{i}"), "visible_if": {"field": format!("f{}", i - 1)}})
                }
            })
            .collect();
        let deep = parse_field_specs(&chain).expect_err("too deep");
        assert!(
            deep.values().any(|m| m.contains("at most 8 deep")),
            "{deep:?}"
        );
        let text = field(json!({"name": "t"}));
        assert_eq!(
            validate_field(&text, Some(&json!("x".repeat(20_001)))),
            Err("Must be at most 20000 characters".into())
        );
    }

    #[test]
    fn a_secret_cannot_be_filled_by_the_model() {
        let errors = parse_field_specs(&[
            json!({"name": "token", "type": "secret", "model_may_fill": true}),
            json!({"name": "day", "type": "date", "model_may_fill": true}),
            json!({"name": "k", "memory_key": "has space"}),
        ])
        .expect_err("refused");
        assert!(errors["token"].contains("model_may_fill"), "{errors:?}");
        assert!(!errors.contains_key("day"), "{errors:?}");
        assert!(errors["k"].starts_with("memory_key"), "{errors:?}");
    }

    #[test]
    fn save_for_session_flag_means_session() {
        let spec: InputRequestSpec =
            serde_json::from_value(json!({"reason": "r", "fields": [], "save_for_session": true}))
                .expect("valid");
        assert_eq!(spec.save_for(), SaveFor::Session);
        assert_eq!(effective_save_for(Some(SaveFor::User), true), SaveFor::User);
        assert_eq!(effective_save_for(None, false), SaveFor::Call);
    }

    #[test]
    fn secrets_are_masked() {
        let fields =
            parse_field_specs(&[json!({"name": "k", "type": "secret"}), json!({"name": "u"})])
                .expect("valid");
        let masked = mask_secrets(&fields, &inputs(json!({"k": "hunter2", "u": "bob"})));
        assert_eq!(masked, inputs(json!({"k": MASKED, "u": "bob"})));
    }

    /// Written out, what only describes a field may be cut to fit; a label is not.
    #[test]
    fn a_description_too_long_once_written_out_is_cut_a_label_is_not() {
        let mut field = FieldSpec::text("x");
        field.description = Some("\u{200B}".repeat(300));
        assert!(field.write_out_words().is_some());
        assert_eq!(field.cut_descriptions_to_fit(), None);
        let description = field.description.clone().unwrap_or_default();
        assert_eq!(description.chars().count(), limits().definition_chars);
        assert!(description.starts_with("⟨U+200B⟩") && description.ends_with('…'));

        field.label = Some("\u{200B}".repeat(300));
        let _ = field.write_out_words();
        assert_eq!(
            field.cut_descriptions_to_fit().as_deref(),
            Some(
                "label may be at most 2000 characters once its hidden and look-alike characters are written out"
            )
        );
    }
}
