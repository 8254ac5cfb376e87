//! `{placeholder}` templates for HTTP tools: URLs, headers and JSON bodies.
//!
//! `{name}` is an argument or a user-input field, `{env.NAME}` an environment
//! variable, `{context.user_id}`, `{context.conversation_id}`,
//! `{context.original_user_request}` and `{context.tool_call_id}` come from the tool
//! context. `{{` and `}}` stand for literal braces.

use serde_json::{Map, Value};

use super::ToolContext;

#[derive(Clone, Debug, PartialEq)]
pub enum Part {
    Literal(String),
    Value(String),
    Env(String),
    Context(ContextKey),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ContextKey {
    UserId,
    ConversationId,
    OriginalUserRequest,
    ToolCallId,
}

/// How a value is written into the text.
#[derive(Clone, Copy, PartialEq)]
pub enum Encoding {
    /// Percent-encoded: for URLs. Environment values, and a value that starts the
    /// URL, are inserted as they are: they are the base (scheme, host, path).
    Url,
    /// As it is; CR and LF are refused (header injection).
    Header,
    Plain,
}

#[derive(Clone, Debug)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    literal.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    literal.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(format!("unclosed `{{` in `{text}`")),
                        }
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Literal(std::mem::take(&mut literal)));
                    }
                    parts.push(placeholder(name.trim())?);
                }
                '}' => {
                    return Err(format!(
                        "unmatched `}}` in `{text}` (write `}}}}` for a brace)"
                    ));
                }
                c => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Template { parts })
    }

    pub fn parts(&self) -> &[Part] {
        &self.parts
    }

    /// The argument or field names the template needs.
    pub fn value_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Value(name) => Some(name.as_str()),
            _ => None,
        })
    }

    pub fn env_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Env(name) => Some(name.as_str()),
            _ => None,
        })
    }

    /// The template as a single placeholder, when it is exactly one (`"{amount}"`).
    pub fn sole_value(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Value(name)] => Some(name),
            _ => None,
        }
    }

    pub fn render(
        &self,
        values: &Map<String, Value>,
        context: &ToolContext,
        encoding: Encoding,
    ) -> Result<String, String> {
        let mut out = String::new();
        // Where each part's text starts in `out`, and where the last one ends.
        let mut starts = Vec::with_capacity(self.parts.len() + 1);
        for (index, part) in self.parts.iter().enumerate() {
            starts.push(out.len());
            let encoding = if index == 0 && encoding == Encoding::Url {
                Encoding::Plain
            } else {
                encoding
            };
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Env(name) => {
                    let value = std::env::var(name)
                        .map_err(|_| format!("environment variable {name} is not set"))?;
                    out.push_str(&value);
                }
                Part::Value(name) => {
                    let value = values
                        .get(name)
                        .filter(|v| !v.is_null())
                        .ok_or_else(|| format!("no value for `{name}`"))?;
                    out.push_str(&encode(&scalar_text(value), encoding)?);
                }
                Part::Context(key) => {
                    let text = match key {
                        ContextKey::UserId => context.user_id.clone(),
                        ContextKey::ConversationId => context.conversation_id.to_string(),
                        ContextKey::OriginalUserRequest => {
                            context.original_user_request.clone().unwrap_or_default()
                        }
                        ContextKey::ToolCallId => context.tool_call_id.clone(),
                    };
                    out.push_str(&encode(&text, encoding)?);
                }
            }
        }
        starts.push(out.len());
        if encoding == Encoding::Url
            && let Some(name) = self.empty_segment(&starts)
        {
            // `/accounts//transfers` is read as `/accounts/transfers` by many servers:
            // another endpoint, with the tool's credentials.
            return Err(format!(
                "`{name}` is a whole part of the URL's path and cannot be empty"
            ));
        }
        // Values that each pass may still meet the template's own dots: `{name}.{ext}`,
        // both empty, leaves `.`, which URL parsing drops from the path.
        if encoding == Encoding::Url
            && self
                .parts
                .iter()
                .skip(1)
                .any(|part| matches!(part, Part::Value(_) | Part::Context(_)))
            && climbs_the_path(&out)
        {
            return Err(
                "the values leave `.` or `..` as a whole part of the URL's path, which would change the path"
                    .to_owned(),
            );
        }
        Ok(out)
    }
}

impl Template {
    /// The first placeholder of a run of placeholders that makes a whole part of a path
    /// by itself (between two slashes, or a slash and the query, fragment or end) and
    /// rendered to nothing; `starts` holds where each part's text began, then the end.
    fn empty_segment(&self, starts: &[usize]) -> Option<&str> {
        let mut index = 0;
        while index < self.parts.len() {
            if matches!(self.parts[index], Part::Literal(_)) {
                index += 1;
                continue;
            }
            let run = index;
            while index < self.parts.len() && !matches!(self.parts[index], Part::Literal(_)) {
                index += 1;
            }
            let after_slash = run.checked_sub(1).is_some_and(
                |before| matches!(&self.parts[before], Part::Literal(text) if text.ends_with('/')),
            );
            let before_end = match self.parts.get(index) {
                None => true,
                Some(Part::Literal(text)) => text.starts_with(['/', '?', '#']),
                Some(_) => false,
            };
            if after_slash && before_end && starts[run] == starts[index] {
                return self.parts[run..index].iter().find_map(|part| match part {
                    Part::Value(name) => Some(name.as_str()),
                    _ => None,
                });
            }
        }
        None
    }
}

/// Whether the path of `url` holds `.` or `..` (or `%2E` for a dot) as a whole part,
/// which URL parsing resolves away.
fn climbs_the_path(url: &str) -> bool {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let Some(path_at) = url[after_scheme..].find(['/', '\\']) else {
        return false;
    };
    let path = &url[after_scheme + path_at..];
    let path = path.split(['?', '#']).next().unwrap_or_default();
    path.split(['/', '\\']).any(|part| {
        matches!(
            part.to_ascii_lowercase().replace("%2e", ".").as_str(),
            "." | ".."
        )
    })
}

fn placeholder(name: &str) -> Result<Part, String> {
    if let Some(env) = name.strip_prefix("env.") {
        let valid = !env.is_empty() && env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        return if valid {
            Ok(Part::Env(env.to_owned()))
        } else {
            Err(format!(
                "`{{{name}}}` is not a valid environment variable name"
            ))
        };
    }
    if let Some(key) = name.strip_prefix("context.") {
        return match key {
            "user_id" => Ok(Part::Context(ContextKey::UserId)),
            "conversation_id" => Ok(Part::Context(ContextKey::ConversationId)),
            "original_user_request" => Ok(Part::Context(ContextKey::OriginalUserRequest)),
            "tool_call_id" => Ok(Part::Context(ContextKey::ToolCallId)),
            other => Err(format!(
                "unknown context value `{other}`; use user_id, conversation_id, original_user_request or tool_call_id"
            )),
        };
    }
    if name.is_empty() {
        return Err("empty placeholder `{}`".to_owned());
    }
    Ok(Part::Value(name.to_owned()))
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Array(items) => items.iter().map(scalar_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

fn encode(text: &str, encoding: Encoding) -> Result<String, String> {
    match encoding {
        // Left as they are by percent-encoding (and by its `%2E`, which URLs read as a
        // dot too), these would climb the path: `/repos/{owner}/x` with `..` reaches
        // `/x` on the same host, with the tool's credentials. Within a value (`../x`,
        // sent as `..%2Fx`) they would climb on a server that decodes `%2F` first.
        Encoding::Url if text.split(['/', '\\']).any(|piece| piece == "." || piece == "..") => {
            Err("a value in the URL cannot hold `.` or `..` between slashes, which would change the URL's path".to_owned())
        }
        Encoding::Url => Ok(percent_encode(text)),
        Encoding::Header if text.contains(['\r', '\n']) => {
            Err("a header value may not contain line breaks".to_owned())
        }
        Encoding::Header | Encoding::Plain => Ok(text.to_owned()),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Fills a JSON body template: a string that is exactly one placeholder takes the
/// value with its JSON type (`null` for a name in `left_empty`, an optional field the
/// user left empty); other strings are interpolated.
pub fn render_json(
    template: &Value,
    values: &Map<String, Value>,
    left_empty: &[String],
    context: &ToolContext,
) -> Result<Value, String> {
    Ok(match template {
        Value::String(text) => {
            let parsed = Template::parse(text)?;
            match parsed.sole_value() {
                Some(name) if left_empty.iter().any(|empty| empty == name) => Value::Null,
                Some(name) => values
                    .get(name)
                    .cloned()
                    .ok_or_else(|| format!("no value for `{name}`"))?,
                None => Value::String(parsed.render(values, context, Encoding::Plain)?),
            }
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render_json(item, values, left_empty, context))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_json(v, values, left_empty, context)?)))
                .collect::<Result<_, String>>()?,
        ),
        other => other.clone(),
    })
}

/// Every template string inside a JSON body template.
pub fn json_templates(template: &Value) -> Result<Vec<Template>, String> {
    let mut found = Vec::new();
    collect_templates(template, &mut found)?;
    Ok(found)
}

fn collect_templates(value: &Value, found: &mut Vec<Template>) -> Result<(), String> {
    match value {
        Value::String(text) => found.push(Template::parse(text)?),
        Value::Array(items) => {
            for item in items {
                collect_templates(item, found)?;
            }
        }
        Value::Object(map) => {
            for item in map.values() {
                collect_templates(item, found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn url_values_are_percent_encoded() {
        let template = Template::parse("https://x/{id}/r?q={q}&x={{y}}").expect("parses");
        let values = json!({"id": "a/b", "q": "Q1 & Q2"});
        let url = template
            .render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            )
            .expect("renders");
        assert_eq!(url, "https://x/a%2Fb/r?q=Q1%20%26%20Q2&x={y}");
        let based = Template::parse("{base}/hook/{id}").expect("parses");
        let values = json!({"base": "https://h.example/a b", "id": "x/y"});
        let url = based
            .render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            )
            .expect("renders");
        assert_eq!(url, "https://h.example/a b/hook/x%2Fy");
    }

    #[test]
    fn an_empty_value_cannot_drop_a_part_of_the_path() {
        let template =
            Template::parse("https://api.example.com/v1/accounts/{id}/transfers?note={note}")
                .expect("valid");
        let render = |id: &str, note: &str| {
            let values = json!({"id": id, "note": note});
            template.render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            )
        };
        assert_eq!(
            render("", "x"),
            Err("`id` is a whole part of the URL's path and cannot be empty".to_owned())
        );
        // Empty in the query, or within a part of the path, changes no path.
        assert_eq!(
            render("7", "").as_deref(),
            Ok("https://api.example.com/v1/accounts/7/transfers?note=")
        );
        // Two placeholders that make one part between them.
        let both = Template::parse("https://x/v1/{a}{b}/t").expect("valid");
        let values = json!({"a": "", "b": ""});
        assert!(
            both.render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url
            )
            .is_err()
        );
        let values = json!({"a": "", "b": "7"});
        assert!(
            both.render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url
            )
            .is_ok()
        );
        // The template's own dot between two empty values makes a part of `.`.
        let dotted = Template::parse("https://x/files/{name}.{ext}?v=1").expect("valid");
        let render_dotted = |name: &str, ext: &str| {
            let values = json!({"name": name, "ext": ext});
            dotted.render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            )
        };
        assert!(render_dotted("", "").is_err());
        assert_eq!(
            render_dotted("", "txt").as_deref(),
            Ok("https://x/files/.txt?v=1")
        );
        assert_eq!(
            render_dotted("a", "txt").as_deref(),
            Ok("https://x/files/a.txt?v=1")
        );
        let within = Template::parse("https://x/v1/acc-{id}/t").expect("valid");
        let values = json!({"id": ""});
        assert_eq!(
            within
                .render(
                    values.as_object().expect("map"),
                    &ToolContext::sample(),
                    Encoding::Url
                )
                .as_deref(),
            Ok("https://x/v1/acc-/t")
        );
    }

    #[test]
    fn url_values_cannot_climb_the_path() {
        let template = Template::parse("https://api.example.com/v1/repos/{owner}/{repo}/issues")
            .expect("valid");
        for (owner, repo) in [("..", ".."), (".", "x"), ("x", "..")] {
            let values = json!({"owner": owner, "repo": repo});
            let rendered = template.render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            );
            assert!(rendered.is_err(), "{owner}/{repo}: {rendered:?}");
        }
        for (owner, repo) in [("a", "../x"), ("a\\..", "b"), ("a/./b", "c")] {
            let values = json!({"owner": owner, "repo": repo});
            let rendered = template.render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            );
            assert!(rendered.is_err(), "{owner}/{repo}: {rendered:?}");
        }
        // Dots that are no path step stay, encoded like the rest.
        let values = json!({"owner": "...", "repo": "v1.2/x"});
        let rendered = template
            .render(
                values.as_object().expect("map"),
                &ToolContext::sample(),
                Encoding::Url,
            )
            .expect("rendered");
        assert_eq!(
            rendered,
            "https://api.example.com/v1/repos/.../v1.2%2Fx/issues"
        );
    }

    #[test]
    fn placeholders_are_classified_and_bad_ones_refused() {
        let template = Template::parse("{env.BASE}/{realm}/{context.user_id}").expect("parses");
        assert_eq!(template.env_names().collect::<Vec<_>>(), ["BASE"]);
        assert_eq!(template.value_names().collect::<Vec<_>>(), ["realm"]);
        assert!(Template::parse("{context.password}").is_err());
        assert!(Template::parse("{open").is_err());
        assert!(Template::parse("x}").is_err());
    }

    #[test]
    fn json_bodies_keep_types_and_reach_the_context() {
        let body =
            json!({"n": "{n}", "text": "asked: {context.original_user_request}", "list": ["{n}"]});
        let values = json!({"n": 5});
        let rendered = render_json(
            &body,
            values.as_object().expect("map"),
            &[],
            &ToolContext::sample(),
        )
        .expect("renders");
        assert_eq!(
            rendered,
            json!({"n": 5, "text": "asked: Get my P&L", "list": [5]})
        );
        // An optional field left empty: `null` where it stands alone, empty text where
        // it is part of a text.
        let body = json!({"cc": "{cc}", "note": "cc: {cc}"});
        let values = json!({"cc": ""});
        let rendered = render_json(
            &body,
            values.as_object().expect("map"),
            &["cc".to_owned()],
            &ToolContext::sample(),
        )
        .expect("renders");
        assert_eq!(rendered, json!({"cc": null, "note": "cc: "}));
    }

    #[test]
    fn header_values_cannot_inject_lines() {
        let template = Template::parse("Bearer {token}").expect("parses");
        let values = json!({"token": "abc\r\nX-Evil: 1"});
        assert!(
            template
                .render(
                    values.as_object().expect("map"),
                    &ToolContext::sample(),
                    Encoding::Header
                )
                .is_err()
        );
    }
}
