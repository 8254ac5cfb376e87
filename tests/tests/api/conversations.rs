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
