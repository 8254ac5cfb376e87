//! The agent runtime over HTTP and SSE: the run loop with the offline model and with a
//! mock OpenAI-compatible endpoint, the exact request bodies each middleware produces,
//! suspend → submit → resume, cancel, expiry, restarts and provider errors.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{MockHttp, MockLlm, MockReply, ServerOptions, TempDir, TestServer, write_temp_file};

const TOOLS: &str = r#"
[[tools]]
name = "quickbooks_profit_and_loss"
description = "Get the QuickBooks Profit and Loss (P&L) report for a period"
kind = "http"
key_argument = "start_date"
parameters = { type = "object", properties = { start_date = { type = "string" }, end_date = { type = "string" } }, required = ["start_date", "end_date"] }
[tools.requires_user_input]
reason = "QuickBooks API requests require your Company ID (Realm ID)"
save_for_session = true
fields = [ { name = "quickbooks_realm_id", type = "text", validation = "^[0-9]{10,20}$" } ]
[tools.http]
allow_private_networks = true
url = "{env.MOCK_BASE}/v3/company/{quickbooks_realm_id}/reports/ProfitAndLoss?start_date={start_date}&end_date={end_date}"

[[tools]]
name = "notify"
description = "Tell the team"
kind = "http"
requires_approval = false
[tools.http]
allow_private_networks = true
method = "POST"
url = "{env.MOCK_BASE}/notify"
body = { asked = "{context.original_user_request}", conversation = "{context.conversation_id}" }
"#;

const REALM: &str = "9130346988354456";

/// A server whose model is a scripted mock and whose http tools call a mock API.
pub(crate) struct Setup {
    pub(crate) server: TestServer,
    pub(crate) llm: MockLlm,
    pub(crate) api: MockHttp,
    _tools: TempDir,
}

async fn with_mock_model(script: Vec<MockReply>, extra: &[(&str, &str)]) -> Setup {
    with_tools_and_mock_model(TOOLS, script, extra).await
}

/// A server with the tools file `tools` (`{env.MOCK_BASE}` is the mock API) and a mock
/// model that answers with `script`; `extra` are more environment variables.
pub(crate) async fn with_tools_and_mock_model(
    tools: &str,
    script: Vec<MockReply>,
    extra: &[(&str, &str)],
) -> Setup {
    let llm = MockLlm::start(script).await;
    let api = MockHttp::start().await;
    let (dir, path) = write_temp_file("tools.toml", tools);
    let mut options = ServerOptions::default()
        .env("TOOLGATE_TOOLS", &path.to_string_lossy())
        .env("MOCK_BASE", &api.base)
        .env("TOOLGATE_LLM_BASE_URL", &llm.base)
        .env("TOOLGATE_LLM_API_KEY", "sk-test-key")
        .env("TOOLGATE_LLM_MODEL", "main-x");
    for (name, value) in extra {
        options = options.env(name, value);
    }
    Setup {
        server: TestServer::start_with(options).await,
        llm,
        api,
        _tools: dir,
    }
}

fn example_tools() -> String {
    concat!(env!("CARGO_MANIFEST_DIR"), "/../tools.example.toml").to_owned()
}

/// A server with the offline model and the example tools in demo mode. QuickBooks is
/// the server's own demo endpoint, so its port must be known before it starts.
async fn offline_server(extra: &[(&str, &str)]) -> TestServer {
    offline_server_on(
        tests::free_port().expect("free port"),
        ServerOptions::default(),
        extra,
    )
    .await
}

async fn offline_server_on(
    port: u16,
    options: ServerOptions,
    extra: &[(&str, &str)],
) -> TestServer {
    let mut options = options
        .env("TOOLGATE_TOOLS", &example_tools())
        .env("TOOLGATE_DEMO", "1")
        .env(
            "QUICKBOOKS_BASE_URL",
            &format!("http://127.0.0.1:{port}/demo/quickbooks"),
        )
        .env("QUICKBOOKS_ACCESS_TOKEN", "demo");
    for (name, value) in extra {
        options = options.env(name, value);
    }
    TestServer::start_on(options, port).await
}

fn call(id: &str, name: &str, arguments: Value) -> (String, String, Value) {
    (id.to_owned(), name.to_owned(), arguments)
}

fn system_blocks(request: &Value) -> Vec<String> {
    request["messages"][0]["content"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(|p| p["text"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// A user, their conversation, and a run asking for the P&L that now waits for the
/// company id.
async fn waiting_pl_run(server: &TestServer, prefix: &str) -> (String, String, String) {
    let (_, token) = server.new_user(prefix).await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(
            &token,
            &conversation,
            json!("Get my P&L report for Q1 2025"),
        )
        .await;
    server
        .run_reaches(&token, &conversation, &run, &["waiting_for_input"])
        .await;
    (token, conversation, run)
}

/// Gives the conversation the company id the way a user does: through a card.
async fn remember_realm(server: &TestServer, token: &str, conversation: &str) {
    let (status, asked) = server
        .send(
            "POST",
            "/api/tools/execute",
            Some(token),
            Some(json!({"conversation_id": conversation, "tool_name": "quickbooks_profit_and_loss",
                "tool_call_id": "call_setup", "arguments": {"start_date": "2025-01-01", "end_date": "2025-03-31"}})),
        )
        .await;
    assert_eq!(asked["requires_user_input"], true, "{status} {asked}");
    let (status, done) = server
        .action(
            token,
            json!({"action": "submit_response", "tool_call_id": "call_setup",
                "user_inputs": {"quickbooks_realm_id": REALM}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{done}");
}

#[tokio::test]
async fn offline_model_carries_the_seed_demo_over_http_and_sse() {
    let server = offline_server(&[]).await;
    let (_, token) = server.new_user("demo").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(
            &token,
            &conversation,
            json!("Get my P&L report for Q1 2025"),
        )
        .await;
    let events = server
        .events_until(&token, &conversation, 0, Duration::from_secs(20), |e| {
            e["type"] == "input_requested"
        })
        .await;
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    for kind in [
        "message_added",
        "run_started",
        "text_delta",
        "tool_call_started",
        "input_requested",
    ] {
        assert!(kinds.contains(&kind), "{kind} in {kinds:?}");
    }
    let request = &events.last().expect("event")["request"];
    assert_eq!(request["fields"][0]["name"], "quickbooks_realm_id");
    assert_eq!(request["tool_args"]["start_date"], "2025-01-01");
    let waiting = server
        .run_reaches(&token, &conversation, &run, &["waiting_for_input"])
        .await;
    assert_eq!(waiting["status"], "waiting_for_input");

    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": request["tool_call_id"],
            "user_inputs": {"quickbooks_realm_id": REALM}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let messages = server.messages(&token, &conversation).await;
    let answer = messages.last().expect("answer");
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["model"], "toolgate-offline");
    let text = answer["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.starts_with("(offline model)"), "{text}");
    assert!(text.contains("net income $"), "{text}");

    // Asking again in the same conversation uses the remembered company id.
    let again = server
        .start_run(
            &token,
            &conversation,
            json!("Get my P&L report for Q2 2025"),
        )
        .await;
    let done = server.run_finished(&token, &conversation, &again).await;
    assert_eq!(done["status"], "completed");
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn a_second_message_while_a_run_is_active_is_a_409() {
    let server = offline_server(&[]).await;
    let (token, conversation, _) = waiting_pl_run(&server, "busy").await;
    let (status, body) = server
        .post_message(&token, &conversation, json!("hello?"))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "run_active");
    let (_, detail) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}"),
            Some(&token),
            None,
        )
        .await;
    assert_eq!(detail["active_run"]["status"], "waiting_for_input");
}

#[tokio::test]
async fn cancelling_tells_the_model_and_the_run_finishes() {
    let server = offline_server(&[]).await;
    let (token, conversation, run) = waiting_pl_run(&server, "cancel").await;
    let request = server
        .pending_requests(&token, &conversation)
        .await
        .remove(0);
    let (status, _) = server
        .action(
            &token,
            json!({"action": "cancel_request", "tool_call_id": request["tool_call_id"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed");
    let messages = server.messages(&token, &conversation).await;
    let text = messages.last().expect("answer")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        text.contains("You cancelled the request for input"),
        "{text}"
    );
}

#[tokio::test]
async fn an_expired_request_resumes_the_run_with_that_news() {
    let server = offline_server(&[("TOOLGATE_INPUT_TTL", "1s")]).await;
    let (_, token) = server.new_user("expiry").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(
            &token,
            &conversation,
            json!("Get my P&L report for Q1 2025"),
        )
        .await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    let messages = server.messages(&token, &conversation).await;
    let text = messages.last().expect("answer")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("expired"), "{text}");
}

#[tokio::test]
async fn a_waiting_run_resumes_after_a_server_restart() {
    let port = tests::free_port().expect("free port");
    let mut first = offline_server_on(port, ServerOptions::default(), &[]).await;
    let (user, token) = first.new_user("restart").await;
    let conversation = first.new_conversation(&token).await;
    let run = first
        .start_run(
            &token,
            &conversation,
            json!("Get my P&L report for Q1 2025"),
        )
        .await;
    first
        .run_reaches(&token, &conversation, &run, &["waiting_for_input"])
        .await;
    let request = first
        .pending_requests(&token, &conversation)
        .await
        .remove(0);
    let first_database = first.same_database();
    first.terminate().await.expect("stopped");
    drop(first);

    let second = offline_server_on(port, first_database, &[]).await;
    let token = second.token(&user).await;
    let (status, _) = second
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": request["tool_call_id"],
            "user_inputs": {"quickbooks_realm_id": REALM}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let done = second.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test]
async fn a_run_whose_server_died_mid_step_is_marked_failed() {
    let llm_script = vec![MockReply::Hang(Duration::from_secs(60))];
    let setup = with_mock_model(llm_script, &[("TOOLGATE_RUN_LEASE", "1s")]).await;
    let mut server = setup.server;
    let (user, token) = server.new_user("crash").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("hello"))
        .await;
    // Wait until the model call is under way, then kill the server without warning.
    for _ in 0..100 {
        if !setup.llm.requests().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill().await;

    let second =
        TestServer::start_with(server.same_database().env("TOOLGATE_RUN_LEASE", "1s")).await;
    let token = second.token(&user).await;
    let failed = second.run_finished(&token, &conversation, &run).await;
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains("server stopped"),
        "{failed}"
    );
    // The conversation is usable again.
    let (_, detail) = second
        .send(
            "GET",
            &format!("/api/conversations/{conversation}"),
            Some(&token),
            None,
        )
        .await;
    assert!(detail["active_run"].is_null(), "{detail}");
}

#[tokio::test]
async fn the_mock_endpoint_flow_suspends_resumes_and_sees_the_original_request_on_step_two() {
    let script = vec![
        MockReply::ToolCalls(vec![call(
            "call_qb1",
            "quickbooks_profit_and_loss",
            json!({"start_date": "2025-01-01", "end_date": "2025-03-31"}),
        )]),
        MockReply::Text("Your Q1 net income is positive.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (user, token) = server.new_user("mock").await;
    let conversation = server.new_conversation(&token).await;
    let question = "How did Q1 2025 go for us?";
    let run = server
        .start_run(&token, &conversation, json!(question))
        .await;
    server
        .run_reaches(&token, &conversation, &run, &["waiting_for_input"])
        .await;
    let (status, body) = server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": "call_qb1",
            "user_inputs": {"quickbooks_realm_id": REALM}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["tool_result"]["success"], true);
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");

    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1];
    assert_eq!(second["model"], "main-x");
    assert_eq!(second["stream"], true);
    let system = system_blocks(second).join("");
    // The question is the last user message; the system message does not repeat it.
    assert!(!system.contains(question), "{system}");
    assert!(
        second["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .any(|m| m["role"] == "user" && m["content"].to_string().contains(question)),
        "{second}"
    );
    assert!(system.contains(&format!("User id: {user}")), "{system}");
    assert!(
        system.contains(&format!("Conversation id: {conversation}")),
        "{system}"
    );
    let tool_message = second["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("the tool result reaches the model");
    assert_eq!(tool_message["tool_call_id"], "call_qb1");
    assert!(
        tool_message["content"]
            .as_str()
            .unwrap_or_default()
            .contains("\"success\":true")
    );
    let answer = server.messages(&token, &conversation).await;
    assert_eq!(answer.last().expect("answer")["model"], "main-x");
}

#[tokio::test]
async fn system_sections_are_separate_blocks_and_the_users_message_is_untouched() {
    let setup = with_mock_model(vec![MockReply::Text("noted".into())], &[]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("sections").await;
    let conversation = server.new_conversation(&token).await;
    let (status, reply) = server
        .post_message(
            &token,
            &conversation,
            json!("/remember I prefer metric units"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert_eq!(
        reply["reply"]["content"][0]["text"],
        "I will remember: I prefer metric units"
    );
    let text = "  What is the weather like?  ";
    let run = server.start_run(&token, &conversation, json!(text)).await;
    server.run_finished(&token, &conversation, &run).await;
    let request = &setup.llm.requests()[0];
    let blocks = system_blocks(request);
    assert!(blocks.len() >= 4, "{blocks:#?}");
    assert!(
        !blocks[0].starts_with('\n'),
        "no blank line before the first block"
    );
    for block in &blocks[1..] {
        assert!(
            block.starts_with("\n\n") && !block.starts_with("\n\n\n"),
            "{block:?}"
        );
    }
    assert!(blocks.iter().any(|b| b.contains("- I prefer metric units")));
    assert!(blocks.iter().any(|b| b.contains("Tool instructions")));
    // The chat command and its reply stay out of the model's context; the user's own
    // message arrives as stored.
    let messages = request["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "text", "text": text.trim()}])
    );
}

/// A model that gives two calls of one reply the same id has neither run: each is
/// answered as a failed call the model can correct, no card is left, and the run goes on.
#[tokio::test]
async fn a_tool_call_id_given_twice_in_one_reply_runs_neither_call() {
    let script = vec![
        MockReply::ToolCalls(vec![
            call(
                "call_same",
                "quickbooks_profit_and_loss",
                json!({"start_date": "2025-01-01", "end_date": "2025-03-31"}),
            ),
            call(
                "call_same",
                "quickbooks_profit_and_loss",
                json!({"start_date": "2025-04-01", "end_date": "2025-06-30"}),
            ),
        ]),
        MockReply::Text("Sorry; once more, one id each.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (token, conversation, _) = completed_run(server, "same-id", "Q1 and Q2").await;
    let (status, pending) = server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pending}");
    assert_eq!(pending["requests"], json!([]), "{pending}");
    let told = setup.llm.requests()[1]["messages"].to_string();
    assert_eq!(
        told.matches("more than one call").count(),
        2,
        "each call answered as not run: {told}"
    );
}

/// A model that asks for a flood of calls in one reply (steered by what it read) has
/// the first sixteen run and the rest answered as not run, to be made in a later reply.
#[tokio::test]
async fn a_reply_of_too_many_calls_runs_the_first_sixteen() {
    let calls = (0..19)
        .map(|i| {
            call(
                &format!("call_{i}"),
                "calculator",
                json!({"expression": format!("{i}+1")}),
            )
        })
        .collect();
    let script = vec![
        MockReply::ToolCalls(calls),
        MockReply::Text("Done with what ran.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (_, _, messages) = completed_run(server, "call-flood", "add them all").await;
    let results: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(results.len(), 19, "{messages:#?}");
    let not_run = results
        .iter()
        .filter(|r| r.contains("one reply may make at most 16 calls"))
        .count();
    assert_eq!(not_run, 3, "{results:#?}");
    // The ones that ran are the first sixteen, in the reply's order.
    let told = setup.llm.requests()[1]["messages"].to_string();
    assert_eq!(told.matches("at most 16 calls").count(), 3, "{told}");
    assert!(
        results[..16].iter().all(|r| !r.contains("at most 16")),
        "{results:#?}"
    );
}

/// A reply's calls run a few at a time: a service they all reach sees at most four at
/// once, and more than one.
#[tokio::test]
async fn a_replys_calls_run_four_at_a_time() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (counting, peak) = (now.clone(), most.clone());
    let service = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let base = format!("http://{}", service.local_addr().expect("address"));
    let app = axum::Router::new().route(
        "/slow",
        axum::routing::get(move || {
            let (counting, peak) = (counting.clone(), peak.clone());
            async move {
                let at_once = counting.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(at_once, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                counting.fetch_sub(1, Ordering::SeqCst);
                axum::Json(json!({"ok": true}))
            }
        }),
    );
    tokio::spawn(async move { axum::serve(service, app).await });
    let tools = "[[tools]]\nname = \"slow_read\"\ndescription = \"Reads slowly\"\nkind = \"http\"\n[tools.http]\nurl = \"{env.SLOW_BASE}/slow\"\nallow_private_networks = true\n";
    let calls = (0..10)
        .map(|i| call(&format!("call_{i}"), "slow_read", json!({})))
        .collect();
    let script = vec![MockReply::ToolCalls(calls), MockReply::Text("Read.".into())];
    let setup = with_tools_and_mock_model(tools, script, &[("SLOW_BASE", &base)]).await;
    completed_run(&setup.server, "four-at-once", "read them all").await;
    let most = most.load(Ordering::SeqCst);
    assert!((2..=4).contains(&most), "{most} calls at once");
}

#[tokio::test]
async fn an_older_call_with_the_same_key_and_its_result_are_dropped() {
    let args =
        json!({"start_date": "2025-01-01", "end_date": "2025-03-31", "quickbooks_realm_id": REALM});
    let script = vec![
        MockReply::ToolCalls(vec![call(
            "call_old",
            "quickbooks_profit_and_loss",
            args.clone(),
        )]),
        MockReply::ToolCalls(vec![call("call_new", "quickbooks_profit_and_loss", args)]),
        MockReply::Text("done".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("supersede").await;
    let conversation = server.new_conversation(&token).await;
    // The realm id comes from the user (remembered for the conversation), never from the
    // model's arguments.
    remember_realm(server, &token, &conversation).await;
    let run = server
        .start_run(&token, &conversation, json!("Q1 report twice"))
        .await;
    assert_eq!(
        server.run_finished(&token, &conversation, &run).await["status"],
        "completed"
    );
    let requests = setup.llm.requests();
    assert_eq!(requests.len(), 3);
    let text = requests[2]["messages"].to_string();
    assert!(
        !text.contains("call_old"),
        "the superseded call and its result are gone"
    );
    assert!(text.contains("call_new"));
    let roles: Vec<&str> = requests[2]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter_map(|m| m["role"].as_str())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    // The second request still had the old call: it was the newest then.
    assert!(requests[1]["messages"].to_string().contains("call_old"));
}

#[tokio::test]
async fn images_route_to_the_vision_model_and_become_stubs_once_answered() {
    let extra = [
        ("TOOLGATE_LLM_VISION_MODEL", "vision-x"),
        ("TOOLGATE_LLM_LONG_CONTEXT_MODEL", "long-x"),
        ("TOOLGATE_LONG_CONTEXT_TOKENS", "400"),
    ];
    let setup = with_mock_model(vec![], &extra).await;
    let server = &setup.server;
    let (_, token) = server.new_user("images").await;
    let conversation = server.new_conversation(&token).await;
    let image = "data:image/png;base64,iVBORw0KGgo=";
    let run = server
        .start_run(
            &token,
            &conversation,
            json!([
        {"type": "text", "text": "What is in this picture?"}, {"type": "image", "url": image}]),
        )
        .await;
    server.run_finished(&token, &conversation, &run).await;
    let run = server
        .start_run(&token, &conversation, json!("Thanks. And now?"))
        .await;
    server.run_finished(&token, &conversation, &run).await;
    let run = server
        .start_run(
            &token,
            &conversation,
            json!(format!("Long one: {}", "lorem ipsum ".repeat(300))),
        )
        .await;
    server.run_finished(&token, &conversation, &run).await;

    let requests = setup.llm.requests();
    assert_eq!(requests[0]["model"], "vision-x");
    assert!(requests[0]["messages"].to_string().contains(image));
    assert_eq!(requests[1]["model"], "main-x");
    let second = requests[1]["messages"].to_string();
    assert!(
        !second.contains(image),
        "an answered image is not sent again"
    );
    assert!(second.contains("[image already processed]"));
    assert_eq!(requests[2]["model"], "long-x");
}

/// A message with an image is for the model, even when its words start like a chat
/// command: it starts a run, and the model sees the words and the image.
#[tokio::test]
async fn a_message_with_an_image_is_never_taken_for_a_command() {
    let setup = with_mock_model(vec![], &[]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("image-command").await;
    let conversation = server.new_conversation(&token).await;
    let image = "data:image/png;base64,iVBORw0KGgo=";
    let run = server
        .start_run(
            &token,
            &conversation,
            json!([
        {"type": "text", "text": "/help with this chart"}, {"type": "image", "url": image}]),
        )
        .await;
    server.run_finished(&token, &conversation, &run).await;
    let request = setup
        .llm
        .requests()
        .last()
        .expect("a model request")
        .clone();
    let messages = request["messages"].as_array().expect("messages");
    let last_user = messages
        .iter()
        .rfind(|m| m["role"] == "user")
        .expect("a user message")
        .to_string();
    assert!(last_user.contains("/help with this chart"), "{last_user}");
    assert!(last_user.contains(image), "{last_user}");
}

/// A new user's run of `text` in a new conversation, which must complete: the user's
/// token, the conversation and its messages.
async fn completed_run(
    server: &TestServer,
    prefix: &str,
    text: &str,
) -> (String, String, Vec<Value>) {
    let (_, token) = server.new_user(prefix).await;
    let conversation = server.new_conversation(&token).await;
    let run = server.start_run(&token, &conversation, json!(text)).await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    let messages = server.messages(&token, &conversation).await;
    (token, conversation, messages)
}

/// A server that summarises early (past 250 tokens, keeping 2 messages), whose model
/// answers two runs with a calculator call each, then a text.
async fn summarising_two_runs() -> Setup {
    let args = |q: &str| json!({"expression": q});
    let script = vec![
        MockReply::ToolCalls(vec![call("call_a", "calculator", args("1+1"))]),
        MockReply::Text("First answer.".into()),
        MockReply::ToolCalls(vec![call("call_b", "calculator", args("2+2"))]),
        MockReply::Text("Second answer.".into()),
    ];
    let extra = [
        ("TOOLGATE_SUMMARY_TOKENS", "250"),
        ("TOOLGATE_SUMMARY_KEEP", "2"),
        ("TOOLGATE_MIDDLEWARE", "summarisation"),
    ];
    with_mock_model(script, &extra).await
}

#[tokio::test]
async fn summarisation_replaces_old_turns_and_keeps_tool_pairs_whole() {
    let setup = summarising_two_runs().await;
    let server = &setup.server;
    let (_, token) = server.new_user("summary").await;
    let conversation = server.new_conversation(&token).await;
    let first = format!("add one and one, {}", "with some context ".repeat(80));
    let run = server.start_run(&token, &conversation, json!(first)).await;
    server.run_finished(&token, &conversation, &run).await;
    let run = server
        .start_run(&token, &conversation, json!("now two and two"))
        .await;
    assert_eq!(
        server.run_finished(&token, &conversation, &run).await["status"],
        "completed"
    );

    let requests = setup.llm.requests();
    let summary_request = requests
        .iter()
        .find(|r| system_blocks(r).iter().any(|b| b.starts_with("Summarise")))
        .expect("a summary was asked for");
    assert!(summary_request.get("tools").is_none());
    // The first request is pinned: it stays in context rather than in the summary,
    // which gets the tool call that answered it.
    let summarised = summary_request["messages"].to_string();
    assert!(!summarised.contains("add one and one"), "{summarised}");
    assert!(summarised.contains("call_a"), "{summarised}");
    let last = requests.last().expect("final request");
    let messages = last["messages"].as_array().expect("messages");
    let summary = messages
        .iter()
        .find(|m| m["content"].to_string().contains("THE SUMMARY"))
        .expect("the summary replaces the old turns");
    // The model wrote it from what it read: it goes as the assistant's words, and
    // nothing of it speaks as the system.
    assert_eq!(summary["role"], "assistant");
    assert!(
        messages
            .iter()
            .filter(|m| m["role"] == "system")
            .all(|m| !m["content"].to_string().contains("THE SUMMARY")),
        "{messages:?}"
    );
    let sent = last["messages"].to_string();
    assert!(
        !sent.contains("call_a"),
        "the summarised call is gone: {sent}"
    );
    assert!(
        sent.contains("add one and one"),
        "the first request stays: {sent}"
    );
    assert!(sent.contains("First answer."), "with its answer: {sent}");
    // Every tool result left has its call.
    for message in messages.iter().filter(|m| m["role"] == "tool") {
        let id = message["tool_call_id"].as_str().unwrap_or_default();
        assert!(
            messages
                .iter()
                .any(|m| m["tool_calls"].to_string().contains(id)),
            "orphaned result {id}"
        );
    }
}

#[tokio::test]
async fn context_pipeline_commands_change_what_the_next_call_receives() {
    let setup = with_mock_model(
        vec![],
        &[("TOOLGATE_MIDDLEWARE", "summarisation,context_pipeline")],
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("pipeline").await;
    let conversation = server.new_conversation(&token).await;
    let chats = || -> Vec<Value> {
        setup
            .llm
            .requests()
            .into_iter()
            .filter(|r| {
                !r["messages"][0]
                    .to_string()
                    .contains("Summarise the conversation")
            })
            .collect()
    };
    let summaries = || setup.llm.requests().len() - chats().len();
    // The first request is pinned (never summarised); the filler comes after it.
    let run = server.start_run(&token, &conversation, json!("Hi.")).await;
    server.run_finished(&token, &conversation, &run).await;
    let filler = "background story about sailing boats ".repeat(100);
    let run = server.start_run(&token, &conversation, json!(filler)).await;
    server.run_finished(&token, &conversation, &run).await;

    let (status, shown) = server
        .post_message(&token, &conversation, json!("/context pipeline show"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let shown = shown["reply"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        shown.contains("2. filter (dedupe=true, token_budget=8000)"),
        "{shown}"
    );

    let run = server
        .start_run(&token, &conversation, json!("What about invoices?"))
        .await;
    server.run_finished(&token, &conversation, &run).await;
    assert!(chats()[2]["messages"].to_string().contains("sailing boats"));
    assert_eq!(summaries(), 0, "under the threshold nothing is summarised");

    // A budget under the server's threshold: older turns go into a summary past it.
    let (status, changed) = server
        .post_message(
            &token,
            &conversation,
            json!("/context pipeline config filter token_budget=500"),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let changed = changed["reply"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(changed.contains("token_budget=500"), "{changed}");
    assert!(changed.contains("Past 500 tokens"), "{changed}");
    let run = server
        .start_run(&token, &conversation, json!("What about invoices now?"))
        .await;
    server.run_finished(&token, &conversation, &run).await;
    assert_eq!(summaries(), 1, "the budget asked for a summary");
    let summarised = setup
        .llm
        .requests()
        .into_iter()
        .find(|r| {
            r["messages"][0]
                .to_string()
                .contains("Summarise the conversation")
        })
        .expect("a summary request");
    assert!(
        summarised["messages"].to_string().contains("sailing boats"),
        "the old turn went into the summary"
    );
    let third = chats()[3].clone();
    let sent = third["messages"].to_string();
    assert!(
        !sent.contains("sailing boats"),
        "the old turn is still there"
    );
    assert!(
        sent.contains("Summary of the earlier conversation"),
        "{sent}"
    );
    assert!(sent.contains("Hi.") && sent.contains("What about invoices now?"));

    let (_, bad) = server
        .post_message(
            &token,
            &conversation,
            json!("/context pipeline add nonsense"),
        )
        .await;
    assert!(
        bad["reply"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Unknown stage `nonsense`")
    );
    let (_, removed) = server
        .post_message(
            &token,
            &conversation,
            json!("/context pipeline remove filter"),
        )
        .await;
    assert!(
        removed["reply"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("Not in the pipeline: filter")
    );
    // Without the filter's budget the summary stays: what it holds does not come back.
    let run = server
        .start_run(&token, &conversation, json!("And without the filter?"))
        .await;
    server.run_finished(&token, &conversation, &run).await;
    let fourth = chats()[4]["messages"].to_string();
    assert!(!fourth.contains("sailing boats"));
    assert!(fourth.contains("Summary of the earlier conversation"));
    assert_eq!(summaries(), 1, "under the threshold no new summary");
}

#[tokio::test]
async fn provider_errors_end_the_run_cleanly() {
    let cases = [
        (MockReply::Status(401), "refused the request (401"),
        (MockReply::Malformed, "malformed"),
    ];
    for (reply, expected) in cases {
        let setup = with_mock_model(vec![reply], &[]).await;
        let (_, token) = setup.server.new_user("errors").await;
        let conversation = setup.server.new_conversation(&token).await;
        let run = setup
            .server
            .start_run(&token, &conversation, json!("hello"))
            .await;
        let failed = setup.server.run_finished(&token, &conversation, &run).await;
        assert_eq!(failed["status"], "failed");
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{expected} in {error}");
        // The provider's own words stay in the server's log.
        assert!(!error.contains("mock error"), "{error}");
    }
    // 5xx is retried with backoff, a bounded number of times, then fails.
    let always = vec![MockReply::Status(503); 4];
    let setup = with_mock_model(always, &[]).await;
    let (_, token) = setup.server.new_user("errors").await;
    let conversation = setup.server.new_conversation(&token).await;
    let run = setup
        .server
        .start_run(&token, &conversation, json!("hello"))
        .await;
    let failed = setup.server.run_finished(&token, &conversation, &run).await;
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["error"].as_str().unwrap_or_default().contains("503"),
        "{failed}"
    );
    assert_eq!(setup.llm.requests().len(), 4, "one try and three retries");
    // A 429 followed by success recovers.
    let setup = with_mock_model(
        vec![MockReply::Status(429), MockReply::Text("ok".into())],
        &[],
    )
    .await;
    let (_, token) = setup.server.new_user("errors").await;
    let conversation = setup.server.new_conversation(&token).await;
    let run = setup
        .server
        .start_run(&token, &conversation, json!("hello"))
        .await;
    assert_eq!(
        setup.server.run_finished(&token, &conversation, &run).await["status"],
        "completed"
    );

    // Nothing listening at the configured endpoint.
    let server = TestServer::start_with(
        ServerOptions::default().env("TOOLGATE_LLM_BASE_URL", "http://127.0.0.1:9/v1"),
    )
    .await;
    let (_, token) = server.new_user("errors").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("hello"))
        .await;
    let failed = server.run_finished(&token, &conversation, &run).await;
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains("could not be reached"),
        "{failed}"
    );
    assert!(!server.logs().contains("sk-test-key"));
}

/// An endpoint that goes quiet (before its answer or halfway through it) or answers
/// without end (in text, in one event, in comments, in calls) fails the step within the
/// configured time, saying why, and the conversation takes a new message: a run never
/// waits on the model for ever.
#[tokio::test]
async fn a_model_that_goes_quiet_or_answers_without_end_fails_the_run_and_frees_it() {
    let huge = "many words ".repeat(800_000);
    let cases = [
        (
            MockReply::Hang(Duration::from_secs(600)),
            "stopped answering (nothing for 2 s)",
        ),
        (
            MockReply::Stall("Let me look".into()),
            "stopped answering (nothing for 2 s)",
        ),
        // Comments are no answer, however often they come.
        (MockReply::Murmur, "stopped answering (nothing for 2 s)"),
        // Words, each in time, without end: the answer's own limit ends them.
        (
            MockReply::Drip,
            "took longer than toolgate waits for one (4 s)",
        ),
        (MockReply::Text(huge), "longer than toolgate takes (8 MiB)"),
        // One event without end (past 1 MiB), and endless comments: cut off by size.
        (
            MockReply::RawStream(format!("data: {}", "x".repeat(9 << 20))),
            "malformed",
        ),
        (
            MockReply::RawStream(": still here\n".repeat(3 << 20)),
            "longer than toolgate takes (8 MiB)",
        ),
        // An error said within the answer, in its data or as its type, fails it rather
        // than passing for an empty answer; so does a body with no event in it.
        (
            MockReply::RawStream("data: {\"error\": {\"message\": \"overloaded\"}}\n\n".to_owned()),
            "malformed",
        ),
        (
            MockReply::RawStream("event: error\ndata: overloaded\n\n".to_owned()),
            "malformed",
        ),
        (
            MockReply::RawStream(r#"{"choices": [{"message": {"content": "hi"}}]}"#.to_owned()),
            "malformed",
        ),
        // Calls without end, each a piece of its own.
        (
            MockReply::ToolCalls(
                (0..300)
                    .map(|n| call(&format!("call_{n}"), "calculator", json!({})))
                    .collect(),
            ),
            "malformed",
        ),
    ];
    for (reply, expected) in cases {
        // Short for the drip only: a loaded machine may read 8 MiB for longer.
        let answer_limit = if matches!(reply, MockReply::Drip) {
            "4s"
        } else {
            "60m"
        };
        let setup = with_mock_model(
            vec![reply],
            &[
                ("TOOLGATE_LLM_TIMEOUT", "2s"),
                ("TOOLGATE_LLM_ANSWER_TIMEOUT", answer_limit),
            ],
        )
        .await;
        let server = &setup.server;
        let (_, token) = server.new_user("quiet-model").await;
        let conversation = server.new_conversation(&token).await;
        let started = std::time::Instant::now();
        let run = server
            .start_run(&token, &conversation, json!("hello"))
            .await;
        let failed = server.run_finished(&token, &conversation, &run).await;
        assert_eq!(failed["status"], "failed", "{failed}");
        let error = failed["error"].as_str().unwrap_or_default();
        assert!(error.contains(expected), "{expected} in {error}");
        // A quiet endpoint is given up on after the quiet limit and a dripping one after
        // the answer's, not later; the others end by size, whatever the time (a loaded
        // machine reads 8 MiB slowly).
        if expected.starts_with("stopped answering") || expected.starts_with("took longer") {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{:?}",
                started.elapsed()
            );
        }
        // The conversation is free: the next message runs (the script is used up: "done").
        let run = server
            .start_run(&token, &conversation, json!("again"))
            .await;
        let done = server.run_finished(&token, &conversation, &run).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    // What servers write that is no error: lines ended by a carriage return alone, a
    // keepalive, an `error` that is null, a last event without the blank line after it.
    let chunk = |text: &str| {
        json!({"choices": [{"index": 0, "delta": {"content": text}}], "error": null}).to_string()
    };
    let stream = format!(
        "event: keepalive\rdata: {{}}\r\rdata: {}\r\r: a comment\rdata: {}\r\rdata: [DONE]",
        chunk("Hello "),
        chunk("there")
    );
    let setup = with_mock_model(vec![MockReply::RawStream(stream)], &[]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("quiet-model").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("hello"))
        .await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let messages = server.messages(&token, &conversation).await;
    assert!(
        Value::Array(messages.clone())
            .to_string()
            .contains("Hello there"),
        "{messages:?}"
    );
}

#[tokio::test]
async fn the_event_stream_replays_and_checks_its_token() {
    let server = offline_server(&[]).await;
    let (_, token) = server.new_user("stream").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("what is 6 * 7?"))
        .await;
    server.run_finished(&token, &conversation, &run).await;
    let all = server
        .events_until(&token, &conversation, 0, Duration::from_secs(10), |e| {
            e["type"] == "run_status" && e["run"]["status"] == "completed"
        })
        .await;
    let middle = all[2]["id"].as_i64().expect("id");
    let replay = server
        .events_until(
            &token,
            &conversation,
            middle,
            Duration::from_secs(10),
            |e| e["type"] == "run_status",
        )
        .await;
    assert_eq!(
        replay[0]["id"].as_i64(),
        Some(middle + 1),
        "replay starts after `after`"
    );

    // Last-Event-ID works like `after`.
    let stream_token = server.stream_token(&token, &conversation).await;
    let response = server
        .client
        .get(server.url(&format!(
            "/api/conversations/{conversation}/events?token={stream_token}"
        )))
        .header("last-event-id", middle.to_string())
        .send()
        .await
        .expect("stream");
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.bytes_stream();
    use futures::StreamExt;
    let first = tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .expect("data")
        .expect("chunk")
        .expect("bytes");
    assert!(String::from_utf8_lossy(&first).contains(&format!("id: {}", middle + 1)));

    // A reconnecting EventSource sends `Last-Event-ID` to the URL it first opened: the
    // later of that and `after` is where it is. One that is no event id is refused, not
    // read as "from the start".
    let reopen = |after: i64, last: String| {
        let url = server.url(&format!(
            "/api/conversations/{conversation}/events?token={stream_token}&after={after}"
        ));
        server.client.get(url).header("last-event-id", last).send()
    };
    let response = reopen(all[0]["id"].as_i64().expect("id"), middle.to_string())
        .await
        .expect("stream");
    assert_eq!(response.status(), StatusCode::OK);
    let first = tokio::time::timeout(Duration::from_secs(5), response.bytes_stream().next())
        .await
        .expect("data")
        .expect("chunk")
        .expect("bytes");
    assert!(
        String::from_utf8_lossy(&first).contains(&format!("id: {}", middle + 1)),
        "{}",
        String::from_utf8_lossy(&first)
    );
    for bad in ["abc", "1.5", "99999999999999999999"] {
        let response = reopen(0, bad.to_owned()).await.expect("sent");
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
        let body: Value = response.json().await.expect("json");
        assert!(
            body["error"]["fields"]["Last-Event-ID"].is_string(),
            "{bad}: {body}"
        );
    }

    // A stream token is for that conversation's stream only.
    let other = server.new_conversation(&token).await;
    let (status, _) = server
        .send(
            "GET",
            &format!("/api/conversations/{other}/events?token={stream_token}"),
            None,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = server
        .send("GET", "/api/conversations", Some(&stream_token), None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}/events"),
            None,
            None,
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // Someone else's conversation is not found.
    let (_, stranger) = server.new_user("stranger").await;
    let (status, _) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}/events"),
            Some(&stranger),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        !server.logs().contains(&stream_token),
        "stream tokens stay out of the log"
    );
}

#[tokio::test]
async fn bad_messages_are_refused_with_reasons() {
    let server = offline_server(&[]).await;
    let (_, token) = server.new_user("bad").await;
    let conversation = server.new_conversation(&token).await;
    for content in [
        json!("   "),
        json!([{"type": "image", "url": "file:///etc/passwd"}]),
        json!([]),
    ] {
        let (status, body) = server
            .post_message(&token, &conversation, content.clone())
            .await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{content}: {body}"
        );
        assert!(body["error"]["fields"]["content"].is_string());
    }
    let (status, body) = server.post_message(&token, &conversation, json!(5)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let says = |body: &Value, place: &str, why: &str| {
        body["error"]["fields"][place]
            .as_str()
            .is_some_and(|said| said.starts_with(why))
    };
    assert!(
        says(
            &body,
            "content",
            "invalid type: integer `5`, expected a text or a list of content parts"
        ),
        "{body}"
    );
    // A malformed part is named by its place, with what is wrong with it.
    for (content, place, why) in [
        (
            json!([{"type": "text", "text": "hi"}, {"type": "video", "url": "x"}]),
            "content[1]",
            "unknown variant `video`, expected `text` or `image`",
        ),
        (
            json!([{"type": "text", "text": "hi", "url": "u"}]),
            "content[0]",
            "a text part has `text` and nothing else",
        ),
    ] {
        let (status, body) = server
            .post_message(&token, &conversation, content.clone())
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{content}: {body}");
        assert!(says(&body, place, why), "{content}: {body}");
    }
    let (status, body) = server.post_message(&token, "not-a-uuid", json!("hi")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body["error"]["fields"]["id"].is_string(), "{body}");
    let (status, _) = server
        .post_message(&token, &uuid::Uuid::new_v4().to_string(), json!("hi"))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn tools_get_the_original_request_also_on_later_steps() {
    let script = vec![
        MockReply::ToolCalls(vec![call(
            "call_calc",
            "calculator",
            json!({"expression": "2*21"}),
        )]),
        MockReply::ToolCalls(vec![call("call_notify", "notify", json!({}))]),
        MockReply::Text("Told them.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("context").await;
    let conversation = server.new_conversation(&token).await;
    let question = "Work out 2*21 and tell the team";
    let run = server
        .start_run(&token, &conversation, json!(question))
        .await;
    assert_eq!(
        server.run_finished(&token, &conversation, &run).await["status"],
        "completed"
    );
    let received = setup.api.received();
    assert_eq!(received.len(), 1);
    let body: Value = serde_json::from_str(&received[0].body).expect("json");
    assert_eq!(
        body,
        json!({"asked": question, "conversation": conversation})
    );
}

#[tokio::test]
async fn skills_are_listed_and_read_on_demand() {
    let dir = TempDir::new("toolgate-skills");
    std::fs::create_dir_all(dir.0.join("invoices")).expect("skill folder");
    std::fs::write(
        dir.0.join("invoices/SKILL.md"),
        "name: invoices\ndescription: How to chase unpaid invoices\n\nStep 1: be polite.\n",
    )
    .expect("skill");
    let script = vec![
        MockReply::ToolCalls(vec![call(
            "call_skill",
            "read_skill",
            json!({"name": "invoices"}),
        )]),
        MockReply::Text("Be polite.".into()),
    ];
    let skills = dir.0.to_string_lossy().into_owned();
    let setup = with_mock_model(script, &[("TOOLGATE_SKILLS_DIR", &skills)]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("skills").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("How do I chase an invoice?"))
        .await;
    assert_eq!(
        server.run_finished(&token, &conversation, &run).await["status"],
        "completed"
    );
    let requests = setup.llm.requests();
    let system = system_blocks(&requests[0]).join("");
    assert!(
        system.contains("- invoices: How to chase unpaid invoices"),
        "{system}"
    );
    assert!(
        !system.contains("be polite"),
        "the skill's body is read on demand only"
    );
    assert!(requests[0]["tools"].to_string().contains("read_skill"));
    assert!(
        requests[1]["messages"]
            .to_string()
            .contains("Step 1: be polite.")
    );
}

/// As if the server stopped right after the user's answer was committed: the run's
/// requests are settled ten minutes ago, but the run, idle for a minute, never heard of
/// it.
async fn strand(db: &mut sqlx::PgConnection, run_id: uuid::Uuid) {
    sqlx::query(
        "update tool_user_input_requests set status = 'completed',
             completed_at = now() - interval '10 minutes',
             user_inputs = '{\"quickbooks_realm_id\": \"9130346988354456\"}' where run_id = $1",
    )
    .bind(run_id)
    .execute(&mut *db)
    .await
    .expect("settle");
    sqlx::query("update agent_runs set updated_at = now() - interval '1 minute' where id = $1")
        .bind(run_id)
        .execute(&mut *db)
        .await
        .expect("age");
}

#[tokio::test]
async fn a_run_left_waiting_with_nothing_to_wait_for_is_resumed() {
    let server = offline_server(&[]).await;
    let (token, conversation, run) = waiting_pl_run(&server, "stranded").await;
    // As if the server stopped right after the user's answer was committed: the request
    // is settled, but the run never heard of it.
    let mut db = server.db().await;
    let run_id = uuid::Uuid::parse_str(&run).expect("uuid");
    strand(&mut db, run_id).await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let messages = server.messages(&token, &conversation).await;
    let text = messages.last().expect("answer")["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(text.contains("may or may not have run"), "{text}");
}

/// The same, when the model gave the call an id it had used before: the earlier call's
/// result is not this one's, and the user hears that the call may have run.
#[tokio::test]
async fn an_earlier_result_under_the_same_id_does_not_count_as_the_requests() {
    let server = offline_server(&[]).await;
    let (token, conversation, run) = waiting_pl_run(&server, "stranded-reused").await;
    let mut db = server.db().await;
    let run_id = uuid::Uuid::parse_str(&run).expect("uuid");
    // An earlier tool result carrying the request's tool_call_id, from before it.
    sqlx::query(
        "insert into messages (id, conversation_id, user_id, seq, role, content, created_at)
         select gen_random_uuid(), q.conversation_id, q.user_id, -1, 'tool',
                jsonb_build_array(jsonb_build_object('type', 'tool_result',
                    'tool_call_id', q.tool_call_id, 'name', q.tool_name,
                    'outcome', jsonb_build_object('success', false, 'error', 'bad arguments'))),
                q.created_at - interval '1 minute'
         from tool_user_input_requests q where q.run_id = $1",
    )
    .bind(run_id)
    .execute(&mut db)
    .await
    .expect("an earlier result");
    strand(&mut db, run_id).await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let messages = server.messages(&token, &conversation).await;
    let said = serde_json::to_string(&messages).unwrap_or_default();
    assert!(said.contains("may or may not have run"), "{said}");
}

/// The text streamed since the last flush is written with the answer: the last
/// `text_delta` and the answer's `message_added` share one transaction (Postgres's
/// `now()` is the transaction's start, so they carry the same time), and the deltas
/// still add up to the answer, in order before it.
#[tokio::test]
async fn the_last_streamed_text_is_written_in_the_answers_transaction() {
    let server = offline_server(&[]).await;
    let (_, token) = server.new_user("last-delta").await;
    let conversation = server.new_conversation(&token).await;
    let run = server
        .start_run(&token, &conversation, json!("hello there"))
        .await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");

    let mut db = server.db().await;
    let events: Vec<(i64, String, chrono::DateTime<chrono::Utc>, Value)> = sqlx::query_as(
        "select id, kind, created_at, data from run_events where run_id = $1::uuid order by id",
    )
    .bind(&run)
    .fetch_all(&mut db)
    .await
    .expect("the run's events");
    let deltas: Vec<_> = events.iter().filter(|e| e.1 == "text_delta").collect();
    let answer = events
        .iter()
        .rfind(|e| e.1 == "message_added" && e.3["message"]["role"] == "assistant")
        .expect("the answer's event");
    let last = deltas.last().expect("streamed text");
    assert!(last.0 < answer.0, "the text comes before the answer");
    assert_eq!(
        last.2, answer.2,
        "the last text delta was written in a transaction of its own"
    );
    let streamed: String = deltas
        .iter()
        .filter_map(|e| e.3["delta"].as_str())
        .collect();
    assert_eq!(
        streamed,
        answer.3["message"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
    );
}

/// A NUL character cannot be stored: a model (confused, or steered by what it read) that
/// puts one in a tool call's arguments or its text gets a failed call to correct, and
/// the run goes on; it must not fail the run.
#[tokio::test]
async fn a_nul_in_a_models_tool_call_is_a_failed_call_not_a_failed_run() {
    let script = vec![
        MockReply::ToolCalls(vec![call(
            "call_nul",
            "calculator",
            json!({"expression": "1+1\u{0}"}),
        )]),
        MockReply::Text("Sorry about that.".into()),
        MockReply::Text("Two\u{0}.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (token, conversation, messages) =
        completed_run(server, "nul-call", "add one and one").await;
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"][0]["outcome"].clone())
        .unwrap_or_else(|| panic!("a result for the call: {messages:?}"));
    assert_eq!(result["success"], false, "{result}");
    assert!(
        result["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("not run"),
        "{result}"
    );

    // In the text, the NUL is kept as a stand-in and the answer stands.
    let run = server
        .start_run(&token, &conversation, json!("and now?"))
        .await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
    let messages = server.messages(&token, &conversation).await;
    let last = messages.last().map(|m| m["content"][0]["text"].clone());
    assert_eq!(last, Some(json!("Two\u{fffd}.")));
}

/// What a model writes that cannot stand as a call (an id no card could be answered by,
/// arguments cut off mid-JSON, arguments nested too deep to read back) is a failed call
/// the model is told about: no card nobody can answer, no failed run, and the
/// conversation still opens.
#[tokio::test]
async fn a_call_that_cannot_stand_is_refused_and_the_run_goes_on() {
    let mut deep = json!("bottom");
    for _ in 0..120 {
        deep = json!({ "d": deep });
    }
    let period = json!({"start_date": "2026-01-01", "end_date": "2026-01-31"});
    let script = vec![
        MockReply::ToolCalls(vec![call("call\n1", "quickbooks_profit_and_loss", period)]),
        MockReply::RawToolCall(
            "call_cut".into(),
            "notify".into(),
            r#"{"expression": "1+"#.into(),
        ),
        MockReply::ToolCalls(vec![call("call_deep", "notify", deep)]),
        MockReply::Text("Done.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (token, conversation, _) = completed_run(server, "cannot-stand", "three tries").await;
    assert!(
        server
            .pending_requests(&token, &conversation)
            .await
            .is_empty()
    );
    assert!(setup.api.received().is_empty(), "nothing ran");

    let messages = server.messages(&token, &conversation).await;
    let errors: Vec<String> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            m["content"][0]["outcome"]["error"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(errors.len(), 3, "{messages:?}");
    assert!(
        errors[0].starts_with("not run: its id must not contain control"),
        "{errors:?}"
    );
    assert!(
        errors[1].starts_with("not run: its arguments are not valid JSON"),
        "{errors:?}"
    );
    assert!(
        errors[2].starts_with("not run: its arguments nest deeper"),
        "{errors:?}"
    );
}

#[tokio::test]
async fn a_nul_in_a_models_summary_is_stored_as_a_stand_in_and_the_run_goes_on() {
    let setup = summarising_two_runs().await;
    setup.llm.summarise_with("THE SUMMARY\u{0} with a NUL");
    let server = &setup.server;
    let (_, token) = server.new_user("nul-summary").await;
    let conversation = server.new_conversation(&token).await;
    let first = format!("tell me, {}", "with some context ".repeat(80));
    let run = server.start_run(&token, &conversation, json!(first)).await;
    server.run_finished(&token, &conversation, &run).await;
    let run = server
        .start_run(&token, &conversation, json!("and again"))
        .await;
    let done = server.run_finished(&token, &conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}\n{}", server.logs());
    let last = setup.llm.requests().last().cloned().unwrap_or_default();
    assert!(
        last["messages"]
            .to_string()
            .contains("THE SUMMARY\u{fffd} with a NUL"),
        "{last}"
    );
}

/// A model's answer too large for the search index (a tsvector holds at most 1 MB) is
/// stored whole; only its beginning is searchable.
#[tokio::test]
async fn an_answer_too_large_for_the_search_index_is_stored_and_the_run_completes() {
    let words: Vec<String> = (0..200_000).map(|i| format!("w{i}x")).collect();
    let long = words.join(" ");
    let script = vec![MockReply::Text(long.clone())];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (_, _, messages) = completed_run(server, "long-answer", "say a lot").await;
    let last = messages.last().map(|m| m["content"][0]["text"].clone());
    assert_eq!(last, Some(json!(long)));
}

/// A service (or a page an attacker controls) may answer with JSON nested as deep as a
/// parser allows. Stored as it came, the conversation could not be read back: its
/// stream stalled and the web chat could not open it. What lies too deep is kept as
/// text.
#[tokio::test]
async fn a_tool_result_nested_too_deep_is_kept_and_the_conversation_still_reads() {
    let mut deep = json!("bottom");
    for _ in 0..126 {
        deep = json!({ "d": deep });
    }
    let script = vec![
        MockReply::ToolCalls(vec![call("call_notify", "notify", json!({}))]),
        MockReply::Text("Noted.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    setup.api.answer_with(200, deep);
    let server = &setup.server;
    let (_, _, messages) = completed_run(server, "deep-result", "tell them").await;
    let result = messages
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"][0]["outcome"].to_string())
        .unwrap_or_else(|| panic!("a result: {messages:?}"));
    assert!(result.contains("bottom"), "{result}");
    assert_eq!(
        messages.last().map(|m| m["role"].clone()),
        Some(json!("assistant"))
    );
}

/// Some models and servers number their calls per reply (`call_0` every time). A later
/// call under an id an earlier call had gets one of its own, so each result stays with
/// its call (in the stored history, the web chat and what the model is sent).
#[tokio::test]
async fn a_call_reusing_an_earlier_calls_id_gets_one_of_its_own() {
    let args = |q: &str| json!({"expression": q});
    let script = vec![
        MockReply::ToolCalls(vec![call("call_0", "calculator", args("1+1"))]),
        MockReply::ToolCalls(vec![call("call_0", "calculator", args("2+2"))]),
        MockReply::Text("Two sums.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (_, _, messages) = completed_run(server, "reused-id", "add twice").await;
    let calls: Vec<Value> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_call")
        .map(|b| b["id"].clone())
        .collect();
    let results: Vec<Value> = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["tool_call_id"].clone())
        .collect();
    assert_eq!(calls.len(), 2, "{messages:?}");
    assert_eq!(calls[0], "call_0");
    assert_ne!(calls[1], calls[0], "{calls:?}");
    assert_eq!(results, calls, "each result under its own call's id");
}

/// A call that fails inside toolgate before its tool runs (here the database refuses its
/// card) is a failed call the model is told about in words of toolgate's own, not a
/// failed run: its sibling keeps its result. A call whose tool ran keeps its real
/// outcome even when its log cannot be written: told it failed, the model would make it
/// again.
#[tokio::test]
async fn a_call_failing_inside_toolgate_leaves_its_siblings_results_and_the_run() {
    let period = json!({"start_date": "2026-01-01", "end_date": "2026-01-31"});
    let script = vec![
        MockReply::ToolCalls(vec![
            call("call_calc", "calculator", json!({"expression": "1+1"})),
            call("call_pl", "quickbooks_profit_and_loss", period),
            call("call_notify", "notify", json!({})),
        ]),
        MockReply::Text("Partly done.".into()),
    ];
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let mut db = server.db().await;
    for statement in [
        "create function refuse_inside() returns trigger language plpgsql as $$
         begin
             if new.tool_name in ('quickbooks_profit_and_loss', 'notify') then
                 raise exception 'secret internal detail';
             end if;
             return new;
         end $$",
        "create trigger refuse_card before insert on tool_user_input_requests
         for each row execute function refuse_inside()",
        "create trigger refuse_log before insert on tool_call_log
         for each row execute function refuse_inside()",
    ] {
        sqlx::query(statement)
            .execute(&mut db)
            .await
            .expect("trigger");
    }
    let (_, _, messages) = completed_run(server, "failing-inside", "add and tell").await;
    let outcome_of = |id: &str| {
        messages
            .iter()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_result" && b["tool_call_id"] == id)
            .map(|b| b["outcome"].clone())
            .unwrap_or_else(|| panic!("no result for {id}: {messages:?}"))
    };
    assert_eq!(outcome_of("call_calc")["success"], true);
    let failed = outcome_of("call_pl");
    assert_eq!(failed["success"], false);
    let said = failed.to_string();
    assert!(said.contains("not known"), "{said}");
    assert!(!said.contains("secret internal detail"), "{said}");
    assert_eq!(outcome_of("call_notify")["success"], true, "it ran");
    assert_eq!(setup.api.received().len(), 1, "and only once");
}

/// A card's id is its user's, once, across conversations. A model that numbers its calls
/// per reply gives a call in a new conversation the id of a card in another: the call
/// gets an id of its own and its card, not a refusal.
#[tokio::test]
async fn a_call_reusing_the_id_of_a_card_in_another_conversation_gets_its_own_card() {
    let period = json!({"start_date": "2026-01-01", "end_date": "2026-01-31"});
    let ask = || {
        MockReply::ToolCalls(vec![call(
            "call_0",
            "quickbooks_profit_and_loss",
            period.clone(),
        )])
    };
    let setup = with_mock_model(vec![ask(), ask()], &[]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("id-across").await;
    let mut cards = Vec::new();
    for _ in 0..2 {
        let conversation = server.new_conversation(&token).await;
        let run = server
            .start_run(&token, &conversation, json!("my P&L"))
            .await;
        let waiting = server
            .run_reaches(
                &token,
                &conversation,
                &run,
                &["waiting_for_input", "completed", "failed"],
            )
            .await;
        assert_eq!(waiting["status"], "waiting_for_input", "{waiting}");
        let open = server.pending_requests(&token, &conversation).await;
        assert_eq!(open.len(), 1, "{open:?}");
        cards.push(open[0]["tool_call_id"].clone());
    }
    assert_eq!(cards[0], "call_0");
    assert_ne!(cards[1], cards[0], "{cards:?}");
}
