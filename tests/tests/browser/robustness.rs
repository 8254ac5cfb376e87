//! When things go wrong: a refused token, the server going away and coming back, a
//! phone-sized screen, sign-in and sign-out.

use serde_json::json;

use crate::webdriver::ENTER;
use crate::{
    Fixture, ask, new_conversation, open_app, press_enter_in_composer, reload, screenshot, sign_in,
    start_server, unique, wait_send_enabled,
};

const PENDING_CARD: &str = "[data-testid=input-card][data-status=pending]";

/// What the message box holds, as a script's expression.
const COMPOSER_TEXT: &str = "document.querySelector('[data-testid=composer-input]').value";

/// Clicks "Sign out" and waits for the sign-in page.
async fn sign_out(b: &crate::webdriver::Browser) {
    b.click_on("[data-testid=sign-out]")
        .await
        .expect("sign out");
    b.wait_for("[data-testid=user-name]")
        .await
        .expect("signed out");
}

/// A script's test that the message box holds `draft`.
fn composer_shows(draft: &str) -> String {
    format!("{COMPOSER_TEXT} === {}", json!(draft))
}

/// Signs `user` in and opens a conversation with one exchange in it: its address.
async fn a_conversation_of(b: &crate::webdriver::Browser, base: &str, user: &str) -> String {
    sign_in(b, base, user).await;
    new_conversation(b).await;
    ask(b, "What can you do?").await;
    let address = b.current_url().await.expect("url");
    assert!(address.contains("#/c/"), "{address}");
    address
}

/// What the message box holds.
async fn composer_value(b: &crate::webdriver::Browser) -> serde_json::Value {
    b.execute(&format!("return {COMPOSER_TEXT}"), vec![])
        .await
        .expect("the message box's value")
}

#[tokio::test]
async fn sign_in_survives_a_reload_and_sign_out_forgets_it() {
    let Some(fx) = Fixture::start("sign_in_out").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("carol");
    sign_in(&b, &fx.base(), &user).await;
    assert_eq!(
        b.text("[data-testid=signed-in-user]").await.expect("user"),
        user
    );
    let kept = b
        .execute("return localStorage.getItem('toolgate.session')", vec![])
        .await
        .expect("storage");
    assert!(kept.as_str().unwrap_or_default().contains(&user));

    reload(&b).await;
    b.wait_for("[data-testid=new-conversation]")
        .await
        .expect("still signed in");

    sign_out(&b).await;
    let kept = b
        .execute("return localStorage.getItem('toolgate.session')", vec![])
        .await
        .expect("storage");
    assert!(kept.is_null(), "token forgotten: {kept}");
    b.quit().await;
}

/// Tabs share the kept session: a sign-out in one tab signs every other tab out at
/// once, saying why (on a shared computer, no tab stays signed in), and a sign-in in
/// one signs in the others.
#[tokio::test]
async fn tabs_follow_each_others_sign_out_and_sign_in() {
    let Some(fx) = Fixture::start("sign_out_tabs").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("fay");
    sign_in(&b, &fx.base(), &user).await;
    // Something typed in the first tab, which signing out anywhere forgets.
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box")
        .send_keys("a half-typed note")
        .await
        .expect("type");
    let drafts = "Object.keys(sessionStorage).filter(k => k.startsWith('toolgate.draft.')).length";
    b.wait_until("the draft to be kept", &format!("{drafts} === 1"))
        .await
        .expect("kept");
    let first = b.tab().await.expect("first tab");
    let second = b.new_tab().await.expect("second tab");
    b.switch_to(&second).await.expect("to the second tab");
    open_app(&b, &fx.base()).await;
    b.wait_for("[data-testid=new-conversation]")
        .await
        .expect("signed in in the second tab too");
    sign_out(&b).await;

    b.switch_to(&first).await.expect("back to the first tab");
    let reason = b
        .wait_for("[data-testid=signed-out-reason]")
        .await
        .expect("the first tab signed out, saying why")
        .text()
        .await
        .expect("text");
    assert!(reason.contains("another tab"), "{reason}");
    assert_eq!(
        b.count("[data-testid=new-conversation]")
            .await
            .expect("count"),
        0,
        "nothing of the chat left in the first tab"
    );
    assert_eq!(
        b.execute(&format!("return {drafts}"), vec![])
            .await
            .expect("drafts"),
        json!(0),
        "the first tab's draft forgotten"
    );

    // Signing in again in the first tab signs in the second.
    let name = b.find("[data-testid=user-name]").await.expect("user name");
    name.send_keys(&user).await.expect("type");
    name.send_keys(ENTER).await.expect("sign in");
    b.wait_for("[data-testid=new-conversation]")
        .await
        .expect("signed in again");
    b.switch_to(&second).await.expect("to the second tab");
    b.wait_for("[data-testid=new-conversation]")
        .await
        .expect("the second tab signed in too");
    b.quit().await;
}

#[tokio::test]
async fn an_expired_token_signs_out_plainly_and_signing_in_again_works() {
    let Some(fx) = Fixture::start("expired_token").await else {
        return;
    };
    let b = fx.browser().await;
    open_app(&b, &fx.base()).await;
    // A token that ran out ten minutes ago (well past any clock leeway), which the page
    // cannot know in advance.
    let user = unique("dave");
    let token = tests::sign_token(
        &json!({"sub": user, "exp": tests::now() - 600, "iat": tests::now() - 3600}),
        tests::JWT_SECRET,
        jsonwebtoken::Algorithm::HS256,
    );
    b.execute(
        "localStorage.setItem('toolgate.session', JSON.stringify({token: arguments[0], user_id: arguments[1]}))",
        vec![json!(token), json!(user)],
    )
    .await
    .expect("plant token");
    reload(&b).await;
    let reason = b
        .wait_for("[data-testid=signed-out-reason]")
        .await
        .expect("told why")
        .text()
        .await
        .expect("text");
    assert!(reason.contains("expired"), "{reason}");

    // A session this browser knows has run out is not even tried.
    b.execute(
        "localStorage.setItem('toolgate.session', JSON.stringify({token: 'x.y.z', user_id: arguments[0], expires_at_ms: Date.now() - 1000}))",
        vec![json!(user)],
    )
    .await
    .expect("plant session");
    reload(&b).await;
    b.wait_for("[data-testid=signed-out-reason]")
        .await
        .expect("told why again");
    sign_in(&b, &fx.base(), &user).await;
    assert_eq!(
        b.count("[data-testid=signed-out-reason]")
            .await
            .expect("gone"),
        0
    );
    b.quit().await;
}

#[tokio::test]
async fn server_down_is_shown_with_retry_and_the_stream_catches_up_after_a_restart() {
    let Some(mut fx) = Fixture::start("server_down").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("erin");
    sign_in(&b, &fx.base(), &user).await;
    new_conversation(&b).await;
    ask(&b, "Get my P&L report for Q1 2025").await;
    b.wait_for(PENDING_CARD).await.expect("card");
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("stream live");
    let url = b.current_url().await.expect("url");
    let conversation = url.rsplit('/').next().expect("id").to_owned();

    fx.server.terminate().await.expect("stop the server");
    b.wait_for("[data-testid=stream-status][data-state=reconnecting]")
        .await
        .expect("stream reconnecting");
    // Answering while the server is away says so, keeps the answer and offers a retry.
    let input = b
        .find("[data-testid=input-card] input")
        .await
        .expect("input");
    input.send_keys("9130346988354456").await.expect("type");
    input.send_keys(ENTER).await.expect("submit");
    let banner = b
        .wait_for("[data-testid=error-banner]")
        .await
        .expect("banner")
        .text()
        .await
        .expect("text");
    assert!(banner.contains("Can't reach the server"), "{banner}");
    b.wait_for("[data-testid=retry]")
        .await
        .expect("retry button");
    let card_error = b
        .text("[data-testid=card-error]")
        .await
        .expect("card error");
    assert!(card_error.contains("Not sent"), "{card_error}");
    assert_eq!(b.count(PENDING_CARD).await.expect("still pending"), 1);

    // Back on the same address. The answer arrives from elsewhere (another tab) while
    // the page is still reconnecting: the stream must replay what it missed.
    let database = fx.server.database_url.clone();
    fx.server = start_server(fx.port, Some(database)).await;
    let token = fx.server.token(&user).await;
    let (_, pending) = fx
        .server
        .action(
            &token,
            json!({"action": "get_pending", "conversation_id": conversation}),
        )
        .await;
    let tool_call_id = pending["requests"][0]["tool_call_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no pending request after the restart: {pending}"))
        .to_owned();
    let (status, body) = fx
        .server
        .action(
            &token,
            json!({"action": "submit_response", "tool_call_id": tool_call_id,
                   "user_inputs": {"quickbooks_realm_id": "9130346988354456"}}),
        )
        .await;
    assert_eq!(status.as_u16(), 200, "{body}");

    b.wait_for("[data-testid=input-card][data-status=completed]")
        .await
        .expect("the card learns it was answered");
    crate::wait_for_answer(&b, "net income").await;
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("live again");
    // The banner goes once the server answers again (by itself, or on Retry).
    b.wait_until(
        "the banner to go",
        "(() => { const r = document.querySelector('[data-testid=retry]'); if (r) r.click(); \
          return !document.querySelector('[data-testid=error-banner]'); })()",
    )
    .await
    .expect("banner gone");
    b.quit().await;
}

#[tokio::test]
async fn works_at_375_pixels_wide() {
    let Some(fx) = Fixture::start("narrow").await else {
        return;
    };
    let b = fx.browser().await;
    b.set_window_size(375, 812).await.expect("narrow window");
    sign_in(&b, &fx.base(), &unique("frank")).await;
    new_conversation(&b).await;
    ask(&b, "Which customers do we have? Query the database.").await;
    b.wait_for(PENDING_CARD).await.expect("card");
    b.click_on("[data-field=database] select option[value=production]")
        .await
        .expect("choose");
    b.wait_for("[data-field=production_reason] textarea")
        .await
        .expect("reason field");
    let overflow = b
        .execute(
            "return [document.documentElement.scrollWidth, window.innerWidth]",
            vec![],
        )
        .await
        .expect("widths");
    let (scroll, inner) = (
        overflow[0].as_f64().unwrap_or(0.0),
        overflow[1].as_f64().unwrap_or(0.0),
    );
    assert!(inner <= 400.0, "window is narrow: {inner}");
    assert!(
        scroll <= inner + 1.0,
        "no sideways scrolling: {scroll} > {inner}"
    );
    let submit = b.find("[data-testid=card-submit]").await.expect("submit");
    assert!(submit.is_displayed().await.expect("visible"));
    screenshot(&b, "card-375.png").await;
    b.quit().await;
}

#[tokio::test]
async fn losing_the_network_is_shown_and_the_stream_comes_back_by_itself() {
    let Some(fx) = Fixture::start("offline").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("gina")).await;
    new_conversation(&b).await;
    ask(&b, "Get my P&L report for Q1 2025").await;
    b.wait_for(PENDING_CARD).await.expect("card");
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("stream live");

    b.set_offline(true).await.expect("cut the network");
    b.wait_for("[data-testid=offline-banner]")
        .await
        .expect("offline banner");
    b.set_offline(false).await.expect("restore the network");
    b.wait_until(
        "the offline banner to go",
        "!document.querySelector('[data-testid=offline-banner]')",
    )
    .await
    .expect("banner gone");
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("live again");
    // The card still answers and the run goes on.
    let input = b
        .find("[data-testid=input-card] input")
        .await
        .expect("input");
    input.send_keys("9130346988354456").await.expect("type");
    input.send_keys(ENTER).await.expect("submit");
    crate::wait_for_answer(&b, "net income").await;
    b.quit().await;
}

/// The server ends every event stream when its token expires, saying so first. The page
/// opens the next one at once and says nothing: the status (a live region a screen
/// reader reads out) stays "live", and the stream goes on delivering. A stream that
/// ends without that word, or right after it opened, is a lost connection, and the page
/// says so.
#[tokio::test]
async fn a_stream_ended_for_its_token_is_reopened_without_a_word() {
    let Some(fx) = Fixture::start("stream_ends").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("hana")).await;
    // Keeps every EventSource the page opens, to end one as the server would.
    b.execute(
        "window.__sources = []; const Original = window.EventSource; \
         window.EventSource = function (url, options) { \
           const source = new Original(url, options); window.__sources.push(source); \
           return source; }; \
         window.EventSource.prototype = Original.prototype;",
        vec![],
    )
    .await
    .expect("follow the page's event sources");
    new_conversation(&b).await;
    ask(&b, "Get my P&L report for Q1 2025").await;
    b.wait_for(PENDING_CARD).await.expect("card");
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("stream live");
    let opened = b
        .execute("return window.__sources.length", vec![])
        .await
        .expect("sources")
        .as_u64()
        .unwrap_or(0);
    assert!(opened >= 1, "the page's stream was followed");
    // A stream that lived a while (one whose token expired at once goes the slow way).
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    // Every state the status shows from now on; then the stream ends as the server
    // ends it at its token's expiry: the `expired` event, then the close.
    b.execute(
        "window.__states = []; const status = document.querySelector('[data-testid=stream-status]'); \
         new MutationObserver(() => window.__states.push(status.dataset.state)) \
           .observe(status, { attributes: true, attributeFilter: ['data-state'] }); \
         const source = window.__sources[window.__sources.length - 1]; \
         source.dispatchEvent(new MessageEvent('expired', { data: '{\"reason\":\"token_expired\"}' })); \
         source.dispatchEvent(new Event('error'));",
        vec![],
    )
    .await
    .expect("end the stream");
    let reopened = |count: u64| {
        format!(
            "window.__sources.length > {count} && \
             window.__sources[window.__sources.length - 1].readyState === 1"
        )
    };
    b.wait_until("a new stream to open", &reopened(opened))
        .await
        .expect("reopened");
    let states = shown_states(&b).await;
    assert!(
        states.iter().all(|state| state == "live"),
        "the status only ever said live: {states:?}"
    );

    // Without that word, or from a stream that had barely opened (a token that expires
    // at once must not make the page spin), the end is a lost connection: the page says
    // it reconnects.
    for (count, end) in [
        (
            opened + 1,
            "source.dispatchEvent(new MessageEvent('expired', { data: '{}' })); \
             source.dispatchEvent(new Event('error'));",
        ),
        (opened + 2, "source.dispatchEvent(new Event('error'));"),
    ] {
        if count == opened + 2 {
            tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
        }
        b.execute(
            &format!(
                "window.__states = []; \
                 const source = window.__sources[window.__sources.length - 1]; {end}"
            ),
            vec![],
        )
        .await
        .expect("drop the stream");
        b.wait_until("the next stream to open", &reopened(count))
            .await
            .expect("reopened again");
        b.wait_for("[data-testid=stream-status][data-state=live]")
            .await
            .expect("live again");
        let states = shown_states(&b).await;
        assert!(
            states.iter().any(|state| state == "reconnecting"),
            "a lost stream is said to reconnect ({end}): {states:?}"
        );
    }

    let input = b
        .find("[data-testid=input-card] input")
        .await
        .expect("input");
    input.send_keys("9130346988354456").await.expect("type");
    input.send_keys(ENTER).await.expect("submit");
    crate::wait_for_answer(&b, "net income").await;
    b.quit().await;
}

/// The stream states the page recorded in `window.__states`.
async fn shown_states(b: &crate::webdriver::Browser) -> Vec<String> {
    let states = b
        .execute("return window.__states", vec![])
        .await
        .expect("states");
    states
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|state| state.as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn without_dev_sign_in_the_page_explains_tokens_and_accepts_a_pasted_one() {
    let Some(fx) = Fixture::start_with("no_dev_auth", |o| o.without("TOOLGATE_DEV_AUTH")).await
    else {
        return;
    };
    let b = fx.browser().await;
    open_app(&b, &fx.base()).await;
    let explanation = b
        .wait_for("[data-testid=token-explanation]")
        .await
        .expect("explanation")
        .text()
        .await
        .expect("text");
    assert!(explanation.contains("JWT"), "{explanation}");
    assert_eq!(
        b.count("[data-testid=user-name]").await.expect("no form"),
        0
    );

    let field = b
        .wait_for("[data-testid=token-input]")
        .await
        .expect("token field");
    field.send_keys("not-a-token").await.expect("type");
    b.click_on("[data-testid=token-sign-in] button[type=submit]")
        .await
        .expect("click");
    b.wait_until(
        "the token problem",
        "document.querySelector('#token-error').innerText.includes('three parts')",
    )
    .await
    .expect("told what is wrong");

    let user = unique("hana");
    let wrong = tests::sign_token(
        &json!({"sub": user, "exp": tests::now() + 3600}),
        "another-secret-that-is-long-enough-0123456789",
        jsonwebtoken::Algorithm::HS256,
    );
    field
        .send_keys(&format!("\u{E009}a\u{E000}{wrong}"))
        .await
        .expect("paste");
    b.click_on("[data-testid=token-sign-in] button[type=submit]")
        .await
        .expect("click");
    b.wait_until(
        "the refusal",
        "document.querySelector('#token-error').innerText.includes('refused')",
    )
    .await
    .expect("refused");

    let good = tests::sign_token(
        &json!({"sub": user, "exp": tests::now() + 3600}),
        tests::JWT_SECRET,
        jsonwebtoken::Algorithm::HS256,
    );
    field
        .send_keys(&format!("\u{E009}a\u{E000}{good}"))
        .await
        .expect("paste");
    b.click_on("[data-testid=token-sign-in] button[type=submit]")
        .await
        .expect("click");
    b.wait_for("[data-testid=new-conversation]")
        .await
        .expect("signed in with the token");
    assert_eq!(
        b.text("[data-testid=signed-in-user]").await.expect("user"),
        user
    );
    b.quit().await;
}

/// What was typed and not sent is still there after a reload and after a visit to
/// another conversation, in the conversation it was typed in only; sent, it is gone.
#[tokio::test]
async fn a_draft_outlives_a_reload_and_a_visit_elsewhere_until_it_is_sent() {
    let Some(fx) = Fixture::start("draft_reload").await else {
        return;
    };
    let b = fx.browser().await;
    let address = a_conversation_of(&b, &fx.base(), &unique("ines")).await;
    let draft = "Half a thought about the Q4 report";
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box")
        .send_keys(draft)
        .await
        .expect("type");

    reload(&b).await;
    let kept = b
        .wait_until("the draft after a reload", &composer_shows(draft))
        .await;
    assert!(kept.is_ok(), "{}", b.page_summary().await);

    // Another conversation has a message box of its own.
    new_conversation(&b).await;
    b.wait_until("an empty message box elsewhere", &composer_shows(""))
        .await
        .expect("the draft stays with its conversation");
    b.goto(&address).await.expect("back to the conversation");
    let kept = b
        .wait_until("the draft on coming back", &composer_shows(draft))
        .await;
    assert!(kept.is_ok(), "{}", b.page_summary().await);

    // Sent, it is not brought back, even when the user moved to another conversation
    // before the message was through.
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("the conversation caught up");
    wait_send_enabled(&b).await;
    b.set_latency(1500).await.expect("a slow network");
    press_enter_in_composer(&b).await;
    new_conversation(&b).await;
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    b.set_latency(0).await.expect("the network back");
    b.goto(&address).await.expect("back to the conversation");
    b.wait_until(
        "the sent message",
        "document.body.innerText.includes('Q4 report')",
    )
    .await
    .expect("the message went");
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box");
    assert_eq!(
        composer_value(&b).await,
        json!(""),
        "the sent text offered again"
    );
    reload(&b).await;
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box");
    assert_eq!(composer_value(&b).await, json!(""));
    b.quit().await;
}

/// A message box opened again while its message was being sent still shows the text
/// once the send is through; Send there answers with the message already posted and
/// posts nothing twice (no second message, no second run).
#[tokio::test]
async fn send_again_from_a_box_opened_mid_send_posts_the_message_once() {
    let Some(fx) = Fixture::start("send_again").await else {
        return;
    };
    let b = fx.browser().await;
    let address = a_conversation_of(&b, &fx.base(), &unique("jon")).await;
    let conversation = address.rsplit('/').next().expect("id").to_owned();
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("the conversation caught up");
    let text = "Please total the March invoices";
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box")
        .send_keys(text)
        .await
        .expect("type");
    wait_send_enabled(&b).await;

    // The post waits on the conversation's row while the user goes and comes back.
    let mut holder = fx.server.db().await;
    sqlx::query("begin")
        .execute(&mut holder)
        .await
        .expect("begin");
    sqlx::query("select 1 from conversations where id = $1::uuid for update")
        .bind(&conversation)
        .execute(&mut holder)
        .await
        .expect("hold the conversation");
    press_enter_in_composer(&b).await;
    new_conversation(&b).await;
    b.goto(&address).await.expect("back to the conversation");
    let kept = b
        .wait_until("the text still being sent", &composer_shows(text))
        .await;
    assert!(kept.is_ok(), "{}", b.page_summary().await);
    sqlx::query("commit")
        .execute(&mut holder)
        .await
        .expect("let go");

    // The send goes through and its run ends; the box still shows the text.
    b.wait_until(
        "the sent message",
        "document.body.innerText.includes('March invoices')",
    )
    .await
    .expect("the message went");
    crate::wait_idle(&b).await;
    wait_send_enabled(&b).await;
    assert_eq!(composer_value(&b).await, json!(text));
    press_enter_in_composer(&b).await;
    b.wait_until("the box to empty", &composer_shows(""))
        .await
        .expect("answered");
    crate::wait_idle(&b).await;

    let mut db = fx.server.db().await;
    let (messages, runs): (i64, i64) = sqlx::query_as(
        "select (select count(*) from messages
                 where conversation_id = $1::uuid and role = 'user' and text_content = $2),
                (select count(*) from agent_runs r join messages m on m.id = r.user_message_id
                 where r.conversation_id = $1::uuid and m.text_content = $2)",
    )
    .bind(&conversation)
    .bind(text)
    .fetch_one(&mut db)
    .await
    .expect("count");
    assert_eq!((messages, runs), (1, 1), "{}", b.page_summary().await);
    let shown = b
        .execute(
            "return [...document.querySelectorAll('[data-testid=message-user]')]\
             .filter(m => m.innerText.includes('March invoices')).length",
            vec![],
        )
        .await
        .expect("shown");
    assert_eq!(shown, json!(1));
    b.quit().await;
}

/// The same from the new-conversation page: sent again from a box opened while the
/// first send was under way, the message goes into the conversation made for it then,
/// not into a second one.
#[tokio::test]
async fn send_again_from_a_new_conversation_box_makes_no_second_conversation() {
    let Some(fx) = Fixture::start("send_again_new").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("kim");
    let address = a_conversation_of(&b, &fx.base(), &user).await;
    new_conversation(&b).await;
    let text = "Summarise the April payroll";
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box")
        .send_keys(text)
        .await
        .expect("type");

    // The conversation is made; its message waits until the user has gone and come back.
    let mut holder = fx.server.db().await;
    sqlx::query("begin")
        .execute(&mut holder)
        .await
        .expect("begin");
    sqlx::query("lock table messages in share mode")
        .execute(&mut holder)
        .await
        .expect("hold new messages");
    press_enter_in_composer(&b).await;
    let mut db = fx.server.db().await;
    let made = async {
        loop {
            let made: i64 = sqlx::query_scalar(
                "select count(*) from conversations where user_id = $1 and title like 'Summarise%'",
            )
            .bind(&user)
            .fetch_one(&mut db)
            .await
            .expect("conversations");
            if made == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(20), made)
        .await
        .expect("the conversation made");
    b.goto(&address).await.expect("to another conversation");
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("the other conversation");
    new_conversation(&b).await;
    let kept = b
        .wait_until("the text still being sent", &composer_shows(text))
        .await;
    assert!(kept.is_ok(), "{}", b.page_summary().await);
    sqlx::query("commit")
        .execute(&mut holder)
        .await
        .expect("let go");
    let ended = async {
        loop {
            let running: i64 = sqlx::query_scalar(
                "select count(*) from agent_runs
                 where user_id = $1 and status in ('running', 'waiting_for_input')",
            )
            .bind(&user)
            .fetch_one(&mut db)
            .await
            .expect("runs");
            let posted: i64 = sqlx::query_scalar(
                "select count(*) from messages where user_id = $1 and text_content = $2",
            )
            .bind(&user)
            .bind(text)
            .fetch_one(&mut db)
            .await
            .expect("messages");
            if running == 0 && posted == 1 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(30), ended)
        .await
        .expect("the first send through and its run over");

    assert_eq!(composer_value(&b).await, json!(text));
    press_enter_in_composer(&b).await;
    b.wait_until(
        "the conversation made for it",
        "location.hash.startsWith('#/c/') && document.body.innerText.includes('April payroll')",
    )
    .await
    .expect("shown");
    crate::wait_idle(&b).await;
    let (conversations, messages, runs): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from conversations where user_id = $1),
                (select count(*) from messages where user_id = $1 and text_content = $2),
                (select count(*) from agent_runs where user_id = $1)",
    )
    .bind(&user)
    .bind(text)
    .fetch_one(&mut db)
    .await
    .expect("count");
    // The first conversation with its exchange, and the one made for this message.
    assert_eq!(
        (conversations, messages, runs),
        (2, 1, 2),
        "{}",
        b.page_summary().await
    );
    b.quit().await;
}

/// What was typed and not sent outlives a session that runs out while it is on the
/// screen (signing in again brings it back), but not a sign-out on purpose.
#[tokio::test]
async fn a_draft_outlives_an_expired_session_but_not_a_sign_out() {
    let Some(fx) = Fixture::start("draft").await else {
        return;
    };
    let b = fx.browser().await;
    let user = unique("erin");
    let address = a_conversation_of(&b, &fx.base(), &user).await;

    // A session the page knows runs out in a few seconds, with a token the server takes.
    let token = tests::sign_token(
        &json!({"sub": user, "exp": tests::now() + 3600}),
        tests::JWT_SECRET,
        jsonwebtoken::Algorithm::HS256,
    );
    b.execute(
        "localStorage.setItem('toolgate.session', JSON.stringify({token: arguments[0], user_id: arguments[1], expires_at_ms: Date.now() + 10000}))",
        vec![json!(token), json!(user)],
    )
    .await
    .expect("plant session");
    reload(&b).await;
    let draft = "Half a thought about the Q3 report";
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box")
        .send_keys(draft)
        .await
        .expect("type");
    b.wait_for("[data-testid=signed-out-reason]")
        .await
        .expect("signed out when the session ran out");

    sign_in(&b, &fx.base(), &user).await;
    b.goto(&address).await.expect("open the conversation");
    let kept = b
        .wait_until("the draft to be back", &composer_shows(draft))
        .await;
    assert!(kept.is_ok(), "{}", b.page_summary().await);

    // Signing out forgets it.
    sign_out(&b).await;
    sign_in(&b, &fx.base(), &user).await;
    b.goto(&address).await.expect("open the conversation again");
    b.wait_for("[data-testid=composer-input]")
        .await
        .expect("message box");
    assert_eq!(composer_value(&b).await, json!(""));
    b.quit().await;
}
