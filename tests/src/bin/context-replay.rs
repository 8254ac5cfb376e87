//! `context-replay`: how faithful and how small the model's context stays over a long
//! conversation. One scripted session (200 user turns: a task with five requirements, a
//! script rewritten 20 times through a keyed tool, 10 images, 30 other tool calls, chat
//! in between) is replayed through the real server twice, against a scripted
//! OpenAI-compatible mock model that records every request it receives:
//!
//! - **shipped**: the default middleware chain and settings, the product as it ships;
//! - **naive**: `TOOLGATE_MIDDLEWARE=system_sections,tool_call_log`, the same system
//!   message but the whole history in every request (nothing dropped, stubbed or
//!   summarised).
//!
//! It prints a Markdown report: sizes against the naive run and fidelity counts over
//! every request. Nothing here asserts a figure. Run through `scripts/bench.sh` (which
//! builds it) or `cargo run -p tests --bin context-replay`; `--turns N` replays only
//! the first N turns, `--middleware LIST` replaces the default chain in the first run
//! (to measure a chain before shipping it), `--dump DIR` writes every request body
//! the mock received under `DIR/shipped` and `DIR/naive`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ::tests::{
    MockHttp, MockLlm, MockReply, ServerOptions, TestServer, dangling_turn, write_temp_file,
};
use anyhow::{Context, Result, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The five requirements of turn 1, each searched for verbatim in every request.
const REQUIREMENTS: [&str; 5] = [
    "must use only the standard library",
    "must honour robots.txt before every fetch",
    "must write the results as UTF-8 CSV with a header row",
    "must retry a failed request at most three times",
    "must never send more than one request per second",
];

const TURNS: usize = 200;
/// The baseline: the shipped system message, no history handling at all.
const NAIVE_CHAIN: &str = "system_sections,tool_call_log";
/// Where the model keeps the artefact it rewrites; the keyed tool's key.
const SCRIPT_PATH: &str = "catalogue/scraper.py";
const REPLAY_USER: &str = "replay-user";
const REPLAY_CONVERSATION: &str = "00000000-0000-4000-8000-00000000c0de";
/// Appears in a script version's first lines and nowhere else in the session.
const VERSION_MARKER: &str = "SCRAPER-REV-";
const IMAGE_CHARS: usize = 12_000;

const TOOLS: &str = r#"
[[tools]]
name = "save_file"
description = "Write the whole new content of a file at a path"
kind = "http"
key_argument = "path"
requires_approval = false
parameters = { type = "object", properties = { path = { type = "string" }, text = { type = "string" } }, required = ["path", "text"] }
[tools.http]
allow_private_networks = true
method = "POST"
url = "{env.REPLAY_FILES_BASE}/save"
body = { path = "{path}", text = "{text}" }

[[tools]]
name = "read_docs"
description = "Read a section of the shop's developer documentation"
kind = "http"
parameters = { type = "object", properties = { topic = { type = "string" } }, required = ["topic"] }
[tools.http]
allow_private_networks = true
url = "{env.REPLAY_DOCS_BASE}/docs?topic={topic}"
"#;

/// What the mock answers to every summary request: plausible, and on purpose without
/// the requirements' wording, so a request keeps them only if the server kept turn 1.
const SUMMARY: &str = "- The user and the assistant are building a scraper for the shop's product \
catalogue, kept in catalogue/scraper.py, and have revised it several times.\n- Screenshots of \
catalogue pages were discussed: the price sits beside the title, variants share a parent.\n- \
Crawl durations were calculated and sections of the developer docs were read.\n- Open: the \
schedule of the nightly run.";

const SUBJECTS: [&str; 10] = [
    "The category pages",
    "The product grid",
    "Pagination",
    "The sitemap",
    "Our nightly job",
    "The price column",
    "The export",
    "The staging shop",
    "Each product card",
    "The search endpoint",
];
const VERBS: [&str; 8] = [
    "usually lists",
    "sometimes hides",
    "only shows",
    "tends to repeat",
    "quietly drops",
    "links to",
    "renders",
    "groups",
];
const OBJECTS: [&str; 8] = [
    "about forty items per page",
    "the discounted price beside the old one",
    "a lazy-loaded block of reviews",
    "the stock level as an icon",
    "variants under one parent product",
    "a canonical link to the main listing",
    "the currency in a data attribute",
    "a breadcrumb with the category path",
];
const TAILS: [&str; 6] = [
    "",
    " on most days",
    " when the catalogue is large",
    " after the weekly import",
    " for logged-out visitors",
    " in the mobile layout",
];
const QUESTIONS: [&str; 6] = [
    "What would you change in the approach?",
    "Does that affect the script?",
    "Is that worth handling now or later?",
    "How would you test that?",
    "Any risk I am not seeing?",
    "Should we note that somewhere?",
];
const CHANGES: [&str; 20] = [
    "start with a first version that fetches one category",
    "follow the pagination links",
    "parse the price into a Decimal",
    "add a --category option",
    "keep the currency code next to the price",
    "skip products that are out of stock",
    "read variants from the parent product",
    "add a --since option for the changed items",
    "log each fetched URL with its status",
    "move the settings into a small dataclass",
    "normalise whitespace in product titles",
    "add the breadcrumb path as a column",
    "resume from the last page after a crash",
    "store the canonical URL of each product",
    "add a --limit option for test runs",
    "report a summary line at the end",
    "split parsing into its own function",
    "add docstrings to every function",
    "handle relative image links",
    "exit with status 2 when nothing was found",
];
const TOPICS: [&str; 5] = [
    "rate limits",
    "pagination",
    "product feed",
    "caching headers",
    "error codes",
];

/// A small deterministic generator (xorshift64), so every run replays the same session.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn paragraph(&mut self, sentences: usize) -> String {
        (0..sentences)
            .map(|_| {
                format!(
                    "{} {} {}{}.",
                    self.pick(&SUBJECTS),
                    self.pick(&VERBS),
                    self.pick(&OBJECTS),
                    self.pick(&TAILS)
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// What a turn does besides the user's words.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Chat,
    /// The model writes this version (from 1) of the script.
    Rewrite(usize),
    /// The user sends this image (from 0); the model answers it.
    Image(usize),
    /// The model calls the calculator or reads the docs.
    Tool,
}

struct Turn {
    kind: Kind,
    post: Value,
    replies: Vec<MockReply>,
}

/// The scripted session and what its metrics look for.
struct Session {
    turns: Vec<Turn>,
    first_request: String,
    /// Script versions, version 1 first.
    versions: Vec<String>,
    /// A slice of each image's data, enough to recognise it.
    image_marks: Vec<String>,
}

fn kind_of(turn: usize) -> Kind {
    match turn % 20 {
        2 | 12 => Kind::Rewrite((turn - 2) / 10 + 1),
        7 => Kind::Image(turn / 20),
        4 | 10 | 16 => Kind::Tool,
        _ => Kind::Chat,
    }
}

fn script_version(version: usize) -> String {
    let mut text = format!(
        "#!/usr/bin/env python3\n# {SCRIPT_PATH}, revision {version:02} ({VERSION_MARKER}{version:02})\n"
    );
    text.push_str(
        r#""""Scrape the shop's product catalogue into a CSV file (standard modules only)."""

import argparse
import csv
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import urllib.robotparser
from decimal import Decimal, InvalidOperation
from html.parser import HTMLParser

BASE = "https://shop.example.com"
AGENT = "catalogue-scraper"
PAUSE = 1.0
ATTEMPTS = 3


class ProductParser(HTMLParser):
    """Collects name, price and link of every product card on a listing page."""

    def __init__(self):
        super().__init__()
        self.products = []
        self.next_page = None
        self._field = None
        self._current = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = attrs.get("class", "").split()
        if "product-card" in classes:
            self._current = {"url": urllib.parse.urljoin(BASE, attrs.get("data-href", ""))}
        elif "product-name" in classes:
            self._field = "name"
        elif "product-price" in classes:
            self._field = "price"
            self._current["currency"] = attrs.get("data-currency", "EUR")
        elif tag == "a" and attrs.get("rel") == "next":
            self.next_page = urllib.parse.urljoin(BASE, attrs.get("href", ""))

    def handle_data(self, data):
        if self._field and data.strip():
            self._current[self._field] = " ".join(data.split())
            self._field = None

    def handle_endtag(self, tag):
        if tag == "article" and self._current.get("name"):
            self.products.append(self._current)
            self._current = {}


def allowed(robots, url):
    return robots.can_fetch(AGENT, url)


def fetch(url):
    for attempt in range(1, ATTEMPTS + 1):
        try:
            request = urllib.request.Request(url, headers={"User-Agent": AGENT})
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.read().decode("utf-8", "replace")
        except urllib.error.URLError as error:
            print(f"attempt {attempt} for {url}: {error}", file=sys.stderr)
            time.sleep(PAUSE * attempt)
    return None


def price_of(text):
    try:
        return Decimal(text.replace(",", ".").strip("€$£ "))
    except InvalidOperation:
        return None


def crawl(category, writer, robots):
    url = f"{BASE}/c/{category}"
    while url:
        if not allowed(robots, url):
            print(f"robots.txt forbids {url}", file=sys.stderr)
            return
        page = fetch(url)
        if page is None:
            return
        parser = ProductParser()
        parser.feed(page)
        for product in parser.products:
            writer.writerow([product.get("name"), price_of(product.get("price", "")),
                             product.get("currency"), product.get("url")])
        url = parser.next_page
        time.sleep(PAUSE)


def main():
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("category")
    options.add_argument("--out", default="products.csv")
    args = options.parse_args()
    robots = urllib.robotparser.RobotFileParser(f"{BASE}/robots.txt")
    robots.read()
    with open(args.out, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["name", "price", "currency", "url"])
        crawl(args.category, writer, robots)
"#,
    );
    text.push_str("\n\n# Changes, newest last:\n");
    for (index, change) in CHANGES.iter().take(version).enumerate() {
        text.push_str(&format!("#   r{:02}: {change}\n", index + 1));
    }
    for index in 1..=version {
        text.push_str(&format!(
            "\n\ndef revision_{index:02}_check():\n    \"\"\"Self-check added in revision {index:02}: {}.\"\"\"\n    return {index} <= {version}\n",
            CHANGES[index - 1]
        ));
    }
    text.push_str("\n\nif __name__ == \"__main__\":\n    main()\n");
    text
}

fn image_data(rng: &mut Rng) -> String {
    const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let body: String = (0..IMAGE_CHARS)
        .map(|_| BASE64[rng.below(BASE64.len())] as char)
        .collect();
    format!("iVBORw0KGgo{body}")
}

fn call(id: String, name: &str, arguments: Value) -> MockReply {
    MockReply::ToolCalls(vec![(id, name.to_owned(), arguments)])
}

impl Session {
    fn scripted(turns: usize) -> Result<Self> {
        let mut rng = Rng(0x5eed_c0de_2026);
        let first_request = format!(
            "I need a scraper for the product catalogue at shop.example.com, kept in {SCRIPT_PATH}. \
             Five requirements, all of them binding: it {}; it {}; it {}; it {}; and it {}. \
             Please confirm before we start.",
            REQUIREMENTS[0], REQUIREMENTS[1], REQUIREMENTS[2], REQUIREMENTS[3], REQUIREMENTS[4]
        );
        let mut session = Session {
            turns: vec![Turn {
                kind: Kind::Chat,
                post: json!(first_request),
                replies: vec![MockReply::Text(format!(
                    "Understood: five requirements for {SCRIPT_PATH}. {}",
                    rng.paragraph(3)
                ))],
            }],
            first_request,
            versions: Vec::new(),
            image_marks: Vec::new(),
        };
        let mut tools = 0;
        for number in 2..=turns {
            let id = format!("call_{number}");
            let turn = match kind_of(number) {
                Kind::Rewrite(version) => {
                    let change = CHANGES[version - 1];
                    let text = script_version(version);
                    session.versions.push(text.clone());
                    Turn {
                        kind: Kind::Rewrite(version),
                        post: json!(format!(
                            "Please revise {SCRIPT_PATH}: {change}. {}",
                            rng.paragraph(1)
                        )),
                        replies: vec![
                            call(id, "save_file", json!({"path": SCRIPT_PATH, "text": text})),
                            MockReply::Text(format!(
                                "Revision {version} of {SCRIPT_PATH} is saved: {change}. {}",
                                rng.paragraph(2)
                            )),
                        ],
                    }
                }
                Kind::Image(index) => {
                    let data = image_data(&mut rng);
                    session
                        .image_marks
                        .push(data[IMAGE_CHARS / 2..IMAGE_CHARS / 2 + 64].to_owned());
                    Turn {
                        kind: Kind::Image(index),
                        post: json!([
                            {"type": "text", "text": format!(
                                "Screenshot {} of a catalogue page: where does the price sit, and does anything change for the parser?",
                                index + 1
                            )},
                            {"type": "image", "url": format!("data:image/png;base64,{data}")}
                        ]),
                        replies: vec![MockReply::Text(format!(
                            "In screenshot {} the price sits to the right of the title. {}",
                            index + 1,
                            rng.paragraph(4)
                        ))],
                    }
                }
                Kind::Tool if tools % 2 == 0 => {
                    tools += 1;
                    let (pages, seconds) = (rng.between(200, 5000), rng.between(1, 4));
                    Turn {
                        kind: Kind::Tool,
                        post: json!(format!(
                            "How many minutes would a crawl of {pages} pages take at {seconds} seconds a page? Please calculate it."
                        )),
                        replies: vec![
                            call(
                                id,
                                "calculator",
                                json!({"expression": format!("{pages} * {seconds} / 60")}),
                            ),
                            MockReply::Text(format!(
                                "That is the figure above, in minutes. {}",
                                rng.paragraph(2)
                            )),
                        ],
                    }
                }
                Kind::Tool => {
                    tools += 1;
                    let topic = TOPICS[(tools / 2) % TOPICS.len()];
                    Turn {
                        kind: Kind::Tool,
                        post: json!(format!(
                            "Look up the {topic} section of the shop's developer docs, please."
                        )),
                        replies: vec![
                            call(id, "read_docs", json!({"topic": topic})),
                            MockReply::Text(format!(
                                "The docs on {topic} matter here. {}",
                                rng.paragraph(3)
                            )),
                        ],
                    }
                }
                Kind::Chat => {
                    let (asked, answered) = (rng.between(3, 5), rng.between(6, 9));
                    Turn {
                        kind: Kind::Chat,
                        post: json!(format!("{} {}", rng.paragraph(asked), rng.pick(&QUESTIONS))),
                        replies: vec![MockReply::Text(rng.paragraph(answered))],
                    }
                }
            };
            session.turns.push(turn);
        }
        session.check()?;
        Ok(session)
    }

    /// The metrics search for verbatim text: make sure what they search for appears
    /// nowhere else in the script, or they would count the wrong thing.
    fn check(&self) -> Result<()> {
        for (index, turn) in self.turns.iter().enumerate().skip(1) {
            let mut texts = vec![turn.post.to_string()];
            for reply in &turn.replies {
                match reply {
                    MockReply::Text(text) => texts.push(text.clone()),
                    MockReply::ToolCalls(calls) => {
                        texts.extend(calls.iter().map(|(_, _, arguments)| arguments.to_string()))
                    }
                    _ => {}
                }
            }
            for text in texts.iter().chain([&SUMMARY.to_owned()]) {
                if REQUIREMENTS.iter().any(|r| text.contains(r)) {
                    bail!("turn {} repeats a requirement", index + 1);
                }
                if !matches!(turn.kind, Kind::Rewrite(_)) && text.contains(VERSION_MARKER) {
                    bail!("turn {} mentions a script version's marker", index + 1);
                }
            }
        }
        Ok(())
    }
}

/// What a request should (and should not) carry when it is sent.
#[derive(Clone, Copy, Default)]
struct Expected {
    /// The newest script version written so far (from 1), if any.
    newest: Option<usize>,
    /// Images 0..answered have already been answered by the model.
    answered: usize,
}

/// One request the mock received, measured.
struct Measured {
    turn: usize,
    summary: bool,
    chars: usize,
    has_first_request: bool,
    has_requirements: bool,
    dangling: Option<String>,
    missing_current: bool,
    stale_versions: usize,
    stale_images: usize,
}

/// A summary request: the summarisation middleware's, with no tools and a system
/// prompt that starts "Summarise".
fn is_summary(body: &Value) -> bool {
    let tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let first = &body["messages"][0];
    let system = match &first["content"] {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .first()
            .and_then(|p| p["text"].as_str())
            .unwrap_or_default()
            .to_owned(),
        _ => String::new(),
    };
    !tools && first["role"] == "system" && system.trim_start().starts_with("Summarise")
}

/// Every string in the request's messages, with tool-call arguments (JSON in a string)
/// opened up, so a script inside an argument is searched as the text it is.
fn texts_of(body: &Value) -> Vec<String> {
    fn collect(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::String(text) => {
                if text.starts_with('{')
                    && let Ok(inner @ Value::Object(_)) = serde_json::from_str::<Value>(text)
                {
                    collect(&inner, out);
                }
                out.push(text.clone());
            }
            Value::Array(items) => items.iter().for_each(|item| collect(item, out)),
            Value::Object(fields) => fields.values().for_each(|item| collect(item, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    collect(&body["messages"], &mut out);
    out
}

fn measure(session: &Session, turn: usize, expected: Expected, body: &Value) -> Measured {
    let texts = texts_of(body);
    let has = |needle: &str| texts.iter().any(|text| text.contains(needle));
    let stale_versions = expected.newest.map_or(0, |newest| {
        (1..newest)
            .filter(|version| has(&format!("{VERSION_MARKER}{version:02}")))
            .count()
    });
    Measured {
        turn,
        summary: is_summary(body),
        chars: body.to_string().chars().count(),
        has_first_request: has(&session.first_request),
        has_requirements: REQUIREMENTS.iter().all(|r| has(r)),
        dangling: dangling_turn(body),
        missing_current: expected
            .newest
            .is_some_and(|newest| !has(&session.versions[newest - 1])),
        stale_versions,
        stale_images: session.image_marks[..expected.answered]
            .iter()
            .filter(|mark| has(mark))
            .count(),
    }
}

/// Replays the session on a fresh server with `chain` as `TOOLGATE_MIDDLEWARE` (the
/// default chain when `None`) and measures every request the model received; with
/// `dump`, each request body is also written there as `<turn>-<n>.json`.
async fn replay(
    session: &Session,
    chain: Option<&str>,
    dump: Option<&Path>,
) -> Result<Vec<Measured>> {
    let llm = MockLlm::start(Vec::new()).await;
    llm.summarise_with(SUMMARY);
    let files = MockHttp::start().await;
    files.answer_with(200, json!({"saved": true}));
    let docs = MockHttp::start().await;
    let mut docs_rng = Rng(0xd0c5);
    docs.answer_with(
        200,
        json!({"title": "Developer documentation", "text": docs_rng.paragraph(10)}),
    );
    let (_tools_dir, tools_path) = write_temp_file("tools.toml", TOOLS);
    let mut options = ServerOptions::default()
        .env("TOOLGATE_LOG", "warn")
        .env("TOOLGATE_TOOLS", &tools_path.to_string_lossy())
        .env("REPLAY_FILES_BASE", &files.base)
        .env("REPLAY_DOCS_BASE", &docs.base)
        .env("TOOLGATE_LLM_BASE_URL", &llm.base)
        .env("TOOLGATE_LLM_API_KEY", "sk-replay")
        .env("TOOLGATE_LLM_MODEL", "replay-model")
        // The replay posts faster than a person; the rate limit is not what it measures.
        .env("TOOLGATE_RATE_PER_MINUTE", "100000")
        .env("TOOLGATE_RATE_BURST", "10000");
    if let Some(chain) = chain {
        options = options.env("TOOLGATE_MIDDLEWARE", chain);
    }
    let server = TestServer::try_start(options).await?;
    // Fixed ids: they are in the system message, and a random id's token count would
    // move the summarisation threshold's crossing from one run to the next.
    let token = server.token(REPLAY_USER).await;
    let conversation = REPLAY_CONVERSATION.to_owned();
    let mut db = server.db().await;
    sqlx::query("insert into conversations (id, user_id, title) values ($1, $2, 'replay')")
        .bind(uuid::Uuid::parse_str(REPLAY_CONVERSATION)?)
        .bind(REPLAY_USER)
        .execute(&mut db)
        .await
        .context("creating the conversation")?;

    let mut measured = Vec::new();
    let mut expected = Expected::default();
    let mut seen = 0;
    let mut last_event = 0;
    for (index, turn) in session.turns.iter().enumerate() {
        for reply in &turn.replies {
            llm.push(reply.clone());
        }
        let (status, body) = server
            .post_message(&token, &conversation, turn.post.clone())
            .await;
        if status != StatusCode::ACCEPTED {
            bail!("turn {}: posting answered {status}: {body}", index + 1);
        }
        let run = body["run_id"].as_str().context("no run id")?.to_owned();
        let events = server
            .events_until(
                &token,
                &conversation,
                last_event,
                Duration::from_secs(120),
                |e| {
                    e["type"] == "run_status"
                        && e["run"]["id"] == run.as_str()
                        && ["completed", "failed", "cancelled"]
                            .iter()
                            .any(|s| e["run"]["status"] == *s)
                },
            )
            .await;
        last_event = events
            .iter()
            .filter_map(|e| e["id"].as_i64())
            .max()
            .unwrap_or(last_event);
        let ended = events.last().map(|e| e["run"].clone()).unwrap_or_default();
        if ended["status"] != "completed" {
            bail!("turn {}: the run ended {ended}", index + 1);
        }
        if llm.queued() != 0 {
            bail!(
                "turn {}: the model was asked fewer times than scripted",
                index + 1
            );
        }
        let new = llm.requests_since(seen);
        seen += new.len();
        let mut chat_requests = 0;
        for body in &new {
            if let Some(dir) = dump {
                let file = dir.join(format!("{:03}-{:02}.json", index + 1, measured.len()));
                std::fs::write(&file, serde_json::to_string_pretty(body)?)
                    .with_context(|| format!("writing {}", file.display()))?;
            }
            let summary = is_summary(body);
            measured.push(measure(session, index + 1, expected, body));
            if summary {
                continue;
            }
            // The first chat request of a turn is the one the turn's first reply answers:
            // after it the new script version exists and the image is answered.
            if chat_requests == 0 {
                match turn.kind {
                    Kind::Rewrite(version) => expected.newest = Some(version),
                    Kind::Image(image) => expected.answered = image + 1,
                    Kind::Chat | Kind::Tool => {}
                }
            }
            chat_requests += 1;
        }
        if chat_requests != turn.replies.len() {
            bail!(
                "turn {}: {chat_requests} model requests for {} scripted replies",
                index + 1,
                turn.replies.len()
            );
        }
    }
    Ok(measured)
}

/// Sizes of a set of requests, in characters of the JSON body the model received.
struct Sizes {
    count: usize,
    total: usize,
    peak: usize,
}

impl Sizes {
    fn of<'a>(requests: impl Iterator<Item = &'a Measured>) -> Self {
        let mut sizes = Sizes {
            count: 0,
            total: 0,
            peak: 0,
        };
        for request in requests {
            sizes.count += 1;
            sizes.total += request.chars;
            sizes.peak = sizes.peak.max(request.chars);
        }
        sizes
    }

    fn mean(&self) -> f64 {
        self.total as f64 / self.count.max(1) as f64
    }
}

fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "–".to_owned()
    } else {
        format!("{:.2}", a / b)
    }
}

/// "hits / of (turns a–b)" for the requests that match.
fn count(requests: &[&Measured], matches: impl Fn(&Measured) -> bool) -> String {
    let hits: Vec<&&Measured> = requests.iter().filter(|r| matches(r)).collect();
    let mut cell = format!("{} / {}", hits.len(), requests.len());
    if let (Some(first), Some(last)) = (hits.first(), hits.last())
        && hits.len() != requests.len()
    {
        cell.push_str(&format!(" (turns {}–{})", first.turn, last.turn));
    }
    cell
}

fn report(
    turns: usize,
    chain: Option<&str>,
    session: &Session,
    shipped: &[Measured],
    naive: &[Measured],
) {
    // A chain given on the command line is reported as "tried", not as the product.
    let (label, described) = match chain {
        None => (
            "shipped",
            "**shipped**: default middleware chain and settings.".to_owned(),
        ),
        Some(chain) => (
            "tried",
            format!("**tried**: `TOOLGATE_MIDDLEWARE={chain}`, default settings."),
        ),
    };
    let images = session.image_marks.len();
    let tool_turns = session
        .turns
        .iter()
        .filter(|t| t.kind == Kind::Tool)
        .count();
    println!("\n## Context fidelity (replay)\n");
    println!(
        "One scripted session of {turns} user turns (turn 1 states the task with five requirements; \
         {} rewrites of `{SCRIPT_PATH}` through a keyed tool, {} to {} KB each; {images} images; \
         {tool_turns} other tool calls; chat in between) replayed through the server against a \
         scripted mock model. {described} **naive**: `TOOLGATE_MIDDLEWARE={NAIVE_CHAIN}`, \
         the whole history every time.\n",
        session.versions.len(),
        session.versions.first().map_or(0, |v| v.len() / 1000),
        session
            .versions
            .last()
            .map_or(0, |v| v.len().div_ceil(1000)),
    );
    let all = |m: &[Measured]| Sizes::of(m.iter());
    let (s, n) = (all(shipped), all(naive));
    let shipped_chat = Sizes::of(shipped.iter().filter(|m| !m.summary));
    let shipped_summary = Sizes::of(shipped.iter().filter(|m| m.summary));
    println!("### Size (characters of the request bodies the model received)\n");
    println!("| run | requests | of which summary | total | peak | mean |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    for (label, sizes, summaries) in [
        (label, &s, shipped_summary.count),
        ("naive", &n, naive.iter().filter(|m| m.summary).count()),
    ] {
        println!(
            "| {label} | {} | {summaries} | {} | {} | {} |",
            sizes.count,
            thousands(sizes.total),
            thousands(sizes.peak),
            thousands(sizes.mean().round() as usize)
        );
    }
    println!(
        "| **{label} / naive** | | | **{}** | **{}** | **{}** |",
        ratio(s.total as f64, n.total as f64),
        ratio(s.peak as f64, n.peak as f64),
        ratio(s.mean(), n.mean())
    );
    println!(
        "\n{label}: largest chat request {} characters, largest summary request {}.\n",
        thousands(shipped_chat.peak),
        thousands(shipped_summary.peak)
    );

    let shipped_chat: Vec<&Measured> = shipped.iter().filter(|r| !r.summary).collect();
    let shipped_summaries: Vec<&Measured> = shipped.iter().filter(|r| r.summary).collect();
    let naive_chat: Vec<&Measured> = naive.iter().filter(|r| !r.summary).collect();
    println!("### Fidelity (requests, and the turns of the first and last one counted)\n");
    println!("| requests … | goal | {label}: chat | {label}: summary | naive: chat |");
    println!("| --- | --- | --- | --- | --- |");
    type Metric = (&'static str, &'static str, fn(&Measured) -> bool);
    let metrics: [Metric; 6] = [
        ("containing turn 1 verbatim", "all chat", |m| {
            m.has_first_request
        }),
        ("containing all five requirements", "all chat", |m| {
            m.has_requirements
        }),
        ("with a dangling turn", "0", |m| m.dangling.is_some()),
        ("missing the current script", "0 chat", |m| {
            m.missing_current
        }),
        ("with a superseded script version", "0", |m| {
            m.stale_versions > 0
        }),
        ("with an answered image's data", "0", |m| m.stale_images > 0),
    ];
    for (label, goal, matches) in metrics {
        println!(
            "| {label} | {goal} | {} | {} | {} |",
            count(&shipped_chat, matches),
            count(&shipped_summaries, matches),
            count(&naive_chat, matches)
        );
    }
    let most = |m: &[&Measured], f: fn(&Measured) -> usize| m.iter().map(|r| f(r)).max();
    println!(
        "\nMost stale payloads in one request: {label} chat {} versions / {} images, {label} summary {} / {}, naive {} / {}.",
        most(&shipped_chat, |m| m.stale_versions).unwrap_or(0),
        most(&shipped_chat, |m| m.stale_images).unwrap_or(0),
        most(&shipped_summaries, |m| m.stale_versions).unwrap_or(0),
        most(&shipped_summaries, |m| m.stale_images).unwrap_or(0),
        most(&naive_chat, |m| m.stale_versions).unwrap_or(0),
        most(&naive_chat, |m| m.stale_images).unwrap_or(0),
    );
    if let Some(example) = shipped.iter().find_map(|m| {
        m.dangling
            .as_ref()
            .map(|why| format!("turn {}: {why}", m.turn))
    }) {
        println!("First dangling turn ({label}): {example}.");
    }
    println!(
        "\nDefinitions, over every request body the mock model received (a request's text: \
         every string in its messages, tool-call arguments opened up):\n\
         - *chat* requests carry the tools; *summary* requests are the summarisation \
         middleware's (no tools, a system prompt starting \"Summarise\"). A summary request \
         covers only what is being summarised, so turn 1, the requirements and the current \
         script are not expected in it; its goal is no stale payload.\n\
         - *turn 1 verbatim*: the whole text of the first user message appears in one string.\n\
         - *all five requirements*: each requirement phrase of turn 1 appears somewhere; the \
         mock's summaries never restate them, so they count only where the server kept them.\n\
         - *dangling turn*: a user message with no assistant message before the next user \
         message (the last user message excepted), a tool result without its call before it, \
         or a tool call without its result after it.\n\
         - *missing the current script*: after the first version was written, the newest \
         version's full text is not in the request.\n\
         - *superseded script version*: the marker line of any older version appears (even \
         shortened). *answered image's data*: 64 characters from the middle of an image's \
         data appear, after the model has answered that image."
    );
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let mut turns = TURNS;
    let mut chain = None;
    let mut dump: Option<PathBuf> = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dump" => {
                dump = Some(PathBuf::from(args.next().context("--dump needs a folder")?));
            }
            "--middleware" => {
                chain = Some(args.next().context("--middleware needs a list of names")?);
            }
            "--turns" => {
                turns = args
                    .next()
                    .and_then(|n| n.parse().ok())
                    .filter(|n| *n >= 1)
                    .context("--turns needs a number of turns")?;
            }
            other => bail!(
                "unknown argument {other}; usage: context-replay [--turns N] [--middleware LIST] [--dump DIR]"
            ),
        }
    }
    let session = Session::scripted(turns)?;
    let started = Instant::now();
    let folder = |run: &str| -> Result<Option<PathBuf>> {
        let Some(dir) = &dump else { return Ok(None) };
        let dir = dir.join(run);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(Some(dir))
    };
    let shipped = replay(&session, chain.as_deref(), folder("shipped")?.as_deref())
        .await
        .context("replaying with the default chain")?;
    eprintln!("shipped run replayed in {:.0?}", started.elapsed());
    let started = Instant::now();
    let naive = replay(&session, Some(NAIVE_CHAIN), folder("naive")?.as_deref())
        .await
        .context("replaying with the whole history")?;
    eprintln!("naive run replayed in {:.0?}", started.elapsed());
    report(turns, chain.as_deref(), &session, &shipped, &naive);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::tests::SUMMARY_PREFIX;

    fn user(text: &str) -> Value {
        json!({"role": "user", "content": [{"type": "text", "text": text}]})
    }

    fn answer(text: &str) -> Value {
        json!({"role": "assistant", "content": text})
    }

    fn call(id: &str, arguments: Value) -> Value {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": "save_file", "arguments": arguments.to_string()}}]})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "{\"saved\":true}"})
    }

    fn chat(messages: Vec<Value>) -> Value {
        json!({"model": "m", "messages": messages, "tools": [{"type": "function"}]})
    }

    #[test]
    fn whole_turns_are_not_dangling_and_the_current_question_may_be_open() {
        let body = chat(vec![
            json!({"role": "system", "content": "You help."}),
            user("one"),
            call("c1", json!({"path": "a"})),
            result("c1"),
            answer("done"),
            user("two"),
        ]);
        assert_eq!(dangling_turn(&body), None);
    }

    #[test]
    fn a_question_without_answer_a_result_without_call_and_a_call_without_result_dangle() {
        let unanswered = chat(vec![user("one"), user("two"), answer("x"), user("three")]);
        assert!(dangling_turn(&unanswered).is_some_and(|why| why.contains("no answer")));
        let orphan_result = chat(vec![user("one"), result("c1"), answer("x"), user("two")]);
        assert!(dangling_turn(&orphan_result).is_some_and(|why| why.contains("has no call")));
        let orphan_call = chat(vec![user("one"), call("c1", json!({})), user("two")]);
        assert!(dangling_turn(&orphan_call).is_some_and(|why| why.contains("has no result")));
        // The summary is sent as the assistant's words but is no answer to the turn before.
        let summarised = chat(vec![
            user("one"),
            answer(&format!("{SUMMARY_PREFIX}\nearlier turns")),
            user("two"),
        ]);
        assert!(dangling_turn(&summarised).is_some_and(|why| why.contains("no answer")));
    }

    #[test]
    fn summary_requests_are_told_from_chat_requests() {
        let summary = json!({"model": "m", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "Summarise the conversation"}]},
            user("one")]});
        assert!(is_summary(&summary));
        assert!(!is_summary(&chat(vec![user("Summarise this")])));
    }

    #[test]
    fn a_script_inside_tool_arguments_is_found_as_written_and_old_versions_are_stale() {
        let session = Session::scripted(30).expect("session");
        let body = chat(vec![
            user(&session.first_request),
            call(
                "c1",
                json!({"path": SCRIPT_PATH, "text": session.versions[0]}),
            ),
            result("c1"),
            call(
                "c2",
                json!({"path": SCRIPT_PATH, "text": session.versions[1]}),
            ),
            result("c2"),
            answer("saved"),
            user("next"),
        ]);
        let expected = Expected {
            newest: Some(2),
            answered: 0,
        };
        let measured = measure(&session, 20, expected, &body);
        assert!(measured.has_first_request && measured.has_requirements);
        assert!(!measured.missing_current);
        assert_eq!(measured.stale_versions, 1);
        let expected = Expected {
            newest: Some(3),
            answered: 0,
        };
        assert!(measure(&session, 20, expected, &body).missing_current);
    }

    #[test]
    fn the_session_has_the_shape_the_report_describes() {
        let session = Session::scripted(TURNS).expect("session");
        assert_eq!(session.turns.len(), TURNS);
        assert_eq!(session.versions.len(), 20);
        assert_eq!(session.image_marks.len(), 10);
        let tools = session
            .turns
            .iter()
            .filter(|t| t.kind == Kind::Tool)
            .count();
        assert_eq!(tools, 30);
        assert!(
            session
                .versions
                .iter()
                .all(|v| (3_000..8_000).contains(&v.len()))
        );
        assert!(
            REQUIREMENTS
                .iter()
                .all(|r| session.first_request.contains(r))
        );
    }
}
