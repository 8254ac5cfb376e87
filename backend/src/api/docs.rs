//! The OpenAPI document and its offline docs page.

use axum::routing::get;
use axum::{Json, Router};
use serde_json::{Map, Value, json};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::{Config, SwaggerUi};

use super::security_headers::set_docs_policy;
use super::{conversations, dev, events, health, info, messages, tool_user_input, tools};
use crate::state::AppState;

/// Swagger UI at `/api/docs` (vendored, so it works offline) and the document at
/// `/api/openapi.json`, under the docs page's own Content-Security-Policy.
pub fn router() -> Router<AppState> {
    let document = Json(document());
    Router::new()
        .route(
            "/api/openapi.json",
            get(move || std::future::ready(document.clone())),
        )
        .merge(SwaggerUi::new("/api/docs").config(Config::from("/api/openapi.json")))
        .layer(axum::middleware::map_response(set_docs_policy))
}

/// The OpenAPI document as served: utoipa's, with what its types cannot say (JSON
/// Schema keywords such as `contains`, shared error answers, the action union).
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or_default();
    add_shared_responses(&mut doc);
    // The server's own limit, which a deployment may change.
    doc["components"]["schemas"]["CreateRequestParams"]["properties"]["fields"]["maxItems"] =
        json!(protocol::fields::limits().fields);
    make_action_union(&mut doc);
    doc["components"]["schemas"]["PostContent"] = protocol::chat::post_content_schema();
    doc["components"]["schemas"]["FieldSpec"]["allOf"] = field_spec_conditions();
    // A new conversation is where a tool can run: a client (and the stateful contract
    // test) can follow this to the built-in calculator.
    doc["paths"]["/api/conversations"]["post"]["responses"]["201"]["links"] = json!({
        "RunCalculator": {
            "operationId": "execute_tool",
            "description": "Runs the built-in calculator in the new conversation.",
            "requestBody": {
                "conversation_id": "$response.body#/id",
                "tool_name": "calculator",
                "arguments": {"expression": "(1200 - 300) * 1.2"},
            },
        },
    });
    // The body is optional: none (or a blank one) means a conversation with the default
    // title. utoipa marks every `request_body` required.
    doc["paths"]["/api/conversations"]["post"]["requestBody"]["required"] = json!(false);
    // Each server-sent event as the stream carries it: `data` is a StreamEvent as JSON.
    doc["paths"]["/api/conversations/{id}/events"]["get"]["responses"]["200"]["content"]["text/event-stream"]
        ["schema"] = json!({
        "type": "object",
        "properties": {
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "event": {"type": "string", "enum": protocol::chat::EventKind::NAMES},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": {"$ref": "#/components/schemas/StreamEvent"},
            },
        },
        "required": ["id", "event", "data"],
    });
    doc
}

/// What a field definition's `type` implies for its other properties, which utoipa's
/// derive cannot say: options exactly for select and multiselect, and a secret is never
/// filled from the model's arguments.
fn field_spec_conditions() -> Value {
    json!([
        {
            "if": {"properties": {"type": {"enum": ["select", "multiselect"]}}, "required": ["type"]},
            "then": {"properties": {"options": {"minItems": 1}}, "required": ["options"]},
            "else": {"properties": {"options": {"maxItems": 0}}},
        },
        {
            "if": {"properties": {"type": {"const": "secret"}}, "required": ["type"]},
            "then": {"properties": {"model_may_fill": {"const": false}}},
        },
    ])
}

#[derive(OpenApi)]
#[openapi(
    info(title = "toolgate", description = "Agent chat with tools that ask the user for what only they know.\n\nA NUL character (U+0000) is refused (422) anywhere in a body, free-form JSON such as a tool's arguments included: Postgres cannot store it. Values submitted for a request are checked against that request's own field definitions (422, per field). An identifier (`tool_call_id`, `tool_name`, a remembered value's `key`) may hold no control, invisible or direction-changing character (400): the patterns list those below U+10000; the ones above (tags, variation selectors and the rest of U+E0000–U+E0FFF, musical and shorthand format characters) are refused too."),
    paths(
        health::healthz,
        health::readyz,
        info::server_info,
        dev::create_dev_token,
        conversations::create_conversation,
        conversations::list_conversations,
        messages::get_conversation,
        conversations::delete_conversation,
        messages::post_message,
        messages::list_messages,
        messages::pin_message,
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
        components.add_security_scheme(
            "stream_token",
            SecurityScheme::ApiKey(ApiKey::Query(ApiKeyValue::with_description(
                "token",
                "A stream token from `POST /api/conversations/{id}/stream-token`, for clients \
                 that cannot send headers",
            ))),
        );
    }
}

/// Operations that never touch the database, so never answer 503.
const WITHOUT_DATABASE: [(&str, &str); 4] = [
    ("get", "/healthz"),
    ("get", "/api/info"),
    ("get", "/api/tools"),
    ("post", "/api/dev/token"),
];

/// The error answers every route shares, by what the route has: a body (400, 408, 413, 415),
/// path parameters (400), a bearer token (401), the per-user rate limit of `/api` (429,
/// with `Retry-After`) and the database (503). Each is added unless the route already
/// describes it in its own words.
fn add_shared_responses(doc: &mut Value) {
    {
        {
            let error =
                json!({"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}});
            let shared = json!({
                "BadRequest": {"description": "The body is not JSON or has the wrong shape, or a path or query parameter is malformed; `fields` names what", "content": error},
                "Unauthorized": {"description": "The bearer token is missing, malformed, expired or not signed by this server", "content": error},
                "RequestTimeout": {"description": "The body did not arrive within TOOLGATE_HEADER_READ_TIMEOUT of the server starting to read it", "content": error},
                "PayloadTooLarge": {"description": "The body is larger than the server accepts (TOOLGATE_MAX_BODY_BYTES)", "content": error},
                "UnsupportedMediaType": {"description": "A body not labelled `application/json`", "content": error},
                "TooManyRequests": {
                    "description": "Over the caller's allowance: requests per minute (every request with a valid bearer or stream token counts), open event streams, or (posting a message) runs in progress or waiting at once",
                    "headers": {"Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer", "minimum": 1}}},
                    "content": error,
                },
                "Unavailable": {"description": "The database is unavailable; try again shortly", "content": error},
            });
            doc["components"]["responses"] = shared;
            let Some(paths) = doc["paths"].as_object_mut() else {
                return;
            };
            for (path, item) in paths.iter_mut() {
                let Some(item) = item.as_object_mut() else {
                    continue;
                };
                for (method, operation) in item.iter_mut() {
                    let has_body = operation.get("requestBody").is_some();
                    let has_path_params = operation["parameters"]
                        .as_array()
                        .is_some_and(|ps| ps.iter().any(|p| p["in"] == "path"));
                    let authenticated = operation.get("security").is_some();
                    let mut add = Vec::new();
                    if has_body || has_path_params {
                        add.push(("400", "BadRequest"));
                    }
                    if authenticated {
                        add.push(("401", "Unauthorized"));
                    }
                    if has_body {
                        add.push(("408", "RequestTimeout"));
                        add.push(("413", "PayloadTooLarge"));
                        add.push(("415", "UnsupportedMediaType"));
                    }
                    if path.starts_with("/api/") {
                        add.push(("429", "TooManyRequests"));
                    }
                    if !WITHOUT_DATABASE.contains(&(method.as_str(), path.as_str())) {
                        add.push(("503", "Unavailable"));
                    }
                    let Some(responses) = operation["responses"].as_object_mut() else {
                        continue;
                    };
                    for (status, name) in add {
                        responses.entry(status).or_insert_with(
                            || json!({"$ref": format!("#/components/responses/{name}")}),
                        );
                    }
                }
            }
        }
    }
}

/// `POST /api/tool-user-input` as a union discriminated by `action`: each action's
/// parameters with `action` among its own properties, so a closed parameter object
/// (`additionalProperties: false`) still admits its own requests.
fn make_action_union(doc: &mut Value) {
    let schemas = &mut doc["components"]["schemas"];
    let Some(variants) = schemas["ToolUserInputAction"]["oneOf"].as_array().cloned() else {
        return;
    };
    let mut one_of = Vec::new();
    let mut mapping = Map::new();
    for variant in variants {
        let parts = variant["allOf"].as_array().cloned().unwrap_or_default();
        let params = parts.iter().find_map(|p| p["$ref"].as_str());
        let action = parts
            .iter()
            .find_map(|p| p["properties"]["action"]["enum"][0].as_str());
        let (Some(params), Some(action)) = (params, action) else {
            continue;
        };
        let params_name = params.rsplit('/').next().unwrap_or_default();
        let mut schema = schemas[params_name].clone();
        let name = format!("{}Action", pascal_case(action));
        schema["properties"]["action"] = json!({"type": "string", "enum": [action]});
        let mut required = vec![json!("action")];
        required.extend(schema["required"].as_array().cloned().unwrap_or_default());
        schema["required"] = Value::Array(required);
        if let Some(example) = action_example(action) {
            schema["example"] = example;
        }
        schemas[&name] = schema;
        let reference = format!("#/components/schemas/{name}");
        mapping.insert(action.to_owned(), json!(reference));
        one_of.push(json!({"$ref": reference}));
    }
    schemas["ToolUserInputAction"] = json!({
        "description": "An `action` and its parameters, side by side.",
        "oneOf": one_of,
        "discriminator": {"propertyName": "action", "mapping": mapping},
    });
}

/// The seed's flow: the P&L tool asks for the QuickBooks company id.
fn action_example(action: &str) -> Option<Value> {
    let conversation_id = "0f8fad5b-d9cb-469f-a165-70867728950e";
    Some(match action {
        "create_request" => json!({
            "action": "create_request",
            "conversation_id": conversation_id,
            "tool_name": "quickbooks_profit_and_loss",
            "tool_call_id": "call_pnl_1",
            "reason": "QuickBooks API requests require your Company ID (Realm ID)",
            "fields": [{
                "name": "quickbooks_realm_id",
                "label": "QuickBooks Company ID",
                "description": "Find this in your QuickBooks URL",
                "type": "text",
                "required": true,
                "placeholder": "9130346988354456",
                "validation": "^[0-9]{10,20}$",
                "memory_key": "quickbooks_realm_id"
            }],
            "save_for_session": true
        }),
        "submit_response" => json!({
            "action": "submit_response",
            "tool_call_id": "call_pnl_1",
            "user_inputs": {"quickbooks_realm_id": "9130346988354456"}
        }),
        "get_pending" => json!({"action": "get_pending", "conversation_id": conversation_id}),
        _ => return None,
    })
}

fn pascal_case(snake: &str) -> String {
    snake
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars
                .next()
                .map(|first| first.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect()
}
