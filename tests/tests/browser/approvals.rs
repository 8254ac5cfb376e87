//! Approval cards with the offline model: a production query waits for the user's yes
//! after the database card. Approve, edit (with the server's own argument errors),
//! reject with a word for the assistant, keyboard only, a reload in between; and
//! declining an input card.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::webdriver::{Browser, ENTER, ESCAPE, Element, TAB, wait_time};
use crate::{Fixture, ask, new_conversation, reload, sign_in, unique, wait_idle};

const DB_QUESTION: &str = "Which database should I query for how many customers we have?";
/// What the offline model writes for that question.
const COUNT_QUERY: &str = "select count(*) as count from customers";
/// A valid read-only edit: one customer in the sample production data is in Germany.
const DE_QUERY: &str = "select count(*) as n from customers where country = 'DE'";
const REASON: &str = "Quarterly board report";
const PNL: &str = "Get my P&L report for Q1 2025";

const DB_CARD: &str = "[data-testid=input-card][data-tool=query_database]";
const APPROVAL: &str = "[data-testid=approval-card][data-tool=query_database]";
const PENDING_APPROVAL: &str =
    "[data-testid=approval-card][data-tool=query_database][data-status=pending]";
const APPROVED: &str = "[data-testid=approval-card][data-status=approved]";

const SHIFT_TAB: &str = "\u{E008}\u{E004}\u{E000}";
const SELECT_ALL: &str = "\u{E009}a\u{E000}";

/// Every wait here: at least 30 s, longer when `BROWSER_WAIT_SECONDS` says so.
fn patience() -> Duration {
    wait_time().max(Duration::from_secs(30))
}

/// Polls until the JavaScript expression `condition` is true.
async fn until(b: &Browser, what: &str, condition: &str) {
    let deadline = Instant::now() + patience();
    let script = format!("return !!({condition});");
    loop {
        if let Ok(Value::Bool(true)) = b.execute(&script, vec![]).await {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "timed out after {:?} waiting for {what} ({condition})\n{}",
                patience(),
                b.page_summary().await
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `css` matches a displayed element, then returns it.
async fn appear<'a>(b: &'a Browser, css: &str) -> Element<'a> {
    until(
        b,
        &format!("`{css}` to show"),
        &format!(
            "[...document.querySelectorAll({})].some(e => e.getClientRects().length > 0)",
            json!(css)
        ),
    )
    .await;
    b.wait_for(css).await.expect(css)
}

/// Waits for the assistant to say something matching `pattern` (a case-insensitive
/// regular expression) in its own words or in a tool's error, cards left out.
async fn assistant_says(b: &Browser, pattern: &str) {
    until(
        b,
        &format!("the assistant to say /{pattern}/i"),
        &format!(
            "[...document.querySelectorAll('[data-testid=message-assistant] [data-testid=message-text], \
             [data-testid=tool-error]')].some(e => new RegExp({}, 'i').test(e.innerText))",
            json!(pattern)
        ),
    )
    .await;
}

/// A condition: the focused element has this `data-testid`.
fn focused_is(testid: &str) -> String {
    format!(
        "document.activeElement && document.activeElement.dataset.testid === {}",
        json!(testid)
    )
}

/// Answers the database card: Production, with a reason.
async fn answer_database_card(b: &Browser) {
    let card = fill_database_card(b).await;
    b.find(&format!("{card} [data-testid=card-submit]"))
        .await
        .expect("submit")
        .click()
        .await
        .expect("click submit");
    appear(b, &format!("{DB_CARD}[data-status=completed]")).await;
}

/// Fills the database card in, Production with a reason, without sending it; the
/// card's selector.
async fn fill_database_card(b: &Browser) -> String {
    let card = format!("{DB_CARD}[data-status=pending]");
    appear(b, &card).await;
    b.find(&format!(
        "{card} [data-field=database] select option[value=production]"
    ))
    .await
    .expect("production option")
    .click()
    .await
    .expect("choose production");
    let reason = appear(
        b,
        &format!("{card} [data-field=production_reason] textarea"),
    )
    .await;
    reason.send_keys(REASON).await.expect("type the reason");
    until(
        b,
        "the database card to be complete",
        &format!("!document.querySelector('{card} [data-testid=card-submit]').disabled"),
    )
    .await;
    card
}

/// Signs in a new user, asks the database question in a new conversation, answers the
/// database card, and waits for the approval card.
async fn reach_approval<'a>(fx: &Fixture, b: &'a Browser, user: &str) -> Element<'a> {
    sign_in(b, &fx.base(), &unique(user)).await;
    new_conversation(b).await;
    ask(b, DB_QUESTION).await;
    answer_database_card(b).await;
    appear(b, PENDING_APPROVAL).await
}

/// Scrolls the element to the middle of the view first, as a user would, so the
/// composer pinned to the bottom of the page does not cover it.
async fn click(b: &Browser, css: &str) {
    let element = appear(b, css).await;
    let _ = b
        .execute(
            &format!(
                "document.querySelector({}).scrollIntoView({{block: 'center'}});",
                json!(css)
            ),
            vec![],
        )
        .await;
    element
        .click()
        .await
        .unwrap_or_else(|err| panic!("clicking `{css}`: {err}"));
}

#[tokio::test]
async fn approving_a_production_query_shows_its_exact_arguments_and_runs_it() {
    let Some(fx) = Fixture::start("approve").await else {
        return;
    };
    let b = fx.browser().await;
    let card = reach_approval(&fx, &b, "approve").await;

    // A labelled section saying what waits and why.
    let title = b
        .text(&format!("{PENDING_APPROVAL} .card-title"))
        .await
        .expect("title");
    assert!(title.contains("Approval needed"), "{title}");
    assert!(title.contains("query_database"), "{title}");
    let labelled = b
        .execute(
            "const s = document.querySelector(arguments[0]); \
             const t = document.getElementById(s.getAttribute('aria-labelledby')); \
             return s.tagName.toLowerCase() + '|' + (t ? t.innerText : '');",
            vec![json!(PENDING_APPROVAL)],
        )
        .await
        .expect("labelled");
    let labelled = labelled.as_str().unwrap_or_default();
    assert!(
        labelled.starts_with("section|") && labelled.contains("query_database"),
        "{labelled}"
    );
    let reason = card
        .find("[data-testid=card-reason]")
        .await
        .expect("reason")
        .text()
        .await
        .expect("reason text");
    assert!(!reason.trim().is_empty(), "the card says why");

    // The arguments that will run, one term per argument, field labels where a field
    // has the argument's name.
    let args = b
        .execute(
            "const dl = document.querySelector(arguments[0] + ' [data-testid=approval-args]'); \
             return {dt: [...dl.querySelectorAll('dt')].map(e => e.innerText), \
                     dd: [...dl.querySelectorAll('dd')].map(e => e.innerText)};",
            vec![json!(PENDING_APPROVAL)],
        )
        .await
        .expect("arguments");
    let terms: Vec<&str> = args["dt"]
        .as_array()
        .expect("terms")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let values: Vec<&str> = args["dd"]
        .as_array()
        .expect("values")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(terms.len(), values.len(), "{args}");
    assert!(
        terms.contains(&"Database"),
        "the field's label names it: {args}"
    );
    assert!(values.contains(&COUNT_QUERY), "the query as is: {args}");
    assert!(values.contains(&"production"), "{args}");
    assert!(values.contains(&REASON), "{args}");

    // Real buttons, Approve first and primary.
    let approve = card
        .find("[data-testid=approval-approve]")
        .await
        .expect("approve");
    let classes = approve
        .attr("class")
        .await
        .expect("class")
        .unwrap_or_default();
    assert!(
        classes.split_whitespace().any(|class| class == "primary"),
        "{classes}"
    );
    for testid in ["approval-approve", "approval-edit", "approval-reject"] {
        let tag = b
            .execute(
                "const e = document.querySelector(arguments[0]); return e && e.tagName.toLowerCase();",
                vec![json!(format!("{PENDING_APPROVAL} [data-testid={testid}]"))],
            )
            .await
            .expect("tag");
        assert_eq!(tag, "button", "{testid}");
    }

    // Past the card's first moment, when a click on Approve is the user's own.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    approve.click().await.expect("approve");
    let outcome = appear(&b, &format!("{APPROVED} [data-testid=approval-outcome]")).await;
    let outcome = outcome.text().await.expect("outcome");
    assert!(outcome.contains("Approved; the tool ran."), "{outcome}");
    assistant_says(&b, "count: 5").await;
    until(
        &b,
        "the query to be done",
        "document.querySelector('[data-testid=tool-call][data-tool=query_database]').dataset.state === 'done'",
    )
    .await;
    wait_idle(&b).await;
    assert_eq!(b.count(PENDING_APPROVAL).await.expect("count"), 0);
    b.quit().await;
}

#[tokio::test]
async fn editing_the_arguments_shows_the_servers_errors_then_runs_the_edited_call() {
    let Some(fx) = Fixture::start("approval_edit").await else {
        return;
    };
    let b = fx.browser().await;
    reach_approval(&fx, &b, "edit").await;
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-edit]"),
    )
    .await;
    appear(
        &b,
        &format!("{PENDING_APPROVAL}[data-mode=edit] [data-testid=approval-edit-form]"),
    )
    .await;
    // The focus moves into the first input.
    until(
        &b,
        "the focus in the first argument",
        "document.activeElement && document.activeElement.closest('[data-testid=approval-edit-form]') \
         && ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement.tagName)",
    )
    .await;

    // One labelled input per argument, starting from the arguments shown.
    let query = b
        .find(&format!("{APPROVAL} [data-testid=approval-arg-query]"))
        .await
        .expect("query input");
    assert_eq!(query.prop("value").await.expect("value"), COUNT_QUERY);
    let labelled = b
        .execute(
            "return [...document.querySelectorAll('[data-testid=approval-edit-form] [data-testid^=approval-arg-]')] \
               .filter(e => ['INPUT', 'SELECT', 'TEXTAREA'].includes(e.tagName)) \
               .map(e => !!(e.id && document.querySelector(`label[for=\"${e.id}\"]`)));",
            vec![],
        )
        .await
        .expect("labels");
    let labelled = labelled.as_array().expect("inputs");
    assert!(labelled.len() >= 3, "{labelled:?}");
    assert!(labelled.iter().all(|l| l == &json!(true)), "{labelled:?}");

    // A reason too short for the field: the server says so under that input.
    let reason_css = format!("{APPROVAL} [data-testid=approval-arg-production_reason]");
    let reason = b.find(&reason_css).await.expect("reason input");
    reason
        .send_keys(&format!("{SELECT_ALL}abc"))
        .await
        .expect("shorten the reason");
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-edit-submit]"),
    )
    .await;
    let error_css =
        format!("{APPROVAL} [data-arg=production_reason] [data-testid=approval-arg-error]");
    until(
        &b,
        "the server's message under the reason",
        &format!(
            "document.querySelector({}).innerText.trim() !== ''",
            json!(error_css)
        ),
    )
    .await;
    let error = b.find(&error_css).await.expect("error");
    assert_eq!(
        error.attr("role").await.expect("role").as_deref(),
        Some("alert")
    );
    assert_eq!(
        reason.attr("aria-invalid").await.expect("aria").as_deref(),
        Some("true")
    );
    assert_eq!(
        b.count(PENDING_APPROVAL).await.expect("pending"),
        1,
        "nothing ran"
    );

    // Put the reason back, change the query, run.
    reason
        .send_keys(&format!("{SELECT_ALL}{REASON}"))
        .await
        .expect("retype the reason");
    until(
        &b,
        "the message to clear",
        &format!(
            "document.querySelector({}).innerText.trim() === ''",
            json!(error_css)
        ),
    )
    .await;
    query
        .send_keys(&format!("{SELECT_ALL}{DE_QUERY}"))
        .await
        .expect("edit the query");
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-edit-submit]"),
    )
    .await;
    let outcome = appear(&b, &format!("{APPROVED} [data-testid=approval-outcome]")).await;
    let outcome = outcome.text().await.expect("outcome");
    assert!(
        outcome.contains("Approved with your changes; the tool ran."),
        "{outcome}"
    );
    assistant_says(&b, "n: 1").await;
    wait_idle(&b).await;
    b.quit().await;
}

/// While editing, what an argument will run with is written out as it reads whenever
/// its input holds a character that hides or reorders text.
#[tokio::test]
async fn an_edited_argument_with_hidden_characters_is_written_out_beneath_it() {
    let Some(fx) = Fixture::start("approval_edit_hidden").await else {
        return;
    };
    let b = fx.browser().await;
    reach_approval(&fx, &b, "edit-hidden").await;
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-edit]"),
    )
    .await;
    let input = format!("{APPROVAL} [data-testid=approval-arg-query]");
    appear(&b, &input).await;
    assert!(
        b.find_all(&format!("{APPROVAL} [data-testid=approval-arg-revealed]"))
            .await
            .expect("query")
            .is_empty(),
        "a plain value needs no second reading"
    );
    // As if pasted: past the override the rest reads right to left.
    b.execute(
        &format!(
            "const input = document.querySelector({});\
             input.value = 'select 1 -- \\u202Edetaile';\
             input.dispatchEvent(new Event('input', {{bubbles: true}}));",
            json!(input)
        ),
        vec![],
    )
    .await
    .expect("type into the query");
    let revealed = appear(
        &b,
        &format!("{APPROVAL} [data-testid=approval-arg-revealed] code"),
    )
    .await;
    assert_eq!(
        revealed.text().await.expect("text"),
        "select 1 -- ⟨U+202E⟩detaile"
    );
}

/// A click that lands on Approve the moment it appears (aimed at the card before it:
/// the second click of a double-click, or an impatient second click of its own)
/// approves nothing, and Approve looks held back for that moment; a click once the card
/// has been there a moment does.
#[tokio::test]
async fn a_click_landing_on_approve_the_moment_it_appears_approves_nothing() {
    let Some(fx) = Fixture::start("approval_stray_click").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("stray-click")).await;
    new_conversation(&b).await;
    ask(&b, DB_QUESTION).await;
    let card = fill_database_card(&b).await;
    // The second click of a double-click, on Approve as soon as it is in the page.
    b.execute(
        "window.strayClicked = false;\
         new MutationObserver(() => {\
           const approve = document.querySelector(\
             '[data-testid=approval-card][data-status=pending] [data-testid=approval-approve]');\
           if (approve && !window.strayClicked) {\
             window.strayClicked = true;\
             const look = getComputedStyle(approve);\
             window.firstLook = [look.opacity, look.animationDuration];\
             approve.dispatchEvent(new MouseEvent('click', {bubbles: true, detail: 2}));\
             setTimeout(() => approve.dispatchEvent(\
               new MouseEvent('click', {bubbles: true, detail: 1})), 300);\
           }\
         }).observe(document.body, {childList: true, subtree: true});",
        vec![],
    )
    .await
    .expect("watch for Approve");
    click(&b, &format!("{card} [data-testid=card-submit]")).await;
    until(&b, "the stray click", "window.strayClicked === true").await;
    // For that first second Approve looks held back, and only for it.
    let first_look = b
        .execute("return window.firstLook;", vec![])
        .await
        .expect("the first look");
    assert_eq!(first_look, json!(["0.5", "1s"]), "{first_look}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let settled = b
        .execute(
            "return getComputedStyle(document.querySelector(\
               '[data-testid=approval-card][data-status=pending] [data-testid=approval-approve]')).opacity;",
            vec![],
        )
        .await
        .expect("the look after a moment");
    assert_eq!(settled, json!("1"), "{settled}");
    assert_eq!(
        b.find(APPROVAL)
            .await
            .expect("the approval card")
            .attr("data-status")
            .await
            .expect("status")
            .as_deref(),
        Some("pending"),
        "the second click of a double-click approved the call"
    );
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-approve]"),
    )
    .await;
    appear(&b, APPROVED).await;
}

#[tokio::test]
async fn rejecting_with_a_message_tells_the_assistant() {
    let Some(fx) = Fixture::start("approval_reject").await else {
        return;
    };
    let b = fx.browser().await;
    reach_approval(&fx, &b, "reject").await;
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-reject]"),
    )
    .await;
    let message = appear(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-reject-message]"),
    )
    .await;
    until(
        &b,
        "the focus in the message box",
        &focused_is("approval-reject-message"),
    )
    .await;
    message
        .send_keys("Not on production, use staging")
        .await
        .expect("type the message");
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-reject-confirm]"),
    )
    .await;
    let rejected = "[data-testid=approval-card][data-status=rejected]";
    let outcome = appear(&b, &format!("{rejected} [data-testid=approval-outcome]")).await;
    let outcome = outcome.text().await.expect("outcome");
    assert!(
        outcome.contains("Rejected. The assistant was told."),
        "{outcome}"
    );
    let card = b.text(rejected).await.expect("card");
    assert!(card.contains("Not on production, use staging"), "{card}");
    assert!(card.contains("Rejected · "), "{card}");
    // The assistant hears of it: in the tool's result or its answer.
    assistant_says(&b, "reject").await;
    wait_idle(&b).await;
    b.quit().await;
}

/// Keys meant for the message box never reach a card that appears meanwhile: the focus
/// stays where the user is typing, so an Enter or a Space cannot approve a call whose
/// arguments the user has not read.
#[tokio::test]
async fn a_card_that_appears_while_the_user_types_does_not_take_their_keys() {
    let Some(fx) = Fixture::start("approval_typing").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("typing")).await;
    new_conversation(&b).await;
    ask(&b, DB_QUESTION).await;
    let card = fill_database_card(&b).await;
    // The user goes on to write their next message, and the card is sent by a click
    // that leaves the focus where it is (as the approval follows while they type).
    let composer = b
        .find("[data-testid=composer-input]")
        .await
        .expect("message box");
    composer.send_keys("and then").await.expect("type");
    b.execute(
        &format!(
            "document.querySelector({}).click();",
            json!(format!("{card} [data-testid=card-submit]"))
        ),
        vec![],
    )
    .await
    .expect("send the card");
    appear(&b, PENDING_APPROVAL).await;
    // Two frames: the card's own focus move runs in the next one.
    b.execute(
        "return new Promise(done => requestAnimationFrame(() => requestAnimationFrame(() => done(true))));",
        vec![],
    )
    .await
    .expect("two frames");
    until(
        &b,
        "the focus still in the message box",
        &focused_is("composer-input"),
    )
    .await;
    b.active()
        .await
        .expect("focus")
        .send_keys(" more ")
        .await
        .expect("type on");
    assert_eq!(
        b.count(PENDING_APPROVAL).await.expect("count"),
        1,
        "the approval was given by keys meant for the message box"
    );
    let typed = b
        .execute(
            "return document.querySelector('[data-testid=composer-input]').value;",
            vec![],
        )
        .await
        .expect("message box text");
    assert_eq!(typed.as_str(), Some("and then more "), "{typed}");
    b.quit().await;
}

#[tokio::test]
async fn an_approval_can_be_reached_and_given_with_the_keyboard_alone() {
    let Some(fx) = Fixture::start("approval_keyboard").await else {
        return;
    };
    let b = fx.browser().await;
    reach_approval(&fx, &b, "keys").await;

    // From here on, keys only, always to the focused element. The card takes the focus,
    // never its Approve button: Tab reaches that.
    until(
        &b,
        "the focus on the card when it appears",
        &focused_is("approval-card"),
    )
    .await;
    b.active()
        .await
        .expect("focus")
        .send_keys(TAB)
        .await
        .expect("tab");
    until(&b, "Tab to reach Approve", &focused_is("approval-approve")).await;
    b.active()
        .await
        .expect("focus")
        .send_keys(TAB)
        .await
        .expect("tab");
    until(&b, "Tab to reach Edit", &focused_is("approval-edit")).await;
    b.active()
        .await
        .expect("focus")
        .send_keys(ENTER)
        .await
        .expect("enter");
    until(
        &b,
        "edit mode with the focus in an input",
        &format!(
            "document.querySelector({}) && document.activeElement \
             && !!document.activeElement.closest('[data-testid=approval-edit-form]') \
             && ['INPUT', 'SELECT', 'TEXTAREA'].includes(document.activeElement.tagName)",
            json!(format!("{PENDING_APPROVAL}[data-mode=edit]"))
        ),
    )
    .await;
    b.active()
        .await
        .expect("focus")
        .send_keys(ESCAPE)
        .await
        .expect("escape");
    until(
        &b,
        "Esc to go back, the focus on Edit",
        &format!(
            "document.querySelector({}) && ({})",
            json!(format!("{PENDING_APPROVAL}[data-mode=choose]")),
            focused_is("approval-edit")
        ),
    )
    .await;
    b.active()
        .await
        .expect("focus")
        .send_keys(SHIFT_TAB)
        .await
        .expect("shift tab");
    until(
        &b,
        "Shift+Tab back to Approve",
        &focused_is("approval-approve"),
    )
    .await;
    b.active()
        .await
        .expect("focus")
        .send_keys(ENTER)
        .await
        .expect("enter");
    let outcome = appear(&b, &format!("{APPROVED} [data-testid=approval-outcome]")).await;
    let outcome = outcome.text().await.expect("outcome");
    assert!(outcome.contains("Approved; the tool ran."), "{outcome}");
    assistant_says(&b, "count: 5").await;
    b.quit().await;
}

#[tokio::test]
async fn declining_an_input_card_tells_the_assistant_and_it_answers() {
    let Some(fx) = Fixture::start("decline").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("decline")).await;
    new_conversation(&b).await;
    ask(&b, PNL).await;
    let pending = "[data-testid=input-card][data-status=pending]";
    let card = appear(&b, pending).await;
    let decline = card
        .find("[data-testid=card-decline]")
        .await
        .expect("decline button");
    // Decline says what it does, unlike Cancel.
    let hint = b
        .execute(
            "const d = document.querySelector(arguments[0]); \
             const ids = (d.getAttribute('aria-describedby') || '').split(' ').filter(Boolean); \
             return (d.title || '') + '|' + ids.map(i => document.getElementById(i).innerText).join(' ');",
            vec![json!(format!("{pending} [data-testid=card-decline]"))],
        )
        .await
        .expect("hint");
    let hint = hint.as_str().unwrap_or_default();
    assert!(hint.contains("won't provide"), "{hint}");
    assert!(
        card.find("[data-testid=card-cancel]").await.is_ok(),
        "Cancel is still there"
    );
    decline.click().await.expect("decline");
    let declined = appear(
        &b,
        "[data-testid=input-card][data-status=declined] [data-testid=card-declined]",
    )
    .await;
    let text = declined.text().await.expect("text");
    assert!(
        text.contains("Declined. The assistant was told you won't provide this."),
        "{text}"
    );
    let kicker = b
        .text("[data-testid=input-card][data-status=declined] .card-kicker")
        .await
        .expect("kicker");
    assert!(kicker.contains("Input declined"), "{kicker}");
    // The run goes on without the values: the assistant answers after "Calling …".
    until(
        &b,
        "the assistant's answer after the decline",
        "[...document.querySelectorAll('[data-testid=message-assistant] [data-testid=message-text]')] \
           .some(e => !e.innerText.includes('Calling '))",
    )
    .await;
    wait_idle(&b).await;
    assert_eq!(b.count(pending).await.expect("pending"), 0);
    b.quit().await;
}

#[tokio::test]
async fn a_pending_approval_comes_back_after_a_reload_and_still_works() {
    let Some(fx) = Fixture::start("approval_reload").await else {
        return;
    };
    let b = fx.browser().await;
    reach_approval(&fx, &b, "reload").await;
    let url = b.current_url().await.expect("url");
    assert!(
        url.contains("#/c/"),
        "the address names the conversation: {url}"
    );

    reload(&b).await;
    let card = appear(&b, PENDING_APPROVAL).await;
    let args = card
        .find("[data-testid=approval-args]")
        .await
        .expect("arguments")
        .text()
        .await
        .expect("text");
    assert!(args.contains(COUNT_QUERY), "{args}");
    assert_eq!(
        b.count("[data-testid=approval-card]").await.expect("cards"),
        1,
        "shown once"
    );
    // Past the card's first moment, when a click on Approve is the user's own.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    click(
        &b,
        &format!("{PENDING_APPROVAL} [data-testid=approval-approve]"),
    )
    .await;
    let outcome = appear(&b, &format!("{APPROVED} [data-testid=approval-outcome]")).await;
    let outcome = outcome.text().await.expect("outcome");
    assert!(outcome.contains("Approved; the tool ran."), "{outcome}");
    assistant_says(&b, "count: 5").await;
    wait_idle(&b).await;
    b.quit().await;
}
