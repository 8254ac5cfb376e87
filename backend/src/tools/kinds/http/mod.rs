//! `http` tools: a request built from templates, the response as the result, sent
//! only where the tool's egress policy allows.

pub mod egress;
mod host_choice;

pub use egress::{AddressClass, EgressPolicy, classify};

use host_choice::{Carried, OriginGuard};

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::tools::ToolContext;
use crate::tools::redact::{self, MIN_SECRET_CHARS, Redactions};
use crate::tools::template::{Encoding, Part, Template, json_templates, render_json};

/// The `[tools.http]` table of a tools file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    #[serde(default = "default_method")]
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// A JSON body; strings in it are templates.
    #[serde(default)]
    pub body: Option<Value>,
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    #[serde(default = "default_max_response")]
    pub max_response_bytes: usize,
    /// Hosts the tool may reach: exact names, or `.example.com` / `*.example.com` for
    /// a domain's subdomains. Empty: any public host.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// Lets the tool reach loopback and private ranges (a service on this machine or
    /// inside the network). Metadata, multicast and unspecified addresses stay refused.
    #[serde(default)]
    pub allow_private_networks: bool,
}

fn default_method() -> String {
    "GET".to_owned()
}
fn default_timeout() -> u64 {
    15
}
fn default_max_response() -> usize {
    1024 * 1024
}

pub struct HttpTool {
    method: reqwest::Method,
    url: Template,
    headers: Vec<(reqwest::header::HeaderName, Template)>,
    body: Option<Value>,
    timeout: Duration,
    max_response_bytes: usize,
    env_names: BTreeSet<String>,
    /// The environment variable the URL starts with, if it does: the service's base
    /// address, which an answer may well repeat (links) and which is no secret.
    base_env: Option<String>,
    egress: EgressPolicy,
    origin_guard: OriginGuard,
    client: reqwest::Client,
}

/// Who fills a tool's placeholders.
pub struct Fillers {
    /// Every argument and field name.
    pub known: BTreeSet<String>,
    /// Those the model's arguments fill: arguments that are no field, and fields that
    /// say `model_may_fill`.
    pub model_sets: BTreeSet<String>,
    /// The tool's fields: the user fills them, or what the user remembered does (a field
    /// the model may fill too).
    pub fields: BTreeSet<String>,
}

impl HttpTool {
    /// Checks the configuration against who fills its placeholders.
    pub fn new(config: HttpConfig, fillers: &Fillers) -> Result<Self, String> {
        let Fillers {
            known,
            model_sets,
            fields,
        } = fillers;
        let method = reqwest::Method::from_bytes(config.method.to_uppercase().as_bytes())
            .map_err(|_| format!("http.method `{}` is not an HTTP method", config.method))?;
        let url = Template::parse(&config.url).map_err(|err| format!("http.url: {err}"))?;
        let mut templates = vec![("http.url".to_owned(), url.clone())];
        let mut headers = Vec::new();
        for (name, value) in config.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("http.headers: `{name}` is not a valid header name"))?;
            let template =
                Template::parse(&value).map_err(|err| format!("http.headers.{name}: {err}"))?;
            templates.push((format!("http.headers.{name}"), template.clone()));
            headers.push((header, template));
        }
        if let Some(body) = &config.body {
            for template in json_templates(body).map_err(|err| format!("http.body: {err}"))? {
                templates.push(("http.body".to_owned(), template));
            }
        }
        let mut env_names = BTreeSet::new();
        for (place, template) in &templates {
            for name in template.value_names() {
                if !known.contains(name) {
                    return Err(format!(
                        "{place} uses `{{{name}}}`, which is neither an argument nor a user input field"
                    ));
                }
            }
            env_names.extend(template.env_names().map(str::to_owned));
        }
        if config.timeout_seconds == 0 || config.max_response_bytes == 0 {
            return Err(
                "http.timeout_seconds and http.max_response_bytes must be above zero".into(),
            );
        }
        let base_env = match url.parts().first() {
            Some(Part::Env(name)) => Some(name.clone()),
            _ => None,
        };
        let carried = Carried::by(templates.iter().map(|(_, template)| template), fields);
        let origin_guard = OriginGuard::for_tool(
            &url,
            &carried,
            model_sets,
            !config.allow_hosts.is_empty(),
            config.allow_private_networks,
        )?;
        for (name, template) in &headers {
            host_choice::check_routing_header(
                name.as_str(),
                template,
                &carried,
                model_sets,
                config.allow_private_networks,
            )?;
        }
        let egress = EgressPolicy::new(&config.allow_hosts, config.allow_private_networks)?;
        let client = egress.client()?;
        Ok(HttpTool {
            method,
            url,
            headers,
            body: config.body,
            timeout: Duration::from_secs(config.timeout_seconds),
            max_response_bytes: config.max_response_bytes,
            env_names,
            base_env,
            egress,
            origin_guard,
            client,
        })
    }

    /// The longest one call takes: the whole request, its answer read in full included.
    pub fn longest_call(&self) -> Duration {
        self.timeout
    }

    /// Whether a call changes something somewhere: any method but GET, HEAD and OPTIONS.
    pub fn has_side_effects(&self) -> bool {
        !matches!(
            self.method,
            reqwest::Method::GET | reqwest::Method::HEAD | reqwest::Method::OPTIONS
        )
    }

    /// What the environment gives its templates that may be a secret: every value
    /// but the one the URL starts with (the service's address), and of that one what
    /// an address carries that is secret ([`secrets_in_address`]).
    pub fn secret_env_values(&self) -> Vec<String> {
        let mut secrets = redact::secret_env_values(
            self.env_names
                .iter()
                .filter(|name| self.base_env.as_ref() != Some(*name))
                .map(String::as_str),
        );
        if let Some(address) = self
            .base_env
            .as_ref()
            .and_then(|name| std::env::var(name).ok())
        {
            secrets.extend(secrets_in_address(&address));
        }
        secrets
    }

    /// Why the tool cannot run in this environment, if it cannot.
    pub fn unavailable_reason(&self) -> Option<String> {
        let missing: Vec<&str> = self
            .env_names
            .iter()
            .filter(|name| std::env::var(name).map_or(true, |v| v.is_empty()))
            .map(String::as_str)
            .collect();
        (!missing.is_empty())
            .then(|| format!("environment variable {} is not set", missing.join(", ")))
    }

    /// Makes the call with `values`; `left_empty` names the optional fields the user
    /// left empty, sent as empty text (and as `null` where a JSON body takes one alone).
    pub async fn run(
        &self,
        values: &Map<String, Value>,
        left_empty: &[String],
        context: &ToolContext,
    ) -> Result<Value, String> {
        let with_empty;
        let values = if left_empty.is_empty() {
            values
        } else {
            let mut filled = values.clone();
            for name in left_empty {
                filled.insert(name.clone(), Value::String(String::new()));
            }
            with_empty = filled;
            &with_empty
        };
        let url = self.url.render(values, context, Encoding::Url)?;
        let parsed_url = reqwest::Url::parse(&url)
            .map_err(|_| "the tool's URL is not a valid URL once filled in".to_owned())?;
        self.egress
            .check_url(&parsed_url)
            .and_then(|()| {
                self.origin_guard
                    .check(&self.url, values, context, &parsed_url)
            })
            .map_err(|refused| refused.to_string())?;
        let mut request = self
            .client
            .request(self.method.clone(), parsed_url)
            .timeout(self.timeout);
        // What the request carries that an error page could echo back.
        let mut sent = Vec::new();
        for (name, template) in &self.headers {
            let value = template.render(values, context, Encoding::Header)?;
            sent.push(value.clone());
            request = request.header(name, value);
        }
        if let Some(body) = &self.body {
            request = request.json(&render_json(body, values, left_empty, context)?);
        }
        let response = request
            .send()
            .await
            .map_err(|err| describe_send_error(&err))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(format!(
                "the service answered HTTP {status}, a redirect to another origin, which is not followed"
            ));
        }
        let mut body = Vec::new();
        let mut stream = response.bytes_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|err| {
                format!("reading the response failed: {}", describe_send_error(&err))
            })?;
            if body.len() + chunk.len() > self.max_response_bytes {
                return Err(format!(
                    "the response is larger than {} bytes",
                    self.max_response_bytes
                ));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            let env_values = self.secret_env_values();
            let carried =
                carried_values(values, &sent).chain(env_values.iter().map(String::as_str));
            let redactions = Redactions::new(carried).standing_in("[redacted]");
            return Err(format!(
                "the service answered HTTP {status}: {}",
                excerpt(&body, &redactions)
            ));
        }
        Ok(serde_json::from_slice::<Value>(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())))
    }
}

/// Longest excerpt of an error page passed on to the model.
const EXCERPT_CHARS: usize = 200;

/// Every value the request carried that must not come back in an excerpt: the words of
/// its rendered headers longer than a word, and every string value it was filled with
/// that is long enough to be a secret. A short secret (a PIN) is replaced here too,
/// before the excerpt is cut: cut first, it could leave its first characters behind,
/// which the mask applied later to the whole outcome no longer recognises.
fn carried_values<'a>(
    values: &'a Map<String, Value>,
    headers: &'a [String],
) -> impl Iterator<Item = &'a str> {
    headers
        .iter()
        .flat_map(|header| header.split_whitespace())
        .filter(|word| word.len() >= 8)
        .chain(
            values
                .values()
                .filter_map(Value::as_str)
                .filter(|text| text.chars().count() >= MIN_SECRET_CHARS),
        )
}

/// A short, single-line excerpt of an error page, with anything the request carried
/// replaced first, so that the cut never leaves part of a secret behind.
fn excerpt(body: &[u8], redactions: &Redactions) -> String {
    let mut text = String::from_utf8_lossy(body).into_owned();
    redactions.text(&mut text);
    let cleaned: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let cleaned = cleaned.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut shown: String = cleaned.chars().take(EXCERPT_CHARS).collect();
    if cleaned.chars().count() > EXCERPT_CHARS {
        shown.push('…');
    }
    shown
}

/// Says what went wrong without echoing the URL, which can carry user values.
fn describe_send_error(err: &reqwest::Error) -> String {
    if let Some(refused) = egress::refusal(err) {
        refused.to_string()
    } else if err.is_timeout() {
        "the service did not answer in time".to_owned()
    } else if err.is_connect() {
        "the service could not be reached".to_owned()
    } else {
        "the request to the service failed".to_owned()
    }
}

/// Words that, in a query parameter's name (case and `-`/`_` aside), make its value a
/// credential: `key`, `api-key`, `appid`, `access_token`, `X-Amz-Signature`, …
const CREDENTIAL_WORDS: [&str; 12] = [
    "key",
    "token",
    "secret",
    "sig",
    "pass",
    "pwd",
    "auth",
    "credential",
    "session",
    "jwt",
    "appid",
    "private",
];

/// Whether a query parameter named `name` carries a credential.
fn is_credential_parameter(name: &str) -> bool {
    let plain: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    CREDENTIAL_WORDS.iter().any(|word| plain.contains(word))
}

/// What a service's address carries that is secret: the password it signs in with and
/// the name with it (sent as `Authorization: Basic`, which a service may echo), the
/// values of its credential parameters (`?key=…`, which come back in links to further
/// pages), and a key written into its path (`/v3/<key>`, `/bot<id>:<token>`, a
/// webhook's last segment), which an error page or a `self` link repeats. Other
/// parameters (`?format=json`), the host and the rest of the path are no secret, and
/// masking them would garble every answer that names them.
fn secrets_in_address(address: &str) -> Vec<String> {
    let Ok(url) = reqwest::Url::parse(address) else {
        return Vec::new();
    };
    let decoded = |text: &str| {
        percent_encoding::percent_decode_str(text)
            .decode_utf8_lossy()
            .into_owned()
    };
    let mut found = Vec::new();
    if let Some(password) = url.password() {
        let (user, password) = (decoded(url.username()), decoded(password));
        found.push(format!("{user}:{password}"));
        found.push(password);
    } else if !url.username().is_empty() {
        // A token given as the user name alone (`https://TOKEN@host`), sent as Basic.
        found.push(decoded(url.username()));
    }
    found.retain(|secret| secret.chars().count() >= redact::MIN_SECRET_CHARS);
    found.extend(url.query_pairs().filter_map(|(name, value)| {
        (is_credential_parameter(&name) && value.chars().count() >= redact::MIN_SECRET_CHARS)
            .then(|| value.into_owned())
    }));
    for segment in url.path_segments().into_iter().flatten().map(decoded) {
        if looks_like_a_key(&segment) {
            found.push(segment.clone());
        }
        // `<id>:<token>`: the token alone is what a service says back as often.
        if segment.contains(':') {
            found.extend(
                segment
                    .split(':')
                    .filter(|piece| looks_like_a_key(piece))
                    .map(str::to_owned),
            );
        }
    }
    found
}

/// Fewest characters of a path segment taken for a key.
const KEY_CHARS: usize = 16;

/// Whether a path segment reads as a key rather than a name: long, with letters and
/// digits both (`v1`, `repos`, `2024-01-01` are names; `AAHdq…0K5PAL` is not).
fn looks_like_a_key(segment: &str) -> bool {
    segment.chars().count() >= KEY_CHARS
        && segment.chars().any(|c| c.is_ascii_digit())
        && segment.chars().any(|c| c.is_alphabetic())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_address_credentials_are_secrets_its_host_and_other_parameters_are_not() {
        assert_eq!(
            secrets_in_address(
                "https://svc:p%40ss%2Bw0rd@api.example.com/v1?API_KEY=k3y-0f-the-api&format=application%2Fjson&X-Amz-Signature=s1gn&appid=0ab1"
            ),
            [
                "svc:p@ss+w0rd",
                "p@ss+w0rd",
                "k3y-0f-the-api",
                "s1gn",
                "0ab1"
            ]
        );
        assert_eq!(
            secrets_in_address("https://ghp_t0ken@api.example.com/?page=2&code_format=long"),
            ["ghp_t0ken"]
        );
        assert!(secrets_in_address("https://api.example.com/v1").is_empty());
        assert!(secrets_in_address("not an address").is_empty());
    }

    #[test]
    fn a_key_in_an_address_path_is_a_secret_its_names_are_not() {
        assert_eq!(
            secrets_in_address("https://mainnet.example.io/v3/9aa3d95b3bc440fa88ea12eaa4456161"),
            ["9aa3d95b3bc440fa88ea12eaa4456161"]
        );
        assert_eq!(
            secrets_in_address(
                "https://api.example.org/bot5501234:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
            ),
            [
                "bot5501234:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw",
                "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"
            ]
        );
        assert_eq!(
            secrets_in_address(
                "https://hooks.example.com/services/T0001/B0002/Xk3p%2Fq9Rt5Vw7Yz1Ab4Cd"
            ),
            ["Xk3p/q9Rt5Vw7Yz1Ab4Cd"]
        );
        for named in [
            "https://api.example.com/v2/accounts/reports",
            "https://api.example.com/2024-01-01/items",
            "https://api.example.com/organisations/engineering-division",
        ] {
            assert!(secrets_in_address(named).is_empty(), "{named}");
        }
    }

    #[test]
    fn a_short_secret_at_the_cut_of_an_error_excerpt_leaves_nothing_behind() {
        let values = json!({"pin": "73916", "note": "ok"});
        let values = values.as_object().cloned().unwrap_or_default();
        // The PIN straddles the cut: two of its characters would be shown.
        let body = format!("{}73916 was refused", "x".repeat(EXCERPT_CHARS - 2));
        let redactions = Redactions::new(carried_values(&values, &[])).standing_in("[redacted]");
        let shown = excerpt(body.as_bytes(), &redactions);
        assert!(shown.starts_with("xx") && shown.ends_with('…'), "{shown}");
        assert!(!shown.contains("73"), "{shown}");
    }
}
