use reqwest::StatusCode;
use serde_json::json;
use tests::TestServer;

#[tokio::test]
async fn conversations_are_created_and_listed_newest_first() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("conv").await;
    let (status, first) = server
        .send(
            "POST",
            "/api/conversations",
            Some(&token),
            Some(json!({"title": "Books"})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{first}");
    assert_eq!(first["title"], "Books");
    // No body at all is fine too: a default title.
    let (status, second) = server
        .send("POST", "/api/conversations", Some(&token), None)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["title"], "New conversation");
    let (status, list) = server
        .send("GET", "/api/conversations", Some(&token), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    let ids: Vec<&str> = list["conversations"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        [
            second["id"].as_str().unwrap_or(""),
            first["id"].as_str().unwrap_or("")
        ]
    );
}

#[tokio::test]
async fn users_see_only_their_own_conversations() {
    let server = TestServer::start().await;
    let (_, alice) = server.new_user("alice").await;
    let (_, bob) = server.new_user("bob").await;
    server.new_conversation(&alice).await;
    let (_, list) = server
        .send("GET", "/api/conversations", Some(&bob), None)
        .await;
    assert_eq!(list["conversations"], json!([]));
}

#[tokio::test]
async fn an_overlong_title_is_a_422_naming_the_field() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("conv").await;
    let (status, body) = server
        .send(
            "POST",
            "/api/conversations",
            Some(&token),
            Some(json!({"title": "x".repeat(201)})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(body["error"]["fields"]["title"].is_string(), "{body}");
    let (status, body) = server
        .send(
            "POST",
            "/api/conversations",
            Some(&token),
            Some(json!({"title": 5})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"]["fields"]["title"].is_string(), "{body}");
}

/// A long conversation is read in pages that follow on exactly; a page asked for
/// wrongly is a 4xx naming what was wrong, and another user's conversation pages as
/// nothing at all.
#[tokio::test]
async fn messages_are_read_a_page_at_a_time_and_a_bad_page_is_refused() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("pages").await;
    let conversation = server.new_conversation(&token).await;
    // A command is answered at once: the user's message and the reply, two a time.
    for _ in 0..4 {
        let (status, body) = server
            .post_message(&token, &conversation, json!("/help"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let path = format!("/api/conversations/{conversation}/messages");
    let mut seqs = Vec::new();
    let mut pages = 0;
    let mut next = format!("{path}?limit=3");
    loop {
        let (status, body) = server.send("GET", &next, Some(&token), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let page: Vec<i64> = body["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m["seq"].as_i64())
            .collect();
        assert!(page.len() <= 3, "{body}");
        seqs.extend(page);
        pages += 1;
        match body["next_after_seq"].as_i64() {
            Some(after) => {
                assert_eq!(Some(&after), seqs.last(), "{body}");
                next = format!("{path}?limit=3&after_seq={after}");
            }
            None => break,
        }
    }
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    assert_eq!(pages, 3, "3 + 3 + 2, the last one saying no more follow");
    let (_, whole) = server.send("GET", &path, Some(&token), None).await;
    assert_eq!(whole["messages"].as_array().map(Vec::len), Some(8));
    assert!(whole.get("next_after_seq").is_none(), "{whole}");

    for (query, status, field) in [
        ("limit=0", StatusCode::UNPROCESSABLE_ENTITY, "limit"),
        ("limit=501", StatusCode::UNPROCESSABLE_ENTITY, "limit"),
        ("limit=-1", StatusCode::BAD_REQUEST, "query"),
        ("limit=ten", StatusCode::BAD_REQUEST, "query"),
        ("after_seq=99999999999", StatusCode::BAD_REQUEST, "query"),
        ("after_seq=1%00", StatusCode::BAD_REQUEST, "query"),
    ] {
        let (got, body) = server
            .send("GET", &format!("{path}?{query}"), Some(&token), None)
            .await;
        assert_eq!(got, status, "{query}: {body}");
        assert!(
            body["error"]["fields"][field].is_string(),
            "{query}: {body}"
        );
    }
    let (_, other) = server.new_user("pages-other").await;
    let (status, body) = server
        .send(
            "GET",
            &format!("{path}?limit=1&after_seq=0"),
            Some(&other),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(body.get("messages").is_none(), "{body}");
}

/// The conversation list pages the same way: every conversation once, in order; a
/// `before` the server did not give is a 422 naming it.
#[tokio::test]
async fn conversations_are_listed_a_page_at_a_time() {
    let server = TestServer::start().await;
    let (_, token) = server.new_user("conv-pages").await;
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(server.new_conversation(&token).await);
    }
    made.reverse();
    let mut listed = Vec::new();
    let mut pages = 0;
    let mut path = "/api/conversations?limit=2".to_owned();
    loop {
        let (status, body) = server.send("GET", &path, Some(&token), None).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let page = body["conversations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert!(page.len() <= 2, "{body}");
        listed.extend(
            page.iter()
                .filter_map(|c| c["id"].as_str().map(str::to_owned)),
        );
        pages += 1;
        match body["next_before"].as_str() {
            Some(before) => path = format!("/api/conversations?limit=2&before={before}"),
            None => break,
        }
    }
    assert_eq!(listed, made, "newest first, each once");
    assert_eq!(pages, 3);

    for (query, status, field) in [
        ("limit=0", StatusCode::UNPROCESSABLE_ENTITY, "limit"),
        ("limit=501", StatusCode::UNPROCESSABLE_ENTITY, "limit"),
        ("limit=two", StatusCode::BAD_REQUEST, "query"),
        ("before=1.2", StatusCode::UNPROCESSABLE_ENTITY, "before"),
        ("before=%00", StatusCode::UNPROCESSABLE_ENTITY, "before"),
        (
            "before=99999999999999999999.1.00000000000000000000000000000000",
            StatusCode::UNPROCESSABLE_ENTITY,
            "before",
        ),
        (
            "before=-300000000000000000.0.00000000000000000000000000000000",
            StatusCode::UNPROCESSABLE_ENTITY,
            "before",
        ),
    ] {
        let (got, body) = server
            .send(
                "GET",
                &format!("/api/conversations?{query}"),
                Some(&token),
                None,
            )
            .await;
        assert_eq!(got, status, "{query}: {body}");
        assert!(
            body["error"]["fields"][field].is_string(),
            "{query}: {body}"
        );
    }
    // Another user's page of the same place is their own: nothing of this user's.
    let (_, other) = server.new_user("conv-pages-other").await;
    let (status, body) = server.send("GET", &path, Some(&other), None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, first) = server
        .send("GET", "/api/conversations?limit=1", Some(&token), None)
        .await;
    let before = first["next_before"]
        .as_str()
        .expect("more than one")
        .to_owned();
    let (status, body) = server
        .send(
            "GET",
            &format!("/api/conversations?before={before}"),
            Some(&other),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["conversations"], serde_json::json!([]), "{body}");
}

/// Rows of `table` that belong to `conversation`.
async fn rows_of(db: &mut sqlx::PgConnection, table: &str, conversation: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "select count(*) from {table} where conversation_id = $1::uuid"
    ))
    .bind(conversation)
    .fetch_one(db)
    .await
    .expect("count")
}

/// A deleted conversation is gone with all it holds; another of the user's, and the
/// values they saved for themselves, stay.
#[tokio::test]
async fn a_conversation_is_deleted_with_all_it_holds() {
    let server = TestServer::start().await;
    let (user, token) = server.new_user("delete").await;
    let doomed = server.new_conversation(&token).await;
    let kept = server.new_conversation(&token).await;
    for conversation in [&doomed, &kept] {
        let run = server
            .start_run(&token, conversation, json!("what is 6 * 7?"))
            .await;
        server.run_finished(&token, conversation, &run).await;
    }
    let mut db = server.db().await;
    for conversation in [Some(&doomed), None] {
        sqlx::query(
            "insert into saved_tool_inputs (user_id, conversation_id, name, value)
             values ($1, $2::uuid, 'company_id', '\"C-1\"')",
        )
        .bind(&user)
        .bind(conversation)
        .execute(&mut db)
        .await
        .expect("a saved value");
    }

    let path = format!("/api/conversations/{doomed}");
    let (status, body) = server.send("DELETE", &path, Some(&token), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, _) = server.send("GET", &path, Some(&token), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for table in [
        "messages",
        "agent_runs",
        "run_events",
        "saved_tool_inputs",
        "tool_call_log",
    ] {
        assert_eq!(rows_of(&mut db, table, &doomed).await, 0, "{table}");
    }
    // The log of what ran stays, no longer tied to the conversation.
    let logged: i64 = sqlx::query_scalar(
        "select count(*) from tool_call_log where user_id = $1 and conversation_id is null",
    )
    .bind(&user)
    .fetch_one(&mut db)
    .await
    .expect("count");
    assert!(logged > 0, "the tool call log went with the conversation");
    // A message to it now is a 404, as to any conversation not the caller's.
    let (status, body) = server.post_message(&token, &doomed, json!("hello?")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(rows_of(&mut db, "messages", &kept).await > 0);
    let user_wide: i64 = sqlx::query_scalar(
        "select count(*) from saved_tool_inputs where user_id = $1 and conversation_id is null",
    )
    .bind(&user)
    .fetch_one(&mut db)
    .await
    .expect("count");
    assert_eq!(user_wide, 1);
    let (_, list) = server
        .send("GET", "/api/conversations", Some(&token), None)
        .await;
    let ids: Vec<&str> = list["conversations"]
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(ids, [kept.as_str()]);
    // Deleted once; the second time there is nothing to delete.
    let (status, body) = server.send("DELETE", &path, Some(&token), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
}

/// Another user's conversation cannot be deleted, nor told apart from none; a bad id
/// is a 400; a conversation whose run is active stays until the run ends.
#[tokio::test]
async fn only_the_owner_deletes_and_never_under_an_active_run() {
    let server = TestServer::start().await;
    let (alice_id, alice) = server.new_user("alice-del").await;
    let (mallory_id, mallory) = server.new_user("mallory-del").await;
    let theirs = server.new_conversation(&alice).await;
    let mut db = server.db().await;
    let path = format!("/api/conversations/{theirs}");
    let (status, body) = server.send("DELETE", &path, Some(&mallory), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    // Whatever state it is in: a run of Alice's there tells Mallory nothing either.
    waiting_run(&mut db, &theirs, &alice_id).await;
    let (status, body) = server.send("DELETE", &path, Some(&mallory), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let (status, _) = server.send("GET", &path, Some(&alice), None).await;
    assert_eq!(status, StatusCode::OK, "still Alice's");
    let (status, _) = server.send("DELETE", &path, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    for bad in ["not-a-uuid", "%00", "1%0a2"] {
        let (status, body) = server
            .send(
                "DELETE",
                &format!("/api/conversations/{bad}"),
                Some(&alice),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }

    let own = server.new_conversation(&mallory).await;
    waiting_run(&mut db, &own, &mallory_id).await;
    let own_path = format!("/api/conversations/{own}");
    let (status, body) = server.send("DELETE", &own_path, Some(&mallory), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "run_active", "{body}");
    sqlx::query("update agent_runs set status = 'cancelled', finished_at = now() where conversation_id = $1::uuid")
        .bind(&own)
        .execute(&mut db)
        .await
        .expect("the run over");
    // A card waiting for an answer (a tool, an MCP server, waits on it) keeps it too.
    let (status, created) = server
        .action(
            &mallory,
            json!({
                "action": "create_request", "conversation_id": own,
                "tool_name": "quickbooks_profit_and_loss", "tool_call_id": "call_waiting",
                "reason": "the company", "fields": [{"name": "quickbooks_realm_id",
                "label": "Company ID", "type": "text", "required": true}]
            }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let (status, body) = server.send("DELETE", &own_path, Some(&mallory), None).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["error"]["code"], "request_pending", "{body}");
    let (status, cancelled) = server
        .action(
            &mallory,
            json!({"action": "cancel_request", "tool_call_id": "call_waiting"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{cancelled}");
    let (status, body) = server.send("DELETE", &own_path, Some(&mallory), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
}

/// A run waiting for input, as the database holds it; marked busy until later, so the
/// recovery sweep leaves it waiting meanwhile.
async fn waiting_run(db: &mut sqlx::PgConnection, conversation: &str, user: &str) {
    sqlx::query(
        "insert into agent_runs (id, conversation_id, user_id, status, model, updated_at)
         values (gen_random_uuid(), $1::uuid, $2, 'waiting_for_input', 'offline',
                 now() + interval '1 hour')",
    )
    .bind(conversation)
    .bind(user)
    .execute(db)
    .await
    .expect("a waiting run");
}

/// A tool call that runs while its conversation is being deleted is still logged (the
/// log row without the conversation) and answered, not a 500 for the record of what ran.
#[tokio::test]
async fn a_call_that_ran_while_its_conversation_was_deleted_is_logged_and_answered() {
    let server = TestServer::start().await;
    let (user, token) = server.new_user("deleted-under").await;
    let conversation = server.new_conversation(&token).await;
    // A deletion under way, as another request's would be.
    let mut deleter = server.db().await;
    let mut deleting = sqlx::Connection::begin(&mut deleter)
        .await
        .expect("a transaction");
    let deleter_pid: i32 = sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(&mut *deleting)
        .await
        .expect("its process");
    sqlx::query("delete from conversations where id = $1::uuid")
        .bind(&conversation)
        .execute(&mut *deleting)
        .await
        .expect("deleting");
    let mut watcher = server.db().await;
    let finish_deleting = async move {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let waiting: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_activity where $1 = any(pg_blocking_pids(pid))",
            )
            .bind(deleter_pid)
            .fetch_one(&mut watcher)
            .await
            .expect("waiting");
            if waiting > 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the log write to wait"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        deleting.commit().await.expect("deleted");
    };
    let ((status, outcome), ()) = tokio::join!(
        server.execute_tool(
            &token,
            &conversation,
            "calculator",
            "call_under_delete",
            json!({"expression": "6 * 7"}),
        ),
        finish_deleting,
    );
    assert_eq!(status, StatusCode::OK, "{outcome}");
    assert_eq!(outcome["success"], true, "{outcome}");
    let mut db = server.db().await;
    let logged: Option<Option<String>> = sqlx::query_scalar(
        "select conversation_id::text from tool_call_log
         where user_id = $1 and tool_call_id = 'call_under_delete'",
    )
    .bind(&user)
    .fetch_optional(&mut db)
    .await
    .expect("the log");
    assert_eq!(logged, Some(None), "logged, without the conversation");
}
