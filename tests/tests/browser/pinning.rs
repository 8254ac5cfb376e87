//! Pinning in the web chat: the first request says it is always kept, a later message
//! of the user's can be pinned with its button, and the pin holds after a reload.

use crate::{Fixture, ask, new_conversation, reload, sign_in, unique, wait_for_answers};

const PRESSED: &str = "[data-testid=pin-message][aria-pressed=true]";

#[tokio::test]
async fn the_first_request_is_kept_and_a_later_message_can_be_pinned() {
    let Some(fx) = Fixture::start("pinning").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("pinner")).await;
    new_conversation(&b).await;
    ask(&b, "Hello there").await;
    wait_for_answers(&b, 1).await;
    ask(&b, "Remember: the deadline is Friday at noon").await;
    wait_for_answers(&b, 2).await;

    // The first request carries the "always kept" mark, and no button; the second a
    // button that is not pressed.
    let first = b
        .find("[data-testid=message-user]")
        .await
        .expect("first message");
    assert!(
        first.find("[data-testid=pinned-task]").await.is_ok(),
        "the first request says it is kept"
    );
    assert_eq!(
        b.count("[data-testid=pin-message]").await.expect("count"),
        1
    );
    assert_eq!(b.count(PRESSED).await.expect("count"), 0);

    b.click_on("[data-testid=pin-message]")
        .await
        .expect("click pin");
    b.wait_for(PRESSED).await.expect("the button shows the pin");
    let label = b.text(PRESSED).await.expect("label");
    assert!(label.contains("Pinned"), "{label}");

    // The pin is the server's, not the page's.
    reload(&b).await;
    b.wait_for(PRESSED)
        .await
        .expect("still pinned after a reload");

    // And it can be taken back.
    b.find(PRESSED)
        .await
        .expect("pinned button")
        .click()
        .await
        .expect("click unpin");
    b.wait_until(
        "the pin to be taken back",
        "!document.querySelector('[data-testid=pin-message][aria-pressed=true]')",
    )
    .await
    .expect("unpinned");
    b.quit().await;
}

/// A first request that starts with a slash but is no command (a path) sets the task,
/// as the server keeps it: the page marks that message, not the next one.
#[tokio::test]
async fn a_first_request_that_starts_with_a_path_is_the_task() {
    let Some(fx) = Fixture::start("pinning-path").await else {
        return;
    };
    let b = fx.browser().await;
    sign_in(&b, &fx.base(), &unique("path-pinner")).await;
    new_conversation(&b).await;
    ask(&b, "/etc/hosts looks wrong, what should it hold?").await;
    wait_for_answers(&b, 1).await;
    ask(&b, "And on a laptop?").await;
    wait_for_answers(&b, 2).await;

    let first = b
        .find("[data-testid=message-user]")
        .await
        .expect("first message");
    assert!(
        first.find("[data-testid=pinned-task]").await.is_ok(),
        "the first request says it is kept"
    );
    assert_eq!(
        b.count("[data-testid=pinned-task]").await.expect("count"),
        1
    );
    b.quit().await;
}
