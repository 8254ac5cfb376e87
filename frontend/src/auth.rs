//! Signing in: the dev sign-in form, pasting a token, and keeping the session in
//! `localStorage` so a reload stays signed in.

use leptos::prelude::*;
use leptos::task::spawn_local;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::api::{self, ApiError};
use crate::state::{AppState, InfoState};
use crate::{clock, focus};

const STORAGE_KEY: &str = "toolgate.session";

/// Set when the user signs out on purpose (until the next sign-in), so other tabs can
/// tell that from a session that ran out or was refused.
const SIGNED_OUT_KEY: &str = "toolgate.signed_out";

/// Who is signed in, and with which bearer token.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub token: String,
    pub user_id: String,
    /// When the token stops working, if known.
    #[serde(default)]
    pub expires_at_ms: Option<f64>,
}

impl Session {
    pub fn expired(&self) -> bool {
        self.expires_at_ms.is_some_and(|at| at <= clock::now_ms())
    }
}

fn storage() -> Option<web_sys::Storage> {
    web_sys::window()?.local_storage().ok().flatten()
}

/// What an earlier visit left in this browser.
pub enum Stored {
    Nothing,
    Session(Session),
    /// A session whose token has run out since; it is forgotten.
    Expired,
}

pub fn load_session() -> Stored {
    let Some(text) = stored_text() else {
        return Stored::Nothing;
    };
    match crate::wire::decode::<Session>(&text) {
        Ok(session) if !session.expired() => Stored::Session(session),
        Ok(_) => {
            clear_session();
            Stored::Expired
        }
        Err(_) => {
            clear_session();
            Stored::Nothing
        }
    }
}

fn stored_text() -> Option<String> {
    storage().and_then(|s| s.get_item(STORAGE_KEY).ok().flatten())
}

/// The session this browser keeps now, as another tab may have left it: read, never
/// changed, and `None` when there is none, it cannot be read or it has run out.
pub fn kept_session() -> Option<Session> {
    stored_text()
        .and_then(|text| crate::wire::decode::<Session>(&text).ok())
        .filter(|session| !session.expired())
}

pub fn save_session(session: &Session) {
    if let (Some(storage), Ok(text)) = (storage(), serde_json::to_string(session)) {
        let _ = storage.remove_item(SIGNED_OUT_KEY);
        let _ = storage.set_item(STORAGE_KEY, &text);
    }
}

/// Marks this browser's sign-out as on purpose (before the session goes).
pub fn mark_signed_out() {
    if let Some(storage) = storage() {
        // Whole milliseconds: a float's own formatting would add its code to the module.
        let _ = storage.set_item(SIGNED_OUT_KEY, &(clock::now_ms() as u64).to_string());
    }
}

/// Whether the user last signed out on purpose.
pub fn signed_out_on_purpose() -> bool {
    storage().is_some_and(|s| s.get_item(SIGNED_OUT_KEY).ok().flatten().is_some())
}

pub fn clear_session() {
    if let Some(storage) = storage() {
        let _ = storage.remove_item(STORAGE_KEY);
    }
}

/// Reads the user id (`sub`) and expiry (`exp`) from a JWT's payload. The signature is
/// the server's business; this only lets the page show who is signed in.
pub fn session_from_jwt(token: &str) -> Result<Session, String> {
    let token = token.trim();
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("A token has three parts separated by dots (header.payload.signature).".into());
    };
    let mut base64 = payload.replace('-', "+").replace('_', "/");
    while base64.len() % 4 != 0 {
        base64.push('=');
    }
    let json = web_sys::window()
        .and_then(|w| w.atob(&base64).ok())
        .ok_or("The token's payload is not base64url.")?;
    let claims: Value =
        serde_json::from_str(&json).map_err(|_| "The token's payload is not JSON.")?;
    let user_id = claims
        .get("sub")
        .and_then(Value::as_str)
        .filter(|sub| !sub.is_empty())
        .ok_or("The token has no user id (`sub` claim).")?
        .to_owned();
    let expires_at_ms = claims
        .get("exp")
        .and_then(Value::as_f64)
        .map(|s| s * 1000.0);
    Ok(Session {
        token: token.to_owned(),
        user_id,
        expires_at_ms,
    })
}

/// The signed-out page: dev sign-in when the server offers it, and a token field.
#[component]
pub fn SignIn() -> impl IntoView {
    let app = expect_context::<AppState>();
    let dev_auth = move || match app.info.get() {
        InfoState::Ready(info) => Some(info.dev_auth),
        _ => None,
    };
    view! {
        <section class="sign-in" data-testid="sign-in" aria-labelledby="sign-in-title">
            <h1 id="sign-in-title">"Sign in to toolgate"</h1>
            {move || {
                app.signed_out_reason
                    .get()
                    .map(|reason| {
                        view! {
                            <p class="notice notice-warn" role="alert" data-testid="signed-out-reason">
                                {reason}
                            </p>
                        }
                    })
            }}
            {move || match dev_auth() {
                Some(false) => view! { <TokenExplanation/> }.into_any(),
                _ => view! { <DevSignIn/> }.into_any(),
            }}
            <TokenSignIn open=Signal::derive(move || dev_auth() == Some(false))/>
        </section>
    }
}

#[component]
fn TokenExplanation() -> impl IntoView {
    view! {
        <div class="explain" data-testid="token-explanation">
            <p>
                "This server does not hand out tokens itself. Sign in with a token from your \
                 identity provider or administrator: a JWT whose "<code>"sub"</code>
                " is your user id, signed with the server's key."
            </p>
            <p>"Paste it below. It is kept in this browser until you sign out or it expires."</p>
        </div>
    }
}

#[component]
fn DevSignIn() -> impl IntoView {
    let app = expect_context::<AppState>();
    let name = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let user_id = name.get_untracked().trim().to_owned();
        if user_id.is_empty() {
            error.set(Some("Enter a user name.".into()));
            focus::move_to("user-name");
            return;
        }
        busy.set(true);
        error.set(None);
        spawn_local(async move {
            match api::dev_token(&user_id).await {
                Ok(issued) => app.sign_in(Session {
                    token: issued.token,
                    user_id: issued.user_id,
                    expires_at_ms: Some(clock::millis(&issued.expires_at)),
                }),
                Err(err) => {
                    let field = err.fields().remove("user_id");
                    error.set(Some(field.unwrap_or_else(|| sign_in_problem(&err))));
                    focus::move_to("user-name");
                }
            }
            busy.set(false);
        });
    };
    view! {
        <form class="stack" on:submit=submit data-testid="dev-sign-in" novalidate>
            <p class="hint">"Development sign-in is on: any user name works, no password."</p>
            <label for="user-name">"User name"</label>
            <input
                id="user-name"
                data-testid="user-name"
                type="text"
                autocomplete="username"
                autofocus
                aria-invalid=move || error.get().is_some().to_string()
                aria-describedby="user-name-error"
                on:input=move |ev| {
                    name.set(event_target_value(&ev));
                    error.set(None);
                }
            />
            <p id="user-name-error" class="field-error" aria-live="polite" data-testid="sign-in-error">
                {move || error.get()}
            </p>
            <button type="submit" class="primary" data-testid="sign-in-button" disabled=move || busy.get()>
                {move || if busy.get() { "Signing in…" } else { "Sign in" }}
            </button>
        </form>
    }
}

fn sign_in_problem(err: &ApiError) -> String {
    match err {
        ApiError::Status { status: 404, .. } => {
            "This server has development sign-in turned off. Use a token instead.".into()
        }
        other => other.message(),
    }
}

#[component]
fn TokenSignIn(#[prop(into)] open: Signal<bool>) -> impl IntoView {
    let app = expect_context::<AppState>();
    let token = RwSignal::new(String::new());
    let error = RwSignal::new(None::<String>);
    let busy = RwSignal::new(false);
    let submit = move |ev: leptos::ev::SubmitEvent| {
        ev.prevent_default();
        let session = match session_from_jwt(&token.get_untracked()) {
            Ok(session) if session.expired() => {
                error.set(Some("This token has already expired.".into()));
                return;
            }
            Ok(session) => session,
            Err(problem) => {
                error.set(Some(problem));
                return;
            }
        };
        busy.set(true);
        error.set(None);
        spawn_local(async move {
            // Ask the server before keeping it: only it can check the signature.
            match api::list_conversations(&session.token).await {
                Ok(_) => app.sign_in(session),
                Err(err) if err.is_unauthorized() => error.set(Some(format!(
                    "The server refused this token: {}",
                    err.message()
                ))),
                Err(err) => error.set(Some(err.message())),
            }
            busy.set(false);
        });
    };
    view! {
        <details class="token-sign-in" prop:open=move || open.get() data-testid="token-sign-in">
            <summary>"Sign in with a token"</summary>
            <form class="stack" on:submit=submit novalidate>
                <label for="token-input">"Token (JWT)"</label>
                <textarea
                    id="token-input"
                    data-testid="token-input"
                    rows="3"
                    spellcheck="false"
                    autocomplete="off"
                    aria-describedby="token-error"
                    on:input=move |ev| {
                        token.set(event_target_value(&ev));
                        error.set(None);
                    }
                ></textarea>
                <p id="token-error" class="field-error" aria-live="polite">
                    {move || error.get()}
                </p>
                <button type="submit" disabled=move || busy.get()>
                    "Use this token"
                </button>
            </form>
        </details>
    }
}
