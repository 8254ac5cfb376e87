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
