//! HTTP routes, one file per resource.

mod conversations;
mod dev;
mod docs;
mod events;
pub mod health;
mod ids;
mod info;
pub mod json;
pub mod limits;
mod messages;
mod paging;
mod path;
mod query;
mod security_headers;
mod tool_user_input;
mod tools;
mod web_files;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::extract::OriginalUri;
use axum::http::Method;
use axum::routing::{get, post, put};
use tower_http::trace::TraceLayer;

pub use docs::ApiDoc;

use crate::error::Error;
use crate::state::AppState;

/// The whole application: API under `/api`, probes, and the web chat at `/`.
pub fn app(state: AppState) -> Router {
    let mut api = Router::new()
        .route(
            "/conversations",
            post(conversations::create_conversation).get(conversations::list_conversations),
        )
        .route(
            "/conversations/{id}",
            get(messages::get_conversation).delete(conversations::delete_conversation),
        )
        .route(
            "/conversations/{id}/messages",
            post(messages::post_message).get(messages::list_messages),
        )
        .route(
            "/conversations/{id}/messages/{message_id}/pin",
            put(messages::pin_message),
        )
        .route(
            "/conversations/{id}/stream-token",
            post(events::create_stream_token),
        )
        .route("/conversations/{id}/events", get(events::stream_events))
        .route("/info", get(info::server_info))
        .route("/tool-user-input", post(tool_user_input::dispatch_action))
        .route("/tools", get(tools::list_tools))
        .route("/tools/execute", post(tools::execute_tool));
    if state.config.dev_auth {
        api = api.route("/dev/token", post(dev::create_dev_token));
    }
    let api = api
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            limits::per_user_rate,
        ))
        .layer(axum::middleware::map_response(
            security_headers::set_not_stored,
        ));

    let mut app = Router::new()
        .nest("/api", api)
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .merge(docs::router());

    if state.config.demo {
        app = app.merge(crate::demo::router());
    }

    app = match &state.config.web_dir {
        Some(dir) => app.fallback_service(web_files::service(dir)),
        None => app.fallback(not_found),
    };

    app.layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        // Only the path is logged: a stream token travels in the query string.
        .layer(TraceLayer::new_for_http().make_span_with(|request: &axum::http::Request<_>| {
            tracing::info_span!("request", method = %request.method(), path = %request.uri().path())
        }))
        .layer(axum::middleware::map_response(security_headers::set_security_headers))
        .with_state(state)
}

async fn not_found(method: Method, OriginalUri(uri): OriginalUri) -> Error {
    Error::NotFoundRoute(format!("no route for {method} {}", uri.path()))
}

async fn method_not_allowed(method: Method, OriginalUri(uri): OriginalUri) -> Error {
    Error::MethodNotAllowed(format!("{method} is not allowed on {}", uri.path()))
}

/// Runs `work` in a task of its own and waits for it. A handler's future is dropped
/// when its client hangs up; work that has side effects (a tool call and its record)
/// must not stop half way then, with the call made and nothing recorded.
async fn to_the_end<T: Send + 'static>(
    work: impl Future<Output = crate::error::Result<T>> + Send + 'static,
) -> crate::error::Result<T> {
    tokio::spawn(work)
        .await
        .map_err(|err| anyhow::anyhow!("a handler's detached work: {err}"))?
}
