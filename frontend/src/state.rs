//! State every component of the web chat can reach through the context: who is signed
//! in, what the server said about itself, the connection banner, the conversation list
//! and the current conversation. Components import it; it imports none of them.

use std::collections::BTreeMap;

use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::api::Conversation;
use protocol::chat::ServerInfo;
use uuid::Uuid;

use crate::api::{self, ApiError};
use crate::auth::{self, Session};
use crate::{address, clock, drafts, ordered, resend};

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

const SIGNED_OUT_ELSEWHERE: &str = "You signed out in another tab, so this tab is signed out too.";

const OTHER_USER_ELSEWHERE: &str =
    "Another user signed in in another tab, so this tab is signed out. Sign in again to continue.";

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
    /// Which MCP server each of the user's tools comes from; loaded once per sign-in,
    /// on the first tool row that asks.
    pub tool_servers: RwSignal<Option<BTreeMap<String, String>>>,
    /// What a screen reader says of something done whose result the page does not show
    /// where the focus goes (a conversation deleted).
    pub announcement: RwSignal<String>,
    /// Conversations deleted while this page is open: a list asked for before a deletion
    /// and answered after it must not bring one back.
    deleted: StoredValue<Vec<Uuid>>,
}

impl AppState {
    pub fn new() -> Self {
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
            now_ms: RwSignal::new(clock::now_ms()),
            conversations: RwSignal::new(Vec::new()),
            current: RwSignal::new(address::conversation()),
            tool_servers: RwSignal::new(None),
            announcement: RwSignal::new(String::new()),
            deleted: StoredValue::new(Vec::new()),
        }
    }

    /// The MCP server `tool` comes from, once known (`None` for toolgate's own tools).
    pub fn tool_server(&self, tool: &str) -> Option<String> {
        self.tool_servers
            .with(|servers| servers.as_ref().and_then(|s| s.get(tool).cloned()))
    }

    /// Loads which server each tool comes from, unless that is known or on its way.
    pub fn want_tool_servers(&self) {
        if self.tool_servers.with_untracked(Option::is_some) {
            return;
        }
        let Some(token) = self.token() else {
            return;
        };
        // Marked as known at once, so a page of tool rows asks only once.
        self.tool_servers.set(Some(BTreeMap::new()));
        let (servers, app) = (self.tool_servers, *self);
        spawn_local(async move {
            let listed = api::tool_servers(&token).await;
            if servers.is_disposed() || app.token().as_deref() != Some(token.as_str()) {
                return;
            }
            match listed {
                Ok(list) => {
                    let map = ordered::map_of(
                        list.tools
                            .into_iter()
                            .filter_map(|tool| tool.server.map(|server| (tool.name, server))),
                    );
                    servers.set(Some(map));
                }
                // Not known after all: the next tool row to show asks again.
                Err(_) => servers.set(None),
            }
        });
    }

    /// The bearer token, without subscribing to changes.
    pub fn token(&self) -> Option<String> {
        self.session
            .with_untracked(|s| s.as_ref().map(|s| s.token.clone()))
    }

    pub fn sign_in(&self, session: Session) {
        auth::save_session(&session);
        drafts::forget_all_but(Some(&session.user_id));
        self.signed_out_reason.set(None);
        self.notice.set(None);
        self.conversations.set(Vec::new());
        self.tool_servers.set(None);
        self.session.set(Some(session));
    }

    pub fn sign_out(&self) {
        auth::mark_signed_out();
        auth::clear_session();
        self.forget_this_users_work();
        self.leave();
    }

    /// The server refused the token: back to the sign-in page, saying why.
    pub fn session_expired(&self) {
        if self.session.with_untracked(Option::is_none) {
            return;
        }
        auth::clear_session();
        self.signed_out_here(EXPIRED);
    }

    /// Another tab changed the session this browser keeps (every tab shares it): a
    /// sign-out there, or another user's sign-in, signs this tab out too, saying why,
    /// so no tab stays signed in on a shared computer (a sign-out on purpose forgets
    /// this tab's drafts too, as it did the other's); a sign-in there signs in a tab
    /// on the sign-in page, and a new token of the same user is taken up.
    pub fn follow_kept_session(&self) {
        let here = self.session.get_untracked();
        match (here, auth::kept_session()) {
            (Some(here), Some(kept)) if here.user_id == kept.user_id => {
                if here != kept {
                    self.session.set(Some(kept));
                }
            }
            (Some(_), Some(_)) => {
                self.forget_this_users_work();
                self.signed_out_here(OTHER_USER_ELSEWHERE);
            }
            (Some(_), None) if auth::signed_out_on_purpose() => {
                self.forget_this_users_work();
                self.signed_out_here(SIGNED_OUT_ELSEWHERE);
            }
            // The other tab found the token run out, or refused, before this one did.
            (Some(_), None) => self.signed_out_here(EXPIRED),
            (None, Some(kept)) => self.sign_in(kept),
            (None, None) => {}
        }
    }

    /// What leaving a user's page for good forgets in this tab besides the session (a
    /// sign-out on purpose, here or in another tab, or another user's sign-in there):
    /// the drafts and which conversation was open.
    fn forget_this_users_work(&self) {
        drafts::forget_all_but(None);
        self.current.set(None);
    }

    /// Back to the sign-in page, saying why, leaving the kept session as it is.
    fn signed_out_here(&self, reason: &str) {
        self.signed_out_reason.set(Some(reason.to_owned()));
        self.leave();
    }

    /// Back to the sign-in page: nothing of the user's stays on the screen.
    fn leave(&self) {
        self.conversations.set(Vec::new());
        self.tool_servers.set(None);
        self.announcement.set(String::new());
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

    /// Forgets the deleted conversation `id` (of `user`, when known): from the list, and
    /// what this tab keeps for it (its message box's draft, and a new-conversation box's
    /// send that made it, which would post into it again).
    pub fn forget_conversation(&self, user: Option<&str>, id: Uuid) {
        if let Some(user) = user {
            drafts::forget(&drafts::key(user, Some(id)));
            resend::conversation_deleted(&drafts::key(user, None), id);
        }
        self.deleted.update_value(|deleted| deleted.push(id));
        self.conversations
            .update(|list| list.retain(|c| c.id != id));
    }

    /// Shows `list` as the user's conversations, but for those deleted meanwhile.
    pub fn show_conversations(&self, mut list: Vec<Conversation>) {
        self.deleted
            .with_value(|deleted| list.retain(|c| !deleted.contains(&c.id)));
        self.conversations.set(list);
    }

    /// Has screen readers say `text`. Emptied first, so the same words said again are
    /// announced again.
    pub fn announce(&self, text: &'static str) {
        self.announcement.set(String::new());
        let announcement = self.announcement;
        request_animation_frame(move || announcement.set(text.to_owned()));
    }

    pub fn select(&self, id: Option<Uuid>) {
        if self.current.get_untracked() != id {
            self.current.set(id);
        }
        address::set_conversation(id);
    }
}

pub fn load_info(app: AppState) {
    spawn_local(async move {
        match api::server_info().await {
            Ok(info) => {
                // Cards check what this server checks.
                protocol::fields::set_limits(info.input_limits);
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
