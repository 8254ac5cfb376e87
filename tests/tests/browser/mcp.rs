//! An MCP server's questions in the web chat: a form card that names the server, offers
//! a control for every kind of field and refuses a bad value itself; the warning on a
//! password field and declining it; a link card that opens nothing until clicked; and
//! cards that survive a reload.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tests::{TempDir, TestServer, write_temp_file};

use crate::webdriver::Browser;
use crate::{
    Fixture, new_conversation, open_app, reload, sign_in, unique, wait_for_answer, wait_idle,
};

/// A fixture whose tools file names only the test MCP server, as `t`, over stdio.
async fn with_test_server(test: &str) -> Option<(Fixture, TempDir)> {
    let binary = tests::mcp_server::binary().expect("the test MCP server is built with the tests");
    let (dir, path) = write_temp_file(
        "tools.toml",
        &format!(
            "[[mcp_servers]]\nname = \"t\"\ncommand = \"{}\"\ntrust_annotations = true\n",
            binary.display()
        ),
    );
    let fx = Fixture::start_with(test, |options| {
        options.env("TOOLGATE_TOOLS", &path.to_string_lossy())
    })
    .await?;
    wait_for_server(&fx.server, "t").await;
    Some((fx, dir))
}

async fn wait_for_server(server: &TestServer, name: &str) {
    let token = server.token("mcp-probe").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, tools) = server.send("GET", "/api/tools", Some(&token), None).await;
        let connected = tools["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["name"] == name && s["status"] == "connected");
        if connected {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "MCP server {name} did not connect: {tools}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Calls the server's tool outside a run; it asks, and the answer is a card.
async fn ask(server: &TestServer, token: &str, conversation: &str, tool: &str, args: Value) {
    let (status, body) = server
        .send(
            "POST",
            "/api/tools/execute",
            Some(token),
            Some(json!({"conversation_id": conversation, "tool_name": tool,
                "tool_call_id": format!("call_{}", uuid::Uuid::new_v4().simple()),
                "arguments": args})),
        )
        .await;
    assert_eq!(body["requires_user_input"], true, "{status}: {body}");
}

fn card_of(tool: &str) -> String {
    format!("[data-testid=input-card][data-tool={tool}]")
}

async fn open_conversation(fx: &Fixture, b: &Browser, user: &str, conversation: &str) {
    sign_in(b, &fx.base(), user).await;
    open_app(b, &format!("{}/#/c/{conversation}", fx.base())).await;
}

#[tokio::test]
async fn an_mcp_form_names_its_server_offers_every_control_and_survives_a_reload() {
    let Some((fx, _tools)) = with_test_server("mcp_form").await else {
        return;
    };
    let user = unique("mcp-form");
    let token = fx.server.token(&user).await;
    let conversation = fx.server.new_conversation(&token).await;
    ask(
        &fx.server,
        &token,
        &conversation,
        "t__ask_everything",
        json!({}),
    )
    .await;
    ask(
        &fx.server,
        &token,
        &conversation,
        "t__ask_password",
        json!({}),
    )
    .await;
    let b = fx.browser().await;
    // Not the server's zone (UTC), and summer time on the date typed below.
    b.set_time_zone("Europe/Berlin").await.expect("time zone");
    open_conversation(&fx, &b, &user, &conversation).await;

    let form = card_of("t__ask_everything");
    b.wait_for(&format!("{form}[data-status=pending]"))
        .await
        .expect("the form card");
    // A reload finds the same question: it lives in the database, not in the tab.
    reload(&b).await;
    b.wait_for(&format!("{form}[data-status=pending]"))
        .await
        .expect("the form card after a reload");
    let server_line = b
        .text(&format!("{form} [data-testid=card-server]"))
        .await
        .expect("who asks");
    assert!(server_line.contains("MCP server t"), "{server_line}");

    let controls = b
        .execute(
            r#"const out = {};
               for (const f of document.querySelector(arguments[0]).querySelectorAll('[data-testid=field]')) {
                 const c = f.querySelector('input,select');
                 out[f.dataset.field] = [c.type, c.step || '', c.value,
                   f.querySelectorAll('input[type=checkbox]').length];
               }
               return out;"#,
            vec![json!(form)],
        )
        .await
        .expect("controls");
    let expect = [
        ("name", "text"),
        ("email", "email"),
        ("homepage", "url"),
        ("birthday", "date"),
        ("meeting", "datetime-local"),
        ("age", "number"),
        ("budget", "number"),
        ("subscribe", "checkbox"),
        ("colour", "select-one"),
        ("size", "select-one"),
        ("legacy_pick", "select-one"),
        ("toppings", "checkbox"),
        ("extras", "checkbox"),
    ];
    for (name, kind) in expect {
        assert_eq!(controls[name][0], kind, "{name}: {controls}");
    }
    assert_eq!(controls["age"][1], "1", "whole numbers only: {controls}");
    assert_eq!(controls["budget"][1], "any", "{controls}");
    assert_eq!(controls["age"][2], "30", "the server's default: {controls}");
    assert_eq!(controls["toppings"][3], 2, "{controls}");
    let labels = b
        .text(&format!("{form} [data-field=size]"))
        .await
        .expect("size options");
    assert!(
        labels.contains("Large"),
        "titled options show their titles: {labels}"
    );

    // The password card carries the warning; the form's fields do not.
    let warning = b
        .text(&format!(
            "{} [data-field=password] [data-testid=field-warning]",
            card_of("t__ask_password")
        ))
        .await
        .expect("a warning on the password field");
    assert!(warning.contains("password"), "{warning}");
    assert_eq!(
        b.count(&format!("{form} [data-testid=field-warning]"))
            .await
            .expect("count"),
        0
    );

    // Fill what is required, plus a date and time in the browser's own zone.
    let name = b
        .find(&format!("{form} [data-field=name] input"))
        .await
        .expect("name");
    // Too short for the server's minLength: refused in the card, before any request.
    name.send_keys("A").await.expect("type");
    let refused = b
        .text(&format!(
            "{form} [data-field=name] [data-testid=field-error]"
        ))
        .await
        .expect("the field's error");
    assert!(
        !refused.is_empty(),
        "a one-letter name is refused in the card"
    );
    let submit = b
        .find(&format!("{form} [data-testid=card-submit]"))
        .await
        .expect("submit");
    assert!(
        !submit.is_enabled().await.expect("enabled?"),
        "nothing to send yet"
    );
    name.send_keys("da").await.expect("type");
    let browser_offset = b
        .execute(
            r#"const el = document.querySelector(arguments[0]);
               const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
               set.call(el, '2025-03-31T17:30');
               el.dispatchEvent(new Event('input', {bubbles: true}));
               return -new Date(2025, 2, 31, 17, 30).getTimezoneOffset();"#,
            vec![json!(format!("{form} [data-field=meeting] input"))],
        )
        .await
        .expect("set the meeting")
        .as_i64()
        .expect("minutes");
    b.find(&format!("{form} [data-testid=card-submit]"))
        .await
        .expect("submit")
        .click()
        .await
        .expect("click");
    b.wait_for(&format!("{form}[data-status=completed]"))
        .await
        .expect("the card completes");

    // Declining the password card tells the server so; the card says it was declined.
    let password = card_of("t__ask_password");
    b.find(&format!("{password} [data-testid=card-decline]"))
        .await
        .expect("decline")
        .click()
        .await
        .expect("click");
    b.wait_for(&format!("{password}[data-status=declined]"))
        .await
        .expect("the password card is declined");

    let mut db = fx.server.db().await;
    let sent: Value = sqlx::query_scalar(
        "select user_inputs from tool_user_input_requests where tool_name = 't__ask_everything'",
    )
    .fetch_one(&mut db)
    .await
    .expect("the answer");
    let sign = if browser_offset < 0 { '-' } else { '+' };
    let offset = format!(
        "{sign}{:02}:{:02}",
        browser_offset.abs() / 60,
        browser_offset.abs() % 60
    );
    assert_eq!(sent["name"], "Ada", "{sent}");
    assert_eq!(offset, "+02:00", "Berlin in summer");
    assert_eq!(
        sent["meeting"].as_str().unwrap_or_default(),
        format!("2025-03-31T17:30:00{offset}"),
        "wall time with the browser's offset: {sent}"
    );
    b.quit().await;
}

/// An approval card says, in toolgate's own words and apart from the reason, that a
/// value the model sent may be read by the tool's server as left out and replaced by
/// its default: the user approves knowing what may run.
#[tokio::test]
async fn an_approval_card_notes_a_value_its_server_may_replace_with_a_default() {
    let Some((fx, _dir)) = with_test_server("mcp_note").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("mcp-note");
    let token = fx.server.token(&user).await;
    let conversation = fx.server.new_conversation(&token).await;
    let (status, body) = fx
        .server
        .execute_tool(
            &token,
            &conversation,
            "t__archive_things",
            "call_archive_note",
            json!({"include_shared": false}),
        )
        .await;
    assert_eq!(body["requires_approval"], true, "{status}: {body}");
    open_conversation(&fx, &b, &user, &conversation).await;
    let card = "[data-testid=approval-card][data-tool-call-id=call_archive_note]";
    let note = b
        .wait_for(&format!("{card} [data-testid=card-note]"))
        .await
        .expect("the note")
        .text()
        .await
        .expect("text");
    assert!(
        note.starts_with("Note from toolgate: ")
            && note.contains("`include_shared` is sent as false")
            && note.contains("the default its schema gives: true"),
        "{note}"
    );
    let reason = b
        .find(&format!("{card} [data-testid=card-reason]"))
        .await
        .expect("reason")
        .text()
        .await
        .expect("text");
    assert!(!reason.contains("include_shared"), "{reason}");
    b.quit().await;
}

#[tokio::test]
async fn a_link_card_shows_its_site_opens_nothing_until_clicked_and_done_answers() {
    let Some((fx, _tools)) = with_test_server("mcp_link").await else {
        return;
    };
    let user = unique("mcp-link");
    let token = fx.server.token(&user).await;
    let conversation = fx.server.new_conversation(&token).await;
    ask(&fx.server, &token, &conversation, "t__open_link", json!({})).await;
    let b = fx.browser().await;
    open_conversation(&fx, &b, &user, &conversation).await;

    let card = card_of("t__open_link");
    b.wait_for(&format!("{card}[data-status=pending]"))
        .await
        .expect("the link card");
    let host = b
        .text(&format!("{card} [data-testid=link-host]"))
        .await
        .expect("the site");
    assert_eq!(host, "auth.example.com");
    let link = b
        .execute(
            r#"const a = document.querySelector(arguments[0]);
               return [a.getAttribute('href'), a.target, a.rel, window.location.href];"#,
            vec![json!(format!("{card} [data-testid=card-open-link]"))],
        )
        .await
        .expect("the link");
    assert!(
        link[0]
            .as_str()
            .unwrap_or_default()
            .starts_with("https://auth.example.com/connect"),
        "{link}"
    );
    assert_eq!(link[1], "_blank", "a new tab: {link}");
    assert!(
        link[2].as_str().unwrap_or_default().contains("noopener"),
        "{link}"
    );
    assert!(
        link[3].as_str().unwrap_or_default().starts_with(&fx.base()),
        "nothing was opened: {link}"
    );
    assert_eq!(
        b.count(&format!("{card} input")).await.expect("count"),
        0,
        "nothing to type on a link card"
    );
    b.find(&format!("{card} [data-testid=card-submit]"))
        .await
        .expect("done")
        .click()
        .await
        .expect("click");
    b.wait_for(&format!("{card}[data-status=completed]"))
        .await
        .expect("the card completes");
    let words = b.text(&card).await.expect("card text");
    assert!(words.contains("The server was told"), "{words}");
    b.quit().await;
}

/// What the run command starts: the offline model, the example tools and the sample
/// calendar that ships with toolgate.
#[tokio::test]
async fn the_shipped_calendar_plans_a_meeting_through_both_cards() {
    let Some(fx) = Fixture::start("mcp_calendar").await else {
        return;
    };
    wait_for_server(&fx.server, "calendar").await;
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("mcp-calendar")).await;
    new_conversation(&b).await;
    crate::ask(&b, "Plan a meeting about the roadmap").await;

    // toolgate's own card first: the organizer address is user-only (an overlay).
    let address = card_of("calendar__plan_meeting");
    b.wait_for(&format!(
        "{address}[data-status=pending] [data-field=organizer_email] input"
    ))
    .await
    .expect("the address card")
    .send_keys("ada@example.com")
    .await
    .expect("type");
    b.find(&format!("{address} [data-testid=card-submit]"))
        .await
        .expect("submit")
        .click()
        .await
        .expect("click");

    // Then the calendar's own question, as a card that names it.
    let form = "[data-testid=input-card][data-status=pending]:has([data-testid=card-server])";
    b.wait_for(form).await.expect("the calendar's form");
    let asked_by = b
        .text(&format!("{form} [data-testid=card-server]"))
        .await
        .expect("who asks");
    assert!(asked_by.contains("calendar"), "{asked_by}");
    b.execute(
        r#"const card = document.querySelector(arguments[0]);
           const starts = card.querySelector('[data-field=starts] input');
           const set = Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set;
           set.call(starts, '2026-12-01T10:00');
           starts.dispatchEvent(new Event('input', {bubbles: true}));
           card.querySelector('[data-field=attendees] input[type=checkbox]').click();
           const room = card.querySelector('[data-field=room] select');
           room.value = 'harbour';
           room.dispatchEvent(new Event('change', {bubbles: true}));"#,
        vec![json!(form)],
    )
    .await
    .expect("fill the form");
    b.find(&format!("{form} [data-testid=card-submit]"))
        .await
        .expect("submit")
        .click()
        .await
        .expect("click");
    wait_for_answer(&b, "Harbour").await;
    wait_idle(&b).await;
    let row = b
        .text("[data-testid=tool-call][data-tool=calendar__plan_meeting] [data-testid=tool-server]")
        .await
        .expect("the tool row names its server");
    assert!(row.contains("calendar"), "{row}");
    b.quit().await;
}

/// Which server a tool comes from is asked once; when that one asking fails, the next
/// tool row to show asks again, and every row of the page says its server.
#[tokio::test]
async fn a_failed_look_up_of_the_tools_servers_is_tried_again() {
    let Some(fx) = Fixture::start("mcp_servers_again").await else {
        return;
    };
    wait_for_server(&fx.server, "calendar").await;
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("mcp-servers-again")).await;
    new_conversation(&b).await;
    b.execute(
        r#"const real = window.fetch;
           window.fetch = (url, init) => {
             if (String(url).endsWith('/api/tools') && !window.__failedOnce) {
               window.__failedOnce = true;
               return Promise.reject(new TypeError('offline for a moment'));
             }
             return real(url, init);
           };"#,
        vec![],
    )
    .await
    .expect("stand-in");
    crate::ask(&b, "List the meeting rooms").await;
    let rooms = "[data-testid=tool-call][data-tool=calendar__list_rooms]";
    b.wait_until(
        "the rooms to be listed",
        &format!("document.querySelector('{rooms}')?.dataset.state === 'done'"),
    )
    .await
    .expect("rooms listed");
    wait_idle(&b).await;
    assert_eq!(
        b.execute("return window.__failedOnce === true", vec![])
            .await
            .expect("asked"),
        json!(true),
        "the tool row asked which server its tool comes from"
    );
    crate::ask(&b, "what is (1200 - 300) * 1.2?").await;
    b.wait_until(
        "the first row to name its server",
        &format!("document.querySelector('{rooms} [data-testid=tool-server]') !== null"),
    )
    .await
    .expect("the server is named after all");
    b.quit().await;
}
