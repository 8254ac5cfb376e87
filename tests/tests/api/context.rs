//! Context that keeps the task, seen by a mock model: the first request and pinned
//! messages reach every model request word for word, turns stay whole, summaries are
//! written from the cleaned history and never take the current artefact, and a
//! misordered configuration is refused.

use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{MockReply, ServerOptions, TestServer};

use crate::agent::{Setup, with_tools_and_mock_model};

const TOOLS: &str = r#"
[[tools]]
name = "save_script"
description = "Save a script to a path"
kind = "http"
key_argument = "path"
requires_approval = false
parameters = { type = "object", properties = { path = { type = "string" }, text = { type = "string" } }, required = ["path", "text"] }
[tools.http]
allow_private_networks = true
method = "POST"
url = "{env.MOCK_BASE}/save"
body = { path = "{path}", text = "{text}" }
"#;

const TASK: &str = "Build the quarterly report script. Requirement one: amounts in euros. \
                    Requirement two: one page only. Requirement three: no external libraries.";

async fn with_mock_model(script: Vec<MockReply>, extra: &[(&str, &str)]) -> Setup {
    with_tools_and_mock_model(TOOLS, script, extra).await
}

fn filler(n: usize) -> String {
    format!("Paragraph {n} of background that the model does not need for long. ").repeat(12)
}

fn is_summary_request(request: &Value) -> bool {
    request["messages"][0]
        .to_string()
        .contains("Summarise the conversation")
}

async fn say(server: &TestServer, token: &str, conversation: &str, text: &str) {
    let (status, body) = server.post_message(token, conversation, json!(text)).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let run = body["run_id"].as_str().expect("run id").to_owned();
    let done = server.run_finished(token, conversation, &run).await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test]
async fn a_long_conversation_keeps_the_task_whole_turns_and_the_current_script() {
    // Turn n (from 1) asks a question; every third turn the model saves a new version of
    // the script, otherwise it answers at length.
    let turns = 14;
    let mut script = vec![MockReply::Text(
        "Understood: euros, one page, no libraries.".into(),
    )];
    for n in 1..=turns {
        if n % 3 == 0 {
            script.push(MockReply::ToolCalls(vec![(
                format!("call_save_{n}"),
                "save_script".into(),
                json!({"path": "/work/report.py", "text": format!("SCRIPT-VERSION-{n} {}", filler(n))}),
            )]));
            script.push(MockReply::Text(format!("Saved version {n}.")));
        } else {
            script.push(MockReply::Text(format!("Answer {n}. {}", filler(n))));
        }
    }
    let setup = with_mock_model(
        script,
        &[
            ("TOOLGATE_SUMMARY_TOKENS", "900"),
            ("TOOLGATE_SUMMARY_KEEP", "4"),
        ],
    )
    .await;
    let server = &setup.server;
    let (_, token) = server.new_user("context").await;
    let conversation = server.new_conversation(&token).await;
    say(server, &token, &conversation, TASK).await;
    for n in 1..=turns {
        say(
            server,
            &token,
            &conversation,
            &format!("Question {n}: {}", filler(n)),
        )
        .await;
    }

    let requests = setup.llm.requests();
    let (summaries, chats): (Vec<&Value>, Vec<&Value>) =
        requests.iter().partition(|r| is_summary_request(r));
    assert!(
        !summaries.is_empty(),
        "the conversation grew past the threshold"
    );
    let mut newest_saved: Option<usize> = None;
    for (index, request) in chats.iter().enumerate() {
        let sent = request["messages"].to_string();
        assert!(sent.contains(TASK), "chat request {index} lost the task");
        // Once it is no longer the current request, it says it is pinned.
        assert!(
            index == 0 || sent.contains("[Pinned:"),
            "chat request {index}: the task is not marked as pinned"
        );
        if let Some(reason) = tests::dangling_turn(request) {
            panic!("chat request {index}: {reason}");
        }
        if let Some(n) = (1..=turns)
            .filter(|n| n % 3 == 0)
            .rev()
            .find(|n| sent.contains(&format!("\"call_save_{n}\"")))
        {
            newest_saved = Some(newest_saved.map_or(n, |v| v.max(n)));
        }
        if let Some(version) = newest_saved {
            assert!(
                sent.contains(&format!("SCRIPT-VERSION-{version} ")),
                "chat request {index} lost the current script (version {version})"
            );
            for older in (3..version).step_by(3) {
                assert!(
                    !sent.contains(&format!("SCRIPT-VERSION-{older} ")),
                    "chat request {index} carries superseded version {older}"
                );
            }
        }
    }
    assert_eq!(newest_saved, Some(12), "the saves reached the model");
    for (index, request) in summaries.iter().enumerate() {
        let sent = request["messages"].to_string();
        assert!(
            !sent.contains("SCRIPT-VERSION-"),
            "summary request {index} holds a script version: superseded ones are stale, the current one must stay in context"
        );
        assert!(request.get("tools").is_none());
        if let Some(reason) = tests::dangling_turn(request) {
            panic!("summary request {index}: {reason}");
        }
        let prompt = request["messages"][0].to_string();
        assert!(
            prompt.contains("constraint") && prompt.contains("open"),
            "{prompt}"
        );
    }
    // The user's request is not repeated in the system message any more.
    let last = chats.last().expect("a chat request");
    assert!(
        !last["messages"][0].to_string().contains("original request"),
        "{}",
        last["messages"][0]
    );
}

#[tokio::test]
async fn a_pinned_message_stays_and_only_its_owner_can_pin_it() {
    let setup = with_mock_model(vec![], &[("TOOLGATE_SUMMARY_TOKENS", "700")]).await;
    let server = &setup.server;
    let (_, token) = server.new_user("pinner").await;
    let conversation = server.new_conversation(&token).await;
    say(server, &token, &conversation, "Hello there.").await;
    let deadline = "Whatever else happens: the deadline is Friday at noon.";
    say(server, &token, &conversation, deadline).await;
    let (_, listed) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}/messages"),
            Some(&token),
            None,
        )
        .await;
    let messages = listed["messages"].as_array().expect("messages").clone();
    let id_of = |text: &str| {
        messages
            .iter()
            .find(|m| m["content"].to_string().contains(text))
            .and_then(|m| m["id"].as_str())
            .expect("message")
            .to_owned()
    };
    let deadline_id = id_of("deadline is Friday");
    let answer_id = messages
        .iter()
        .find(|m| m["role"] == "assistant")
        .and_then(|m| m["id"].as_str())
        .expect("an answer")
        .to_owned();
    let pin_path =
        |message: &str| format!("/api/conversations/{conversation}/messages/{message}/pin");

    // Someone else, an assistant message, a malformed id, a malformed body: nothing.
    let (_, stranger) = server.new_user("stranger").await;
    let (status, body) = server
        .send(
            "PUT",
            &pin_path(&deadline_id),
            Some(&stranger),
            Some(json!({"pinned": true})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = server
        .send(
            "PUT",
            &pin_path(&answer_id),
            Some(&token),
            Some(json!({"pinned": true})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = server
        .send(
            "PUT",
            &pin_path("not-a-uuid%0A"),
            Some(&token),
            Some(json!({"pinned": true})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // The error names the part of the path that is wrong.
    assert!(body["error"]["fields"]["message_id"].is_string(), "{body}");
    assert!(body["error"]["fields"]["id"].is_null(), "{body}");
    let (status, body) = server
        .send(
            "PUT",
            &pin_path(&deadline_id),
            Some(&token),
            Some(json!({"pinned": "yes", "extra": 1})),
        )
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    let (status, body) = server
        .send("PUT", &pin_path(&deadline_id), Some(&token), None)
        .await;
    assert!(status.is_client_error(), "{status} {body}");
    let (_, listed) = server
        .send(
            "GET",
            &format!("/api/conversations/{conversation}/messages"),
            Some(&token),
            None,
        )
        .await;
    assert!(
        listed["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .all(|m| m["pinned"] == false),
        "nothing was pinned by the refused calls: {listed}"
    );

    let (status, pinned) = server
        .send(
            "PUT",
            &pin_path(&deadline_id),
            Some(&token),
            Some(json!({"pinned": true})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{pinned}");
    assert_eq!(pinned["pinned"], true);
    assert_eq!(pinned["id"], deadline_id.as_str());

    for n in 1..=8 {
        say(
            server,
            &token,
            &conversation,
            &format!("Question {n}: {}", filler(n)),
        )
        .await;
    }
    let requests = setup.llm.requests();
    assert!(
        requests.iter().any(is_summary_request),
        "the conversation was summarised"
    );
    let chats: Vec<&Value> = requests.iter().filter(|r| !is_summary_request(r)).collect();
    for (index, request) in chats.iter().enumerate().skip(2) {
        let sent = request["messages"].to_string();
        assert!(sent.contains(deadline), "chat request {index} lost the pin");
        assert!(
            sent.contains("Hello there."),
            "chat request {index} lost the first request"
        );
    }

    // `/unpin` lets it go; `/pin` pins the previous message again.
    let (status, reply) = server
        .post_message(&token, &conversation, json!("/unpin"))
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(reply["reply"].to_string().contains("Unpinned 1"), "{reply}");
    let (status, reply) = server
        .post_message(&token, &conversation, json!("/pin"))
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    assert!(reply["reply"].to_string().contains("Question 8"), "{reply}");

    // Unpinned, the deadline no longer has to stay; the summaries were written without
    // it, so it stays until a summary takes it in.
    let before = setup.llm.requests().len();
    say(server, &token, &conversation, "Question 9: and now?").await;
    let requests = setup.llm.requests();
    let new = &requests[before..];
    let chat = new
        .iter()
        .rfind(|r| !is_summary_request(r))
        .expect("a chat request");
    let summarised = new
        .iter()
        .any(|r| is_summary_request(r) && r["messages"].to_string().contains(deadline));
    assert!(
        chat["messages"].to_string().contains(deadline) || summarised,
        "the unpinned message left the context without a summary"
    );
}

#[tokio::test]
async fn a_misordered_configuration_is_refused_with_the_reason() {
    let cases = [
        (
            ("TOOLGATE_MIDDLEWARE", "summarisation,superseded_calls"),
            "`superseded_calls` must come first",
        ),
        (
            ("TOOLGATE_MIDDLEWARE", "context_pipeline,summarisation"),
            "`summarisation` must come first",
        ),
        (
            ("TOOLGATE_MIDDLEWARE", "system_sections,context_pipeline"),
            "has `context_pipeline` without `summarisation`",
        ),
    ];
    for ((name, value), expected) in cases {
        let started = TestServer::try_start(ServerOptions::default().env(name, value)).await;
        let err = format!(
            "{:#}",
            started
                .err()
                .expect("a misordered chain must stop start-up")
        );
        assert!(err.contains(expected), "expected `{expected}` in:\n{err}");
    }

    let server = TestServer::start().await;
    let (_, token) = server.new_user("order").await;
    let conversation = server.new_conversation(&token).await;
    let (status, reply) = server
        .post_message(
            &token,
            &conversation,
            json!("/context pipeline config validate max_tokens=5000"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let text = reply["reply"].to_string();
    assert!(text.contains("summarised down to the budget"), "{text}");
    let (_, shown) = server
        .post_message(&token, &conversation, json!("/context pipeline show"))
        .await;
    let shown = shown["reply"].to_string();
    assert!(
        shown.contains("max_tokens=16000"),
        "the refused ceiling was kept: {shown}"
    );
    assert!(shown.contains("Past 6000 tokens"), "{shown}");
}

/// Retrieval reads the caller's other conversations in the step's own read: what the
/// user said elsewhere reaches the model, trimmed to the pipeline's limit, and another
/// user's words on the same subject never do.
#[tokio::test]
async fn retrieval_brings_the_callers_other_conversations_and_never_another_users() {
    let script = (0..6)
        .map(|n| MockReply::Text(format!("Reply {n}.")))
        .collect();
    let setup = with_mock_model(script, &[]).await;
    let server = &setup.server;
    let (_, alice) = server.new_user("retrieval-alice").await;
    let (_, bob) = server.new_user("retrieval-bob").await;
    let earlier = server.new_conversation(&alice).await;
    say(
        server,
        &alice,
        &earlier,
        "The zephyrine budget for Lisbon is 4000 euros.",
    )
    .await;
    say(
        server,
        &alice,
        &earlier,
        "Also: the zephyrine budget for Porto is 2500 euros.",
    )
    .await;
    let bobs = server.new_conversation(&bob).await;
    say(
        server,
        &bob,
        &bobs,
        "The zephyrine budget for Oslo is 9000 kroner.",
    )
    .await;

    let now = server.new_conversation(&alice).await;
    say(server, &alice, &now, "What was the zephyrine budget?").await;
    let sent = setup.llm.requests().last().expect("a model request")["messages"].to_string();
    assert!(sent.contains("earlier conversations"), "{sent}");
    assert!(sent.contains("Lisbon") && sent.contains("Porto"), "{sent}");
    assert!(
        !sent.contains("Oslo"),
        "another user's words were retrieved: {sent}"
    );
    // Quoted in the history right before the question, never with the system
    // prompt's authority: a note may be the assistant's words led by a fetched page.
    let request = setup
        .llm
        .requests()
        .last()
        .expect("a model request")
        .clone();
    let messages = request["messages"].as_array().expect("messages");
    for message in messages.iter().filter(|m| m["role"] == "system") {
        assert!(!message.to_string().contains("Lisbon"), "{message}");
    }
    let [.., notes, question] = messages.as_slice() else {
        panic!("too few messages: {sent}");
    };
    assert_eq!(notes["role"], "assistant", "{notes}");
    assert!(notes.to_string().contains("Lisbon"), "{notes}");
    assert!(
        question
            .to_string()
            .contains("What was the zephyrine budget?")
    );

    let (status, reply) = server
        .post_message(
            &alice,
            &now,
            json!("/context pipeline config collect retrieval_limit=1"),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    say(server, &alice, &now, "And the zephyrine budget again?").await;
    let sent = setup.llm.requests().last().expect("a model request")["messages"].to_string();
    let notes = sent
        .split("earlier conversations")
        .nth(1)
        .expect("the retrieved notes")
        .to_owned();
    let found = ["Lisbon", "Porto"]
        .iter()
        .filter(|city| notes.contains(*city))
        .count();
    assert_eq!(found, 1, "a limit of one brings one note: {notes}");
}
