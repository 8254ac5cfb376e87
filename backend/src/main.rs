use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let filter = EnvFilter::try_from_env("TOOLGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=info"));
    let json = std::env::var("TOOLGATE_LOG_FORMAT").is_ok_and(|format| format == "json");
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }

    let result = match backend::Config::from_env() {
        Ok(config) => backend::serve(config).await,
        Err(err) => Err(err),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!("{err:#}");
            eprintln!("toolgate: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
