//! The toolgate server, built as part of the test package so the end-to-end tests run
//! the very program without invoking cargo themselves.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    backend::run_from_env().await
}
