//! The tools the executor knows: built-ins, those of the tools file (`TOOLGATE_TOOLS`),
//! and those of the MCP servers it names, which come and go with their servers. Every
//! definition of the file is checked when it is loaded, so a bad regex or a placeholder
//! nobody fills stops start-up instead of failing at a user's first click.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, RwLock};

use anyhow::{Context, bail};
use protocol::api::{McpServerInfo, ToolInfo};
use protocol::approval::ApprovalSpec;
use protocol::fields::{self, FieldSpec, FieldType, InputRequestSpec};
use protocol::unseen;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::kinds::http::{Fillers, HttpConfig, HttpTool};
use super::kinds::sql::{SqlConfig, SqlTool};
use super::mcp::{self, McpConfig};
use super::redact::Redactions;
use crate::db::saved_inputs::FieldClaim;

pub enum Runner {
    Http(HttpTool),
    Sql(SqlTool),
    Calculator,
    /// Reads a skill from the skills folder.
    ReadSkill(std::path::PathBuf),
    /// A tool of an MCP server, called through its session for the user.
    Mcp(mcp::McpTarget),
}

/// Where a tool was defined. A secret shared under a `memory_key` only crosses between
/// tools of the same origin (for MCP: of the same server).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolOrigin {
    Builtin,
    ToolsFile,
    Mcp { server: String },
}

impl ToolOrigin {
    fn api(&self) -> protocol::api::ToolOrigin {
        match self {
            ToolOrigin::Builtin => protocol::api::ToolOrigin::Builtin,
            ToolOrigin::ToolsFile => protocol::api::ToolOrigin::ToolsFile,
            ToolOrigin::Mcp { .. } => protocol::api::ToolOrigin::Mcp,
        }
    }

    /// The MCP server a tool comes from.
    pub fn server(&self) -> Option<&str> {
        match self {
            ToolOrigin::Mcp { server } => Some(server),
            _ => None,
        }
    }
}

impl Runner {
    fn kind(&self) -> &'static str {
        match self {
            Runner::Http(_) => "http",
            Runner::Sql(_) => "sql",
            Runner::Calculator | Runner::ReadSkill(_) => "builtin",
            Runner::Mcp(_) => "mcp",
        }
    }
}

pub struct Tool {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub input_spec: Option<InputRequestSpec>,
    pub enabled: bool,
    /// The argument that identifies what a call works on; a newer call with the same
    /// value supersedes older ones in the model's context.
    pub key_argument: Option<String>,
    /// When calls wait for the user's yes; `None` when they never do.
    pub approval: Option<ApprovalSpec>,
    pub origin: ToolOrigin,
    pub runner: Runner,
    /// Why its MCP server cannot be reached now, in words any caller may see.
    pub offline: Option<String>,
    /// Shared by the tool's copies (one marked offline with its server): compiled once.
    validator: Arc<jsonschema::Validator>,
    /// Each field's name as a service may read it ([`unseen::name_key`]), in order.
    field_keys: Vec<String>,
}

/// Everything a tool is made of; [`Tool::assemble`] checks the schema.
pub struct ToolParts {
    pub name: String,
    pub description: String,
    pub parameters: Value,
    pub input_spec: Option<InputRequestSpec>,
    pub enabled: bool,
    pub key_argument: Option<String>,
    pub approval: Option<ApprovalSpec>,
    pub origin: ToolOrigin,
    pub runner: Runner,
}

impl Tool {
    /// A tool from its parts; an argument schema that is not valid JSON Schema is an
    /// error.
    pub fn assemble(parts: ToolParts) -> anyhow::Result<Tool> {
        let validator = jsonschema::validator_for(&parts.parameters)
            .map_err(|err| anyhow::anyhow!("parameters is not a valid JSON Schema: {err}"))?;
        let field_keys = parts.input_spec.as_ref().map_or_else(Vec::new, |spec| {
            spec.fields
                .iter()
                .map(|field| unseen::name_key(&field.name))
                .collect()
        });
        Ok(Tool {
            name: parts.name,
            description: parts.description,
            parameters: parts.parameters,
            input_spec: parts.input_spec,
            enabled: parts.enabled,
            key_argument: parts.key_argument,
            approval: parts.approval,
            origin: parts.origin,
            runner: parts.runner,
            offline: None,
            validator: Arc::new(validator),
            field_keys,
        })
    }

    /// Why the tool cannot run now, in words any caller may see: disabled, its MCP
    /// server unreachable, or not configured on this server (which setting is missing is
    /// for the operator's log, see [`Tool::configuration_problem`]).
    pub fn unavailable_reason(&self) -> Option<String> {
        if !self.enabled {
            return Some(format!("the tool `{}` is disabled", self.name));
        }
        if let Some(offline) = &self.offline {
            return Some(offline.clone());
        }
        self.configuration_problem()
            .map(|_| format!("the tool `{}` is not configured on this server", self.name))
    }

    /// What the server's environment lacks for this tool, naming the settings.
    pub fn configuration_problem(&self) -> Option<String> {
        match &self.runner {
            Runner::Http(http) => http.unavailable_reason(),
            Runner::Sql(sql) => sql.unavailable_reason(),
            Runner::Calculator | Runner::ReadSkill(_) | Runner::Mcp(_) => None,
        }
    }

    /// The same tool, marked unreachable (or reachable again) with its server. Its
    /// schema is not compiled again: a server that comes and goes (a hostile one, every
    /// second) costs no compiling of its schemas while the catalogue is locked.
    pub fn with_offline(&self, offline: Option<String>) -> anyhow::Result<Tool> {
        let runner = match &self.runner {
            Runner::Mcp(target) => Runner::Mcp(target.clone()),
            _ => anyhow::bail!("only an MCP tool goes offline with its server"),
        };
        Ok(Tool {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
            input_spec: self.input_spec.clone(),
            enabled: self.enabled,
            key_argument: self.key_argument.clone(),
            approval: self.approval.clone(),
            origin: self.origin.clone(),
            runner,
            offline,
            validator: self.validator.clone(),
            field_keys: self.field_keys.clone(),
        })
    }

    /// The reasons the arguments break the tool's JSON Schema, if any.
    pub fn argument_errors(&self, arguments: &Value) -> Vec<String> {
        self.argument_problems(arguments)
            .into_iter()
            .map(|(path, message)| {
                if path.is_empty() {
                    message
                } else {
                    format!("{path}: {message}")
                }
            })
            .collect()
    }

    /// Each way the arguments break the schema, with the dotted path of the argument
    /// (empty for the arguments as a whole).
    pub fn argument_problems(&self, arguments: &Value) -> Vec<(String, String)> {
        self.validator
            .iter_errors(arguments)
            .map(|err| {
                let pointer = err.instance_path().to_string();
                let path = pointer.trim_start_matches('/').replace('/', ".");
                (path, err.to_string())
            })
            .collect()
    }

    pub fn info(&self) -> ToolInfo {
        ToolInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            parameters: self.parameters.clone(),
            requires_user_input: self.input_spec.clone(),
            requires_approval: self.approval.clone(),
            kind: self.runner.kind().to_owned(),
            origin: self.origin.api(),
            server: self.origin.server().map(str::to_owned),
            enabled: self.enabled,
            available: self.unavailable_reason().is_none(),
            unavailable_reason: self.unavailable_reason(),
        }
    }

    pub fn fields(&self) -> &[FieldSpec] {
        self.input_spec
            .as_ref()
            .map_or(&[], |spec| spec.fields.as_slice())
    }

    pub fn field(&self, name: &str) -> Option<&FieldSpec> {
        self.fields().iter().find(|f| f.name == name)
    }

    /// What an MCP tool's server declares it uses for a top-level argument left out
    /// (`default` in its input schema), for the arguments that are no field of the
    /// user's. The call is made with them written out, so an approval card shows, and
    /// the user approves, the values the server would otherwise fill in unseen.
    pub fn server_defaults(&self) -> Map<String, Value> {
        if !matches!(self.runner, Runner::Mcp(_)) {
            return Map::new();
        }
        let Some(properties) = self.parameters.get("properties").and_then(Value::as_object) else {
            return Map::new();
        };
        properties
            .iter()
            .filter(|(name, _)| self.field(name).is_none())
            .filter_map(|(name, schema)| Some((name.clone(), schema.get("default")?.clone())))
            .collect()
    }

    /// A field only the user may fill: the call's arguments never set it.
    pub fn is_user_only(&self, name: &str) -> bool {
        self.field(name).is_some_and(|f| !f.model_may_fill)
    }

    /// The field an argument named `name` may be taken for by the tool's server though
    /// it is not that field's name (`Account_ID` for `account_id`, see
    /// [`unseen::name_key`]): such an argument would fill the field past the gate.
    /// `None` for a field's own name, and for an argument the tool's schema declares by
    /// exactly that name, which its server tells apart from the field.
    pub fn field_variant(&self, name: &str) -> Option<&FieldSpec> {
        if self.field(name).is_some() || self.declares(name) {
            return None;
        }
        let key = unseen::name_key(name);
        self.field_keys
            .iter()
            .position(|field| *field == key)
            .and_then(|index| self.fields().get(index))
    }

    /// Two names a server matching names loosely may take for one ([`unseen::name_key`]:
    /// `sql` and `ſql`, `to` and `To`), one of them among `arguments` and the other
    /// there too or declared by the schema, unless the schema declares both by exactly
    /// those names. The approval card would show one thing and the server act on the
    /// other: the last of the two (Go's `encoding/json`), or its own default for the
    /// declared name when it reads names strictly. Fields and names like them are left
    /// to [`field_variant`](Self::field_variant).
    pub fn names_read_as_one<'a>(
        &'a self,
        arguments: &'a Map<String, Value>,
    ) -> Option<(&'a str, &'a str)> {
        let declared = self
            .parameters
            .get("properties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|properties| properties.keys());
        let ordinary =
            |name: &&String| self.field(name).is_none() && self.field_variant(name).is_none();
        let mut seen: HashMap<String, &'a str> = HashMap::with_capacity(arguments.len());
        for name in declared.filter(ordinary) {
            seen.entry(unseen::name_key(name)).or_insert(name);
        }
        for name in arguments.keys().filter(ordinary) {
            match seen.entry(unseen::name_key(name)) {
                Entry::Occupied(first) => {
                    let first = *first.get();
                    if first != name && !(self.declares(first) && self.declares(name)) {
                        return Some((first, name));
                    }
                }
                Entry::Vacant(slot) => {
                    slot.insert(name);
                }
            }
        }
        None
    }

    /// Whether the argument schema names `name` among its properties.
    fn declares(&self, name: &str) -> bool {
        self.parameters
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key(name))
    }

    /// The call's arguments as they may be kept and shown: without the user-only
    /// fields it tried to set (ignored anyway), so without any secret, and without
    /// arguments named like a field (dropped anyway).
    pub fn storable_arguments(&self, arguments: &Map<String, Value>) -> Map<String, Value> {
        arguments
            .iter()
            .filter(|(name, _)| !self.is_user_only(name) && self.field_variant(name).is_none())
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }

    /// The call's arguments as the model and the stream may see them: a value aimed at
    /// a secret field is masked.
    pub fn masked_arguments(&self, arguments: &Map<String, Value>) -> Map<String, Value> {
        fields::mask_secrets(self.fields(), arguments)
    }

    /// What a call with these values must not pass on in its outcome: the values of
    /// its secret fields and what the environment gives its templates (API keys,
    /// database URLs; not an http tool's base address). An MCP tool's answer is masked where its server's call ends, with the server's
    /// environment values (`mcp::calls`).
    pub fn redactions(&self, values: &Map<String, Value>) -> Redactions {
        let env_values = match &self.runner {
            Runner::Http(http) => http.secret_env_values(),
            Runner::Sql(sql) => sql.secret_env_values(),
            Runner::Calculator | Runner::ReadSkill(_) | Runner::Mcp(_) => Vec::new(),
        };
        let secret_values = self
            .fields()
            .iter()
            .filter(|field| field.is_secret())
            .filter_map(|field| values.get(&field.name).and_then(Value::as_str));
        Redactions::new(secret_values.chain(env_values.iter().map(String::as_str)))
    }

    /// The values a call runs with, as an approval shows and binds them: everything but
    /// secrets, which the user gave to this tool and which are never shown.
    pub fn approvable_values(&self, values: &Map<String, Value>) -> Map<String, Value> {
        values
            .iter()
            .filter(|(name, _)| !self.field(name).is_some_and(FieldSpec::is_secret))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect()
    }

    /// Whether a call with these values must wait for the user's approval.
    pub fn needs_approval(&self, values: &Map<String, Value>) -> bool {
        self.approval
            .as_ref()
            .is_some_and(|rule| rule.applies_to(values))
    }

    /// The words on an approval card.
    pub fn approval_reason(&self) -> String {
        self.approval
            .as_ref()
            .and_then(|rule| rule.reason.clone())
            .unwrap_or_else(|| format!("`{}` wants to run with these arguments", self.name))
    }
}

/// One MCP server's part of the registry: where toolgate stands with it and the tools
/// it offered when last reached.
#[derive(Clone)]
struct McpCatalog {
    info: McpServerInfo,
    tools: Vec<Arc<Tool>>,
}

#[derive(Default)]
pub struct ToolRegistry {
    tools: Vec<Arc<Tool>>,
    mcp: RwLock<BTreeMap<String, McpCatalog>>,
}

impl ToolRegistry {
    /// Built-ins plus the tools file, if one is named, and the file's MCP servers and
    /// overlays (their tools join once the servers are reached). With a skills folder,
    /// the `read_skill` tool is added.
    pub fn load(
        path: Option<&Path>,
        skills_dir: Option<&Path>,
    ) -> anyhow::Result<(Self, McpConfig)> {
        let mut registry = ToolRegistry::default();
        for tool in builtins(skills_dir)? {
            registry.add(tool)?;
        }
        let mut mcp = McpConfig::default();
        if let Some(path) = path {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading the tools file {}", path.display()))?;
            let file =
                parse_file(&text).with_context(|| format!("tools file {}", path.display()))?;
            for tool in file.tools {
                registry
                    .add(tool)
                    .with_context(|| format!("tools file {}", path.display()))?;
            }
            for server in &file.mcp.servers {
                if registry.tools.iter().any(|tool| {
                    tool.name
                        .strip_prefix(server.name.as_str())
                        .is_some_and(|rest| rest.starts_with(mcp::NAMESPACE_SEPARATOR))
                }) {
                    bail!(
                        "tools file {}: tool names starting with `{}{}` are kept for the MCP server `{}`",
                        path.display(),
                        server.name,
                        mcp::NAMESPACE_SEPARATOR,
                        server.name
                    );
                }
            }
            mcp = file.mcp;
        }
        for server in &mcp.servers {
            registry.set_mcp_server(server.initial_info(), Vec::new());
        }
        Ok((registry, mcp))
    }

    fn add(&mut self, tool: Tool) -> anyhow::Result<()> {
        if self.get(&tool.name).is_some() {
            bail!("tool `{}` is defined twice", tool.name);
        }
        if tool.enabled
            && let Some(problem) = tool.configuration_problem()
        {
            tracing::warn!(tool = %tool.name, problem = %problem, "tool is not configured; calls to it will fail");
        }
        self.tools.push(Arc::new(tool));
        Ok(())
    }

    fn catalogs(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, McpCatalog>> {
        self.mcp
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn get(&self, name: &str) -> Option<Arc<Tool>> {
        if let Some(tool) = self.tools.iter().find(|t| t.name == name) {
            return Some(tool.clone());
        }
        let (server, _) = name.split_once(mcp::NAMESPACE_SEPARATOR)?;
        self.catalogs()
            .get(server)?
            .tools
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    /// Every tool known now: built-ins, the tools file's, then each MCP server's.
    pub fn all(&self) -> Vec<Arc<Tool>> {
        let mut all = self.tools.clone();
        for catalog in self.catalogs().values() {
            all.extend(catalog.tools.iter().cloned());
        }
        all
    }

    /// Every tool and every MCP server of the tools file (reached or not), read at one
    /// moment: a server marked down
    /// between two separate reads would otherwise be listed down beside its tools still
    /// listed available.
    pub fn listing(&self) -> (Vec<Arc<Tool>>, Vec<McpServerInfo>) {
        let catalogs = self.catalogs();
        let mut tools = self.tools.clone();
        tools.extend(catalogs.values().flat_map(|c| c.tools.iter().cloned()));
        let servers = catalogs.values().map(|c| c.info.clone()).collect();
        (tools, servers)
    }

    /// Replaces what is known of one MCP server: its state and its tools.
    pub fn set_mcp_server(&self, info: McpServerInfo, tools: Vec<Arc<Tool>>) {
        let mut catalogs = self.mcp.write().unwrap_or_else(|p| p.into_inner());
        catalogs.insert(info.name.clone(), McpCatalog { info, tools });
    }

    /// Marks one MCP server unreachable, keeping its last known tools listed as
    /// unavailable with `reason`.
    pub fn mark_mcp_server_down(&self, server: &str, info: McpServerInfo, reason: &str) {
        let mut catalogs = self.mcp.write().unwrap_or_else(|p| p.into_inner());
        let tools = catalogs
            .get(server)
            .map(|catalog| {
                catalog
                    .tools
                    .iter()
                    .filter_map(|tool| tool.with_offline(Some(reason.to_owned())).ok())
                    .map(Arc::new)
                    .collect()
            })
            .unwrap_or_default();
        catalogs.insert(server.to_owned(), McpCatalog { info, tools });
    }

    /// Every field every tool declares, for binding values remembered before values
    /// were bound to tools.
    pub fn field_claims(&self) -> Vec<FieldClaim> {
        self.all()
            .iter()
            .flat_map(|tool| {
                tool.fields().iter().map(|field| FieldClaim {
                    tool_name: tool.name.clone(),
                    field_name: field.name.clone(),
                    memory_key: field.memory_key.clone(),
                    is_secret: field.is_secret(),
                    label: field.label.clone(),
                    model_may_fill: field.model_may_fill,
                })
            })
            .collect()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolsFile {
    #[serde(default)]
    tools: Vec<ToolEntry>,
    #[serde(default)]
    mcp_servers: Vec<mcp::config::ServerEntry>,
    #[serde(default)]
    tool_overlays: Vec<mcp::config::OverlayFileEntry>,
}

/// A tools file, read and checked.
pub struct ParsedFile {
    pub tools: Vec<Tool>,
    pub mcp: McpConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ToolEntry {
    name: String,
    description: String,
    kind: String,
    #[serde(default = "enabled_by_default")]
    enabled: bool,
    #[serde(default)]
    parameters: Option<Value>,
    #[serde(default)]
    requires_user_input: Option<Value>,
    #[serde(default)]
    key_argument: Option<String>,
    /// `true`, `false`, or a table (see [`ApprovalSpec`]); absent means "when the kind
    /// has side effects".
    #[serde(default)]
    requires_approval: Option<Value>,
    #[serde(default)]
    http: Option<HttpConfig>,
    #[serde(default)]
    sql: Option<SqlConfig>,
}

fn enabled_by_default() -> bool {
    true
}

/// Reads and checks every tool of a tools file.
pub fn parse_tools_file(text: &str) -> anyhow::Result<Vec<Tool>> {
    Ok(parse_file(text)?.tools)
}

/// Reads and checks a tools file: its tools, MCP servers and overlays.
pub fn parse_file(text: &str) -> anyhow::Result<ParsedFile> {
    let file: ToolsFile = toml::from_str(text).context("not a valid tools file")?;
    let tools = file
        .tools
        .into_iter()
        .map(|entry| {
            let name = entry.name.clone();
            build(entry).with_context(|| format!("tool `{name}`"))
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mcp = McpConfig::read(file.mcp_servers, file.tool_overlays)?;
    Ok(ParsedFile { tools, mcp })
}

fn build(entry: ToolEntry) -> anyhow::Result<Tool> {
    if entry.name.is_empty()
        || !entry
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        bail!("a tool name may use only letters, digits, `_` and `-`");
    }
    if entry.description.trim().is_empty() {
        bail!("a description is required: the model picks tools by it");
    }
    let parameters = entry
        .parameters
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let input_spec = entry.requires_user_input.map(read_input_spec).transpose()?;
    let fields = input_spec
        .as_ref()
        .map_or(&[][..], |spec| spec.fields.as_slice());
    let mut known: BTreeSet<String> = fields.iter().map(|f| f.name.clone()).collect();
    if let Some(properties) = parameters.get("properties").and_then(Value::as_object) {
        known.extend(properties.keys().cloned());
    }
    if let Some(key) = &entry.key_argument
        && !known.contains(key)
    {
        bail!("key_argument `{key}` is not an argument");
    }
    let runner = match (entry.kind.as_str(), entry.http, entry.sql) {
        ("http", Some(http), None) => {
            let fillers = Fillers {
                model_sets: known
                    .iter()
                    .filter(|name| {
                        fields
                            .iter()
                            .find(|field| &&field.name == name)
                            .is_none_or(|field| field.model_may_fill)
                    })
                    .cloned()
                    .collect(),
                fields: fields.iter().map(|field| field.name.clone()).collect(),
                known: known.clone(),
            };
            Runner::Http(HttpTool::new(http, &fillers).map_err(anyhow::Error::msg)?)
        }
        ("sql", None, Some(sql)) => {
            // Which database (and login) a query runs on is the user's choice, never a
            // prompt-injected model's.
            if fields
                .iter()
                .any(|f| f.name == sql.database_field && f.model_may_fill)
            {
                bail!(
                    "sql.database_field `{}` is one the model may fill; which database a query \
                     runs on is the user's choice: remove model_may_fill from it",
                    sql.database_field
                );
            }
            let options = fields
                .iter()
                .find(|f| f.name == sql.database_field && f.kind == FieldType::Select)
                .map(|f| f.options.iter().map(|o| o.value.clone()).collect());
            if !known.contains(&sql.query_argument) {
                bail!(
                    "sql.query_argument `{}` is not an argument",
                    sql.query_argument
                );
            }
            Runner::Sql(SqlTool::new(sql, options).map_err(anyhow::Error::msg)?)
        }
        ("calculator", None, None) => {
            if !known.contains("expression") {
                bail!("a calculator tool needs an `expression` argument");
            }
            Runner::Calculator
        }
        ("http", _, _) => bail!("an http tool needs an [http] table and nothing else"),
        ("sql", _, _) => bail!("a sql tool needs a [sql] table and nothing else"),
        ("calculator", _, _) => bail!("a calculator tool takes no [http] or [sql] table"),
        (other, _, _) => bail!("unknown kind `{other}`; expected http, sql or calculator"),
    };
    let side_effects = match &runner {
        Runner::Http(http) => http.has_side_effects(),
        _ => false,
    };
    let approval = read_approval(entry.requires_approval, side_effects, &known)?;
    Tool::assemble(ToolParts {
        name: entry.name,
        description: entry.description,
        parameters,
        input_spec,
        enabled: entry.enabled,
        key_argument: entry.key_argument,
        approval,
        origin: ToolOrigin::ToolsFile,
        runner,
    })
}

/// `requires_approval` of a tools file entry or an overlay: `true`, `false`, a table, or
/// absent (approval exactly when the tool has side effects). Conditions must name
/// arguments or fields the tool has.
pub(crate) fn read_approval(
    raw: Option<Value>,
    side_effects: bool,
    known: &BTreeSet<String>,
) -> anyhow::Result<Option<ApprovalSpec>> {
    let spec = match raw {
        None if side_effects => Some(ApprovalSpec::default()),
        None | Some(Value::Bool(false)) => None,
        Some(Value::Bool(true)) => Some(ApprovalSpec::default()),
        Some(table @ Value::Object(_)) => Some(
            serde_json::from_value::<ApprovalSpec>(table)
                .context("requires_approval is not valid")?,
        ),
        Some(_) => bail!("requires_approval is true, false or a table"),
    };
    if let Some(spec) = &spec {
        if spec.decisions.is_empty() {
            bail!("requires_approval.decisions needs at least one decision");
        }
        for rule in &spec.when {
            if !known.contains(&rule.field) {
                bail!(
                    "requires_approval.when names `{}`, which is neither an argument nor a field",
                    rule.field
                );
            }
        }
    }
    Ok(spec)
}

/// `requires_user_input` of a tools file entry or an overlay, every field checked.
pub(crate) fn read_input_spec(raw: Value) -> anyhow::Result<InputRequestSpec> {
    let raw_fields = raw
        .get("fields")
        .and_then(Value::as_array)
        .cloned()
        .context("requires_user_input needs a list of fields")?;
    if raw_fields.is_empty() {
        bail!("requires_user_input needs at least one field");
    }
    if let Err(errors) = fields::parse_field_specs(&raw_fields) {
        let described: BTreeMap<_, _> = errors.into_iter().collect();
        let text = described
            .iter()
            .map(|(field, message)| format!("field `{field}`: {message}"))
            .collect::<Vec<_>>()
            .join("; ");
        bail!("requires_user_input: {text}");
    }
    let spec: InputRequestSpec =
        serde_json::from_value(raw).context("requires_user_input is not valid")?;
    if spec.reason.trim().is_empty() {
        bail!("requires_user_input needs a reason: the user sees it on the card");
    }
    Ok(spec)
}

fn builtins(skills_dir: Option<&Path>) -> anyhow::Result<Vec<Tool>> {
    let parameters = json!({
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "Arithmetic such as (1200 - 300) * 1.2; + - * / % ^, parentheses, sqrt, abs, round, floor, ceil"
            }
        },
        "required": ["expression"]
    });
    let mut tools = vec![Tool::assemble(ToolParts {
        name: "calculator".to_owned(),
        description: "Calculate an arithmetic expression: sums, percentages, totals, differences"
            .to_owned(),
        parameters,
        input_spec: None,
        enabled: true,
        key_argument: None,
        approval: None,
        origin: ToolOrigin::Builtin,
        runner: Runner::Calculator,
    })?];
    if let Some(dir) = skills_dir {
        let parameters = json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "The skill's name, as listed"}},
            "required": ["name"]
        });
        tools.push(Tool::assemble(ToolParts {
            name: "read_skill".to_owned(),
            description: "Read the full instructions of one of the listed skills".to_owned(),
            parameters,
            input_spec: None,
            enabled: true,
            key_argument: Some("name".to_owned()),
            approval: None,
            origin: ToolOrigin::Builtin,
            runner: Runner::ReadSkill(dir.to_owned()),
        })?);
    }
    Ok(tools)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_of(text: &str) -> String {
        match parse_tools_file(text) {
            Ok(_) => panic!("must be refused:\n{text}"),
            Err(err) => format!("{err:#}"),
        }
    }

    const HTTP_TOOL: &str = r#"
[[tools]]
name = "lookup"
description = "Look something up"
kind = "http"
parameters = { type = "object", properties = { q = { type = "string" } } }
[tools.requires_user_input]
reason = "Need the account"
fields = [ { name = "account", type = "text", validation = "^[0-9]+$" } ]
[tools.http]
url = "{env.LOOKUP_BASE}/accounts/{account}?q={q}"
"#;

    /// A call's values or context written into a database address would let a caller
    /// choose the host, the login or the options it connects with.
    #[test]
    fn a_sql_address_takes_only_the_operators_settings() {
        let tool = |url: &str| {
            format!(
                r#"
[[tools]]
name = "query"
description = "Query a database"
kind = "sql"
parameters = {{ type = "object", properties = {{ query = {{ type = "string" }} }} }}
[tools.requires_user_input]
reason = "Which database?"
fields = [ {{ name = "database", type = "select", options = ["main"] }} ]
[tools.sql]
database_field = "database"
databases.main = {{ url = "{url}" }}
"#
            )
        };
        assert!(parse_tools_file(&tool("{env.MAIN_DATABASE_URL}")).is_ok());
        for url in [
            "postgres://reader@db/app?application_name={context.tool_call_id}",
            "postgres://{context.user_id}@db/app",
            "postgres://reader@db/{query}",
        ] {
            let refused = error_of(&tool(url));
            assert!(refused.contains("only use {env.NAME}"), "{url}: {refused}");
        }
    }

    #[test]
    fn a_good_tool_loads() {
        let tools = parse_tools_file(HTTP_TOOL).expect("valid");
        assert_eq!(tools[0].name, "lookup");
        assert_eq!(tools[0].fields()[0].name, "account");
    }

    #[test]
    fn each_mistake_is_named_with_tool_and_field() {
        let bad_regex = HTTP_TOOL.replace("^[0-9]+$", "([0-9]");
        let err = error_of(&bad_regex);
        assert!(
            err.contains("tool `lookup`")
                && err.contains("field `account`")
                && err.contains("regular expression"),
            "{err}"
        );

        let err = error_of(&HTTP_TOOL.replace("type = \"text\"", "type = \"colour\""));
        assert!(
            err.contains("field `account`") && err.contains("unknown type `colour`"),
            "{err}"
        );

        let err = error_of(&HTTP_TOOL.replace("?q={q}", "?q={nobody}"));
        assert!(
            err.contains("`{nobody}`") && err.contains("http.url"),
            "{err}"
        );

        let err = error_of(&HTTP_TOOL.replace("type = \"string\"", "type = \"strung\""));
        assert!(err.contains("not a valid JSON Schema"), "{err}");

        let err = error_of(
            &HTTP_TOOL
                .replace("validation = \"^[0-9]+$\"", "type = \"select\"")
                .replace("type = \"text\", ", ""),
        );
        assert!(err.contains("needs options"), "{err}");

        let err = error_of(&HTTP_TOOL.replace(
            "validation = \"^[0-9]+$\"",
            "visible_if = { field = \"ghost\" }",
        ));
        assert!(
            err.contains("visible_if names unknown field `ghost`"),
            "{err}"
        );
    }

    #[test]
    fn side_effects_need_approval_unless_the_file_says_otherwise() {
        let get = parse_tools_file(HTTP_TOOL).expect("valid").remove(0);
        assert!(get.approval.is_none(), "a GET needs no approval");
        let post_text = HTTP_TOOL.replace("[tools.http]\n", "[tools.http]\nmethod = \"POST\"\n");
        let post = parse_tools_file(&post_text).expect("valid").remove(0);
        assert!(
            post.needs_approval(&Map::new()),
            "a POST needs approval by default"
        );
        let opted_out = post_text.replace(
            "kind = \"http\"\n",
            "kind = \"http\"\nrequires_approval = false\n",
        );
        assert!(
            parse_tools_file(&opted_out).expect("valid")[0]
                .approval
                .is_none()
        );
        let conditional = HTTP_TOOL.replace(
            "kind = \"http\"\n",
            "kind = \"http\"\nrequires_approval = { when = [{ field = \"account\", equals = \"0\" }] }\n",
        );
        let tool = parse_tools_file(&conditional).expect("valid").remove(0);
        let values = |account: &str| {
            json!({"account": account})
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        assert!(tool.needs_approval(&values("0")));
        assert!(!tool.needs_approval(&values("7")));
        let err = error_of(&conditional.replace("field = \"account\"", "field = \"ghost\""));
        assert!(
            err.contains("requires_approval.when names `ghost`"),
            "{err}"
        );
    }

    #[test]
    fn a_secret_the_model_may_fill_is_refused_at_load() {
        let text = HTTP_TOOL.replace(
            "type = \"text\", validation = \"^[0-9]+$\"",
            "type = \"secret\", model_may_fill = true",
        );
        let err = error_of(&text);
        assert!(
            err.contains("tool `lookup`")
                && err.contains("field `account`")
                && err.contains("model_may_fill"),
            "{err}"
        );
    }

    /// A prompt-injected model must not pick where the tool's credentials go.
    #[test]
    fn a_host_the_model_chooses_needs_allow_hosts() {
        let model_picks_host = HTTP_TOOL.replace(
            "url = \"{env.LOOKUP_BASE}/accounts/{account}?q={q}\"",
            "url = \"https://{q}/accounts/{account}\"\nheaders = { Authorization = \"Bearer {env.LOOKUP_KEY}\" }",
        );
        assert_ne!(model_picks_host, HTTP_TOOL, "the replacement must apply");
        let err = error_of(&model_picks_host);
        assert!(
            err.contains("tool `lookup`") && err.contains("`{q}`") && err.contains("allow_hosts"),
            "{err}"
        );
        let whole_url = model_picks_host.replace("https://{q}/accounts/{account}", "{q}");
        assert!(error_of(&whole_url).contains("`{q}`"));
        let after_the_base =
            HTTP_TOOL.replace("{env.LOOKUP_BASE}/accounts", "{env.LOOKUP_BASE}{q}");
        assert!(error_of(&after_the_base).contains("`{q}`"));
        let call_id = HTTP_TOOL.replace("{env.LOOKUP_BASE}/", "https://{context.tool_call_id}/");
        assert!(error_of(&call_id).contains("tool_call_id"));
        let may_fill = HTTP_TOOL
            .replace(
                "{env.LOOKUP_BASE}/accounts/{account}",
                "https://{account}/x",
            )
            .replace("validation = \"^[0-9]+$\"", "model_may_fill = true");
        // A field the model may fill is filled from the user's memory when the model
        // leaves it out: it is no word of the model's own.
        assert!(error_of(&may_fill).contains("`{account}`"));
        let own_words_only = HTTP_TOOL.replace(
            "{env.LOOKUP_BASE}/accounts/{account}?q={q}",
            "https://{q}/x",
        );
        parse_tools_file(&own_words_only).expect("the model's own words may go anywhere public");
        // Anywhere public, not anywhere private: with private ranges open, its hosts are
        // listed.
        let inward = own_words_only.replace(
            "[tools.http]\n",
            "[tools.http]\nallow_private_networks = true\n",
        );
        assert_ne!(inward, own_words_only, "the replacement must apply");
        let err = error_of(&inward);
        assert!(
            err.contains("`{q}`")
                && err.contains("allow_private_networks")
                && err.contains("allow_hosts"),
            "{err}"
        );
        parse_tools_file(&inward.replace(
            "[tools.http]\n",
            "[tools.http]\nallow_hosts = [\"intranet.example\"]\n",
        ))
        .expect("listed hosts bound the choice");
        let may_fill_with_key = may_fill.replace(
            "[tools.http]\n",
            "[tools.http]\nheaders = { X-Key = \"{env.LOOKUP_KEY}\" }\n",
        );
        assert!(error_of(&may_fill_with_key).contains("`{account}`"));
        let who_asks = may_fill.replace("/x?q={q}", "/x?q={q}&u={context.user_id}");
        assert!(error_of(&who_asks).contains("`{account}`"));

        // Listed hosts bound the choice; the user's own field, the environment and a
        // path are no choice of the model's; a request of the model's own words alone
        // may go anywhere public.
        let listed = model_picks_host.replace(
            "[tools.http]\n",
            "[tools.http]\nallow_hosts = [\".example.com\"]\n",
        );
        parse_tools_file(&listed).expect("allow_hosts bounds the host");
        let user_host = HTTP_TOOL.replace("{env.LOOKUP_BASE}/", "https://{account}/");
        parse_tools_file(&user_host).expect("the user's field may name the host");
        let path_only = HTTP_TOOL.replace("/accounts/{account}", "/{q}/accounts/{account}");
        parse_tools_file(&path_only).expect("the model may fill the path");
        // URLs read a backslash after the host as a slash.
        let backslash = HTTP_TOOL.replace("{env.LOOKUP_BASE}/", "https://api.example.com\\\\{q}/");
        parse_tools_file(&backslash).expect("a backslash starts the path");
    }

    #[test]
    fn only_user_only_fields_are_kept_out_of_stored_arguments() {
        let tool = parse_tools_file(HTTP_TOOL).expect("valid").remove(0);
        let arguments = json!({"q": "x", "account": "123"})
            .as_object()
            .cloned()
            .unwrap_or_default();
        let stored = tool.storable_arguments(&arguments);
        assert_eq!(Value::Object(stored), json!({"q": "x"}));
    }

    #[test]
    fn builtins_and_file_tools_cannot_share_a_name() {
        let mut registry = ToolRegistry::default();
        for tool in builtins(None).expect("builtins") {
            registry.add(tool).expect("first");
        }
        let clash = HTTP_TOOL.replace("name = \"lookup\"", "name = \"calculator\"");
        let tool = parse_tools_file(&clash)
            .expect("valid on its own")
            .remove(0);
        assert!(registry.add(tool).is_err());
    }

    /// The tool `remote` of the MCP server `t`, taking `parameters`.
    fn mcp_tool(remote: &str, parameters: Value) -> Tool {
        Tool::assemble(ToolParts {
            name: format!("t__{remote}"),
            description: format!("The server's {remote}"),
            parameters,
            input_spec: None,
            enabled: true,
            key_argument: None,
            approval: None,
            origin: ToolOrigin::Mcp { server: "t".into() },
            runner: Runner::Mcp(mcp::McpTarget {
                server: "t".into(),
                remote_name: remote.into(),
            }),
        })
        .expect("tool")
    }

    /// A listing is one moment: while a server goes down and comes back again and
    /// again, no listing shows it down beside its tool listed available, or up beside
    /// it unavailable.
    #[test]
    fn a_listing_never_shows_a_server_and_its_tools_at_different_moments() {
        use protocol::api::McpServerStatus;
        let info = |status| McpServerInfo {
            name: "t".into(),
            transport: "stdio".into(),
            status,
            reason: None,
            protocol_version: None,
            tools: 1,
        };
        let tool = Arc::new(mcp_tool("echo", json!({"type": "object"})));
        let registry = Arc::new(ToolRegistry::default());
        registry.set_mcp_server(info(McpServerStatus::Connected), vec![tool.clone()]);
        let flipping = {
            let registry = registry.clone();
            std::thread::spawn(move || {
                for _ in 0..20_000 {
                    registry.mark_mcp_server_down("t", info(McpServerStatus::Unavailable), "gone");
                    registry.set_mcp_server(info(McpServerStatus::Connected), vec![tool.clone()]);
                }
            })
        };
        let mut listings = 0;
        while !flipping.is_finished() || listings == 0 {
            let (tools, servers) = registry.listing();
            let up = servers[0].status == McpServerStatus::Connected;
            let available = tools
                .iter()
                .find(|tool| tool.name == "t__echo")
                .map(|tool| tool.unavailable_reason().is_none());
            assert_eq!(available, Some(up), "listing {listings}");
            listings += 1;
        }
        flipping.join().expect("the flipping thread");
    }

    /// A server that goes down keeps its tools listed, unavailable; marking them so
    /// compiles none of their schemas again (a hostile server could come and go every
    /// second with costly ones, and the marking holds the catalogue's lock).
    #[test]
    fn a_tool_marked_offline_shares_its_compiled_schema() {
        let tool = mcp_tool(
            "find",
            json!({"type": "object", "properties": {"q": {"type": "string", "pattern": "^[a-z]{1,300}$"}}}),
        );
        let offline = tool.with_offline(Some("gone".into())).expect("an MCP tool");
        assert!(Arc::ptr_eq(&tool.validator, &offline.validator));
        assert_eq!(offline.unavailable_reason().as_deref(), Some("gone"));
        assert!(!offline.argument_errors(&json!({"q": "Upper"})).is_empty());
        let back = offline.with_offline(None).expect("an MCP tool");
        assert!(back.unavailable_reason().is_none());
    }
}
