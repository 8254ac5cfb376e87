//! Wire types and field validation shared by the toolgate server and its web chat.
//!
//! This crate is the one place where the shape of a request and the rules for a
//! user-supplied value are written, so the browser card and the server reject exactly
//! the same inputs with exactly the same messages. It has no server dependencies and
//! compiles for `wasm32-unknown-unknown`.

pub mod api;
pub mod approval;
pub mod chat;
pub mod fields;
#[cfg(feature = "sqlx")]
mod stored;
pub mod timestamp;
pub mod unseen;

pub use fields::{
    FieldSpec, FieldType, InputRequestSpec, SaveFor, SelectOption, VisibleIf, check_field_specs,
    is_visible, validate_field, validate_inputs,
};
