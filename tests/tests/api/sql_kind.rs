//! The sql kind as a boundary: each database its own login, one parsed read-only
//! statement, capped bytes, nothing that outlives the call. Every query here is one a
//! hostile model could send; the assertions say it gets nothing.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{ServerOptions, TempDir, TestServer, demo_reader_url, write_temp_file};

const TOOLS: &str = r#"
[[tools]]
name = "query_database"
description = "Read-only SQL"
kind = "sql"
parameters = { type = "object", properties = { query = { type = "string" } }, required = ["query"] }
[tools.requires_user_input]
reason = "Which database should I query?"
save_for = "call"
fields = [ { name = "database", type = "select", options = ["production", "staging", "development"] } ]
[tools.sql]
database_field = "database"
max_rows = 10
databases.production = { url = "{env.TOOLGATE_DEMO_SQL_PRODUCTION_URL}", schema = "demo_production" }
databases.staging = { url = "{env.TOOLGATE_DEMO_SQL_STAGING_URL}", schema = "demo_staging" }
databases.development = { url = "{env.TOOLGATE_DEMO_SQL_DEVELOPMENT_URL}", schema = "demo_development" }

[[tools]]
name = "query_as_owner"
description = "Read-only SQL as the server's own login"
kind = "sql"
parameters = { type = "object", properties = { query = { type = "string" } }, required = ["query"] }
[tools.requires_user_input]
reason = "Which database?"
save_for = "call"
fields = [ { name = "database", type = "select", options = ["owner"] } ]
[tools.sql]
database_field = "database"
databases.owner = { url = "{env.DATABASE_URL}", schema = "demo_production" }
"#;

const TOO_LARGE: &str = "the result is larger than 1048576 bytes; select fewer columns or rows";

struct Fixture {
    server: TestServer,
    user: String,
    token: String,
    conversation: String,
    _tools: TempDir,
}

async fn start() -> Fixture {
    let (dir, path) = write_temp_file("tools.toml", TOOLS);
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_TOOLS", &path.to_string_lossy())
            .env("TOOLGATE_DEMO", "1"),
    )
    .await;
    let (user, token) = server.new_user("sql").await;
    let conversation = server.new_conversation(&token).await;
    Fixture {
        server,
        user,
        token,
        conversation,
        _tools: dir,
    }
}

impl Fixture {
    /// The model asks with a query; the user picks the database on the card.
    async fn run_on(&self, tool: &str, database: &str, query: &str) -> Value {
        let id = format!("call_{}", uuid::Uuid::new_v4().simple());
        let (_, asked) = self
            .server
            .send(
                "POST",
                "/api/tools/execute",
                Some(&self.token),
                Some(json!({
                    "conversation_id": self.conversation, "tool_name": tool,
                    "tool_call_id": id, "arguments": {"query": query},
                })),
            )
            .await;
        assert_eq!(asked["requires_user_input"], true, "{asked}");
        let (status, done) = self
            .server
            .action(
                &self.token,
                json!({"action": "submit_response", "tool_call_id": id,
                       "user_inputs": {"database": database}}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{done}");
        done["tool_result"].clone()
    }

    async fn run(&self, database: &str, query: &str) -> Value {
        self.run_on("query_database", database, query).await
    }

    /// A refused call: no rows, and the error the model is told.
    async fn refused(&self, database: &str, query: &str) -> String {
        let outcome = self.run(database, query).await;
        assert_eq!(outcome["success"], false, "{query}: {outcome}");
        assert!(outcome.get("result").is_none(), "{query}: {outcome}");
        outcome["error"].as_str().unwrap_or_default().to_owned()
    }

    async fn superuser_scalar(&self, sql: &str) -> i64 {
        let mut db = self.server.db().await;
        sqlx::query_scalar(sql)
            .fetch_one(&mut db)
            .await
            .expect("superuser query")
    }
}

#[tokio::test]
async fn a_normal_count_query_still_works_on_each_database() {
    let f = start().await;
    for (database, customers) in [("production", 5), ("staging", 3), ("development", 1)] {
        let outcome = f
            .run(database, "select count(*) as n from customers;")
            .await;
        assert_eq!(outcome["success"], true, "{outcome}");
        assert_eq!(outcome["result"]["rows"], json!([{"n": customers}]));
    }
    let outcome = f
        .run(
            "staging",
            "with big as (select * from orders where total > 100) \
             select count(*) as n from big",
        )
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
    let values = f.run("development", "values (1, 'a'), (2, 'b')").await;
    assert_eq!(
        values["result"]["rows"],
        json!([{"column1": 1, "column2": "a"}, {"column1": 2, "column2": "b"}])
    );
    let truncated = f
        .run("production", "select id from orders order by id")
        .await;
    assert_eq!(truncated["result"]["row_count"], 10);
    assert_eq!(truncated["result"]["truncated"], true);
}

#[tokio::test]
async fn development_cannot_read_production_or_staging() {
    let f = start().await;
    for query in [
        "select * from demo_production.customers",
        "select count(*) from demo_production.orders",
        "select name from demo_staging.customers",
        "select * from customers join demo_production.customers p using (id)",
    ] {
        let error = f.refused("development", query).await;
        assert!(error.contains("permission denied"), "{query}: {error}");
    }
    // The login of production reads production, and only through its own database.
    let own = f
        .run(
            "production",
            "select count(*) as n from demo_production.customers",
        )
        .await;
    assert_eq!(own["result"]["rows"], json!([{"n": 5}]), "{own}");
    let error = f
        .refused("production", "select * from demo_development.customers")
        .await;
    assert!(error.contains("permission denied"), "{error}");
}

#[tokio::test]
async fn a_fifty_megabyte_value_is_refused_without_being_loaded() {
    let f = start().await;
    let before = peak_memory_kb(&f.server);
    let error = f
        .refused("development", "select repeat('x', 50000000) as x")
        .await;
    assert_eq!(error, TOO_LARGE);
    // Many rows that each fit, adding up past the cap.
    let error = f
        .refused(
            "development",
            "select repeat('x', 400000) as x from generate_series(1, 3)",
        )
        .await;
    assert_eq!(error, TOO_LARGE);
    let after = peak_memory_kb(&f.server);
    if let (Some(before), Some(after)) = (before, after) {
        assert!(
            after.saturating_sub(before) < 32 * 1024,
            "the server's peak memory grew from {before} kB to {after} kB"
        );
    }
    // Under the cap is fine, and the connection still serves.
    let fits = f
        .run(
            "development",
            "select repeat('x', 1000) as x from generate_series(1, 3)",
        )
        .await;
    assert_eq!(fits["result"]["row_count"], 3, "{fits}");
}

/// The peak resident memory of the server process (Linux), in kB.
fn peak_memory_kb(server: &TestServer) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid()?)).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test]
async fn an_advisory_lock_does_not_outlive_the_call() {
    let f = start().await;
    for query in [
        // The key demo start-up waits on.
        "select pg_advisory_lock(7261132201)",
        "select pg_catalog.pg_advisory_lock(42)",
        "select \"pg_try_advisory_lock\"(43)",
        "select * from pg_advisory_lock(44)",
        "with l as (select pg_advisory_lock(45)) select * from l",
        "select id from customers where pg_try_advisory_lock(46)",
        "select set_config('statement_timeout', '0', false)",
        "select pg_sleep(30)",
    ] {
        let error = f.refused("staging", query).await;
        assert!(error.contains("is not allowed"), "{query}: {error}");
    }
    // A quote smuggled in an escape stays inside its string.
    let smuggled = f
        .run(
            "staging",
            "select U&'\\0027) as x, pg_advisory_lock(47) as y --' as s",
        )
        .await;
    assert_eq!(
        smuggled["result"]["rows"],
        json!([{"s": "') as x, pg_advisory_lock(47) as y --"}]),
        "{smuggled}"
    );
    let held = f
        .superuser_scalar(
            "select count(*) from pg_locks where locktype = 'advisory' \
             and database = (select oid from pg_database where datname = current_database())",
        )
        .await;
    assert_eq!(held, 0, "advisory locks are still held after the calls");
}

#[tokio::test]
async fn only_one_read_only_statement_gets_past_the_parser() {
    let f = start().await;
    for (query, expected) in [
        ("select 1; select 2", "2 statements"),
        ("select 1 as n; delete from customers", "2 statements"),
        (
            "with d as (delete from customers returning *) select count(*) from d",
            "a WITH clause may hold queries only, not DELETE",
        ),
        (
            "with i as (insert into customers values (99, 'x', 'US', '2020-01-01') returning id) select * from i",
            "a WITH clause may hold queries only, not INSERT",
        ),
        // Breaking out of a wrapper: valid only inside `select * from (…)`.
        ("select 1 as n) as a, (select 2 as m", "could not be parsed"),
        (
            "select id from orders) as q limit 1000) as limited --",
            "could not be parsed",
        ),
        ("select * from customers for update", "FOR UPDATE"),
        // An operator that runs into `--`: Postgres would read the next line as SQL.
        (
            "select 'a' ~-- '\nversion() as hidden, /*' as a, 2 ~*/ 3 as b",
            "runs into a comment",
        ),
        ("select * into stolen from customers", "INTO"),
        ("set role toolgate_demo_production", "not SET"),
        ("delete from customers", "not DELETE"),
    ] {
        let error = f.refused("staging", query).await;
        assert!(error.contains(expected), "{query}: {error}");
    }
    let still = f
        .superuser_scalar("select count(*) from demo_staging.customers")
        .await;
    assert_eq!(still, 3);
}

#[tokio::test]
async fn each_call_has_its_own_application_name_without_the_user() {
    let f = start().await;
    let mut names = Vec::new();
    for _ in 0..2 {
        let outcome = f
            .run(
                "staging",
                "select current_setting('application_name') as app",
            )
            .await;
        names.push(
            outcome["result"]["rows"][0]["app"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    for name in &names {
        assert!(name.starts_with("toolgate-sql-"), "{name}");
        assert_eq!(name.len(), "toolgate-sql-".len() + 8, "{name}");
        assert!(!name.contains(&f.user), "{name}");
    }
    assert_ne!(names[0], names[1]);
}

#[tokio::test]
async fn running_sql_text_is_hidden_from_other_sessions() {
    let f = start().await;
    let marker = format!("secret-{}", uuid::Uuid::new_v4().simple());
    // One session of another database's login, one of the same login as the caller.
    let mut sessions = Vec::new();
    for database in ["production", "development"] {
        let url = demo_reader_url(&f.server.database_url, database);
        let mut conn = tests::db_connection_to(&url).await.expect("demo login");
        let sql = format!("select '{marker}' as m, pg_sleep(6)");
        sessions.push(tokio::spawn(async move {
            sqlx::query(&sql).execute(&mut conn).await.map(|_| ())
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The query searches for the marker without containing it.
    let reversed: String = marker.chars().rev().collect();
    let outcome = f
        .run(
            "development",
            &format!(
                "select count(*) filter (where position(reverse('{reversed}') in coalesce(query, '')) > 0) as seen, \
                        count(*) filter (where usename in ('toolgate_demo_production', 'toolgate_demo_development')) as sessions \
                 from pg_stat_activity where pid <> pg_backend_pid()"
            ),
        )
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
    assert!(
        outcome["result"]["rows"][0]["sessions"]
            .as_i64()
            .is_some_and(|n| n >= 2),
        "{outcome}"
    );
    assert_eq!(outcome["result"]["rows"][0]["seen"], 0, "{outcome}");
    for session in sessions {
        session.await.expect("join").expect("the sleeping query");
    }
}

/// Which database a query runs on is the user's choice: a tools file that lets the
/// model fill it does not load.
#[tokio::test]
async fn a_database_field_the_model_may_fill_stops_start_up() {
    let tools = TOOLS.replacen(
        r#"options = ["production", "staging", "development"] } ]"#,
        r#"options = ["production", "staging", "development"], model_may_fill = true } ]"#,
        1,
    );
    assert_ne!(tools, TOOLS, "the replacement must apply");
    let (_dir, path) = write_temp_file("tools.toml", &tools);
    let started = TestServer::try_start(
        ServerOptions::default()
            .env("TOOLGATE_TOOLS", &path.to_string_lossy())
            .env("TOOLGATE_DEMO", "1"),
    )
    .await;
    let err = format!("{:#}", started.err().expect("refused"));
    assert!(
        err.contains("sql.database_field `database`") && err.contains("model_may_fill"),
        "{err}"
    );
}

/// A server whose staging database is read through the login `login` (password
/// `password`), made if missing and given `powers` beside reading `demo_staging`.
async fn with_staging_login(login: &str, password: &str, powers: &[&str], user: &str) -> Fixture {
    let database_url = tests::fresh_database().await.expect("a database");
    let url = tests::demo_reader_url(&database_url, "staging").replace(
        "toolgate_demo_staging:demo-reader",
        &format!("{login}:{password}"),
    );
    let tools = TOOLS.replacen(
        "databases.staging = { url = \"{env.TOOLGATE_DEMO_SQL_STAGING_URL}\"",
        "databases.staging = { url = \"{env.STAGING_LOGIN_URL}\"",
        1,
    );
    assert_ne!(tools, TOOLS, "the replacement must apply");
    let (_dir, path) = write_temp_file("tools.toml", &tools);
    let server = TestServer::start_with(ServerOptions {
        database_url: Some(database_url),
        ..ServerOptions::default()
            .env("TOOLGATE_TOOLS", &path.to_string_lossy())
            .env("TOOLGATE_DEMO", "1")
            .env("STAGING_LOGIN_URL", &url)
    })
    .await;
    let mut db = server.db().await;
    let made = format!(
        "do $$ begin
           if not exists (select from pg_roles where rolname = '{login}') then
             create role {login} login password '{password}';
           end if;
         end $$"
    );
    let reads = [
        format!("grant usage on schema demo_staging to {login}"),
        format!("grant select on all tables in schema demo_staging to {login}"),
    ];
    for statement in std::iter::once(made.as_str())
        .chain(powers.iter().copied())
        .chain(reads.iter().map(String::as_str))
    {
        sqlx::query(statement)
            .execute(&mut db)
            .await
            .expect("set up the login");
    }
    let (user, token) = server.new_user(user).await;
    let conversation = server.new_conversation(&token).await;
    Fixture {
        server,
        user,
        token,
        conversation,
        _tools: _dir,
    }
}

/// A login that may signal other sessions (or read the server's files, or every table)
/// reaches beyond its database: refused, as a superuser is.
#[tokio::test]
async fn a_login_with_powers_beyond_its_database_is_refused() {
    let f = with_staging_login(
        "toolgate_test_signaller",
        "signaller",
        &[
            "alter role toolgate_test_signaller set track_activities = off",
            "grant pg_signal_backend to toolgate_test_signaller",
        ],
        "sql-signaller",
    )
    .await;
    let outcome = f
        .run("staging", "select count(*) as n from customers")
        .await;
    assert_eq!(outcome["success"], false, "{outcome}");
    assert!(
        outcome["error"]
            .as_str()
            .is_some_and(|e| e.contains("pg_signal_backend")),
        "{outcome}"
    );
    // The demo's development login, with no such power, reads as before.
    let outcome = f
        .run("development", "select count(*) as n from customers")
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
}

/// Every user of a sql tool shares its login, and Postgres shows a session's SQL to
/// other sessions of the same login: one user could read another's queries, literal
/// values and all, in `pg_stat_activity`. A login whose sessions record their SQL is
/// refused, saying what to change.
#[tokio::test]
async fn a_login_whose_sessions_show_their_sql_to_each_other_is_refused() {
    let f = with_staging_login(
        "toolgate_test_tracked",
        "tracked",
        &["alter role toolgate_test_tracked reset track_activities"],
        "sql-tracked",
    )
    .await;
    let outcome = f
        .run(
            "staging",
            "select query from pg_stat_activity where usename = current_user",
        )
        .await;
    assert_eq!(outcome["success"], false, "{outcome}");
    assert!(
        outcome["error"]
            .as_str()
            .is_some_and(|e| e.contains("run `ALTER ROLE <login> SET track_activities = off`")),
        "{outcome}"
    );
}

#[tokio::test]
async fn a_superuser_login_is_refused() {
    let f = start().await;
    let outcome = f
        .run_on(
            "query_as_owner",
            "owner",
            "select count(*) as n from customers",
        )
        .await;
    assert_eq!(outcome["success"], false, "{outcome}");
    assert!(
        outcome["error"]
            .as_str()
            .is_some_and(|e| e.contains("superuser")),
        "{outcome}"
    );
}
