use jsonwebtoken::Algorithm;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tests::{JWT_SECRET, ServerOptions, TestServer, now, sign_token};

async fn status_with(server: &TestServer, token: Option<&str>) -> (StatusCode, Value) {
    server.send("GET", "/api/conversations", token, None).await
}

fn assert_unauthorized((status, body): (StatusCode, Value), why: &str) {
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: {body}");
    assert_eq!(body["error"]["code"], "unauthorized", "{why}: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
}

#[tokio::test]
async fn a_valid_token_is_accepted() {
    let server = TestServer::start().await;
    let token = sign_token(
        &json!({"sub": "alice", "exp": now() + 600}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    let (status, body) = status_with(&server, Some(&token)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test]
async fn every_bad_token_is_refused_with_a_json_401() {
    let server = TestServer::start().await;
    assert_unauthorized(status_with(&server, None).await, "missing header");

    let basic = server
        .client
        .get(server.url("/api/conversations"))
        .header("authorization", "Basic YWxpY2U6cHc=")
        .send()
        .await
        .expect("sent");
    assert_eq!(basic.status(), StatusCode::UNAUTHORIZED);

    // alg none: header {"alg":"none"}, no signature.
    let none = format!(
        "{}.{}.",
        b64(&json!({"alg": "none", "typ": "JWT"})),
        b64(&json!({"sub": "alice", "exp": now() + 600}))
    );
    assert_unauthorized(status_with(&server, Some(&none)).await, "alg none");

    let hs384 = sign_token(
        &json!({"sub": "alice", "exp": now() + 600}),
        JWT_SECRET,
        Algorithm::HS384,
    );
    assert_unauthorized(status_with(&server, Some(&hs384)).await, "HS384");

    let forged = sign_token(
        &json!({"sub": "alice", "exp": now() + 600}),
        "some-other-secret-of-sufficient-length",
        Algorithm::HS256,
    );
    assert_unauthorized(status_with(&server, Some(&forged)).await, "bad signature");

    let expired = sign_token(
        &json!({"sub": "alice", "exp": now() - 60}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    let (status, body) = status_with(&server, Some(&expired)).await;
    assert_unauthorized((status, body.clone()), "expired");
    assert_eq!(body["error"]["message"], "token has expired");

    let no_exp = sign_token(&json!({"sub": "alice"}), JWT_SECRET, Algorithm::HS256);
    assert_unauthorized(status_with(&server, Some(&no_exp)).await, "no exp");

    let future = sign_token(
        &json!({"sub": "alice", "exp": now() + 7200, "nbf": now() + 3600}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_unauthorized(
        status_with(&server, Some(&future)).await,
        "nbf in the future",
    );

    let no_sub = sign_token(&json!({"exp": now() + 600}), JWT_SECRET, Algorithm::HS256);
    assert_unauthorized(status_with(&server, Some(&no_sub)).await, "no sub");

    // A subject that reads as another user's (`alice` with a zero-width space, a space
    // after it, a direction override) or forges a log line is no user.
    for sub in [
        "alice\u{200B}",
        "alice ",
        " alice",
        "\u{202E}ecila",
        "alice\nINFO forged",
        "",
    ] {
        let token = sign_token(
            &json!({"sub": sub, "exp": now() + 600}),
            JWT_SECRET,
            Algorithm::HS256,
        );
        assert_unauthorized(status_with(&server, Some(&token)).await, sub);
    }

    assert_unauthorized(status_with(&server, Some("not.a.jwt")).await, "garbage");
}

/// The scheme's name is read without regard to case, as HTTP has it; a 401 names the
/// scheme it takes.
#[tokio::test]
async fn the_bearer_scheme_is_read_in_any_case_and_a_401_names_it() {
    let server = TestServer::start().await;
    let token = sign_token(
        &json!({"sub": "alice", "exp": now() + 600}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    let with_header = |value: String| {
        server
            .client
            .get(server.url("/api/conversations"))
            .header("authorization", value)
            .send()
    };
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let response = with_header(format!("{scheme} {token}"))
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::OK, "{scheme}");
    }
    for refused in [
        format!("Basic {token}"),
        format!("Bearer{token}"),
        token.clone(),
    ] {
        let response = with_header(refused.clone()).await.expect("sent");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{refused}");
        assert_eq!(
            response
                .headers()
                .get("www-authenticate")
                .and_then(|value| value.to_str().ok()),
            Some("Bearer realm=\"toolgate\""),
            "{refused}"
        );
    }
}

#[tokio::test]
async fn audience_and_issuer_are_checked_when_configured() {
    let server = TestServer::start_with(
        ServerOptions::default()
            .env("TOOLGATE_JWT_AUDIENCE", "toolgate")
            .env("TOOLGATE_JWT_ISSUER", "https://id.example"),
    )
    .await;
    let good = sign_token(
        &json!({"sub": "a", "exp": now() + 600, "aud": "toolgate", "iss": "https://id.example"}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_eq!(status_with(&server, Some(&good)).await.0, StatusCode::OK);
    let wrong_aud = sign_token(
        &json!({"sub": "a", "exp": now() + 600, "aud": "other", "iss": "https://id.example"}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_unauthorized(
        status_with(&server, Some(&wrong_aud)).await,
        "wrong audience",
    );
    let no_iss = sign_token(
        &json!({"sub": "a", "exp": now() + 600, "aud": "toolgate"}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_unauthorized(status_with(&server, Some(&no_iss)).await, "missing issuer");
    // An identity provider's token: a list of audiences and OAuth scopes.
    let provider = sign_token(
        &json!({"sub": "a", "exp": now() + 600, "aud": ["account", "toolgate"],
            "iss": "https://id.example", "scope": "openid profile email"}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_eq!(
        status_with(&server, Some(&provider)).await.0,
        StatusCode::OK
    );
    let others = sign_token(
        &json!({"sub": "a", "exp": now() + 600, "aud": ["account", "other"],
            "iss": "https://id.example"}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_unauthorized(
        status_with(&server, Some(&others)).await,
        "no audience of the list is this server",
    );
    // Dev tokens carry the configured audience and issuer, so they still work.
    let dev = server.token("dev-user").await;
    assert_eq!(status_with(&server, Some(&dev)).await.0, StatusCode::OK);
}

#[tokio::test]
async fn dev_token_endpoint_exists_only_with_dev_auth() {
    let server =
        TestServer::start_with(ServerOptions::default().without("TOOLGATE_DEV_AUTH")).await;
    let (status, body) = server
        .send(
            "POST",
            "/api/dev/token",
            None,
            Some(json!({"user_id": "alice"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
}

#[tokio::test]
async fn dev_token_refuses_a_bad_user_id() {
    let server = TestServer::start().await;
    let (status, body) = server
        .send(
            "POST",
            "/api/dev/token",
            None,
            Some(json!({"user_id": "  "})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    assert!(body["error"]["fields"]["user_id"].is_string());
    let (status, _) = server
        .send(
            "POST",
            "/api/dev/token",
            None,
            Some(json!({"user_id": "a b/c"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
}

#[tokio::test]
async fn without_dev_auth_a_jwt_secret_is_required_at_start() {
    let result = TestServer::try_start(
        ServerOptions::default()
            .without("TOOLGATE_DEV_AUTH")
            .without("TOOLGATE_JWT_SECRET"),
    )
    .await;
    let err = format!("{:#}", result.err().expect("must not start"));
    assert!(err.contains("TOOLGATE_JWT_SECRET is not set"), "{err}");
}

/// A JWT secret of a few repeated characters, or the token secret used again to seal
/// saved values, stops the server at start; a weak secret key (which sealed what is
/// saved) is kept with a warning. No message echoes a secret.
#[tokio::test]
async fn a_guessable_or_shared_secret_stops_the_server_and_a_weak_key_is_warned_of() {
    let weak = "passwordpasswordpasswordpassword";
    let shouted = JWT_SECRET.to_uppercase();
    let longer = format!(" {JWT_SECRET}-2 ");
    let inside = &JWT_SECRET[5..];
    for (name, value, says) in [
        ("TOOLGATE_JWT_SECRET", weak, "different characters"),
        (
            "TOOLGATE_SECRET_KEY",
            JWT_SECRET,
            "change TOOLGATE_JWT_SECRET",
        ),
        // Told apart by case and surrounding spaces only, holding the token secret
        // whole, or held whole in it.
        (
            "TOOLGATE_SECRET_KEY",
            &shouted,
            "change TOOLGATE_JWT_SECRET",
        ),
        ("TOOLGATE_SECRET_KEY", &longer, "change TOOLGATE_JWT_SECRET"),
        ("TOOLGATE_SECRET_KEY", inside, "change TOOLGATE_JWT_SECRET"),
    ] {
        let result = TestServer::try_start(ServerOptions::default().env(name, value)).await;
        let err = format!("{:#}", result.err().expect("must not start"));
        assert!(err.contains(name) && err.contains(says), "{err}");
        assert!(!err.contains(value), "the secret echoed: {err}");
    }
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_SECRET_KEY", weak)).await;
    let logs = server.logs();
    assert!(
        logs.contains(
            "TOOLGATE_SECRET_KEY is shorter than 32 characters or made of few different ones"
        ),
        "{logs}"
    );
    assert!(!logs.contains(weak), "the secret logged");
}

#[tokio::test]
async fn a_token_that_lives_longer_than_a_day_is_refused() {
    let server = TestServer::start().await;
    for (exp, why) in [
        (now() + 30 * 86_400, "30 days ahead"),
        (4_102_444_800, "the year 2100"),
        (now() + 86_400 + 120, "a day and two minutes ahead"),
    ] {
        let long = sign_token(
            &json!({"sub": "alice", "exp": exp, "iat": now()}),
            JWT_SECRET,
            Algorithm::HS256,
        );
        let (status, body) = status_with(&server, Some(&long)).await;
        assert_unauthorized((status, body.clone()), why);
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("too far ahead")),
            "{why}: {body}"
        );
    }
    let day = sign_token(
        &json!({"sub": "alice", "exp": now() + 86_400 - 60}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_eq!(status_with(&server, Some(&day)).await.0, StatusCode::OK);
}

#[tokio::test]
async fn the_lifetime_limit_is_configurable_and_issued_tokens_keep_within_it() {
    let server =
        TestServer::start_with(ServerOptions::default().env("TOOLGATE_MAX_TOKEN_LIFETIME", "5m"))
            .await;
    let ten_minutes = sign_token(
        &json!({"sub": "alice", "exp": now() + 600}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    assert_unauthorized(
        status_with(&server, Some(&ten_minutes)).await,
        "10 min > 5 min",
    );

    // The dev token (a day) and the stream token (ten minutes) are cut to the limit,
    // and work.
    let (status, dev) = server
        .send(
            "POST",
            "/api/dev/token",
            None,
            Some(json!({"user_id": "short-lived"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{dev}");
    let expires = chrono::DateTime::parse_from_rfc3339(dev["expires_at"].as_str().unwrap_or(""))
        .expect("expires_at")
        .timestamp();
    assert!(expires <= now() + 300, "dev token expires at {expires}");
    let token = dev["token"].as_str().expect("token");
    assert_eq!(status_with(&server, Some(token)).await.0, StatusCode::OK);
    let conversation = server.new_conversation(token).await;
    let (status, stream) = server
        .send(
            "POST",
            &format!("/api/conversations/{conversation}/stream-token"),
            Some(token),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{stream}");
    let expires = chrono::DateTime::parse_from_rfc3339(stream["expires_at"].as_str().unwrap_or(""))
        .expect("expires_at")
        .timestamp();
    assert!(expires <= now() + 300, "stream token expires at {expires}");
    let response = server
        .client
        .get(server.url(&format!(
            "/api/conversations/{conversation}/events?token={}",
            stream["token"].as_str().unwrap_or_default()
        )))
        .send()
        .await
        .expect("stream");
    assert_eq!(response.status(), StatusCode::OK);
}

/// A stream token never outlives the token that asked for it: a stolen token about to
/// expire buys no more minutes of the user's events.
#[tokio::test]
async fn a_stream_token_expires_no_later_than_the_token_that_asked_for_it() {
    let server = TestServer::start().await;
    let stream_expiry = |token: String| {
        let server = &server;
        async move {
            let conversation = server.new_conversation(&token).await;
            let (status, stream) = server
                .send(
                    "POST",
                    &format!("/api/conversations/{conversation}/stream-token"),
                    Some(&token),
                    None,
                )
                .await;
            assert_eq!(status, StatusCode::OK, "{stream}");
            chrono::DateTime::parse_from_rfc3339(stream["expires_at"].as_str().unwrap_or(""))
                .expect("expires_at")
                .timestamp()
        }
    };
    let leaving = now() + 90;
    let short = sign_token(
        &json!({"sub": "leaving-soon", "exp": leaving}),
        JWT_SECRET,
        Algorithm::HS256,
    );
    let expires = stream_expiry(short).await;
    assert!(
        expires <= leaving,
        "stream token expires at {expires}, its asker at {leaving}"
    );
    // A token with time to spare gets the stream's full ten minutes.
    let (_, staying) = server.new_user("staying").await;
    let expires = stream_expiry(staying).await;
    assert!(expires >= now() + 500, "stream token expires at {expires}");
}

#[tokio::test]
async fn a_bad_token_lifetime_setting_stops_the_start() {
    let result = TestServer::try_start(
        ServerOptions::default().env("TOOLGATE_MAX_TOKEN_LIFETIME", "forever"),
    )
    .await;
    let err = format!("{:#}", result.err().expect("must not start"));
    assert!(err.contains("TOOLGATE_MAX_TOKEN_LIFETIME"), "{err}");
}

fn b64(value: &Value) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
}
