use std::future::Future;
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::state::AppState;

/// The database's last answer to a readiness check, shared by every `/readyz` that
/// asked while it was under way. The probe needs no token, so a caller polling it in a
/// loop, or many at once, would otherwise each take a pool connection from signed-in
/// users; this way they wait here, and the database sees one check at a time.
#[derive(Default)]
pub struct Readiness {
    /// When the last check finished, and whether the database answered.
    last: Mutex<Option<(Instant, bool)>>,
}

impl Readiness {
    /// Whether the database answers: `ping`'s own answer, or that of a check that
    /// finished after this caller asked (never an older one).
    pub async fn check<F>(&self, ping: impl FnOnce() -> F) -> Shared
    where
        F: Future<Output = bool>,
    {
        let asked = Instant::now();
        let mut last = self.last.lock().await;
        if let Some((finished, ready)) = *last
            && finished >= asked
        {
            return Shared::Heard(ready);
        }
        let ready = ping().await;
        *last = Some((Instant::now(), ready));
        Shared::Asked(ready)
    }
}

/// A readiness answer, and whether this caller asked for it or heard another's.
#[derive(Debug, PartialEq, Eq)]
pub enum Shared {
    Asked(bool),
    Heard(bool),
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "Up")))]
pub async fn healthz() -> Json<Value> {
    Json(json!({ "status": "ok" }))
}

/// The database answers.
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, description = "Ready"),
    (status = 503, description = "Database unreachable", body = protocol::api::ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Value>> {
    let mut failure = None;
    let answer = state
        .readiness
        .check(|| async {
            let ping = sqlx::query_scalar!(r#"select 1 as "one!""#).fetch_one(&state.db);
            match tokio::time::timeout(Duration::from_secs(3), ping).await {
                Ok(Ok(_)) => true,
                Ok(Err(err)) => {
                    failure = Some(err);
                    false
                }
                Err(_) => {
                    failure = Some(sqlx::Error::PoolTimedOut);
                    false
                }
            }
        })
        .await;
    match answer {
        Shared::Asked(true) | Shared::Heard(true) => Ok(Json(json!({ "status": "ready" }))),
        // The caller that asked logs why; the others answer the same without it.
        Shared::Asked(false) => Err(failure.map_or(Error::NotReady, Error::Unavailable)),
        Shared::Heard(false) => Err(Error::NotReady),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn callers_that_ask_while_a_check_is_under_way_share_its_answer() {
        let readiness = Readiness::default();
        let pings = Arc::new(AtomicUsize::new(0));
        let ping = || {
            let pings = pings.clone();
            async move {
                pings.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                true
            }
        };
        let answers = futures::future::join_all((0..20).map(|_| readiness.check(ping))).await;
        assert_eq!(pings.load(Ordering::SeqCst), 1, "one check for 20 callers");
        assert_eq!(
            answers
                .iter()
                .filter(|a| **a == Shared::Asked(true))
                .count(),
            1
        );
        assert_eq!(
            answers
                .iter()
                .filter(|a| **a == Shared::Heard(true))
                .count(),
            19
        );

        // A caller that comes after the check finished gets a fresh one.
        assert_eq!(readiness.check(ping).await, Shared::Asked(true));
        assert_eq!(pings.load(Ordering::SeqCst), 2);
    }
}
