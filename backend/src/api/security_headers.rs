//! Headers that tell browsers what the web chat, the docs page and the API may do:
//! run only this server's own scripts (and their wasm), load nothing from elsewhere,
//! never be framed, never guess a content type, never send a referrer.

use axum::http::HeaderValue;
use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, HeaderName, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::response::Response;

/// A policy allowing inline styles only with the given hashes (a literal, each quoted,
/// each preceded by a space).
macro_rules! policy {
    ($style_hashes:literal) => {
        concat!(
            "default-src 'self'; ",
            "script-src 'self' 'wasm-unsafe-eval'; ",
            "style-src 'self'",
            $style_hashes,
            "; ",
            "img-src 'self' data:; ",
            "connect-src 'self'; ",
            "font-src 'self'; ",
            "object-src 'none'; ",
            "base-uri 'none'; ",
            "form-action 'self'; ",
            "frame-ancestors 'none'"
        )
    };
}

/// The policy for every page this server serves. Neither the web chat nor Swagger UI
/// needs inline scripts; Swagger UI's stylesheet draws its icons from `data:` URLs, and
/// the wasm bundle needs `wasm-unsafe-eval` to be compiled.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = policy!("");

/// The docs page's policy: Swagger UI's top-bar logo carries one `<style>` element
/// (`.logo_small_svg__cls-2{fill:#fff}.logo_small_svg__cls-3{fill:#85ea2d}` in the
/// vendored 5.17.14), allowed by its hash rather than allowing every inline style.
pub const DOCS_CONTENT_SECURITY_POLICY: &str =
    policy!(" 'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='");

fn headers() -> [(HeaderName, &'static str); 4] {
    [
        (CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY_VALUE),
        // For browsers that predate `frame-ancestors`.
        (X_FRAME_OPTIONS, "DENY"),
        (X_CONTENT_TYPE_OPTIONS, "nosniff"),
        // Stream tokens travel in query strings; no other site gets to see them.
        (REFERRER_POLICY, "no-referrer"),
    ]
}

/// Adds the headers to a response; one that a route set itself is kept.
pub async fn set_security_headers(mut response: Response) -> Response {
    let target = response.headers_mut();
    for (name, value) in headers() {
        target
            .entry(name)
            .or_insert_with(|| HeaderValue::from_static(value));
    }
    response
}

/// Keeps an API answer out of every cache, the browser's disk cache included: what a
/// user's conversations and tools said must not stay on a shared computer after they
/// sign out. It replaces what a route said (an event stream's `no-cache`, which lets a
/// cache keep it).
pub async fn set_not_stored(mut response: Response) -> Response {
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Gives a response the docs page's policy; [`set_security_headers`] then keeps it.
pub async fn set_docs_policy(mut response: Response) -> Response {
    response.headers_mut().insert(
        CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(DOCS_CONTENT_SECURITY_POLICY),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_header_is_set() {
        let response = set_security_headers(Response::default()).await;
        let csp = response.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        for directive in [
            "default-src 'self'",
            "script-src 'self' 'wasm-unsafe-eval'",
            "frame-ancestors 'none'",
        ] {
            assert!(csp.contains(directive), "{directive} missing from {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(response.headers()[X_FRAME_OPTIONS], "DENY");
        assert_eq!(response.headers()[X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(response.headers()[REFERRER_POLICY], "no-referrer");
    }

    #[tokio::test]
    async fn the_docs_policy_differs_only_by_one_style_hash() {
        let docs = set_security_headers(set_docs_policy(Response::default()).await).await;
        let csp = docs.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        assert_eq!(csp, DOCS_CONTENT_SECURITY_POLICY);
        assert_eq!(
            csp.replace(" 'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='", ""),
            CONTENT_SECURITY_POLICY_VALUE
        );
    }
}
