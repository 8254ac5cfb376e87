//! The offline built-in model: no network, no weights, deterministic. It picks the
//! tool whose name and description best match the user's words, fills the arguments it
//! can read from the message (numbers, quarters, dates, quoted strings, arithmetic, a
//! simple query), calls it, and answers from the tool's result in plain language.
//! Every reply says it comes from the offline model.

use std::collections::BTreeSet;

use chrono::{Datelike, NaiveDate, Utc};
use futures::future::BoxFuture;
use protocol::api::ToolOutcome;
use protocol::chat::{ContentBlock, Role};
use serde_json::{Map, Value, json};

use crate::agent::model::{
    ChatMessage, DeltaSink, ModelError, ModelProvider, ModelReply, ModelRequest, Purpose,
    RequestedCall, ToolSpec,
};
use crate::demo::vocabulary;
use crate::requests::words::{self, UserEnding};

pub const OFFLINE_MODEL: &str = "toolgate-offline";
const PREFIX: &str = "(offline model) ";

pub struct OfflineModel;

impl ModelProvider for OfflineModel {
    fn kind(&self) -> &'static str {
        "offline"
    }

    fn default_model(&self) -> &str {
        OFFLINE_MODEL
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        deltas: DeltaSink<'a>,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            let reply = respond(request, Utc::now().date_naive());
            // Stream word by word, as a real model would.
            let mut words = reply.text.split_inclusive(' ').peekable();
            while let Some(word) = words.next() {
                deltas(word.to_owned());
                if words.peek().is_some() {
                    tokio::task::yield_now().await;
                }
            }
            Ok(reply)
        })
    }
}

/// The whole decision, without I/O: what the offline model answers to `request`.
pub fn respond(request: &ModelRequest, today: NaiveDate) -> ModelReply {
    let model = request.model.clone();
    if request.purpose == Purpose::Summary {
        return ModelReply {
            text: summarise(&request.messages),
            tool_calls: Vec::new(),
            model,
        };
    }
    let last_user = request.messages.iter().rposition(|m| m.role == Role::User);
    let Some(last_user) = last_user else {
        return ModelReply {
            text: format!("{PREFIX}Hello! Ask me something and I will pick a tool for it."),
            tool_calls: Vec::new(),
            model,
        };
    };
    let since = &request.messages[last_user + 1..];
    if since.iter().any(|m| m.role == Role::Tool) {
        return ModelReply {
            text: answer_from_results(since),
            tool_calls: Vec::new(),
            model,
        };
    }
    let user_text = request.messages[last_user].plain_text();
    let mut calls = Vec::new();
    let mut missing = Vec::new();
    for clause in clauses(&user_text) {
        let Some(tool) = best_tool(&clause, &request.tools) else {
            continue;
        };
        if calls.iter().any(|c: &RequestedCall| c.name == tool.name) {
            continue;
        }
        match fill_arguments(tool, &clause, today) {
            Ok(arguments) => calls.push(RequestedCall {
                id: crate::agent::model::fresh_call_id(),
                name: tool.name.clone(),
                arguments,
                refused: None,
            }),
            Err(needed) => missing.push((tool.name.clone(), needed)),
        }
    }
    if !calls.is_empty() {
        let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
        return ModelReply {
            text: format!("{PREFIX}Calling {}.", names.join(" and ")),
            tool_calls: calls,
            model,
        };
    }
    let text = if let Some((tool, needed)) = missing.first() {
        format!("{PREFIX}To use {tool} I need {needed}. Please say it in your message.")
    } else if request.tools.is_empty() {
        format!("{PREFIX}I have no tools available, so I cannot act on that.")
    } else {
        let listed: Vec<String> = request
            .tools
            .iter()
            .map(|t| format!("{} ({})", t.name, t.description))
            .collect();
        format!(
            "{PREFIX}I did not find a tool for that. I can use: {}.",
            listed.join("; ")
        )
    };
    ModelReply {
        text,
        tool_calls: Vec::new(),
        model,
    }
}

fn clauses(text: &str) -> Vec<String> {
    let lowered = text.replace(';', " and ");
    let parts: Vec<String> = lowered
        .split(" and ")
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    if parts.len() > 1 {
        // Each part alone, and the whole, so a tool whose words span parts still wins.
        let mut all = parts;
        all.push(text.to_owned());
        all
    } else {
        vec![text.to_owned()]
    }
}

fn words(text: &str) -> BTreeSet<String> {
    let lowered = text.to_lowercase();
    let expanded = vocabulary::EXPANSIONS
        .iter()
        .fold(lowered, |text, (short, long)| text.replace(short, long));
    expanded
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() >= 3 && !vocabulary::STOPWORDS.contains(w))
        .map(stem)
        .collect()
}

fn stem(word: &str) -> String {
    for (group, canonical) in vocabulary::SYNONYMS {
        if group.contains(&word) {
            return (*canonical).to_owned();
        }
    }
    word.strip_suffix('s')
        .filter(|w| w.len() >= 3)
        .unwrap_or(word)
        .to_owned()
}

fn has_arithmetic(text: &str) -> bool {
    expression_in(text).is_some()
}

fn best_tool<'a>(text: &str, tools: &'a [ToolSpec]) -> Option<&'a ToolSpec> {
    let wanted = words(text);
    tools
        .iter()
        .map(|tool| {
            let mut offered = words(&tool.name.replace(['_', '-'], " "));
            offered.extend(words(&tool.description));
            let mut score = wanted.intersection(&offered).count() * 2;
            if tool.parameters.pointer("/properties/expression").is_some() && has_arithmetic(text) {
                score += 3;
            }
            (score, tool)
        })
        .filter(|(score, _)| *score >= 2)
        .max_by_key(|(score, tool)| (*score, std::cmp::Reverse(tool.name.clone())))
        .map(|(_, tool)| tool)
}

/// Fills what the tool's schema asks for from the text; `Err` names what is missing.
fn fill_arguments(
    tool: &ToolSpec,
    text: &str,
    today: NaiveDate,
) -> Result<Map<String, Value>, String> {
    let mut arguments = Map::new();
    let Some(properties) = tool.parameters.get("properties").and_then(Value::as_object) else {
        return Ok(arguments);
    };
    let period = period_in(text, today);
    let mut numbers = numbers_in(text).into_iter();
    let quoted = quoted_in(text);
    for (name, schema) in properties {
        let kind = schema
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("string");
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let lowered = name.to_lowercase();
        let is_date = lowered.contains("date") || description.contains("YYYY-MM-DD");
        let value = if is_date && (lowered.contains("start") || lowered.contains("from")) {
            Some(json!(period.0.to_string()))
        } else if is_date && (lowered.contains("end") || lowered.contains("to")) {
            Some(json!(period.1.to_string()))
        } else if lowered == "expression" {
            expression_in(text).map(Value::String)
        } else if lowered == "query" || lowered == "sql" {
            Some(Value::String(vocabulary::query_for(
                text,
                &tool.description,
            )))
        } else if kind == "number" || kind == "integer" {
            numbers.next().map(|n| json!(n))
        } else if kind == "string" {
            quoted.first().map(|q| Value::String(q.clone()))
        } else {
            None
        };
        if let Some(value) = value {
            arguments.insert(name.clone(), value);
        }
    }
    let required = tool
        .parameters
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str);
    for name in required {
        if !arguments.contains_key(name) {
            let description = tool
                .parameters
                .pointer(&format!("/properties/{name}/description"))
                .and_then(Value::as_str)
                .unwrap_or(name);
            return Err(format!("`{name}` ({description})"));
        }
    }
    Ok(arguments)
}

/// The period a text names: "Q1 2025", "March 2025", "2025", two ISO dates; otherwise
/// the last full quarter.
fn period_in(text: &str, today: NaiveDate) -> (NaiveDate, NaiveDate) {
    let lowered = text.to_lowercase();
    let tokens: Vec<&str> = lowered
        .split(|c: char| !c.is_alphanumeric() && c != '-')
        .filter(|t| !t.is_empty())
        .collect();
    let dates: Vec<NaiveDate> = tokens
        .iter()
        .filter_map(|t| NaiveDate::parse_from_str(t, "%Y-%m-%d").ok())
        .collect();
    if dates.len() >= 2 {
        return (dates[0].min(dates[1]), dates[0].max(dates[1]));
    }
    let year = tokens
        .iter()
        .filter_map(|t| t.parse::<i32>().ok())
        .find(|y| (1990..=2100).contains(y));
    let quarter = tokens.iter().find_map(|t| match *t {
        "q1" => Some(1),
        "q2" => Some(2),
        "q3" => Some(3),
        "q4" => Some(4),
        _ => None,
    });
    const MONTHS: [&str; 12] = [
        "january",
        "february",
        "march",
        "april",
        "may",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ];
    let month = tokens
        .iter()
        .find_map(|t| MONTHS.iter().position(|m| m == t).map(|i| i as u32 + 1));
    let year_or_now = year.unwrap_or(today.year());
    let month_span = |y: i32, first: u32, months: u32| {
        let start = NaiveDate::from_ymd_opt(y, first, 1).unwrap_or(today);
        let next = if first + months > 12 {
            NaiveDate::from_ymd_opt(y + 1, first + months - 12, 1)
        } else {
            NaiveDate::from_ymd_opt(y, first + months, 1)
        };
        let end = next.and_then(|d| d.pred_opt()).unwrap_or(today);
        (start, end)
    };
    if let Some(q) = quarter {
        return month_span(year_or_now, (q - 1) * 3 + 1, 3);
    }
    if let Some(m) = month {
        return month_span(year_or_now, m, 1);
    }
    if let Some(y) = year {
        return month_span(y, 1, 12);
    }
    let current_quarter_start = ((today.month() - 1) / 3) * 3 + 1;
    let (y, first) = if current_quarter_start == 1 {
        (today.year() - 1, 10)
    } else {
        (today.year(), current_quarter_start - 3)
    };
    month_span(y, first, 3)
}

fn numbers_in(text: &str) -> Vec<f64> {
    text.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|t| t.parse::<f64>().ok())
        .collect()
}

fn quoted_in(text: &str) -> Vec<String> {
    text.split(['"', '“', '”'])
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .filter(|q| !q.trim().is_empty())
        .collect()
}

/// The longest run of arithmetic in the text that has a digit and an operator.
fn expression_in(text: &str) -> Option<String> {
    let normalised = text
        .replace('×', "*")
        .replace('÷', "/")
        .replace(" x ", " * ");
    let allowed = |c: char| c.is_ascii_digit() || " .+-*/()^%".contains(c);
    normalised
        .split(|c: char| !allowed(c))
        .map(str::trim)
        .filter(|run| {
            run.chars().any(|c| c.is_ascii_digit())
                && run.chars().any(|c| "+-*/^%".contains(c))
                && run.chars().filter(|c| c.is_ascii_digit()).count() >= 2
        })
        .max_by_key(|run| run.len())
        .map(|run| run.trim_matches(|c: char| "+-*/^% ".contains(c)).to_owned())
        .filter(|run| !run.is_empty())
}

fn answer_from_results(since_user: &[ChatMessage]) -> String {
    let mut lines = Vec::new();
    for message in since_user.iter().filter(|m| m.role == Role::Tool) {
        for block in &message.content {
            if let ContentBlock::ToolResult { name, outcome, .. } = block {
                lines.push(describe_outcome(name, outcome));
            }
        }
    }
    format!("{PREFIX}{}", lines.join("\n\n"))
}

fn describe_outcome(tool: &str, outcome: &ToolOutcome) -> String {
    if !outcome.success {
        let error = outcome.error.as_deref().unwrap_or("it failed");
        // Only toolgate's own words for the user's choice: a tool's error that merely
        // says "rejected" must not become a decision the user never took.
        return match words::user_ending(error) {
            Some(UserEnding::Declined) => format!(
                "You declined to provide what {tool} needs, so I did not run it and will not ask for it again."
            ),
            Some(UserEnding::Rejected) => format!("You rejected the call, so {tool} did not run."),
            Some(UserEnding::Cancelled) => {
                format!("You cancelled the request for input, so I did not run {tool}.")
            }
            Some(UserEnding::Expired) => format!(
                "The request for input expired, so I did not run {tool}. Ask again when you are ready."
            ),
            None => format!("{tool} did not succeed: {error}"),
        };
    }
    let result = outcome.result.clone().unwrap_or(Value::Null);
    if let Some(summary) = result.get("Summary") {
        let money = |key: &str| {
            summary
                .get(key)
                .and_then(Value::as_f64)
                .map(|v| format!("${v:.2}"))
                .unwrap_or_else(|| "unknown".to_owned())
        };
        let start = result
            .pointer("/Header/StartPeriod")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let end = result
            .pointer("/Header/EndPeriod")
            .and_then(Value::as_str)
            .unwrap_or("?");
        let mut text = format!(
            "Profit and Loss from {start} to {end}: total income {}, total expenses {}, net income {}.",
            money("TotalIncome"),
            money("TotalExpenses"),
            money("NetIncome")
        );
        if let Some(note) = result.get("Note").and_then(Value::as_str) {
            text.push(' ');
            text.push_str(note);
        }
        return text;
    }
    if let Some(rows) = result.get("rows").and_then(Value::as_array) {
        let database = result
            .get("database")
            .and_then(Value::as_str)
            .unwrap_or("the");
        let mut text = format!("The {database} database returned {} row(s)", rows.len());
        if result.get("truncated").and_then(Value::as_bool) == Some(true) {
            text.push_str(" (more were left out)");
        }
        text.push(':');
        for row in rows.iter().take(10) {
            let cells: Vec<String> = row
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k}: {}", plain(v)))
                        .collect()
                })
                .unwrap_or_default();
            text.push_str(&format!("\n- {}", cells.join(", ")));
        }
        return text;
    }
    if let (Some(expression), Some(value)) = (result.get("expression"), result.get("value")) {
        return format!("{} = {}", plain(expression), plain(value));
    }
    // An MCP tool's answer: its text, said as it is.
    if let Some(text) = result.get("text").and_then(Value::as_str)
        && !text.trim().is_empty()
    {
        let shown: String = text.chars().take(1000).collect();
        return format!("{tool}: {shown}");
    }
    let shown: String = result.to_string().chars().take(500).collect();
    format!("{tool} returned: {shown}")
}

fn plain(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// An extractive summary: what the user asked and what the tools found.
fn summarise(messages: &[ChatMessage]) -> String {
    let mut lines = vec![format!("{PREFIX}Summary of the earlier conversation:")];
    for message in messages {
        match message.role {
            // An earlier summary: its points carry over.
            Role::System => {
                for line in message.plain_text().lines().skip(1) {
                    let line = line.trim_start_matches(PREFIX).trim();
                    if line.starts_with("- ") {
                        lines.push(line.to_owned());
                    }
                }
            }
            Role::User => {
                let text: String = message.plain_text().chars().take(160).collect();
                lines.push(format!("- The user asked: {text}"));
            }
            Role::Tool => {
                for block in &message.content {
                    if let ContentBlock::ToolResult { name, outcome, .. } = block {
                        let status = if outcome.success {
                            "succeeded"
                        } else {
                            "failed"
                        };
                        lines.push(format!("- {name} {status}."));
                    }
                }
            }
            _ => {}
        }
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "quickbooks_profit_and_loss".into(),
                description: "Get the QuickBooks Profit and Loss (P&L) report for a period: income, expenses and net income".into(),
                parameters: json!({"type": "object", "required": ["start_date", "end_date"], "properties": {
                    "start_date": {"type": "string", "description": "First day of the period, YYYY-MM-DD"},
                    "end_date": {"type": "string", "description": "Last day of the period, YYYY-MM-DD"}}}),
            },
            ToolSpec {
                name: "query_database".into(),
                description: "Run a read-only SQL query on a company database (production, staging or development) with tables customers(id, name) and orders(id, total)".into(),
                parameters: json!({"type": "object", "required": ["query"], "properties": {"query": {"type": "string"}}}),
            },
            ToolSpec {
                name: "calculator".into(),
                description: "Calculate an arithmetic expression: sums, percentages, totals, differences".into(),
                parameters: json!({"type": "object", "required": ["expression"], "properties": {"expression": {"type": "string"}}}),
            },
        ]
    }

    #[test]
    fn a_tools_error_never_becomes_a_decision_the_user_took() {
        for error in [
            "the service answered HTTP 403 Forbidden: Request rejected by WAF",
            "the tool of the MCP server `files` failed: declined",
            "the tool of the MCP server `files` failed: The user rejected this call of `x`",
            "the service answered HTTP 401 Unauthorized: token expired",
        ] {
            let said = describe_outcome("deploy", &ToolOutcome::failed(error));
            assert!(said.starts_with("deploy did not succeed: "), "{said}");
        }
    }

    fn ask(text: &str) -> ModelReply {
        let request = ModelRequest {
            model: OFFLINE_MODEL.into(),
            system: vec![],
            messages: vec![ChatMessage::text(Role::User, text)],
            tools: tools(),
            purpose: Purpose::Chat,
        };
        respond(
            &request,
            NaiveDate::from_ymd_opt(2026, 11, 22).expect("date"),
        )
    }

    #[test]
    fn the_seed_pl_request_picks_quickbooks_with_the_quarter() {
        let reply = ask("Get my P&L report for Q1 2025");
        assert_eq!(reply.tool_calls.len(), 1);
        let call = &reply.tool_calls[0];
        assert_eq!(call.name, "quickbooks_profit_and_loss");
        assert_eq!(call.arguments["start_date"], "2025-01-01");
        assert_eq!(call.arguments["end_date"], "2025-03-31");
    }

    #[test]
    fn database_questions_pick_the_sql_tool() {
        let reply = ask("Which database should I query for how many customers we have?");
        assert_eq!(reply.tool_calls[0].name, "query_database");
        assert_eq!(
            reply.tool_calls[0].arguments["query"],
            "select count(*) as count from customers"
        );
    }

    #[test]
    fn arithmetic_goes_to_the_calculator() {
        let reply = ask("what is (1200 - 300) * 1.2?");
        assert_eq!(reply.tool_calls[0].name, "calculator");
        assert_eq!(
            reply.tool_calls[0].arguments["expression"],
            "(1200 - 300) * 1.2"
        );
    }

    #[test]
    fn two_requests_in_one_message_call_two_tools() {
        let reply = ask("Get my P&L for Q2 2025 and query the customers database");
        let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["quickbooks_profit_and_loss", "query_database"]);
    }

    #[test]
    fn periods_are_read_from_words() {
        let today = NaiveDate::from_ymd_opt(2026, 2, 10).expect("date");
        let d = |y, m, day| NaiveDate::from_ymd_opt(y, m, day).expect("date");
        assert_eq!(
            period_in("march 2024", today),
            (d(2024, 3, 1), d(2024, 3, 31))
        );
        assert_eq!(
            period_in("for 2023", today),
            (d(2023, 1, 1), d(2023, 12, 31))
        );
        assert_eq!(
            period_in("from 2025-02-01 to 2025-01-01", today),
            (d(2025, 1, 1), d(2025, 2, 1))
        );
        assert_eq!(
            period_in("last quarter", today),
            (d(2025, 10, 1), d(2025, 12, 31))
        );
    }

    #[test]
    fn unknown_requests_list_the_tools_and_say_offline() {
        let reply = ask("tell me a joke");
        assert!(reply.tool_calls.is_empty());
        assert!(reply.text.starts_with(PREFIX));
        assert!(reply.text.contains("calculator"));
    }

    #[test]
    fn an_mcp_tools_text_is_said_plainly() {
        let outcome = ToolOutcome::ok(json!({"text": "Meeting 1 drafted in Harbour."}));
        assert_eq!(
            describe_outcome("calendar__plan_meeting", &outcome),
            "calendar__plan_meeting: Meeting 1 drafted in Harbour."
        );
    }

    #[test]
    fn answers_come_from_tool_results() {
        let outcome = ToolOutcome::ok(
            json!({"Header": {"StartPeriod": "2025-01-01", "EndPeriod": "2025-03-31"},
            "Summary": {"TotalIncome": 100.0, "TotalExpenses": 40.0, "NetIncome": 60.0}}),
        );
        let request = ModelRequest {
            model: OFFLINE_MODEL.into(),
            system: vec![],
            messages: vec![
                ChatMessage::text(Role::User, "Get my P&L report for Q1 2025"),
                ChatMessage {
                    role: Role::Tool,
                    content: vec![ContentBlock::ToolResult {
                        tool_call_id: "c".into(),
                        name: "quickbooks_profit_and_loss".into(),
                        outcome,
                    }],
                    seq: None,
                    pinned: false,
                },
            ],
            tools: tools(),
            purpose: Purpose::Chat,
        };
        let reply = respond(&request, NaiveDate::from_ymd_opt(2026, 1, 1).expect("date"));
        assert!(reply.tool_calls.is_empty());
        assert!(reply.text.contains("net income $60.00"), "{}", reply.text);
        assert!(reply.text.starts_with(PREFIX));
    }
}
