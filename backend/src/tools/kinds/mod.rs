//! How a tool runs: one file per kind.

pub mod calculator;
pub mod http;
pub mod sql;
