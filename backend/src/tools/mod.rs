//! Tools and the universal executor.

pub mod expiry;
pub mod user_input;
