//! What a tool's outcome must not pass on: the secrets its call carried (the user's
//! secret fields, the operator's environment values) in any form a service may echo
//! them back, and NUL characters, which Postgres cannot store. Every outcome of a tool
//! that ran goes through here before it is stored, shown or handed to the model,
//! whatever kind of tool it was.
//!
//! A copy is found character by character, each character as itself (in a secret of 8
//! characters or more, an ASCII letter in either case: services upper-case hex tokens
//! and keys), every spelling that fits followed, percent-encoded (either
//! case, one byte at a time, so `quote()`, `encodeURIComponent` and a URL parser's
//! partial encoding all match), JSON-escaped (`\"`, `\/`, `\u00XX`, surrogate pairs),
//! as an HTML character reference (`&amp;`, `&#38;`, `&#x26;`, as error pages write
//! what they were sent) or as form encoding swaps `+` and a space; and a secret of 8
//! bytes or more in base64 (standard or URL-safe, wherever it sits in what was
//! encoded, cut into lines or not) and in hex (either case).

use std::collections::HashMap;

use protocol::api::ToolOutcome;
use protocol::fields::MASKED;
use serde_json::Value;

use crate::db::storable::{self, NUL_STAND_IN};

/// Shorter secrets are left as they are: replacing two or three characters wherever
/// they occur would garble the rest of the answer and hide little.
pub const MIN_SECRET_CHARS: usize = 4;

/// Shorter environment values (a version, a region) are no keys; masked wherever they
/// appear they would only garble answers.
const MIN_SECRET_ENV_CHARS: usize = 8;

/// The values of the environment variables `names` (what a tool's or an MCP server's
/// settings read through `{env.NAME}`) that may be secrets: those set and of at least
/// [`MIN_SECRET_ENV_CHARS`].
pub fn secret_env_values<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    names
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .filter(|value| value.chars().count() >= MIN_SECRET_ENV_CHARS)
        .collect()
}

/// One call's secrets, to replace wherever they appear in its outcome.
#[derive(Debug)]
pub struct Redactions {
    /// Longest first, so a secret that contains another is replaced whole.
    secrets: Vec<Secret>,
    stand_in: &'static str,
}

/// One form of a secret to look for.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Secret {
    text: String,
    /// Its ASCII letters match in either case: the secret as given, when long enough
    /// that a chance match is unlikely, and its hex form (never a base64 form, whose
    /// case is its bytes).
    any_case: bool,
    /// What may stand between two of its characters and still show it.
    gap: Gap,
}

/// What may stand between two characters of a form of a secret without hiding it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Gap {
    /// Nothing: the secret as given.
    None,
    /// A line break, and the indentation of the line after it: a base64 form, which
    /// MIME and PEM cut into lines of 76 or 64 characters wherever the secret sits, and
    /// a file that nests it (YAML, an indented PEM block) indents.
    LineBreak,
    /// Between two bytes' digits, what programs write between bytes: a separator
    /// (`:`, `-`, `,`, `;`, `.`), spaces and tabs, a line break and indentation, and a
    /// prefix to the next byte (`0x`, `\x`): a hex form, as fingerprints, `openssl`, byte
    /// arrays in source code and debug output write bytes. (Dumps with offsets and a
    /// text column, such as `hexdump -C`'s, show a secret longer than one of their
    /// lines.)
    ByteSeparator,
}

/// `secrets` longest first, each once, so a secret that contains another is replaced
/// whole. Forms of one text read differently (in any case, across gaps) stay apart.
fn longest_first(mut secrets: Vec<Secret>) -> Vec<Secret> {
    secrets.sort_by(|a, b| b.text.len().cmp(&a.text.len()).then_with(|| a.cmp(b)));
    secrets.dedup();
    secrets
}

/// Shortest line of a secret of several lines that is looked for on its own.
const MIN_SECRET_LINE_CHARS: usize = 8;

/// Shortest secret whose letters are looked for in either case.
const MIN_ANY_CASE_CHARS: usize = 8;

/// Most steps past a secret's first character one text's masking may take (a tenth of
/// a second or so): texts that only begin copies of a secret here and there take a few.
const MAX_MASKING_WORK: usize = 10_000_000;

impl Redactions {
    pub fn new<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Self {
        let secrets: Vec<Secret> = secrets
            .into_iter()
            .filter(|secret| secret.chars().count() >= MIN_SECRET_CHARS)
            .flat_map(|secret| {
                let given = Secret {
                    text: secret.to_owned(),
                    any_case: secret.chars().count() >= MIN_ANY_CASE_CHARS,
                    gap: Gap::None,
                };
                let base64 = base64_forms(secret.as_bytes())
                    .into_iter()
                    .map(|text| Secret {
                        text,
                        any_case: false,
                        gap: Gap::LineBreak,
                    });
                let hex = hex_form(secret.as_bytes()).map(|text| Secret {
                    text,
                    any_case: true,
                    gap: Gap::ByteSeparator,
                });
                // A secret of several lines (a PEM key) is often written out line by
                // line, or cut where a line ends: each of its lines is looked for too.
                let lines: Vec<Secret> = if secret.contains(['\n', '\r']) {
                    secret
                        .lines()
                        .map(str::trim)
                        .filter(|line| line.chars().count() >= MIN_SECRET_LINE_CHARS)
                        .map(|line| Secret {
                            text: line.to_owned(),
                            any_case: false,
                            gap: Gap::None,
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                std::iter::once(given).chain(base64).chain(hex).chain(lines)
            })
            .collect();
        Redactions {
            secrets: longest_first(secrets),
            stand_in: MASKED,
        }
    }

    /// These secrets and `more` (values the user gave since these were gathered).
    pub fn adding<'a>(&self, more: impl IntoIterator<Item = &'a str>) -> Self {
        let mut secrets: Vec<Secret> = self.secrets.clone();
        secrets.extend(Redactions::new(more).secrets);
        Redactions {
            secrets: longest_first(secrets),
            stand_in: self.stand_in,
        }
    }

    /// These secrets and those of `others` (earlier calls' secrets, which a server may
    /// repeat in a later call's answer).
    pub fn joined<'a>(&self, others: impl IntoIterator<Item = &'a Redactions>) -> Self {
        let mut secrets: Vec<Secret> = self.secrets.clone();
        for other in others {
            secrets.extend(other.secrets.iter().cloned());
        }
        Redactions {
            secrets: longest_first(secrets),
            stand_in: self.stand_in,
        }
    }

    /// The same secrets, replaced by `stand_in` instead of the masked-value dots.
    pub fn standing_in(mut self, stand_in: &'static str) -> Self {
        self.stand_in = stand_in;
        self
    }

    /// `outcome` with every copy of the secrets replaced and every NUL replaced, in its
    /// result (strings and keys, at any depth) and its error, and its result nested no
    /// deeper than can be stored and read back.
    pub fn outcome(&self, mut outcome: ToolOutcome) -> ToolOutcome {
        if let Some(result) = &mut outcome.result {
            self.value(result);
            // On its way to be stored: what lies too deep to read back becomes text,
            // after the masking above, which reads numbers as numbers.
            storable::flatten_deeper_than(result, storable::MAX_RESULT_DEPTH);
        }
        if let Some(error) = &mut outcome.error {
            self.text(error);
        }
        outcome
    }

    /// Whether `text` holds a copy of a secret (or a NUL), in any form `text` would mask.
    pub fn finds(&self, text: &str) -> bool {
        self.masked(text).is_some()
    }

    /// `text` with every copy of the secrets and every NUL replaced.
    pub fn text(&self, text: &mut String) {
        if let Some(masked) = self.masked(text) {
            *text = masked;
        }
    }

    /// `said` (words from outside: what a server said, a name it gave) as a log line
    /// may hold it: these secrets masked, then quoted as [`crate::logged::outside`]
    /// quotes. Whoever reads the log reads no secret the outsider repeats.
    pub fn logged(&self, said: impl std::fmt::Display) -> String {
        let mut said = said.to_string();
        self.text(&mut said);
        crate::logged::outside(said)
    }

    fn value(&self, value: &mut Value) {
        match value {
            Value::String(text) => self.text(text),
            Value::Array(items) => items.iter_mut().for_each(|item| self.value(item)),
            Value::Object(map) => {
                if map.keys().any(|key| self.masked(key).is_some()) {
                    // The next number to try for each key that came twice: counted on, so
                    // many keys that read the same cost no more than one pass.
                    let mut next_number = HashMap::new();
                    for (mut key, mut item) in std::mem::take(map) {
                        self.text(&mut key);
                        self.value(&mut item);
                        // Two keys may read the same once masked; neither value is lost.
                        let key = unused_key(map, &mut next_number, key);
                        map.insert(key, item);
                    }
                } else {
                    map.values_mut().for_each(|item| self.value(item));
                }
            }
            // A PIN or an account number comes back as a JSON number as readily as a
            // string; masked, it becomes the masked text.
            Value::Number(number) => {
                if let Some(masked) = self.masked(&number.to_string()) {
                    *value = Value::String(masked);
                } else if self.is_secret_number(number) {
                    // Written another way: `4829.50` as 4829.5, `0042` as 42, `1e03` as 1000.
                    *value = Value::String(self.stand_in.to_owned());
                }
            }
            Value::Bool(_) | Value::Null => {}
        }
    }

    /// Whether `number` is the value of a secret that reads as a number with at least
    /// [`MIN_SECRET_CHARS`] digits of its own (a secret `0001` would otherwise mask every
    /// 1, and tell the model which numbers it is).
    fn is_secret_number(&self, number: &serde_json::Number) -> bool {
        let Some(number) = number.as_f64() else {
            return false;
        };
        let digits = |value: f64| {
            value
                .to_string()
                .trim_start_matches(['-', '0', '.'])
                .chars()
                .filter(char::is_ascii_digit)
                .count()
        };
        self.secrets
            .iter()
            .filter_map(|secret| secret.text.trim().parse::<f64>().ok())
            .filter(|secret| digits(*secret) >= MIN_SECRET_CHARS)
            .any(|secret| secret == number)
    }

    /// `text` with its secrets and NULs replaced, or `None` when it holds neither. A
    /// text that would take more than [`MAX_MASKING_WORK`] steps to look through (a
    /// secret of many `\\` against a long run of them) is withheld whole: the check
    /// fails closed, and no answer holds a worker for long.
    fn masked(&self, text: &str) -> Option<String> {
        let bytes = text.as_bytes();
        let mut out = String::new();
        // `out` holds the text up to `copied`, as itself or masked; a mask covers the
        // text up to `masked_until`.
        let (mut copied, mut masked_until, mut changed) = (0, 0, false);
        let mut at = 0;
        let mut work = 0;
        while at < bytes.len() {
            if work > MAX_MASKING_WORK {
                return Some(self.stand_in.to_owned());
            }
            if !text.is_char_boundary(at) {
                at += 1;
                continue;
            }
            if bytes[at] == 0 && at >= masked_until {
                out.push_str(&text[copied..at]);
                out.push(NUL_STAND_IN);
                at += 1;
                (copied, masked_until, changed) = (at, at, true);
                continue;
            }
            let found = self
                .secrets
                .iter()
                .find_map(|secret| echo_len(bytes, at, secret, &mut work));
            match found {
                Some((shortest, longest)) => {
                    if at >= masked_until {
                        out.push_str(&text[copied..at]);
                        out.push_str(self.stand_in);
                    }
                    // Masked as far as the longest reading goes, and looked through
                    // again from where the shortest ends: the longer one may have taken
                    // the start of a copy right after it, which joins this mask.
                    masked_until = masked_until.max(at + longest);
                    (copied, changed) = (masked_until, true);
                    at += shortest;
                }
                None => at += 1,
            }
        }
        if !changed {
            return None;
        }
        out.push_str(&text[copied..]);
        Some(out)
    }
}

/// Shorter secrets have no encoded forms to look for: the part of their base64 that
/// does not depend on the bytes around them is too short to tell from any other text,
/// and their hex as likely to turn up in a hash or an id by chance.
const MIN_ENCODED_SECRET_BYTES: usize = 8;

/// `secret`'s bytes in hex, as a service echoes a key it was sent as bytes (a digest
/// tool, a hex dump); looked for in either case.
fn hex_form(secret: &[u8]) -> Option<String> {
    use std::fmt::Write;
    if secret.len() < MIN_ENCODED_SECRET_BYTES {
        return None;
    }
    let mut hex = String::with_capacity(2 * secret.len());
    for byte in secret {
        let _ = write!(hex, "{byte:02x}");
    }
    Some(hex)
}

/// What base64 (standard or URL-safe) makes of `secret` wherever it sits in what is
/// encoded: a service that echoes `Authorization: Basic …` or a token it wrapped
/// carries the secret so. The secret starts at one of three offsets in a 3-byte group;
/// for each, the characters that its own bytes alone decide.
fn base64_forms(secret: &[u8]) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    if secret.len() < MIN_ENCODED_SECRET_BYTES {
        return Vec::new();
    }
    let mut forms = Vec::new();
    for offset in 0..3 {
        let mut shifted = vec![0u8; offset];
        shifted.extend_from_slice(secret);
        // Characters of 6 bits: skip those holding any of the `offset` bytes before the
        // secret, stop before the one that would hold bytes after it.
        let first = (8 * offset).div_ceil(6);
        let end = 8 * shifted.len() / 6;
        for engine in [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD] {
            let encoded = engine.encode(&shifted);
            if let Some(core) = encoded.get(first..end) {
                forms.push(core.to_owned());
            }
        }
    }
    forms
}

/// The shortest and the longest length in bytes of a copy of `secret` that starts at
/// `text[at..]`, if one does. A character may be spelled several ways from one place
/// (`&` as itself, or the start of `&amp;`): the shortest and the longest ways so far
/// are followed, so each step costs the same however the text repeats. `work` counts
/// the steps taken past the first character (most places start none).
fn echo_len(text: &[u8], at: usize, secret: &Secret, work: &mut usize) -> Option<(usize, usize)> {
    let mut chars = secret.text.chars();
    let first = chars.next()?;
    // Most places start no spelling of the first character: nothing is kept for them.
    let mut ends = [0usize; 2];
    let mut kept = 0;
    for len in spellings(text, at, first, secret.any_case) {
        ends[kept.min(1)] = at + len;
        kept += 1;
    }
    if kept == 0 {
        return None;
    }
    let mut count = kept.min(2);
    sort_two(&mut ends, count);
    for (index, c) in chars.enumerate() {
        let mut next = [0usize; 6];
        let mut found = 0;
        for &end in &ends[..count] {
            // What may stand before the character is part of the copy: no form holds
            // what its gap may (hex no separator, base64 no line break or indent).
            let gap = gap_len(text, end, secret.gap, index + 1);
            *work += gap;
            let end = end + gap;
            for len in spellings(text, end, c, secret.any_case) {
                next[found] = end + len;
                found += 1;
            }
        }
        *work += count;
        if found == 0 {
            return None;
        }
        let next = &mut next[..found];
        next.sort_unstable();
        ends = [next[0], next[found - 1]];
        count = if next[0] == next[found - 1] { 1 } else { 2 };
    }
    Some((ends[0] - at, ends[count - 1] - at))
}

/// How many bytes of `text` from `at` stand in the `gap` before a form's character at
/// `index` (counted from 0).
fn gap_len(text: &[u8], at: usize, gap: Gap, index: usize) -> usize {
    match gap {
        Gap::None => 0,
        Gap::LineBreak => line_break_len(text, at),
        // Only between two bytes, never inside one; each part may be missing.
        Gap::ByteSeparator if index.is_multiple_of(2) => {
            let rest = text.get(at..).unwrap_or_default();
            let mut len = usize::from(matches!(
                rest.first(),
                Some(b':' | b'-' | b',' | b';' | b'.')
            ));
            len += indent_len(&rest[len..]);
            len += line_break_len(rest, len);
            let prefix = [b"0x".as_slice(), b"0X", b"\\x", b"\\\\x"]
                .into_iter()
                .find(|prefix| rest[len..].starts_with(prefix));
            len + prefix.map_or(0, <[u8]>::len)
        }
        Gap::ByteSeparator => 0,
    }
}

/// The most spaces and tabs read as one line's indentation (or between two bytes).
const MAX_INDENT: usize = 64;

/// How many bytes of `text` from `at` are a line break (`\n` or `\r\n`, as is or
/// JSON-escaped) and the spaces and tabs that indent the next line (at most
/// [`MAX_INDENT`]), if any.
fn line_break_len(text: &[u8], at: usize) -> usize {
    let rest = text.get(at..).unwrap_or_default();
    let Some(line_break) = [b"\r\n".as_slice(), b"\n", b"\\r\\n", b"\\n"]
        .into_iter()
        .find(|line_break| rest.starts_with(line_break))
    else {
        return 0;
    };
    line_break.len() + indent_len(&rest[line_break.len()..])
}

/// How many bytes at the start of `text` are spaces and tabs (as is or JSON-escaped),
/// at most [`MAX_INDENT`] of them.
fn indent_len(text: &[u8]) -> usize {
    let mut len = 0;
    for _ in 0..MAX_INDENT {
        match &text[len..] {
            [b' ' | b'\t', ..] => len += 1,
            [b'\\', b't', ..] => len += 2,
            _ => break,
        }
    }
    len
}

/// The first `count` (at most two) of `ends` in order.
fn sort_two(ends: &mut [usize; 2], count: usize) {
    if count == 2 && ends[0] > ends[1] {
        ends.swap(0, 1);
    }
}

/// How many bytes of `text` from `at` spell `c`, for each way they do.
fn spellings(text: &[u8], at: usize, c: char, any_case: bool) -> impl Iterator<Item = usize> {
    let mut buffer = [0u8; 4];
    let utf8 = c.encode_utf8(&mut buffer).as_bytes();
    let rest = text.get(at..).unwrap_or_default();
    let itself = rest.starts_with(utf8).then_some(utf8.len());
    let other_case = rest
        .first()
        .filter(|first| {
            any_case
                && c.is_ascii_alphabetic()
                && **first != c as u8
                && first.eq_ignore_ascii_case(&(c as u8))
        })
        .map(|_| 1);
    let form = match (c, rest.first()) {
        (' ', Some(b'+')) | ('+', Some(b' ')) => Some(1),
        (_, Some(b'%')) => percent_len(rest, utf8),
        (_, Some(b'\\')) => json_escape_len(rest, c),
        (_, Some(b'&')) => html_reference_len(rest, c),
        _ => None,
    };
    [itself, other_case, form].into_iter().flatten()
}

/// `c` as HTML writes a character by reference: `&amp;`, `&lt;`, `&gt;`, `&quot;`,
/// `&apos;`, or its number (`&#38;`, `&#x26;`, either case).
fn html_reference_len(rest: &[u8], c: char) -> Option<usize> {
    let end = rest.iter().take(12).position(|b| *b == b';')?;
    let name = std::str::from_utf8(&rest[1..end]).ok()?;
    let named = match name {
        "amp" => Some('&'),
        "lt" => Some('<'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => None,
    };
    let numbered = || {
        let number = name.strip_prefix('#')?;
        let code = match number.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => number.parse().ok()?,
        };
        char::from_u32(code)
    };
    (named.or_else(numbered)? == c).then_some(end + 1)
}

/// `utf8`'s bytes each written `%XX`, hex digits in either case.
fn percent_len(rest: &[u8], utf8: &[u8]) -> Option<usize> {
    for (index, byte) in utf8.iter().enumerate() {
        let written = rest.get(index * 3..index * 3 + 3)?;
        if written[0] != b'%' || hex_value(&written[1..])? != u32::from(*byte) {
            return None;
        }
    }
    Some(utf8.len() * 3)
}

/// `c` as a JSON string escapes it: a short escape, or `\uXXXX` (a surrogate pair
/// beyond the Basic Multilingual Plane).
fn json_escape_len(rest: &[u8], c: char) -> Option<usize> {
    let short = match c {
        '"' => Some(b'"'),
        '\\' => Some(b'\\'),
        '/' => Some(b'/'),
        '\n' => Some(b'n'),
        '\r' => Some(b'r'),
        '\t' => Some(b't'),
        '\u{8}' => Some(b'b'),
        '\u{c}' => Some(b'f'),
        _ => None,
    };
    if short.is_some() && rest.get(1) == short.as_ref() {
        return Some(2);
    }
    let mut units = [0u16; 2];
    let mut len = 0;
    for unit in c.encode_utf16(&mut units) {
        let written = rest.get(len..len + 6)?;
        if &written[..2] != b"\\u" || hex_value(&written[2..])? != u32::from(*unit) {
            return None;
        }
        len += 6;
    }
    Some(len)
}

/// `key`, or `key (2)`, `key (3)`, ... when `map` already holds it; `next_number` keeps
/// where each key's numbering stands.
fn unused_key(
    map: &serde_json::Map<String, Value>,
    next_number: &mut HashMap<String, usize>,
    key: String,
) -> String {
    if !map.contains_key(&key) {
        return key;
    }
    let n = next_number.entry(key.clone()).or_insert(2);
    loop {
        let numbered = format!("{key} ({n})");
        *n += 1;
        if !map.contains_key(&numbered) {
            return numbered;
        }
    }
}

/// The value of ASCII hex digits (either case); `None` if any is not one.
fn hex_value(digits: &[u8]) -> Option<u32> {
    digits.iter().try_fold(0u32, |value, digit| {
        Some(value * 16 + char::from(*digit).to_digit(16)?)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn masked(secret: &str, text: &str) -> String {
        let mut text = text.to_owned();
        Redactions::new([secret]).text(&mut text);
        text
    }

    /// Whether some run of base64 characters left in `shown`, decoded from any of its
    /// characters, gives four bytes in a row of `secret`.
    fn reveals(shown: &str, secret: &str) -> bool {
        use base64::Engine;
        use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
        let runs = shown.split(|c: char| !(c.is_ascii_alphanumeric() || "+/-_".contains(c)));
        runs.flat_map(|run| (0..run.len()).map(move |start| &run[start..]))
            .flat_map(|run| {
                let whole = &run[..run.len() - run.len() % 4];
                [&STANDARD_NO_PAD, &URL_SAFE_NO_PAD]
                    .map(|engine| engine.decode(whole).unwrap_or_default())
            })
            .any(|decoded| {
                secret
                    .as_bytes()
                    .windows(4)
                    .any(|four| decoded.windows(4).any(|seen| seen == four))
            })
    }

    /// A service that echoes what it was sent as base64 (a Basic authorization, a
    /// token it wrapped) still shows none of the secret, whatever comes before it.
    /// A key of several lines, written out one line at a time (a server's log, a
    /// result cut where a line ends), leaves none of its lines behind.
    #[test]
    fn each_line_of_a_secret_of_several_lines_is_masked_on_its_own() {
        let key = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEF\nAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY-----";
        let shown = masked(key, "line 1: MIIEvQIBADANBgkqhkiG9w0BAQEF and then");
        assert!(!shown.contains("MIIEvQIB"), "{shown}");
        let shown = masked(key, "AASCBKcwggSjAgEAAoIBAQC7");
        assert!(!shown.contains("AASCBKcw"), "{shown}");
        // A secret of one line is looked for whole only.
        assert_eq!(masked("plain-secret-1234", "plain-secret"), "plain-secret");
    }

    #[test]
    fn a_secret_in_base64_is_found_wherever_it_sits() {
        use base64::Engine;
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        let secret = "s3cr3t-t0ken?>>~";
        let redactions = Redactions::new([secret]);
        for prefix in ["", "a", "ab", "abc", "user:", "alice:"] {
            let plain = format!("{prefix}{secret}");
            for encoded in [STANDARD.encode(&plain), URL_SAFE_NO_PAD.encode(&plain)] {
                let mut shown = format!("Authorization: Basic {encoded} was refused");
                assert!(reveals(&shown, secret), "the check sees it unmasked");
                redactions.text(&mut shown);
                assert!(shown.contains(MASKED), "{prefix:?}: {shown}");
                assert!(!reveals(&shown, secret), "{prefix:?}: {shown}");
            }
        }
        // Other base64 text, and a short secret's encoding, stay as they were.
        let other = STANDARD.encode("nothing to hide here at all");
        let mut shown = other.clone();
        redactions.text(&mut shown);
        assert_eq!(shown, other);
        assert!(base64_forms(b"1234567").is_empty());
    }

    /// MIME and PEM cut base64 into lines wherever the secret falls; a line break,
    /// as is or JSON-escaped, between two of its characters hides nothing.
    #[test]
    fn a_secret_in_base64_cut_into_lines_is_found_across_the_break() {
        use base64::Engine;
        use base64::engine::general_purpose::STANDARD;
        let secret = "wrapped-token-0123456789";
        let encoded = STANDARD.encode(format!("user:{secret}"));
        for cut in [10, 17, 25] {
            for line_break in ["\n", "\r\n", "\\n", "\\r\\n"] {
                let mut shown = format!("{}{line_break}{}", &encoded[..cut], &encoded[cut..]);
                assert!(reveals(&shown.replace(line_break, ""), secret));
                Redactions::new([secret]).text(&mut shown);
                assert!(
                    !reveals(&shown.replace(line_break, ""), secret),
                    "{cut} {line_break:?}: {shown}"
                );
            }
        }
        // And where the lines are indented (YAML, an indented PEM block).
        for indent in ["\n    ", "\r\n\t", "\\n  ", "\\n\\t\\t"] {
            let mut shown = format!("{}{indent}{}", &encoded[..13], &encoded[13..]);
            Redactions::new([secret]).text(&mut shown);
            assert!(
                !reveals(&shown.replace(indent, ""), secret),
                "{indent:?}: {shown}"
            );
        }
        // Lines of other base64 stay as they were.
        let other = format!(
            "{}\n{}",
            STANDARD.encode("nothing to hide"),
            STANDARD.encode("here")
        );
        assert_eq!(masked(secret, &other), other);
    }

    /// A service that echoes the bytes it was sent in hex (a digest tool, a dump) shows
    /// none of them, in either case; a short secret's hex is too likely by chance.
    #[test]
    fn a_secret_in_hex_is_found_in_either_case() {
        let secret = "hex-me-please";
        let hex: String = secret.bytes().map(|byte| format!("{byte:02x}")).collect();
        assert_eq!(
            masked(secret, &format!("sent {hex}.")),
            format!("sent {MASKED}.")
        );
        assert_eq!(
            masked(secret, &format!("SENT {}.", hex.to_uppercase())),
            format!("SENT {MASKED}.")
        );
        assert_eq!(masked("1234567", "31323334353637"), "31323334353637");
    }

    /// Bytes written out with separators (`openssl … -c`, fingerprints, `hexdump -C`,
    /// a dump cut into lines) are the same bytes.
    #[test]
    fn a_secret_in_hex_with_separators_between_bytes_is_found() {
        let secret = "hex-me-please";
        let bytes: Vec<String> = secret.bytes().map(|byte| format!("{byte:02X}")).collect();
        for joined in [
            bytes.join(":"),
            bytes.join("-"),
            bytes.join(" "),
            bytes.join(";"),
            bytes.join("."),
            bytes.join("\t"),
            bytes.join("\\t"),
            format!("{}  {}", bytes[..8].join(" "), bytes[8..].join(" ")),
            format!("{}\n    {}", bytes[..5].concat(), bytes[5..].concat()),
            format!("{}\\n{}", bytes[..6].join(" "), bytes[6..].join(" ")),
            format!("{} \n{}", bytes[..6].join(" "), bytes[6..].join(" ")),
            // Byte arrays: Rust's `{:x?}`, Go's `%#v`, C, escaped strings, JSON-escaped.
            bytes.join(", "),
            format!("0x{}", bytes.join(", 0x")),
            format!("0X{}", bytes.join(",0X")),
            format!("\\x{}", bytes.join("\\x")),
            format!("\\\\x{}", bytes.join("\\\\x")),
        ] {
            let shown = masked(secret, &format!("sent {joined}."));
            // The first byte's prefix, if any, is all that stays.
            let left = shown
                .strip_prefix("sent ")
                .and_then(|rest| rest.strip_suffix(&format!("{MASKED}.")));
            assert!(
                matches!(left, Some("" | "0x" | "0X" | "\\x" | "\\\\x")),
                "{joined}: {shown}"
            );
        }
        // Inside a byte nothing may stand, and other bytes stay as they were.
        let split = "6:865782d6d652d706c65617365";
        assert_eq!(masked(secret, split), split);
        let other = "de:ad:be:ef:00:11:22:33:44";
        assert_eq!(masked(secret, other), other);
    }

    /// What a gap may hold is bounded: a text of long indents costs no more to look
    /// through than one without.
    #[test]
    fn a_gap_reads_at_most_a_line_breaks_worth_of_indent() {
        let indented = format!("\n{}x", " ".repeat(10 * MAX_INDENT));
        assert_eq!(line_break_len(indented.as_bytes(), 0), 1 + MAX_INDENT);
        let spaced = format!("{}41", " ".repeat(10 * MAX_INDENT));
        assert_eq!(
            gap_len(spaced.as_bytes(), 0, Gap::ByteSeparator, 2),
            MAX_INDENT
        );
        assert_eq!(gap_len(spaced.as_bytes(), 0, Gap::ByteSeparator, 3), 0);
        let tabbed = format!(";{}41", "\\t".repeat(10 * MAX_INDENT));
        assert_eq!(
            gap_len(tabbed.as_bytes(), 0, Gap::ByteSeparator, 2),
            1 + 2 * MAX_INDENT
        );
    }

    #[test]
    fn a_secret_is_found_in_every_form_a_service_echoes() {
        let secret = "k3y+/with=\"odd\" chars";
        for echo in [
            // As sent, and as a URL parser leaves a raw value in a query.
            "k3y+/with=\"odd\" chars",
            "k3y+/with=%22odd%22%20chars",
            // Percent-encoded in full, either case, and as quote() leaves `/`.
            "k3y%2B%2Fwith%3D%22odd%22%20chars",
            "k3y%2b%2fwith%3d%22odd%22%20chars",
            "k3y%2B/with%3D%22odd%22+chars",
            // Form-decoded: the `+` came back a space.
            "k3y /with=\"odd\" chars",
            // JSON-escaped, with `\/` and `\u0022` as some encoders write them.
            "k3y+\\/with=\\\"odd\\\" chars",
            "k3y+/with=\\u0022odd\\u0022 chars",
            // In an HTML error page, by name or by number; and upper-cased.
            "k3y+/with=&quot;odd&quot; chars",
            "k3y&#43;&#x2F;with&#61;&#34;odd&#X22; chars",
            "K3Y+/WITH=\"ODD\" CHARS",
        ] {
            let shown = masked(secret, &format!("before {echo} after"));
            assert_eq!(shown, format!("before {MASKED} after"), "{echo}");
        }
    }

    /// A character that is also where its own encoding starts (`&` of `&amp;`, `%` of
    /// `%25`, `\\` of `\\\\`) is followed both ways.
    #[test]
    fn a_secret_holding_an_encodings_own_mark_is_found_encoded() {
        let secret = "Tr0ub4dor&3x%!\\";
        for echo in [
            "Tr0ub4dor&3x%!\\",
            "Tr0ub4dor&amp;3x%!\\",
            "Tr0ub4dor%263x%25!%5C",
            "Tr0ub4dor&3x%!\\\\",
            "TR0UB4DOR&3X%!\\",
        ] {
            let shown = masked(secret, &format!("before {echo} after"));
            assert_eq!(shown, format!("before {MASKED} after"), "{echo}");
        }
        // A short secret's letters match in their own case only.
        assert_eq!(masked("blue", "Blue blue"), format!("Blue {MASKED}"));
        // Two copies side by side, where the first could be read as running into the
        // second (its last `\\` and the next one's first as one escaped `\\`): both go.
        assert_eq!(
            masked("\\wxyz\\", "\\wxyz\\\\wxyz\\ and"),
            format!("{MASKED} and")
        );
    }

    /// A secret of many `\\` against a long run of them could be spelled in more and
    /// more ways at each place; the work is bounded, and past it the text is withheld.
    #[test]
    fn a_text_too_costly_to_look_through_is_withheld_not_looked_through_for_ever() {
        let secret = format!("{}X", "\\".repeat(2000));
        let text = "\\".repeat(400_000);
        let started = std::time::Instant::now();
        let shown = masked(&secret, &text);
        // Unbounded, it would run for many minutes; bounded, well under a second built
        // for release.
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
        assert_eq!(shown, MASKED);
        // An ordinary answer of the same size is looked through whole.
        let plain = format!(
            "{} Tr0ub4dor&amp;3x! {}",
            "a b ".repeat(100_000),
            "c ".repeat(100_000)
        );
        let shown = masked("Tr0ub4dor&3x!", &plain);
        assert!(shown.contains(MASKED) && shown.len() > 500_000);
    }

    #[test]
    fn non_ascii_secrets_match_escaped_and_encoded() {
        let secret = "pässwörd😀";
        for echo in [
            "pässwörd😀",
            "p%C3%A4ssw%c3%b6rd%F0%9F%98%80",
            "p\\u00e4ssw\\u00F6rd\\ud83d\\ude00",
        ] {
            assert_eq!(masked(secret, echo), MASKED, "{echo}");
        }
        // Half a character's encoding is no match.
        assert_eq!(masked(secret, "p%C3ssword"), "p%C3ssword");
    }

    #[test]
    fn secrets_are_masked_at_any_depth_in_keys_and_errors() {
        let secret = "ab+c/d== key";
        let outcome = ToolOutcome::ok(json!({
            "next": "https://api.example.com/v1?key=ab%2Bc%2Fd%3D%3D%20key&page=2",
            "deep": [{"ab+c/d== key": ["still ab+c/d== key"]}],
        }));
        let masked = Redactions::new([secret]).outcome(outcome);
        let text = serde_json::to_string(&masked).unwrap_or_default();
        assert!(!text.contains("ab+c") && !text.contains("ab%2B"), "{text}");
        assert_eq!(
            masked.result.as_ref().map(|r| r["next"].clone()),
            Some(json!(format!(
                "https://api.example.com/v1?key={MASKED}&page=2"
            )))
        );
        let failed = ToolOutcome::failed(format!("HTTP 401: sent {secret}"));
        let masked = Redactions::new([secret])
            .standing_in("[redacted]")
            .outcome(failed);
        assert_eq!(masked.error.as_deref(), Some("HTTP 401: sent [redacted]"));
    }

    #[test]
    fn a_secret_echoed_as_a_json_number_is_masked() {
        let outcome = ToolOutcome::ok(json!({
            "account": 48291375,
            "pin_and_more": [1048291375, 4829.5],
            "other": 12,
        }));
        let masked = Redactions::new(["48291375", "4829.5"]).outcome(outcome);
        assert_eq!(
            masked.result,
            Some(json!({
                "account": MASKED,
                "pin_and_more": [format!("10{MASKED}"), MASKED],
                "other": 12,
            }))
        );
        // The same number written another way.
        let outcome = ToolOutcome::ok(json!([4829.5, 4242, 1000, 43, 1]));
        let masked = Redactions::new(["4829.50", "004242", "1e03", "0001"]).outcome(outcome);
        assert_eq!(masked.result, Some(json!([MASKED, MASKED, MASKED, 43, 1])));
    }

    #[test]
    fn a_secret_deep_in_an_answer_is_masked_before_the_depths_become_text() {
        let deep = (0..storable::MAX_RESULT_DEPTH + 5).fold(
            json!({"pin": 4829.5, "code": "zq9Xk2Lm7Pw4"}),
            |inner, _| json!({ "d": inner }),
        );
        let masked = Redactions::new(["4829.50", "zq9Xk2Lm7Pw4"]).outcome(ToolOutcome::ok(deep));
        let result = masked.result.unwrap_or_default();
        assert_eq!(storable::depth(&result, 1000), storable::MAX_RESULT_DEPTH);
        let text = result.to_string();
        assert!(
            !text.contains("4829") && !text.contains("zq9Xk2Lm7Pw4"),
            "{text}"
        );
    }

    #[test]
    fn keys_that_read_the_same_once_masked_keep_both_values() {
        let outcome = ToolOutcome::ok(json!({
            "token zq9Xk2Lm7Pw4": 1,
            "token Hh4Rt8Yu2Ee6": 2,
            "token ••••••••": 3,
        }));
        let masked = Redactions::new(["zq9Xk2Lm7Pw4", "Hh4Rt8Yu2Ee6"]).outcome(outcome);
        let result = masked.result.unwrap_or_default();
        let mut values: Vec<i64> = result
            .as_object()
            .map(|map| map.values().filter_map(Value::as_i64).collect())
            .unwrap_or_default();
        values.sort_unstable();
        assert_eq!(values, [1, 2, 3], "{result}");
        assert!(!result.to_string().contains("zq9X"), "{result}");

        // Keys that differ only where a NUL stands read the same once it is replaced:
        // every value kept, each under a key of its own.
        let variants: serde_json::Map<String, Value> = (0..1024u32)
            .map(|bits| {
                let key: String = (0..10)
                    .map(|bit| {
                        if bits >> bit & 1 == 1 {
                            '\u{0}'
                        } else {
                            NUL_STAND_IN
                        }
                    })
                    .collect();
                (key, Value::from(bits))
            })
            .collect();
        let masked = Redactions::new([]).outcome(ToolOutcome::ok(Value::Object(variants)));
        let kept = masked
            .result
            .as_ref()
            .and_then(Value::as_object)
            .map(|map| map.len());
        assert_eq!(kept, Some(1024));
    }

    #[test]
    fn nul_characters_are_replaced_everywhere_and_short_values_kept() {
        let outcome = ToolOutcome::ok(json!({"a\u{0}b": "x\u{0}y", "pin": "id 123"}));
        let masked = Redactions::new(["123"]).outcome(outcome);
        let text = serde_json::to_string(&masked).unwrap_or_default();
        assert!(!text.contains("\\u0000"), "{text}");
        assert!(text.contains("id 123"), "{text}");
        assert_eq!(
            masked.result.as_ref().map(|r| r["a\u{FFFD}b"].clone()),
            Some(json!("x\u{FFFD}y"))
        );
    }

    #[test]
    fn text_without_secrets_is_left_as_it_is() {
        let text = "a % sign, a \\ backslash, 50% off, \\u12 and ünïcödé";
        assert_eq!(masked("secret-value", text), text);
        assert_eq!(masked("secret-value", "secret-valu"), "secret-valu");
    }
}
