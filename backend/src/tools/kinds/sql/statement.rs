//! What a sql tool lets through: exactly one read-only query, decided by parsing it
//! (PostgreSQL dialect), never by wrapping its text.
//!
//! The text that runs is the parsed statement printed back, not the caller's text, and
//! it must parse back to the same tree: comments, odd quoting or escapes that Postgres
//! might read differently from the parser never reach the database.

use std::ops::ControlFlow;

use sqlparser::ast::{
    Expr, ObjectName, Query, Select, Statement, TableFactor, Value, Visit, Visitor,
};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, Tokenizer};

const LOCKS: &str = "it takes a lock that can outlive the query";
const WAITS: &str = "it only makes the query wait";
const SESSION: &str = "it changes the session's settings";
const OUTSIDE: &str = "it reaches files, large objects or other servers outside the tables";
const HIDDEN_SQL: &str = "it runs SQL text of its own, which cannot be checked";
const SERVER: &str = "it acts on the server or on other sessions";
const AS_ANOTHER_USER: &str = "it reads as a caller it names, through toolgate's own functions";

/// Functions a query may not call, by name (`*` ends a prefix), with the reason the
/// model is told. Everything else is left to the login's privileges and the read-only
/// transaction.
const REFUSED_FUNCTIONS: &[(&str, &str)] = &[
    ("pg_advisory_*", LOCKS),
    ("pg_try_advisory_*", LOCKS),
    ("pg_sleep*", WAITS),
    ("set_config", SESSION),
    ("dblink*", OUTSIDE),
    ("lo_*", OUTSIDE),
    ("loread", OUTSIDE),
    ("lowrite", OUTSIDE),
    ("pg_read_file*", OUTSIDE),
    ("pg_read_binary_file*", OUTSIDE),
    ("pg_ls_*", OUTSIDE),
    ("pg_stat_file", OUTSIDE),
    ("pg_file_*", OUTSIDE),
    ("query_to_xml*", HIDDEN_SQL),
    ("cursor_to_xml*", HIDDEN_SQL),
    ("table_to_xml*", HIDDEN_SQL),
    ("schema_to_xml*", HIDDEN_SQL),
    ("database_to_xml*", HIDDEN_SQL),
    ("ts_stat", HIDDEN_SQL),
    ("ts_rewrite", HIDDEN_SQL),
    ("crosstab*", HIDDEN_SQL),
    ("connectby", HIDDEN_SQL),
    ("pg_notify", SERVER),
    ("pg_cancel_backend", SERVER),
    ("pg_terminate_backend", SERVER),
    ("pg_reload_conf", SERVER),
    ("pg_rotate_logfile", SERVER),
    ("pg_promote", SERVER),
    ("pg_switch_wal", SERVER),
    ("pg_log_*", SERVER),
    ("pg_backup_*", SERVER),
    ("pg_create_*", SERVER),
    ("pg_drop_replication_slot", SERVER),
    ("pg_replication_*", SERVER),
    ("pg_logical_*", SERVER),
    ("pg_stat_reset*", SERVER),
    ("pg_stat_statements_reset", SERVER),
    // toolgate's one-round-trip reads take the caller as an argument; should a tool's
    // database ever be toolgate's own, under the server's login, they would read any
    // user's requests, values and history.
    ("toolgate_*", AS_ANOTHER_USER),
];

const ONE_QUERY: &str = "send exactly one read-only query (SELECT, WITH … SELECT or VALUES)";

/// The longest query accepted, in bytes and in tokens. The token count bounds how deep
/// a parse tree can get (each level takes at least one): the parser limits nesting of
/// parentheses, but not a chain like `1+1+1…` or `int[][]…`, and walking, printing,
/// comparing and dropping a tree all recurse.
const MAX_QUERY_BYTES: usize = 16 * 1024;
const MAX_QUERY_TOKENS: usize = 2000;

/// Expressions, subqueries and FROM items nested deeper than this are refused before
/// the tree is printed or compared.
const MAX_DEPTH: usize = 100;

/// The stack of the thread that checks one query: room for the deepest tree a query of
/// `MAX_QUERY_TOKENS` can make (only the part used is ever touched). An overflow would
/// abort the whole server, not just the call.
const CHECK_STACK_BYTES: usize = 64 * 1024 * 1024;

/// [`checked`] on a thread of its own, with a stack sized for the worst query.
pub async fn check(sql: String) -> Result<String, String> {
    let (sender, receiver) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("sql-check".into())
        .stack_size(CHECK_STACK_BYTES)
        .spawn(move || {
            let _ = sender.send(checked(&sql));
        })
        .map_err(|err| {
            tracing::error!(error = %err, "sql tool: could not start the checking thread");
            "the query could not be checked; try again".to_owned()
        })?;
    receiver
        .await
        .map_err(|_| "the query could not be checked; try again".to_owned())?
}

/// Checks `sql` and returns the text to run: the single query, printed back from its
/// parse tree. The error is a sentence the model can act on.
fn checked(sql: &str) -> Result<String, String> {
    if sql.len() > MAX_QUERY_BYTES {
        return Err(format!(
            "the query is longer than {MAX_QUERY_BYTES} bytes; {ONE_QUERY}, shorter"
        ));
    }
    // Tokenizing is a loop, safe on any input; a failure here is reported by the parser.
    let tokens: Vec<Token> = Tokenizer::new(&PostgreSqlDialect {}, sql)
        .tokenize()
        .unwrap_or_default()
        .into_iter()
        .filter(|token| !matches!(token, Token::Whitespace(_)))
        .collect();
    if tokens.len() > MAX_QUERY_TOKENS {
        return Err(format!(
            "the query has more than {MAX_QUERY_TOKENS} words and symbols; {ONE_QUERY}, shorter"
        ));
    }
    // Postgres ends an operator where `--` or `/*` begins and reads the rest as a
    // comment; the parser here reads the whole run as one operator. The two would then
    // disagree on what the query says, and what runs would not be what was checked.
    let hides_a_comment = |operator: &str| operator.contains("--") || operator.contains("/*");
    if tokens
        .iter()
        .any(|token| matches!(token, Token::CustomBinaryOperator(op) if hides_a_comment(op)))
    {
        return Err(format!(
            "the query has an operator that runs into a comment (`--` or `/*`); put a space \
             between them; {ONE_QUERY}"
        ));
    }
    // Postgres reads `$1a$` as the parameter `$1` and an alias, not as a quote's tag: a
    // tag must start as a name does. Otherwise what the parser here took for one string
    // would run as SQL.
    let tag_postgres_reads_otherwise = |tag: &str| {
        tag.chars()
            .next()
            .is_some_and(|first| !(first.is_alphabetic() || first == '_'))
    };
    if tokens.iter().any(|token| {
        matches!(token, Token::DollarQuotedString(quoted)
            if quoted.tag.as_deref().is_some_and(tag_postgres_reads_otherwise))
    }) {
        return Err(format!(
            "a dollar-quoted string's tag must start with a letter or `_`; {ONE_QUERY}"
        ));
    }
    let statement = single_statement(sql)?;
    let Statement::Query(query) = &statement else {
        let first_word = tokens.iter().find_map(|token| match token {
            Token::Word(word) => Some(word.value.to_uppercase()),
            _ => None,
        });
        return Err(format!(
            "only reading is allowed: {ONE_QUERY}, not {}",
            first_word.as_deref().unwrap_or("this statement")
        ));
    };
    if let ControlFlow::Break(refusal) = query.visit(&mut ReadOnly::default()) {
        return Err(refusal);
    }
    let text = statement.to_string();
    // What runs must mean what was checked: the printed text has to parse back to the
    // very same tree, or the printer and the parser disagree somewhere.
    match single_statement(&text) {
        Ok(again) if again == statement => Ok(text),
        _ => Err("the query uses syntax this tool cannot check; write it in plain SQL".into()),
    }
}

fn single_statement(sql: &str) -> Result<Statement, String> {
    let mut statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).map_err(|err| {
        let detail = match err {
            ParserError::RecursionLimitExceeded => "it is nested too deeply".to_owned(),
            ParserError::TokenizerError(detail) | ParserError::ParserError(detail) => detail,
        };
        format!("the query could not be parsed ({detail}); {ONE_QUERY}")
    })?;
    match statements.len() {
        1 => Ok(statements.remove(0)),
        0 => Err(format!("the query is empty; {ONE_QUERY}")),
        n => Err(format!("the query holds {n} statements; {ONE_QUERY}")),
    }
}

/// Walks the whole tree of the query, subqueries and CTEs included.
#[derive(Default)]
struct ReadOnly {
    depth: usize,
}

impl ReadOnly {
    fn enter(&mut self) -> ControlFlow<String> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            ControlFlow::Break(format!(
                "the query is nested too deeply (more than {MAX_DEPTH} levels); write it flatter"
            ))
        } else {
            ControlFlow::Continue(())
        }
    }

    fn leave(&mut self) -> ControlFlow<String> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

impl Visitor for ReadOnly {
    type Break = String;

    /// The walk starts below the top statement, so any statement met is nested: a
    /// data-modifying CTE (`WITH d AS (DELETE … RETURNING *) SELECT …`).
    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<String> {
        let kind = match statement {
            Statement::Insert(_) => "INSERT",
            Statement::Update(_) => "UPDATE",
            Statement::Delete(_) => "DELETE",
            Statement::Merge(_) => "MERGE",
            _ => "other statements",
        };
        ControlFlow::Break(format!(
            "only reading is allowed: a WITH clause may hold queries only, not {kind}"
        ))
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
        self.enter()?;
        if query.locks.is_empty() {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(
                "only reading is allowed: FOR UPDATE / FOR SHARE lock rows; remove the locking clause"
                    .into(),
            )
        }
    }

    fn post_visit_query(&mut self, _: &Query) -> ControlFlow<String> {
        self.leave()
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<String> {
        if select.into.is_none() {
            ControlFlow::Continue(())
        } else {
            ControlFlow::Break(
                "only reading is allowed: SELECT … INTO creates a table; remove the INTO clause"
                    .into(),
            )
        }
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        self.enter()?;
        match expr {
            Expr::Function(function) => allowed_function(&function.name),
            // The query is run inside a statement of the tool's own, whose parameters
            // these would name.
            Expr::Value(value) if matches!(value.value, Value::Placeholder(_)) => {
                ControlFlow::Break(
                    "parameters such as $1 are not supported; write the values into the query"
                        .into(),
                )
            }
            _ => ControlFlow::Continue(()),
        }
    }

    fn post_visit_expr(&mut self, _: &Expr) -> ControlFlow<String> {
        self.leave()
    }

    /// Set-returning functions in FROM (`FROM pg_advisory_lock(1)`).
    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<String> {
        self.enter()?;
        match factor {
            TableFactor::Table {
                name,
                args: Some(_),
                ..
            }
            | TableFactor::Function { name, .. } => allowed_function(name),
            _ => ControlFlow::Continue(()),
        }
    }

    fn post_visit_table_factor(&mut self, _: &TableFactor) -> ControlFlow<String> {
        self.leave()
    }
}

fn allowed_function(name: &ObjectName) -> ControlFlow<String> {
    // The last part is the function; a schema in front (`pg_catalog.`) changes nothing.
    // Lower-casing also refuses quoted spellings Postgres would not resolve: harmless.
    let Some(function) = name
        .0
        .last()
        .and_then(|part| part.as_ident())
        .map(|ident| ident.value.to_lowercase())
    else {
        return ControlFlow::Break(format!(
            "the function name `{name}` cannot be checked; call functions by plain name"
        ));
    };
    let refused = REFUSED_FUNCTIONS
        .iter()
        .find(|(pattern, _)| match pattern.strip_suffix('*') {
            Some(prefix) => function.starts_with(prefix),
            None => function == *pattern,
        });
    match refused {
        Some((_, why)) => ControlFlow::Break(format!(
            "the function `{function}` is not allowed in this tool's queries: {why}"
        )),
        None => ControlFlow::Continue(()),
    }
}

#[cfg(test)]
mod tests {
    use super::checked;

    fn refusal(sql: &str) -> String {
        match checked(sql) {
            Ok(text) => panic!("`{sql}` was accepted as `{text}`"),
            Err(message) => message,
        }
    }

    #[test]
    fn plain_queries_pass_and_run_as_printed_back() {
        for sql in [
            "select count(*) as n from customers",
            "SELECT id, name FROM customers WHERE country = 'DE' ORDER BY id LIMIT 3;",
            "with big as (select * from orders where total > 100) select count(*) from big",
            "values (1, 'a'), (2, 'b')",
            "select c.name, sum(o.total) from customers c join orders o on o.customer_id = c.id group by c.name",
            "select date_trunc('month', ordered_at) as m, count(*) from orders group by 1 order by 1",
            "select * from customers where name like 'N%' and since > date '2020-01-01'",
            "select nextval('s')",
            "(select 1) union all (select 2)",
            "select 'it''s' as quoted, E'a\\nb' as escaped, $$dollar$$ as dollar",
            "select id::text, total::numeric(10, 2) from orders",
            "select * from generate_series(1, 3) as g",
            "select repeat('x', 50000000)",
            "select count(*) as count from customers",
            "select sum(total) as total, count(*) as orders from orders",
            "select * from customers order by 1 limit 10",
        ] {
            let text = checked(sql).unwrap_or_else(|err| panic!("{sql}: {err}"));
            assert!(!text.contains(';'), "{text}");
        }
    }

    #[test]
    fn comments_do_not_reach_the_database() {
        let text = checked("select 1 /* hidden */ as one -- trailing").expect("one query");
        assert!(
            !text.contains("hidden") && !text.contains("trailing"),
            "{text}"
        );
    }

    /// An operator that runs into `--` hides, from a checker that reads it whole, the
    /// rest of the line from Postgres: a call of a refused function could ride there.
    #[test]
    fn a_comment_inside_an_operator_is_refused() {
        let hidden = "SELECT 'a' ~-- '\ncurrent_user::text AS x, \
                      (select array_agg(pg_cancel_backend(pid)) from pg_stat_activity) AS y, \
                      /*' AS a, 2 ~*/ 3 AS b";
        assert!(refusal(hidden).contains("comment"), "{}", refusal(hidden));
        assert!(refusal("select 1 ~/* x */ 2").contains("comment"));
        // With a space the same operators are plain ones.
        assert!(checked("select 'a' ~ 'b', 2 * 3").is_ok());
    }

    /// Postgres 14 and older read `$1a$` as the parameter `$1` with the alias `a$`:
    /// what the parser here takes for a string would run, refused functions and all.
    #[test]
    fn a_dollar_quote_tag_postgres_reads_as_a_parameter_is_refused() {
        let hidden = "select $1a$, (select array_agg(pg_terminate_backend(pid)) \
                      from pg_stat_activity) as k, $1a$";
        assert!(refusal(hidden).contains("tag"), "{}", refusal(hidden));
        assert!(refusal("select $1$x$1$").contains("tag"));
        // Tags that start as names do are strings to Postgres too.
        assert!(checked("select $a1$x$a1$, $_$y$_$, $$z$$").is_ok());
    }

    #[test]
    fn more_than_one_statement_is_refused() {
        assert!(refusal("select 1; select 2").contains("2 statements"));
        assert!(refusal("select 1; delete from customers").contains("2 statements"));
        assert!(refusal(" ; ").contains("empty"));
    }

    #[test]
    fn anything_but_a_query_is_refused() {
        for (sql, word) in [
            ("delete from customers", "DELETE"),
            ("insert into customers values (1)", "INSERT"),
            ("update customers set name = 'x'", "UPDATE"),
            ("set search_path = public", "SET"),
            ("create table t (id int)", "CREATE"),
            ("begin", "BEGIN"),
            ("explain analyze select 1", "EXPLAIN"),
            ("copy customers to stdout", "COPY"),
        ] {
            let message = refusal(sql);
            assert!(message.contains(word), "{sql}: {message}");
            assert!(message.contains("only reading"), "{sql}: {message}");
        }
    }

    #[test]
    fn data_modifying_ctes_are_refused() {
        for sql in [
            "with d as (delete from customers returning *) select count(*) from d",
            "with i as (insert into customers values (9) returning id) select * from i",
            "with u as (update orders set total = 0 returning id) select 1",
            "select * from (select 1) a where exists (with d as (delete from orders returning 1) select 1 from d)",
        ] {
            assert!(refusal(sql).contains("WITH clause"), "{sql}");
        }
    }

    #[test]
    fn parameters_are_refused() {
        assert!(refusal("select $1 as cap").contains("parameters"));
        assert!(refusal("select * from orders limit $2").contains("parameters"));
    }

    #[test]
    fn select_into_and_locking_clauses_are_refused() {
        assert!(refusal("select * into copy from customers").contains("INTO"));
        assert!(refusal("select * from customers for update").contains("FOR UPDATE"));
        assert!(refusal("select * from (select * from orders for share) o").contains("FOR UPDATE"));
    }

    #[test]
    fn session_and_lock_functions_are_refused_wherever_they_hide() {
        for sql in [
            "select pg_advisory_lock(7261132201)",
            "select pg_catalog.pg_advisory_lock(1)",
            "select \"pg_advisory_lock\"(1)",
            "select PG_TRY_ADVISORY_LOCK(1)",
            "select * from pg_advisory_lock(1)",
            "select * from customers where id = (select pg_advisory_xact_lock(1)::text::int)",
            "select set_config('role', 'postgres', false)",
            "select pg_sleep(10)",
            "select lo_import('/etc/passwd')",
            "select pg_read_file('/etc/passwd')",
            "select query_to_xml('select pg_advisory_lock(1)', true, false, '')",
            "select dblink('host=evil', 'select 1')",
            "select pg_terminate_backend(123)",
            "select count(*) filter (where pg_sleep(1) is null) from orders",
            "with x as (select pg_advisory_lock(2)) select * from x",
            "select * from toolgate_step_inputs('someone-else', gen_random_uuid(), 20)",
            "select * from public.TOOLGATE_PENDING_REQUESTS('someone-else', gen_random_uuid())",
        ] {
            assert!(refusal(sql).contains("is not allowed"), "{sql}");
        }
        assert!(checked("select lower(name) from customers").is_ok());
    }

    #[test]
    fn breaking_out_of_parentheses_is_a_parse_error() {
        for sql in [
            "select 1 as n) as a, (select 2 as m",
            "select id from orders) as x limit 1000) as y --",
            "select 1) as q; select pg_advisory_lock(1); select (1",
        ] {
            let message = refusal(sql);
            assert!(
                message.contains("could not be parsed") || message.contains("statements"),
                "{sql}: {message}"
            );
        }
    }

    #[test]
    fn unicode_escaped_names_cannot_smuggle_a_function() {
        // Postgres reads U&"…" as one identifier; the text that runs must not.
        if let Ok(text) = checked("select U&\"pg_\\0061dvisory_lock\"(1)") {
            assert!(!text.contains("U&\""), "{text}");
        }
        // A quote decoded from an escape is printed doubled: still one string literal.
        let text = checked("select U&'\\0027) as x, pg_advisory_lock(1) as y --'");
        assert_eq!(
            text.as_deref(),
            Ok("SELECT U&''') as x, pg_advisory_lock(1) as y --'")
        );
    }

    #[test]
    fn deep_nesting_is_refused_not_a_stack_overflow() {
        let sql = format!("select {}1{}", "(".repeat(500), ")".repeat(500));
        assert!(refusal(&sql).contains("nested too deeply"));
        let chain = format!("select 1{}", "+1".repeat(900));
        assert!(refusal(&chain).contains("nested too deeply"));
        let long = format!("select 1{}", " ".repeat(super::MAX_QUERY_BYTES));
        assert!(refusal(&long).contains("longer than"));
        let many = format!("select 1{}", ",1".repeat(super::MAX_QUERY_TOKENS));
        assert!(refusal(&many).contains("more than 2000 words"));
    }

    /// The longest chains the token limit lets through, of each shape that nests
    /// without the parser's own limit: each is answered, none overflows.
    #[tokio::test]
    async fn the_deepest_trees_within_the_token_limit_are_answered() {
        // As many steps as the token limit allows, each `tokens` long.
        let fill = |head: &str, step: &str, tokens: usize, tail: &str| {
            let n = (super::MAX_QUERY_TOKENS - 10) / tokens;
            format!("{head}{}{tail}", step.repeat(n))
        };
        for sql in [
            fill("select 1", "+1", 2, ""),
            fill("select 1", "::int", 2, ""),
            fill("select 1::int", "[]", 2, ""),
            fill("select 1", " union select 1", 3, ""),
            fill("select true", " or true", 2, ""),
            fill("select x", "[1]", 3, " from t"),
            fill("select a", ".b", 2, " from t"),
            fill("select 1 from t", " join t using (a)", 6, ""),
            fill("select ", "- ", 1, "1"),
            fill("select ", "(", 1, "1"),
            fill("select * from ", "(", 1, "t"),
            fill("select ", "array[", 2, "1"),
        ] {
            // Accepted or refused alike: an overflow would abort the whole test binary.
            let _answer = super::check(sql).await;
        }
    }
}
