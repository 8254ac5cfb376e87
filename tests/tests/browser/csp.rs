//! The web chat and the docs page work under the Content-Security-Policy the server
//! sends, and the browser enforces it: an injected inline script does not run.

use crate::webdriver::Browser;
use crate::{Fixture, ask, new_conversation, sign_in, unique};

/// Collects the page's policy violations from now on.
const WATCH_VIOLATIONS: &str = "window.__violations = [];\
     document.addEventListener('securitypolicyviolation', e =>\
       window.__violations.push(e.effectiveDirective + ' blocked ' + e.blockedURI));";

async fn violations(browser: &Browser) -> Vec<String> {
    let seen = browser
        .execute("return window.__violations || ['no watcher'];", vec![])
        .await
        .expect("violations");
    seen.as_array()
        .map(|list| {
            list.iter()
                .map(|v| v.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Chromium logs every violation to the console, also those before a watcher could be
/// installed (while the page loads).
async fn console_violations(browser: &Browser) -> Vec<String> {
    browser
        .console()
        .await
        .lines()
        .filter(|line| line.contains("Content Security Policy"))
        .map(str::to_owned)
        .collect()
}

async fn policy_of(fx: &Fixture, path: &str) -> String {
    let response = fx
        .server
        .client
        .get(format!("{}{path}", fx.base()))
        .send()
        .await
        .expect("page");
    response
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn web_chat_runs_under_the_policy_and_inline_scripts_are_blocked() {
    let Some(fx) = Fixture::start("csp_web_chat").await else {
        return;
    };
    let csp = policy_of(&fx, "/").await;
    assert!(
        csp.contains("script-src 'self' 'wasm-unsafe-eval'"),
        "policy on /: {csp:?}"
    );
    assert!(!csp.contains("unsafe-inline"), "{csp}");

    let b = fx.browser().await;
    // Signing in needs the wasm bundle loaded, mounted and talking to the API.
    sign_in(&b, &fx.base(), &unique("csp")).await;
    b.execute(WATCH_VIOLATIONS, vec![]).await.expect("watch");
    new_conversation(&b).await;
    ask(&b, "Get my P&L report for Q1 2025").await;
    // The card arrives over the event stream.
    b.wait_for("[data-testid=input-card][data-status=pending]")
        .await
        .expect("input card");
    let early = console_violations(&b).await;
    assert!(early.is_empty(), "violations while loading: {early:#?}");
    let seen = violations(&b).await;
    assert!(seen.is_empty(), "violations while chatting: {seen:#?}");

    // What an injected payload would try: it is refused and reported.
    b.execute(
        "const s = document.createElement('script');\
         s.textContent = 'window.__inlineRan = true';\
         document.body.appendChild(s);",
        vec![],
    )
    .await
    .expect("inject");
    b.wait_until("the violation report", "window.__violations.length > 0")
        .await
        .expect("a report");
    let ran = b
        .execute("return window.__inlineRan === true;", vec![])
        .await
        .expect("flag");
    assert_eq!(ran, serde_json::json!(false), "the inline script ran");
    let seen = violations(&b).await;
    assert!(
        seen.len() == 1 && seen[0].starts_with("script-src"),
        "{seen:#?}"
    );
    b.quit().await;
}

#[tokio::test]
async fn docs_page_shows_the_operations_under_the_policy() {
    let Some(fx) = Fixture::start("csp_docs").await else {
        return;
    };
    let csp = policy_of(&fx, "/api/docs/").await;
    assert!(
        csp.contains("default-src 'self'"),
        "policy on docs: {csp:?}"
    );

    let b = fx.browser().await;
    b.goto(&format!("{}/api/docs/", fx.base()))
        .await
        .expect("open docs");
    b.wait_until(
        "the operations",
        "[...document.querySelectorAll('.opblock-summary-path')]\
         .some(p => p.innerText.includes('/api/conversations'))",
    )
    .await
    .expect("operations listed");
    b.execute(WATCH_VIOLATIONS, vec![]).await.expect("watch");
    // Opening an operation renders its schema and examples.
    b.click_on(".opblock-summary").await.expect("open it");
    b.wait_for(".opblock-body")
        .await
        .expect("operation details");
    let early = console_violations(&b).await;
    assert!(early.is_empty(), "violations on the docs page: {early:#?}");
    let seen = violations(&b).await;
    assert!(seen.is_empty(), "violations on the docs page: {seen:#?}");
    b.quit().await;
}
