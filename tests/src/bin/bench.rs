//! `bench`: the API's hot paths against Postgres's own limit for the same SQL, measured
//! in one run on this machine, plus scale, agent-step and memory figures. Every figure
//! is read against a baseline from the same run; nothing here asserts a time.
//!
//! Run through `scripts/bench.sh` (it builds the release server and checks pgbench).
//! `--quick` shortens every load for a smoke run; `--step` prints only the agent step
//! (its time and its transactions).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use jsonwebtoken::Algorithm;
use serde_json::json;
use sqlx::Connection;
use tests::{JWT_SECRET, ServerOptions, TestServer, now, sign_token, write_temp_file};

/// Users 0..USERS read (a realistic couple of pending requests each); users
/// USERS..2*USERS write, so writes do not grow what the reads return.
const USERS: usize = 1000;
const WRITERS: usize = USERS;
const CONCURRENCY: [usize; 4] = [1, 8, 32, 64];
const BASELINE_CLIENTS: [usize; 2] = [8, 32];

const BENCH_TOOLS: &str = r#"
[[tools]]
name = "bench_calc"
description = "Arithmetic for a region; the region is remembered for the session"
kind = "calculator"
parameters = { type = "object", properties = { expression = { type = "string" } }, required = ["expression"] }
[tools.requires_user_input]
reason = "Which region?"
save_for_session = true
fields = [ { name = "region", type = "select", options = ["eu", "us"] } ]

[[tools]]
name = "bench_ask"
description = "Always needs a code from the user"
kind = "calculator"
parameters = { type = "object", properties = { expression = { type = "string" } }, required = ["expression"] }
[tools.requires_user_input]
reason = "A one-time code"
save_for = "call"
fields = [ { name = "code", type = "text" } ]
"#;

fn conversation_of(user: usize) -> String {
    format!("00000000-0000-0000-0000-{user:012}")
}

fn user_name(user: usize) -> String {
    format!("bench-u{user}")
}

/// What wrk measured for one load.
#[derive(Default, Clone)]
struct Figures {
    rate: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    errors: u64,
    /// What the errors were, as wrk names them (`non-2xx 12`, `timeout 3`).
    error_kinds: Vec<String>,
}

/// One HTTP load: which users send, and the body each request carries. The body is a
/// Lua expression over `n` (a number unique within the load), `u` (the user's index,
/// 1-based) and `conv` (the user's conversation id).
#[derive(Clone)]
struct Load {
    path: &'static str,
    /// Lua expression picking `u` from `n`.
    user: &'static str,
    body: String,
}

fn readers() -> &'static str {
    "(n * 7919) % 1000 + 1"
}

fn writers() -> &'static str {
    "1000 + (n * 7919) % 1000 + 1"
}

struct Bench {
    base: String,
    users_lua: String,
    seconds: u64,
    dir: tests::TempDir,
    runs: AtomicUsize,
}

impl Bench {
    fn new(base: String, tokens: &[String], seconds: u64) -> Self {
        let tokens_lua: Vec<String> = tokens.iter().map(|t| format!("\"{t}\"")).collect();
        let convs_lua: Vec<String> = (0..tokens.len())
            .map(|u| format!("\"{}\"", conversation_of(u)))
            .collect();
        Bench {
            base,
            users_lua: format!(
                "local tokens = {{{}}}\nlocal convs = {{{}}}\n",
                tokens_lua.join(","),
                convs_lua.join(",")
            ),
            seconds,
            dir: tests::TempDir::new("toolgate-bench-wrk"),
            runs: AtomicUsize::new(0),
        }
    }

    /// Runs wrk with `connections` connections for the configured time.
    fn run(&self, load: &Load, connections: usize) -> Result<Figures> {
        let threads = connections.min(2);
        let run = self.runs.fetch_add(1, Ordering::SeqCst);
        let script = format!(
            "{users}
local threads = {threads}
local counter = 0
next_tid = 0
all_threads = {{}}
function setup(thread)
  thread:set(\"tid\", next_tid)
  next_tid = next_tid + 1
  table.insert(all_threads, thread)
end
failures = {{}}
failure_sample = nil
response = function(status, headers, body)
  if status >= 300 then
    failures[status] = (failures[status] or 0) + 1
    if failure_sample == nil then failure_sample = status .. \" \" .. string.sub(body or \"\", 1, 200) end
  end
end
done = function(summary, latency, requests)
  for _, thread in ipairs(all_threads) do
    local counts = thread:get(\"failures\")
    for status, count in pairs(counts) do io.write(\"Status \", status, \" \", count, \"\\n\") end
    local sample = thread:get(\"failure_sample\")
    if sample then io.write(\"Sample \", sample, \"\\n\") end
  end
end
request = function()
  counter = counter + 1
  local n = counter * threads + tid
  local u = {user}
  local conv = convs[u]
  local body = {body}
  return wrk.format(\"POST\", \"{path}\", {{[\"Authorization\"] = \"Bearer \" .. tokens[u], [\"Content-Type\"] = \"application/json\"}}, body)
end
",
            users = self.users_lua,
            user = load.user,
            body = load.body.replace("{run}", &run.to_string()),
            path = load.path,
        );
        let path = self.dir.0.join(format!("load-{run}.lua"));
        std::fs::write(&path, script)?;
        let output = Command::new("wrk")
            .args(["-t", &threads.to_string(), "-c", &connections.to_string()])
            .args(["-d", &format!("{}s", self.seconds), "--latency", "-s"])
            .arg(&path)
            .arg(&self.base)
            .output()
            .context("running wrk (scripts/bench.sh installs it)")?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!(
                "wrk failed: {text}{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        parse_wrk(&text)
    }
}

/// Requests a calm client sends per second: well under the per-user rate limit
/// (`TOOLGATE_RATE_PER_MINUTE`, 1200 a minute by default), so every one of them is
/// served and its latency is the server's, not the limiter's.
const CALM_PER_SECOND: u64 = 10;

/// Sends `request` every 1/`per_second` s for `seconds` and records each latency (a
/// paced client, unlike wrk, which sends as fast as the server answers).
async fn paced(
    request: impl Fn() -> reqwest::RequestBuilder,
    per_second: u64,
    seconds: u64,
) -> Result<Figures> {
    let mut ticks = tokio::time::interval(Duration::from_millis(1000 / per_second));
    let mut latencies = Vec::new();
    let mut errors = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        ticks.tick().await;
        let sent = Instant::now();
        let response = request().send().await.context("a paced request")?;
        let ok = response.status().is_success();
        response.bytes().await.context("a paced answer")?;
        latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
        if !ok {
            errors += 1;
        }
    }
    latencies.sort_by(f64::total_cmp);
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
    Ok(Figures {
        rate: latencies.len() as f64 / seconds as f64,
        p50_ms: at(0.5),
        p99_ms: at(0.99),
        max_ms: at(1.0),
        errors,
        error_kinds: Vec::new(),
    })
}

/// Rounds of this many loads each in `--reads`.
const READ_ROUNDS: usize = 3;

/// `--reads`: the two hot reads at 32 clients against pgbench running their SQL, the
/// server and pgbench taking turns for a few rounds, so a minute when the machine is
/// slow falls on both; each round's ratios, then their medians.
async fn reads(bench: &Bench, url: &str, get_pending: &Load, seconds: u64) -> Result<()> {
    let get_session_values = Load {
        body: r#"string.format('{"action":"get_session_values","conversation_id":"%s"}', conv)"#
            .into(),
        ..get_pending.clone()
    };
    let scripts = baseline_scripts();
    let dir = tests::TempDir::new("toolgate-bench-reads");
    let clients = 32;
    // Warm up: the pool opens its connections and Postgres fills its caches.
    bench.run(get_pending, clients)?;
    println!("\n## The hot reads, {clients} clients, server and pgbench in turn\n");
    println!(
        "| path | round | req/s | p99 ms | pgbench tps | ratio | pgbench tps, one statement | ratio |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, load) in [
        ("get_pending", get_pending),
        ("get_session_values", &get_session_values),
    ] {
        let mut ratios = Vec::new();
        let mut one_ratios = Vec::new();
        for round in 1..=READ_ROUNDS {
            let mut tps = Vec::new();
            for key in [name.to_owned(), one_statement(name)] {
                let path = dir.0.join(format!("{name}-{}.sql", tps.len()));
                std::fs::write(&path, &scripts[&key])?;
                tps.push(pgbench(url, &path, clients, seconds)?);
            }
            let f = bench.run(load, clients)?;
            ratios.push(f.rate / tps[0]);
            one_ratios.push(f.rate / tps[1]);
            println!(
                "| {name} | {round} | {:.0} | {:.2} | {:.0} | {:.2} | {:.0} | {:.2} |",
                f.rate,
                f.p99_ms,
                tps[0],
                f.rate / tps[0],
                tps[1],
                f.rate / tps[1]
            );
        }
        println!(
            "| {name} | median | | | | {:.2} | | {:.2} |",
            median(&mut ratios),
            median(&mut one_ratios)
        );
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// One user floods the API far past the rate limit while another user reads at a calm
/// pace and a probe asks `/healthz`: their figures beside the same probes run idle.
async fn flood_isolation(bench: &Bench, tokens: &[String], seconds: u64) -> Result<()> {
    let seconds = seconds * 2;
    let client = tests::http_client();
    let calm_token = tokens[1].clone();
    let base = bench.base.clone();
    let calm = || {
        client
            .post(format!("{base}/api/tool-user-input"))
            .bearer_auth(&calm_token)
            .json(&json!({"action": "get_pending", "conversation_id": conversation_of(1)}))
    };
    let health = || client.get(format!("{base}/healthz"));
    let probes = || async {
        tokio::try_join!(
            paced(calm, CALM_PER_SECOND, seconds),
            paced(health, CALM_PER_SECOND, seconds)
        )
    };
    let (calm_idle, health_idle) = probes().await?;
    let flooder = Load {
        path: "/api/tool-user-input",
        user: "1",
        body: r#"string.format('{"action":"get_pending","conversation_id":"%s"}', conv)"#.into(),
    };
    let flood_bench = Bench::new(base.clone(), tokens, seconds + 1);
    let flood = std::thread::spawn(move || flood_bench.run(&flooder, 32));
    // Let the flood reach full speed before measuring beside it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (calm_busy, health_busy) = probes().await?;
    let flood = flood
        .join()
        .unwrap_or_else(|_| bail!("the flood thread failed"))?;
    println!("\n## One user floods, another reads\n");
    println!(
        "User 0 sends get_pending on 32 connections as fast as it is answered ({:.0} req/s, {} answered 429 or otherwise not 2xx); user 1 sends get_pending and a probe asks /healthz, each {CALM_PER_SECOND} times a second for {seconds} s, first alone, then beside the flood.\n",
        flood.rate, flood.errors
    );
    println!(
        "| | idle p50 ms | idle p99 ms | beside the flood p50 ms | p99 ms | p99 ratio | failed |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, idle, busy) in [
        ("user 1 get_pending", &calm_idle, &calm_busy),
        ("/healthz", &health_idle, &health_busy),
    ] {
        println!(
            "| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} |",
            idle.p50_ms,
            idle.p99_ms,
            busy.p50_ms,
            busy.p99_ms,
            busy.p99_ms / idle.p99_ms.max(0.001),
            idle.errors + busy.errors
        );
    }
    Ok(())
}

fn duration_ms(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    Some(match unit {
        "us" => number / 1000.0,
        "ms" => number,
        "s" => number * 1000.0,
        "m" => number * 60_000.0,
        _ => return None,
    })
}

fn parse_wrk(text: &str) -> Result<Figures> {
    let mut figures = Figures::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["Latency", _avg, _stdev, max, ..] => figures.max_ms = duration_ms(max).unwrap_or(0.0),
            ["50%", value] => figures.p50_ms = duration_ms(value).unwrap_or(0.0),
            ["99%", value] => figures.p99_ms = duration_ms(value).unwrap_or(0.0),
            ["Requests/sec:", value] => figures.rate = value.parse().unwrap_or(0.0),
            ["Non-2xx", "or", "3xx", "responses:", count] => {
                figures.errors += count.parse::<u64>().unwrap_or(0);
            }
            ["Status", status, count] => figures.error_kinds.push(format!("HTTP {status} {count}")),
            ["Sample", ..] => figures
                .error_kinds
                .push(format!("e.g. {}", &line["Sample ".len()..])),
            ["Socket", "errors:", rest @ ..] => {
                // "connect 0, read 0, write 0, timeout 3"
                for pair in rest.chunks(2) {
                    if let [kind, count] = pair {
                        let count = count.trim_end_matches(',').parse::<u64>().unwrap_or(0);
                        if count > 0 {
                            figures.errors += count;
                            figures.error_kinds.push(format!("{kind} {count}"));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if figures.rate == 0.0 {
        bail!("could not read wrk's report:\n{text}");
    }
    Ok(figures)
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

async fn seed(url: &str, pending_per_user: usize) -> Result<()> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::raw_sql(&format!(
        "insert into conversations (id, user_id, title)
           select ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, 'bench-u' || g, 'bench'
           from generate_series(0, {all}) g on conflict do nothing;
         insert into saved_tool_inputs (user_id, conversation_id, tool_name, name, value)
           select 'bench-u' || g, ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, 'bench_calc', 'region', '\"eu\"'
           from generate_series(0, {all}) g on conflict do nothing;
         insert into saved_tool_inputs (user_id, conversation_id, tool_name, name, value)
           select 'bench-u' || g, null, 'bench_calc', 'team', '\"ops\"'
           from generate_series(0, {all}) g on conflict do nothing;
         insert into tool_user_input_requests (id, user_id, conversation_id, tool_name, tool_call_id,
             reason, required_fields, save_for, expires_at)
           select gen_random_uuid(), 'bench-u' || (g % {users}),
                  ('00000000-0000-0000-0000-' || lpad((g % {users})::text, 12, '0'))::uuid,
                  'bench_ask', 'bench-pending-' || g, 'A one-time code',
                  '[{{\"name\": \"code\", \"type\": \"text\"}}]', 'call', now() + interval '1 day'
           from generate_series(0, {pending}) g;
         analyze;",
        all = USERS + WRITERS - 1,
        users = USERS,
        pending = USERS * pending_per_user - 1,
    ))
    .execute(&mut conn)
    .await
    .context("seeding the bench database")?;
    Ok(())
}

/// Pending requests for a submit run: `count` fresh ids with a given prefix.
async fn seed_submittable(url: &str, prefix: &str, count: usize) -> Result<()> {
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::raw_sql(&format!(
        "insert into tool_user_input_requests (id, user_id, conversation_id, tool_name, tool_call_id,
             reason, required_fields, save_for, expires_at)
           select gen_random_uuid(), 'bench-u' || ({USERS} + g % {WRITERS}),
                  ('00000000-0000-0000-0000-' || lpad(({USERS} + g % {WRITERS})::text, 12, '0'))::uuid,
                  'bench_ask', '{prefix}' || g, 'A one-time code',
                  '[{{\"name\": \"code\", \"type\": \"text\"}}]', 'call', now() + interval '1 day'
           from generate_series(0, {last}) g",
        last = count - 1,
    ))
    .execute(&mut conn)
    .await
    .context("seeding submittable requests")?;
    Ok(())
}

/// The database part of a URL for pgbench: host, port, user, database name.
fn pg_parts(url: &str) -> (String, String, String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let (authority, path) = rest.split_once('/').unwrap_or((rest, "postgres"));
    let (credentials, host_port) = authority
        .rsplit_once('@')
        .unwrap_or(("postgres", authority));
    let user = credentials
        .split(':')
        .next()
        .unwrap_or("postgres")
        .to_owned();
    let (host, port) = host_port.split_once(':').unwrap_or((host_port, "5432"));
    let database = path.split('?').next().unwrap_or("postgres").to_owned();
    (host.to_owned(), port.to_owned(), user, database)
}

/// Runs a pgbench custom script; returns transactions per second.
fn pgbench(url: &str, script: &Path, clients: usize, seconds: u64) -> Result<f64> {
    let (host, port, user, database) = pg_parts(url);
    let output = Command::new(std::env::var("PGBENCH").unwrap_or_else(|_| "pgbench".into()))
        .args([
            "-n", "-M", "prepared", "-h", &host, "-p", &port, "-U", &user,
        ])
        .args([
            "-c",
            &clients.to_string(),
            "-j",
            "2",
            "-T",
            &seconds.to_string(),
        ])
        .arg("-f")
        .arg(script)
        .arg(&database)
        .output()
        .context("running pgbench (scripts/bench.sh installs it)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        bail!(
            "pgbench failed: {}{}",
            text,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    text.lines()
        .find(|l| l.starts_with("tps ="))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|v| v.parse().ok())
        .context("reading pgbench's tps")
}

const IDENTITY: &str = "\\set u random(0, 999)\nBEGIN;\nselect set_config('role', 'toolgate_app', true), set_config('toolgate.user_id', 'bench-u' || :u, true);\n";
const WRITER_IDENTITY: &str = "\\set u random(1000, 1999)\nBEGIN;\nselect set_config('role', 'toolgate_app', true), set_config('toolgate.user_id', 'bench-u' || :u, true);\n";
/// Waiting cards a conversation may hold in the benchmark: loads that create requests
/// never meet the limit, and the server counts up to it on every create.
const MAX_WAITING: u32 = 1_000_000;
const CONVERSATION: &str = "('00000000-0000-0000-0000-' || lpad(:u::text, 12, '0'))::uuid";

/// A log line without its terminal colours.
fn without_ansi(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters, then a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}

/// The baseline name of a read's one-statement form.
fn one_statement(path: &str) -> String {
    format!("{path} (one statement)")
}

/// The SQL each hot path runs, in the transaction shape every API request had before
/// the reads took one round trip (`BEGIN`, identity, statement, `COMMIT`); and the two
/// reads as the server runs them now, one statement in its own implicit transaction.
fn baseline_scripts() -> BTreeMap<String, String> {
    let columns = "id, user_id, conversation_id, run_id, tool_name, tool_call_id, tool_args, reason, required_fields, user_inputs, save_for, status, created_at, completed_at, expires_at, origin, original_user_request, tool_result, kind, allowed_decisions, arguments_digest, decision, decision_message, decided_by";
    let one_statement_reads = [
        ("get_pending", "toolgate_pending_requests"),
        ("get_session_values", "toolgate_session_values"),
    ]
    .map(|(path, function)| {
        (
            one_statement(path),
            format!("\\set u random(0, 999)\nselect * from {function}('bench-u' || :u, {CONVERSATION});\n"),
        )
    });
    let transactions = [
        (
            "get_pending",
            format!(
                "{IDENTITY}select {columns} from tool_user_input_requests where conversation_id = {CONVERSATION} and status = 'pending' and expires_at > now() order by created_at, id;\nCOMMIT;\n"
            ),
        ),
        (
            "get_session_values",
            format!(
                "{IDENTITY}select conversation_id, name, value, is_secret, updated_at, tool_name, memory_key, label, binding from saved_tool_inputs where (conversation_id = {CONVERSATION} or conversation_id is null) and exists (select 1 from conversations where id = {CONVERSATION}) order by conversation_id nulls last, binding;\nCOMMIT;\n"
            ),
        ),
        // As `requests::insert_request` runs it: the conversation's writer lock, the call
        // id's lock and check, the count of waiting cards (up to the limit the server
        // is started with), the insert, and the card's stream event.
        (
            "create_request",
            format!(
                "\\set n random(1, 1000000000000)\n{WRITER_IDENTITY}select 1 from conversations where id = {CONVERSATION} for no key update;\nselect pg_advisory_xact_lock(hashtextextended('bench-u' || :u || chr(1) || 'pgb-' || :client_id || '-' || :n, 7301));\nselect exists(select 1 from tool_user_input_requests where user_id = 'bench-u' || :u and tool_call_id = 'pgb-' || :client_id || '-' || :n and (status = 'pending' or tool_name <> 'bench_ask' or conversation_id <> {CONVERSATION}));\nselect count(*) from (select 1 from tool_user_input_requests where conversation_id = {CONVERSATION} and status = 'pending' and expires_at > now() limit {MAX_WAITING}) as waiting;\ninsert into tool_user_input_requests (id, user_id, conversation_id, run_id, tool_name, tool_call_id, tool_args, reason, required_fields, save_for, expires_at, origin, original_user_request) select gen_random_uuid(), 'bench-u' || :u, {CONVERSATION}, null, 'bench_ask', 'pgb-' || :client_id || '-' || :n, '{{}}', 'A one-time code', '[{{\"name\": \"code\"}}]', 'call', now() + interval '1 day', 'api', null where exists (select 1 from conversations where id = {CONVERSATION}) returning {columns};\nwith stored as (insert into run_events (conversation_id, user_id, run_id, kind, data, data_bytes) values ({CONVERSATION}, 'bench-u' || :u, null, 'input_requested', '{{\"type\": \"input_requested\"}}', 28) returning id) select stored.id from stored, lateral (select pg_notify('toolgate_events', {CONVERSATION}::text || ' ' || stored.id::text)) as notified;\nCOMMIT;\n"
            ),
        ),
        (
            "submit_response",
            format!(
                "\\set n random(0, 199999)\n\\set u 1000 + :n % 1000\nBEGIN;\nselect set_config('role', 'toolgate_app', true), set_config('toolgate.user_id', 'bench-u' || :u, true);\nselect {columns} from tool_user_input_requests where tool_call_id = 'bench-pgb-' || :n order by status = 'pending' desc, created_at desc limit 1 for update;\nupdate tool_user_input_requests set status = 'completed', completed_at = now(), user_inputs = coalesce('{{\"code\": \"1234\"}}'::jsonb, user_inputs), decided_by = 'bench-u' || :u where tool_call_id = 'bench-pgb-' || :n and status = 'pending' returning {columns};\nwith stored as (insert into run_events (conversation_id, user_id, run_id, kind, data, data_bytes) values ({CONVERSATION}, 'bench-u' || :u, null, 'input_resolved', '{{\"type\": \"input_resolved\"}}', 25) returning id) select stored.id from stored, lateral (select pg_notify('toolgate_events', {CONVERSATION}::text || ' ' || stored.id::text)) as notified;\nCOMMIT;\n"
            ),
        ),
    ]
    .map(|(path, sql)| (path.to_owned(), sql));
    transactions
        .into_iter()
        .chain(one_statement_reads)
        .collect()
}

#[tokio::main]
async fn main() -> Result<()> {
    backend::install_tls_provider();
    let quick = std::env::args().any(|a| a == "--quick");
    let step_only = std::env::args().any(|a| a == "--step");
    let reads_only = std::env::args().any(|a| a == "--reads");
    let seconds: u64 = if quick { 2 } else { 5 };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let memory_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0 / 1024.0);
    println!(
        "# toolgate benchmark — {cores} cores, {memory_gib:.1} GiB, {seconds} s per load{}",
        if quick { " (quick)" } else { "" }
    );
    println!("\nLoad from wrk and pgbench on the same machine as the server and Postgres.");

    let (_tools_dir, tools_path) = write_temp_file("bench-tools.toml", BENCH_TOOLS);
    let server = TestServer::try_start(
        ServerOptions::default()
            .env("TOOLGATE_LOG", "warn")
            .env("TOOLGATE_TOOLS", &tools_path.to_string_lossy())
            .env("TOOLGATE_DB_MAX_CONNECTIONS", "32")
            // The load makes requests without end, and never answers most of them.
            .env("TOOLGATE_MAX_WAITING_REQUESTS", &MAX_WAITING.to_string()),
    )
    .await?;
    let pid = server.pid().context("server pid")?;
    let url = server.database_url.clone();
    if step_only {
        let mut conn = sqlx::PgConnection::connect(&url).await?;
        let state = agent_step(&url, &tools_path, &mut conn).await?;
        step_transactions(&state, &url).await?;
        return Ok(());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_kib(pid, "VmRSS:");
    let tokens: Vec<String> = (0..USERS + WRITERS)
        .map(|u| {
            sign_token(
                &json!({"sub": user_name(u), "exp": now() + 3600}),
                JWT_SECRET,
                Algorithm::HS256,
            )
        })
        .collect();
    let bench = Bench::new(server.base.clone(), &tokens, seconds);

    let get_pending = Load {
        path: "/api/tool-user-input",
        user: readers(),
        body: r#"string.format('{"action":"get_pending","conversation_id":"%s"}', conv)"#.into(),
    };
    let submit = |prefix: &str| Load {
        path: "/api/tool-user-input",
        user: "1000 + n % 1000 + 1",
        body: format!(
            r#"string.format('{{"action":"submit_response","tool_call_id":"{prefix}%d","user_inputs":{{"code":"1234"}}}}', n)"#
        ),
    };

    // Scale, small end: the table holds the readers' requests and one pool to submit.
    seed(&url, 1).await?;
    if reads_only {
        eprintln!("server pid {pid}");
        return reads(&bench, &url, &get_pending, seconds).await;
    }
    seed_submittable(&url, "bench-small-", 30_000).await?;
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let rows_small: i64 = sqlx::query_scalar("select count(*) from tool_user_input_requests")
        .fetch_one(&mut conn)
        .await?;
    // Warm up: the pool opens its connections and Postgres fills its caches.
    bench.run(&get_pending, 32)?;
    let pending_small = bench.run(&get_pending, 32)?;
    let submit_small = bench.run(&submit("bench-small-"), 32)?;

    // Baseline: pgbench running the same SQL.
    seed_submittable(&url, "bench-pgb-", 200_000).await?;
    let scripts_dir = tests::TempDir::new("toolgate-bench-sql");
    let mut baseline: BTreeMap<(String, usize), f64> = BTreeMap::new();
    for (name, sql) in baseline_scripts() {
        let file: String = name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        let path = scripts_dir.0.join(format!("{file}.sql"));
        std::fs::write(&path, sql)?;
        for clients in BASELINE_CLIENTS {
            baseline.insert(
                (name.clone(), clients),
                pgbench(&url, &path, clients, seconds)?,
            );
        }
    }

    // HTTP scenarios.
    let mut rows = Vec::new();
    for name in [
        "create_request",
        "submit_response",
        "get_pending",
        "get_session_values",
        "execute (runs, saved values)",
        "execute (requires_user_input)",
    ] {
        for concurrency in CONCURRENCY {
            let load = match name {
                "create_request" => Load {
                    path: "/api/tool-user-input",
                    user: writers(),
                    body: r#"string.format('{"action":"create_request","conversation_id":"%s","tool_name":"bench_ask","tool_call_id":"create-{run}-%d","reason":"A one-time code","fields":[{"name":"code"}]}', conv, n)"#.into(),
                },
                "submit_response" => {
                    let prefix = format!("bench-http-{concurrency}-");
                    seed_submittable(&url, &prefix, 60_000).await?;
                    submit(&prefix)
                }
                "get_pending" => get_pending.clone(),
                "get_session_values" => Load {
                    path: "/api/tool-user-input",
                    user: readers(),
                    body: r#"string.format('{"action":"get_session_values","conversation_id":"%s"}', conv)"#.into(),
                },
                "execute (runs, saved values)" => Load {
                    path: "/api/tools/execute",
                    user: readers(),
                    body: r#"string.format('{"conversation_id":"%s","tool_name":"bench_calc","tool_call_id":"calc-{run}-%d","arguments":{"expression":"6*7"}}', conv, n)"#.into(),
                },
                _ => Load {
                    path: "/api/tools/execute",
                    user: writers(),
                    body: r#"string.format('{"conversation_id":"%s","tool_name":"bench_ask","tool_call_id":"ask-{run}-%d","arguments":{"expression":"1"}}', conv, n)"#.into(),
                },
            };
            rows.push((name, concurrency, bench.run(&load, concurrency)?));
        }
    }
    let peak_rss = rss_kib(pid, "VmHWM:");

    println!("\n## HTTP API (JWT + RLS), against pgbench running the same SQL\n");
    println!(
        "| path | clients | req/s | p50 ms | p99 ms | max ms | errors | pgbench tps | ratio | pgbench tps, one statement | ratio |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let against = |key: String, clients: usize, rate: f64| match baseline.get(&(key, clients)) {
        Some(tps) => (format!("{tps:.0}"), format!("{:.2}", rate / tps)),
        None => ("—".into(), "—".into()),
    };
    for (name, clients, f) in &rows {
        let (base_text, ratio) = against(name.to_string(), *clients, f.rate);
        let (one_text, one_ratio) = against(one_statement(name), *clients, f.rate);
        println!(
            "| {name} | {clients} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {base_text} | {ratio} | {one_text} | {one_ratio} |",
            f.rate, f.p50_ms, f.p99_ms, f.max_ms, f.errors
        );
    }
    let failed: Vec<_> = rows.iter().filter(|(_, _, f)| f.errors > 0).collect();
    if !failed.is_empty() {
        println!("\nErrors, as wrk counted them:\n");
        for (name, clients, f) in failed {
            println!("- {name}, {clients} clients: {}", f.error_kinds.join(", "));
        }
        // What the server logged about them, each distinct message once, errors first.
        let logs = server.logs();
        let logged: BTreeSet<(bool, String)> = logs
            .lines()
            .map(without_ansi)
            .filter_map(|line| {
                let at = line.find(" ERROR ").or_else(|| line.find(" WARN "))?;
                let message = line[at..].trim().to_owned();
                Some((!message.starts_with("ERROR"), message))
            })
            .collect();
        for (_, message) in logged.iter().take(10) {
            println!("- server: {message}");
        }
    }

    // Scale, large end: 1,000,000 more rows across 10,000 more users.
    let started = Instant::now();
    sqlx::raw_sql(
        "insert into conversations (id, user_id, title)
           select ('00000000-0000-0000-0001-' || lpad(g::text, 12, '0'))::uuid, 'bulk-u' || g, 'bulk'
           from generate_series(0, 9999) g;
         insert into tool_user_input_requests (id, user_id, conversation_id, tool_name, tool_call_id,
             reason, required_fields, save_for, status, expires_at)
           select gen_random_uuid(), 'bulk-u' || (g % 10000),
                  ('00000000-0000-0000-0001-' || lpad((g % 10000)::text, 12, '0'))::uuid,
                  'bench_ask', 'bulk-' || g, 'A one-time code', '[{\"name\": \"code\"}]', 'call',
                  case when g % 10 = 0 then 'pending' else 'completed' end, now() + interval '1 day'
           from generate_series(0, 999999) g;
         analyze;",
    )
    .execute(&mut conn)
    .await?;
    // Steady state, as a table that grew over time would be: vacuumed (so index-only
    // visibility is set) and analysed, not mid-autovacuum.
    sqlx::raw_sql("vacuum (analyze) tool_user_input_requests")
        .execute(&mut conn)
        .await?;
    seed_submittable(&url, "bench-large-", 30_000).await?;
    let rows_large: i64 = sqlx::query_scalar("select count(*) from tool_user_input_requests")
        .fetch_one(&mut conn)
        .await?;
    let pending_large = bench.run(&get_pending, 32)?;
    let submit_large = bench.run(&submit("bench-large-"), 32)?;
    println!(
        "\n## Scale: 32 clients on a small table and after 1,000,000 rows across 10,000 more users (seeded in {:.0} s)\n",
        started.elapsed().as_secs_f64()
    );
    println!(
        "| path | {rows_small} rows: req/s, p99 | {rows_large} rows: req/s, p99 | p99 ratio |"
    );
    println!("| --- | ---: | ---: | ---: |");
    for (name, small, large) in [
        ("get_pending", &pending_small, &pending_large),
        ("submit_response", &submit_small, &submit_large),
    ] {
        println!(
            "| {name} | {:.0}, {:.2} ms | {:.0}, {:.2} ms | {:.2} |",
            small.rate,
            small.p99_ms,
            large.rate,
            large.p99_ms,
            large.p99_ms / small.p99_ms.max(1e-9)
        );
    }
    let state = agent_step(&url, &tools_path, &mut conn).await?;
    step_transactions(&state, &url).await?;

    flood_isolation(&bench, &tokens, seconds).await?;

    println!("\n## Memory (server process)\n");
    println!("| idle RSS | peak RSS under load (up to 64 clients) |");
    println!("| ---: | ---: |");
    println!(
        "| {:.1} MiB | {:.1} MiB |",
        idle_rss as f64 / 1024.0,
        peak_rss as f64 / 1024.0
    );

    web_chat_bundle();
    Ok(())
}

/// The web chat's WebAssembly: the main module, which every visit loads, and each module
/// split off from it, which the page fetches the first time it shows what it holds.
fn web_chat_bundle() {
    println!("\n## Web chat bundle\n");
    let pkg = tests::workspace_root().join("frontend/dist/pkg");
    let mut modules: Vec<std::path::PathBuf> = std::fs::read_dir(&pkg)
        .map(|dir| {
            dir.filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.extension().is_some_and(|e| e == "wasm"))
                .collect()
        })
        .unwrap_or_default();
    // The main module first, then the split-off ones by name.
    modules.sort_by_key(|path| (!path.ends_with("frontend_bg.wasm"), path.clone()));
    if modules
        .first()
        .is_none_or(|path| !path.ends_with("frontend_bg.wasm"))
    {
        println!(
            "(no bundle in {}: build it with scripts/run.sh or scripts/test.sh first)",
            pkg.display()
        );
        return;
    }
    let kib = |bytes: u64| bytes as f64 / 1024.0;
    println!("| module | fetched | wasm raw | wasm gzip -9 | as served (.gz beside it) |");
    println!("| --- | --- | ---: | ---: | ---: |");
    let (mut raw_total, mut gzip_total, mut served_total) = (0, 0, Some(0));
    for module in &modules {
        let raw = std::fs::metadata(module).map_or(0, |m| m.len());
        let gzipped = Command::new("gzip")
            .args(["-9", "-c"])
            .arg(module)
            .output()
            .map_or(0, |o| o.stdout.len() as u64);
        // What the server sends a browser that accepts gzip: the file written beside the
        // module when it was built (zopfli, or gzip -9 without it).
        let served = std::fs::metadata(module.with_extension("wasm.gz")).map(|m| m.len());
        let name = module
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let fetched = if name == "frontend_bg.wasm" {
            "on every visit"
        } else {
            "when first needed"
        };
        let served_text = served.as_ref().map_or_else(
            |_| "–".to_owned(),
            |&b| format!("{b} B ({:.0} KiB)", kib(b)),
        );
        println!(
            "| {name} | {fetched} | {:.0} KiB | {:.0} KiB | {served_text} |",
            kib(raw),
            kib(gzipped),
        );
        raw_total += raw;
        gzip_total += gzipped;
        served_total = served_total.and_then(|total| Some(total + served.ok()?));
    }
    let served_total =
        served_total.map_or_else(|| "–".to_owned(), |b| format!("{b} B ({:.0} KiB)", kib(b)));
    println!(
        "| all modules | | {:.0} KiB | {:.0} KiB | {served_total} |",
        kib(raw_total),
        kib(gzip_total),
    );
}

/// A model provider that adds up the time spent in its model's calls.
struct TimedModel {
    inner: std::sync::Arc<dyn backend::agent::model::ModelProvider>,
    spent: std::sync::Mutex<Duration>,
}

impl TimedModel {
    fn spent(&self) -> Duration {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl backend::agent::model::ModelProvider for TimedModel {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }

    fn default_model(&self) -> &str {
        self.inner.default_model()
    }

    fn complete<'a>(
        &'a self,
        request: &'a backend::agent::model::ModelRequest,
        deltas: backend::agent::model::DeltaSink<'a>,
    ) -> futures::future::BoxFuture<
        'a,
        Result<backend::agent::model::ModelReply, backend::agent::model::ModelError>,
    > {
        Box::pin(async move {
            let started = Instant::now();
            let reply = self.inner.complete(request, deltas).await;
            *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += started.elapsed();
            reply
        })
    }
}

/// The agent step without the model, in process: the run loop's load of the step's
/// inputs (one round trip) and the middleware chain's transform, each timed apart,
/// against an empty transaction as the same user (the floor of any load). Where the
/// history is past the summary threshold, the step that writes the summary (the
/// offline model summarising in process) is timed apart from the steps after it, which
/// apply the stored one. Returns the server state it built, for the transaction count
/// that follows.
async fn agent_step(
    url: &str,
    tools_path: &Path,
    conn: &mut sqlx::PgConnection,
) -> Result<backend::AppState> {
    println!(
        "\n## Agent step without the model (load: one round trip; prepare: middleware chain, context pipeline with token counting, tool list)\n"
    );
    println!(
        "| messages | empty transaction µs | load µs | load ÷ empty | prepare µs | step (load + prepare) µs | load, nothing held µs | step, nothing held µs | prepare writing a summary µs | step writing a summary, without the model µs |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    let config = backend::Config::from_lookup(|name| match name {
        "DATABASE_URL" => Some(url.to_owned()),
        "TOOLGATE_JWT_SECRET" => Some(JWT_SECRET.to_owned()),
        "TOOLGATE_SECRET_KEY" => Some(tests::SECRET_KEY.to_owned()),
        "TOOLGATE_TOOLS" => Some(tools_path.to_string_lossy().into_owned()),
        _ => None,
    })?;
    let pool = backend::db::connect(&config).await?;
    let (registry, mcp) =
        backend::tools::registry::ToolRegistry::load(config.tools_file.as_deref(), None)?;
    let mut agent = backend::agent::Agent::new(&config)?;
    // The model's own time (the offline model writing a summary in process) is counted
    // apart: the step is measured without the model.
    let model_time = std::sync::Arc::new(TimedModel {
        inner: agent.provider.clone(),
        spent: std::sync::Mutex::new(Duration::ZERO),
    });
    agent.provider = model_time.clone();
    let state = backend::AppState::new(pool, config, registry, mcp, agent);
    let mut smallest_run = None;
    for count in [10usize, 100, 1000] {
        let conversation = uuid::Uuid::new_v4();
        let user = format!("agent-u{count}");
        sqlx::query("insert into conversations (id, user_id, title) values ($1, $2, 'agent')")
            .bind(conversation)
            .bind(&user)
            .execute(&mut *conn)
            .await?;
        sqlx::query(
            "insert into messages (id, conversation_id, user_id, seq, role, content, text_content)
             select gen_random_uuid(), $1, $2, g, case when g % 2 = 1 then 'user' else 'assistant' end,
                    jsonb_build_array(jsonb_build_object('type', 'text', 'text', 'Message ' || g || ' about the quarterly report for region eu and the invoices.')),
                    'Message ' || g || ' about the quarterly report'
             from generate_series(1, $3) g",
        )
        .bind(conversation)
        .bind(&user)
        .bind(count as i32)
        .execute(&mut *conn)
        .await?;
        let run_id = uuid::Uuid::new_v4();
        sqlx::query(
            "insert into agent_runs (id, conversation_id, user_id, status, model)
             values ($1, $2, $3, 'completed', 'offline')",
        )
        .bind(run_id)
        .bind(conversation)
        .bind(&user)
        .execute(&mut *conn)
        .await?;
        let run = backend::agent::model::RunContext {
            user_id: user.clone(),
            conversation_id: conversation,
            run_id,
            step: 0,
            original_user_request: "How did the quarterly report for eu look?".into(),
        };
        // The step that crosses the summary threshold stores the summary it had written,
        // as the run loop does; the steps after it read and apply that summary.
        let summarised = store_first_summary(&state, &run).await?;
        let runner = state.runner();
        let iterations: u32 = match count {
            10 => 400,
            100 => 200,
            _ => 40,
        };
        let (mut empty, mut load, mut prepare) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        // The first step a server takes in a conversation holds none of its messages.
        let mut load_unheld = Duration::ZERO;
        let (mut summarising, mut summarising_model) = (Duration::ZERO, Duration::ZERO);
        // Interleaved, so that the machine's noise falls on all of them alike.
        for _ in 0..iterations {
            let started = Instant::now();
            let tx = backend::db::begin_as_user(&state.db, &user).await?;
            tx.commit().await?;
            empty += started.elapsed();

            let nothing_held = backend::agent::history_cache::HistoryCache::default();
            let started = Instant::now();
            std::hint::black_box(load_step(&state, &nothing_held, &run).await?);
            load_unheld += started.elapsed();

            let started = Instant::now();
            let inputs = load_step(&state, &state.agent.history, &run).await?;
            load += started.elapsed();

            let started = Instant::now();
            let outputs = backend::agent::step_inputs::StepOutputs::default();
            let request = backend::agent::prepare_request(&runner, &run, &inputs, &outputs).await?;
            std::hint::black_box(request);
            prepare += started.elapsed();

            if summarised {
                let unsummarised = backend::agent::step_inputs::StepInputs {
                    summary: None,
                    ..inputs
                };
                let model_before = model_time.spent();
                let started = Instant::now();
                let outputs = backend::agent::step_inputs::StepOutputs::default();
                let request =
                    backend::agent::prepare_request(&runner, &run, &unsummarised, &outputs).await?;
                std::hint::black_box((request, outputs.take_summary()));
                summarising += started.elapsed();
                summarising_model += model_time.spent() - model_before;
            }
        }
        let micros = |total: Duration| total.as_secs_f64() * 1e6 / f64::from(iterations);
        let (empty, load, prepare) = (micros(empty), micros(load), micros(prepare));
        let load_unheld = micros(load_unheld);
        let (summarising, summarising_step) = if summarised {
            let (whole, model) = (micros(summarising), micros(summarising_model));
            (
                format!("{whole:.0} (the model {model:.0})"),
                format!("{:.0}", load + whole - model),
            )
        } else {
            ("–".to_owned(), "–".to_owned())
        };
        println!(
            "| {count} | {empty:.0} | {load:.0} | {:.1} | {prepare:.0} | {:.0} | {load_unheld:.0} | {:.0} | {summarising} | {summarising_step} |",
            load / empty,
            load + prepare,
            load_unheld + prepare
        );
        smallest_run.get_or_insert(run);
    }
    if let Some(run) = smallest_run {
        beside_other_users(&state, conn, &run).await?;
    }
    Ok(state)
}

/// A step's read (retrieval included) beside other users' messages that match its
/// words: retrieval searches the caller's messages, so they should cost nothing.
async fn beside_other_users(
    state: &backend::AppState,
    conn: &mut sqlx::PgConnection,
    run: &backend::agent::model::RunContext,
) -> Result<()> {
    const USERS: i32 = 3_000;
    const EACH: i32 = 100;
    let iterations = 200u32;
    let time_loads = |label: &'static str| async move {
        let nothing_held = backend::agent::history_cache::HistoryCache::default();
        let started = Instant::now();
        for _ in 0..iterations {
            std::hint::black_box(load_step(state, &nothing_held, run).await?);
        }
        let micros = started.elapsed().as_secs_f64() * 1e6 / f64::from(iterations);
        anyhow::Ok((label, micros))
    };
    let alone = time_loads("alone").await?;
    let started = Instant::now();
    sqlx::query(
        "insert into conversations (id, user_id, title)
         select gen_random_uuid(), 'agent-other-' || g, 'other' from generate_series(1, $1) g",
    )
    .bind(USERS)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "insert into messages (id, conversation_id, user_id, seq, role, content, text_content)
         select gen_random_uuid(), c.id, c.user_id, s, 'user', '[]'::jsonb,
                'Message ' || s || ' about the quarterly report for region eu'
         from conversations c cross join generate_series(1, $1) s
         where c.user_id like 'agent-other-%'",
    )
    .bind(EACH)
    .execute(&mut *conn)
    .await?;
    sqlx::query("vacuum analyze messages")
        .execute(&mut *conn)
        .await?;
    let seeded = started.elapsed();
    let beside = time_loads("beside").await?;
    println!(
        "\nA step's read at 10 messages, nothing held, retrieval on: {:.0} µs alone, {:.0} µs beside {} messages of {USERS} other users that match its words (seeded in {:.0} s).",
        alone.1,
        beside.1,
        USERS * EACH,
        seeded.as_secs_f64()
    );
    Ok(())
}

/// The inputs of a step of `run`, read as the run loop reads them, with `held` the
/// messages the server holds.
async fn load_step(
    state: &backend::AppState,
    held: &backend::agent::history_cache::HistoryCache,
    run: &backend::agent::model::RunContext,
) -> Result<backend::agent::step_inputs::StepInputs> {
    let (_, inputs) = backend::agent::step_inputs::StepInputs::load(
        &state.db,
        held,
        &run.user_id,
        run.conversation_id,
        run.run_id,
        None,
        state.agent.chain.retrieves(),
    )
    .await?
    .context("the benchmark's run is its user's")?;
    Ok(inputs)
}

/// Prepares one step of `run` and stores the summary it wrote, if it wrote one, in a
/// transaction as the run's user (what the run loop does with a step's outputs).
/// Returns whether there was one.
async fn store_first_summary(
    state: &backend::AppState,
    run: &backend::agent::model::RunContext,
) -> Result<bool> {
    let inputs = load_step(state, &state.agent.history, run).await?;
    let outputs = backend::agent::step_inputs::StepOutputs::default();
    backend::agent::prepare_request(&state.runner(), run, &inputs, &outputs).await?;
    let Some(summary) = outputs.take_summary() else {
        return Ok(false);
    };
    let mut tx = backend::db::begin_as_user(&state.db, &run.user_id).await?;
    backend::db::summaries::insert(
        &mut tx,
        run.conversation_id,
        &run.user_id,
        summary.through_seq,
        &summary.text,
        &summary.kept_out,
    )
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// Transactions per model step, counted in process: runs of one step each (the offline
/// model answers without a tool), less the transaction that starts each run, with the
/// text-delta flushes of their own (one per 60 ms of streamed text; what is left when
/// the model finishes goes with the answer) counted apart.
async fn step_transactions(state: &backend::AppState, url: &str) -> Result<()> {
    println!("\n## Database transactions per model step (no tool call)\n");
    let user = "agent-transactions";
    let conversation = uuid::Uuid::new_v4();
    let mut watcher = sqlx::PgConnection::connect(url).await?;
    sqlx::query("insert into conversations (id, user_id, title) values ($1, $2, 'steps')")
        .bind(conversation)
        .bind(user)
        .execute(&mut watcher)
        .await?;
    let runs = 20u64;
    let runner = state.runner();
    let before = backend::db::user_transactions_begun();
    for n in 0..runs {
        let text = format!("hello number {n}");
        let started = backend::agent::start_run(
            &runner,
            user,
            conversation,
            vec![protocol::chat::ContentBlock::Text { text }],
            None,
        )
        .await?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status: String = sqlx::query_scalar("select status from agent_runs where id = $1")
                .bind(started.run.id)
                .fetch_one(&mut watcher)
                .await?;
            if status != "running" {
                break;
            }
            if Instant::now() > deadline {
                bail!("a benchmark run did not finish: {status}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    // The run's last transaction commits before its task lets go of the run.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let begun = backend::db::user_transactions_begun() - before;
    // A flush of its own is a text delta not written in the answer's transaction (whose
    // events share one `now()`).
    let flushes: i64 = sqlx::query_scalar(
        "select count(*) from run_events delta
         where delta.conversation_id = $1 and delta.kind = 'text_delta'
           and not exists (select 1 from run_events answer
                           where answer.run_id = delta.run_id and answer.kind = 'message_added'
                             and answer.created_at = delta.created_at)",
    )
    .bind(conversation)
    .fetch_one(&mut watcher)
    .await?;
    let steps = runs as f64;
    let per_step = (begun - runs) as f64 / steps;
    let flush_per_step = flushes as f64 / steps;
    println!(
        "| transactions per step | of which text-delta flushes of their own | besides those |"
    );
    println!("| ---: | ---: | ---: |");
    println!(
        "| {per_step:.1} | {flush_per_step:.1} | {:.1} |",
        per_step - flush_per_step
    );
    Ok(())
}
