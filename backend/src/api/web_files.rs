//! The web chat's files, with what browsers may keep of them.
//!
//! The page's JavaScript, its main WebAssembly module and the module split off from it
//! (the cards, fetched when first needed) only work with files of the same build. So
//! every file is revalidated on each load (`no-cache`: a 304 when unchanged), except a
//! split-off module, whose name carries a hash of its build (`split_cards.<hash>.wasm`)
//! and which is therefore kept for a year.

use std::path::Path;

use axum::extract::Request;
use axum::http::HeaderValue;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::compression::CompressionLayer;
use tower_http::services::{ServeDir, ServeFile};

/// Files from `dir` (precompressed `.gz` beside them where there is one), and
/// `index.html` for every other path.
pub fn service(dir: &Path) -> axum::routing::Router {
    let index = ServeFile::new(dir.join("index.html"));
    let files = ServeDir::new(dir).precompressed_gzip().fallback(index);
    axum::routing::Router::new()
        .fallback_service(files)
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn(cache_control))
}

async fn cache_control(request: Request, next: Next) -> Response {
    let named_by_build = is_named_by_build(request.uri().path());
    let mut response = next.run(request).await;
    // A module that is not there gets the page instead (the fallback), never to be kept.
    let is_module = response
        .headers()
        .get(CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes() == b"application/wasm");
    let value = if named_by_build && is_module && response.status().is_success() {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    response
        .headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static(value));
    response
}

/// `/pkg/split_<name>.<16 hex digits>.wasm`: a split-off module named by its build.
fn is_named_by_build(path: &str) -> bool {
    let Some(file) = path.strip_prefix("/pkg/split_") else {
        return false;
    };
    let Some(stem) = file.strip_suffix(".wasm") else {
        return false;
    };
    let Some((name, hash)) = stem.rsplit_once('.') else {
        return false;
    };
    !name.is_empty()
        && !name.contains('/')
        && hash.len() == 16
        && hash.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_split_module_with_its_build_in_its_name_is_kept() {
        assert!(is_named_by_build("/pkg/split_cards.0108cc7106fbcd55.wasm"));
        for path in [
            "/pkg/split_cards.wasm",
            "/pkg/frontend_bg.wasm",
            "/pkg/frontend.js",
            "/pkg/__wasm_split.js",
            "/pkg/split_cards.0108cc7106fbcd5.wasm",
            "/pkg/split_cards.0108cc7106fbcd5x.wasm",
            "/pkg/split_.0108cc7106fbcd55.wasm",
            "/pkg/split_a/b.0108cc7106fbcd55.wasm",
            "/pkg/split_cards.0108cc7106fbcd55.wasm.gz",
            "/other/split_cards.0108cc7106fbcd55.wasm",
            "/",
        ] {
            assert!(!is_named_by_build(path), "{path}");
        }
    }
}
