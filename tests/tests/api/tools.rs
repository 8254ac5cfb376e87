//! The universal tool executor over HTTP: the seed's flow against a mock third-party
//! API, memory of answers, secrets, the sql kind, and start-up checks.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sqlx::Row;
use tests::{MockHttp, ServerOptions, TempDir, TestServer, write_temp_file};

const TOOLS: &str = r#"
[[tools]]
name = "quickbooks_profit_and_loss"
description = "Get the QuickBooks Profit and Loss report"
kind = "http"
parameters = { type = "object", properties = { start_date = { type = "string" }, end_date = { type = "string" } }, required = ["start_date", "end_date"] }
[tools.requires_user_input]
reason = "QuickBooks API requests require your Company ID (Realm ID)"
save_for_session = true
fields = [ { name = "quickbooks_realm_id", label = "QuickBooks Company ID", type = "text", validation = "^[0-9]{10,20}$" } ]
[tools.http]
allow_private_networks = true
url = "{env.MOCK_BASE}/v3/company/{quickbooks_realm_id}/reports/ProfitAndLoss?start_date={start_date}&end_date={end_date}"
headers = { Authorization = "Bearer {env.MOCK_TOKEN}" }

[[tools]]
name = "per_call"
description = "Needs a code every time"
kind = "http"
[tools.requires_user_input]
reason = "A one-time code"
save_for = "call"
fields = [ { name = "code", type = "text" } ]
[tools.http]
allow_private_networks = true
url = "{env.MOCK_BASE}/code/{code}"

[[tools]]
name = "with_api_key"
description = "Calls an API with the user's key"
kind = "http"
requires_approval = false
parameters = { type = "object", properties = { item = { type = "string" } } }
[tools.requires_user_input]
reason = "Your API key"
save_for = "user"
fields = [ { name = "api_key", label = "API key", type = "secret" } ]
[tools.http]
allow_private_networks = true
method = "POST"
url = "{env.MOCK_BASE}/items/{item}"
headers = { "X-Api-Key" = "{api_key}" }
body = { item = "{item}", asked = "{context.original_user_request}", user = "{context.user_id}", conversation = "{context.conversation_id}" }

[[tools]]
name = "switched_off"
description = "Disabled on purpose"
kind = "http"
enabled = false
[tools.http]
allow_private_networks = true
url = "{env.MOCK_BASE}/off"

[[tools]]
name = "unconfigured"
description = "Needs an environment variable nobody set"
kind = "http"
[tools.http]
allow_private_networks = true
url = "{env.TOOLGATE_TEST_NEVER_SET}/x"

[[tools]]
name = "query_database"
description = "Read-only SQL"
kind = "sql"
parameters = { type = "object", properties = { query = { type = "string" } }, required = ["query"] }
[tools.requires_user_input]
reason = "Which database should I query?"
save_for = "call"
[[tools.requires_user_input.fields]]
name = "database"
type = "select"
options = ["production", "staging", "development"]
[[tools.requires_user_input.fields]]
name = "production_reason"
type = "textarea"
visible_if = { field = "database", equals = "production" }
[tools.sql]
database_field = "database"
max_rows = 3
databases.production = { url = "{env.TOOLGATE_DEMO_SQL_PRODUCTION_URL}", schema = "demo_production" }
databases.staging = { url = "{env.TOOLGATE_DEMO_SQL_STAGING_URL}", schema = "demo_staging" }
databases.development = { url = "{env.TOOLGATE_DEMO_SQL_DEVELOPMENT_URL}", schema = "demo_development" }
"#;

const SECRET: &str = "sk-live-7f3a9c41d2";
const REALM: &str = "9130346988354456";

struct Fixture {
    server: TestServer,
    mock: MockHttp,
    _tools: TempDir,
}

async fn start() -> Fixture {
    let mock = MockHttp::start().await;
    let (dir, path) = write_temp_file("tools.toml", TOOLS);
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_TOOLS", &path.to_string_lossy())
            .env("MOCK_BASE", &mock.base)
            .env("MOCK_TOKEN", "mock-token")
            .env("TOOLGATE_DEMO", "1"),
    )
    .await;
    Fixture {
        server,
        mock,
        _tools: dir,
    }
}

fn call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

impl Fixture {
    async fn execute(
        &self,
        token: &str,
        conversation: &str,
        tool: &str,
        arguments: Value,
    ) -> (StatusCode, Value) {
        self.execute_as(token, conversation, tool, &call_id(), arguments)
            .await
    }

    async fn execute_as(
        &self,
        token: &str,
        conversation: &str,
        tool: &str,
        tool_call_id: &str,
        arguments: Value,
    ) -> (StatusCode, Value) {
        self.server
            .send(
                "POST",
                "/api/tools/execute",
                Some(token),
                Some(json!({
                    "conversation_id": conversation, "tool_name": tool, "tool_call_id": tool_call_id,
                    "arguments": arguments, "original_user_request": "Get my P&L report for Q1 2025"
                })),
            )
            .await
    }

    async fn submit(&self, token: &str, tool_call_id: &str, inputs: Value) -> (StatusCode, Value) {
        self.server
            .action(token, json!({"action": "submit_response", "tool_call_id": tool_call_id, "user_inputs": inputs}))
            .await
    }
}

fn q1() -> Value {
    json!({"start_date": "2025-01-01", "end_date": "2025-03-31"})
}

#[tokio::test]
async fn the_seed_flow_asks_then_retries_with_the_realm_id() {
    let f = start().await;
    let (_, token) = f.server.new_user("seed").await;
    let conversation = f.server.new_conversation(&token).await;
    let id = call_id();
    let (status, asked) = f
        .execute_as(
            &token,
            &conversation,
            "quickbooks_profit_and_loss",
            &id,
            q1(),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["success"], false);
    assert_eq!(asked["requires_user_input"], true);
    assert_eq!(
        asked["error"],
        "QuickBooks API requests require your Company ID (Realm ID)"
    );
    let request = &asked["user_input_request"];
    assert_eq!(request["tool_call_id"], id.as_str());
    assert_eq!(request["tool_name"], "quickbooks_profit_and_loss");
    assert_eq!(request["status"], "pending");
    assert_eq!(request["fields"][0]["name"], "quickbooks_realm_id");
    assert!(
        f.mock.received().is_empty(),
        "nothing is called before the user answers"
    );

    let (status, done) = f
        .submit(&token, &id, json!({"quickbooks_realm_id": REALM}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["request"]["status"], "completed");
    assert_eq!(done["tool_result"]["success"], true, "{done}");
    assert_eq!(done["tool_result"]["result"], json!({"ok": true}));
    let received = f.mock.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        received[0].path_and_query,
        format!(
            "/v3/company/{REALM}/reports/ProfitAndLoss?start_date=2025-01-01&end_date=2025-03-31"
        )
    );
    assert_eq!(received[0].headers["authorization"], "Bearer mock-token");

    // The same conversation does not ask again.
    let (_, again) = f
        .execute(&token, &conversation, "quickbooks_profit_and_loss", q1())
        .await;
    assert_eq!(again["success"], true, "{again}");
    assert_eq!(f.mock.received().len(), 2);

    // A new conversation asks again.
    let other = f.server.new_conversation(&token).await;
    let (_, fresh) = f
        .execute(&token, &other, "quickbooks_profit_and_loss", q1())
        .await;
    assert_eq!(fresh["requires_user_input"], true, "{fresh}");

    // Clearing the session's values makes it ask again.
    f.server
        .action(
            &token,
            json!({"action": "clear_session_values", "conversation_id": conversation}),
        )
        .await;
    let (_, cleared) = f
        .execute(&token, &conversation, "quickbooks_profit_and_loss", q1())
        .await;
    assert_eq!(cleared["requires_user_input"], true, "{cleared}");
}

#[tokio::test]
async fn a_value_in_the_arguments_never_fills_a_user_only_field() {
    let f = start().await;
    let (_, token) = f.server.new_user("args").await;
    let conversation = f.server.new_conversation(&token).await;
    for realm in [json!(REALM), json!("not-a-realm")] {
        let mut arguments = q1();
        arguments["quickbooks_realm_id"] = realm;
        let (_, asked) = f
            .execute(
                &token,
                &conversation,
                "quickbooks_profit_and_loss",
                arguments,
            )
            .await;
        assert_eq!(asked["requires_user_input"], true, "{asked}");
    }
    assert!(f.mock.received().is_empty());
}

#[tokio::test]
async fn arguments_that_break_the_schema_are_a_failure_with_reasons() {
    let f = start().await;
    let (_, token) = f.server.new_user("schema").await;
    let conversation = f.server.new_conversation(&token).await;
    let id = call_id();
    f.execute_as(
        &token,
        &conversation,
        "quickbooks_profit_and_loss",
        &id,
        q1(),
    )
    .await;
    f.submit(&token, &id, json!({"quickbooks_realm_id": REALM}))
        .await;
    let arguments = json!({"start_date": 20250101});
    let (status, outcome) = f
        .execute(
            &token,
            &conversation,
            "quickbooks_profit_and_loss",
            arguments,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(outcome["success"], false);
    let error = outcome["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("invalid arguments:"), "{outcome}");
    assert!(
        error.contains("end_date") && error.contains("start_date"),
        "{outcome}"
    );
}

#[tokio::test]
async fn call_scope_asks_every_time_and_user_scope_remembers_across_conversations() {
    let f = start().await;
    let (_, token) = f.server.new_user("scope").await;
    let conversation = f.server.new_conversation(&token).await;
    for _ in 0..2 {
        let id = call_id();
        let (_, asked) = f
            .execute_as(&token, &conversation, "per_call", &id, json!({}))
            .await;
        assert_eq!(asked["requires_user_input"], true, "{asked}");
        let (_, done) = f.submit(&token, &id, json!({"code": "1234"})).await;
        assert_eq!(done["tool_result"]["success"], true, "{done}");
    }

    let id = call_id();
    let (_, asked) = f
        .execute_as(
            &token,
            &conversation,
            "with_api_key",
            &id,
            json!({"item": "a"}),
        )
        .await;
    assert_eq!(asked["requires_user_input"], true);
    f.submit(&token, &id, json!({"api_key": SECRET})).await;
    let other = f.server.new_conversation(&token).await;
    let (_, remembered) = f
        .execute(&token, &other, "with_api_key", json!({"item": "b"}))
        .await;
    assert_eq!(remembered["success"], true, "{remembered}");
    // Another user is asked.
    let (_, stranger) = f.server.new_user("stranger").await;
    let theirs = f.server.new_conversation(&stranger).await;
    let (_, asked) = f
        .execute(&stranger, &theirs, "with_api_key", json!({"item": "c"}))
        .await;
    assert_eq!(asked["requires_user_input"], true);
}

#[tokio::test]
async fn a_secret_reaches_the_tool_and_nothing_else() {
    let f = start().await;
    let (_, token) = f.server.new_user("secret").await;
    let conversation = f.server.new_conversation(&token).await;
    let id = call_id();
    let mut responses = Vec::new();
    let (_, asked) = f
        .execute_as(
            &token,
            &conversation,
            "with_api_key",
            &id,
            json!({"item": "widget"}),
        )
        .await;
    responses.push(asked);
    let (status, done) = f.submit(&token, &id, json!({"api_key": SECRET})).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["tool_result"]["success"], true, "{done}");
    responses.push(done);
    let (_, again) = f
        .execute(
            &token,
            &conversation,
            "with_api_key",
            json!({"item": "gadget"}),
        )
        .await;
    assert_eq!(again["success"], true);
    responses.push(again);
    for action in ["get_session_values", "get_pending"] {
        let (_, body) = f
            .server
            .action(
                &token,
                json!({"action": action, "conversation_id": conversation}),
            )
            .await;
        responses.push(body);
    }
    // A secret passed by the agent as an argument is masked too.
    let (_, passed) = f
        .execute(
            &token,
            &conversation,
            "with_api_key",
            json!({"item": "x", "api_key": SECRET}),
        )
        .await;
    responses.push(passed);
    for body in &responses {
        assert!(
            !body.to_string().contains(SECRET),
            "secret in a response: {body}"
        );
    }

    let received = f.mock.received();
    assert_eq!(received.len(), 3);
    assert!(received.iter().all(|r| r.headers["x-api-key"] == SECRET));

    let mut db = f.server.db().await;
    let rows = sqlx::query("select arguments::text as arguments, coalesce(error, '') as error from tool_call_log where conversation_id = $1")
        .bind(uuid::Uuid::parse_str(&conversation).expect("uuid"))
        .fetch_all(&mut db)
        .await
        .expect("log rows");
    assert!(rows.len() >= 4, "every call is logged");
    for row in rows {
        let arguments: String = row.get("arguments");
        let error: String = row.get("error");
        assert!(
            !arguments.contains(SECRET) && !error.contains(SECRET),
            "secret in tool_call_log"
        );
    }
    assert!(
        !f.server.logs().contains(SECRET),
        "secret in the server's log"
    );
    assert!(
        f.server.logs().contains("tool call"),
        "the log does record tool calls"
    );
}

#[tokio::test]
async fn every_tool_receives_the_original_request_and_the_ids_also_on_retry() {
    let f = start().await;
    let (user, token) = f.server.new_user("context").await;
    let conversation = f.server.new_conversation(&token).await;
    let id = call_id();
    f.execute_as(
        &token,
        &conversation,
        "with_api_key",
        &id,
        json!({"item": "book"}),
    )
    .await;
    f.submit(&token, &id, json!({"api_key": SECRET})).await;
    let received = f.mock.received();
    assert_eq!(received.len(), 1);
    let body: Value = serde_json::from_str(&received[0].body).expect("json body");
    assert_eq!(
        body,
        json!({"item": "book", "asked": "Get my P&L report for Q1 2025", "user": user, "conversation": conversation})
    );
    assert_eq!(received[0].method, "POST");
    assert_eq!(received[0].path_and_query, "/items/book");
}

#[tokio::test]
async fn a_failing_retry_keeps_the_users_values() {
    let f = start().await;
    let (_, token) = f.server.new_user("fail").await;
    let conversation = f.server.new_conversation(&token).await;
    f.mock.answer_with(503, json!({"fault": "maintenance"}));
    let id = call_id();
    f.execute_as(
        &token,
        &conversation,
        "quickbooks_profit_and_loss",
        &id,
        q1(),
    )
    .await;
    let (status, done) = f
        .submit(&token, &id, json!({"quickbooks_realm_id": REALM}))
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["request"]["status"], "completed");
    assert_eq!(done["tool_result"]["success"], false);
    let error = done["tool_result"]["error"].as_str().unwrap_or_default();
    assert!(error.contains("503"), "{done}");
    let (_, saved) = f
        .server
        .action(
            &token,
            json!({"action": "get_session_values", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(saved["values"][0]["value"], REALM);
    // Once the service is back, the next call runs without asking.
    f.mock.answer_with(200, json!({"ok": true}));
    let (_, again) = f
        .execute(&token, &conversation, "quickbooks_profit_and_loss", q1())
        .await;
    assert_eq!(again["success"], true, "{again}");
}

#[tokio::test]
async fn disabled_unconfigured_and_unknown_tools() {
    let f = start().await;
    let (_, token) = f.server.new_user("off").await;
    let conversation = f.server.new_conversation(&token).await;
    let (status, off) = f
        .execute(&token, &conversation, "switched_off", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        off,
        json!({"success": false, "error": "the tool `switched_off` is disabled"})
    );
    let (_, unconfigured) = f
        .execute(&token, &conversation, "unconfigured", json!({}))
        .await;
    assert_eq!(unconfigured["success"], false);
    // Callers learn that it is not configured, not which setting is missing.
    assert_eq!(
        unconfigured["error"],
        "the tool `unconfigured` is not configured on this server"
    );
    let (_, list) = f.server.send("GET", "/api/tools", Some(&token), None).await;
    assert!(
        !list.to_string().contains("TOOLGATE_TEST_NEVER_SET"),
        "{list}"
    );
    assert!(
        f.server.logs().contains("TOOLGATE_TEST_NEVER_SET"),
        "the operator's log names it"
    );
    let (status, body) = f
        .execute(&token, &conversation, "no_such_tool", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(f.mock.received().is_empty());

    let (_, stranger) = f.server.new_user("stranger").await;
    let (status, _) = f
        .execute(&stranger, &conversation, "switched_off", json!({}))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "someone else's conversation");
}

#[tokio::test]
async fn tools_are_listed_with_their_metadata() {
    let f = start().await;
    let (_, token) = f.server.new_user("list").await;
    let (status, list) = f.server.send("GET", "/api/tools", Some(&token), None).await;
    assert_eq!(status, StatusCode::OK);
    let tools = list["tools"].as_array().expect("tools");
    let qb = tools
        .iter()
        .find(|t| t["name"] == "quickbooks_profit_and_loss")
        .expect("listed");
    assert_eq!(qb["kind"], "http");
    assert_eq!(
        qb["parameters"]["required"],
        json!(["start_date", "end_date"])
    );
    assert_eq!(
        qb["requires_user_input"]["fields"][0]["validation"],
        "^[0-9]{10,20}$"
    );
    let off = tools
        .iter()
        .find(|t| t["name"] == "switched_off")
        .expect("listed");
    assert_eq!(off["enabled"], false);
    // Where each comes from: the tools file, or toolgate itself.
    assert_eq!(qb["origin"], "tools_file", "{qb}");
    assert!(qb["server"].is_null(), "{qb}");
    let calculator = tools
        .iter()
        .find(|t| t["name"] == "calculator")
        .expect("listed");
    assert_eq!(calculator["origin"], "builtin", "{calculator}");
    let (status, _) = f.server.send("GET", "/api/tools", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_builtin_calculator_runs_without_a_network() {
    let f = start().await;
    let (_, token) = f.server.new_user("calc").await;
    let conversation = f.server.new_conversation(&token).await;
    let (_, outcome) = f
        .execute(
            &token,
            &conversation,
            "calculator",
            json!({"expression": "(1200 - 300) * 1.2"}),
        )
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
    assert_eq!(outcome["result"]["value"], 1080.0);
    let (_, bad) = f
        .execute(
            &token,
            &conversation,
            "calculator",
            json!({"expression": "1 / 0"}),
        )
        .await;
    assert_eq!(bad, json!({"success": false, "error": "division by zero"}));
}

async fn run_sql(
    f: &Fixture,
    token: &str,
    conversation: &str,
    query: &str,
    inputs: Value,
) -> Value {
    let id = call_id();
    let (_, asked) = f
        .execute_as(
            token,
            conversation,
            "query_database",
            &id,
            json!({"query": query}),
        )
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let (status, done) = f.submit(token, &id, inputs).await;
    assert_eq!(status, StatusCode::OK, "{done}");
    done["tool_result"].clone()
}

#[tokio::test]
async fn the_sql_tool_is_read_only_and_respects_the_row_limit() {
    let f = start().await;
    let (_, token) = f.server.new_user("sql").await;
    let conversation = f.server.new_conversation(&token).await;
    let rows = run_sql(
        &f,
        &token,
        &conversation,
        "select id, name from customers order by id",
        json!({"database": "staging"}),
    )
    .await;
    assert_eq!(rows["success"], true, "{rows}");
    assert_eq!(rows["result"]["row_count"], 3);
    assert_eq!(
        rows["result"]["rows"][0],
        json!({"id": 1, "name": "Northwind Traders (staging)"})
    );
    let limited = run_sql(
        &f,
        &token,
        &conversation,
        "select id from orders",
        json!({"database": "staging"}),
    )
    .await;
    assert_eq!(limited["result"]["row_count"], 3);
    assert_eq!(limited["result"]["truncated"], true);

    for write in [
        "delete from customers",
        "insert into customers values (99, 'x', 'US', '2020-01-01')",
        "select 1; delete from customers",
    ] {
        let refused = run_sql(
            &f,
            &token,
            &conversation,
            write,
            json!({"database": "staging"}),
        )
        .await;
        assert_eq!(refused["success"], false, "{write}: {refused}");
    }
    // A function with a side effect is stopped by the read-only transaction itself.
    let refused = run_sql(
        &f,
        &token,
        &conversation,
        "select nextval(pg_get_serial_sequence('public.tool_call_log', 'id'))",
        json!({"database": "staging"}),
    )
    .await;
    assert_eq!(refused["success"], false, "{refused}");
    // The demo login cannot read toolgate's own tables.
    let private = run_sql(
        &f,
        &token,
        &conversation,
        "select * from public.saved_tool_inputs",
        json!({"database": "staging"}),
    )
    .await;
    assert_eq!(private["success"], false, "{private}");
    let still: Value = run_sql(
        &f,
        &token,
        &conversation,
        "select count(*) as n from customers",
        json!({"database": "staging"}),
    )
    .await;
    assert_eq!(still["result"]["rows"][0]["n"], 3);
}

#[tokio::test]
async fn a_conditional_field_is_asked_only_when_visible() {
    let f = start().await;
    let (_, token) = f.server.new_user("cond").await;
    let conversation = f.server.new_conversation(&token).await;
    let id = call_id();
    f.execute_as(
        &token,
        &conversation,
        "query_database",
        &id,
        json!({"query": "select 1 as one"}),
    )
    .await;
    let (status, body) = f
        .submit(&token, &id, json!({"database": "production"}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert_eq!(
        body["error"]["fields"]["production_reason"],
        "This field is required"
    );
    let (status, body) = f
        .submit(
            &token,
            &id,
            json!({"database": "production", "production_reason": "quarterly audit"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tool_result"]["result"]["rows"], json!([{"one": 1}]));
    // Staging needs no reason.
    let staging = run_sql(
        &f,
        &token,
        &conversation,
        "select 2 as two",
        json!({"database": "staging"}),
    )
    .await;
    assert_eq!(staging["success"], true, "{staging}");
}

#[tokio::test]
async fn a_bad_tools_file_stops_start_up_with_a_precise_message() {
    let cases = [
        (
            TOOLS.replace("^[0-9]{10,20}$", "([0-9]"),
            "tool `quickbooks_profit_and_loss`: requires_user_input: field `quickbooks_realm_id`: validation is not a valid regular expression",
        ),
        (
            TOOLS.replace("{end_date}\"", "{finish}\""),
            "tool `quickbooks_profit_and_loss`: http.url uses `{finish}`, which is neither an argument nor a user input field",
        ),
        (
            TOOLS.replace(
                "name = \"code\", type = \"text\"",
                "name = \"code\", type = \"colour\"",
            ),
            "tool `per_call`: requires_user_input: field `code`: unknown type `colour`",
        ),
        (
            TOOLS.replace(
                "equals = \"production\"",
                "equals = \"production\", ghost = 1",
            ),
            "tool `query_database`",
        ),
        (
            TOOLS.replace("{ field = \"database\"", "{ field = \"nobody\""),
            "field `production_reason`: visible_if names unknown field `nobody`",
        ),
        (
            TOOLS.replace("item = { type = \"string\" }", "item = { type = \"word\" }"),
            "tool `with_api_key`: parameters is not a valid JSON Schema",
        ),
    ];
    for (text, expected) in cases {
        let (_dir, path) = write_temp_file("tools.toml", &text);
        let started = TestServer::try_start(
            ServerOptions::default().env("TOOLGATE_TOOLS", &path.to_string_lossy()),
        )
        .await;
        let err = format!(
            "{:#}",
            started.err().expect("a bad tools file must stop start-up")
        );
        assert!(err.contains(expected), "expected `{expected}` in:\n{err}");
    }
}

#[tokio::test]
async fn the_example_tools_file_loads() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../tools.example.toml");
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_TOOLS", example)).await;
    let (_, token) = server.new_user("example").await;
    let (_, list) = server.send("GET", "/api/tools", Some(&token), None).await;
    let names: Vec<&str> = list["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for name in [
        "calculator",
        "quickbooks_profit_and_loss",
        "query_database",
        "post_webhook",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
}
