//! The app shell: shared state, the page frame and the problem banner.

use std::time::Duration;

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::Conversation;
use protocol::chat::ServerInfo;
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::auth::{self, Session, SignIn};
use crate::chat::{ChatView, NewChat};
use crate::conversations::ConversationList;
use crate::util;

/// What the server said about itself.
#[derive(Clone, Debug)]
pub enum InfoState {
    Loading,
    Ready(ServerInfo),
    /// The server answered but has no `/api/info`.
    Unknown,
    Failed,
}

impl PartialEq for InfoState {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (InfoState::Ready(a), InfoState::Ready(b)) => {
                (&a.version, a.dev_auth, &a.model_provider, &a.model)
                    == (&b.version, b.dev_auth, &b.model_provider, &b.model)
            }
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        }
    }
}

/// A problem with the connection as a whole, shown above everything.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    pub message: String,
}

const EXPIRED: &str = "Your session has expired or was refused by the server. You are signed out; sign in again to continue.";

/// State every component can reach through the context.
#[derive(Clone, Copy)]
pub struct AppState {
    pub session: RwSignal<Option<Session>>,
    pub info: RwSignal<InfoState>,
    pub notice: RwSignal<Option<Notice>>,
    /// Why the user was signed out (a token that ran out), for the sign-in page.
    pub signed_out_reason: RwSignal<Option<String>>,
    /// Bumped by "Retry": everything that loads from the server loads again.
    pub reload: RwSignal<u32>,
    pub online: RwSignal<bool>,
    /// The browser's clock, ticking every few seconds, for expiry.
    pub now_ms: RwSignal<f64>,
    pub conversations: RwSignal<Vec<Conversation>>,
    pub current: RwSignal<Option<Uuid>>,
}

impl AppState {
    fn new() -> Self {
        let online = web_sys::window()
            .map(|w| w.navigator().on_line())
            .unwrap_or(true);
        let (session, reason) = match auth::load_session() {
            auth::Stored::Session(session) => (Some(session), None),
            auth::Stored::Expired => (None, Some(EXPIRED.to_owned())),
            auth::Stored::Nothing => (None, None),
        };
        AppState {
            session: RwSignal::new(session),
            info: RwSignal::new(InfoState::Loading),
            notice: RwSignal::new(None),
            signed_out_reason: RwSignal::new(reason),
            reload: RwSignal::new(0),
            online: RwSignal::new(online),
            now_ms: RwSignal::new(util::now_ms()),
            conversations: RwSignal::new(Vec::new()),
            current: RwSignal::new(util::conversation_from_hash()),
        }
    }

    /// The bearer token, without subscribing to changes.
    pub fn token(&self) -> Option<String> {
        self.session
            .with_untracked(|s| s.as_ref().map(|s| s.token.clone()))
    }

    pub fn sign_in(&self, session: Session) {
        auth::save_session(&session);
        self.signed_out_reason.set(None);
        self.notice.set(None);
        self.conversations.set(Vec::new());
        self.session.set(Some(session));
    }

    pub fn sign_out(&self) {
        auth::clear_session();
        self.conversations.set(Vec::new());
        self.current.set(None);
        self.session.set(None);
    }

    /// The server refused the token: back to the sign-in page, saying why.
    pub fn session_expired(&self) {
        if self.session.with_untracked(Option::is_none) {
            return;
        }
        self.signed_out_reason.set(Some(EXPIRED.to_owned()));
        auth::clear_session();
        self.conversations.set(Vec::new());
        self.session.set(None);
    }

    /// Handles the failures every caller treats alike: a refused token signs out, no
    /// answer at all raises the banner. Returns whether it handled `err`.
    pub fn report(&self, err: &ApiError) -> bool {
        match err {
            ApiError::Status { status: 401, .. } => {
                self.session_expired();
                true
            }
            ApiError::Network
            | ApiError::Status {
                status: 502..=504, ..
            } => {
                self.notice.set(Some(Notice {
                    message: err.message(),
                }));
                true
            }
            _ => false,
        }
    }

    /// A call worked: whatever the banner said about the connection is over.
    pub fn reached(&self) {
        if self.notice.with_untracked(Option::is_some) {
            self.notice.set(None);
        }
    }

    pub fn retry(&self) {
        self.notice.set(None);
        self.reload.update(|n| *n += 1);
    }

    pub fn select(&self, id: Option<Uuid>) {
        if self.current.get_untracked() != id {
            self.current.set(id);
        }
        util::set_hash_conversation(id);
    }
}

fn load_info(app: AppState) {
    spawn_local(async move {
        match api::server_info().await {
            Ok(info) => {
                app.info.set(InfoState::Ready(info));
                app.reached();
            }
            Err(ApiError::Status { status: 404, .. }) => app.info.set(InfoState::Unknown),
            Err(err) => {
                if !app.report(&err) {
                    app.notice.set(Some(Notice {
                        message: err.message(),
                    }));
                }
                if app.info.get_untracked() == InfoState::Loading {
                    app.info.set(InfoState::Failed);
                }
            }
        }
    });
}

#[component]
pub fn App() -> impl IntoView {
    let app = AppState::new();
    provide_context(app);

    Effect::new(move |_| {
        app.reload.track();
        load_info(app);
    });
    let _ = window_event_listener(leptos::ev::online, move |_| {
        app.online.set(true);
        app.retry();
    });
    let _ = window_event_listener(leptos::ev::offline, move |_| app.online.set(false));
    let _ = window_event_listener(leptos::ev::hashchange, move |_| {
        let id = util::conversation_from_hash();
        if app.current.get_untracked() != id {
            app.current.set(id);
        }
    });
    set_interval(
        move || {
            app.now_ms.set(util::now_ms());
            // A token that runs out while the page is open signs the user out.
            if app
                .session
                .with_untracked(|s| s.as_ref().is_some_and(Session::expired))
            {
                app.session_expired();
            }
        },
        Duration::from_secs(5),
    );

    view! {
        <div class="app" data-mounted="true" data-testid="app">
            <Banner/>
            {move || {
                if app.session.with(Option::is_some) {
                    view! { <Workspace/> }.into_any()
                } else {
                    view! {
                        <main class="signed-out" id="main">
                            <SignIn/>
                        </main>
                    }
                        .into_any()
                }
            }}
        </div>
    }
}

/// Offline, server unreachable: plain words and a way to try again.
#[component]
fn Banner() -> impl IntoView {
    let app = expect_context::<AppState>();
    view! {
        <div class="banner-area" aria-live="assertive">
            <Show when=move || !app.online.get()>
                <div class="banner banner-offline" role="alert" data-testid="offline-banner">
                    <span>"You are offline. The chat reconnects by itself when the network is back."</span>
                </div>
            </Show>
            {move || {
                app.notice
                    .get()
                    .map(|notice| {
                        view! {
                            <div class="banner banner-error" role="alert" data-testid="error-banner">
                                <span>{notice.message}</span>
                                <button type="button" data-testid="retry" on:click=move |_| app.retry()>
                                    "Retry"
                                </button>
                            </div>
                        }
                    })
            }}
        </div>
    }
}

#[component]
fn Workspace() -> impl IntoView {
    let app = expect_context::<AppState>();
    let user = move || {
        app.session
            .with(|s| s.as_ref().map(|s| s.user_id.clone()))
            .unwrap_or_default()
    };
    view! {
        <header class="topbar">
            <span class="brand">"toolgate"</span>
            <ModelBadge/>
            <span class="user" data-testid="signed-in-user" title="Signed in as">
                {user}
            </span>
            <button type="button" class="link-button" data-testid="sign-out" on:click=move |_| app.sign_out()>
                "Sign out"
            </button>
        </header>
        <div class="workspace">
            <ConversationList/>
            <main class="chat-area" id="main">
                {move || match app.current.get() {
                    Some(id) => view! { <ChatView id=id/> }.into_any(),
                    None => view! { <NewChat/> }.into_any(),
                }}
            </main>
        </div>
    }
}

/// Which model answers; the built-in offline model says so.
#[component]
fn ModelBadge() -> impl IntoView {
    let app = expect_context::<AppState>();
    move || match app.info.get() {
        InfoState::Ready(info) => {
            let offline = info.model_provider == "offline";
            let text = if offline {
                format!("{} · offline model, no network", info.model)
            } else {
                format!("{} · {}", info.model, info.model_provider)
            };
            view! {
                <span class="model-badge" class:offline=offline data-testid="model-badge" title="The model that answers">
                    {text}
                </span>
            }
            .into_any()
        }
        _ => ().into_any(),
    }
}
