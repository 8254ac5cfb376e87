use axum::Json;
use axum::extract::State;
use protocol::chat::ServerInfo;

use crate::state::AppState;

/// What a client needs before signing in: whether dev sign-in is on, which model
/// answers, and the limits its cards should check.
#[utoipa::path(get, path = "/api/info", tag = "health", responses((status = 200, body = ServerInfo)))]
pub async fn server_info(State(state): State<AppState>) -> Json<ServerInfo> {
    Json(ServerInfo {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        dev_auth: state.config.dev_auth,
        model_provider: state.agent.provider.kind().to_owned(),
        model: state.agent.default_model(),
        input_limits: protocol::fields::limits(),
    })
}
