//! The cards' code is a module of its own: fetched the first time a card (or the list of
//! remembered values) is shown, and when that fetch fails, the page says so and recovers.

use crate::webdriver::{Browser, ENTER};
use crate::{Fixture, ask, new_conversation, sign_in, unique, wait_for_answer, wait_for_answers};

const PNL: &str = "Get my P&L report for Q1 2025";
const PENDING_CARD: &str = "[data-testid=input-card][data-status=pending]";
const CARDS_MODULE: &str = "*/pkg/split_cards.*";

/// How many times the page fetched the cards' module (a script for the page).
const CARDS_MODULE_FETCHES: &str = "performance.getEntriesByType('resource')\
    .filter(e => new URL(e.name).pathname.startsWith('/pkg/split_cards.')).length";

async fn cards_module_fetches(b: &Browser) -> u64 {
    b.execute(&format!("return {CARDS_MODULE_FETCHES}"), vec![])
        .await
        .expect("resource timings")
        .as_u64()
        .expect("a count")
}

/// Waits until the page has fetched the cards' module once (timings land a moment after
/// the fetch).
async fn wait_for_one_fetch(b: &Browser) {
    b.wait_until(
        "one fetch of the cards' module",
        &format!("{CARDS_MODULE_FETCHES} === 1"),
    )
    .await
    .expect("fetched once");
}

/// A signed-in user's new conversation after its first message, `text`; with the cards'
/// module out of reach when `block`.
async fn chat_after(fx: &Fixture, user: &str, text: &str, block: bool) -> Browser {
    let b = fx.browser().await;
    if block {
        b.block_urls(&[CARDS_MODULE]).await.expect("block");
    }
    sign_in(&b, &fx.base(), &unique(user)).await;
    new_conversation(&b).await;
    ask(&b, text).await;
    b
}

async fn open_saved_values(b: &Browser) {
    b.click_on("[data-testid=saved-values] summary")
        .await
        .expect("open the panel");
}

#[tokio::test]
async fn the_cards_code_is_fetched_only_when_a_card_is_first_shown() {
    let Some(fx) = Fixture::start("cards_fetched_late").await else {
        return;
    };
    let b = chat_after(&fx, "hana", "Hello there", false).await;
    wait_for_answers(&b, 1).await;
    b.wait_for("[data-testid=saved-count]")
        .await
        .expect("the remembered values are counted");
    assert_eq!(
        cards_module_fetches(&b).await,
        0,
        "a chat without a card never fetches the cards' module"
    );

    ask(&b, PNL).await;
    b.wait_for(PENDING_CARD).await.expect("a card");
    wait_for_one_fetch(&b).await;

    // The list of remembered values is in the same module: nothing more to fetch.
    open_saved_values(&b).await;
    b.wait_for("[data-testid=saved-empty]")
        .await
        .expect("the list");
    wait_for_one_fetch(&b).await;
    b.quit().await;
}

#[tokio::test]
async fn a_card_whose_code_cannot_be_fetched_says_so_and_shows_after_a_retry() {
    let Some(fx) = Fixture::start("cards_unavailable").await else {
        return;
    };
    let b = chat_after(&fx, "ines", PNL, true).await;

    let notice = b
        .wait_for("[data-testid=deferred-unavailable]")
        .await
        .expect("a notice where the card would be")
        .text()
        .await
        .expect("its text");
    assert!(notice.contains("Could not load the card"), "{notice}");
    assert_eq!(b.count("[data-testid=input-card]").await.expect("count"), 0);
    // The rest of the page goes on working: the run waits for the card.
    b.wait_for("[data-testid=run-waiting]")
        .await
        .expect("the run waits");

    b.block_urls(&[]).await.expect("unblock");
    b.click_on("[data-testid=deferred-retry]")
        .await
        .expect("click try again");
    let input = b
        .wait_for(&format!(
            "{PENDING_CARD} [data-field=quickbooks_realm_id] input"
        ))
        .await
        .expect("the card, after all");
    assert_eq!(
        b.count("[data-testid=deferred-unavailable]")
            .await
            .expect("count"),
        0
    );
    input.send_keys("9130346988354456").await.expect("type");

    // A card that is shown is never built again: going offline and back (which reloads
    // what the page shows and tries failed parts again) keeps what was typed.
    b.set_offline(true).await.expect("cut the network");
    b.wait_for("[data-testid=offline-banner]")
        .await
        .expect("offline banner");
    b.set_offline(false).await.expect("restore the network");
    b.wait_for("[data-testid=stream-status][data-state=live]")
        .await
        .expect("live again");
    let input = b
        .find(&format!(
            "{PENDING_CARD} [data-field=quickbooks_realm_id] input"
        ))
        .await
        .expect("the same card");
    assert_eq!(
        input.prop("value").await.expect("value"),
        "9130346988354456",
        "what was typed is still there"
    );
    assert_eq!(
        b.count("[data-testid=deferred-loading]")
            .await
            .expect("count"),
        0
    );

    input.send_keys(ENTER).await.expect("submit");
    wait_for_answer(&b, "net income").await;
    b.quit().await;
}

#[tokio::test]
async fn remembered_values_that_could_not_load_come_back_by_themselves_when_back_online() {
    let Some(fx) = Fixture::start("list_back_online").await else {
        return;
    };
    let b = chat_after(&fx, "jun", "Hello there", true).await;
    wait_for_answers(&b, 1).await;
    open_saved_values(&b).await;
    let notice = b
        .wait_for("[data-testid=saved-values] [data-testid=deferred-unavailable]")
        .await
        .expect("a notice in the panel")
        .text()
        .await
        .expect("its text");
    assert!(
        notice.contains("Could not load the remembered values"),
        "{notice}"
    );

    // Back online, the page tries again without being asked.
    b.block_urls(&[]).await.expect("unblock");
    b.set_offline(true).await.expect("cut the network");
    b.wait_for("[data-testid=offline-banner]")
        .await
        .expect("offline banner");
    b.set_offline(false).await.expect("restore the network");
    b.wait_for("[data-testid=saved-empty]")
        .await
        .expect("the list, by itself");
    assert_eq!(
        b.count("[data-testid=deferred-unavailable]")
            .await
            .expect("count"),
        0
    );
    b.quit().await;
}
