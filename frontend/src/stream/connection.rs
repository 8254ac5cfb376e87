//! The event stream's connection: an `EventSource` per conversation, opened again
//! with `after=<last id>` whenever it drops: at once and quietly after a good while
//! live (the server ends each stream when its token expires), else with backoff.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures::channel::oneshot;
use leptos::prelude::*;
use leptos::task::spawn_local;
use protocol::chat::EventKind;
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

/// A stream that was live this long and then ends is opened again at once, without
/// saying so: the server ends every stream when its token expires. One that ends
/// sooner goes through the backoff, so a server that keeps ending streams is not
/// asked again and again.
const QUIET_AFTER_MS: f64 = 2_000.0;

struct Connection {
    alive: Cell<bool>,
    /// Failed attempts in a row; an opened stream resets it.
    failures: Cell<u32>,
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
    // Set while a stream that ended after a good while is opened again: the indicator
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
            clock::sleep(failed(&connection)).await;
            continue;
        };
        let (closed_tx, closed_rx) = oneshot::channel();
        *connection.closed.borrow_mut() = Some(closed_tx);
        connection.opened_at.set(0.0);
        attach(&connection, &source, store, app);
        *connection.source.borrow_mut() = Some(source);
        let _ = closed_rx.await;
        connection.listeners.borrow_mut().clear();
        if !connection.alive.get() {
            break;
        }
        let opened_at = connection.opened_at.get();
        if opened_at > 0.0 && clock::now_ms() - opened_at >= QUIET_AFTER_MS {
            quietly = true;
            refresh_pending(store, app);
            continue;
        }
        store.link.set(Link::Reconnecting);
        clock::sleep(failed(&connection)).await;
        // A fresh stream may have missed requests made outside any run.
        if connection.alive.get() {
            refresh_pending(store, app);
        }
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
    drop(listeners);

    let weak = Rc::downgrade(connection);
    let on_open = StateListener::new(move |_| {
        if let Some(connection) = weak.upgrade() {
            connection.failures.set(0);
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
    fn reconnecting_backs_off_but_not_forever() {
        assert_eq!(backoff(1), 500);
        assert!(backoff(3) > backoff(2));
        assert_eq!(backoff(50), 8_000);
    }
}
