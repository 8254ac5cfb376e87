//! MCP servers' tools through toolgate, against the test MCP server of this package
//! (over stdio as a child process, and over streamable HTTP in this process): tools in
//! the registry, overlays, elicitation as the durable card, URL mode, crashes, and what a
//! hostile server or user gets.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::mcp_server::{FORGED_LINE, NAMED_AFTER, NO_DISCOVER};
use tests::{MockLlm, MockReply, ServerOptions, TempDir, TestServer, write_temp_file};

/// The tools-file line that has the test server ask its questions the stateless way
/// (MCP 2026-07-28).
const STATELESS: &str = "protocol_version = \"2026-07-28\"";

/// The tools file entry for the test server over stdio, named `name`, whose word that a
/// tool only reads is trusted.
fn stdio_server(name: &str, extra: &str) -> String {
    let binary = tests::mcp_server::binary().expect("the test MCP server is built with the tests");
    format!(
        "[[mcp_servers]]\nname = \"{name}\"\ncommand = \"{}\"\ntrust_annotations = true\n{extra}\n",
        binary.display()
    )
}

fn http_server(name: &str, url: &str, extra: &str) -> String {
    format!(
        "[[mcp_servers]]\nname = \"{name}\"\nurl = \"{url}\"\nallow_private_networks = true\ntrust_annotations = true\n{extra}\n"
    )
}

struct Setup {
    server: TestServer,
    _tools: TempDir,
}

async fn start_with(tools: &str, options: ServerOptions) -> Setup {
    let (dir, path) = write_temp_file("tools.toml", tools);
    let server =
        TestServer::start_with(options.env("TOOLGATE_TOOLS", &path.to_string_lossy())).await;
    Setup {
        server,
        _tools: dir,
    }
}

async fn start(tools: &str) -> Setup {
    start_with(tools, ServerOptions::default()).await
}

/// A server with `tools` whose server `t` has been reached, a new user of it named
/// after `user`, and a conversation of theirs: the setup, the token, the conversation.
async fn ready(tools: &str, user: &str) -> (Setup, String, String) {
    ready_with(tools, ServerOptions::default(), user).await
}

/// [`ready`] with toolgate started with `options`.
async fn ready_with(tools: &str, options: ServerOptions, user: &str) -> (Setup, String, String) {
    let setup = start_with(tools, options).await;
    let (_, token) = setup.server.new_user(user).await;
    tools_when_settled(&setup.server, &token, &["t"]).await;
    let conversation = setup.server.new_conversation(&token).await;
    (setup, token, conversation)
}

/// [`ready`] with a server `t` (given `settings` too) whose processes share what they
/// keep in a folder of their own (`MCP_TEST_STATE`): that folder, and the rest.
async fn ready_with_state(settings: &str, user: &str) -> (TempDir, Setup, String, String) {
    let state = TempDir::new(user);
    let extra = format!(
        "{settings}\nenv = {{ MCP_TEST_STATE = \"{}\" }}",
        state.0.display()
    );
    let (setup, token, conversation) = ready(&stdio_server("t", &extra), user).await;
    (state, setup, token, conversation)
}

/// `GET /api/tools` once every named server has been reached (or failed for good).
async fn tools_when_settled(server: &TestServer, token: &str, names: &[&str]) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server.send("GET", "/api/tools", Some(token), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let settled = names.iter().all(|name| {
            body["servers"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|s| s["name"] == *name && s["status"] != "connecting")
        });
        if settled {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "servers never settled: {body}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The names of the tools `GET /api/tools` listed.
fn tool_names(listed: &Value) -> Vec<&str> {
    listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect()
}

fn tool<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("no tool {name} in {tools}"))
}

fn server_info<'a>(tools: &'a Value, name: &str) -> &'a Value {
    tools["servers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {tools}"))
}

/// The JSON the test server's eliciting tools answer with: `elicitation: {...}`.
fn echoed_elicitation(outcome: &Value) -> Value {
    let text = outcome["result"]["text"].as_str().unwrap_or_default();
    let json = text
        .split_once("elicitation: ")
        .map(|(_, rest)| rest)
        .unwrap_or_else(|| panic!("not an elicitation echo: {outcome}"));
    serde_json::from_str(json).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// The user's answer to the request of `tool_call_id`, taken (200): the answer's body.
async fn answered(
    server: &TestServer,
    token: &str,
    tool_call_id: impl serde::Serialize,
    user_inputs: Value,
) -> Value {
    let (status, done) = server
        .action(
            token,
            json!({"action": "submit_response", "tool_call_id": tool_call_id,
                "user_inputs": user_inputs}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    done
}

/// The card of the test server's `ask_password`, which asks for a password in a form.
async fn password_card(server: &TestServer, token: &str, conversation: &str) -> Value {
    let (_, asked) = server
        .execute_tool(
            token,
            conversation,
            "t__ask_password",
            "call_password",
            json!({}),
        )
        .await;
    asked["user_input_request"].clone()
}

/// Waits until the server's log holds `text`.
async fn wait_for_log(server: &TestServer, text: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !server.logs().contains(text) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no `{text}` in the log:\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn tools_appear_namespaced_with_their_schemas_over_stdio_and_http() {
    let http = tests::mcp_server::serve_http()
        .await
        .expect("HTTP MCP server");
    let setup = start(&(stdio_server("local", "") + &http_server("remote", &http.url, ""))).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-list").await;
    let tools = tools_when_settled(server, &token, &["local", "remote"]).await;
    for name in ["local", "remote"] {
        let info = server_info(&tools, name);
        assert_eq!(info["status"], "connected", "{info}\n{}", server.logs());
        let echo = tool(&tools, &format!("{name}__echo"));
        assert_eq!(echo["origin"], "mcp");
        assert_eq!(echo["server"], name);
        assert_eq!(echo["available"], true);
        assert_eq!(echo["parameters"]["properties"]["text"]["type"], "string");
        assert!(echo.get("requires_approval").is_none(), "{echo}");
        // Marked destructive by the server: waits for the user's yes by default.
        let delete = tool(&tools, &format!("{name}__delete_thing"));
        assert!(delete["requires_approval"].is_object(), "{delete}");
    }
    assert_eq!(server_info(&tools, "local")["transport"], "stdio");
    assert_eq!(server_info(&tools, "remote")["transport"], "http");

    let conversation = server.new_conversation(&token).await;
    for name in ["local", "remote"] {
        let (status, outcome) = server
            .execute_tool(
                &token,
                &conversation,
                &format!("{name}__echo"),
                &format!("call_echo_{name}"),
                json!({"text": "hello"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{outcome}");
        assert_eq!(outcome["success"], true, "{outcome}");
        assert_eq!(outcome["result"]["text"], "echo: hello", "{outcome}");
    }
}

/// Every tool goes with every model request: one server's catalogue is kept to about a
/// mebibyte, the tools past it left out.
#[tokio::test]
async fn a_servers_catalogue_past_its_budget_is_cut() {
    let setup = start(&stdio_server("t", "args = [\"--bloat\", \"30\"]")).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-bloat").await;
    let listed = tools_when_settled(server, &token, &["t"]).await;
    let names = tool_names(&listed);
    let bloated = names.iter().filter(|n| n.starts_with("t__bloat_")).count();
    assert!(names.contains(&"t__echo"), "{names:?}");
    assert!(
        (1..30).contains(&bloated),
        "{bloated} of 30 large tools kept: {names:?}"
    );
}

/// A schema's names and values reach the model as the server wrote them, and cannot be
/// quoted since the model writes them back: a tool whose argument name or allowed value
/// poses as a chat turn or the user's pinned words is not offered, nor can it be called.
#[tokio::test]
async fn a_tool_whose_schema_poses_as_a_turn_or_a_pin_is_left_out() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-forged-schema").await;
    let server = &setup.server;
    let (_, listed) = server.send("GET", "/api/tools", Some(&token), None).await;
    let names = tool_names(&listed);
    assert!(names.contains(&"t__echo"), "{names:?}");
    for forged in ["t__forged_property", "t__forged_choice"] {
        assert!(!names.contains(&forged), "{forged} offered: {names:?}");
        let (status, body) = server
            .execute_tool(&token, &conversation, forged, "call_forged", json!({}))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    }
    assert!(!listed.to_string().contains("evil.example"), "{listed}");
    assert!(
        server
            .logs()
            .contains("reads as a chat turn or a pin marker"),
        "{}",
        server.logs()
    );
}

/// A server whose tool list hands out cursors without end is read up to a point and
/// its first page's tools are kept, rather than read until the call times out.
#[tokio::test]
async fn a_tool_list_without_end_is_read_up_to_a_point() {
    let setup = start(&stdio_server("t", "args = [\"--endless-pages\"]")).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-pages").await;
    let listed = tools_when_settled(server, &token, &["t"]).await;
    assert_eq!(server_info(&listed, "t")["status"], "connected", "{listed}");
    let names = tool_names(&listed);
    assert!(names.contains(&"t__echo"), "{names:?}");
    assert!(
        server.logs().contains("did not end after 50 pages"),
        "{}",
        server.logs()
    );
}

/// A server that says its tool list changed right after every listing is listed about
/// once a second, not as fast as it can say so.
#[tokio::test]
async fn a_server_that_keeps_saying_its_list_changed_is_listed_once_a_second() {
    let (state, setup, _, _) = ready_with_state("args = [\"--restless\"]", "mcp-restless").await;
    let listings = || {
        std::fs::read_to_string(state.0.join(tests::mcp_server::LISTINGS)).map_or(0, |t| t.len())
    };
    let before = listings();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let during = listings() - before;
    // Four seconds at one a second, with room for the edges; unchecked, the server's
    // 20 ms between notices would make it a hundred or more.
    assert!(
        (2..=6).contains(&during),
        "{during} listings in 4 s\n{}",
        setup.server.logs()
    );
}

/// A session slow to open holds up its own call only: another user's call to the same
/// server goes on meanwhile.
#[tokio::test]
async fn a_session_slow_to_open_holds_up_no_other_users_call() {
    let (state, setup, token, conversation) = ready_with_state("", "mcp-open").await;
    let server = &setup.server;
    let echo = |call: &'static str, token: String, conversation: String| async move {
        server
            .execute_tool(
                &token,
                &conversation,
                "t__echo",
                call,
                json!({"text": call}),
            )
            .await
    };
    // The first user's session is open.
    let (_, outcome) = echo("call_first", token.clone(), conversation.clone()).await;
    assert_eq!(outcome["success"], true, "{outcome}");

    std::fs::write(state.0.join(tests::mcp_server::SLOW_START), b"slow").expect("marker");
    let (_, other) = server.new_user("mcp-slow").await;
    let other_conversation = server.new_conversation(&other).await;
    let slow = echo("call_slow", other, other_conversation);
    let meanwhile = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let started = tokio::time::Instant::now();
        let answer = echo("call_meanwhile", token.clone(), conversation.clone()).await;
        (answer, started.elapsed())
    };
    let ((_, slow), ((_, meanwhile), took)) = tokio::join!(slow, meanwhile);
    assert_eq!(meanwhile["success"], true, "{meanwhile}");
    assert!(
        took < Duration::from_secs(3),
        "the other call took {took:?}"
    );
    assert_eq!(slow["success"], true, "{slow}");
}

#[tokio::test]
async fn a_server_that_is_down_at_start_up_leaves_start_up_alone_and_says_why() {
    let closed = tests::free_port().expect("port");
    let tools = stdio_server("fine", "")
        + "[[mcp_servers]]\nname = \"gone\"\ncommand = \"/nonexistent/mcp-server\"\n"
        + &http_server("unreachable", &format!("http://127.0.0.1:{closed}/mcp"), "");
    let setup = start(&tools).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-down").await;
    let tools = tools_when_settled(server, &token, &["fine", "gone", "unreachable"]).await;
    assert_eq!(server_info(&tools, "fine")["status"], "connected");
    for name in ["gone", "unreachable"] {
        let info = server_info(&tools, name);
        assert_eq!(info["status"], "unavailable", "{info}");
        let reason = info["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("`{name}`")), "{reason}");
        assert!(
            !reason.contains("/nonexistent"),
            "no paths to callers: {reason}"
        );
    }
    // The server's own tools still work.
    let conversation = server.new_conversation(&token).await;
    let (_, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "fine__echo",
            "call_fine",
            json!({"text": "still here"}),
        )
        .await;
    assert_eq!(outcome["success"], true, "{outcome}");
}

const ECHO_OVERLAY: &str = r#"
[[tool_overlays]]
name = "t__echo"
[tool_overlays.requires_user_input]
reason = "What should be echoed is yours to say"
fields = [ { name = "text", label = "Text", type = "text" } ]

[[tool_overlays]]
prefix = "t__sl"
requires_approval = true
"#;

#[tokio::test]
async fn overlays_make_a_field_user_only_and_add_approval() {
    let setup = start(&(stdio_server("t", "") + ECHO_OVERLAY)).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-overlay").await;
    let tools = tools_when_settled(server, &token, &["t"]).await;
    let echo = tool(&tools, "t__echo");
    // The model no longer sees the field as an argument.
    assert!(
        echo["parameters"]["properties"].get("text").is_none(),
        "{echo}"
    );
    assert_eq!(
        echo["requires_user_input"]["fields"][0]["name"], "text",
        "{echo}"
    );
    assert!(tool(&tools, "t__slow")["requires_approval"].is_object());

    // A model aiming its argument at the user's field gets the card, not its way.
    let conversation = server.new_conversation(&token).await;
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_overlay",
            json!({"text": "the model's words"}),
        )
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    assert!(!asked.to_string().contains("the model's words"), "{asked}");
    let done = answered(
        server,
        &token,
        "call_overlay",
        json!({"text": "the user's words"}),
    )
    .await;
    assert_eq!(
        done["tool_result"]["result"]["text"], "echo: the user's words",
        "{done}"
    );

    let (_, approval) = server
        .execute_tool(
            &token,
            &conversation,
            "t__slow",
            "call_slow",
            json!({"ms": 1}),
        )
        .await;
    assert_eq!(approval["requires_approval"], true, "{approval}");
}

/// Values for every field of `ask_everything`, as a user types them.
fn every_answer() -> Value {
    json!({"name": "Ada", "email": "ada@example.com", "homepage": "https://ada.example/",
        "birthday": "1815-12-10", "meeting": "2025-03-31T17:30+02:00", "age": "41",
        "budget": "12.5", "subscribe": false, "colour": "blue", "size": "l",
        "legacy_pick": "b", "toppings": ["ham"], "extras": ["x1"]})
}

#[tokio::test]
async fn an_elicitation_is_a_durable_card_and_accepted_values_reach_the_server() {
    let http = tests::mcp_server::serve_http()
        .await
        .expect("HTTP MCP server");
    let setup = start(&(stdio_server("t", "") + &http_server("h", &http.url, ""))).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-elicit").await;
    tools_when_settled(server, &token, &["t", "h"]).await;
    for name in ["t", "h"] {
        let conversation = server.new_conversation(&token).await;
        let call = format!("call_everything_{name}");
        let (status, asked) = server
            .execute_tool(
                &token,
                &conversation,
                &format!("{name}__ask_everything"),
                &call,
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{asked}");
        assert_eq!(asked["requires_user_input"], true, "{asked}");
        let request = &asked["user_input_request"];
        assert_eq!(request["elicitation"]["server"], name);
        assert_eq!(request["elicitation"]["mode"], "form");
        assert_eq!(request["elicitation"]["tool_call_id"], call);
        assert_eq!(request["reason"], "Tell me everything");
        let kinds: Vec<(String, String)> = request["fields"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|f| {
                (
                    f["name"].as_str().unwrap_or_default().to_owned(),
                    f["type"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        for (field, kind) in [
            ("name", "text"),
            ("email", "email"),
            ("homepage", "url"),
            ("birthday", "date"),
            ("meeting", "datetime"),
            ("age", "integer"),
            ("budget", "number"),
            ("subscribe", "boolean"),
            ("colour", "select"),
            ("size", "select"),
            ("legacy_pick", "select"),
            ("toppings", "multiselect"),
            ("extras", "multiselect"),
        ] {
            assert!(
                kinds.contains(&(field.to_owned(), kind.to_owned())),
                "{field} as {kind}: {kinds:?}"
            );
        }
        // Durable: the card is there for a reload.
        let open = server.pending_requests(&token, &conversation).await;
        assert_eq!(open.len(), 1, "{open:?}");
        let card = open[0]["tool_call_id"]
            .as_str()
            .expect("card id")
            .to_owned();

        let (status, refused) = server
            .action(
                &token,
                json!({"action": "submit_response", "tool_call_id": card,
                    "user_inputs": {"name": "A", "email": "ada@example.com", "colour": "pink",
                        "toppings": ["ham", "cheese", "olives"]}}),
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
        for field in ["name", "colour", "toppings"] {
            assert!(
                refused["error"]["fields"].get(field).is_some(),
                "{field}: {refused}"
            );
        }

        let (status, done) = server
            .action(
                &token,
                json!({"action": "submit_response", "tool_call_id": card,
                    "user_inputs": every_answer()}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{done}");
        let echoed = echoed_elicitation(&done["tool_result"]);
        assert_eq!(echoed["action"], "accept", "{echoed}");
        let content = &echoed["content"];
        assert_eq!(content["age"], json!(41), "typed as the schema says");
        assert_eq!(content["budget"], json!(12.5));
        assert_eq!(content["subscribe"], json!(false));
        assert_eq!(content["meeting"], json!("2025-03-31T17:30:00+02:00"));
        assert_eq!(content["toppings"], json!(["ham"]));
        assert_eq!(content["size"], json!("l"));
        // A second answer to the same card is a conflict, never a second reply.
        let (status, _) = server
            .action(
                &token,
                json!({"action": "submit_response", "tool_call_id": card,
                    "user_inputs": every_answer()}),
            )
            .await;
        assert_eq!(status, StatusCode::CONFLICT);
    }
}

async fn mock_model_setup(script: Vec<MockReply>, tools: &str) -> (Setup, MockLlm) {
    let llm = MockLlm::start(script).await;
    let setup = start_with(
        tools,
        ServerOptions::default()
            .env("TOOLGATE_LLM_BASE_URL", &llm.base)
            .env("TOOLGATE_LLM_API_KEY", "sk-test-key"),
    )
    .await;
    (setup, llm)
}

fn call(id: &str, name: &str, arguments: Value) -> (String, String, Value) {
    (id.to_owned(), name.to_owned(), arguments)
}

/// Starts a run whose model calls `tool`, and returns the conversation and run once
/// the server's question is on a card.
/// Waits for the card `card` to end and asserts it was abandoned with a message that
/// says `why`.
async fn assert_card_abandoned(
    server: &TestServer,
    token: &str,
    conversation: &str,
    card: &str,
    why: &str,
) {
    let events = server
        .events_until(token, conversation, 0, Duration::from_secs(10), |e| {
            e["type"] == "input_resolved" && e["request"]["tool_call_id"] == card
        })
        .await;
    let ended = &events.last().expect("resolved")["request"];
    assert_eq!(ended["status"], "abandoned", "{ended}");
    assert!(
        ended["message"].as_str().unwrap_or_default().contains(why),
        "{ended}"
    );
}

async fn run_until_card(server: &TestServer, token: &str) -> (String, String, Value) {
    let conversation = server.new_conversation(token).await;
    let run = server
        .start_run(token, &conversation, json!("Ask me everything"))
        .await;
    let events = server
        .events_until(token, &conversation, 0, Duration::from_secs(30), |e| {
            e["type"] == "input_requested"
        })
        .await;
    let request = events
        .last()
        .map(|e| e["request"].clone())
        .unwrap_or_default();
    (conversation, run, request)
}

/// Declines or cancels (`action`) the card `request`, which must succeed.
async fn answer_card(server: &TestServer, token: &str, request: &Value, action: &str) {
    let (status, body) = server
        .action(
            token,
            json!({"action": action, "tool_call_id": request["tool_call_id"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

fn tool_results(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["content"][0]["outcome"].as_object().cloned())
        .map(Value::Object)
        .collect()
}

#[tokio::test]
async fn decline_and_cancel_reach_the_server_as_such_and_the_run_goes_on() {
    for (action, expected) in [("decline_request", "decline"), ("cancel_request", "cancel")] {
        let (setup, _llm) = mock_model_setup(
            vec![
                MockReply::ToolCalls(vec![call("call_ask", "t__ask_everything", json!({}))]),
                MockReply::Text("Understood.".into()),
            ],
            &stdio_server("t", ""),
        )
        .await;
        let server = &setup.server;
        let (_, token) = server.new_user("mcp-decline").await;
        tools_when_settled(server, &token, &["t"]).await;
        let (conversation, run, request) = run_until_card(server, &token).await;
        assert_eq!(
            request["elicitation"]["tool_call_id"], "call_ask",
            "{request}"
        );
        answer_card(server, &token, &request, action).await;
        let done = server.run_finished(&token, &conversation, &run).await;
        assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
        let results = tool_results(&server.messages(&token, &conversation).await);
        assert_eq!(results.len(), 1, "one result for the one call: {results:?}");
        assert_eq!(echoed_elicitation(&results[0])["action"], expected);
    }
}

/// A question can be answered while the step that asked it still waits for another of
/// its calls; the server's reply to the answer then comes after the step has ended. The
/// run must wait for that reply rather than answer the user without it.
#[tokio::test]
async fn an_answer_given_before_the_step_ends_still_waits_for_the_calls_result() {
    let (setup, _llm) = mock_model_setup(
        vec![
            MockReply::ToolCalls(vec![
                call("call_ask", "t__ask_then_take_time", json!({"ms": 5000})),
                call("call_slow", "t__slow", json!({"ms": 2500})),
            ]),
            MockReply::Text("Understood.".into()),
        ],
        &stdio_server("t", ""),
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-early-answer").await;
    tools_when_settled(server, &token, &["t"]).await;
    let (conversation, run, request) = run_until_card(server, &token).await;
    assert_eq!(
        request["elicitation"]["tool_call_id"], "call_ask",
        "{request}"
    );
    answer_card(server, &token, &request, "decline_request").await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    let messages = server.messages(&token, &conversation).await;
    let results = tool_results(&messages);
    assert_eq!(results.len(), 2, "both calls' results: {results:?}");
    let last_result = messages.iter().rposition(|m| m["role"] == "tool");
    let answer = messages.iter().rposition(|m| m["role"] == "assistant");
    assert!(
        last_result < answer,
        "the answer comes after every result: {messages:?}"
    );
}

/// Two calls of one step wait for the user. The one answered first takes its time to
/// finish; when the other's result is in, the run must still wait for the first's rather
/// than go on with one result missing.
#[tokio::test]
async fn a_run_waits_for_every_answered_calls_result_not_only_the_last() {
    let (setup, _llm) = mock_model_setup(
        vec![
            MockReply::ToolCalls(vec![
                call(
                    "call_slow_ask",
                    "t__ask_then_take_time",
                    json!({"ms": 5000}),
                ),
                call("call_quick_ask", "u__ask_everything", json!({})),
            ]),
            MockReply::Text("Understood.".into()),
        ],
        &format!("{}{}", stdio_server("t", ""), stdio_server("u", "")),
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-two-answers").await;
    tools_when_settled(server, &token, &["t", "u"]).await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("Ask me twice"))
        .await;
    let mut cards = Vec::new();
    for call in ["call_slow_ask", "call_quick_ask"] {
        let events = server
            .events_until(&token, &conversation, 0, Duration::from_secs(30), |e| {
                e["type"] == "input_requested"
                    && e["request"]["elicitation"]["tool_call_id"] == call
            })
            .await;
        cards.push(
            events
                .last()
                .map(|e| e["request"].clone())
                .unwrap_or_default(),
        );
    }
    let card_of = |index: usize| cards[index].clone();
    let decline = |card: Value| {
        let token = token.clone();
        async move { answer_card(server, &token, &card, "decline_request").await }
    };
    // The answer to the slow card waits for what its call does next; the quick card is
    // answered meanwhile.
    tokio::join!(decline(card_of(0)), async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        decline(card_of(1)).await;
    });
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    let results = tool_results(&server.messages(&token, &conversation).await);
    assert_eq!(results.len(), 2, "both calls' results: {results:?}");
}

/// `options` with the tools file `tools`, the mock model `llm` and one more `setting`.
fn with_model_and_tools(
    options: ServerOptions,
    tools: &std::path::Path,
    llm: &MockLlm,
    setting: (&str, &str),
) -> ServerOptions {
    options
        .env("TOOLGATE_TOOLS", &tools.to_string_lossy())
        .env("TOOLGATE_LLM_BASE_URL", &llm.base)
        .env("TOOLGATE_LLM_API_KEY", "sk-test-key")
        .env(setting.0, setting.1)
}

/// A server whose model calls the test MCP server's `slow` tool for `ms`, then answers
/// with `then`; and a run of a new user's that is in that call now.
struct MidCall {
    server: TestServer,
    llm: MockLlm,
    user: String,
    conversation: String,
    run: String,
    tools: std::path::PathBuf,
    setting: (&'static str, &'static str),
    _tools_dir: TempDir,
}

impl MidCall {
    async fn start(
        prefix: &str,
        ms: u64,
        then: Vec<MockReply>,
        setting: (&'static str, &'static str),
    ) -> Self {
        let mut script = vec![MockReply::ToolCalls(vec![call(
            "call_slow",
            "t__slow",
            json!({ "ms": ms }),
        )])];
        script.extend(then);
        let llm = MockLlm::start(script).await;
        let (_tools_dir, tools) = write_temp_file("tools.toml", &stdio_server("t", ""));
        let server = TestServer::start_with(with_model_and_tools(
            ServerOptions::default(),
            &tools,
            &llm,
            setting,
        ))
        .await;
        let (user, token) = server.new_user(prefix).await;
        tools_when_settled(&server, &token, &["t"]).await;
        let conversation = server.new_conversation(&token).await;
        let run = server
            .start_run(&token, &conversation, json!("take your time"))
            .await;
        server
            .events_until(&token, &conversation, 0, Duration::from_secs(30), |e| {
                e["type"] == "tool_call_started"
            })
            .await;
        MidCall {
            server,
            llm,
            user,
            conversation,
            run,
            tools,
            setting,
            _tools_dir,
        }
    }

    /// A second server on the same database, and the user's token on it.
    async fn next_server(&self) -> (TestServer, String) {
        let options = self.server.same_database();
        let options = with_model_and_tools(options, &self.tools, &self.llm, self.setting);
        let second = TestServer::start_with(options).await;
        let token = second.token(&self.user).await;
        (second, token)
    }
}

/// The server dies while an MCP call runs. When the run is failed (its lease lapsed), the
/// call gets a result saying so: a call without its result is a history an
/// OpenAI-compatible endpoint refuses, so the conversation could not go on.
#[tokio::test]
async fn a_call_cut_off_by_a_crash_gets_a_result_and_the_conversation_goes_on() {
    let then = vec![MockReply::Text("Back again.".into())];
    let mut mid = MidCall::start(
        "mcp-crash-mid-call",
        60_000,
        then,
        ("TOOLGATE_RUN_LEASE", "1s"),
    )
    .await;
    mid.server.kill().await;

    let (second, token) = mid.next_server().await;
    let conversation = &mid.conversation;
    let failed = second.run_finished(&token, conversation, &mid.run).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let results = tool_results(&second.messages(&token, conversation).await);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["success"], false, "{results:?}");

    let (status, again) = second
        .post_message(&token, conversation, json!("are you back?"))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    let run = again["run_id"].as_str().expect("run").to_owned();
    let done = second.run_finished(&token, conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let sent = mid.llm.requests().last().cloned().unwrap_or_default();
    let messages = sent["messages"].as_array().cloned().unwrap_or_default();
    let called = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .map(|c| c["id"].clone());
    for id in called {
        assert!(
            messages
                .iter()
                .any(|m| m["role"] == "tool" && m["tool_call_id"] == id),
            "call {id} was sent without its result: {sent}"
        );
    }
}

/// A call still running when a stopping server's grace period ends: the run is failed
/// and the call given a result saying so; the call's own end (its session closed as the
/// server stops) must not add a second result to the ended run.
#[tokio::test]
async fn a_call_still_running_when_the_grace_ends_gets_one_result() {
    let mut mid = MidCall::start(
        "mcp-grace-mid-call",
        20_000,
        vec![],
        ("TOOLGATE_SHUTDOWN_GRACE", "1s"),
    )
    .await;
    mid.server.terminate().await.expect("stopped");

    let (second, token) = mid.next_server().await;
    let failed = second
        .run_finished(&token, &mid.conversation, &mid.run)
        .await;
    assert_eq!(failed["status"], "failed", "{failed}");
    let results = tool_results(&second.messages(&token, &mid.conversation).await);
    assert_eq!(results.len(), 1, "{results:?}\n{}", mid.server.logs());
    assert!(
        results[0]["error"]
            .as_str()
            .is_some_and(|error| error.starts_with("the run ended")),
        "{results:?}"
    );
}

#[tokio::test]
async fn a_crash_while_a_card_is_open_ends_the_card_and_the_call_cleanly() {
    let (setup, _llm) = mock_model_setup(
        vec![
            MockReply::ToolCalls(vec![call(
                "call_crash",
                "t__ask_then_crash",
                // Long enough for the card to be stored on a busy machine first.
                json!({"after_ms": 2000}),
            )]),
            MockReply::Text("The server went away.".into()),
        ],
        &stdio_server("t", ""),
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-crash").await;
    tools_when_settled(server, &token, &["t"]).await;
    let (conversation, run, request) = run_until_card(server, &token).await;
    let card = request["tool_call_id"].as_str().expect("card").to_owned();
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    // The card says why it ended; answering it now is a conflict, not a hang.
    assert_card_abandoned(server, &token, &conversation, &card, "`t`").await;
    let (status, _) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": card,
                "user_inputs": {"answer": "too late"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    let results = tool_results(&server.messages(&token, &conversation).await);
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["success"], false);
    assert!(
        results[0]["error"]
            .as_str()
            .unwrap_or_default()
            .contains("ended the session"),
        "{results:?}"
    );
}

#[tokio::test]
async fn url_mode_is_a_link_card_that_completes_when_the_server_says_so() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-url").await;
    let server = &setup.server;
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__open_link",
            "call_link",
            json!({"complete_after_ms": 100, "notices": 3}),
        )
        .await;
    let request = &asked["user_input_request"];
    assert_eq!(request["elicitation"]["mode"], "url", "{asked}");
    let url = request["elicitation"]["url"].as_str().unwrap_or_default();
    assert!(url.starts_with("https://auth.example.com/"), "{url}");
    assert_eq!(request["fields"], json!([]));
    let done = answered(server, &token, &request["tool_call_id"], json!({})).await;
    assert_eq!(
        done["tool_result"]["result"]["text"], "url: accept",
        "{done}"
    );
    server
        .events_until(&token, &conversation, 0, Duration::from_secs(10), |e| {
            e["type"] == "elicitation_completed" && e["request_id"] == request["id"]
        })
        .await;
    // Said three times, it is announced once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let announced: i64 =
        sqlx::query_scalar("select count(*) from run_events where kind = 'elicitation_completed'")
            .fetch_one(&mut server.db().await)
            .await
            .expect("events");
    assert_eq!(announced, 1);
}

/// A link question the user declined is over: the server saying afterwards, again and
/// again, that it is complete announces nothing and writes nothing.
#[tokio::test]
async fn a_completion_notice_for_a_declined_link_question_announces_nothing() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-url-declined").await;
    let server = &setup.server;
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__open_link",
            "call_link",
            json!({"elicitation_id": "q1"}),
        )
        .await;
    let request = &asked["user_input_request"];
    assert_eq!(request["elicitation"]["mode"], "url", "{asked}");
    let (status, declined) = server
        .action(
            &token,
            json!({"action": "decline_request", "tool_call_id": request["tool_call_id"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{declined}");
    for n in 0..3 {
        let (status, said) = server
            .execute_tool(
                &token,
                &conversation,
                "t__finish_link",
                &format!("call_finish_{n}"),
                json!({"elicitation_id": "q1"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{said}");
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let announced: i64 =
        sqlx::query_scalar("select count(*) from run_events where kind = 'elicitation_completed'")
            .fetch_one(&mut server.db().await)
            .await
            .expect("events");
    assert_eq!(announced, 0, "{}", server.logs());
    let still: Vec<Value> = server.pending_requests(&token, &conversation).await;
    assert!(still.is_empty(), "{still:?}");
    // The notices were heard: one for a question that waits completes it.
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__open_link",
            "call_link_2",
            json!({"elicitation_id": "q2"}),
        )
        .await;
    let waiting = asked["user_input_request"]["id"].clone();
    let (status, said) = server
        .execute_tool(
            &token,
            &conversation,
            "t__finish_link",
            "call_finish_q2",
            json!({"elicitation_id": "q2"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{said}");
    server
        .events_until(&token, &conversation, 0, Duration::from_secs(10), |e| {
            e["type"] == "elicitation_completed" && e["request_id"] == waiting
        })
        .await;
}

/// Servers often number their questions per session, so two users' open link cards can
/// carry the same id. A completion notice on one user's session completes that user's
/// card, never the other's, even when the other's is newer.
#[tokio::test]
async fn a_completion_notice_on_one_users_session_never_completes_another_users_card() {
    let setup = start(&stdio_server("t", "")).await;
    let server = &setup.server;
    let (_, alice) = server.new_user("mcp-url-alice").await;
    let (_, bob) = server.new_user("mcp-url-bob").await;
    tools_when_settled(server, &alice, &["t"]).await;
    let alice_chat = server.new_conversation(&alice).await;
    let bob_chat = server.new_conversation(&bob).await;
    let mut cards = Vec::new();
    for (token, conversation, call) in
        [(&alice, &alice_chat, "call_a"), (&bob, &bob_chat, "call_b")]
    {
        let (_, asked) = server
            .execute_tool(
                token,
                conversation,
                "t__open_link",
                call,
                json!({"elicitation_id": "1"}),
            )
            .await;
        assert_eq!(
            asked["user_input_request"]["elicitation"]["mode"], "url",
            "{asked}"
        );
        cards.push(asked["user_input_request"]["id"].clone());
    }
    let (status, said) = server
        .execute_tool(
            &alice,
            &alice_chat,
            "t__finish_link",
            "call_finish",
            json!({"elicitation_id": "1"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{said}");
    server
        .events_until(&alice, &alice_chat, 0, Duration::from_secs(10), |e| {
            e["type"] == "elicitation_completed" && e["request_id"] == cards[0]
        })
        .await;
    let still_open = server.pending_requests(&bob, &bob_chat).await;
    assert!(
        still_open
            .iter()
            .any(|r| r["id"] == cards[1] && r["status"] == "pending"),
        "bob's card was completed by alice's notice: {still_open:?}\n{}",
        server.logs()
    );
}

/// A server that repeats a secret it was started with (here in a tool's name, which
/// toolgate logs as it leaves the tool out) has it masked in the log.
#[tokio::test]
async fn a_setting_a_server_repeats_where_toolgate_logs_it_is_masked() {
    const KEY: &str = "logged-k3y-80417";
    let settings = format!("env = {{ {NAMED_AFTER} = \"{{env.MCP_LOGGED_KEY}}\" }}");
    let (setup, token, _) = ready_with(
        &stdio_server("t", &settings),
        ServerOptions::default().env("MCP_LOGGED_KEY", KEY),
        "mcp-logged-setting",
    )
    .await;
    let logs = setup.server.logs();
    assert!(
        logs.lines()
            .any(|line| line.contains("MCP tool left out") && line.contains("named after")),
        "{logs}"
    );
    assert!(!logs.contains(KEY), "{logs}");
    let tools = tools_when_settled(&setup.server, &token, &["t"]).await;
    assert!(!tools.to_string().contains(KEY), "{tools}");
}

#[tokio::test]
async fn what_a_hostile_server_asks_for_is_refused_or_flagged() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-hostile").await;
    let server = &setup.server;
    // A form toolgate cannot show is cancelled (no user said no: nobody saw it), and so
    // is one whose words, their hidden characters written out, pass the limits; no card
    // is left behind.
    let forms = [
        ("t__bad_schema", "call_bad", json!({})),
        (
            "t__ask_about",
            "call_hiding",
            json!({"text": "\u{200B}".repeat(300)}),
        ),
    ];
    for (tool, call_id, arguments) in forms {
        let (_, outcome) = server
            .execute_tool(&token, &conversation, tool, call_id, arguments)
            .await;
        assert_eq!(
            echoed_elicitation(&outcome)["action"],
            "cancel",
            "{tool}: {outcome}"
        );
        assert!(
            server
                .pending_requests(&token, &conversation)
                .await
                .is_empty()
        );
    }
    // Neither that form's field name nor a listed tool's name writes a log line.
    let logs = server.logs();
    assert!(
        logs.contains("MCP tool left out") && logs.contains("cannot show"),
        "{logs}"
    );
    assert!(
        !logs.lines().any(|line| line.starts_with(FORGED_LINE)),
        "{logs}"
    );
    // A link that is not a plain web address is never offered.
    for url in ["javascript:alert(1)", "https://bank.example@evil.example/"] {
        let (_, outcome) = server
            .execute_tool(
                &token,
                &conversation,
                "t__open_link",
                &format!("call_{}", url.len()),
                json!({"url": url}),
            )
            .await;
        assert_eq!(outcome["result"]["text"], "url: cancel", "{url}: {outcome}");
    }
    // Nor one whose id could not be shown or kept as an id.
    for (n, id) in ["i".repeat(201), "id\u{202E}".to_owned()]
        .iter()
        .enumerate()
    {
        let (_, outcome) = server
            .execute_tool(
                &token,
                &conversation,
                "t__open_link",
                &format!("call_id_{n}"),
                json!({"url": "https://auth.example.com/connect", "elicitation_id": id}),
            )
            .await;
        assert_eq!(
            outcome["result"]["text"], "url: cancel",
            "{id:?}: {outcome}"
        );
    }
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
    // A form that asks for a password is shown with a warning.
    let card = password_card(server, &token, &conversation).await;
    let field = &card["fields"][0];
    assert_eq!(field["name"], "password");
    assert!(
        field["warning"]
            .as_str()
            .unwrap_or_default()
            .contains("password"),
        "{field}"
    );
    // And taken as a secret: typed unseen, stored sealed, sent to the server that asked
    // as given, and masked where that server repeats it.
    assert_eq!(field["type"], "secret", "{field}");
    const PASSWORD: &str = "hunter2-correct-horse";
    let done = answered(
        server,
        &token,
        &card["tool_call_id"],
        json!({"password": PASSWORD}),
    )
    .await;
    let echoed = echoed_elicitation(&done["tool_result"]);
    assert_eq!(echoed["action"], "accept", "{done}");
    // The server got the password itself (not its sealed form), and said it back.
    assert_eq!(
        echoed["content"]["password"],
        protocol::fields::MASKED,
        "{done}"
    );
    assert!(!done.to_string().contains(PASSWORD), "{done}");
    assert_no_request_holds(server, PASSWORD).await;
}

/// A question whose field description passes the limits once its hidden characters are
/// written out, while its label does not, is shown with the description cut to fit.
#[tokio::test]
async fn a_servers_overlong_hidden_words_are_cut_to_fit_and_shown() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-cut-words").await;
    let server = &setup.server;
    // Each written out as `⟨U+200B⟩`, 8 characters: "Use …" takes 1,996 of the 2,000 a
    // label may, "Whether … is right" 2,009.
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_about",
            "call_cut",
            json!({"text": "\u{200B}".repeat(249)}),
        )
        .await;
    let card = &asked["user_input_request"];
    let field = &card["fields"][0];
    assert_eq!(field["name"], "sure", "{asked}");
    let label = field["label"].as_str().unwrap_or_default();
    assert!(label.starts_with("Use ⟨U+200B⟩"), "{label}");
    assert_eq!(label.chars().count(), 1996);
    let description = field["description"].as_str().unwrap_or_default();
    assert_eq!(description.chars().count(), 2000, "{description}");
    assert!(
        description.starts_with("Whether ⟨U+200B⟩") && description.ends_with('…'),
        "{description}"
    );
    assert!(!description.contains('\u{200B}'), "{description}");
    let pending = server.pending_requests(&token, &conversation).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
}

#[tokio::test]
async fn one_users_card_and_call_are_never_another_users() {
    let setup = start(&stdio_server("t", "")).await;
    let server = &setup.server;
    let (_, ann) = server.new_user("mcp-ann").await;
    let (_, bob) = server.new_user("mcp-bob").await;
    tools_when_settled(server, &ann, &["t"]).await;
    let ann_conversation = server.new_conversation(&ann).await;
    let bob_conversation = server.new_conversation(&bob).await;
    let (_, ann_asked) = server
        .execute_tool(
            &ann,
            &ann_conversation,
            "t__ask_everything",
            "call_ann",
            json!({}),
        )
        .await;
    let (_, bob_asked) = server
        .execute_tool(
            &bob,
            &bob_conversation,
            "t__ask_everything",
            "call_bob",
            json!({}),
        )
        .await;
    let ann_card = ann_asked["user_input_request"]["tool_call_id"].clone();
    assert_eq!(
        bob_asked["requires_user_input"], true,
        "bob gets his own card"
    );
    let (status, _) = server
        .action(
            &bob,
            json!({"action": "submit_response", "tool_call_id": ann_card,
                "user_inputs": every_answer()}),
        )
        .await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "bob cannot answer ann's card"
    );
    let (status, _) = server
        .action(
            &bob,
            json!({"action": "get_pending", "conversation_id": ann_conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, done) = server
        .action(
            &ann,
            json!({"action": "submit_response", "tool_call_id": ann_card,
                "user_inputs": every_answer()}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(echoed_elicitation(&done["tool_result"])["action"], "accept");
    assert_eq!(
        server.pending_requests(&bob, &bob_conversation).await.len(),
        1
    );
}

/// Some model servers number their calls `call_0` in every reply, so one id can be a
/// live call in two of a user's conversations: each keeps its own call. Another
/// conversation's call of the same id ending neither ends this one's card nor hands
/// this one's answer its outcome.
#[tokio::test]
async fn one_call_id_in_two_conversations_is_two_calls() {
    let setup = start(&stdio_server("t", "")).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-same-id").await;
    tools_when_settled(server, &token, &["t"]).await;
    let asking = server.new_conversation(&token).await;
    let other = server.new_conversation(&token).await;
    let (status, asked) = server
        .execute_tool(&token, &asking, "t__ask_everything", "call_0", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let card = asked["user_input_request"]["tool_call_id"].clone();

    let (status, echoed) = server
        .execute_tool(
            &token,
            &other,
            "t__echo",
            "call_0",
            json!({"text": "the other conversation"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{echoed}");
    assert_eq!(echoed["success"], true, "{echoed}");

    let cards = server.pending_requests(&token, &asking).await;
    assert_eq!(
        cards.len(),
        1,
        "the first call's card is still open: {cards:?}"
    );
    let (status, done) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": card,
                "user_inputs": every_answer()}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        echoed_elicitation(&done["tool_result"])["action"],
        "accept",
        "the answer gets its own call's outcome: {done}"
    );
}

/// A call of the test server's `tool` (over stdio) whose `text` the user gives as a
/// secret field: the user `login` submits `secret` on the card. The server, the user's
/// token, the conversation and the answer to the submit.
async fn secret_given_to(tool: &str, login: &str, secret: &str) -> (Setup, String, String, Value) {
    secret_given_to_over(tool, login, secret, "", ServerOptions::default()).await
}

/// [`secret_given_to`] with `settings` added to the server's table, and toolgate
/// started with `options`.
async fn secret_given_to_over(
    tool: &str,
    login: &str,
    secret: &str,
    settings: &str,
    options: ServerOptions,
) -> (Setup, String, String, Value) {
    let overlay = format!(
        r#"
[[tool_overlays]]
name = "t__{tool}"
[tool_overlays.requires_user_input]
reason = "The token"
fields = [ {{ name = "text", label = "Token", type = "secret" }} ]
"#
    );
    let (setup, token, conversation) =
        ready_with(&(stdio_server("t", settings) + &overlay), options, login).await;
    let server = &setup.server;
    let call_id = format!("call_{tool}");
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            &format!("t__{tool}"),
            &call_id,
            json!({}),
        )
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let done = answered(server, &token, &call_id, json!({"text": secret})).await;
    (setup, token, conversation, done)
}

/// A server that keeps a secret one call gave it and says it in the answer to a later
/// call (which has no secret field of its own) has it masked there too.
#[tokio::test]
async fn a_secret_an_earlier_call_gave_the_server_is_masked_in_a_later_calls_answer() {
    const SECRET: &str = "kept-s3cret-7719";
    let (setup, token, conversation, done) = secret_given_to("keep", "mcp-kept", SECRET).await;
    let server = &setup.server;
    assert_eq!(done["tool_result"]["success"], true, "{done}");
    let (status, recalled) = server
        .execute_tool(&token, &conversation, "t__recall", "call_recall", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{recalled}");
    assert_eq!(recalled["success"], true, "{recalled}");
    let said = recalled["result"]["text"].as_str().unwrap_or_default();
    assert!(said.starts_with("you kept "), "{recalled}");
    assert!(!said.contains(SECRET), "{recalled}");
}

#[tokio::test]
async fn a_secret_given_to_an_mcp_tool_never_reaches_the_model_even_when_echoed() {
    const SECRET: &str = "s3cret-token-4242";
    let (setup, _, _, done) = secret_given_to("echo", "mcp-secret", SECRET).await;
    let server = &setup.server;
    assert_eq!(done["tool_result"]["success"], true, "{done}");
    assert!(!done.to_string().contains(SECRET), "{done}");
    let mut db = server.db().await;
    let logged: Vec<String> =
        sqlx::query_scalar("select arguments::text || coalesce(error, '') from tool_call_log")
            .fetch_all(&mut db)
            .await
            .expect("log");
    assert!(logged.iter().all(|row| !row.contains(SECRET)), "{logged:?}");
    assert!(!server.logs().contains(SECRET));
}

/// A server that writes what it was called with to its standard error: toolgate's log
/// of that, even at debug level, shows the user's secret masked, a secret the cut of a
/// long line goes through included.
#[tokio::test]
async fn a_secret_a_server_writes_to_its_standard_error_is_masked_in_the_log() {
    const SECRET: &str = "s3cret-token-5151";
    let debug = ServerOptions::default().env("TOOLGATE_LOG", "info,backend::tools::mcp=debug");
    let (setup, _, _, done) = secret_given_to_over("echo", "mcp-stderr", SECRET, "", debug).await;
    let server = &setup.server;
    assert_eq!(done["tool_result"]["success"], true, "{done}");
    wait_for_log(server, "echo called with").await;
    // Nor a part of it where the logged line is cut, 500 characters in.
    assert!(!server.logs().contains(&SECRET[..3]), "{}", server.logs());
}

/// A password the user gives in answer to a server's form, which the server then writes
/// to its standard error: toolgate's debug log shows it masked.
#[tokio::test]
async fn a_password_given_to_a_servers_form_is_masked_in_its_standard_error() {
    const PASSWORD: &str = "hunter2-battery-staple";
    let debug = ServerOptions::default().env("TOOLGATE_LOG", "info,backend::tools::mcp=debug");
    let (setup, token, conversation) =
        ready_with(&stdio_server("t", ""), debug, "mcp-form-stderr").await;
    let server = &setup.server;
    let card = password_card(server, &token, &conversation).await;
    answered(
        server,
        &token,
        &card["tool_call_id"],
        json!({"password": PASSWORD}),
    )
    .await;
    wait_for_log(server, "ask_password answered").await;
    assert!(!server.logs().contains(PASSWORD), "{}", server.logs());
}

/// A password given in one round of a server's stateless questions stays masked in the
/// rounds after: the server says it back two rounds later and the result shows it
/// masked; nothing stored holds it in the clear.
#[tokio::test]
async fn a_password_answered_in_one_round_is_masked_in_the_rounds_after() {
    const PASSWORD: &str = "hunter2-three-rounds";
    let (_state, setup, token, conversation) = ready_with_state(STATELESS, "mcp-rounds").await;
    let server = &setup.server;
    let (_, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_password_twice",
            "call_twice",
            json!({}),
        )
        .await;
    let first = &asked["user_input_request"];
    assert_eq!(first["fields"][0]["type"], "secret", "{asked}");
    answered(
        server,
        &token,
        &first["tool_call_id"],
        json!({"password": PASSWORD}),
    )
    .await;
    let waiting = server.pending_requests(&token, &conversation).await;
    let second = waiting
        .iter()
        .find(|r| r["fields"][0]["name"] == "confirm")
        .unwrap_or_else(|| panic!("the second round: {waiting:?}"));
    let done = answered(
        server,
        &token,
        &second["tool_call_id"],
        json!({"confirm": "yes"}),
    )
    .await;
    assert_eq!(
        done["tool_result"]["result"]["text"],
        format!("the password was {}", protocol::fields::MASKED),
        "{done}"
    );
    assert_no_request_holds(server, PASSWORD).await;
}

/// Asserts that no stored request, in any column, holds `secret` in the clear.
async fn assert_no_request_holds(server: &TestServer, secret: &str) {
    let mut db = server.db().await;
    let stored: Vec<String> = sqlx::query_scalar("select r::text from tool_user_input_requests r")
        .fetch_all(&mut db)
        .await
        .expect("requests");
    assert!(stored.iter().all(|row| !row.contains(secret)), "{stored:?}");
}

/// A hostile server repeats the user's secret in the question it asks: the card, what is
/// stored and what the model is told show it masked.
#[tokio::test]
async fn a_question_repeating_a_secret_of_the_call_shows_it_masked() {
    const SECRET: &str = "s3cret-token-7373";
    let (setup, token, conversation, done) =
        secret_given_to("ask_about", "mcp-asked-secret", SECRET).await;
    let server = &setup.server;
    // The server's question is the next card.
    let cards = server.pending_requests(&token, &conversation).await;
    assert_eq!(cards.len(), 1, "{cards:?}");
    let card = cards[0].to_string();
    assert!(
        card.contains("the one to use") && card.contains(protocol::fields::MASKED),
        "{card}"
    );
    assert!(!card.contains(SECRET), "{card}");
    assert!(!done.to_string().contains(SECRET), "{done}");
    assert_no_request_holds(server, SECRET).await;
}

/// The stateless way (2026-07-28): a server that hides the user's secret in the state it
/// asks to get back has its questions refused, and the secret is stored nowhere.
#[tokio::test]
async fn a_secret_hidden_in_a_servers_question_state_is_not_kept() {
    const SECRET: &str = "s3cret-token-5151";
    let (setup, token, conversation, done) = secret_given_to_over(
        "ask_code",
        "mcp-state-secret",
        SECRET,
        STATELESS,
        ServerOptions::default(),
    )
    .await;
    let server = &setup.server;
    assert_eq!(done["tool_result"]["success"], false, "{done}");
    assert!(
        done["tool_result"]["error"]
            .as_str()
            .is_some_and(|error| error.contains("state")),
        "{done}"
    );
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
    assert_no_request_holds(server, SECRET).await;
}

#[tokio::test]
async fn a_server_process_gets_none_of_toolgates_own_secrets() {
    let (setup, token, conversation) = ready(
        &stdio_server("t", "env = { GREETING = \"hello\" }"),
        "mcp-env",
    )
    .await;
    let server = &setup.server;
    for (name, expected) in [
        ("GREETING", "hello"),
        ("DATABASE_URL", "unset"),
        ("TOOLGATE_JWT_SECRET", "unset"),
        ("TOOLGATE_SECRET_KEY", "unset"),
    ] {
        let (_, outcome) = server
            .execute_tool(
                &token,
                &conversation,
                "t__show_env",
                &format!("call_env_{name}"),
                json!({"name": name}),
            )
            .await;
        assert_eq!(
            outcome["result"]["text"],
            format!("{name}={expected}"),
            "{outcome}"
        );
    }
}

#[tokio::test]
async fn a_changed_tool_list_reaches_the_registry_and_slow_calls_time_out() {
    // Each stdio session is a process of its own; they share what was added here. The
    // time limit covers every call, a session's start included: room for a busy machine.
    let (_state, setup, token, conversation) =
        ready_with_state("call_timeout_seconds = 3", "mcp-changes").await;
    let server = &setup.server;
    let (_, added) = server
        .execute_tool(&token, &conversation, "t__add_tool", "call_add", json!({}))
        .await;
    assert_eq!(added["success"], true, "{added}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, tools) = server.send("GET", "/api/tools", Some(&token), None).await;
        if tools.to_string().contains("t__late_addition") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{tools}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, slow) = server
        .execute_tool(
            &token,
            &conversation,
            "t__slow",
            "call_slow",
            json!({"ms": 10000}),
        )
        .await;
    assert_eq!(slow["success"], false);
    assert!(
        slow["error"]
            .as_str()
            .unwrap_or_default()
            .contains("within 3 s"),
        "{slow}"
    );
}

#[tokio::test]
async fn stateless_questions_of_2026_07_28_survive_a_restart_and_call_again() {
    let tools = stdio_server("t", STATELESS);
    let (dir, path) = write_temp_file("tools.toml", &tools);
    let options = ServerOptions::default().env("TOOLGATE_TOOLS", &path.to_string_lossy());
    let mut first = TestServer::start_with(options).await;
    let (user, token) = first.new_user("mcp-stateless").await;
    let listed = tools_when_settled(&first, &token, &["t"]).await;
    assert_eq!(
        server_info(&listed, "t")["protocol_version"],
        "2026-07-28",
        "{listed}"
    );
    let conversation = first.new_conversation(&token).await;
    let (_, asked) = first
        .execute_tool(&token, &conversation, "t__ask_code", "call_code", json!({}))
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let request = asked["user_input_request"].clone();
    assert_eq!(request["elicitation"]["tool_call_id"], "call_code");
    assert_eq!(request["fields"][0]["name"], "code");

    // The question outlives the process that asked it.
    first.terminate().await.expect("stops");
    let second = TestServer::start_with(
        ServerOptions {
            database_url: Some(first.database_url.clone()),
            ..ServerOptions::default()
        }
        .env("TOOLGATE_TOOLS", &path.to_string_lossy()),
    )
    .await;
    let token = second.token(&user).await;
    tools_when_settled(&second, &token, &["t"]).await;
    let (status, done) = second
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": request["tool_call_id"],
                "user_inputs": {"code": "4711"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}\n{}", second.logs());
    assert_eq!(
        done["tool_result"]["result"]["text"], "code was 4711",
        "{done}"
    );
    drop(dir);
}

/// A 2026-07-28 server that takes longer to answer than rmcp's 10 s probe (one starting
/// on a busy machine) is still spoken to in 2026-07-28, not quietly in the older
/// revision, whose questions would not survive a restart.
#[tokio::test]
async fn a_slow_2026_07_28_server_is_not_taken_for_an_older_one() {
    let settings =
        format!("{STATELESS}\nargs = [\"--start-late\", \"11\"]\nconnect_timeout_seconds = 40");
    let (setup, token, _) = ready(&stdio_server("t", &settings), "mcp-slow-new").await;
    let listed = tools_when_settled(&setup.server, &token, &["t"]).await;
    assert_eq!(
        server_info(&listed, "t")["protocol_version"],
        "2026-07-28",
        "{listed}\n{}",
        setup.server.logs()
    );
}

/// A server configured for 2026-07-28 that knows no `server/discover` (one of the
/// 2025-11-25 revision) is spoken to in its own revision, and its tools work; once it
/// has said so, its next sessions do not ask again (each asking starts it twice).
#[tokio::test]
async fn a_server_without_discover_configured_as_2026_07_28_is_spoken_to_in_2025_11_25() {
    let settings = format!("{STATELESS}\nargs = [\"--no-discover\"]");
    let (state, setup, token, conversation) = ready_with_state(&settings, "mcp-no-discover").await;
    let server = &setup.server;
    let listed = tools_when_settled(server, &token, &["t"]).await;
    assert_eq!(
        server_info(&listed, "t")["protocol_version"],
        "2025-11-25",
        "{listed}\n{}",
        server.logs()
    );
    let (status, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_echo",
            json!({"text": "hello"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["result"]["text"], "echo: hello", "{outcome}");
    // The session that watches the tool list asked and started again; the user's
    // session started once.
    assert_eq!(starts(&state), 3, "{}", server.logs());
}

/// A server taken for a 2025-11-25 one that goes away (stopped, restarted, upgraded) is
/// asked `server/discover` again when it comes back: upgraded, it is spoken to in
/// 2026-07-28 without toolgate restarting.
#[tokio::test]
async fn an_older_server_that_comes_back_upgraded_is_spoken_to_in_2026_07_28() {
    let state = TempDir::new("mcp-upgraded");
    std::fs::write(state.0.join(NO_DISCOVER), "").expect("older for now");
    let settings = format!(
        "{STATELESS}\nenv = {{ MCP_TEST_STATE = \"{}\" }}",
        state.0.display()
    );
    let (setup, token, _) = ready(&stdio_server("t", &settings), "mcp-upgraded").await;
    let server = &setup.server;
    let listed = tools_when_connected(server, &token, "t").await;
    assert_eq!(
        server_info(&listed, "t")["protocol_version"],
        "2025-11-25",
        "{listed}\n{}",
        server.logs()
    );
    // Upgraded, and the process that watches its tool list (its second start) ends.
    std::fs::remove_file(state.0.join(NO_DISCOVER)).expect("upgraded");
    let watcher = std::fs::read_to_string(state.0.join("pid.2")).expect("the watcher's pid");
    let stopped = std::process::Command::new("kill")
        .arg(watcher.trim())
        .status()
        .expect("kill");
    assert!(stopped.success(), "{stopped}");
    tools_when(server, &token, |listed| {
        let info = server_info(listed, "t");
        info["status"] == "connected" && info["protocol_version"] == "2026-07-28"
    })
    .await;
}

/// `GET /api/tools` once the server `name` is connected.
async fn tools_when_connected(server: &TestServer, token: &str, name: &str) -> Value {
    tools_when(server, token, |body| {
        server_info(body, name)["status"] == "connected"
    })
    .await
}

/// `GET /api/tools` once `ready` accepts it (within 30 s).
async fn tools_when(server: &TestServer, token: &str, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = server.send("GET", "/api/tools", Some(token), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        if ready(&body) {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never as awaited: {body}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The conversation's waiting requests once `ready` accepts them (within 20 s).
async fn pending_when(
    server: &TestServer,
    token: &str,
    conversation: &str,
    ready: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pending = server.pending_requests(token, conversation).await;
        if ready(&pending) {
            return pending;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never as awaited: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The number of times the stdio test server with the state folder `state` started.
fn starts(state: &TempDir) -> usize {
    std::fs::read_to_string(state.0.join(tests::mcp_server::STARTS))
        .expect("starts counted")
        .len()
}

/// A 2026-07-28 server that fails both handshakes once (a bad moment, which says
/// nothing of its revision) is spoken to in 2026-07-28 when it is back, not taken for
/// a 2025-11-25 one until toolgate restarts.
#[tokio::test]
async fn a_2026_07_28_server_that_failed_for_a_moment_is_not_taken_for_an_older_one() {
    let settings = format!("{STATELESS}\nargs = [\"--broken-starts\", \"1,2\"]");
    let (state, setup, token, _) = ready_with_state(&settings, "mcp-broken-once").await;
    let server = &setup.server;
    let listed = tools_when_connected(server, &token, "t").await;
    assert_eq!(
        server_info(&listed, "t")["protocol_version"],
        "2026-07-28",
        "{listed}\n{}",
        server.logs()
    );
    // server/discover and then initialize on the broken starts, server/discover again.
    assert_eq!(starts(&state), 3, "{}", server.logs());
}

/// Once a server configured for 2026-07-28 has turned out to be a 2025-11-25 one, a
/// failed `initialize` is the server failing: it is started once for the session, not
/// a second time as if it had refused `server/discover`.
#[tokio::test]
async fn a_failed_initialize_of_an_older_server_does_not_start_it_twice() {
    let settings = format!("{STATELESS}\nargs = [\"--no-discover\", \"--broken-starts\", \"3\"]");
    let (state, setup, token, conversation) = ready_with_state(&settings, "mcp-broken-old").await;
    let server = &setup.server;
    let listed = tools_when_connected(server, &token, "t").await;
    assert_eq!(
        server_info(&listed, "t")["protocol_version"],
        "2025-11-25",
        "{listed}\n{}",
        server.logs()
    );
    assert_eq!(starts(&state), 2, "{}", server.logs());
    // The user's own session: the third start, which fails.
    let (status, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_broken",
            json!({"text": "a"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["success"], false, "{outcome}");
    assert_eq!(starts(&state), 3, "{}", server.logs());
    // The next call starts it once more, with initialize at once, and runs.
    let (status, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_fine",
            json!({"text": "b"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["result"]["text"], "echo: b", "{outcome}");
    assert_eq!(starts(&state), 4, "{}", server.logs());
}

/// A server that asks a flood of questions at once puts no card before the user.
#[tokio::test]
async fn a_round_of_too_many_stateless_questions_is_refused_whole() {
    let (setup, token, conversation) = ready(&stdio_server("t", STATELESS), "mcp-flood").await;
    let server = &setup.server;
    let (status, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_code",
            "call_flood",
            json!({"extra_questions": 20}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["success"], false, "{outcome}");
    assert_eq!(
        outcome["error"], "the MCP server `t` asked 21 questions at once; at most 20",
        "{outcome}"
    );
    // Nor does one that asks toolgate to keep a great state for it between rounds.
    let (status, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_code",
            "call_state",
            json!({"state_bytes": 70_000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(
        outcome["error"],
        "the MCP server `t` asked toolgate to keep 70008 bytes of state; at most 65536",
        "{outcome}"
    );
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
}

/// An answered round whose user has every session in another call waits for one,
/// rather than throwing the answers away.
#[tokio::test]
async fn an_answered_round_waits_for_a_session_while_the_users_are_busy() {
    let (setup, token, conversation) = ready(&stdio_server("t", STATELESS), "mcp-busy-round").await;
    let server = &setup.server;
    let (_, asked) = server
        .execute_tool(&token, &conversation, "t__ask_code", "call_code", json!({}))
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let card = asked["user_input_request"]["tool_call_id"].clone();
    // Four slow calls take every session a user may have with the server.
    let ids: Vec<String> = (0..4).map(|n| format!("call_slow_{n}")).collect();
    let slow: Vec<_> = ids
        .iter()
        .map(|id| server.execute_tool(&token, &conversation, "t__slow", id, json!({"ms": 3000})))
        .collect();
    let answering = async {
        // Once the slow calls have their sessions.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        server
            .action(
                &token,
                json!({"action": "submit_response", "tool_call_id": card,
                    "user_inputs": {"code": "4711"}}),
            )
            .await
    };
    let (slow, (status, done)) = tokio::join!(futures::future::join_all(slow), answering);
    for (status, outcome) in slow {
        assert_eq!(status, StatusCode::OK, "{outcome}");
        assert_eq!(outcome["success"], true, "{outcome}");
    }
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(
        done["tool_result"]["result"]["text"], "code was 4711",
        "{done}"
    );
}

/// Asks a stateless question of `t__ask_code` on a server started with `before`, stops
/// it, starts another on the same database with `after`, and answers the question
/// there: what the answer got, and the second server.
async fn answer_after_a_restart_with(before: &str, after: &str) -> (Value, TestServer) {
    let (dir, path) = write_temp_file("tools.toml", before);
    let options = ServerOptions::default().env("TOOLGATE_TOOLS", &path.to_string_lossy());
    let mut first = TestServer::start_with(options).await;
    let (user, token) = first.new_user("mcp-switched-off").await;
    tools_when_settled(&first, &token, &["t"]).await;
    let conversation = first.new_conversation(&token).await;
    let (_, asked) = first
        .execute_tool(&token, &conversation, "t__ask_code", "call_code", json!({}))
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let request = asked["user_input_request"].clone();
    first.terminate().await.expect("stops");
    drop(dir);

    let (dir, path) = write_temp_file("tools.toml", after);
    let second = TestServer::start_with(
        ServerOptions {
            database_url: Some(first.database_url.clone()),
            ..ServerOptions::default()
        }
        .env("TOOLGATE_TOOLS", &path.to_string_lossy()),
    )
    .await;
    let token = second.token(&user).await;
    // Answered at once: the switch holds before the server's tools are listed again.
    let (status, done) = second
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": request["tool_call_id"],
                "user_inputs": {"code": "4711"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}\n{}", second.logs());
    drop(dir);
    (done, second)
}

/// The operator's switch holds for questions asked before it was thrown: answering one
/// of a server switched off since calls nothing, and says why.
#[tokio::test]
async fn a_question_answered_after_its_server_was_switched_off_calls_nothing() {
    let (done, second) = answer_after_a_restart_with(
        &stdio_server("t", STATELESS),
        &stdio_server("t", &format!("{STATELESS}\nenabled = false")),
    )
    .await;
    assert_eq!(done["tool_result"]["success"], false, "{done}");
    assert_eq!(
        done["tool_result"]["error"], "the MCP server `t` is disabled",
        "{done}"
    );
    let toolgate = second.pid().expect("pid");
    assert!(
        test_servers_started_by(toolgate).is_empty(),
        "a disabled server's process was started\n{}",
        second.logs()
    );
}

/// The same for one tool switched off by an overlay while its server stays on.
#[tokio::test]
async fn a_question_answered_after_its_tool_was_switched_off_calls_nothing() {
    let (done, _second) = answer_after_a_restart_with(
        &stdio_server("t", STATELESS),
        &(stdio_server("t", STATELESS)
            + "\n[[tool_overlays]]\nname = \"t__ask_code\"\nenabled = false\n"),
    )
    .await;
    assert_eq!(done["tool_result"]["success"], false, "{done}");
    assert_eq!(
        done["tool_result"]["error"], "the tool `t__ask_code` is disabled",
        "{done}"
    );
}

#[tokio::test]
async fn a_server_that_crashes_is_reconnected_and_meanwhile_its_tools_say_why() {
    let (state, setup, token, conversation) = ready_with_state("", "mcp-comeback").await;
    let server = &setup.server;
    // The process toolgate keeps its catalogue with (no call has started another yet)
    // dies of a signal, and the server stays down until the checks below are done.
    let refuse_start = state.0.join(tests::mcp_server::REFUSE_START);
    std::fs::write(&refuse_start, b"down").expect("marker");
    let toolgate = server.pid().expect("pid");
    let children = test_servers_started_by(toolgate);
    assert_eq!(children.len(), 1, "{children:?}");
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &children[0].to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());

    // Down: the server and its tools say why, and a call fails with those words.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let tools = loop {
        let (_, tools) = server.send("GET", "/api/tools", Some(&token), None).await;
        if server_info(&tools, "t")["status"] == "unavailable" {
            break tools;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never marked down: {tools}"
        );
        // Ten a second: well within the rate limit.
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (_, offline) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_while_down",
            json!({"text": "anyone there?"}),
        )
        .await;
    let echo = tool(&tools, "t__echo");
    assert_eq!(echo["available"], false, "{echo}");
    let reason = echo["unavailable_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("`t`"), "{echo}");
    assert_eq!(offline["success"], false, "{offline}");
    assert!(
        offline["error"]
            .as_str()
            .unwrap_or_default()
            .contains("`t`"),
        "{offline}"
    );

    // Back after the backoff: the same tool answers again.
    std::fs::remove_file(&refuse_start).expect("marker gone");
    tools_when(server, &token, |tools| {
        server_info(tools, "t")["status"] == "connected"
            && tool(tools, "t__echo")["available"] == true
    })
    .await;
    let (_, back) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_after",
            json!({"text": "back"}),
        )
        .await;
    assert_eq!(back["success"], true, "{back}");
}

#[tokio::test]
async fn an_elicitation_expires_no_later_than_its_servers_timeout() {
    let (setup, token, conversation) = ready(
        &stdio_server("t", "elicitation_timeout_seconds = 2"),
        "mcp-expiry",
    )
    .await;
    let server = &setup.server;
    let (status, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_everything",
            "call_expiring",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let request = &asked["user_input_request"];
    let at = |key: &str| {
        chrono::DateTime::parse_from_rfc3339(request[key].as_str().unwrap_or_default())
            .unwrap_or_else(|_| panic!("{key} in {request}"))
    };
    let lifetime = at("expires_at") - at("created_at");
    // Two seconds (and the moment between the two clock readings), not the default day.
    assert!(
        lifetime >= chrono::TimeDelta::seconds(2) && lifetime < chrono::TimeDelta::seconds(3),
        "the card lives {lifetime}, the server waits 2 s: {request}"
    );
    let card = request["tool_call_id"].as_str().expect("card").to_owned();

    // Once past it, nothing is pending and an answer is refused.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !server
        .pending_requests(&token, &conversation)
        .await
        .is_empty()
    {
        assert!(tokio::time::Instant::now() < deadline, "still pending");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": card,
                "user_inputs": {"name": "late"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
}

/// A question no user could see is cancelled, never declined: a form no client reads as
/// an elicitation (an object inside it), and a question asked between calls.
#[tokio::test]
async fn questions_no_user_could_see_are_cancelled() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-unseen").await;
    let server = &setup.server;
    let (status, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_nested",
            "call_nested",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    let said = outcome["result"]["text"].as_str().unwrap_or_default();
    assert!(said.contains(r#""action":"cancel""#), "{outcome}");
    // A request toolgate does not answer is refused in toolgate's words: not the name
    // the server chose, which neither comes back nor reaches the log as a line.
    let (_, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_unknown",
            "call_unknown",
            json!({}),
        )
        .await;
    assert_eq!(
        outcome["result"]["text"], "refused: toolgate does not answer this request",
        "{outcome}"
    );
    let logs = server.logs();
    assert!(
        !logs.lines().any(|line| line.starts_with(FORGED_LINE)),
        "{logs}"
    );
    let (_, outcome) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_later",
            "call_later",
            json!({"ms": 300}),
        )
        .await;
    assert_eq!(outcome["result"]["text"], "will ask", "{outcome}");
    // Asked while no call is made (a call made at that moment would take the question).
    wait_for_log(
        server,
        "cancelled an elicitation that came outside any call",
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    for n in 0.. {
        let (_, recalled) = server
            .execute_tool(
                &token,
                &conversation,
                "t__recall",
                &format!("call_recall_{n}"),
                json!({}),
            )
            .await;
        if recalled["result"]["text"] == "you kept later: cancel" {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{recalled}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
}

/// A question asked as its call returns, stored too late for the call's end to end it,
/// is ended all the same: no card is left open for a call that is over.
#[tokio::test]
async fn a_question_asked_as_its_call_returns_leaves_no_card_open() {
    let (setup, token, conversation) = ready(&stdio_server("t", ""), "mcp-as-it-returns").await;
    let server = &setup.server;
    // The question and the result cross in flight: some rounds store the question before
    // the call's end, some after.
    for round in 0..8 {
        let (status, outcome) = server
            .execute_tool(
                &token,
                &conversation,
                "t__ask_as_it_returns",
                &format!("call_returns_{round}"),
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{outcome}");
    }
    pending_when(server, &token, &conversation, <[Value]>::is_empty).await;
}

/// One call may ask 20 questions; one past them is cancelled at once, never declined
/// (no user saw it), and never becomes a card.
#[tokio::test]
async fn a_question_past_the_most_one_call_may_ask_is_cancelled() {
    // Through a run, which takes the call's result whichever answer comes last.
    let (setup, _llm) = mock_model_setup(
        vec![
            MockReply::ToolCalls(vec![call(
                "call_many",
                "t__ask_at_once",
                json!({"count": 21}),
            )]),
            MockReply::Text("Understood.".into()),
        ],
        &stdio_server("t", ""),
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-many-questions").await;
    tools_when_settled(server, &token, &["t"]).await;
    let (conversation, run, _) = run_until_card(server, &token).await;
    let cards = pending_when(server, &token, &conversation, |cards| cards.len() >= 20).await;
    assert_eq!(cards.len(), 20, "{cards:?}");
    for card in &cards {
        answered(server, &token, &card["tool_call_id"], json!({"word": "w"})).await;
    }
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    let results = tool_results(&server.messages(&token, &conversation).await);
    assert_eq!(results.len(), 1, "{results:?}");
    let said = results[0]["result"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let count = |action: &str| said.split(' ').filter(|word| *word == action).count();
    assert_eq!((count("accept"), count("cancel")), (20, 1), "{said}");
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
}

/// Two questions open at once: answering one leaves the call's clock stopped while
/// the other still waits for the user.
#[tokio::test]
async fn a_call_with_two_questions_open_does_not_time_out_while_one_still_waits() {
    let (setup, token, conversation) = ready(
        &stdio_server("t", "call_timeout_seconds = 2"),
        "mcp-two-open",
    )
    .await;
    let server = &setup.server;
    let (status, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_two_at_once",
            "call_two",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let cards = pending_when(server, &token, &conversation, |cards| cards.len() == 2).await;
    let card_of = |what: &str| {
        cards
            .iter()
            .find(|card| card["reason"].as_str().unwrap_or_default().contains(what))
            .map(|card| card["tool_call_id"].clone())
            .unwrap_or_else(|| panic!("no {what} card: {cards:?}"))
    };
    let (first, second) = (card_of("first"), card_of("second"));
    let body = answered(server, &token, &first, json!({"word": "alpha"})).await;
    // The call now waits for the other question, and says so.
    assert_eq!(
        body["tool_result"]["user_input_request"]["tool_call_id"], second,
        "{body}"
    );
    // Longer than the call may work, all of it with the second question open.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (status, done) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": second,
                "user_inputs": {"word": "beta"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}\n{}", server.logs());
    assert_eq!(
        done["tool_result"]["result"]["text"], "words: alpha beta",
        "{done}"
    );
}

/// A server that takes its time once its question expired holds up nobody else's
/// expiry: the sweep that told it goes on.
#[tokio::test]
async fn a_server_slow_after_its_question_expired_does_not_hold_up_other_expiries() {
    let setup = start(&stdio_server(
        "t",
        "elicitation_timeout_seconds = 2\ncall_timeout_seconds = 90",
    ))
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-slow-after").await;
    tools_when_settled(server, &token, &["t"]).await;
    let slow = server.new_conversation(&token).await;
    let (status, asked) = server
        .execute_tool(
            &token,
            &slow,
            "t__ask_then_take_time",
            "call_slow",
            json!({"ms": 60_000}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let card = asked["user_input_request"]["tool_call_id"]
        .as_str()
        .expect("card");
    // Its card expires; the server hears so and then works for a minute.
    until_stored_expired(server, card, Duration::from_secs(15)).await;

    let other = server.new_conversation(&token).await;
    let (status, asked) = server
        .execute_tool(&token, &other, "t__ask_everything", "call_other", json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let card = asked["user_input_request"]["tool_call_id"]
        .as_str()
        .expect("card");
    // Two seconds to live, a pass every few: well under the minute the first holds.
    until_stored_expired(server, card, Duration::from_secs(20)).await;
}

/// Waits until the sweep has expired the card `tool_call_id` (reads leave out an
/// overdue request before the sweep gets to it, so they cannot tell).
async fn until_stored_expired(server: &TestServer, tool_call_id: &str, within: Duration) {
    use sqlx::Row;
    let mut db = server.db().await;
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let status: String =
            sqlx::query("select status from tool_user_input_requests where tool_call_id = $1")
                .bind(tool_call_id)
                .fetch_one(&mut db)
                .await
                .expect("the request")
                .get("status");
        if status == "expired" {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{tool_call_id} still {status} after {within:?}\n{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn overlays_switch_tools_off_redescribe_them_and_may_lift_an_annotations_approval() {
    let tools = stdio_server("t", "")
        + &stdio_server("off", "enabled = false")
        + r#"
[[tool_overlays]]
name = "t__delete_thing"
requires_approval = false

[[tool_overlays]]
name = "t__echo"
description = "Says it back, word for word"

[[tool_overlays]]
prefix = "t__ask_"
enabled = false
"#;
    let setup = start(&tools).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-overlays").await;
    let listed = tools_when_settled(server, &token, &["t", "off"]).await;

    // A disabled server is listed as such and never started.
    let off = server_info(&listed, "off");
    assert_eq!(off["status"], "disabled", "{off}");
    assert!(
        !listed["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["server"] == "off"),
        "{listed}"
    );
    // The overlay's words replace the server's; a prefix switches tools off.
    let echo = tool(&listed, "t__echo");
    assert_eq!(echo["description"], "Says it back, word for word", "{echo}");
    assert_eq!(echo["origin"], "mcp", "{echo}");
    for name in ["t__ask_everything", "t__ask_password", "t__ask_code"] {
        let asking = tool(&listed, name);
        assert_eq!(asking["enabled"], false, "{asking}");
        assert_eq!(asking["available"], false, "{asking}");
    }
    assert_eq!(echo["enabled"], true, "{echo}");
    // destructiveHint asks for approval unless an overlay says otherwise; so does a tool
    // that does not say it only reads.
    let delete = tool(&listed, "t__delete_thing");
    assert!(delete["requires_approval"].is_null(), "{delete}");
    let unmarked = tool(&listed, "t__unmarked");
    assert!(unmarked["requires_approval"].is_object(), "{unmarked}");

    let conversation = server.new_conversation(&token).await;
    let (status, deleted) = server
        .execute_tool(
            &token,
            &conversation,
            "t__delete_thing",
            "call_delete",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{deleted}");
    assert_ne!(deleted["requires_approval"], true, "{deleted}");
    assert_eq!(deleted["success"], true, "{deleted}");
    let (status, refused) = server
        .execute_tool(
            &token,
            &conversation,
            "t__ask_password",
            "call_ask",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{refused}");
    assert_eq!(
        refused,
        json!({"success": false, "error": "the tool `t__ask_password` is disabled"})
    );
}

/// A server's word that a tool only reads is its own: unless the operator trusts the
/// server, its read-only tool waits for the user's yes like any other.
#[tokio::test]
async fn a_read_only_mark_lifts_approval_only_for_a_trusted_server() {
    let binary = tests::mcp_server::binary().expect("the test MCP server is built with the tests");
    let untrusted = format!(
        "[[mcp_servers]]\nname = \"t\"\ncommand = \"{}\"\n",
        binary.display()
    );
    let setup = start(&untrusted).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-untrusted").await;
    let listed = tools_when_settled(server, &token, &["t"]).await;
    let echo = tool(&listed, "t__echo");
    assert!(echo["requires_approval"].is_object(), "{echo}");
    let conversation = server.new_conversation(&token).await;
    let (status, asked) = server
        .execute_tool(
            &token,
            &conversation,
            "t__echo",
            "call_echo",
            json!({"text": "hello"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{asked}");
    assert_eq!(asked["requires_approval"], true, "{asked}");
    assert!(!asked.to_string().contains("echo: hello"), "{asked}");
}

#[tokio::test]
async fn a_child_gets_its_arguments_and_directory_and_http_its_headers_from_the_environment() {
    let http = tests::mcp_server::serve_http()
        .await
        .expect("HTTP MCP server");
    let directory = TempDir::new("mcp-cwd");
    let tools = stdio_server(
        "t",
        &format!(
            "args = [\"--flag\", \"two words\"]\ncwd = \"{}\"",
            directory.0.display()
        ),
    ) + &http_server(
        "h",
        &http.url,
        "headers = { Authorization = \"Bearer {env.MCP_HTTP_TOKEN}\" }",
    );
    let setup = start_with(
        &tools,
        ServerOptions::default().env("MCP_HTTP_TOKEN", "mcp-token-314"),
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-transports").await;
    let listed = tools_when_settled(server, &token, &["t", "h"]).await;
    assert_eq!(server_info(&listed, "t")["status"], "connected", "{listed}");
    assert_eq!(server_info(&listed, "h")["status"], "connected", "{listed}");

    let conversation = server.new_conversation(&token).await;
    let (_, setup_told) = server
        .execute_tool(
            &token,
            &conversation,
            "t__show_setup",
            "call_setup",
            json!({}),
        )
        .await;
    let text = setup_told["result"]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains(r#"args: ["--flag","two words"]"#),
        "{setup_told}"
    );
    let canonical = directory.0.canonicalize().expect("directory");
    assert!(
        text.ends_with(&format!("cwd: {}", canonical.display())),
        "{setup_told}"
    );
    // The header's value came from toolgate's environment, and never names the variable.
    let seen = http.authorizations();
    assert!(!seen.is_empty(), "no requests reached the HTTP server");
    assert!(
        seen.iter().all(|value| value == "Bearer mcp-token-314"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_live_sessions_question_ends_when_toolgate_stops_and_stays_ended_after_a_restart() {
    let tools = stdio_server("t", "");
    let (dir, path) = write_temp_file("tools.toml", &tools);
    let options = ServerOptions::default().env("TOOLGATE_TOOLS", &path.to_string_lossy());
    let mut first = TestServer::start_with(options).await;
    let (user, token) = first.new_user("mcp-live-restart").await;
    tools_when_settled(&first, &token, &["t"]).await;
    let conversation = first.new_conversation(&token).await;
    let (_, asked) = first
        .execute_tool(
            &token,
            &conversation,
            "t__ask_everything",
            "call_live",
            json!({}),
        )
        .await;
    assert_eq!(asked["requires_user_input"], true, "{asked}");
    let card = asked["user_input_request"]["tool_call_id"]
        .as_str()
        .expect("card")
        .to_owned();

    // The session that waits for the answer goes with the process.
    first.terminate().await.expect("stops");
    let second = TestServer::start_with(
        ServerOptions {
            database_url: Some(first.database_url.clone()),
            ..ServerOptions::default()
        }
        .env("TOOLGATE_TOOLS", &path.to_string_lossy()),
    )
    .await;
    let token = second.token(&user).await;
    assert!(
        second
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
    assert_card_abandoned(
        &second,
        &token,
        &conversation,
        &card,
        "while this was open, so the tool did not finish",
    )
    .await;
    let (status, body) = second
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": card,
                "user_inputs": {"name": "Ada", "colour": "red"}}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    drop(dir);
}

#[tokio::test]
async fn a_server_that_accepts_but_never_answers_is_given_up_on_after_its_connect_timeout() {
    // Accepts connections and reads them, but never says a word.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/mcp", silent.local_addr().expect("address"));
    let holding = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let setup = start(&http_server("silent", &url, "connect_timeout_seconds = 1")).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-silent").await;
    let listed = tools_when_settled(server, &token, &["silent"]).await;
    let info = server_info(&listed, "silent");
    assert_eq!(info["status"], "unavailable", "{info}");
    assert_eq!(
        info["reason"], "the MCP server `silent` did not answer in time",
        "{info}"
    );
    holding.abort();
}

/// The test MCP server processes whose parent is `parent`.
fn test_servers_started_by(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // "pid (comm) state ppid ...": the name may hold spaces, so read after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|ppid| ppid.parse::<u32>().ok());
        let command = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if ppid == Some(parent) && String::from_utf8_lossy(&command).contains("mcp-test-server") {
            found.push(pid);
        }
    }
    found
}

#[tokio::test]
async fn an_overlays_key_argument_drops_the_older_call_of_an_mcp_tool_from_the_context() {
    let args = json!({"text": "the same draft"});
    let (setup, llm) = mock_model_setup(
        vec![
            MockReply::ToolCalls(vec![call("call_old", "t__echo", args.clone())]),
            MockReply::ToolCalls(vec![call("call_new", "t__echo", args)]),
            MockReply::Text("done".into()),
        ],
        &(stdio_server("t", "")
            + "[[tool_overlays]]\nname = \"t__echo\"\nkey_argument = \"text\"\n"),
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-key").await;
    tools_when_settled(server, &token, &["t"]).await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("Echo the draft twice"))
        .await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let requests = llm.requests();
    assert_eq!(requests.len(), 3, "{requests:?}");
    // The second request still had the first call: it was the newest then.
    assert!(requests[1]["messages"].to_string().contains("call_old"));
    let last = requests[2]["messages"].to_string();
    assert!(!last.contains("call_old"), "the older call is gone: {last}");
    assert!(last.contains("call_new"), "{last}");
}

/// What `t__archive_things` was called with, from its answer.
fn archived_with(outcome: &Value) -> Value {
    outcome["result"]["text"]
        .as_str()
        .and_then(|text| text.strip_prefix("archived with "))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(|| panic!("not the tool's echo: {outcome}"))
}

/// `t__archive_things` called with `arguments` in a new conversation: the outcome.
async fn archive(server: &TestServer, token: &str, id: &str, arguments: Value) -> Value {
    let conversation = server.new_conversation(token).await;
    let (status, outcome) = server
        .execute_tool(token, &conversation, "t__archive_things", id, arguments)
        .await;
    assert_eq!(status, StatusCode::OK, "{outcome}");
    outcome
}

/// What a call leaves out, an MCP tool's server fills in from its schema's defaults:
/// the approval card shows those values and the call is made with exactly them, so the
/// user approves what runs. A default that breaks the server's own schema is not
/// written out, and nothing the model sent is replaced.
#[tokio::test]
async fn the_approval_card_shows_and_the_call_sends_the_servers_defaults() {
    let setup = start(&stdio_server("t", "")).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-defaults").await;
    tools_when_settled(server, &token, &["t"]).await;
    let waiting = archive(
        server,
        &token,
        "call_archive",
        json!({"older_than_days": 7}),
    )
    .await;
    assert_eq!(waiting["requires_approval"], true, "{waiting}");
    let card = &waiting["approval_request"];
    let shown = json!({"older_than_days": 7, "include_shared": true});
    assert_eq!(card["tool_args"], shown, "{card}");
    // The server's description of an argument, shown beside it, hides nothing.
    assert_eq!(
        card["arguments_schema"]["properties"]["label"]["description"], "A label ⟨U+202E⟩lebal",
        "{card}"
    );
    let (status, approved) = server
        .action(
            &token,
            json!({"action": "submit_decision", "tool_call_id": "call_archive",
                "decision": "approve", "arguments_digest": card["arguments_digest"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(
        archived_with(&approved["tool_result"]),
        shown,
        "the server got what the user approved"
    );

    // The user's edit runs as edited: a default it leaves out is not written back in
    // (which would break the approval's digest).
    let waiting = archive(server, &token, "call_archive_edit", json!({})).await;
    let card = &waiting["approval_request"];
    let edited = json!({"older_than_days": 3});
    let (status, approved) = server
        .action(
            &token,
            json!({"action": "submit_decision", "tool_call_id": "call_archive_edit",
                "decision": "edit", "arguments": edited,
                "arguments_digest": card["arguments_digest"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["tool_result"]["success"], true, "{approved}");
    assert_eq!(archived_with(&approved["tool_result"]), edited);

    // An argument named like a declared one but not as it (`include_ſhared` for
    // `include_shared`) is refused: a server reading names loosely would take it for
    // that one, and one reading them strictly would apply its default, `true`, while
    // the card said `false`.
    let refused = archive(
        server,
        &token,
        "call_archive_long_s",
        json!({"include_ſhared": false}),
    )
    .await;
    assert_eq!(refused["success"], false, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|error| error.contains("`include_shared` and `include_ſhared`")),
        "{refused}"
    );
    assert!(refused.get("approval_request").is_none(), "{refused}");
}

/// `t__tidy_things` waits for the user's yes only when `mode` is `delete`, which its
/// server's schema gives as the default.
const TIDY_WAITS_TO_DELETE: &str = r#"
[[tool_overlays]]
name = "t__tidy_things"
requires_approval = { when = [{ field = "mode", equals = "delete" }] }
"#;

/// A tool that waits for the user's yes only when `mode` is `delete`, its server's
/// default: a `null` the model sends for it, which the server reads as left out, is
/// asked about, the card shows the default it stands for, and that is what runs.
#[tokio::test]
async fn a_null_that_its_server_reads_as_a_default_needing_approval_is_asked_about() {
    let tools = stdio_server("t", "") + TIDY_WAITS_TO_DELETE;
    let setup = start(&tools).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-null-default").await;
    tools_when_settled(server, &token, &["t"]).await;
    let conversation = server.new_conversation(&token).await;
    let tidy = |id: &'static str, arguments: Value| {
        let (server, token, conversation) = (server, &token, &conversation);
        async move {
            let (status, outcome) = server
                .execute_tool(token, conversation, "t__tidy_things", id, arguments)
                .await;
            assert_eq!(status, StatusCode::OK, "{outcome}");
            outcome
        }
    };
    // Archiving runs at once; deleting, said or left out, waits.
    let ran = tidy("call_archive", json!({"mode": "archive"})).await;
    assert_eq!(ran["result"]["text"], "tidied: archive", "{ran}");
    let waiting = tidy("call_left_out", json!({})).await;
    assert_eq!(waiting["requires_approval"], true, "{waiting}");
    assert_eq!(
        waiting["approval_request"]["tool_args"],
        json!({"mode": "delete"})
    );
    let waiting = tidy("call_null", json!({"mode": null})).await;
    assert_eq!(waiting["requires_approval"], true, "{waiting}");
    let card = &waiting["approval_request"];
    assert_eq!(card["tool_args"], json!({"mode": "delete"}), "{card}");
    let (status, approved) = server
        .action(
            &token,
            json!({"action": "submit_decision", "tool_call_id": "call_null",
                "decision": "approve", "arguments_digest": card["arguments_digest"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["tool_result"]["result"]["text"], "tidied: delete");
}

/// A value its server reads as left out (`args.mode || "delete"`: empty, blank, not a
/// text) for an argument whose default needs approval: the model cannot slip the
/// default past the gate with it. The call waits, sent as written, the card names the
/// default the server may use; what runs is what the user approved.
#[tokio::test]
async fn a_value_its_server_reads_as_a_default_needing_approval_is_asked_about() {
    let tools = stdio_server("t", "") + TIDY_WAITS_TO_DELETE;
    let setup = start(&tools).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-empty-default").await;
    tools_when_settled(server, &token, &["t"]).await;
    let conversation = server.new_conversation(&token).await;
    for (index, empty) in [
        json!(""),
        json!(" "),
        json!(false),
        json!(true),
        json!(0),
        json!(1),
        json!([]),
        json!(["archive"]),
        json!({}),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("call_empty_{index}");
        let (status, waiting) = server
            .execute_tool(
                &token,
                &conversation,
                "t__tidy_things",
                &id,
                json!({"mode": empty}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{waiting}");
        assert_eq!(
            waiting["requires_approval"], true,
            "{empty} ran unasked: {waiting}"
        );
        let card = &waiting["approval_request"];
        assert_eq!(card["tool_args"], json!({"mode": empty}), "{card}");
        // Toolgate's words, apart from the operator's reason.
        let note = card["note"].as_str().unwrap_or_default();
        assert!(
            note.contains(&format!("`mode` is sent as {empty}"))
                && note.contains(r#"the default its schema gives: "delete""#),
            "{card}"
        );
        assert!(
            !card["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("`mode`"),
            "{card}"
        );
    }
    // Approved, it runs as the server reads it: the user said yes to that.
    let (_, waiting) = server
        .execute_tool(
            &token,
            &conversation,
            "t__tidy_things",
            "call_empty_approved",
            json!({"mode": ""}),
        )
        .await;
    let (status, approved) = server
        .action(
            &token,
            json!({"action": "submit_decision", "tool_call_id": "call_empty_approved",
                "decision": "approve",
                "arguments_digest": waiting["approval_request"]["arguments_digest"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approved}");
    assert_eq!(approved["tool_result"]["result"]["text"], "tidied: delete");

    // A call that waits anyway (every call of a destructive tool) says so too: the
    // card shows `false`, which its server may run as `true`.
    let waiting = archive(
        server,
        &token,
        "call_archive_unshared",
        json!({"include_shared": false}),
    )
    .await;
    let note = waiting["approval_request"]["note"]
        .as_str()
        .unwrap_or_default();
    assert!(
        note.contains(
            "`include_shared` is sent as false, which its server may read as left out and \
             run with the default its schema gives: true"
        ),
        "{waiting}"
    );
}

/// A call that runs without waiting keeps the arguments as the model sent them: only
/// a call the user is to approve gets the server's defaults written out.
#[tokio::test]
async fn a_call_that_needs_no_approval_is_sent_as_the_model_wrote_it() {
    let tools = stdio_server("t", "")
        + r#"
[[tool_overlays]]
name = "t__archive_things"
requires_approval = false
"#;
    let setup = start(&tools).await;
    let server = &setup.server;
    let (_, token) = server.new_user("mcp-defaults-no-approval").await;
    tools_when_settled(server, &token, &["t"]).await;
    let ran = archive(server, &token, "call_archive", json!({"label": "old"})).await;
    assert_eq!(ran["success"], true, "{ran}");
    assert_eq!(archived_with(&ran), json!({"label": "old"}));
}
