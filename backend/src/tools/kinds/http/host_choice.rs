//! Who chooses the host an http tool's request goes to. The operator does when the URL
//! names it; a template may leave it to a value, and then whoever fills that value
//! chooses where the request, with everything it carries, is sent. A prompt-injected
//! model must not send the operator's credentials or the user's values anywhere it
//! likes, and a user must not send the operator's credentials to a host of their own:
//! such a tool must list its hosts (`allow_hosts`). This is checked when the tools file
//! is loaded, and again on every call against the URL as it was actually filled in.

use std::collections::BTreeSet;

use reqwest::Url;
use serde_json::{Map, Value};

use super::egress::EgressRefused;
use crate::tools::ToolContext;
use crate::tools::template::{ContextKey, Encoding, Part, Template};

/// A placeholder that comes before the URL's path, and who fills it.
#[derive(Debug, PartialEq, Eq)]
enum HostChooser {
    Model(String),
    User(String),
}

/// What a tool's request carries besides the model's own words.
pub struct Carried {
    /// Values of the operator's environment.
    pub environment: bool,
    /// Anything the model does not have: the environment's values, the tool's fields
    /// (even one the model may fill is filled from the user's memory when the model
    /// leaves it out), who is asking.
    pub beyond_the_model: bool,
}

impl Carried {
    /// Looks through every template of a request; `fields` are the tool's fields.
    pub fn by<'a>(
        templates: impl IntoIterator<Item = &'a Template>,
        fields: &BTreeSet<String>,
    ) -> Self {
        let mut carried = Carried {
            environment: false,
            beyond_the_model: false,
        };
        for part in templates.into_iter().flat_map(Template::parts) {
            match part {
                Part::Env(_) => {
                    carried.environment = true;
                    carried.beyond_the_model = true;
                }
                Part::Value(name) if fields.contains(name) => carried.beyond_the_model = true,
                Part::Context(ContextKey::UserId | ContextKey::ConversationId) => {
                    carried.beyond_the_model = true;
                }
                _ => {}
            }
        }
        carried
    }
}

/// The values a call's URL must keep its origin without: checked on every call, so a
/// template the load-time reading misjudges still cannot send the request elsewhere.
#[derive(Debug, Default)]
pub struct OriginGuard {
    /// Whether the request carries anything that must not go where a value says.
    active: bool,
    names: BTreeSet<String>,
}

impl OriginGuard {
    /// Refuses a tool whose host its model chooses without `allow_hosts` while its
    /// request carries anything beyond the model's words or may reach private addresses
    /// (`private_networks`: opened for one service, they would all be open to the
    /// model's choice), or whose host its user chooses with the operator's environment
    /// on board; otherwise the guard for its calls.
    pub fn for_tool(
        url: &Template,
        carried: &Carried,
        model_sets: &BTreeSet<String>,
        hosts_listed: bool,
        private_networks: bool,
    ) -> Result<Self, String> {
        if hosts_listed {
            return Ok(OriginGuard::default());
        }
        match host_chooser(url, model_sets) {
            Some(HostChooser::Model(placeholder)) if private_networks => {
                return Err(format!(
                    "http.url: the model's `{placeholder}` decides which host the request goes \
                     to, and allow_private_networks would let it reach any private address; \
                     list the hosts the tool may reach in http.allow_hosts"
                ));
            }
            Some(HostChooser::Model(placeholder)) if carried.beyond_the_model => {
                return Err(format!(
                    "http.url: the model's `{placeholder}` decides which host the request goes \
                     to, and the request carries values the model does not have (the \
                     environment's, the user's fields); list the hosts the tool may reach in \
                     http.allow_hosts"
                ));
            }
            Some(HostChooser::User(placeholder)) if carried.environment => {
                return Err(format!(
                    "http.url: the user's `{placeholder}` decides which host the request goes \
                     to, and the request carries the environment's values; list the hosts the \
                     tool may reach in http.allow_hosts"
                ));
            }
            _ => {}
        }
        let mut names = BTreeSet::new();
        if carried.beyond_the_model {
            names.extend(model_sets.iter().cloned());
        }
        if carried.environment {
            names.extend(url.value_names().map(str::to_owned));
        }
        Ok(OriginGuard {
            active: carried.beyond_the_model,
            names,
        })
    }

    /// Refuses a call whose URL `rendered` has another origin than the same URL filled
    /// with a neutral text in place of each guarded value.
    pub fn check(
        &self,
        url: &Template,
        values: &Map<String, Value>,
        context: &ToolContext,
        rendered: &Url,
    ) -> Result<(), EgressRefused> {
        if !self.active {
            return Ok(());
        }
        let mut neutral = values.clone();
        for name in &self.names {
            if let Some(value) = neutral.get_mut(name) {
                *value = Value::String("v".to_owned());
            }
        }
        // The model's call id and the caller's words are no one's choice of host either.
        let neutral_context = ToolContext {
            tool_call_id: "v".to_owned(),
            original_user_request: context
                .original_user_request
                .as_ref()
                .map(|_| "v".to_owned()),
            ..context.clone()
        };
        let neutral_origin = url
            .render(&neutral, &neutral_context, Encoding::Url)
            .ok()
            .and_then(|text| Url::parse(&text).ok())
            .map(|url| url.origin());
        if neutral_origin == Some(rendered.origin()) {
            Ok(())
        } else {
            Err(EgressRefused(
                "the call's values chose the host, which the tool does not leave to them \
                 (it lists no allow_hosts)"
                    .to_owned(),
            ))
        }
    }
}

/// Whether a header may name the site a request is for. A front that many sites share (a
/// CDN, a reverse proxy) picks the site by such headers, whatever host the URL named, so
/// whoever fills one picks where the request and all it carries end up; `allow_hosts`
/// checks where the connection goes, not which site behind it answers. Fronts have their
/// own names for them (`X-Forwarded-Host`, `X-Original-Host`, `X-HTTP-Host-Override`,
/// ...): any name that mentions a host or forwarding counts.
fn may_route(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name.contains("host") || name.contains("forwarded")
}

/// Refuses a routing header (`Host`, `Forwarded`, `X-Forwarded-Host`, ...) that the model
/// fills while the request carries anything beyond the model's words or may reach
/// private addresses (`private_networks`), or that the user fills while it carries the
/// environment's values: the URL's rule for its host, with no host list to lift it.
pub fn check_routing_header(
    name: &str,
    template: &Template,
    carried: &Carried,
    model_sets: &BTreeSet<String>,
    private_networks: bool,
) -> Result<(), String> {
    if !may_route(name) {
        return Ok(());
    }
    for part in template.parts() {
        match chooser_of(part, model_sets) {
            Some(HostChooser::Model(placeholder)) if private_networks => {
                return Err(format!(
                    "http.headers.{name}: the model's `{placeholder}` decides which site the \
                     request reaches behind its host, and allow_private_networks opens this \
                     network's private sites to it; a header that names the site takes only \
                     the operator's values"
                ));
            }
            Some(HostChooser::Model(placeholder)) if carried.beyond_the_model => {
                return Err(format!(
                    "http.headers.{name}: the model's `{placeholder}` decides which site the \
                     request reaches behind its host, and the request carries values the \
                     model does not have (the environment's, the user's fields); a header \
                     that names the site takes only the operator's values"
                ));
            }
            Some(HostChooser::User(placeholder)) if carried.environment => {
                return Err(format!(
                    "http.headers.{name}: the user's `{placeholder}` decides which site the \
                     request reaches behind its host, and the request carries the \
                     environment's values; a header that names the site takes only the \
                     operator's values"
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The first placeholder before the URL's path that the operator does not fill.
fn host_chooser(url: &Template, model_sets: &BTreeSet<String>) -> Option<HostChooser> {
    let parts = url.parts();
    // What the URL reads so far, with a stand-in for each value the operator fills.
    let mut text = String::new();
    for (index, part) in parts.iter().enumerate() {
        if origin_ends(&text) {
            return None;
        }
        match part {
            // URLs drop tabs and line breaks wherever they are.
            Part::Literal(literal) => {
                text.extend(literal.chars().filter(|c| !matches!(c, '\t' | '\n' | '\r')));
            }
            Part::Env(_) => {
                // A whole base address when the path follows it; else some piece of it.
                let path_follows = match parts.get(index + 1) {
                    None => true,
                    Some(Part::Literal(next)) => next.starts_with(['/', '?', '#']),
                    Some(_) => false,
                };
                text.push_str(if index == 0 && path_follows {
                    "operator://base"
                } else {
                    "operator"
                });
            }
            Part::Context(ContextKey::UserId | ContextKey::ConversationId) => {
                text.push_str("server");
            }
            Part::Value(_) | Part::Context(_) => return chooser_of(part, model_sets),
        }
    }
    None
}

/// Who fills a placeholder, when neither the operator (the environment) nor the server
/// (who is asking, in which conversation) does.
fn chooser_of(part: &Part, model_sets: &BTreeSet<String>) -> Option<HostChooser> {
    match part {
        Part::Value(name) if model_sets.contains(name) => {
            Some(HostChooser::Model(format!("{{{name}}}")))
        }
        Part::Value(name) => Some(HostChooser::User(format!("{{{name}}}"))),
        Part::Context(ContextKey::ToolCallId) => {
            Some(HostChooser::Model("{context.tool_call_id}".to_owned()))
        }
        // Whatever the request's text holds, pasted or quoted too: no one's choice of a
        // host, and the per-call guard reads it so.
        Part::Context(ContextKey::OriginalUserRequest) => Some(HostChooser::Model(
            "{context.original_user_request}".to_owned(),
        )),
        Part::Literal(_)
        | Part::Env(_)
        | Part::Context(ContextKey::UserId | ContextKey::ConversationId) => None,
    }
}

/// Whether `text` already holds a whole origin: a scheme, a host and the start of what
/// follows it. URLs skip any slashes and backslashes right after `://` and read a
/// backslash as a slash.
fn origin_ends(text: &str) -> bool {
    text.find("://").is_some_and(|at| {
        text[at + 3..]
            .trim_start_matches(['/', '\\'])
            .contains(['/', '\\', '?', '#'])
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|name| (*name).to_owned()).collect()
    }

    fn chooser(url: &str, model: &[&str]) -> Option<HostChooser> {
        host_chooser(&Template::parse(url).expect("parses"), &names(model))
    }

    #[test]
    fn the_host_is_read_as_a_url_parser_reads_it() {
        let model = |p: &str| Some(HostChooser::Model(p.to_owned()));
        for url in [
            "{q}",
            "https://{q}/x",
            "https:///{q}/x",
            "https://\\{q}/x",
            "https://\t/{q}",
            "https://{q}@api.example.com/x",
            "https://api.example.com:{q}/x",
            "{env.BASE}{q}/x",
            "{env.SCHEME}://{q}/x",
            "https://{context.tool_call_id}/x",
        ] {
            let expected = if url.contains("tool_call_id") {
                model("{context.tool_call_id}")
            } else {
                model("{q}")
            };
            assert_eq!(chooser(url, &["q"]), expected, "{url}");
        }
        for url in [
            "https://api.example.com/{q}",
            "https://api.example.com\\{q}",
            "https://api.example.com?{q}",
            "{env.BASE}/{q}",
            "{env.BASE}?q={q}",
            "https://{context.user_id}.example.com/{q}",
        ] {
            assert_eq!(chooser(url, &["q"]), None, "{url}");
        }
        assert_eq!(
            chooser("{server}/x/{q}", &["q"]),
            Some(HostChooser::User("{server}".to_owned()))
        );
        assert_eq!(
            chooser("https://{context.original_user_request}/", &[]),
            Some(HostChooser::Model(
                "{context.original_user_request}".to_owned()
            ))
        );
    }

    /// The guard judges the URL as filled in, whatever the load-time reading thought.
    #[test]
    fn a_call_whose_values_move_the_origin_is_refused() {
        let url = Template::parse("https:///{q}/x").expect("parses");
        let guard = OriginGuard {
            active: true,
            names: names(&["q"]),
        };
        let check = |q: &str| {
            let values = json!({"q": q}).as_object().cloned().unwrap_or_default();
            let rendered = url
                .render(&values, &ToolContext::sample(), Encoding::Url)
                .expect("renders");
            let parsed = Url::parse(&rendered).expect("a URL");
            guard.check(&url, &values, &ToolContext::sample(), &parsed)
        };
        assert!(check("evil.example").is_err());
        let path_only = Template::parse("https://api.example.com/{q}").expect("parses");
        let values = json!({"q": "evil.example"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let rendered = path_only
            .render(&values, &ToolContext::sample(), Encoding::Url)
            .expect("renders");
        let parsed = Url::parse(&rendered).expect("a URL");
        assert!(
            guard
                .check(&path_only, &values, &ToolContext::sample(), &parsed)
                .is_ok()
        );
    }

    #[test]
    fn the_models_call_id_cannot_move_the_origin() {
        let url = Template::parse("https:/{context.tool_call_id}/x").expect("parses");
        let guard = OriginGuard {
            active: true,
            names: BTreeSet::new(),
        };
        let mut called = ToolContext::sample();
        called.tool_call_id = "evil.example".to_owned();
        let rendered = url
            .render(&Map::new(), &called, Encoding::Url)
            .expect("renders");
        let parsed = Url::parse(&rendered).expect("a URL");
        assert_eq!(parsed.host_str(), Some("evil.example"));
        assert!(guard.check(&url, &Map::new(), &called, &parsed).is_err());
    }

    /// A header a shared front routes by is held to the URL's rule, host list or not.
    #[test]
    fn a_routing_header_is_filled_by_the_operator_when_the_request_carries_secrets() {
        let key = Template::parse("Bearer {env.KEY}").expect("parses");
        let model = names(&["site"]);
        let fields = names(&["tenant", "tenant_token"]);
        let site = Template::parse("{site}").expect("parses");
        let tenant = Template::parse("{tenant}.example.com").expect("parses");
        let operators = Carried::by([&key], &fields);
        for (name, template) in [
            ("Host", &site),
            ("X-Forwarded-Host", &site),
            (
                "forwarded",
                &Template::parse("host={site}").expect("parses"),
            ),
            (
                "Host",
                &Template::parse("{context.tool_call_id}").expect("parses"),
            ),
            ("X-Host", &tenant),
            ("X-HTTP-Host-Override", &site),
        ] {
            let err = check_routing_header(name, template, &operators, &model, false)
                .expect_err("refused");
            assert!(err.contains(&format!("http.headers.{name}")), "{err}");
        }
        // The operator's own values, a header that routes nothing, and a user who only
        // sends their own values where they like: allowed.
        let operator_site = Template::parse("{env.SITE}").expect("parses");
        assert!(check_routing_header("Host", &operator_site, &operators, &model, false).is_ok());
        assert!(check_routing_header("X-Request-Site", &site, &operators, &model, false).is_ok());
        let token = Template::parse("Bearer {tenant_token}").expect("parses");
        let own = Carried::by([&token], &fields);
        assert!(check_routing_header("Host", &tenant, &own, &model, false).is_ok());
        assert!(check_routing_header("Host", &site, &own, &model, false).is_err());
        let nothing = Carried::by([&site], &fields);
        assert!(check_routing_header("Host", &site, &nothing, &model, false).is_ok());
        // With private ranges open, the model names no site behind the host, whatever
        // the request carries.
        let err = check_routing_header("Host", &site, &nothing, &model, true).expect_err("refused");
        assert!(err.contains("allow_private_networks"), "{err}");
    }

    #[test]
    fn a_user_chosen_host_may_carry_the_users_values_but_not_the_operators() {
        let url = Template::parse("{webhook_url}").expect("parses");
        let token = Template::parse("Bearer {webhook_token}").expect("parses");
        let key = Template::parse("Bearer {env.KEY}").expect("parses");
        let model = names(&["message"]);
        let fields = names(&["webhook_url", "webhook_token"]);
        let own = Carried::by([&url, &token], &fields);
        assert!(OriginGuard::for_tool(&url, &own, &model, false, false).is_ok());
        let operators = Carried::by([&url, &key], &fields);
        let err =
            OriginGuard::for_tool(&url, &operators, &model, false, false).expect_err("refused");
        assert!(
            err.contains("`{webhook_url}`") && err.contains("allow_hosts"),
            "{err}"
        );
        assert!(OriginGuard::for_tool(&url, &operators, &model, true, false).is_ok());
    }
}
