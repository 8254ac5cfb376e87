//! A small W3C WebDriver client for headless Chromium through a local `chromedriver`:
//! just what the browser tests use, over the HTTP client the tests already have.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use serde_json::{Value, json};
use tests::TempDir;

const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

pub const ENTER: &str = "\u{E007}";
pub const ESCAPE: &str = "\u{E00C}";
pub const TAB: &str = "\u{E004}";

/// Where the browser and its driver are, when both are installed.
pub struct Tools {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

impl Tools {
    /// `CHROMIUM` / `CHROMEDRIVER`, else `chromium` (or `chromium-browser`) and
    /// `chromedriver` on the PATH.
    pub fn find() -> Option<Tools> {
        let chosen = |name: &str| std::env::var_os(name).map(PathBuf::from);
        let chromium = match chosen("CHROMIUM") {
            Some(path) => path,
            None => on_path("chromium").or_else(|| on_path("chromium-browser"))?,
        };
        let chromedriver = chosen("CHROMEDRIVER").or_else(|| on_path("chromedriver"))?;
        if !chromium.is_file() || !chromedriver.is_file() {
            return None;
        }
        Some(Tools {
            chromium,
            chromedriver,
        })
    }
}

/// A `chromedriver` process with one browser session. Dropping it ends both.
pub struct Browser {
    http: reqwest::Client,
    session_url: String,
    driver: Child,
    driver_port: u16,
    session_id: String,
    _profile: TempDir,
}

fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

impl Browser {
    pub async fn start(tools: &Tools, http: reqwest::Client) -> Result<Browser> {
        let port = free_port()?;
        let driver = Command::new(&tools.chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", tools.chromedriver.display()))?;
        let profile = TempDir::new("toolgate-chromium");
        let base = format!("http://127.0.0.1:{port}");
        let mut browser = Browser {
            http,
            session_url: String::new(),
            driver,
            driver_port: port,
            session_id: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(response) = browser.http.get(format!("{base}/status")).send().await
                && let Ok(status) = response.json::<Value>().await
                && status["value"]["ready"] == json!(true)
            {
                break;
            }
            if Instant::now() > deadline {
                bail!("chromedriver did not become ready on port {port}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let args = [
            "--headless=new".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--no-default-browser-check".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            "--window-size=1280,900".to_owned(),
            format!("--user-data-dir={}", browser._profile.0.display()),
        ];
        let capabilities = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": tools.chromium, "args": args},
            "goog:loggingPrefs": {"browser": "ALL"},
        }}});
        let created = browser
            .http
            .post(format!("{base}/session"))
            .json(&capabilities)
            .send()
            .await?
            .json::<Value>()
            .await?;
        let id = created["value"]["sessionId"]
            .as_str()
            .ok_or_else(|| anyhow!("no browser session: {created}"))?;
        browser.session_id = id.to_owned();
        browser.session_url = format!("{base}/session/{id}");
        Ok(browser)
    }

    async fn command(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value> {
        let url = format!("{}{path}", self.session_url);
        let request = match method {
            "GET" => self.http.get(url),
            "DELETE" => self.http.delete(url),
            _ => self.http.post(url).json(&body.unwrap_or_else(|| json!({}))),
        };
        let response = request.send().await.context("talking to chromedriver")?;
        let status = response.status();
        let value: Value = response.json().await.context("chromedriver answer")?;
        if !status.is_success() {
            let error = value["value"]["error"].as_str().unwrap_or("error");
            let message = value["value"]["message"].as_str().unwrap_or("");
            bail!(WebDriverError {
                error: error.to_owned(),
                message: message.lines().next().unwrap_or("").to_owned(),
            });
        }
        Ok(value["value"].clone())
    }

    pub async fn goto(&self, url: &str) -> Result<()> {
        self.command("POST", "/url", Some(json!({"url": url})))
            .await
            .map(drop)
    }

    pub async fn refresh(&self) -> Result<()> {
        self.command("POST", "/refresh", None).await.map(drop)
    }

    /// Opens a new tab of this browser (sharing its `localStorage`, with a
    /// `sessionStorage` of its own) and returns its handle;
    /// commands still go to the tab they went to until [`Browser::switch_to`].
    pub async fn new_tab(&self) -> Result<String> {
        let opened = self
            .command("POST", "/window/new", Some(json!({"type": "tab"})))
            .await?;
        Ok(opened["handle"].as_str().unwrap_or_default().to_owned())
    }

    /// The handle of the tab commands go to.
    pub async fn tab(&self) -> Result<String> {
        self.text_at("/window").await
    }

    /// What a `GET` of the session's `path` answers, as text.
    async fn text_at(&self, path: &str) -> Result<String> {
        Ok(self
            .command("GET", path, None)
            .await?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// Sends the commands that follow to the tab `handle`.
    pub async fn switch_to(&self, handle: &str) -> Result<()> {
        self.command("POST", "/window", Some(json!({"handle": handle})))
            .await
            .map(drop)
    }

    /// The address of the page in the tab commands go to.
    pub async fn current_url(&self) -> Result<String> {
        self.text_at("/url").await
    }

    pub async fn set_window_size(&self, width: u32, height: u32) -> Result<()> {
        self.command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await
        .map(drop)
    }

    /// Cuts (or restores) the page's network, as Chromium's devtools do.
    pub async fn set_offline(&self, offline: bool) -> Result<()> {
        self.network_conditions(offline, 0).await
    }

    /// Delays every request of the page by `millis` (0: none), as Chromium's devtools do.
    pub async fn set_latency(&self, millis: u64) -> Result<()> {
        self.network_conditions(false, millis).await
    }

    async fn network_conditions(&self, offline: bool, latency_millis: u64) -> Result<()> {
        self.command(
            "POST",
            "/chromium/network_conditions",
            Some(
                json!({"network_conditions": {"offline": offline, "latency": latency_millis,
                "download_throughput": -1, "upload_throughput": -1}}),
            ),
        )
        .await
        .map(drop)
    }

    /// Makes every request whose URL matches one of `patterns` (`*` for any text) fail,
    /// as Chromium's devtools do; an empty list lets everything through again.
    pub async fn block_urls(&self, patterns: &[&str]) -> Result<()> {
        self.command(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": "Network.enable", "params": {}})),
        )
        .await?;
        self.command(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": "Network.setBlockedURLs", "params": {"urls": patterns}})),
        )
        .await
        .map(drop)
    }

    /// Puts the page in another time zone (an IANA name), as Chromium's devtools do.
    pub async fn set_time_zone(&self, zone: &str) -> Result<()> {
        self.command(
            "POST",
            "/goog/cdp/execute",
            Some(json!({"cmd": "Emulation.setTimezoneOverride",
                "params": {"timezoneId": zone}})),
        )
        .await
        .map(drop)
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Result<Value> {
        self.command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
        .await
    }

    /// Finds the element `css` names and clicks it.
    pub async fn click_on(&self, css: &str) -> Result<()> {
        self.find(css)
            .await?
            .click()
            .await
            .with_context(|| format!("clicking `{css}`"))
    }

    pub async fn find(&self, css: &str) -> Result<Element<'_>> {
        let found = self
            .command(
                "POST",
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .with_context(|| format!("finding `{css}`"))?;
        self.element(&found)
    }

    /// The element that has the keyboard focus.
    pub async fn active(&self) -> Result<Element<'_>> {
        let found = self.command("GET", "/element/active", None).await?;
        self.element(&found)
    }

    pub async fn find_all(&self, css: &str) -> Result<Vec<Element<'_>>> {
        let found = self
            .command(
                "POST",
                "/elements",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        found
            .as_array()
            .map(|items| items.iter().map(|item| self.element(item)).collect())
            .unwrap_or_else(|| Ok(Vec::new()))
    }

    fn element(&self, reference: &Value) -> Result<Element<'_>> {
        let id = reference[ELEMENT_KEY]
            .as_str()
            .ok_or_else(|| anyhow!("not an element: {reference}"))?;
        Ok(Element {
            browser: self,
            id: id.to_owned(),
        })
    }

    /// Waits until `css` matches a displayed element and returns it.
    pub async fn wait_for(&self, css: &str) -> Result<Element<'_>> {
        let deadline = Instant::now() + wait_time();
        loop {
            if let Ok(elements) = self.find_all(css).await {
                for element in elements {
                    if element.is_displayed().await.unwrap_or(false) {
                        return Ok(element);
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "no visible `{css}` after {:?}\n{}",
                    wait_time(),
                    self.page_summary().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the JavaScript expression `condition` is truthy.
    pub async fn wait_until(&self, what: &str, condition: &str) -> Result<Value> {
        let deadline = Instant::now() + wait_time();
        let script = format!("return ({condition});");
        loop {
            if let Ok(value) = self.execute(&script, vec![]).await
                && truthy(&value)
            {
                return Ok(value);
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out waiting for {what} ({condition})\n{}",
                    self.page_summary().await
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// How many elements match `css` right now.
    pub async fn count(&self, css: &str) -> Result<usize> {
        Ok(self.find_all(css).await?.len())
    }

    /// The visible text of the first element matching `css`.
    pub async fn text(&self, css: &str) -> Result<String> {
        self.find(css).await?.text().await
    }

    pub async fn screenshot(&self, path: &Path) -> Result<()> {
        use base64::Engine;
        let data = self.command("GET", "/screenshot", None).await?;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.as_str().unwrap_or_default())
            .context("screenshot is not base64")?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
    }

    /// The page's console messages so far (Chromium only).
    pub async fn console(&self) -> String {
        match self
            .command("POST", "/se/log", Some(json!({"type": "browser"})))
            .await
        {
            Ok(Value::Array(entries)) => entries
                .iter()
                .filter_map(|e| e["message"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }

    /// The page text and console, for failure messages.
    pub async fn page_summary(&self) -> String {
        let body = self
            .execute(
                "return document.body ? document.body.innerText : ''",
                vec![],
            )
            .await
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let body: String = body.chars().take(3000).collect();
        format!(
            "--- page text ---\n{body}\n--- console ---\n{}",
            self.console().await
        )
    }

    pub async fn quit(mut self) {
        let _ = self.command("DELETE", "", None).await;
        self.session_id.clear();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Best effort, also when a test panics: end the session so Chromium exits, then
        // the driver.
        if !self.session_id.is_empty()
            && let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", self.driver_port))
        {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session_id, self.driver_port
            );
            if stream.write_all(request.as_bytes()).is_ok() {
                let mut sink = Vec::new();
                let _ = stream.read_to_end(&mut sink);
            }
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(flag) => *flag,
        Value::Number(n) => n.as_f64().is_some_and(|n| n != 0.0),
        Value::String(text) => !text.is_empty(),
        _ => true,
    }
}

/// How long a wait lasts: generous, since a loaded 2-core machine is slow.
pub fn wait_time() -> Duration {
    let seconds = std::env::var("BROWSER_WAIT_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    Duration::from_secs(seconds)
}

#[derive(Debug)]
pub struct WebDriverError {
    pub error: String,
    pub message: String,
}

impl std::fmt::Display for WebDriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "webdriver {}: {}", self.error, self.message)
    }
}

impl std::error::Error for WebDriverError {}

/// An element of the page.
pub struct Element<'a> {
    browser: &'a Browser,
    id: String,
}

impl<'a> Element<'a> {
    fn path(&self, rest: &str) -> String {
        format!("/element/{}{rest}", self.id)
    }

    pub async fn click(&self) -> Result<()> {
        self.browser
            .command("POST", &self.path("/click"), None)
            .await
            .map(drop)
    }

    /// Types `text` (which may hold key codes such as [`ENTER`]).
    pub async fn send_keys(&self, text: &str) -> Result<()> {
        self.browser
            .command("POST", &self.path("/value"), Some(json!({"text": text})))
            .await
            .map(drop)
    }

    pub async fn clear(&self) -> Result<()> {
        self.browser
            .command("POST", &self.path("/clear"), None)
            .await
            .map(drop)
    }

    pub async fn text(&self) -> Result<String> {
        Ok(self
            .browser
            .command("GET", &self.path("/text"), None)
            .await?
            .as_str()
            .unwrap_or_default()
            .to_owned())
    }

    /// An attribute as written in the HTML, if present.
    pub async fn attr(&self, name: &str) -> Result<Option<String>> {
        let value = self
            .browser
            .command("GET", &self.path(&format!("/attribute/{name}")), None)
            .await?;
        Ok(value.as_str().map(str::to_owned))
    }

    /// A DOM property (`value`, `checked`, `type`, …).
    pub async fn prop(&self, name: &str) -> Result<Value> {
        self.browser
            .command("GET", &self.path(&format!("/property/{name}")), None)
            .await
    }

    pub async fn is_displayed(&self) -> Result<bool> {
        Ok(self
            .browser
            .command("GET", &self.path("/displayed"), None)
            .await?
            .as_bool()
            .unwrap_or(false))
    }

    pub async fn is_enabled(&self) -> Result<bool> {
        Ok(self
            .browser
            .command("GET", &self.path("/enabled"), None)
            .await?
            .as_bool()
            .unwrap_or(false))
    }

    pub async fn find(&self, css: &str) -> Result<Element<'a>> {
        let found = self
            .browser
            .command(
                "POST",
                &self.path("/element"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await
            .with_context(|| format!("finding `{css}` inside an element"))?;
        self.browser.element(&found)
    }

    pub async fn find_all(&self, css: &str) -> Result<Vec<Element<'a>>> {
        let found = self
            .browser
            .command(
                "POST",
                &self.path("/elements"),
                Some(json!({"using": "css selector", "value": css})),
            )
            .await?;
        found
            .as_array()
            .map(|items| {
                items
                    .iter()
                    .map(|item| self.browser.element(item))
                    .collect()
            })
            .unwrap_or_else(|| Ok(Vec::new()))
    }
}
