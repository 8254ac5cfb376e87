//! Cards made directly through the action API: every field type, several cards at once,
//! the server's own field errors, expiry, and the remembered-values panel.

use serde_json::{Value, json};

use crate::webdriver::{Browser, ENTER};
use crate::{Fixture, open_app, screenshot, sign_in, unique};

fn call_id() -> String {
    format!("call_{}", uuid::Uuid::new_v4().simple())
}

/// A request with one field of every type.
fn every_type(conversation: &str, tool_call_id: &str) -> Value {
    json!({
        "action": "create_request",
        "conversation_id": conversation,
        "tool_name": "deploy_service",
        "tool_call_id": tool_call_id,
        "reason": "Deploying needs a few details only you know",
        "save_for": "session",
        "fields": [
            {"name": "service", "label": "Service name", "type": "text", "placeholder": "billing-api",
             "description": "As named in the service catalogue"},
            {"name": "replicas", "label": "Replicas", "type": "number", "min": 1, "max": 10, "default": 3},
            {"name": "region", "label": "Region", "type": "select", "default": "eu",
             "options": [{"value": "eu", "label": "Europe"}, {"value": "us", "label": "United States"}]},
            {"name": "canary", "label": "Canary first", "type": "boolean", "required": false},
            {"name": "window", "label": "Maintenance date", "type": "date"},
            {"name": "owner", "label": "Owner email", "type": "email", "save_for": "user"},
            {"name": "runbook", "label": "Runbook URL", "type": "url", "required": false},
            {"name": "notes", "label": "Notes", "type": "textarea", "required": false},
            {"name": "api_key", "label": "API key", "type": "secret", "min": 8},
            {"name": "checks", "label": "Checks", "type": "multiselect", "min": 1,
             "options": ["smoke", "load", "security"]}
        ]
    })
}

fn simple(conversation: &str, tool_call_id: &str) -> Value {
    json!({
        "action": "create_request",
        "conversation_id": conversation,
        "tool_name": "quickbooks_profit_and_loss",
        "tool_call_id": tool_call_id,
        "reason": "QuickBooks API requests require your Company ID (Realm ID)",
        "save_for_session": true,
        "fields": [{"name": "quickbooks_realm_id", "label": "QuickBooks Company ID",
            "type": "text", "validation": "^[0-9]{10,20}$"}]
    })
}

/// Signs `user` in, makes a conversation with the given requests, and opens it.
async fn open_with_requests(
    fx: &Fixture,
    b: &Browser,
    requests: impl Fn(&str) -> Vec<Value>,
) -> (String, String) {
    let user = unique("cards");
    let token = fx.server.token(&user).await;
    let conversation = fx.server.new_conversation(&token).await;
    for body in requests(&conversation) {
        let (status, created) = fx.server.action(&token, body).await;
        assert_eq!(status.as_u16(), 201, "{created}");
    }
    sign_in(b, &fx.base(), &user).await;
    open_app(b, &format!("{}/#/c/{conversation}", fx.base())).await;
    (token, conversation)
}

fn card(tool_call_id: &str) -> String {
    // Quoted: an id may begin with a digit, which a bare CSS value may not.
    format!("[data-testid=input-card][data-tool-call-id=\"{tool_call_id}\"]")
}

#[tokio::test]
async fn every_field_type_renders_labelled_with_defaults_and_cards_work_independently() {
    let Some(fx) = Fixture::start("every_type").await else {
        return;
    };
    let b = fx.browser().await;
    let (big, small) = (call_id(), call_id());
    let (token, conversation) =
        open_with_requests(&fx, &b, |c| vec![every_type(c, &big), simple(c, &small)]).await;
    let big_card = card(&big);
    let small_card = card(&small);
    b.wait_for(&format!("{big_card}[data-status=pending]"))
        .await
        .expect("big card");
    b.wait_for(&format!("{small_card}[data-status=pending]"))
        .await
        .expect("small card");
    // Made through the API: each card says a program asked, not a tool of the chat.
    for made in [&big_card, &small_card] {
        let said = b
            .text(&format!("{made} [data-testid=card-from-api]"))
            .await
            .expect("the card says who asked");
        assert!(said.contains("through toolgate's API"), "{said}");
    }

    // Each field: its control, and a label tied to it.
    let kinds = b
        .execute(
            r#"const card = document.querySelector(arguments[0]);
               const out = {};
               for (const f of card.querySelectorAll('[data-testid=field]')) {
                 const c = f.querySelector('input,select,textarea');
                 const label = c.id ? document.querySelector(`label[for="${c.id}"]`) : null;
                 out[f.dataset.field] = {
                   tag: c.tagName.toLowerCase(), type: c.type || '', value: c.value,
                   checked: !!c.checked, labelled: !!label, legend: !!f.querySelector('legend'),
                   boxes: f.querySelectorAll('input[type=checkbox]').length };
               }
               return out;"#,
            vec![json!(big_card)],
        )
        .await
        .expect("fields");
    let expect = [
        ("service", "input", "text"),
        ("replicas", "input", "number"),
        ("region", "select", "select-one"),
        ("canary", "input", "checkbox"),
        ("window", "input", "date"),
        ("owner", "input", "email"),
        ("runbook", "input", "url"),
        ("notes", "textarea", "textarea"),
        ("api_key", "input", "password"),
        ("checks", "input", "checkbox"),
    ];
    for (name, tag, kind) in expect {
        let field = &kinds[name];
        assert_eq!(field["tag"], tag, "{name}: {field}");
        assert_eq!(field["type"], kind, "{name}: {field}");
        if name == "checks" {
            assert_eq!(field["legend"], true, "multiselect has a legend");
            assert_eq!(field["boxes"], 3);
        } else {
            assert_eq!(field["labelled"], true, "{name} has a label: {field}");
        }
    }
    assert_eq!(kinds["replicas"]["value"], "3", "default filled in");
    assert_eq!(kinds["region"]["value"], "eu", "default chosen");
    let text = b.text(&big_card).await.expect("card text");
    assert!(text.contains("As named in the service catalogue"));
    assert!(
        text.contains("Remembered for all your conversations"),
        "{text}"
    );
    assert!(text.contains("Remembered for this conversation"), "{text}");

    // Type into the big card, then answer the small one: the big one keeps its text.
    let service = b
        .find(&format!("{big_card} [data-field=service] input"))
        .await
        .expect("service");
    service.send_keys("billing-api").await.expect("type");
    let realm = b.find(&format!("{small_card} input")).await.expect("realm");
    realm.send_keys("1234567890").await.expect("type");
    realm.send_keys(ENTER).await.expect("submit");
    b.wait_for(&format!("{small_card}[data-status=completed]"))
        .await
        .expect("small completed");
    assert_eq!(
        b.count(&format!("{big_card}[data-status=pending]"))
            .await
            .expect("big"),
        1
    );
    assert_eq!(
        service.prop("value").await.expect("value"),
        "billing-api",
        "typing survives the other card's submit"
    );

    // Fill the rest of the big card.
    let submit = b
        .find(&format!("{big_card} [data-testid=card-submit]"))
        .await
        .expect("submit");
    assert!(!submit.is_enabled().await.expect("enabled?"));
    let field = |name: &str| format!("{big_card} [data-field={name}] input");
    b.execute(
        "const i = document.querySelector(arguments[0]); i.value = '2030-01-31'; i.dispatchEvent(new Event('input', {bubbles: true}));",
        vec![json!(field("window"))],
    )
    .await
    .expect("set date");
    b.find(&field("owner"))
        .await
        .expect("owner")
        .send_keys("not-an-email")
        .await
        .expect("type");
    b.wait_until(
        "the email message",
        &format!(
            "document.querySelector('{big_card} [data-field=owner] [data-testid=field-error]').innerText === 'Must be an email address'"
        ),
    )
    .await
    .expect("email message");
    b.find(&field("owner"))
        .await
        .expect("owner")
        .send_keys("\u{E009}a\u{E000}ops@example.com")
        .await
        .expect("retype");
    b.find(&field("api_key"))
        .await
        .expect("key")
        .send_keys("s3cret-value-42")
        .await
        .expect("type");
    b.find(&format!(
        "{big_card} [data-field=checks] input[value=smoke]"
    ))
    .await
    .expect("smoke")
    .click()
    .await
    .expect("tick");
    b.find(&field("canary"))
        .await
        .expect("canary")
        .click()
        .await
        .expect("tick");
    b.wait_until(
        "the big card to be valid",
        &format!("!document.querySelector('{big_card} [data-testid=card-submit]').disabled"),
    )
    .await
    .expect("valid");
    submit.click().await.expect("submit");
    let done = b
        .wait_for(&format!("{big_card}[data-status=completed]"))
        .await
        .expect("big completed");
    let summary = done.text().await.expect("summary");
    assert!(summary.contains("billing-api"), "{summary}");
    assert!(summary.contains("smoke"), "{summary}");
    // A choice as the user chose it: the region by its label, not its value (`eu`).
    let region = b
        .execute(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText)",
            vec![json!(format!("{big_card} [data-testid=sent-value]"))],
        )
        .await
        .expect("sent values");
    assert!(
        region
            .as_array()
            .is_some_and(|shown| shown.contains(&json!("Europe"))),
        "{region}"
    );
    let page = b
        .execute("return document.body.innerText", vec![])
        .await
        .expect("page");
    assert!(
        !page
            .as_str()
            .unwrap_or_default()
            .contains("s3cret-value-42"),
        "a secret is never shown back"
    );

    // What the server stored matches.
    let (_, saved) = fx
        .server
        .action(
            &token,
            json!({"action": "get_session_values", "conversation_id": conversation}),
        )
        .await;
    let names: Vec<&str> = saved["values"]
        .as_array()
        .expect("values")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(
        names.contains(&"api_key") && names.contains(&"owner"),
        "{saved}"
    );
    b.quit().await;
}

#[tokio::test]
async fn server_field_errors_show_on_their_fields() {
    let Some(fx) = Fixture::start("server_422").await else {
        return;
    };
    let b = fx.browser().await;
    let id = call_id();
    open_with_requests(&fx, &b, |c| vec![simple(c, &id)]).await;
    let input = b
        .wait_for(&format!("{} input", card(&id)))
        .await
        .expect("card");
    // The browser and the server share their rules, so only a server that changed its
    // mind answers 422 to a value the card accepted: stand in for one, once.
    b.execute(
        r#"const real = window.fetch;
           window.fetch = (url, init) => {
             if (String(url).includes('/api/tool-user-input') && init && String(init.body).includes('submit_response')) {
               window.fetch = real;
               return Promise.resolve(new Response(JSON.stringify({error: {code: 'validation_failed',
                 message: 'some values are not valid',
                 fields: {quickbooks_realm_id: 'No QuickBooks company has this ID'}}}),
                 {status: 422, headers: {'content-type': 'application/json'}}));
             }
             return real(url, init);
           };"#,
        vec![],
    )
    .await
    .expect("stand-in");
    input.send_keys("1234567890").await.expect("type");
    input.send_keys(ENTER).await.expect("submit");
    b.wait_until(
        "the server's message on the field",
        "document.querySelector('[data-testid=input-card] [data-testid=field-error]').innerText === 'No QuickBooks company has this ID'",
    )
    .await
    .expect("server message");
    let error = b
        .find("[data-testid=card-error]")
        .await
        .expect("card error");
    assert_eq!(
        error.attr("role").await.expect("role").as_deref(),
        Some("alert")
    );
    assert_eq!(
        input.attr("aria-invalid").await.expect("aria").as_deref(),
        Some("true")
    );
    let active = b.active().await.expect("focus");
    assert_eq!(
        active.attr("id").await.expect("id"),
        input.attr("id").await.expect("id"),
        "focus goes to the field with the error"
    );
    // Editing the field clears the server's message; the real server then accepts.
    input
        .send_keys("\u{E009}a\u{E000}9130346988354456")
        .await
        .expect("retype");
    b.wait_until(
        "the message to clear",
        "document.querySelector('[data-testid=input-card] [data-testid=field-error]').innerText === ''",
    )
    .await
    .expect("cleared");
    input.send_keys(ENTER).await.expect("submit");
    b.wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("completed");
    b.quit().await;
}

#[tokio::test]
async fn a_request_that_runs_out_of_time_while_shown_turns_expired_keeping_what_was_typed() {
    let Some(fx) = Fixture::start("expired").await else {
        return;
    };
    let b = fx.browser().await;
    let id = call_id();
    open_with_requests(&fx, &b, |c| vec![simple(c, &id)]).await;
    let pending = format!("{}[data-status=pending]", card(&id));
    b.wait_for(&pending).await.expect("pending card");
    // Its time runs out a few seconds from now, while the page is open.
    let mut db = <sqlx::PgConnection as sqlx::Connection>::connect(&fx.server.database_url)
        .await
        .expect("db");
    sqlx::query(
        "update tool_user_input_requests set expires_at = now() + interval '15 seconds' where tool_call_id = $1",
    )
    .bind(&id)
    .execute(&mut db)
    .await
    .expect("shorten");
    // What the user typed and could not send is shown once the card has ended, a
    // reload between.
    b.find(&format!("{pending} input"))
        .await
        .expect("input")
        .send_keys("9130346988354456")
        .await
        .expect("type");
    crate::reload(&b).await;
    b.wait_for(&pending)
        .await
        .expect("still pending after the reload");
    b.wait_for(&format!(
        "{}[data-status=expired] [data-testid=card-expired]",
        card(&id)
    ))
    .await
    .expect("expired card");
    assert_eq!(
        b.count("[data-testid=card-submit]").await.expect("no form"),
        0
    );
    let unsent = b
        .find(&format!("{} [data-testid=unsent-value]", card(&id)))
        .await
        .expect("what was typed");
    assert_eq!(unsent.text().await.expect("text"), "9130346988354456");
    b.quit().await;
}

/// What the user typed into a card and has not sent survives a reload (never a
/// secret, which is neither shown again nor kept in the tab); once sent, nothing of it
/// is kept.
#[tokio::test]
async fn what_was_typed_into_a_card_survives_a_reload_but_never_a_secret() {
    let Some(fx) = Fixture::start("typed_kept").await else {
        return;
    };
    let b = fx.browser().await;
    let (big, small) = (call_id(), call_id());
    open_with_requests(&fx, &b, |c| vec![every_type(c, &big), simple(c, &small)]).await;
    let (big_card, small_card) = (
        format!("{}[data-status=pending]", card(&big)),
        format!("{}[data-status=pending]", card(&small)),
    );
    b.wait_for(&big_card).await.expect("big card");
    let field =
        |card: &str, name: &str, control: &str| format!("{card} [data-field={name}] {control}");
    let secret = "s3cret-kept-nowhere";
    for (selector, keys) in [
        (field(&big_card, "service", "input"), "billing-api"),
        (field(&big_card, "api_key", "input"), secret),
        (format!("{small_card} input"), "9130346988354456"),
    ] {
        b.find(&selector)
            .await
            .expect("input")
            .send_keys(keys)
            .await
            .expect("type");
    }
    b.find(&field(&big_card, "region", "select option[value=us]"))
        .await
        .expect("option")
        .click()
        .await
        .expect("choose");
    crate::reload(&b).await;
    b.wait_for(&big_card).await.expect("big card again");
    let value_of = |selector: String| {
        let b = &b;
        async move {
            b.find(&selector)
                .await
                .expect("control")
                .prop("value")
                .await
                .expect("value")
        }
    };
    assert_eq!(
        value_of(field(&big_card, "service", "input")).await,
        "billing-api"
    );
    assert_eq!(value_of(field(&big_card, "region", "select")).await, "us");
    assert_eq!(value_of(field(&big_card, "api_key", "input")).await, "");
    assert_eq!(
        value_of(format!("{small_card} input")).await,
        "9130346988354456"
    );
    let kept = || b.execute("return JSON.stringify(sessionStorage)", vec![]);
    let stored = kept().await.expect("storage");
    let stored = stored.as_str().unwrap_or_default();
    assert!(stored.contains("billing-api"), "{stored}");
    assert!(!stored.contains(secret), "a secret was kept: {stored}");

    // Sent, the small card's values are no longer kept.
    b.find(&format!("{small_card} input"))
        .await
        .expect("input")
        .send_keys(ENTER)
        .await
        .expect("submit");
    b.wait_for(&format!("{}[data-status=completed]", card(&small)))
        .await
        .expect("completed");
    let stored = kept().await.expect("storage");
    let stored = stored.as_str().unwrap_or_default();
    assert!(!stored.contains("9130346988354456"), "{stored}");
    assert!(stored.contains("billing-api"), "{stored}");
    b.quit().await;
}

#[tokio::test]
async fn remembered_values_panel_masks_secrets_and_clears() {
    let Some(fx) = Fixture::start("saved_values").await else {
        return;
    };
    let b = fx.browser().await;
    let id = call_id();
    let (token, conversation) = open_with_requests(&fx, &b, |c| {
        vec![json!({
            "action": "create_request", "conversation_id": c, "tool_name": "post_webhook",
            "tool_call_id": id, "reason": "Posting needs your webhook and its token",
            "save_for": "session",
            "fields": [{"name": "webhook_url", "label": "Webhook URL", "type": "url"},
                       {"name": "webhook_token", "label": "Webhook token", "type": "secret"}]
        })]
    })
    .await;
    b.wait_for("[data-testid=input-card][data-status=pending]")
        .await
        .expect("card");
    b.find("[data-field=webhook_url] input")
        .await
        .expect("url")
        .send_keys("https://hooks.example.com/T1")
        .await
        .expect("type");
    let secret = b
        .find("[data-field=webhook_token] input")
        .await
        .expect("token");
    secret.send_keys("tok-very-secret").await.expect("type");
    secret.send_keys(ENTER).await.expect("submit");
    b.wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("completed");

    b.click_on("[data-testid=saved-values] summary")
        .await
        .expect("open");
    b.wait_until(
        "two remembered values",
        "document.querySelectorAll('[data-testid=saved-value]').length === 2",
    )
    .await
    .expect("two values");
    let panel = b
        .text("[data-testid=saved-values]")
        .await
        .expect("panel text");
    assert!(panel.contains("https://hooks.example.com/T1"), "{panel}");
    assert!(panel.contains("••••••••"), "secret masked: {panel}");
    assert!(!panel.contains("tok-very-secret"), "{panel}");
    assert!(panel.contains("this conversation"), "{panel}");
    screenshot(&b, "saved-values.png").await;

    b.click_on("[data-testid=clear-saved]")
        .await
        .expect("click clear");
    b.wait_for("[data-testid=saved-empty]")
        .await
        .expect("nothing remembered");
    let status = b.text("[data-testid=saved-status]").await.expect("status");
    assert_eq!(status, "Forgot 2 values.");
    let (_, saved) = fx
        .server
        .action(
            &token,
            json!({"action": "get_session_values", "conversation_id": conversation}),
        )
        .await;
    assert_eq!(saved["values"], json!([]));
    b.quit().await;
}

#[tokio::test]
async fn a_user_wide_secret_is_forgotten_from_the_panel_in_every_conversation() {
    let Some(fx) = Fixture::start("forget_user_wide").await else {
        return;
    };
    let b = fx.browser().await;
    let id = call_id();
    let (token, conversation) = open_with_requests(&fx, &b, |c| {
        vec![json!({
            "action": "create_request", "conversation_id": c, "tool_name": "post_webhook",
            "tool_call_id": id, "reason": "Posting needs your webhook token",
            "save_for": "user",
            "fields": [{"name": "webhook_token", "label": "Webhook token", "type": "secret"}]
        })]
    })
    .await;
    b.wait_for("[data-testid=input-card][data-status=pending]")
        .await
        .expect("card");
    let secret = b
        .find("[data-field=webhook_token] input")
        .await
        .expect("token");
    secret.send_keys("tok-user-wide").await.expect("type");
    secret.send_keys(ENTER).await.expect("submit");
    b.wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("completed");
    // Remembered for the user: another conversation sees it too.
    let elsewhere = fx.server.new_conversation(&token).await;
    let remembered = |conversation: String| {
        let (server, token) = (&fx.server, token.clone());
        async move {
            let (_, saved) = server
                .action(
                    &token,
                    json!({"action": "get_session_values", "conversation_id": conversation}),
                )
                .await;
            saved["values"].as_array().cloned().unwrap_or_default()
        }
    };
    let before = remembered(elsewhere.clone()).await;
    assert_eq!(before.len(), 1, "{before:?}");
    assert_eq!(before[0]["scope"], "user", "{before:?}");

    b.click_on("[data-testid=saved-values] summary")
        .await
        .expect("open");
    b.wait_until(
        "the user-wide value listed",
        "document.querySelectorAll('[data-testid=saved-value]').length === 1",
    )
    .await
    .expect("one value");
    let panel = b
        .text("[data-testid=saved-values]")
        .await
        .expect("panel text");
    assert!(panel.contains("all your conversations"), "{panel}");
    assert!(!panel.contains("tok-user-wide"), "{panel}");
    b.click_on("[data-testid=forget-saved]")
        .await
        .expect("click forget");
    b.wait_for("[data-testid=saved-empty]")
        .await
        .expect("nothing remembered");
    let status = b.text("[data-testid=saved-status]").await.expect("status");
    assert_eq!(status, "Forgot 1 value.");
    assert_eq!(remembered(conversation).await, Vec::<Value>::new());
    assert_eq!(remembered(elsewhere).await, Vec::<Value>::new());
    b.quit().await;
}

/// A card made through the action API under the id of a genuine call of another tool
/// is not shown inside that call, as if that tool had asked: it stands apart, under its
/// own tool's name, and the call keeps its own state.
#[tokio::test]
async fn a_card_under_the_id_of_another_tools_call_is_not_shown_as_that_tools() {
    let Some(fx) = Fixture::start("spoofed_card").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("cards");
    let token = fx.server.token(&user).await;
    let conversation = fx.server.new_conversation(&token).await;
    fx.server
        .start_run(&token, &conversation, json!("what is (1200 - 300) * 1.2?"))
        .await;
    fx.server
        .events_until(
            &token,
            &conversation,
            0,
            std::time::Duration::from_secs(30),
            |e| e["type"] == "run_status" && e["run"]["status"] == "completed",
        )
        .await;
    let messages = fx.server.messages(&token, &conversation).await;
    let call = messages
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|block| block["type"] == "tool_call")
        .unwrap_or_else(|| panic!("a tool call: {messages:#?}"));
    assert_eq!(call["name"], "calculator", "{call}");
    let id = call["id"].as_str().expect("call id").to_owned();
    let (status, created) = fx.server.action(&token, simple(&conversation, &id)).await;
    assert_eq!(status.as_u16(), 201, "{created}");

    sign_in(&b, &fx.base(), &user).await;
    open_app(&b, &format!("{}/#/c/{conversation}", fx.base())).await;
    b.wait_for(&card(&id)).await.expect("the card is shown");
    let inside = b
        .execute(
            "return document.querySelectorAll(`[data-testid=tool-call] ${arguments[0]}`).length",
            vec![json!(card(&id))],
        )
        .await
        .expect("count");
    assert_eq!(
        inside,
        json!(0),
        "the card sits inside the calculator's call"
    );
    let state = b
        .execute(
            "return document.querySelector('[data-testid=tool-call][data-tool=calculator]').dataset.state",
            vec![],
        )
        .await
        .expect("state");
    assert_eq!(state, json!("done"));
}

/// A field's name is the caller's to choose: a text field named like a choice or a part
/// of a multiselect beside it (`plan-0`, `plan-error`) gets an input of its own, its
/// label pointing at it, not at the choice; and a multiselect with nothing chosen still
/// takes the focus when the card says it is missing.
#[tokio::test]
async fn every_input_of_a_card_has_an_id_of_its_own() {
    let Some(fx) = Fixture::start("unique_ids").await else {
        return;
    };
    let b = fx.browser().await;
    let id = call_id();
    open_with_requests(&fx, &b, |c| {
        vec![json!({
            "action": "create_request", "conversation_id": c, "tool_name": "deploy_service",
            "tool_call_id": id, "reason": "Choose",
            "fields": [
                {"name": "plan", "label": "Plan", "type": "multiselect",
                 "options": ["share publicly", "keep private"]},
                {"name": "plan-0", "label": "Card number", "type": "text"},
                {"name": "plan-error", "label": "Note", "type": "text", "required": false}
            ]
        })]
    })
    .await;
    b.wait_for(&format!("{} input", card(&id)))
        .await
        .expect("card");
    let ids = b
        .execute(
            "return [...document.querySelectorAll(`${arguments[0]} [id]`)].map(e => e.id)",
            vec![json!(card(&id))],
        )
        .await
        .expect("ids");
    let ids: Vec<&str> = ids
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let unique: std::collections::BTreeSet<&&str> = ids.iter().collect();
    assert_eq!(unique.len(), ids.len(), "{ids:?}");
    let labelled = b
        .execute(
            "const label = [...document.querySelectorAll(`${arguments[0]} label`)]\
               .find(l => l.textContent.includes('Card number'));\
             return document.getElementById(label.htmlFor).type",
            vec![json!(card(&id))],
        )
        .await
        .expect("label target");
    assert_eq!(labelled, json!("text"));

    // A multiselect left empty: the card's complaint moves focus to its first choice.
    b.find(&format!("{} input[type=text]", card(&id)))
        .await
        .expect("text field")
        .send_keys(ENTER)
        .await
        .expect("submit with Enter");
    b.wait_until(
        "the first choice to have focus",
        "document.activeElement && document.activeElement.type === 'checkbox'",
    )
    .await
    .expect("focus on the multiselect");
}

/// A card's text that holds a character that hides or reorders text, or letters that
/// only look Latin, is written out beneath its input as it will be sent: a default the
/// card's maker chose (as a model's proposal is shown) and what the user pastes alike,
/// and a line break in a one-line input, which shows none. A secret is never written
/// out, nor a plain text.
#[tokio::test]
async fn a_cards_text_with_hidden_characters_is_written_out_beneath_it() {
    let Some(fx) = Fixture::start("card_hidden_text").await else {
        return;
    };
    let b = fx.browser().await;
    let id = call_id();
    open_with_requests(&fx, &b, |c| {
        vec![json!({
            "action": "create_request", "conversation_id": c, "tool_name": "send_invoice",
            "tool_call_id": id, "reason": "Where to send the invoice",
            "fields": [
                // Past the override the rest reads right to left: "invoice-exe.pdf".
                {"name": "file", "label": "File", "type": "text",
                 "default": "invoice-\u{202E}fdp.exe"},
                {"name": "payee", "label": "Payee", "type": "text", "default": "acme.com"},
                // A one-line input shows no line break: "alice@corp.combob@evil.com".
                {"name": "to", "label": "To", "type": "text",
                 "default": "alice@corp.com\nbob@evil.com"},
                {"name": "notes", "label": "Notes", "type": "textarea", "required": false},
                {"name": "key", "label": "Key", "type": "secret", "required": false}
            ]
        })]
    })
    .await;
    let field = |name: &str| format!("{} [data-testid=field][data-field={name}]", card(&id));
    let revealed = b
        .wait_for(&format!(
            "{} [data-testid=field-revealed] code",
            field("file")
        ))
        .await
        .expect("the default written out");
    assert_eq!(
        revealed.text().await.expect("text"),
        "invoice-⟨U+202E⟩fdp.exe"
    );
    // Read out with the input, too.
    let described_by = b
        .execute(
            "const row = document.querySelector(arguments[0]);\
             const note = row.querySelector('[data-testid=field-revealed]');\
             return row.querySelector('input').getAttribute('aria-describedby')\
               .split(' ').includes(note.id);",
            vec![json!(field("file"))],
        )
        .await
        .expect("described by");
    assert_eq!(described_by, json!(true));
    let to = b
        .wait_for(&format!(
            "{} [data-testid=field-revealed] code",
            field("to")
        ))
        .await
        .expect("the line break written out");
    assert_eq!(
        to.text().await.expect("text"),
        "alice@corp.com⟨U+000A⟩bob@evil.com"
    );
    // As if pasted: a look-alike letter in a Latin word, and a hidden character in a secret.
    for (name, text) in [
        ("notes", "pay to ac\\u0441ount 7"),
        ("key", "s3\\u200Bcret"),
    ] {
        b.execute(
            &format!(
                "const input = document.querySelector({});\
                 input.value = '{text}';\
                 input.dispatchEvent(new Event('input', {{bubbles: true}}));",
                json!(format!("{} [data-testid=field-input]", field(name)))
            ),
            vec![],
        )
        .await
        .expect("type into the field");
    }
    let notes = b
        .wait_for(&format!(
            "{} [data-testid=field-revealed] code",
            field("notes")
        ))
        .await
        .expect("the pasted text written out");
    assert_eq!(notes.text().await.expect("text"), "pay to ac⟨U+0441⟩ount 7");
    for name in ["payee", "key"] {
        assert!(
            b.find_all(&format!("{} [data-testid=field-revealed]", field(name)))
                .await
                .expect("query")
                .is_empty(),
            "{name} is not written out"
        );
    }
    b.quit().await;
}
