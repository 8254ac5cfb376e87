//! `[[mcp_servers]]` and `[[tool_overlays]]` of the tools file, checked when the file is
//! loaded: a server without a transport, a bad name or a broken overlay field stops
//! start-up with a message naming it, like any other mistake in the file.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use protocol::api::{McpServerInfo, McpServerStatus};
use protocol::fields::InputRequestSpec;
use serde::Deserialize;
use serde_json::Value;

use super::NAMESPACE_SEPARATOR;
use crate::tools::redact;
use crate::tools::registry::read_input_spec;
use crate::tools::template::Template;

/// What toolgate adds to an MCP tool it did not write: a per-server `tools.<name>`
/// table, or the body of a `[[tool_overlays]]` entry.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayBody {
    #[serde(default)]
    requires_user_input: Option<Value>,
    #[serde(default)]
    requires_approval: Option<Value>,
    #[serde(default)]
    key_argument: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    description: Option<String>,
}

/// A `[[tool_overlays]]` entry: the overlay and which tools it matches, by their
/// namespaced name (`server__tool`) or a prefix of it.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverlayFileEntry {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    prefix: Option<String>,
    #[serde(default)]
    requires_user_input: Option<Value>,
    #[serde(default)]
    requires_approval: Option<Value>,
    #[serde(default)]
    key_argument: Option<String>,
    #[serde(default)]
    enabled: Option<bool>,
    #[serde(default)]
    description: Option<String>,
}

/// An `[[mcp_servers]]` entry as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerEntry {
    pub name: String,
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    cwd: Option<PathBuf>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    allow_private_networks: bool,
    #[serde(default)]
    connect_timeout_seconds: Option<u64>,
    #[serde(default)]
    call_timeout_seconds: Option<u64>,
    #[serde(default)]
    elicitation_timeout_seconds: Option<u64>,
    #[serde(default)]
    max_sessions: Option<usize>,
    #[serde(default)]
    protocol_version: Option<String>,
    #[serde(default)]
    trust_annotations: bool,
    #[serde(default)]
    tools: BTreeMap<String, OverlayBody>,
}

/// Which protocol revision toolgate offers a server.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Revision {
    /// 2025-11-25: the `initialize` handshake; a server asks the user with
    /// `elicitation/create` while its tool runs.
    #[default]
    Sessions,
    /// 2026-07-28 where the server speaks it (else 2025-11-25): a tool answers
    /// `input_required` and is called again with the answers; nothing waits on a live
    /// session.
    Stateless,
}

fn enabled_by_default() -> bool {
    true
}

/// How toolgate reaches a server.
#[derive(Clone, Debug)]
pub enum Transport {
    /// A child process speaking MCP on its standard input and output. Values may use
    /// `{env.NAME}`; `command = "{toolgate}"` is this toolgate program itself.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// Streamable HTTP. Header values may use `{env.NAME}`.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        allow_private_networks: bool,
    },
}

impl Transport {
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Stdio { .. } => "stdio",
            Transport::Http { .. } => "http",
        }
    }
}

/// One MCP server, checked.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub name: String,
    pub enabled: bool,
    pub transport: Transport,
    pub connect_timeout: Duration,
    /// How long a call may take, not counting the time it waits for the user.
    pub call_timeout: Duration,
    /// How long one of its questions to the user stays open.
    pub elicitation_timeout: Duration,
    /// Most sessions with the server at once.
    pub max_sessions: usize,
    pub revision: Revision,
    /// Whether the server's word that a tool only reads (`readOnlyHint`) lets the tool
    /// run without the user's approval. Off unless the operator says so: a hostile or
    /// compromised server would mark its destructive tools read-only.
    pub trust_annotations: bool,
    /// `tools.<name>` tables, by the server's own tool name.
    pub tools: BTreeMap<String, Overlay>,
}

impl ServerConfig {
    /// What the environment gives the server's settings (`{env.NAME}` in its
    /// command's arguments and environment, or its headers) that may be a secret. Its
    /// tools' answers never repeat them.
    pub fn secret_env_values(&self) -> Vec<String> {
        let settings: Vec<&String> = match &self.transport {
            Transport::Stdio { args, env, .. } => args.iter().chain(env.values()).collect(),
            Transport::Http { headers, .. } => headers.values().collect(),
        };
        let templates: Vec<Template> = settings
            .into_iter()
            .filter_map(|setting| Template::parse(setting).ok())
            .collect();
        redact::secret_env_values(templates.iter().flat_map(Template::env_names))
    }

    /// The secrets of [`Self::secret_env_values`] to mask in what the server says that
    /// toolgate logs: a server may repeat what it was started with (in an error, even
    /// in a tool's name).
    pub fn settings_redactions(&self) -> redact::Redactions {
        redact::Redactions::new(self.secret_env_values().iter().map(String::as_str))
    }

    /// How `GET /api/tools` shows the server before it is first reached.
    pub fn initial_info(&self) -> McpServerInfo {
        McpServerInfo {
            name: self.name.clone(),
            transport: self.transport.name().to_owned(),
            status: if self.enabled {
                McpServerStatus::Connecting
            } else {
                McpServerStatus::Disabled
            },
            reason: (!self.enabled).then(|| format!("the MCP server `{}` is disabled", self.name)),
            protocol_version: None,
            tools: 0,
        }
    }
}

/// Which tools an overlay applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Matcher {
    Name(String),
    Prefix(String),
}

/// An overlay, checked: its fields and approval rule are read once here; the approval
/// rule's conditions are checked against each tool it meets.
#[derive(Clone, Debug, Default)]
pub struct Overlay {
    pub requires_user_input: Option<InputRequestSpec>,
    pub requires_approval: Option<Value>,
    pub key_argument: Option<String>,
    pub enabled: Option<bool>,
    pub description: Option<String>,
}

impl Overlay {
    fn read(body: OverlayBody) -> anyhow::Result<Overlay> {
        let requires_user_input = body.requires_user_input.map(read_input_spec).transpose()?;
        if let Some(description) = &body.description
            && description.trim().is_empty()
        {
            bail!("description must not be empty: the model picks tools by it");
        }
        Ok(Overlay {
            requires_user_input,
            requires_approval: body.requires_approval,
            key_argument: body.key_argument,
            enabled: body.enabled,
            description: body.description,
        })
    }

    /// `other` on top of `self`: what `other` says wins.
    pub fn then(&self, other: &Overlay) -> Overlay {
        Overlay {
            requires_user_input: other
                .requires_user_input
                .clone()
                .or_else(|| self.requires_user_input.clone()),
            requires_approval: other
                .requires_approval
                .clone()
                .or_else(|| self.requires_approval.clone()),
            key_argument: other
                .key_argument
                .clone()
                .or_else(|| self.key_argument.clone()),
            enabled: other.enabled.or(self.enabled),
            description: other
                .description
                .clone()
                .or_else(|| self.description.clone()),
        }
    }
}

/// The tools file's MCP part.
#[derive(Clone, Debug, Default)]
pub struct McpConfig {
    pub servers: Vec<ServerConfig>,
    pub overlays: Vec<(Matcher, Overlay)>,
}

impl McpConfig {
    pub fn read(
        servers: Vec<ServerEntry>,
        overlays: Vec<OverlayFileEntry>,
    ) -> anyhow::Result<McpConfig> {
        let mut checked: Vec<ServerConfig> = Vec::new();
        for entry in servers {
            let name = entry.name.clone();
            let server = read_server(entry).with_context(|| format!("MCP server `{name}`"))?;
            if checked.iter().any(|s| s.name == server.name) {
                bail!("MCP server `{}` is defined twice", server.name);
            }
            checked.push(server);
        }
        let mut read_overlays = Vec::new();
        for (index, entry) in overlays.into_iter().enumerate() {
            let label = entry
                .name
                .clone()
                .or_else(|| entry.prefix.as_ref().map(|p| format!("{p}*")))
                .unwrap_or_else(|| format!("#{}", index + 1));
            let read = read_overlay(entry).with_context(|| format!("tool overlay `{label}`"))?;
            read_overlays.push(read);
        }
        Ok(McpConfig {
            servers: checked,
            overlays: read_overlays,
        })
    }

    /// What the overlays say about one tool, least specific first: prefixes (shorter
    /// first), then the exact name, then the server's own `tools.<name>` table.
    pub fn overlay_for(&self, server: &ServerConfig, remote_name: &str) -> Overlay {
        let full = format!("{}{NAMESPACE_SEPARATOR}{remote_name}", server.name);
        let mut prefixes: Vec<(&String, &Overlay)> = self
            .overlays
            .iter()
            .filter_map(|(matcher, overlay)| match matcher {
                Matcher::Prefix(prefix) if full.starts_with(prefix.as_str()) => {
                    Some((prefix, overlay))
                }
                _ => None,
            })
            .collect();
        prefixes.sort_by_key(|(prefix, _)| prefix.len());
        let mut merged = Overlay::default();
        for (_, overlay) in prefixes {
            merged = merged.then(overlay);
        }
        for (matcher, overlay) in &self.overlays {
            if *matcher == Matcher::Name(full.clone()) {
                merged = merged.then(overlay);
            }
        }
        if let Some(own) = server.tools.get(remote_name) {
            merged = merged.then(own);
        }
        merged
    }
}

/// A server name goes into every tool name (`name__tool`), which models accept only as
/// `[A-Za-z0-9_-]{1,64}`.
fn check_server_name(name: &str) -> anyhow::Result<()> {
    let shaped = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains(NAMESPACE_SEPARATOR)
        && !name.ends_with('_');
    if !shaped {
        bail!(
            "an MCP server name may use only letters, digits, `_` and `-` (1 to 32, no `__`, not ending in `_`): it prefixes its tools' names"
        );
    }
    Ok(())
}

fn seconds(value: Option<u64>, default: u64, what: &str) -> anyhow::Result<Duration> {
    match value.unwrap_or(default) {
        0 => bail!("{what} must be at least 1 second"),
        n if n > 86_400 => bail!("{what} may be at most a day (86400 seconds)"),
        n => Ok(Duration::from_secs(n)),
    }
}

fn read_server(entry: ServerEntry) -> anyhow::Result<ServerConfig> {
    check_server_name(&entry.name)?;
    let transport = match (entry.command, entry.url) {
        (Some(command), None) => {
            if command.trim().is_empty() {
                bail!("command must not be empty");
            }
            if !entry.headers.is_empty() || entry.allow_private_networks {
                bail!("headers and allow_private_networks go with `url`, not `command`");
            }
            Transport::Stdio {
                command,
                args: entry.args,
                env: entry.env,
                cwd: entry.cwd,
            }
        }
        (None, Some(url)) => {
            let parsed = reqwest::Url::parse(&url)
                .map_err(|err| anyhow::anyhow!("url `{url}` is not a URL: {err}"))?;
            if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
                bail!("url must be an http:// or https:// address with a host");
            }
            if !entry.args.is_empty() || !entry.env.is_empty() || entry.cwd.is_some() {
                bail!("args, env and cwd go with `command`, not `url`");
            }
            for name in entry.headers.keys() {
                reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| anyhow::anyhow!("`{name}` is not a valid header name"))?;
            }
            Transport::Http {
                url,
                headers: entry.headers,
                allow_private_networks: entry.allow_private_networks,
            }
        }
        (Some(_), Some(_)) => bail!("give either `command` (stdio) or `url` (HTTP), not both"),
        (None, None) => bail!("give `command` (stdio) or `url` (streamable HTTP)"),
    };
    let mut tools = BTreeMap::new();
    for (name, body) in entry.tools {
        let overlay = Overlay::read(body).with_context(|| format!("tools.{name}"))?;
        tools.insert(name, overlay);
    }
    let max_sessions = entry.max_sessions.unwrap_or(16);
    if !(1..=1000).contains(&max_sessions) {
        bail!("max_sessions must be from 1 to 1000");
    }
    let revision = match entry.protocol_version.as_deref() {
        None | Some("2025-11-25") => Revision::Sessions,
        Some("2026-07-28") => Revision::Stateless,
        Some(other) => {
            bail!("protocol_version `{other}` is not one toolgate speaks: 2025-11-25 or 2026-07-28")
        }
    };
    Ok(ServerConfig {
        name: entry.name,
        enabled: entry.enabled,
        transport,
        connect_timeout: seconds(entry.connect_timeout_seconds, 10, "connect_timeout_seconds")?,
        call_timeout: seconds(entry.call_timeout_seconds, 120, "call_timeout_seconds")?,
        elicitation_timeout: seconds(
            entry.elicitation_timeout_seconds,
            600,
            "elicitation_timeout_seconds",
        )?,
        max_sessions,
        revision,
        trust_annotations: entry.trust_annotations,
        tools,
    })
}

fn read_overlay(entry: OverlayFileEntry) -> anyhow::Result<(Matcher, Overlay)> {
    let matcher = match (entry.name, entry.prefix) {
        (Some(name), None) if name.contains(NAMESPACE_SEPARATOR) => Matcher::Name(name),
        (None, Some(prefix)) if !prefix.is_empty() => Matcher::Prefix(prefix),
        (Some(_), None) => {
            bail!("name must be a namespaced MCP tool name, `<server>{NAMESPACE_SEPARATOR}<tool>`")
        }
        _ => bail!("give exactly one of `name` (a whole tool name) or `prefix`"),
    };
    let overlay = Overlay::read(OverlayBody {
        requires_user_input: entry.requires_user_input,
        requires_approval: entry.requires_approval,
        key_argument: entry.key_argument,
        enabled: entry.enabled,
        description: entry.description,
    })?;
    Ok((matcher, overlay))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> anyhow::Result<McpConfig> {
        #[derive(Deserialize)]
        struct File {
            #[serde(default)]
            mcp_servers: Vec<ServerEntry>,
            #[serde(default)]
            tool_overlays: Vec<OverlayFileEntry>,
        }
        let file: File = toml::from_str(text)?;
        McpConfig::read(file.mcp_servers, file.tool_overlays)
    }

    fn error_of(text: &str) -> String {
        match read(text) {
            Ok(_) => panic!("must be refused:\n{text}"),
            Err(err) => format!("{err:#}"),
        }
    }

    #[test]
    fn a_server_needs_exactly_one_transport_and_a_tool_name_prefix_for_a_name() {
        assert!(error_of("[[mcp_servers]]\nname = \"x\"\n").contains("give `command`"));
        assert!(
            error_of("[[mcp_servers]]\nname = \"x\"\ncommand = \"a\"\nurl = \"http://h/\"\n")
                .contains("not both")
        );
        for bad in ["a__b", "with space", "", "trailing_"] {
            let err = error_of(&format!(
                "[[mcp_servers]]\nname = \"{bad}\"\ncommand = \"a\"\n"
            ));
            assert!(err.contains("letters, digits"), "{bad}: {err}");
        }
        assert!(
            error_of("[[mcp_servers]]\nname = \"x\"\nurl = \"file:///etc/passwd\"\n")
                .contains("http:// or https://")
        );
        let twice = "[[mcp_servers]]\nname = \"x\"\ncommand = \"a\"\n[[mcp_servers]]\nname = \"x\"\ncommand = \"b\"\n";
        assert!(error_of(twice).contains("defined twice"));
    }

    #[test]
    fn overlays_are_checked_at_load_and_merge_from_general_to_specific() {
        let bad_field = r#"
[[tool_overlays]]
prefix = "files__"
[tool_overlays.requires_user_input]
reason = "Which folder?"
fields = [ { name = "folder", type = "text", validation = "([" } ]
"#;
        let err = error_of(bad_field);
        assert!(
            err.contains("tool overlay `files__*`") && err.contains("field `folder`"),
            "{err}"
        );
        let config = read(
            r#"
[[mcp_servers]]
name = "files"
command = "files-server"
[mcp_servers.tools.delete]
description = "Delete one file (own table)"

[[tool_overlays]]
prefix = "files__"
requires_approval = true
description = "From the short prefix"

[[tool_overlays]]
prefix = "files__del"
key_argument = "path"

[[tool_overlays]]
name = "files__delete"
enabled = false
"#,
        )
        .expect("valid");
        let server = &config.servers[0];
        let merged = config.overlay_for(server, "delete");
        assert_eq!(
            merged.description.as_deref(),
            Some("Delete one file (own table)")
        );
        assert_eq!(merged.key_argument.as_deref(), Some("path"));
        assert_eq!(merged.enabled, Some(false));
        assert_eq!(merged.requires_approval, Some(Value::Bool(true)));
        let other = config.overlay_for(server, "list");
        assert_eq!(other.description.as_deref(), Some("From the short prefix"));
        assert_eq!(other.key_argument, None);
    }
}
