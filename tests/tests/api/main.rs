//! HTTP API tests against the real server process and Postgres.

mod agent;
mod auth;
mod context;
mod conversations;
mod deployment;
mod egress;
mod gate;
mod health;
mod input_requests;
mod limits;
mod mcp;
mod rls;
mod schema;
mod sending_again;
mod sql_kind;
mod streams;
mod tools;
