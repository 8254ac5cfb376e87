//! The event stream's connection: an `EventSource` per conversation, opened again
//! with `after=<last id>` whenever it drops: at once and quietly when the server ended
//! it because its token expired (it says so first), else with backoff; never again once
//! the server said the conversation was deleted.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::oneshot;
use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::chat::{
    EventKind, STREAM_DELETED_DATA, STREAM_DELETED_EVENT, STREAM_EXPIRED_DATA, STREAM_EXPIRED_EVENT,
};
use send_wrapper::SendWrapper;
use wasm_bindgen::JsCast;
use wasm_bindgen::closure::Closure;
use web_sys::{EventSource, MessageEvent};

use super::store::{ChatStore, Link};
use crate::api::{self, ApiError};
use crate::state::AppState;
use crate::{clock, wire};

/// `EventSource` only delivers named events to listeners registered for their name:
/// every name the server sends (from `protocol`, so none is missed), and the unnamed
/// default.
fn event_names() -> impl Iterator<Item = &'static str> {
    EventKind::NAMES.into_iter().chain(["message"])
}

type EventListener = Closure<dyn FnMut(MessageEvent)>;
type StateListener = Closure<dyn FnMut(web_sys::Event)>;

/// How long a stream must have been open for its expiry to be followed by a quiet
/// reopen at once.
const QUIET_AFTER_MS: f64 = 2_000.0;

struct Connection {
    alive: Cell<bool>,
    /// Failed attempts in a row; a stream that stayed open a while resets it.
    failures: Cell<u32>,
    /// The server said the current stream's token expired: its end is no loss.
    expired: Cell<bool>,
    /// The server said the conversation was deleted: nothing is left to follow.
    deleted: Cell<bool>,
    /// When the current stream opened (ms since the epoch); 0 until it does.
    opened_at: Cell<f64>,
    last_event: Cell<i64>,
    source: RefCell<Option<EventSource>>,
    closed: RefCell<Option<oneshot::Sender<()>>>,
    listeners: RefCell<Vec<EventListener>>,
    on_open: RefCell<Option<StateListener>>,
    on_error: RefCell<Option<StateListener>>,
}

impl Connection {
    fn close_source(&self) {
        if let Some(source) = self.source.borrow_mut().take() {
            source.set_onopen(None);
            source.set_onerror(None);
            source.close();
        }
        if let Some(closed) = self.closed.borrow_mut().take() {
            let _ = closed.send(());
        }
    }
}

/// Keeps `store` fed from the conversation's event stream until the calling component
/// is cleaned up.
pub fn follow(store: ChatStore, app: AppState) {
    let connection = Rc::new(Connection {
        alive: Cell::new(true),
        failures: Cell::new(0),
        expired: Cell::new(false),
        deleted: Cell::new(false),
        opened_at: Cell::new(0.0),
        last_event: Cell::new(0),
        source: RefCell::new(None),
        closed: RefCell::new(None),
        listeners: RefCell::new(Vec::new()),
        on_open: RefCell::new(None),
        on_error: RefCell::new(None),
    });
    let guard = SendWrapper::new(connection.clone());
    on_cleanup(move || {
        guard.alive.set(false);
        guard.close_source();
    });
    spawn_local(run(connection, store, app));
}

async fn run(connection: Rc<Connection>, store: ChatStore, app: AppState) {
    let failed = |connection: &Connection| {
        let failures = connection.failures.get() + 1;
        connection.failures.set(failures);
        backoff(failures)
    };
    // Set while a stream that ended as its token expired is opened again: the indicator
    // keeps saying live unless that fails.
    let mut quietly = false;
    while connection.alive.get() {
        let Some(token) = app.token() else {
            break;
        };
        if !quietly {
            store.link.set(if connection.failures.get() == 0 {
                Link::Connecting
            } else {
                Link::Reconnecting
            });
        }
        quietly = false;
        let stream_token = match api::stream_token(&token, store.id).await {
            Ok(stream_token) => stream_token,
            Err(err) => {
                if !connection.alive.get() {
                    break;
                }
                match err {
                    ApiError::Status { status: 401, .. } => {
                        app.session_expired();
                        break;
                    }
                    ApiError::Status {
                        status: 404 | 405, ..
                    } => {
                        store.link.set(Link::Stopped);
                        break;
                    }
                    _ => {
                        store.link.set(Link::Reconnecting);
                        clock::sleep(failed(&connection)).await;
                        continue;
                    }
                }
            }
        };
        if !connection.alive.get() {
            break;
        }
        let url = api::events_url(store.id, &stream_token.token, connection.last_event.get());
        let Ok(source) = EventSource::new(&url) else {
            store.link.set(Link::Reconnecting);
            clock::sleep(failed(&connection)).await;
            continue;
        };
        let (closed_tx, closed_rx) = oneshot::channel();
        *connection.closed.borrow_mut() = Some(closed_tx);
        connection.expired.set(false);
        connection.opened_at.set(0.0);
        attach(&connection, &source, store, app);
        *connection.source.borrow_mut() = Some(source);
        let _ = closed_rx.await;
        connection.listeners.borrow_mut().clear();
        if !connection.alive.get() {
            break;
        }
        if connection.deleted.get() {
            store.link.set(Link::Deleted);
            break;
        }
        // The server ends each stream when its token expires, saying so first: the next
        // one opens at once. Only after a stream that lived a while, so tokens that live
        // a second or less (a server set so) go through the backoff instead of spinning.
        let lived = clock::now_ms() - connection.opened_at.get();
        if connection.expired.replace(false)
            && connection.opened_at.get() > 0.0
            && lived >= QUIET_AFTER_MS
        {
            quietly = true;
            refresh_pending(store, app);
            continue;
        }
        connection.failures.set(failures_so_far(
            connection.failures.get(),
            lived,
            connection.opened_at.get() > 0.0,
        ));
        store.link.set(Link::Reconnecting);
        clock::sleep(failed(&connection)).await;
        // A fresh stream may have missed requests made outside any run.
        if connection.alive.get() {
            refresh_pending(store, app);
        }
    }
}

/// The failures in a row once a stream has ended after `lived_ms`: one that stayed open a
/// while starts the count again; one that dropped at once (a proxy that cuts streams, a
/// server that ends them as they open) adds to it, so the waits grow instead of
/// repeating every half second.
fn failures_so_far(failures: u32, lived_ms: f64, opened: bool) -> u32 {
    if opened && lived_ms >= QUIET_AFTER_MS {
        0
    } else {
        failures
    }
}

fn backoff(failures: u32) -> u32 {
    (250 * 2u32.saturating_pow(failures.min(6))).min(8_000)
}

fn attach(connection: &Rc<Connection>, source: &EventSource, store: ChatStore, app: AppState) {
    let mut listeners = connection.listeners.borrow_mut();
    for name in event_names() {
        let weak = Rc::downgrade(connection);
        let listener = EventListener::new(move |event: MessageEvent| {
            let Some(connection) = weak.upgrade() else {
                return;
            };
            if !connection.alive.get() {
                return;
            }
            let Some(data) = event.data().as_string() else {
                return;
            };
            let Ok(event) = wire::event(&data) else {
                return;
            };
            if event.id <= connection.last_event.get() {
                return;
            }
            connection.last_event.set(event.id);
            store.apply(event);
        });
        let _ = source.add_event_listener_with_callback(name, listener.as_ref().unchecked_ref());
        listeners.push(listener);
    }
    let weak = Rc::downgrade(connection);
    // Only the server's own word: an `expired` event saying anything else ends the
    // stream as a lost connection would.
    let on_expired = EventListener::new(move |event: MessageEvent| {
        if let Some(connection) = weak.upgrade()
            && event.data().as_string().as_deref() == Some(STREAM_EXPIRED_DATA)
        {
            connection.expired.set(true);
        }
    });
    let _ = source.add_event_listener_with_callback(
        STREAM_EXPIRED_EVENT,
        on_expired.as_ref().unchecked_ref(),
    );
    listeners.push(on_expired);
    let weak = Rc::downgrade(connection);
    let on_deleted = EventListener::new(move |event: MessageEvent| {
        if let Some(connection) = weak.upgrade()
            && event.data().as_string().as_deref() == Some(STREAM_DELETED_DATA)
        {
            connection.deleted.set(true);
            connection.close_source();
        }
    });
    let _ = source.add_event_listener_with_callback(
        STREAM_DELETED_EVENT,
        on_deleted.as_ref().unchecked_ref(),
    );
    listeners.push(on_deleted);
    drop(listeners);

    let weak = Rc::downgrade(connection);
    let on_open = StateListener::new(move |_| {
        if let Some(connection) = weak.upgrade() {
            connection.opened_at.set(clock::now_ms());
        }
        store.link.set(Link::Live);
        app.reached();
    });
    source.set_onopen(Some(on_open.as_ref().unchecked_ref()));
    *connection.on_open.borrow_mut() = Some(on_open);

    let weak = Rc::downgrade(connection);
    let on_error = StateListener::new(move |_| {
        // The browser would retry with the same (maybe expired) token; we retry with a
        // fresh one and the last event id instead.
        if let Some(connection) = weak.upgrade() {
            connection.close_source();
        }
    });
    source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    *connection.on_error.borrow_mut() = Some(on_error);
}

/// Asks for the conversation's pending requests (they also come back after a reload).
pub fn refresh_pending(store: ChatStore, app: AppState) {
    let Some(token) = app.token() else {
        return;
    };
    spawn_local(async move {
        match api::get_pending(&token, store.id).await {
            Ok(requests) => {
                for request in requests {
                    store.upsert_request(request);
                }
            }
            Err(err) => {
                app.report(&err);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_that_drop_as_they_open_wait_longer_each_time() {
        assert_eq!(failures_so_far(3, 60_000.0, true), 0);
        assert_eq!(failures_so_far(3, 100.0, true), 3);
        assert_eq!(failures_so_far(3, 60_000.0, false), 3);
    }

    #[test]
    fn reconnecting_backs_off_but_not_forever() {
        assert_eq!(backoff(1), 500);
        assert!(backoff(3) > backoff(2));
        assert_eq!(backoff(50), 8_000);
    }
}
