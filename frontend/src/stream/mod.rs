//! A conversation's live state and the event stream that feeds it.
//!
//! The stream is an `EventSource` opened with a short-lived stream token. When it drops
//! (network loss, server restart, token expiry) it is closed and opened again with a
//! fresh token and `after=<last event id seen>`, so the server replays whatever was
//! missed. Every event is applied idempotently: messages and requests by id, statuses by
//! last write, so a replay or an overlap with the REST snapshot changes nothing.
//!
//! `store` holds what the page shows and applies events to it; `connection` keeps the
//! `EventSource` open and feeds the store.

mod connection;
mod store;

pub use connection::{follow, refresh_pending};
pub use store::{ChatStore, Link, RunView, ToolState, stored_calls};
