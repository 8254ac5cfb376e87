//! `bench`: the API's hot paths against Postgres's own limit for the same SQL, measured
//! in one run on this machine, plus scale, agent-step and memory figures. Every figure
//! is read against a baseline from the same run; nothing here asserts a time.
//!
//! Run through `scripts/bench.sh` (it builds the release server and checks pgbench).
//! `--quick` shortens every load for a smoke run.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use jsonwebtoken::Algorithm;
use serde_json::{Value, json};
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

#[derive(Default, Clone)]
struct Figures {
    requests: usize,
    errors: usize,
    seconds: f64,
    latencies_ms: Vec<f64>,
}

impl Figures {
    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds.max(1e-9)
    }

    fn percentile(&self, p: f64) -> f64 {
        if self.latencies_ms.is_empty() {
            return 0.0;
        }
        let mut sorted = self.latencies_ms.clone();
        sorted.sort_by(f64::total_cmp);
        let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[index.min(sorted.len() - 1)]
    }
}

/// What one request of a scenario sends.
type MakeRequest = Arc<dyn Fn(usize) -> Option<(String, String, Value)> + Send + Sync>;

struct Bench {
    server: TestServer,
    tokens: Vec<String>,
    duration: Duration,
    client: reqwest::Client,
}

impl Bench {
    /// Runs `concurrency` workers for the configured duration; `make` gives each
    /// request's (path, token, body), or `None` when its supply ran out.
    async fn load(&self, concurrency: usize, make: MakeRequest, expect: u16) -> Figures {
        let deadline = Instant::now() + self.duration;
        let started = Instant::now();
        let counter = Arc::new(AtomicUsize::new(0));
        let workers = (0..concurrency).map(|_| {
            let (client, make, counter) = (self.client.clone(), make.clone(), counter.clone());
            let base = self.server.base.clone();
            tokio::spawn(async move {
                let mut figures = Figures::default();
                while Instant::now() < deadline {
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let Some((path, token, body)) = make(n) else {
                        break;
                    };
                    let sent = Instant::now();
                    let response = client
                        .post(format!("{base}{path}"))
                        .bearer_auth(&token)
                        .json(&body)
                        .send()
                        .await;
                    let ok = match response {
                        Ok(response) => {
                            let status = response.status().as_u16();
                            let _ = response.bytes().await;
                            status == expect
                        }
                        Err(_) => false,
                    };
                    figures
                        .latencies_ms
                        .push(sent.elapsed().as_secs_f64() * 1000.0);
                    figures.requests += 1;
                    if !ok {
                        figures.errors += 1;
                    }
                }
                figures
            })
        });
        let mut total = Figures::default();
        for worker in futures::future::join_all(workers).await {
            let figures = worker.unwrap_or_default();
            total.requests += figures.requests;
            total.errors += figures.errors;
            total.latencies_ms.extend(figures.latencies_ms);
        }
        total.seconds = started.elapsed().as_secs_f64();
        total
    }
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
         insert into saved_tool_inputs (user_id, conversation_id, name, value)
           select 'bench-u' || g, ('00000000-0000-0000-0000-' || lpad(g::text, 12, '0'))::uuid, 'region', '\"eu\"'
           from generate_series(0, {all}) g on conflict do nothing;
         insert into saved_tool_inputs (user_id, conversation_id, name, value)
           select 'bench-u' || g, null, 'team', '\"ops\"'
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
const CONVERSATION: &str = "('00000000-0000-0000-0000-' || lpad(:u::text, 12, '0'))::uuid";

/// The SQL each hot path runs, in the same transaction shape.
fn baseline_scripts() -> BTreeMap<&'static str, String> {
    let columns = "id, user_id, conversation_id, run_id, tool_name, tool_call_id, tool_args, reason, required_fields, user_inputs, save_for, status, created_at, completed_at, expires_at, origin, original_user_request, tool_result";
    BTreeMap::from([
        (
            "get_pending",
            format!(
                "{IDENTITY}select {columns} from tool_user_input_requests where conversation_id = {CONVERSATION} and status = 'pending' and expires_at > now() order by created_at, id;\nCOMMIT;\n"
            ),
        ),
        (
            "get_session_values",
            format!(
                "{IDENTITY}select conversation_id, name, value, is_secret, updated_at from saved_tool_inputs where (conversation_id = {CONVERSATION} or conversation_id is null) and exists (select 1 from conversations where id = {CONVERSATION}) order by conversation_id nulls last, name;\nCOMMIT;\n"
            ),
        ),
        (
            "create_request",
            format!(
                "{WRITER_IDENTITY}insert into tool_user_input_requests (id, user_id, conversation_id, run_id, tool_name, tool_call_id, tool_args, reason, required_fields, save_for, expires_at, origin, original_user_request) select gen_random_uuid(), 'bench-u' || :u, {CONVERSATION}, null, 'bench_ask', 'pgb-' || md5(random()::text), '{{}}', 'A one-time code', '[{{\"name\": \"code\"}}]', 'call', now() + interval '1 day', 'api', null where exists (select 1 from conversations where id = {CONVERSATION}) returning {columns};\nCOMMIT;\n"
            ),
        ),
        (
            "submit_response",
            format!(
                "\\set n random(0, 199999)\n\\set u 1000 + :n % 1000\nBEGIN;\nselect set_config('role', 'toolgate_app', true), set_config('toolgate.user_id', 'bench-u' || :u, true);\nselect {columns} from tool_user_input_requests where tool_call_id = 'bench-pgb-' || :n for update;\nupdate tool_user_input_requests set status = 'completed', user_inputs = '{{\"code\": \"1234\"}}', completed_at = now() where tool_call_id = 'bench-pgb-' || :n and status = 'pending' returning {columns};\nwith stored as (insert into run_events (conversation_id, user_id, run_id, kind, data) values ({CONVERSATION}, 'bench-u' || :u, null, 'input_resolved', '{{\"type\": \"input_resolved\"}}') returning id) select id from stored, (select pg_notify('toolgate_events', {CONVERSATION}::text)) as notified;\nCOMMIT;\n"
            ),
        ),
    ])
}

#[tokio::main]
async fn main() -> Result<()> {
    backend::install_tls_provider();
    let quick = std::env::args().any(|a| a == "--quick");
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

    let (_tools_dir, tools_path) = write_temp_file("bench-tools.toml", BENCH_TOOLS);
    let server = TestServer::try_start(
        ServerOptions::default()
            .env("TOOLGATE_LOG", "warn")
            .env("TOOLGATE_TOOLS", &tools_path.to_string_lossy())
            .env("TOOLGATE_DB_MAX_CONNECTIONS", "32"),
    )
    .await?;
    let pid = server.pid().context("server pid")?;
    let url = server.database_url.clone();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let idle_rss = rss_kib(pid, "VmRSS:");
    seed(&url, 2).await?;
    seed_submittable(&url, "bench-pgb-", 200_000).await?;

    let tokens: Vec<String> = (0..USERS + WRITERS)
        .map(|u| {
            sign_token(
                &json!({"sub": user_name(u), "exp": now() + 3600}),
                JWT_SECRET,
                Algorithm::HS256,
            )
        })
        .collect();
    let bench = Bench {
        server,
        tokens,
        duration: Duration::from_secs(seconds),
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(128)
            .build()?,
    };

    // Baseline: pgbench running the same SQL.
    let scripts_dir = tests::TempDir::new("toolgate-bench-sql");
    let mut baseline: BTreeMap<(&str, usize), f64> = BTreeMap::new();
    for (name, sql) in baseline_scripts() {
        let path = scripts_dir.0.join(format!("{name}.sql"));
        std::fs::write(&path, sql)?;
        for clients in BASELINE_CLIENTS {
            let tps = pgbench(&url, &path, clients, seconds)?;
            baseline.insert((name, clients), tps);
        }
    }

    // HTTP scenarios.
    let tokens = Arc::new(bench.tokens.clone());
    let pick = |n: usize| n.wrapping_mul(2_654_435_761) % USERS;
    let pick_writer = move |n: usize| USERS + pick(n);
    let mut rows = Vec::new();
    let mut submit_round = 0;
    let scenarios: Vec<(&str, u16)> = vec![
        ("create_request", 201),
        ("submit_response", 200),
        ("get_pending", 200),
        ("get_session_values", 200),
        ("execute (runs, saved values)", 200),
        ("execute (requires_user_input)", 200),
    ];
    for (name, expect) in &scenarios {
        for concurrency in CONCURRENCY {
            let tokens = tokens.clone();
            let make: MakeRequest = match *name {
                "create_request" => Arc::new(move |n| {
                    let u = pick_writer(n);
                    Some((
                        "/api/tool-user-input".into(),
                        tokens[u].clone(),
                        json!({
                        "action": "create_request", "conversation_id": conversation_of(u), "tool_name": "bench_ask",
                        "tool_call_id": format!("http-create-{concurrency}-{n}"), "reason": "A one-time code",
                        "fields": [{"name": "code"}]}),
                    ))
                }),
                "submit_response" => {
                    submit_round += 1;
                    let prefix = format!("bench-http-{submit_round}-");
                    seed_submittable(&url, &prefix, 100_000).await?;
                    Arc::new(move |n| {
                        (n < 100_000).then(|| {
                            let u = USERS + n % WRITERS;
                            (
                                "/api/tool-user-input".into(),
                                tokens[u].clone(),
                                json!({
                                "action": "submit_response", "tool_call_id": format!("{prefix}{n}"),
                                "user_inputs": {"code": "1234"}}),
                            )
                        })
                    })
                }
                "get_pending" | "get_session_values" => {
                    let action = name.to_string();
                    Arc::new(move |n| {
                        let u = pick(n);
                        Some((
                            "/api/tool-user-input".into(),
                            tokens[u].clone(),
                            json!({"action": action, "conversation_id": conversation_of(u)}),
                        ))
                    })
                }
                "execute (runs, saved values)" => Arc::new(move |n| {
                    let u = pick(n);
                    Some((
                        "/api/tools/execute".into(),
                        tokens[u].clone(),
                        json!({
                        "conversation_id": conversation_of(u), "tool_name": "bench_calc",
                        "tool_call_id": format!("http-calc-{concurrency}-{n}"), "arguments": {"expression": "6*7"}}),
                    ))
                }),
                _ => Arc::new(move |n| {
                    let u = pick_writer(n);
                    Some((
                        "/api/tools/execute".into(),
                        tokens[u].clone(),
                        json!({
                        "conversation_id": conversation_of(u), "tool_name": "bench_ask",
                        "tool_call_id": format!("http-ask-{concurrency}-{n}"), "arguments": {"expression": "1"}}),
                    ))
                }),
            };
            let figures = bench.load(concurrency, make, *expect).await;
            rows.push((name.to_string(), concurrency, figures));
        }
    }
    let peak_rss = rss_kib(pid, "VmHWM:");

    println!("\n## HTTP API (JWT + RLS), against pgbench running the same SQL\n");
    println!(
        "| path | clients | req/s | p50 ms | p99 ms | max ms | errors | pgbench tps | ratio |"
    );
    println!("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (name, clients, figures) in &rows {
        let base = baseline.get(&(name.as_str(), *clients)).copied();
        let (base_text, ratio) = match base {
            Some(tps) => (format!("{tps:.0}"), format!("{:.2}", figures.rate() / tps)),
            None => ("—".into(), "—".into()),
        };
        println!(
            "| {name} | {clients} | {:.0} | {:.2} | {:.2} | {:.2} | {} | {base_text} | {ratio} |",
            figures.rate(),
            figures.percentile(0.5),
            figures.percentile(0.99),
            figures.percentile(1.0),
            figures.errors
        );
    }

    // Scale: the same reads and writes with 1,000,000 rows across 10,000 users.
    let small_pending = rows
        .iter()
        .find(|(n, c, _)| n == "get_pending" && *c == 32)
        .map(|(_, _, f)| f.percentile(0.99));
    let small_submit = rows
        .iter()
        .find(|(n, c, _)| n == "submit_response" && *c == 32)
        .map(|(_, _, f)| f.percentile(0.99));
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    let rows_before: i64 = sqlx::query_scalar("select count(*) from tool_user_input_requests")
        .fetch_one(&mut conn)
        .await?;
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
    let rows_now: i64 = sqlx::query_scalar("select count(*) from tool_user_input_requests")
        .fetch_one(&mut conn)
        .await?;
    println!(
        "\n## Scale: p99 at 32 clients, before and after growing the table (seeded in {:.0} s)\n",
        started.elapsed().as_secs_f64()
    );
    let tokens_for_scale = tokens.clone();
    let pending_large = bench
        .load(
            32,
            Arc::new(move |n| {
                let u = pick(n);
                Some((
                    "/api/tool-user-input".into(),
                    tokens_for_scale[u].clone(),
                    json!({"action": "get_pending", "conversation_id": conversation_of(u)}),
                ))
            }),
            200,
        )
        .await;
    seed_submittable(&url, "bench-scale-", 100_000).await?;
    let tokens_for_scale = tokens.clone();
    let submit_large = bench
        .load(32, Arc::new(move |n| {
            (n < 100_000).then(|| ("/api/tool-user-input".into(), tokens_for_scale[USERS + n % WRITERS].clone(), json!({
                "action": "submit_response", "tool_call_id": format!("bench-scale-{n}"), "user_inputs": {"code": "1"}})))
        }), 200)
        .await;
    println!("| path | p99 with {rows_before} rows | p99 with {rows_now} rows | ratio |");
    println!("| --- | ---: | ---: | ---: |");
    for (name, small, large) in [
        ("get_pending", small_pending, &pending_large),
        ("submit_response", small_submit, &submit_large),
    ] {
        let small = small.unwrap_or(0.0);
        println!(
            "| {name} | {small:.2} ms | {:.2} ms | {:.2} |",
            large.percentile(0.99),
            large.percentile(0.99) / small.max(1e-9)
        );
    }

    // Agent step without the model, in process.
    println!(
        "\n## Agent step without the model (middleware chain, context pipeline with token counting, tool list)\n"
    );
    println!("| messages | µs per step |");
    println!("| ---: | ---: |");
    let config = backend::Config::from_lookup(|name| match name {
        "DATABASE_URL" => Some(url.clone()),
        "TOOLGATE_JWT_SECRET" => Some(JWT_SECRET.to_owned()),
        "TOOLGATE_SECRET_KEY" => Some(tests::SECRET_KEY.to_owned()),
        "TOOLGATE_TOOLS" => Some(tools_path.to_string_lossy().into_owned()),
        _ => None,
    })?;
    let pool = backend::db::connect(&config).await?;
    let registry =
        backend::tools::registry::ToolRegistry::load(config.tools_file.as_deref(), None)?;
    let agent = backend::agent::Agent::new(&config)?;
    let state = backend::AppState::new(pool, config, registry, agent);
    for count in [10usize, 100, 1000] {
        let conversation = uuid::Uuid::new_v4();
        let user = format!("agent-u{count}");
        sqlx::query("insert into conversations (id, user_id, title) values ($1, $2, 'agent')")
            .bind(conversation)
            .bind(&user)
            .execute(&mut conn)
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
        .execute(&mut conn)
        .await?;
        let run = backend::agent::model::RunContext {
            user_id: user.clone(),
            conversation_id: conversation,
            run_id: uuid::Uuid::new_v4(),
            step: 0,
            original_user_request: "How did the quarterly report for eu look?".into(),
        };
        let iterations = match count {
            10 => 200,
            100 => 100,
            _ => 20,
        };
        let started = Instant::now();
        for _ in 0..iterations {
            let mut tx = backend::db::begin_as_user(&state.db, &user).await?;
            let stored = backend::db::messages::list(&mut tx, conversation).await?;
            tx.commit().await?;
            let request = backend::agent::prepare_request(&state, &run, &stored).await?;
            std::hint::black_box(request);
        }
        let per_step = started.elapsed().as_secs_f64() * 1e6 / iterations as f64;
        println!("| {count} | {per_step:.0} |");
    }

    println!("\n## Memory (server process)\n");
    println!("| idle RSS | peak RSS under load (up to 64 clients) |");
    println!("| ---: | ---: |");
    println!(
        "| {:.1} MiB | {:.1} MiB |",
        idle_rss as f64 / 1024.0,
        peak_rss as f64 / 1024.0
    );

    println!("\n## Web chat bundle\n");
    let wasm = tests::workspace_root().join("frontend/dist/pkg/frontend_bg.wasm");
    match std::fs::read(&wasm) {
        Ok(bytes) => {
            let gzipped = Command::new("gzip")
                .args(["-9", "-c"])
                .arg(&wasm)
                .output()
                .map(|o| o.stdout.len())
                .unwrap_or(0);
            println!("| wasm raw | wasm gzip -9 (as served) |");
            println!("| ---: | ---: |");
            println!(
                "| {:.0} KiB | {:.0} KiB |",
                bytes.len() as f64 / 1024.0,
                gzipped as f64 / 1024.0
            );
        }
        Err(_) => println!(
            "(no bundle at {}: build it with scripts/run.sh or scripts/test.sh first)",
            wasm.display()
        ),
    }
    Ok(())
}
