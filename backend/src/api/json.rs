//! JSON bodies that fail with our error format: 415 unless labelled
//! `application/json`, 400 naming the bad path, 413 when too large, 408 when too slow,
//! instead of axum's plain-text rejections.

use axum::body::Bytes;
use axum::extract::{FromRequest, OptionalFromRequest, Request};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::agent::model::MAX_ARGUMENT_DEPTH;
use crate::error::{Error, FieldErrors};
use crate::state::AppState;

/// A JSON request body, in a request that says it is JSON.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Error> {
        // A page on another site can send `text/plain` (or a form) without asking the
        // browser first; it cannot send JSON that way.
        if !labelled_json(req.headers()) {
            return Err(Error::UnsupportedMediaType);
        }
        let bytes = read_body(req, state).await?;
        if is_blank(&bytes) {
            return Err(Error::bad_request(
                "the request body is empty; expected JSON",
            ));
        }
        parse(&bytes).map(ApiJson)
    }
}

/// An empty body reads as `None`, for endpoints whose body is optional; a body that is
/// there must be labelled JSON.
impl<T: DeserializeOwned> OptionalFromRequest<AppState> for ApiJson<T> {
    type Rejection = Error;

    async fn from_request(req: Request, state: &AppState) -> Result<Option<Self>, Error> {
        let json = labelled_json(req.headers());
        let bytes = read_body(req, state).await?;
        if is_blank(&bytes) {
            return Ok(None);
        }
        if !json {
            return Err(Error::UnsupportedMediaType);
        }
        parse(&bytes).map(|value| Some(ApiJson(value)))
    }
}

/// `application/json` or `application/<something>+json`, with any parameters.
fn labelled_json(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    essence.strip_prefix("application/").is_some_and(|subtype| {
        subtype == "json" || (subtype.len() > "+json".len() && subtype.ends_with("+json"))
    })
}

fn is_blank(bytes: &Bytes) -> bool {
    bytes.iter().all(u8::is_ascii_whitespace)
}

/// The body, read within the same time a client has for its headers: one that sends it
/// a byte at a time would otherwise hold a connection (and its request) for ever.
async fn read_body(req: Request, state: &AppState) -> Result<Bytes, Error> {
    let within = state.config.header_read_timeout;
    let read = tokio::time::timeout(within, Bytes::from_request(req, state))
        .await
        .map_err(|_| Error::BodyTimeout {
            seconds: within.as_secs().max(1),
        })?;
    read.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            Error::PayloadTooLarge {
                limit: state.config.max_body_bytes,
            }
        } else {
            Error::bad_request(format!("could not read the request body: {rejection}"))
        }
    })
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    // Every body is an object; serde would also read a struct from an array (`[]`).
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(Error::bad_request("the request body must be a JSON object"));
    }
    if nesting(bytes) > MAX_BODY_DEPTH {
        return Err(Error::bad_request(format!(
            "the request body nests deeper than {MAX_BODY_DEPTH} levels"
        )));
    }
    if let Some(path) = repeated_key(bytes) {
        return Err(field_error(
            &path,
            "is given twice in its object; send each key once",
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let parsed = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_data() {
            field_error(&path, &inner.to_string())
        } else {
            Error::bad_request(format!("the request body is not valid JSON: {inner}"))
        }
    })?;
    // One object and nothing after it but white space: `{…} junk` is not JSON.
    deserializer
        .end()
        .map_err(|err| Error::bad_request(format!("the request body is not valid JSON: {err}")))?;
    Ok(parsed)
}

/// How deep a body may nest: a tool's arguments one level down may nest as deep as a
/// model's may ([`MAX_ARGUMENT_DEPTH`]). What a caller sends is stored and sent on
/// inside other JSON (a request, its events, the call's log); deeper, it could be
/// stored and then never read back (serde_json stops at 128 levels), and every stream
/// of the conversation would stall on it.
const MAX_BODY_DEPTH: usize = MAX_ARGUMENT_DEPTH + 1;

/// How deep the arrays and objects of a JSON text nest, read from its bytes so that a
/// body too deep is refused before anything is built from it. Exact for valid JSON;
/// for invalid JSON, whatever it says, the parser refuses the body next.
fn nesting(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in bytes {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// The path of the first key an object of the JSON text names twice. serde keeps the
/// last of them, where a proxy, a firewall's rules or an audit log may read the first:
/// what they checked would not be what runs. `None` as well for text that is no JSON
/// (the parser says why next).
fn repeated_key(bytes: &[u8]) -> Option<String> {
    let found = std::cell::RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let _ =
        serde::de::DeserializeSeed::deserialize(DistinctKeys { found: &found }, &mut deserializer);
    let steps: Vec<String> = found.into_inner()?;
    // Gathered from the repeated key outwards.
    let mut path = String::new();
    for step in steps.iter().rev() {
        if !path.is_empty() && !step.starts_with('[') {
            path.push('.');
        }
        path.push_str(step);
    }
    Some(path)
}

/// Reads a JSON value for [`repeated_key`], keeping nothing. The path is built only on
/// the way out from a repeat (a step per level), never for every key and element on
/// the way in: that would copy long paths once for each of many elements.
struct DistinctKeys<'a> {
    found: &'a std::cell::RefCell<Option<Vec<String>>>,
}

impl DistinctKeys<'_> {
    fn again(&self) -> Self {
        DistinctKeys { found: self.found }
    }

    /// Adds `step` to the path of a repeat found below it.
    fn through<E>(&self, step: impl FnOnce() -> String, err: E) -> E {
        if let Some(steps) = self.found.borrow_mut().as_mut() {
            steps.push(step());
        }
        err
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for DistinctKeys<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for DistinctKeys<'_> {
    type Value = ();

    fn expecting(&self, formatter: &mut std::fmt::Formatter) -> std::fmt::Result {
        formatter.write_str("any JSON value")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                *self.found.borrow_mut() = Some(vec![key]);
                return Err(serde::de::Error::custom("a key given twice"));
            }
            if let Err(err) = map.next_value_seed(self.again()) {
                return Err(self.through(|| key, err));
            }
            seen.insert(key);
        }
        Ok(())
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0usize;
        loop {
            match seq.next_element_seed(self.again()) {
                Ok(Some(())) => index += 1,
                Ok(None) => return Ok(()),
                Err(err) => return Err(self.through(|| format!("[{index}]"), err)),
            }
        }
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// Reads parameters out of an already parsed JSON value, naming the bad path on error.
pub fn from_value<T: DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        field_error(&path, &err.into_inner().to_string())
    })
}

fn field_error(path: &str, message: &str) -> Error {
    // serde reports a missing field at the enclosing path; name the field.
    let named = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next());
    let key = match (path, named) {
        (".", Some(field)) => field.to_owned(),
        (path, Some(field)) => format!("{path}.{field}"),
        (path, None) => path.to_owned(),
    };
    Error::BadRequest {
        message: if key == "." {
            format!("invalid request body: {message}")
        } else {
            format!("invalid request body at `{key}`: {message}")
        },
        fields: Some(FieldErrors::from([(key, message.to_owned())])),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_given_twice_is_found_wherever_it_is() {
        assert_eq!(
            repeated_key(br#"{"action":"cancel_request","tool_call_id":"a","tool_call_id":"b"}"#),
            Some("tool_call_id".to_owned())
        );
        assert_eq!(
            repeated_key(br#"{"user_inputs":{"code":"1","note":{"x":1},"code":"2"}}"#),
            Some("user_inputs.code".to_owned())
        );
        assert_eq!(
            repeated_key(br#"{"arguments":{"items":[{"a":1},{"b":1,"b":2}]}}"#),
            Some("arguments.items[1].b".to_owned())
        );
        // A long key over a long array costs one pass, not a copy of the key for
        // every element.
        let long = format!(
            r#"{{"{}":[{}0]}}"#,
            "k".repeat(500_000),
            "0,".repeat(200_000)
        );
        let started = std::time::Instant::now();
        assert_eq!(repeated_key(long.as_bytes()), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        // Keys repeated in different objects, escaped the same or not, are fine.
        assert_eq!(
            repeated_key(br#"{"a":{"k":1},"b":{"k":1},"c":[{"k":1},{"k":2}]}"#),
            None
        );
        assert_eq!(
            repeated_key(br#"{"k":1,"\u006b":2}"#),
            Some("k".to_owned()),
            "the same key escaped is the same key"
        );
    }

    fn labelled(value: &str) -> bool {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, value.parse().expect("header value"));
        labelled_json(&headers)
    }

    #[test]
    fn json_media_types_are_accepted() {
        assert!(labelled("application/json"));
        assert!(labelled("Application/JSON; charset=utf-8"));
        assert!(labelled("application/merge-patch+json"));
    }

    #[test]
    fn other_media_types_are_refused() {
        for value in [
            "text/plain",
            "text/plain; charset=application/json",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "application/+json",
            "text/json",
            "",
        ] {
            assert!(!labelled(value), "{value}");
        }
        assert!(!labelled_json(&HeaderMap::new()));
    }

    #[derive(Debug, serde::Deserialize)]
    struct Titled {
        #[allow(dead_code)]
        title: String,
    }

    #[test]
    fn nesting_counts_arrays_and_objects_but_not_brackets_in_strings() {
        assert_eq!(nesting(b"{}"), 1);
        assert_eq!(nesting(br#"{"a": [1, {"b": [[]]}], "c": {}}"#), 5);
        assert_eq!(nesting(br#"{"a": "[[[{{{", "b": "\"[[", "c": "\\"}"#), 1);
        assert_eq!(nesting(br#"{"a": "\\\"{{", "b": [[]]}"#), 3);
    }

    /// A body nested as deep as serde_json still reads (127 levels) would be stored
    /// and then wrapped deeper, past what can be read back: it is refused whole.
    #[test]
    fn a_body_nested_too_deep_is_refused_before_it_is_read() {
        let body = |levels: usize| {
            format!(
                r#"{{"title": "a", "extra": {}1{}}}"#,
                "[".repeat(levels - 1),
                "]".repeat(levels - 1)
            )
        };
        assert_eq!(nesting(body(MAX_BODY_DEPTH).as_bytes()), MAX_BODY_DEPTH);
        assert!(parse::<Titled>(body(MAX_BODY_DEPTH).as_bytes()).is_ok());
        for levels in [MAX_BODY_DEPTH + 1, 127] {
            match parse::<Titled>(body(levels).as_bytes()) {
                Err(Error::BadRequest { message, .. }) => {
                    assert!(message.contains("nests deeper"), "{message}")
                }
                other => panic!("{levels} levels: {other:?}"),
            }
        }
    }

    #[test]
    fn a_body_is_one_object_and_nothing_after_it() {
        assert!(parse::<Titled>(b" {\"title\": \"a\"} \n").is_ok());
        for body in [
            &b"{\"title\": \"a\"} }}junk["[..],
            b"{\"title\": \"a\"}{}",
            b"{\"title\": \"a\"} 1",
        ] {
            let refused = parse::<Titled>(body);
            assert!(
                matches!(refused, Err(Error::BadRequest { .. })),
                "{}: {refused:?}",
                String::from_utf8_lossy(body)
            );
        }
    }
}
