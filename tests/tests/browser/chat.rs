//! The chat with the offline model: the P&L card, remembered values, reload, cancel,
//! the database card with its select and conditional field, and two users.

use serde_json::json;

use crate::webdriver::{ENTER, ESCAPE, TAB};
use crate::{
    Fixture, ask, new_conversation, open_app, reload, screenshot, sign_in, unique, wait_for_answer,
    wait_idle,
};

const PNL: &str = "Get my P&L report for Q1 2025";
const PENDING_CARD: &str = "[data-testid=input-card][data-status=pending]";
const REALM_INPUT: &str =
    "[data-testid=input-card][data-status=pending] [data-field=quickbooks_realm_id] input";
const SELECT_ALL: &str = "\u{E009}a\u{E000}";

#[tokio::test]
async fn pnl_card_validates_as_you_type_then_completes_and_the_answer_streams_in() {
    let Some(fx) = Fixture::start("pnl_card").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("alice")).await;
    // Shown once the server has said which model it runs.
    b.wait_for("[data-testid=model-badge]")
        .await
        .expect("badge");
    let badge = b.text("[data-testid=model-badge]").await.expect("badge");
    assert!(badge.contains("offline"), "model badge: {badge}");

    new_conversation(&b).await;
    ask(&b, PNL).await;
    let card = b.wait_for(PENDING_CARD).await.expect("a card");
    let reason = card
        .find("[data-testid=card-reason]")
        .await
        .expect("reason")
        .text()
        .await
        .expect("reason text");
    assert_eq!(
        reason,
        "QuickBooks API requests require your Company ID (Realm ID)"
    );
    // The conversation is titled after the question.
    b.wait_until(
        "the conversation title",
        "[...document.querySelectorAll('[data-testid=conversation-item]')].some(i => i.innerText.includes('Get my P&L report'))",
    )
    .await
    .expect("title in the list");

    // The field: label tied to it, help, placeholder, required marker, remembered note.
    let input = b.find(REALM_INPUT).await.expect("company id input");
    let id = input
        .attr("id")
        .await
        .expect("id")
        .expect("input has an id");
    let label = b
        .execute(
            "const l = document.querySelector(`label[for=\"${arguments[0]}\"]`); return l && l.innerText;",
            vec![id.clone().into()],
        )
        .await
        .expect("label");
    let label = label.as_str().unwrap_or_default();
    assert!(label.contains("QuickBooks Company ID"), "label: {label}");
    assert!(label.contains('*'), "required marker in {label}");
    assert_eq!(
        input
            .attr("placeholder")
            .await
            .expect("placeholder")
            .as_deref(),
        Some("9130346988354456")
    );
    let field_text = b
        .text("[data-testid=input-card] [data-field=quickbooks_realm_id]")
        .await
        .expect("field text");
    assert!(field_text.contains("Find this in your QuickBooks URL"));
    assert!(field_text.contains("Remembered for this conversation"));

    // The focus goes to the card when it appears, not into its field: it was in the
    // message box, where keys meant for a next message must not fill in the form. Tab
    // reaches the empty field: keyboard only from here.
    b.wait_until(
        "the focus on the card",
        "document.activeElement && document.activeElement.dataset.testid === 'input-card'",
    )
    .await
    .expect("card focused");
    b.active()
        .await
        .expect("focused element")
        .send_keys(TAB)
        .await
        .expect("tab");
    b.wait_until(
        "the focus in the card's field",
        &format!(
            "document.activeElement && document.activeElement.id === {}",
            json!(id)
        ),
    )
    .await
    .expect("focused");
    let active = b.active().await.expect("focused element");
    active.send_keys("12ab").await.expect("type");
    b.wait_until(
        "the validation message",
        "document.querySelector('[data-testid=input-card] [data-testid=field-error]').innerText === 'Does not match the expected format'",
    )
    .await
    .expect("validation message");
    let submit = b.find("[data-testid=card-submit]").await.expect("submit");
    assert!(!submit.is_enabled().await.expect("enabled?"));
    assert_eq!(
        input.attr("aria-invalid").await.expect("aria").as_deref(),
        Some("true")
    );
    // Enter on an invalid card submits nothing.
    active.send_keys(ENTER).await.expect("enter");
    assert_eq!(b.count(PENDING_CARD).await.expect("count"), 1);

    active
        .send_keys(&format!("{SELECT_ALL}9130346988354456"))
        .await
        .expect("retype");
    b.wait_until(
        "the message to go",
        "document.querySelector('[data-testid=input-card] [data-testid=field-error]').innerText === ''",
    )
    .await
    .expect("valid");
    assert!(submit.is_enabled().await.expect("enabled?"));
    screenshot(&b, "card.png").await;

    // Record whether the reply is shown while it streams in, before it is stored.
    b.execute(
        "window.__sawDraft = false; new MutationObserver(() => { \
           if (document.querySelector('[data-testid=assistant-draft]')) window.__sawDraft = true; \
         }).observe(document.body, {childList: true, subtree: true, characterData: true});",
        vec![],
    )
    .await
    .expect("observer");
    active.send_keys(ENTER).await.expect("submit with Enter");
    let done = b
        .wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("completed card");
    let sent = done.text().await.expect("text");
    assert!(sent.contains("9130346988354456"), "{sent}");
    wait_for_answer(&b, "net income").await;
    let answer = b
        .execute(
            "const m = [...document.querySelectorAll('[data-testid=message-assistant]')].pop(); return m.innerText;",
            vec![],
        )
        .await
        .expect("answer");
    let answer = answer.as_str().unwrap_or_default();
    assert!(answer.contains("offline model"), "answer: {answer}");
    assert_eq!(
        b.execute("return window.__sawDraft", vec![])
            .await
            .expect("draft"),
        true,
        "the answer streamed in"
    );
    b.wait_until(
        "the tool call to be done",
        "document.querySelector('[data-testid=tool-call][data-tool=quickbooks_profit_and_loss]').dataset.state === 'done'",
    )
    .await
    .expect("tool done");
    wait_idle(&b).await;
    screenshot(&b, "exchange.png").await;

    // Remembered for the conversation.
    b.click_on("[data-testid=saved-values] summary")
        .await
        .expect("open saved values");
    b.wait_until(
        "the remembered value",
        "document.querySelector('[data-testid=saved-value][data-name=quickbooks_realm_id]') !== null",
    )
    .await
    .expect("remembered");

    // Asking again in the same conversation needs no card.
    ask(&b, PNL).await;
    b.wait_until(
        "a second answer",
        "[...document.querySelectorAll('[data-testid=message-assistant]')].filter(m => m.innerText.includes('net income')).length >= 2",
    )
    .await
    .expect("second answer");
    assert_eq!(
        b.count("[data-testid=input-card]").await.expect("cards"),
        1,
        "{}",
        b.page_summary().await
    );

    // A new conversation asks again.
    wait_idle(&b).await;
    new_conversation(&b).await;
    ask(&b, PNL).await;
    b.wait_for(PENDING_CARD).await.expect("a card again");
    b.quit().await;
}

#[tokio::test]
async fn a_pending_card_comes_back_after_a_reload_and_answering_it_resumes_the_run() {
    let Some(fx) = Fixture::start("reload").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("reload")).await;
    new_conversation(&b).await;
    ask(&b, PNL).await;
    b.wait_for(PENDING_CARD).await.expect("a card");
    let url = b.current_url().await.expect("url");
    assert!(
        url.contains("#/c/"),
        "the address names the conversation: {url}"
    );

    reload(&b).await;
    let input = b.wait_for(REALM_INPUT).await.expect("card after reload");
    input.send_keys("9130346988354456").await.expect("type");
    input.send_keys(ENTER).await.expect("submit");
    b.wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("completed");
    wait_for_answer(&b, "net income").await;
    b.quit().await;
}

/// Waits until the input card's line about its keys reads `text`.
async fn card_keys_say(b: &crate::webdriver::Browser, text: &str) {
    b.wait_until(
        &format!("the card's keys to read {text:?}"),
        &format!(
            "document.querySelector('[data-testid=card-keys]').textContent === {}",
            serde_json::json!(text)
        ),
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
}

/// One Esc (meant for an autocomplete list, a picker) keeps the card and what was
/// typed; a second one in a row cancels it.
#[tokio::test]
async fn escape_twice_cancels_a_card_and_the_run_says_so() {
    let Some(fx) = Fixture::start("cancel").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("cancel")).await;
    new_conversation(&b).await;
    ask(&b, PNL).await;
    let input = b.wait_for(REALM_INPUT).await.expect("a card");
    input.send_keys("acme").await.expect("type");
    input.send_keys(ESCAPE).await.expect("escape");
    card_keys_say(&b, "Press Esc again to cancel this request").await;
    assert_eq!(
        b.find("[data-testid=input-card]")
            .await
            .expect("card")
            .attr("data-status")
            .await
            .expect("status")
            .as_deref(),
        Some("pending"),
        "one Esc does not cancel"
    );
    assert_eq!(input.prop("value").await.expect("value"), "acme");
    // A click (into the field, to reopen its list) starts over.
    input.click().await.expect("click");
    card_keys_say(&b, "Enter submits · Esc twice cancels").await;
    input.send_keys(ESCAPE).await.expect("escape");
    input.send_keys(ESCAPE).await.expect("escape again");
    b.wait_for("[data-testid=input-card][data-status=cancelled] [data-testid=card-cancelled]")
        .await
        .expect("cancelled card");
    wait_for_answer(&b, "cancelled").await;
    b.wait_until(
        "the tool call to be failed",
        "document.querySelector('[data-testid=tool-call]').dataset.state === 'failed'",
    )
    .await
    .expect("tool failed");

    // The Cancel button does the same.
    wait_idle(&b).await;
    ask(&b, PNL).await;
    let card = b.wait_for(PENDING_CARD).await.expect("another card");
    card.find("[data-testid=card-cancel]")
        .await
        .expect("cancel button")
        .click()
        .await
        .expect("click cancel");
    b.wait_until(
        "both cards cancelled",
        "document.querySelectorAll('[data-testid=input-card][data-status=cancelled]').length === 2",
    )
    .await
    .expect("two cancelled");
    b.quit().await;
}

#[tokio::test]
async fn database_card_has_a_select_and_a_conditional_required_reason() {
    let Some(fx) = Fixture::start("database").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("db")).await;
    new_conversation(&b).await;
    ask(&b, "Which customers do we have? Query the database.").await;
    let card = b.wait_for(PENDING_CARD).await.expect("a card");
    assert_eq!(
        card.find("[data-testid=card-reason]")
            .await
            .expect("reason")
            .text()
            .await
            .expect("text"),
        "Which database should I query?"
    );
    // A tool of this chat asks: the card does not say a program made it.
    assert_eq!(
        b.count(&format!("{PENDING_CARD} [data-testid=card-from-api]"))
            .await
            .expect("count"),
        0
    );
    let select = b
        .find("[data-field=database] select")
        .await
        .expect("database select");
    let reason_field = b
        .find("[data-field=production_reason]")
        .await
        .expect("reason field");
    assert!(!reason_field.is_displayed().await.expect("displayed?"));
    let submit = b.find("[data-testid=card-submit]").await.expect("submit");
    assert!(!submit.is_enabled().await.expect("enabled?"));

    select
        .find("option[value=production]")
        .await
        .expect("production option")
        .click()
        .await
        .expect("choose production");
    b.wait_for("[data-field=production_reason] textarea")
        .await
        .expect("the reason appears");
    let label = b
        .text("[data-field=production_reason] label")
        .await
        .expect("label");
    assert!(
        label.contains("Why do you need production data?"),
        "{label}"
    );
    assert!(label.contains('*'), "required: {label}");
    assert!(!submit.is_enabled().await.expect("enabled?"));

    let reason = b
        .find("[data-field=production_reason] textarea")
        .await
        .expect("textarea");
    reason.send_keys("abc").await.expect("type");
    b.wait_until(
        "the length message",
        "document.querySelector('[data-field=production_reason] [data-testid=field-error]').innerText === 'Must be at least 5 characters'",
    )
    .await
    .expect("min length message");

    // Staging hides the reason again, and the card is complete without it.
    select
        .find("option[value=staging]")
        .await
        .expect("staging option")
        .click()
        .await
        .expect("choose staging");
    b.wait_until(
        "the reason to hide",
        "document.querySelector('[data-field=production_reason]').hidden",
    )
    .await
    .expect("hidden");
    assert!(submit.is_enabled().await.expect("enabled?"));

    // Back to production: what was typed is still there.
    select
        .find("option[value=production]")
        .await
        .expect("production option")
        .click()
        .await
        .expect("choose production");
    let reason = b
        .wait_for("[data-field=production_reason] textarea")
        .await
        .expect("textarea");
    assert_eq!(reason.prop("value").await.expect("value"), "abc");
    reason
        .send_keys("ount reconciliation")
        .await
        .expect("type more");
    b.wait_until(
        "the card to be valid",
        "!document.querySelector('[data-testid=card-submit]').disabled",
    )
    .await
    .expect("valid");
    submit.click().await.expect("submit");
    let done = b
        .wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("completed");
    let text = done.text().await.expect("text");
    assert!(text.contains("production"), "{text}");
    // A production query waits for the user's approval (a click in the card's first
    // moment is taken for one aimed at what was there before).
    let approve = b
        .wait_for("[data-testid=approval-card][data-status=pending] [data-testid=approval-approve]")
        .await
        .expect("an approval card");
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    approve.click().await.expect("approve");
    b.wait_until(
        "the query's answer",
        "[...document.querySelectorAll('[data-testid=message-assistant]')].length >= 2 && !document.querySelector('[data-testid=run-working]')",
    )
    .await
    .expect("answer");
    b.wait_until(
        "the tool call to be done",
        "document.querySelector('[data-testid=tool-call][data-tool=query_database]').dataset.state === 'done'",
    )
    .await
    .expect("query done");
    b.quit().await;
}

#[tokio::test]
async fn two_users_never_see_each_others_conversations_or_cards() {
    let Some(fx) = Fixture::start("two_users").await else {
        return;
    };
    let alice = fx.browser().await;
    let bob = fx.browser().await;
    sign_in(&alice, &fx.base(), &unique("alice")).await;
    sign_in(&bob, &fx.base(), &unique("bob")).await;

    new_conversation(&alice).await;
    ask(&alice, "Get my P&L report for Q1 2025 (alice)").await;
    alice.wait_for(PENDING_CARD).await.expect("alice's card");
    let alice_url = alice.current_url().await.expect("url");

    new_conversation(&bob).await;
    ask(
        &bob,
        "Which customers do we have? Query the database. (bob)",
    )
    .await;
    bob.wait_for(PENDING_CARD).await.expect("bob's card");

    // Each list holds only its owner's conversation.
    for (browser, own, other) in [(&alice, "alice", "bob"), (&bob, "bob", "alice")] {
        reload(browser).await;
        browser
            .wait_until(
                "the conversation list",
                &format!(
                    "[...document.querySelectorAll('[data-testid=conversation-item]')].some(i => i.innerText.includes('({own})'))"
                ),
            )
            .await
            .expect("own conversation listed");
        let list = browser
            .text("[data-testid=conversation-list]")
            .await
            .expect("list");
        assert!(!list.contains(&format!("({other})")), "{own} sees: {list}");
        assert_eq!(
            browser
                .count("[data-testid=conversation-item]")
                .await
                .expect("items"),
            1
        );
    }

    // Bob opening Alice's conversation by its address sees nothing of it.
    open_app(&bob, &alice_url).await;
    bob.wait_for("[data-testid=not-found]")
        .await
        .expect("not found for bob");
    assert_eq!(
        bob.count("[data-testid=input-card]").await.expect("cards"),
        0
    );
    let text = bob
        .execute("return document.body.innerText", vec![])
        .await
        .expect("text");
    assert!(!text.as_str().unwrap_or_default().contains("(alice)"));

    // Alice's card still works.
    let input = alice.wait_for(REALM_INPUT).await.expect("alice's input");
    input.send_keys("9130346988354456").await.expect("type");
    input.send_keys(ENTER).await.expect("submit");
    wait_for_answer(&alice, "net income").await;
    alice.quit().await;
    bob.quit().await;
}

/// A conversation is deleted from its page after one more yes, and leaves the list;
/// "Keep it" keeps it, and one whose run waits for an answer stays with a message.
#[tokio::test]
async fn a_conversation_is_deleted_after_one_more_yes() {
    let Some(fx) = Fixture::start("delete_conversation").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("lee");
    sign_in(&b, &fx.base(), &user).await;
    let mut ids = Vec::new();
    for text in ["What can you do?", "What is 6 * 7?"] {
        new_conversation(&b).await;
        ask(&b, text).await;
        wait_idle(&b).await;
        let address = b.current_url().await.expect("url");
        ids.push(address.rsplit('/').next().expect("id").to_owned());
    }
    let item = |id: &str| format!("[data-testid=conversation-item][data-conversation-id='{id}']");
    b.wait_for(&item(&ids[1])).await.expect("listed");

    b.click_on("[data-testid=delete-conversation-ask]")
        .await
        .expect("delete");
    b.click_on("[data-testid=delete-conversation-keep]")
        .await
        .expect("keep it");
    b.wait_for("[data-testid=delete-conversation-ask]")
        .await
        .expect("asked no more");
    // The question starts on "Keep it", and Escape says no as well.
    b.click_on("[data-testid=delete-conversation-ask]")
        .await
        .expect("delete");
    b.wait_until(
        "Keep it to have the focus",
        "document.activeElement && document.activeElement.dataset.testid === 'delete-conversation-keep'",
    )
    .await
    .expect("focus on Keep it");
    b.find("[data-testid=delete-conversation-keep]")
        .await
        .expect("keep it")
        .send_keys(ESCAPE)
        .await
        .expect("Escape");
    b.wait_for("[data-testid=delete-conversation-ask]")
        .await
        .expect("Escape keeps it");

    b.click_on("[data-testid=delete-conversation-ask]")
        .await
        .expect("delete");
    screenshot(&b, "delete-conversation.png").await;
    b.click_on("[data-testid=delete-conversation-confirm]")
        .await
        .expect("delete for good");
    b.wait_for("[data-testid=new-chat]")
        .await
        .expect("the new-conversation page");
    b.wait_until(
        "the conversation to leave the list",
        &format!("!document.querySelector({})", json!(item(&ids[1]))),
    )
    .await
    .expect("gone from the list");
    b.wait_for(&item(&ids[0])).await.expect("the other stays");
    // Focus went to the message box; a screen reader is told what happened.
    b.wait_until(
        "the deletion to be announced",
        "document.querySelector('[data-testid=announcement][role=status]').textContent === 'Conversation deleted.'",
    )
    .await
    .expect("announced");
    let mut db = fx.server.db().await;
    let left: Vec<String> =
        sqlx::query_scalar("select id::text from conversations where user_id = $1")
            .bind(&user)
            .fetch_all(&mut db)
            .await
            .expect("conversations");
    assert_eq!(left, [ids[0].clone()]);

    // While its run waits for an answer, a conversation stays, and says why.
    // Marked busy until later, so the recovery sweep leaves it waiting meanwhile.
    sqlx::query(
        "insert into agent_runs (id, conversation_id, user_id, status, model, updated_at)
         values (gen_random_uuid(), $1::uuid, $2, 'waiting_for_input', 'offline',
                 now() + interval '1 hour')",
    )
    .bind(&ids[0])
    .bind(&user)
    .execute(&mut db)
    .await
    .expect("a waiting run");
    b.click_on(&item(&ids[0])).await.expect("open the other");
    b.click_on("[data-testid=delete-conversation-ask]")
        .await
        .expect("delete");
    b.click_on("[data-testid=delete-conversation-confirm]")
        .await
        .expect("delete for good");
    let said = b
        .wait_until(
            "the reason it stays",
            "document.querySelector('[data-testid=delete-conversation-error]').innerText.includes('still working')",
        )
        .await;
    assert!(said.is_ok(), "{}", b.page_summary().await);
    b.wait_for(&item(&ids[0])).await.expect("still listed");
    b.quit().await;
}

/// A conversation deleted elsewhere (another tab, another client) while it is open
/// here says so within seconds and leaves the list, instead of showing "live" until
/// its stream's token runs out.
#[tokio::test]
async fn a_conversation_deleted_elsewhere_says_so_where_it_is_open() {
    let Some(fx) = Fixture::start("deleted_elsewhere").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("lou");
    sign_in(&b, &fx.base(), &user).await;
    new_conversation(&b).await;
    ask(&b, "What can you do?").await;
    wait_idle(&b).await;
    let address = b.current_url().await.expect("url");
    let id = address.rsplit('/').next().expect("id").to_owned();
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("live");

    // The page may show the answer a moment before its run is marked done (409 until).
    let token = fx.server.token(&user).await;
    let path = format!("/api/conversations/{id}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (status, body) = loop {
        let (status, body) = fx.server.send("DELETE", &path, Some(&token), None).await;
        if status != reqwest::StatusCode::CONFLICT || std::time::Instant::now() > deadline {
            break (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(status, reqwest::StatusCode::NO_CONTENT, "{body}");
    let said = b.wait_for("[data-testid=deleted-elsewhere]").await;
    assert!(said.is_ok(), "{}", b.page_summary().await);
    b.wait_for("[data-testid=stream-status][data-state=deleted]")
        .await
        .expect("no longer live");
    b.wait_until(
        "the message box to go",
        "!document.querySelector('#composer-input')",
    )
    .await
    .expect("nothing to send to");
    b.wait_until(
        "the conversation to leave the list",
        &format!(
            "!document.querySelector({})",
            json!(format!(
                "[data-testid=conversation-item][data-conversation-id='{id}']"
            ))
        ),
    )
    .await
    .expect("gone from the list");
    b.quit().await;
}
