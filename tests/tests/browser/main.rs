//! Browser tests: headless Chromium, driven through `chromedriver`, uses the real web
//! chat (frontend/dist) served by the real server against a real Postgres.
//!
//! They need `chromium` and `chromedriver` (scripts/test.sh installs both). Without them
//! the tests say so and pass, unless `CI` is set, where they fail.
//! `TOOLGATE_SCREENSHOTS=<folder>` saves screenshots of a card and a finished exchange.

mod approvals;
mod cards;
mod chat;
mod csp;
mod deferred;
mod mcp;
mod pinning;
mod robustness;
mod webdriver;

use std::path::PathBuf;

use serde_json::{Value, json};
use tests::{ServerOptions, TestServer};
use tokio::sync::{Semaphore, SemaphorePermit};
use webdriver::{Browser, ENTER, Tools};

/// One browser test at a time: each runs a server and a Chromium, and two cores are
/// few.
static ONE_AT_A_TIME: Semaphore = Semaphore::const_new(1);

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(PathBuf::from)
        .unwrap_or_default()
}

fn under_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty())
}

/// The browser tools, or `None` (with a message) when this test should be skipped.
fn tools_or_skip(test: &str) -> Option<Tools> {
    match Tools::find() {
        Some(tools) => Some(tools),
        None if under_ci() => {
            panic!("CI is set but chromium and chromedriver are not installed")
        }
        None => {
            // Straight to stderr: libtest hides what `eprintln!` prints in a passing test.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: chromium and chromedriver are not installed \
                 (apt-get install chromium chromium-driver, or run scripts/test.sh)"
            );
            None
        }
    }
}

fn web_dir() -> PathBuf {
    let dist = workspace_root().join("frontend").join("dist");
    assert!(
        dist.join("index.html").is_file() && dist.join("pkg").join("frontend_bg.wasm").is_file(),
        "the web chat is not built in {}: run scripts/test.sh, or \
         `source scripts/lib.sh && build_frontend release`",
        dist.display()
    );
    dist
}

/// The server as `scripts/run.sh` starts it: the web chat, the example tools and demo
/// mode, with the QuickBooks stand-in on its own address. `database` reuses a database
/// (a restart); otherwise the server gets a fresh one.
pub async fn start_server(port: u16, database: Option<String>) -> TestServer {
    start_server_with(port, database, |options| options).await
}

pub async fn start_server_with(
    port: u16,
    database: Option<String>,
    adjust: impl FnOnce(ServerOptions) -> ServerOptions,
) -> TestServer {
    let base = format!("http://127.0.0.1:{port}");
    let mut options = ServerOptions::default()
        .env("TOOLGATE_WEB_DIR", &web_dir().to_string_lossy())
        .env(
            "TOOLGATE_TOOLS",
            &workspace_root()
                .join("tools.example.toml")
                .to_string_lossy(),
        )
        .env("TOOLGATE_DEMO", "1")
        .env("QUICKBOOKS_BASE_URL", &format!("{base}/demo/quickbooks"))
        .env("QUICKBOOKS_ACCESS_TOKEN", "demo-token");
    options.database_url = database;
    TestServer::start_on(adjust(options), port).await
}

/// A server and the means to open browsers on it.
pub struct Fixture {
    pub server: TestServer,
    pub port: u16,
    pub tools: Tools,
    _turn: SemaphorePermit<'static>,
}

impl Fixture {
    /// `None` when the test is to be skipped.
    pub async fn start(test: &str) -> Option<Fixture> {
        Self::start_with(test, |options| options).await
    }

    /// With the server's settings changed by `adjust`.
    pub async fn start_with(
        test: &str,
        adjust: impl FnOnce(ServerOptions) -> ServerOptions,
    ) -> Option<Fixture> {
        let tools = tools_or_skip(test)?;
        let turn = ONE_AT_A_TIME.acquire().await.expect("semaphore");
        let port = tests::free_port().expect("free port");
        let server = start_server_with(port, None, adjust).await;
        Some(Fixture {
            server,
            port,
            tools,
            _turn: turn,
        })
    }

    pub async fn browser(&self) -> Browser {
        Browser::start(&self.tools, self.server.client.clone())
            .await
            .expect("starting chromium")
    }

    pub fn base(&self) -> String {
        self.server.base.clone()
    }
}

pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    )
}

/// Opens the app and waits until it has mounted (clicks before that are lost).
pub async fn open_app(browser: &Browser, url: &str) {
    browser.goto(url).await.expect("open the app");
    wait_mounted(browser).await;
}

/// Reloads the page and waits until the app has mounted again.
pub async fn reload(browser: &Browser) {
    browser.refresh().await.expect("reload");
    wait_mounted(browser).await;
}

async fn wait_mounted(browser: &Browser) {
    browser
        .wait_until(
            "the app to mount",
            "document.querySelector('[data-mounted=\"true\"]') !== null",
        )
        .await
        .expect("app mounted");
}

/// Signs in through the dev sign-in form.
pub async fn sign_in(browser: &Browser, base: &str, user: &str) {
    open_app(browser, base).await;
    let name = browser
        .wait_for("[data-testid=user-name]")
        .await
        .expect("user name field");
    name.send_keys(user).await.expect("type user name");
    browser
        .find("[data-testid=sign-in-button]")
        .await
        .expect("sign-in button")
        .click()
        .await
        .expect("click sign in");
    browser
        .wait_for("[data-testid=new-conversation]")
        .await
        .expect("signed in");
}

pub async fn new_conversation(browser: &Browser) {
    browser
        .find("[data-testid=new-conversation]")
        .await
        .expect("new conversation button")
        .click()
        .await
        .expect("click new conversation");
    browser
        .wait_for("[data-testid=new-chat]")
        .await
        .expect("new conversation page");
}

/// Types a message and sends it once the agent is free to take it.
pub async fn ask(browser: &Browser, text: &str) {
    let input = browser
        .wait_for("[data-testid=composer-input]")
        .await
        .expect("message box");
    input.send_keys(text).await.expect("type message");
    wait_send_enabled(browser).await;
    press_enter_in_composer(browser).await;
    browser
        .wait_until(
            "the message to be sent",
            "document.querySelector('[data-testid=composer-input]').value === ''",
        )
        .await
        .expect("message sent");
}

/// Waits until the Send button takes a message.
pub async fn wait_send_enabled(browser: &Browser) {
    browser
        .wait_until(
            "the send button to be enabled",
            "!document.querySelector('[data-testid=send]').disabled",
        )
        .await
        .expect("send enabled");
}

/// Presses Enter in the message box, which sends what it holds.
pub async fn press_enter_in_composer(browser: &Browser) {
    browser
        .find("[data-testid=composer-input]")
        .await
        .expect("message box")
        .send_keys(ENTER)
        .await
        .expect("press Enter");
}

/// Waits for an assistant message containing `text`.
pub async fn wait_for_answer(browser: &Browser, text: &str) -> Value {
    let condition = format!(
        "[...document.querySelectorAll('[data-testid=message-assistant]')]\
         .filter(m => m.innerText.includes({})).length",
        json!(text)
    );
    browser
        .wait_until(&format!("an answer with {text:?}"), &condition)
        .await
        .expect("answer")
}

/// Waits until the conversation shows `n` answers and its run has ended.
pub async fn wait_for_answers(browser: &Browser, n: usize) {
    browser
        .wait_until(
            &format!("answer {n}"),
            &format!("document.querySelectorAll('[data-testid=message-assistant]').length >= {n}"),
        )
        .await
        .expect("an answer");
    wait_idle(browser).await;
}

/// Waits until no run is working or waiting.
pub async fn wait_idle(browser: &Browser) {
    browser
        .wait_until(
            "the run to end",
            "!document.querySelector('[data-testid=run-working],[data-testid=run-waiting],[data-testid=assistant-draft]')",
        )
        .await
        .expect("run ended");
}

pub fn screenshot_dir() -> Option<PathBuf> {
    std::env::var_os("TOOLGATE_SCREENSHOTS")
        .filter(|v| !v.is_empty())
        .map(|dir| {
            let dir = PathBuf::from(dir);
            if dir.is_relative() {
                workspace_root().join(dir)
            } else {
                dir
            }
        })
}

pub async fn screenshot(browser: &Browser, name: &str) {
    if let Some(dir) = screenshot_dir() {
        let path = dir.join(name);
        browser.screenshot(&path).await.expect("screenshot");
        eprintln!("saved {}", path.display());
    }
}
