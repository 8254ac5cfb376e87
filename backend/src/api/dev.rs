use axum::Json;
use axum::extract::{FromRequestParts, State};
use axum::http::header::HOST;
use axum::http::request::Parts;
use protocol::api::{DevTokenRequest, DevTokenResponse};

use super::json::ApiJson;
use crate::auth::issue_dev_token;
use crate::error::{Error, Result};
use crate::state::AppState;

/// Signs a token for any user id. Only mounted when `TOOLGATE_DEV_AUTH=1`, and only
/// answers requests addressed to a loopback name.
#[utoipa::path(post, path = "/api/dev/token", tag = "auth", request_body = DevTokenRequest, responses(
    (status = 200, body = DevTokenResponse),
    (status = 400, description = "Malformed body (not JSON, a key given twice, a wrong type)", body = protocol::api::ErrorBody),
    (status = 403, description = "The request was not addressed to localhost, 127.0.0.1 or [::1], or came through a proxy", body = protocol::api::ErrorBody),
    (status = 415, description = "The body is not labelled application/json", body = protocol::api::ErrorBody),
    (status = 422, description = "Invalid user id", body = protocol::api::ErrorBody),
    (status = 404, description = "Dev auth is off", body = protocol::api::ErrorBody)))]
pub async fn create_dev_token(
    _: LoopbackHost,
    State(state): State<AppState>,
    ApiJson(body): ApiJson<DevTokenRequest>,
) -> Result<Json<DevTokenResponse>> {
    let (token, expires_at) = issue_dev_token(&state, &body.user_id)?;
    Ok(Json(DevTokenResponse {
        token,
        user_id: body.user_id.trim().to_owned(),
        expires_at,
    }))
}

/// Admits only requests whose `Host` is a loopback name. A page on another site can
/// point its own DNS name at 127.0.0.1 and call this server from a visitor's browser;
/// the browser still sends that site's name as `Host`, so such calls get 403.
pub struct LoopbackHost;

impl<S: Send + Sync> FromRequestParts<S> for LoopbackHost {
    type Rejection = Error;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Error> {
        // A proxy on this machine reaches the server at 127.0.0.1 and often says so in
        // `Host`: the request comes from wherever the proxy's clients are.
        if let Some(header) = PROXY_HEADERS
            .iter()
            .find(|name| parts.headers.contains_key(**name))
        {
            return Err(Error::Forbidden(format!(
                "dev sign-in does not answer requests that came through a proxy (`{header}`)"
            )));
        }
        let host = parts.headers.get(HOST).map(|value| value.to_str().ok());
        // HTTP/2 carries the host in the request target instead of a header.
        let authority = parts.uri.authority().map(|a| Some(a.as_str()));
        let named: Vec<Option<&str>> = host.into_iter().chain(authority).collect();
        let loopback =
            !named.is_empty() && named.iter().all(|name| name.is_some_and(is_loopback_host));
        if loopback {
            Ok(LoopbackHost)
        } else {
            Err(Error::Forbidden(
                "dev sign-in only answers requests addressed to localhost, 127.0.0.1 or [::1]"
                    .to_owned(),
            ))
        }
    }
}

/// What proxies add to the requests they pass on (nginx adds none by default, so a
/// proxy in front of dev sign-in is still refused at start-up only by the bind check).
const PROXY_HEADERS: [&str; 6] = [
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
    "via",
];

/// `localhost`, `127.0.0.1` or `[::1]`, each with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((inside, after)) => match after {
                "" => (inside, ""),
                after => match after.strip_prefix(':') {
                    Some(port) => (inside, port),
                    None => return false,
                },
            },
            None => return false,
        },
        None => host.rsplit_once(':').unwrap_or((host, "")),
    };
    port.bytes().all(|b| b.is_ascii_digit())
        && (name.eq_ignore_ascii_case("localhost") || name == "127.0.0.1" || name == "::1")
}

#[cfg(test)]
mod tests {
    use super::is_loopback_host;

    #[test]
    fn loopback_names_pass_with_any_port() {
        for host in [
            "localhost",
            "LocalHost:3000",
            "127.0.0.1",
            "127.0.0.1:8080",
            "[::1]",
            "[::1]:3000",
        ] {
            assert!(is_loopback_host(host), "{host}");
        }
    }

    #[test]
    fn every_other_name_is_refused() {
        for host in [
            "evil.example",
            "evil.example:3000",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "localhost:3000@evil.example",
            "localhost:80x",
            "0.0.0.0:3000",
            "10.0.0.5:3000",
            "::1",
            "[::1]x",
            "[::1",
            "[::ffff:127.0.0.1]:3000",
            "",
        ] {
            assert!(!is_loopback_host(host), "{host}");
        }
    }
}
