//! HTTP API tests against the real server process and Postgres.

mod agent;
mod auth;
mod conversations;
mod gate;
mod health;
mod input_requests;
mod rls;
mod tools;
