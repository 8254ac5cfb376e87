//! The words the offline model knows: what it ignores, what it reads as the same
//! thing, and the example tools' own terms (the P&L report, the sample databases'
//! tables). The model's logic lives in `agent::providers::offline`; this is its
//! vocabulary, tuned to the example tools file.

/// Words that say nothing about which tool to pick.
pub const STOPWORDS: &[&str] = &[
    "the", "and", "for", "get", "my", "me", "please", "what", "which", "should", "can", "you",
    "with", "from", "this", "that", "our", "your", "give", "show", "tell", "about", "into", "are",
    "was", "how", "much", "many", "all", "any", "use", "run", "want", "need", "some", "its", "one",
    "two", "out", "a", "an", "of", "to", "in", "on", "is", "it", "i", "do", "be",
];

/// Short forms written out before the words are compared.
pub const EXPANSIONS: &[(&str, &str)] = &[
    ("p&l", " profit loss "),
    ("pnl", " profit loss "),
    ("sql", " sql query database "),
    (" db ", " database "),
];

/// Words read as one canonical word.
pub const SYNONYMS: &[(&[&str], &str)] = &[
    (
        &[
            "calculate",
            "compute",
            "calculation",
            "plus",
            "minus",
            "times",
            "divided",
            "sum",
            "arithmetic",
        ],
        "calculate",
    ),
    (&["databases", "table", "tables", "rows"], "database"),
    (&["queries"], "query"),
    (&["earnings", "income"], "income"),
    (&["webhook", "post", "message", "channel"], "webhook"),
];

/// A simple, safe SELECT from the words of the request and the tables the tool's
/// description names.
pub fn query_for(text: &str, description: &str) -> String {
    let lowered = text.to_lowercase();
    let tables: Vec<&str> = ["customers", "orders"]
        .into_iter()
        .filter(|t| description.contains(t))
        .collect();
    let table = tables
        .iter()
        .find(|t| lowered.contains(t.trim_end_matches('s')))
        .or(tables.first())
        .copied()
        .unwrap_or("customers");
    if lowered.contains("how many") || lowered.contains("count") {
        format!("select count(*) as count from {table}")
    } else if table == "orders"
        && (lowered.contains("total") || lowered.contains("revenue") || lowered.contains("sum"))
    {
        "select sum(total) as total, count(*) as orders from orders".to_owned()
    } else {
        format!("select * from {table} order by 1 limit 10")
    }
}
