//! HTTP API tests against the real server process and Postgres.

mod agent;
mod auth;
mod conversations;
mod deployment;
mod egress;
mod gate;
mod health;
mod input_requests;
mod limits;
mod rls;
mod sql_kind;
mod tools;
