//! The web chat's files, with what browsers may keep of them.
//!
//! The page's JavaScript, its main WebAssembly module and the modules split off from it
//! (the cards, fetched when first needed) only work with files of the same build. The
//! build writes a `build-id` beside them (a hash of all of them); every file is checked
//! again on each load (`no-cache`) against that id (`ETag`), so a browser keeps its
//! copies only while the build is the same, whichever way the build changed (a rollback
//! to an older one too, which a file's modification time would not tell). A split-off
//! module, whose name carries a hash of its build (`split_cards.<hash>.wasm`), is kept
//! for a year. Without a `build-id` the files are checked by their modification time.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{
    CACHE_CONTROL, CONTENT_TYPE, ETAG, IF_MATCH, IF_MODIFIED_SINCE, IF_NONE_MATCH, IF_RANGE,
    IF_UNMODIFIED_SINCE, LAST_MODIFIED, RANGE,
};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tower_http::compression::CompressionLayer;
use tower_http::services::{ServeDir, ServeFile};

const REVALIDATE: &str = "no-cache";
const KEEP: &str = "public, max-age=31536000, immutable";

/// Files from `dir` (precompressed `.gz` beside them where there is one), and
/// `index.html` for every other path.
pub fn service(dir: &Path) -> axum::routing::Router {
    let index = ServeFile::new(dir.join("index.html"));
    let files = ServeDir::new(dir).precompressed_gzip().fallback(index);
    axum::routing::Router::new()
        .fallback_service(files)
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(dir.join("build-id")),
            cache_control,
        ))
}

async fn cache_control(
    State(build_id_file): State<Arc<PathBuf>>,
    mut request: Request,
    next: Next,
) -> Response {
    if is_named_by_build(request.uri().path()) {
        let mut response = next.run(request).await;
        // A module that is not there gets the page instead (the fallback), never to be kept.
        let is_module = response
            .headers()
            .get(CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes() == b"application/wasm");
        let value = if is_module && response.status().is_success() {
            KEEP
        } else {
            REVALIDATE
        };
        response
            .headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static(value));
        return response;
    }

    let tag = build_tag(&build_id_file).await;
    if let Some(tag) = &tag {
        if matches_tag(request.headers(), tag) {
            let mut response = StatusCode::NOT_MODIFIED.into_response();
            set_validators(response.headers_mut(), tag);
            return response;
        }
        // The build decides, not the files' modification times. A range asked for "if
        // still the same" cannot be checked against a weak tag: the whole file comes.
        let headers = request.headers_mut();
        if headers.remove(IF_RANGE).is_some() {
            headers.remove(RANGE);
        }
        for name in [
            IF_MODIFIED_SINCE,
            IF_UNMODIFIED_SINCE,
            IF_NONE_MATCH,
            IF_MATCH,
        ] {
            headers.remove(name);
        }
    }
    let mut response = next.run(request).await;
    match &tag {
        Some(tag) if response.status().is_success() => {
            set_validators(response.headers_mut(), tag);
        }
        _ => {
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static(REVALIDATE));
        }
    }
    response
}

fn set_validators(headers: &mut HeaderMap, tag: &HeaderValue) {
    headers.insert(ETAG, tag.clone());
    headers.remove(LAST_MODIFIED);
    headers.insert(CACHE_CONTROL, HeaderValue::from_static(REVALIDATE));
}

/// `W/"<build id>"`: weak, as the same id stands for a file gzipped or not. `None`
/// when there is no `build-id`, or it is not 16 to 64 hex digits.
async fn build_tag(file: &Path) -> Option<HeaderValue> {
    let text = tokio::fs::read_to_string(file).await.ok()?;
    let id = text.trim();
    let valid = (16..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit());
    valid
        .then(|| HeaderValue::from_str(&format!("W/\"{id}\"")).ok())
        .flatten()
}

/// Whether `If-None-Match` names `tag` (weak comparison) or is `*`.
fn matches_tag(headers: &HeaderMap, tag: &HeaderValue) -> bool {
    let opaque = |value: &str| value.trim().trim_start_matches("W/").to_owned();
    let Ok(ours) = tag.to_str() else {
        return false;
    };
    let ours = opaque(ours);
    headers
        .get_all(IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|candidate| candidate.trim() == "*" || opaque(candidate) == ours)
}

/// `/pkg/<name>.<16 hex digits>.wasm`: a split-off module named by its build.
fn is_named_by_build(path: &str) -> bool {
    let Some(file) = path.strip_prefix("/pkg/") else {
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
    fn only_a_module_with_its_build_in_its_name_is_kept() {
        assert!(is_named_by_build("/pkg/split_cards.0108cc7106fbcd55.wasm"));
        assert!(is_named_by_build("/pkg/chunk_0.0108cc7106fbcd55.wasm"));
        for path in [
            "/pkg/split_cards.wasm",
            "/pkg/frontend_bg.wasm",
            "/pkg/frontend.js",
            "/pkg/__wasm_split.js",
            "/pkg/split_cards.0108cc7106fbcd5.wasm",
            "/pkg/split_cards.0108cc7106fbcd5x.wasm",
            "/pkg/.0108cc7106fbcd55.wasm",
            "/pkg/a/b.0108cc7106fbcd55.wasm",
            "/pkg/split_cards.0108cc7106fbcd55.wasm.gz",
            "/other/split_cards.0108cc7106fbcd55.wasm",
            "/",
        ] {
            assert!(!is_named_by_build(path), "{path}");
        }
    }

    #[test]
    fn if_none_match_is_compared_weakly_and_in_lists() {
        let tag = HeaderValue::from_static("W/\"0123456789abcdef\"");
        let with = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(IF_NONE_MATCH, HeaderValue::from_static(value));
            headers
        };
        assert!(matches_tag(&with("W/\"0123456789abcdef\""), &tag));
        assert!(matches_tag(&with("\"0123456789abcdef\""), &tag));
        assert!(matches_tag(&with("\"x\", W/\"0123456789abcdef\""), &tag));
        assert!(matches_tag(&with("*"), &tag));
        assert!(!matches_tag(&with("W/\"fedcba9876543210\""), &tag));
        assert!(!matches_tag(&HeaderMap::new(), &tag));
    }
}
