//! The OpenAPI document and its offline docs page.

use axum::Router;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::SwaggerUi;

use super::security_headers::set_docs_policy;
use super::{conversations, dev, events, health, info, messages, tool_user_input, tools};
use crate::state::AppState;

/// Swagger UI at `/api/docs` (vendored, so it works offline) and the document at
/// `/api/openapi.json`, under the docs page's own Content-Security-Policy.
pub fn router() -> Router<AppState> {
    Router::from(SwaggerUi::new("/api/docs").url("/api/openapi.json", ApiDoc::openapi()))
        .layer(axum::middleware::map_response(set_docs_policy))
}

#[derive(OpenApi)]
#[openapi(
    info(title = "toolgate", description = "Agent chat with tools that ask the user for what only they know."),
    paths(
        health::healthz,
        health::readyz,
        info::server_info,
        dev::create_dev_token,
        conversations::create_conversation,
        conversations::list_conversations,
        messages::get_conversation,
        messages::post_message,
        messages::list_messages,
        events::create_stream_token,
        events::stream_events,
        tool_user_input::dispatch_action,
        tools::list_tools,
        tools::execute_tool,
    ),
    components(schemas(
        protocol::api::ErrorBody,
        protocol::api::SubmitResponseResult,
        protocol::api::PendingRequests,
        protocol::api::SessionValues,
        protocol::api::ClearedValues,
    )),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}
