//! Settings, read once from the environment at start-up.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use protocol::fields::InputLimits;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Everything the server is configured with. Secrets are redacted in `Debug`.
#[derive(Clone)]
pub struct Config {
    pub database_url: String,
    pub bind: SocketAddr,
    pub jwt_secret: Vec<u8>,
    pub jwt_audience: Option<String>,
    pub jwt_issuer: Option<String>,
    /// Tokens whose `exp` lies further ahead than this are refused.
    pub max_token_lifetime: Duration,
    pub dev_auth: bool,
    /// Key for secret values at rest (32 bytes, derived from `TOOLGATE_SECRET_KEY`).
    pub secret_key: [u8; 32],
    pub input_ttl: Duration,
    pub data_dir: PathBuf,
    pub web_dir: Option<PathBuf>,
    pub tools_file: Option<PathBuf>,
    pub max_body_bytes: usize,
    pub db_max_connections: u32,
    /// How long a request waits for a database connection before its 503, so an outage
    /// answers fast instead of stalling every caller.
    pub db_acquire_timeout: Duration,
    /// The longest one statement of the server may run, waiting for a lock included,
    /// before the database cancels it: a request stuck behind a lock answers 503 rather
    /// than holding its connection (and its caller) for good.
    pub db_statement_timeout: Duration,
    /// How long a stopping server lets runs finish their current step before it fails
    /// them; a run between steps is handed over at once.
    pub shutdown_grace: Duration,
    /// How long a client may take to send a request's headers before its connection is
    /// closed, so connections that trickle (slowloris) cannot pile up.
    pub header_read_timeout: Duration,
    /// How long an answer may wait for the client to take any of it before its
    /// connection is closed, so a client that stops reading frees what was kept for it.
    pub write_timeout: Duration,
    /// How long the stream events of a finished run are kept (for reconnecting
    /// streams); the conversation's messages keep what the run said for good.
    pub event_retention: Duration,
    /// Sample databases and a QuickBooks stand-in for the example tools.
    pub demo: bool,
    pub llm: LlmConfig,
    pub summary: SummaryConfig,
    /// Most model steps one run may take.
    pub max_steps: i32,
    /// Middleware names, in order.
    pub middleware: Vec<String>,
    pub skills_dir: Option<PathBuf>,
    /// How long a running run's server may go silent before the run is marked failed.
    pub run_lease: Duration,
    /// Per-user limits on work and storage.
    pub limits: Limits,
    /// What one request's field definitions and values may hold (`TOOLGATE_MAX_FIELDS`
    /// and the other `TOOLGATE_MAX_*` of the README).
    pub input_limits: InputLimits,
}

/// What one user may ask of the server; each one configurable.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Authenticated API requests per user per minute (`TOOLGATE_RATE_PER_MINUTE`).
    pub requests_per_minute: u32,
    /// How many of those may come at once (`TOOLGATE_RATE_BURST`).
    pub request_burst: u32,
    /// Runs in progress or waiting at once (`TOOLGATE_MAX_ACTIVE_RUNS`).
    pub active_runs: u32,
    /// Open event streams at once (`TOOLGATE_MAX_STREAMS`).
    pub open_streams: u32,
    /// Stored `/remember` notes (`TOOLGATE_MAX_MEMORY_NOTES`).
    pub memory_notes: u32,
    /// Requests waiting for the user at once in one conversation
    /// (`TOOLGATE_MAX_WAITING_REQUESTS`).
    pub waiting_requests: u32,
    /// Message content past which a conversation takes no new messages of the user's,
    /// in MiB (`TOOLGATE_MAX_CONVERSATION_MIB`); a run already going may still add its
    /// answers and tool results.
    pub conversation_mib: u32,
}

impl Limits {
    /// [`Limits::conversation_mib`] in bytes.
    pub fn conversation_bytes(&self) -> i64 {
        i64::from(self.conversation_mib) << 20
    }
}

/// The model endpoint; none configured means the offline built-in model.
#[derive(Clone)]
pub struct LlmConfig {
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub vision_model: Option<String>,
    pub long_context_model: Option<String>,
    pub long_context_threshold: usize,
    /// Longest the endpoint may send nothing (before its answer or within it) before
    /// the step fails.
    pub quiet_limit: Duration,
    /// Longest one answer may take in all, however steadily it comes.
    pub answer_limit: Duration,
}

/// How long one answer may take when `TOOLGATE_LLM_ANSWER_TIMEOUT` is not set (or the
/// quiet limit, when that is longer).
const DEFAULT_ANSWER_LIMIT: Duration = Duration::from_secs(60 * 60);

impl fmt::Debug for LlmConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("model", &self.model)
            .field("vision_model", &self.vision_model)
            .field("long_context_model", &self.long_context_model)
            .field("long_context_threshold", &self.long_context_threshold)
            .field("quiet_limit", &self.quiet_limit)
            .field("answer_limit", &self.answer_limit)
            .finish()
    }
}

#[derive(Clone, Debug)]
pub struct SummaryConfig {
    pub threshold_tokens: usize,
    pub keep_messages: usize,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("database_url", &redact_url(&self.database_url))
            .field("bind", &self.bind)
            .field("jwt_secret", &"[redacted]")
            .field("jwt_audience", &self.jwt_audience)
            .field("jwt_issuer", &self.jwt_issuer)
            .field("max_token_lifetime", &self.max_token_lifetime)
            .field("dev_auth", &self.dev_auth)
            .field("secret_key", &"[redacted]")
            .field("input_ttl", &self.input_ttl)
            .field("data_dir", &self.data_dir)
            .field("web_dir", &self.web_dir)
            .field("tools_file", &self.tools_file)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("db_max_connections", &self.db_max_connections)
            .field("db_acquire_timeout", &self.db_acquire_timeout)
            .field("db_statement_timeout", &self.db_statement_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("write_timeout", &self.write_timeout)
            .field("event_retention", &self.event_retention)
            .field("demo", &self.demo)
            .field("llm", &self.llm)
            .field("summary", &self.summary)
            .field("max_steps", &self.max_steps)
            .field("middleware", &self.middleware)
            .field("skills_dir", &self.skills_dir)
            .field("run_lease", &self.run_lease)
            .field("limits", &self.limits)
            .field("input_limits", &self.input_limits)
            .finish()
    }
}

/// Hides the password of a connection URL: the one after the user name (everything to
/// the last `@`, which an unencoded password may hold), and one given as a query
/// parameter after the host (`?password=`, `sslpassword=`), which libpq takes as well.
pub fn redact_url(url: &str) -> String {
    // Only a string that begins with a scheme is read as a URL: `://` later on may sit
    // in a keyword string's value, or in its password.
    let scheme_end = url.find("://").filter(|&end| {
        url[..end]
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            && url.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
    });
    let (head, rest) = match (scheme_end, url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            let credentials = &url[scheme_end + 3..at];
            match credentials.split_once(':') {
                Some((user, _)) => (
                    format!("{}{user}:***@", &url[..scheme_end + 3]),
                    &url[at + 1..],
                ),
                None => (url[..=at].to_owned(), &url[at + 1..]),
            }
        }
        (Some(scheme_end), _) => (url[..scheme_end + 3].to_owned(), &url[scheme_end + 3..]),
        _ => return redact_keywords(url),
    };
    let Some((host, query)) = rest.split_once('?') else {
        return format!("{head}{rest}");
    };
    let parameters: Vec<String> = query
        .split('&')
        .map(|parameter| match parameter.split_once('=') {
            Some((name, _)) if name.to_ascii_lowercase().contains("password") => {
                format!("{name}=***")
            }
            _ => parameter.to_owned(),
        })
        .collect();
    format!("{head}{host}?{}", parameters.join("&"))
}

/// A connection string of libpq's other form, `host=db user=app password='s e c'`
/// (which is not a URL, and so is shown when it is refused), with the value after
/// every `password` (`sslpassword` too) and `=` hidden, wherever it stands: even
/// inside another keyword's value, which libpq may read it as (`user= password=x`).
fn redact_keywords(text: &str) -> String {
    const WORD: &str = "password";
    let lower = text.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = lower[from..].find(WORD) {
        let after_word = from + found + WORD.len();
        let spaces = text[after_word..].len()
            - text[after_word..]
                .trim_start_matches(|c: char| c.is_ascii_whitespace())
                .len();
        let equals = after_word + spaces;
        if text[equals..].starts_with('=') {
            out.push_str(&text[copied..=equals]);
            out.push_str("***");
            copied = equals + 1 + value_len(&text[equals + 1..]);
            from = copied;
        } else {
            from = after_word;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// The length of a keyword's value at the start of `text`, as libpq reads it: ASCII
/// spaces before it skipped, then either quoted (to the closing quote) or up to the
/// next ASCII space; a backslash takes the character after it, in either form.
fn value_len(text: &str) -> usize {
    let value = text.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let leading = text.len() - value.len();
    let quoted = value.starts_with('\'');
    let mut escaped = false;
    for (at, c) in value.char_indices().skip(usize::from(quoted)) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '\'' if quoted => return leading + at + 1,
            c if !quoted && c.is_ascii_whitespace() => return leading + at,
            _ => {}
        }
    }
    text.len()
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> anyhow::Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup`, so tests can pass their own environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> anyhow::Result<Self> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let database_url = get("DATABASE_URL").context(
            "DATABASE_URL is not set; point it at Postgres, e.g. postgres://postgres@127.0.0.1:5432/toolgate",
        )?;
        let bind = get("TOOLGATE_BIND")
            .unwrap_or_else(|| "127.0.0.1:3000".to_owned())
            .parse()
            .context("TOOLGATE_BIND must be an address like 127.0.0.1:3000")?;
        let dev_auth = flag("TOOLGATE_DEV_AUTH", get("TOOLGATE_DEV_AUTH"))?;
        refuse_dev_auth_on_public_bind(dev_auth, bind, &get)?;
        let demo = flag("TOOLGATE_DEMO", get("TOOLGATE_DEMO"))?;
        let data_dir =
            PathBuf::from(get("TOOLGATE_DATA_DIR").unwrap_or_else(|| ".toolgate".into()));
        let jwt_secret = match get("TOOLGATE_JWT_SECRET") {
            Some(secret) if secret.len() < 32 => {
                bail!("TOOLGATE_JWT_SECRET must be at least 32 characters long")
            }
            Some(secret) => {
                if let Some(distinct) = few_distinct(&secret) {
                    bail!(
                        "TOOLGATE_JWT_SECRET is made of only {distinct} different characters, so tokens signed with it are easy to forge; use a random one, e.g. from `openssl rand -hex 32`"
                    );
                }
                secret.into_bytes()
            }
            None if dev_auth => kept_random_secret(&data_dir, "jwt_secret")?.into_bytes(),
            None => {
                bail!("TOOLGATE_JWT_SECRET is not set; it is required unless TOOLGATE_DEV_AUTH=1")
            }
        };
        let secret_key_text = match get("TOOLGATE_SECRET_KEY") {
            Some(key) if key.len() < 16 => {
                bail!("TOOLGATE_SECRET_KEY must be at least 16 characters long")
            }
            Some(key) => {
                // Whoever issues tokens holds the JWT secret; the saved secrets' key is
                // the server's alone. The JWT secret is the one to change: a new key
                // would leave every saved secret unreadable.
                if shares_secret(&key, &jwt_secret) {
                    bail!(
                        "TOOLGATE_SECRET_KEY and TOOLGATE_JWT_SECRET are the same (up to case and surrounding spaces) or one holds the other, so whoever issues tokens could open saved secrets: change TOOLGATE_JWT_SECRET (and where tokens are issued); changing TOOLGATE_SECRET_KEY instead would leave the secrets saved so far unreadable"
                    );
                }
                // Only a warning: the values saved so far are sealed with this key, and
                // refusing it would lose them all.
                if key.len() < STRONG_SECRET_KEY_CHARS || few_distinct(&key).is_some() {
                    tracing::warn!(
                        "TOOLGATE_SECRET_KEY is shorter than {STRONG_SECRET_KEY_CHARS} characters or made of few different ones: saved secrets are easier to open from a copy of the database. A new random key (`openssl rand -hex 32`) leaves the values saved so far unreadable; users are asked for them again"
                    );
                }
                key
            }
            None if dev_auth => kept_random_secret(&data_dir, "secret_key")?,
            None => bail!(
                "TOOLGATE_SECRET_KEY is not set; it encrypts saved secret values and is required unless TOOLGATE_DEV_AUTH=1"
            ),
        };
        let max_token_lifetime =
            parse_duration(&get("TOOLGATE_MAX_TOKEN_LIFETIME").unwrap_or_else(|| "24h".into()))
                .context(
                    "TOOLGATE_MAX_TOKEN_LIFETIME must be a duration like 90s, 30m, 24h or 7d",
                )?;
        let input_ttl = parse_duration(&get("TOOLGATE_INPUT_TTL").unwrap_or_else(|| "24h".into()))
            .context("TOOLGATE_INPUT_TTL must be a duration like 90s, 30m, 24h or 7d")?;
        // No run waits a year for an answer; a value mistyped far larger would put every
        // expiry past the dates Postgres stores, and no request could be stored at all.
        if input_ttl > Duration::from_secs(366 * 86_400) {
            bail!("TOOLGATE_INPUT_TTL must be at most 366d");
        }
        let max_body_bytes = match get("TOOLGATE_MAX_BODY_BYTES") {
            Some(text) => text
                .parse()
                .context("TOOLGATE_MAX_BODY_BYTES must be a whole number of bytes")?,
            None => 1024 * 1024,
        };
        let db_max_connections = match get("TOOLGATE_DB_MAX_CONNECTIONS") {
            Some(text) => text
                .parse()
                .context("TOOLGATE_DB_MAX_CONNECTIONS must be a whole number")?,
            None => 16,
        };
        let db_acquire_timeout =
            parse_duration(&get("TOOLGATE_DB_ACQUIRE_TIMEOUT").unwrap_or_else(|| "1s".into()))
                .context("TOOLGATE_DB_ACQUIRE_TIMEOUT must be a duration like 1s or 500ms")?;
        let db_statement_timeout =
            parse_duration(&get("TOOLGATE_DB_STATEMENT_TIMEOUT").unwrap_or_else(|| "30s".into()))
                .context("TOOLGATE_DB_STATEMENT_TIMEOUT must be a duration like 30s")?;
        // Postgres takes the setting in whole milliseconds, up to i32::MAX.
        if db_statement_timeout > Duration::from_millis(i32::MAX as u64) {
            bail!("TOOLGATE_DB_STATEMENT_TIMEOUT must be at most 24d");
        }
        let shutdown_grace =
            parse_duration(&get("TOOLGATE_SHUTDOWN_GRACE").unwrap_or_else(|| "10s".into()))
                .context("TOOLGATE_SHUTDOWN_GRACE must be a duration like 10s")?;
        let header_read_timeout =
            parse_duration(&get("TOOLGATE_HEADER_READ_TIMEOUT").unwrap_or_else(|| "30s".into()))
                .context("TOOLGATE_HEADER_READ_TIMEOUT must be a duration like 30s")?;
        if header_read_timeout.is_zero() {
            anyhow::bail!("TOOLGATE_HEADER_READ_TIMEOUT must be above zero");
        }
        let write_timeout =
            parse_duration(&get("TOOLGATE_WRITE_TIMEOUT").unwrap_or_else(|| "60s".into()))
                .context("TOOLGATE_WRITE_TIMEOUT must be a duration like 60s")?;
        if write_timeout.is_zero() {
            anyhow::bail!("TOOLGATE_WRITE_TIMEOUT must be above zero");
        }
        let event_retention =
            parse_duration(&get("TOOLGATE_EVENT_RETENTION").unwrap_or_else(|| "7d".into()))
                .context("TOOLGATE_EVENT_RETENTION must be a duration like 7d or 12h")?;
        let number = |name: &str, default: usize| -> anyhow::Result<usize> {
            match get(name) {
                Some(text) => text
                    .trim()
                    .parse()
                    .with_context(|| format!("{name} must be a whole number")),
                None => Ok(default),
            }
        };
        let quiet_limit =
            parse_duration(&get("TOOLGATE_LLM_TIMEOUT").unwrap_or_else(|| "300s".into()))
                .context("TOOLGATE_LLM_TIMEOUT must be a duration like 90s, 30m, 24h or 7d")?;
        if quiet_limit.is_zero() {
            bail!("TOOLGATE_LLM_TIMEOUT must be above zero");
        }
        let answer_limit = match get("TOOLGATE_LLM_ANSWER_TIMEOUT") {
            Some(limit) => parse_duration(&limit).context(
                "TOOLGATE_LLM_ANSWER_TIMEOUT must be a duration like 90s, 30m, 24h or 7d",
            )?,
            // Never below the quiet limit a deployment raised: a step would fail as
            // "took too long" where the endpoint merely kept still within its limit.
            None => DEFAULT_ANSWER_LIMIT.max(quiet_limit),
        };
        if answer_limit.is_zero() {
            bail!("TOOLGATE_LLM_ANSWER_TIMEOUT must be above zero");
        }
        let llm = LlmConfig {
            base_url: get("TOOLGATE_LLM_BASE_URL"),
            api_key: get("TOOLGATE_LLM_API_KEY"),
            model: get("TOOLGATE_LLM_MODEL"),
            vision_model: get("TOOLGATE_LLM_VISION_MODEL"),
            long_context_model: get("TOOLGATE_LLM_LONG_CONTEXT_MODEL"),
            long_context_threshold: number("TOOLGATE_LONG_CONTEXT_TOKENS", 12_000)?,
            quiet_limit,
            answer_limit,
        };
        if llm.answer_limit < llm.quiet_limit {
            bail!(
                "TOOLGATE_LLM_ANSWER_TIMEOUT ({:?}) must not be shorter than TOOLGATE_LLM_TIMEOUT \
                 ({:?}): a whole answer cannot take less than one quiet spell within it",
                llm.answer_limit,
                llm.quiet_limit
            );
        }
        let summary = SummaryConfig {
            threshold_tokens: number("TOOLGATE_SUMMARY_TOKENS", 6_000)?,
            keep_messages: number("TOOLGATE_SUMMARY_KEEP", 6)?,
        };
        let max_steps = number("TOOLGATE_MAX_STEPS", 25)?;
        if max_steps == 0 || max_steps > 1000 {
            bail!("TOOLGATE_MAX_STEPS must be from 1 to 1000");
        }
        let middleware = match get("TOOLGATE_MIDDLEWARE") {
            Some(list) => list
                .split(',')
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty() && name != "none")
                .collect(),
            None => crate::agent::middleware::DEFAULT_ORDER
                .iter()
                .map(|name| (*name).to_owned())
                .collect(),
        };
        let run_lease = parse_duration(&get("TOOLGATE_RUN_LEASE").unwrap_or_else(|| "30s".into()))
            .context("TOOLGATE_RUN_LEASE must be a duration like 30s")?;
        let limit = |name: &str, default: usize| -> anyhow::Result<u32> {
            u32::try_from(number(name, default)?).with_context(|| format!("{name} is too large"))
        };
        let limits = Limits {
            requests_per_minute: limit("TOOLGATE_RATE_PER_MINUTE", 1200)?,
            request_burst: limit("TOOLGATE_RATE_BURST", 200)?,
            active_runs: limit("TOOLGATE_MAX_ACTIVE_RUNS", 4)?,
            open_streams: limit("TOOLGATE_MAX_STREAMS", 8)?,
            memory_notes: limit("TOOLGATE_MAX_MEMORY_NOTES", 200)?,
            waiting_requests: limit("TOOLGATE_MAX_WAITING_REQUESTS", 100)?,
            conversation_mib: limit("TOOLGATE_MAX_CONVERSATION_MIB", 64)?,
        };
        if limits.requests_per_minute == 0 || limits.request_burst == 0 {
            bail!("TOOLGATE_RATE_PER_MINUTE and TOOLGATE_RATE_BURST must be above zero");
        }
        if limits.waiting_requests == 0 {
            // No request could ever be made: no tool that asks the user would work.
            bail!("TOOLGATE_MAX_WAITING_REQUESTS must be above zero");
        }
        if limits.conversation_mib == 0 {
            // No conversation could hold a first message.
            bail!("TOOLGATE_MAX_CONVERSATION_MIB must be above zero");
        }
        if usize::try_from(limits.conversation_bytes()).is_ok_and(|most| most < max_body_bytes) {
            // A first message as large as a body may be would be refused with "start a
            // new conversation", which could never help.
            bail!(
                "TOOLGATE_MAX_CONVERSATION_MIB ({} MiB) must hold at least one request body of TOOLGATE_MAX_BODY_BYTES ({max_body_bytes} bytes)",
                limits.conversation_mib
            );
        }
        let input_limits = input_limits(&number)?;
        Ok(Config {
            limits,
            input_limits,
            llm,
            summary,
            max_steps: max_steps as i32,
            middleware,
            skills_dir: get("TOOLGATE_SKILLS_DIR").map(PathBuf::from),
            run_lease,
            database_url,
            bind,
            jwt_secret,
            jwt_audience: get("TOOLGATE_JWT_AUDIENCE"),
            jwt_issuer: get("TOOLGATE_JWT_ISSUER"),
            max_token_lifetime,
            dev_auth,
            secret_key: Sha256::digest(secret_key_text.as_bytes()).into(),
            input_ttl,
            data_dir,
            web_dir: get("TOOLGATE_WEB_DIR").map(PathBuf::from),
            tools_file: get("TOOLGATE_TOOLS").map(PathBuf::from),
            max_body_bytes,
            db_max_connections,
            db_acquire_timeout,
            db_statement_timeout,
            shutdown_grace,
            header_read_timeout,
            write_timeout,
            event_retention,
            demo,
        })
    }
}

/// The per-request limits, each from its variable or the default; none may be zero.
fn input_limits(
    number: &impl Fn(&str, usize) -> anyhow::Result<usize>,
) -> anyhow::Result<InputLimits> {
    let defaults = InputLimits::DEFAULT;
    let read = |name: &str, default: usize| -> anyhow::Result<usize> {
        match number(name, default)? {
            0 => bail!("{name} must be above zero"),
            value => Ok(value),
        }
    };
    let nesting = read(
        "TOOLGATE_MAX_PATTERN_NESTING",
        defaults.pattern_nesting as usize,
    )?;
    Ok(InputLimits {
        fields: read("TOOLGATE_MAX_FIELDS", defaults.fields)?,
        options: read("TOOLGATE_MAX_OPTIONS", defaults.options)?,
        pattern_chars: read("TOOLGATE_MAX_PATTERN_CHARS", defaults.pattern_chars)?,
        pattern_bytes: read("TOOLGATE_MAX_PATTERN_BYTES", defaults.pattern_bytes)?,
        pattern_nesting: u32::try_from(nesting)
            .context("TOOLGATE_MAX_PATTERN_NESTING is too large")?,
        value_chars: read("TOOLGATE_MAX_VALUE_CHARS", defaults.value_chars)?,
        definition_chars: read("TOOLGATE_MAX_DEFINITION_CHARS", defaults.definition_chars)?,
        visible_if_depth: read("TOOLGATE_MAX_VISIBLE_IF_DEPTH", defaults.visible_if_depth)?,
    })
}

/// The variable that lets dev sign-in run on a non-loopback address anyway.
pub const DEV_AUTH_PUBLIC_OVERRIDE: &str = "TOOLGATE_DEV_AUTH_ON_PUBLIC_BIND_I_UNDERSTAND";

/// Dev sign-in hands a token for any user to whoever asks, so it must not be reachable
/// from other machines unless somebody says, by name, that they mean it.
fn refuse_dev_auth_on_public_bind(
    dev_auth: bool,
    bind: SocketAddr,
    get: &impl Fn(&str) -> Option<String>,
) -> anyhow::Result<()> {
    if !dev_auth || bind.ip().is_loopback() {
        return Ok(());
    }
    if flag(DEV_AUTH_PUBLIC_OVERRIDE, get(DEV_AUTH_PUBLIC_OVERRIDE))? {
        tracing::warn!(
            %bind,
            "dev sign-in is on at a non-loopback address ({DEV_AUTH_PUBLIC_OVERRIDE}=1): \
             anyone who reaches this port can sign in as any user"
        );
        return Ok(());
    }
    bail!(
        "refusing to start: TOOLGATE_DEV_AUTH=1 lets anyone who reaches the server sign in \
         as any user, and TOOLGATE_BIND={bind} is not a loopback address. Bind to \
         127.0.0.1 (or [::1]), or turn dev sign-in off and set TOOLGATE_JWT_SECRET and \
         TOOLGATE_SECRET_KEY; if only trusted machines can reach this port, set \
         {DEV_AUTH_PUBLIC_OVERRIDE}=1"
    )
}

/// The fewest different characters a secret of 32 or more characters is made of: a
/// random one has fewer about once in 30 million (32 hex digits), while `aaaa…`, `0000…`
/// or `passwordpassword…` do.
const FEWEST_DISTINCT_SECRET_CHARS: usize = 8;

/// A secret key shorter than this draws a warning at start.
const STRONG_SECRET_KEY_CHARS: usize = 32;

/// Whether whoever knows the JWT secret knows the secret key too, or most of it: the
/// same text up to case and surrounding spaces, or one holding the other.
fn shares_secret(key: &str, jwt_secret: &[u8]) -> bool {
    let key = key.trim().to_ascii_lowercase();
    let jwt_secret = String::from_utf8_lossy(jwt_secret)
        .trim()
        .to_ascii_lowercase();
    !key.is_empty()
        && !jwt_secret.is_empty()
        && (key.contains(&jwt_secret) || jwt_secret.contains(&key))
}

/// How many different characters `secret` is made of, when so few that its length hides
/// how little it holds.
fn few_distinct(secret: &str) -> Option<usize> {
    let distinct = secret
        .chars()
        .collect::<std::collections::BTreeSet<char>>()
        .len();
    (distinct < FEWEST_DISTINCT_SECRET_CHARS).then_some(distinct)
}

fn flag(name: &str, value: Option<String>) -> anyhow::Result<bool> {
    match value.as_deref() {
        None | Some("0") | Some("false") | Some("off") => Ok(false),
        Some("1") | Some("true") | Some("on") => Ok(true),
        Some(other) => bail!("{name} must be 1 or 0, not `{other}`"),
    }
}

/// A random secret generated once and kept in the data folder, so dev tokens and
/// encrypted values survive restarts.
fn kept_random_secret(data_dir: &Path, name: &str) -> anyhow::Result<String> {
    let path = data_dir.join(name);
    if let Ok(existing) = std::fs::read_to_string(&path) {
        let existing = existing.trim();
        if existing.len() >= 32 {
            return Ok(existing.to_owned());
        }
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating the data folder {}", data_dir.display()))?;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    write_private(&path, &secret).with_context(|| format!("writing {}", path.display()))?;
    Ok(secret)
}

fn write_private(path: &Path, contents: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)?.write_all(contents.as_bytes())
}

/// `500ms`, `90s`, `30m`, `24h`, `7d`, or a bare number of seconds.
pub fn parse_duration(text: &str) -> anyhow::Result<Duration> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(split) => text.split_at(split),
        None => (text, "s"),
    };
    let amount: u64 = digits
        .parse()
        .with_context(|| format!("`{text}` has no number"))?;
    let millis = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => bail!("unknown unit `{other}` in `{text}`"),
    };
    if amount == 0 {
        bail!("`{text}` must be longer than zero");
    }
    let millis = amount
        .checked_mul(millis)
        .with_context(|| format!("`{text}` is too long"))?;
    Ok(Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_urls_passwords_are_hidden_wherever_they_are_given() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/toolgate"),
            "postgres://app:***@db:5432/toolgate"
        );
        assert_eq!(
            redact_url(
                "postgres://app@db/toolgate?sslmode=require&password=s3cret&SSLPASSWORD=k3y"
            ),
            "postgres://app@db/toolgate?sslmode=require&password=***&SSLPASSWORD=***"
        );
        // An `@` in both: more is hidden than needed, nothing shown that should not be.
        let both = redact_url("postgres://app:s3c@ret@db/t?password=p@ss");
        assert!(
            !both.contains("s3c") && !both.contains("ret") && !both.contains("p@"),
            "{both}"
        );
        assert_eq!(
            redact_url("postgres://db/toolgate"),
            "postgres://db/toolgate"
        );
        // An unencoded `?` or `/` in the password stays hidden with it.
        assert_eq!(
            redact_url("postgres://app:a?b/c@db/t"),
            "postgres://app:***@db/t"
        );
        assert_eq!(redact_url("not a url?password=x"), "not a url?password=***");
        // libpq's keyword form is no URL: refused, it is shown without its password,
        // wherever libpq could read one.
        for (given, shown) in [
            (
                "user= password=s3cret host=db",
                "user= password=*** host=db",
            ),
            ("password=my\\ secret host=db", "password=*** host=db"),
            ("password=a&b", "password=***"),
            ("password=abc\u{a0}def host=db", "password=*** host=db"),
            (
                "host=db password=s3cret application_name=http://x",
                "host=db password=*** application_name=http://x",
            ),
            ("password=s3://cret", "password=***"),
            ("host=db password\t=s3cret", "host=db password\t=***"),
            (
                "host=db user=app password=s3cret dbname=t",
                "host=db user=app password=*** dbname=t",
            ),
            (
                "host=db password = 's3 c\\'ret' sslpassword=k3y",
                "host=db password =*** sslpassword=***",
            ),
            ("password='s3cret", "password=***"),
        ] {
            assert_eq!(redact_url(given), shown);
        }
    }
    use std::collections::HashMap;

    fn config(vars: &[(&str, &str)]) -> anyhow::Result<Config> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn durations_read_units() {
        assert_eq!(parse_duration("90s").ok(), Some(Duration::from_secs(90)));
        assert_eq!(
            parse_duration("24h").ok(),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_duration("2d").ok(),
            Some(Duration::from_secs(172_800))
        );
        assert_eq!(parse_duration("15").ok(), Some(Duration::from_secs(15)));
        assert_eq!(
            parse_duration("250ms").ok(),
            Some(Duration::from_millis(250))
        );
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("5w").is_err());
        assert!(parse_duration("0s").is_err());
    }

    #[test]
    fn a_jwt_secret_of_a_few_repeated_characters_or_one_that_is_the_secret_key_is_refused() {
        let random = "0123456789abcdef0123456789abcdef";
        for weak in ["a".repeat(64), "0".repeat(40), "passwordpassword".repeat(2)] {
            let err = config(&[
                ("DATABASE_URL", "postgres://x/y"),
                ("TOOLGATE_JWT_SECRET", &weak),
                ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
            ])
            .expect_err(&weak)
            .to_string();
            assert!(
                err.contains("TOOLGATE_JWT_SECRET") && err.contains("different characters"),
                "{err}"
            );
            assert!(!err.contains(&weak), "the secret echoed: {err}");
        }
        let err = config(&[
            ("DATABASE_URL", "postgres://x/y"),
            ("TOOLGATE_JWT_SECRET", random),
            ("TOOLGATE_SECRET_KEY", random),
        ])
        .expect_err("the same secret twice")
        .to_string();
        assert!(err.contains("change TOOLGATE_JWT_SECRET"), "{err}");
        assert!(!err.contains(random), "the secret echoed: {err}");
        // A weak secret key still opens what it sealed: kept, with a warning.
        let kept = config(&[
            ("DATABASE_URL", "postgres://x/y"),
            ("TOOLGATE_JWT_SECRET", random),
            ("TOOLGATE_SECRET_KEY", "passwordpassword"),
        ]);
        assert!(kept.is_ok());
    }

    #[test]
    fn jwt_secret_is_required_without_dev_auth() {
        let err = config(&[("DATABASE_URL", "postgres://x/y")]).expect_err("must fail");
        assert!(err.to_string().contains("TOOLGATE_JWT_SECRET"), "{err}");
    }

    #[test]
    fn defaults_apply() {
        let config = config(&[
            ("DATABASE_URL", "postgres://x/y"),
            ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
            ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
        ])
        .expect("valid");
        assert_eq!(config.bind.to_string(), "127.0.0.1:3000");
        assert_eq!(config.input_ttl, Duration::from_secs(86_400));
        assert_eq!(config.header_read_timeout, Duration::from_secs(30));
        assert_eq!(config.write_timeout, Duration::from_secs(60));
        assert_eq!(config.llm.quiet_limit, Duration::from_secs(300));
        assert_eq!(config.llm.answer_limit, Duration::from_secs(3600));
        assert!(!config.dev_auth);
        assert_eq!(config.limits.waiting_requests, 100);
        assert_eq!(config.limits.conversation_bytes(), 64 << 20);
    }

    /// What every configuration needs, for tests that vary one setting.
    const REQUIRED: [(&str, &str); 3] = [
        ("DATABASE_URL", "postgres://x/y"),
        ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
        ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
    ];

    #[test]
    fn a_conversation_must_be_able_to_hold_a_waiting_request() {
        let base = REQUIRED;
        for bad in ["0", "-1", "many"] {
            let mut settings = base.to_vec();
            settings.push(("TOOLGATE_MAX_WAITING_REQUESTS", bad));
            let err = config(&settings).expect_err(bad);
            assert!(
                err.to_string().contains("TOOLGATE_MAX_WAITING_REQUESTS"),
                "{bad}: {err}"
            );
        }
        let mut settings = base.to_vec();
        settings.push(("TOOLGATE_MAX_WAITING_REQUESTS", "7"));
        assert_eq!(config(&settings).expect("valid").limits.waiting_requests, 7);
    }

    #[test]
    fn a_conversation_must_be_able_to_hold_a_message() {
        let base = REQUIRED;
        for bad in ["0", "-1", "lots"] {
            let mut settings = base.to_vec();
            settings.push(("TOOLGATE_MAX_CONVERSATION_MIB", bad));
            let err = config(&settings).expect_err(bad);
            assert!(
                err.to_string().contains("TOOLGATE_MAX_CONVERSATION_MIB"),
                "{bad}: {err}"
            );
        }
        let mut settings = base.to_vec();
        settings.push(("TOOLGATE_MAX_CONVERSATION_MIB", "3"));
        let limits = config(&settings).expect("valid").limits;
        assert_eq!(limits.conversation_bytes(), 3 << 20);
        settings.push(("TOOLGATE_MAX_BODY_BYTES", "4194304"));
        let err = config(&settings).expect_err("a body larger than a conversation");
        assert!(err.to_string().contains("TOOLGATE_MAX_BODY_BYTES"), "{err}");
    }

    #[test]
    fn connection_timeouts_must_be_durations_above_zero() {
        for name in [
            "TOOLGATE_HEADER_READ_TIMEOUT",
            "TOOLGATE_WRITE_TIMEOUT",
            "TOOLGATE_LLM_TIMEOUT",
            "TOOLGATE_LLM_ANSWER_TIMEOUT",
        ] {
            for bad in ["0s", "0", "soon"] {
                let err = config(&[
                    ("DATABASE_URL", "postgres://x/y"),
                    ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
                    ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
                    (name, bad),
                ])
                .err()
                .map(|err| format!("{err:#}"))
                .unwrap_or_default();
                assert!(err.contains(name), "{name}={bad}: {err}");
            }
        }
    }

    /// A whole answer may not be shorter than one quiet spell within it: a step would
    /// fail as taking too long where the endpoint kept still within its limit. Left
    /// unset, the answer limit grows with a raised quiet limit.
    #[test]
    fn an_answer_limit_is_never_shorter_than_the_quiet_limit() {
        let limits = |settings: &[(&'static str, &'static str)]| {
            let mut all = REQUIRED.to_vec();
            all.extend_from_slice(settings);
            config(&all).map(|loaded| (loaded.llm.quiet_limit, loaded.llm.answer_limit))
        };
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(limits(&[]).expect("defaults"), (minutes(5), minutes(60)));
        assert_eq!(
            limits(&[("TOOLGATE_LLM_TIMEOUT", "2h")]).expect("raised"),
            (minutes(120), minutes(120))
        );
        assert_eq!(
            limits(&[
                ("TOOLGATE_LLM_TIMEOUT", "10m"),
                ("TOOLGATE_LLM_ANSWER_TIMEOUT", "10m")
            ])
            .expect("equal"),
            (minutes(10), minutes(10))
        );
        let err = limits(&[
            ("TOOLGATE_LLM_TIMEOUT", "10m"),
            ("TOOLGATE_LLM_ANSWER_TIMEOUT", "5m"),
        ])
        .expect_err("shorter");
        let err = format!("{err:#}");
        assert!(
            err.contains("TOOLGATE_LLM_ANSWER_TIMEOUT (300s)")
                && err.contains("TOOLGATE_LLM_TIMEOUT (600s)"),
            "{err}"
        );
    }

    #[test]
    fn a_request_lifetime_must_be_within_a_year() {
        for (ttl, fine) in [("400d", false), ("366d", true), ("90s", true)] {
            let loaded = config(&[
                ("DATABASE_URL", "postgres://x/y"),
                ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
                ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
                ("TOOLGATE_INPUT_TTL", ttl),
            ]);
            match loaded {
                Ok(_) => assert!(fine, "{ttl} taken"),
                Err(err) => assert!(
                    !fine && format!("{err:#}").contains("at most 366d"),
                    "{ttl}: {err:#}"
                ),
            }
        }
    }

    /// Postgres keeps `statement_timeout` in milliseconds of an `int`: a longer one would
    /// fail every connection the pool opens, long after start-up.
    #[test]
    fn a_statement_timeout_must_fit_what_postgres_takes() {
        for (timeout, fine) in [("25d", false), ("24d", true), ("250ms", true)] {
            let loaded = config(&[
                ("DATABASE_URL", "postgres://x/y"),
                ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
                ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
                ("TOOLGATE_DB_STATEMENT_TIMEOUT", timeout),
            ]);
            match loaded {
                Ok(config) => assert!(
                    fine && !config.db_statement_timeout.is_zero(),
                    "{timeout} taken"
                ),
                Err(err) => assert!(
                    !fine && format!("{err:#}").contains("at most 24d"),
                    "{timeout}: {err:#}"
                ),
            }
        }
    }

    #[test]
    fn dev_auth_is_refused_on_a_public_bind_without_the_override() {
        for bind in ["0.0.0.0:3000", "[::]:3000", "192.0.2.10:3000"] {
            let err = config(&[
                ("DATABASE_URL", "postgres://x/y"),
                ("TOOLGATE_DEV_AUTH", "1"),
                ("TOOLGATE_BIND", bind),
                ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
                ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
            ])
            .err()
            .map(|err| err.to_string())
            .unwrap_or_default();
            assert!(err.contains(DEV_AUTH_PUBLIC_OVERRIDE), "{bind}: {err}");
        }
    }

    #[test]
    fn dev_auth_on_a_public_bind_starts_with_the_override_or_on_loopback() {
        let base = [
            ("DATABASE_URL", "postgres://x/y"),
            ("TOOLGATE_DEV_AUTH", "1"),
            ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
            ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
        ];
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut vars = base.to_vec();
            vars.extend_from_slice(extra);
            config(&vars)
        };
        assert!(
            with(&[
                ("TOOLGATE_BIND", "0.0.0.0:3000"),
                (DEV_AUTH_PUBLIC_OVERRIDE, "1")
            ])
            .is_ok()
        );
        assert!(with(&[("TOOLGATE_BIND", "[::1]:3000")]).is_ok());
        assert!(with(&[("TOOLGATE_BIND", "127.0.0.1:3000")]).is_ok());
        // Dev sign-in off: a public bind is the normal case.
        let mut vars = base.to_vec();
        vars.retain(|(name, _)| *name != "TOOLGATE_DEV_AUTH");
        vars.push(("TOOLGATE_BIND", "0.0.0.0:3000"));
        assert!(config(&vars).is_ok());
    }

    #[test]
    fn token_lifetime_defaults_to_a_day() {
        let config = config(&[
            ("DATABASE_URL", "postgres://x/y"),
            ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
            ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
        ])
        .expect("valid");
        assert_eq!(config.max_token_lifetime, Duration::from_secs(86_400));
    }

    #[test]
    fn debug_output_hides_secrets() {
        let config = config(&[
            ("DATABASE_URL", "postgres://app:hunter2@db/toolgate"),
            ("TOOLGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
            ("TOOLGATE_SECRET_KEY", "another secret of enough length"),
        ])
        .expect("valid");
        let shown = format!("{config:?}");
        assert!(!shown.contains("hunter2"));
        assert!(!shown.contains("0123456789abcdef"));
        assert!(shown.contains("postgres://app:***@db/toolgate"));
    }
}
