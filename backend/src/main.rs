#[tokio::main]
async fn main() -> std::process::ExitCode {
    backend::run_from_env().await
}
