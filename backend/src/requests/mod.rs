//! The life of a request to the user — values for a tool (`input`) or a yes to a call
//! (`approval`) — in one place.
//!
//! A request begins in [`create`] (the executor, or the action API), and ends exactly
//! once through [`endings`]: submitted, approved, edited, rejected, declined,
//! cancelled, expired, or abandoned by its run. Each ending writes its stream event in
//! the same transaction. [`follow_up`] then does what the ending means for the tool
//! and the run: retry the tool with the answer, or tell the run in [`words`] it can
//! act on, and resume the run when nothing else is open. Handlers, the run loop and the
//! background sweep only call these.

pub mod create;
pub mod endings;
mod follow_up;
mod row;
pub mod words;

pub use follow_up::{RunInbox, follow_up, outcome_of_settled};

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use protocol::api::{InputRequest, RequestKind};
use protocol::unseen;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::db::input_requests::InputRequestRow;
use crate::tools::registry::ToolRegistry;

/// Runs CPU work on values a caller sent (field rules, patterns) on the blocking pool,
/// so one heavy request never stalls other users' requests on the async workers; at
/// most [`MOST_CHECKS_PER_USER`] of one user's at once in this process, so a user who
/// sends many at once cannot take every core from the others. One more waits up to
/// [`CHECK_PLACE_WAIT`] for a place, then is refused (429); with `Holding::Lock` it
/// is refused at once, as a wait would hold a connection and a row lock others need.
pub(crate) async fn off_the_workers<T: Send + 'static>(
    user_id: &str,
    holding: Holding,
    work: impl FnOnce() -> T + Send + 'static,
) -> crate::error::Result<T> {
    let wait = match holding {
        Holding::Nothing => CHECK_PLACE_WAIT,
        Holding::Lock => Duration::ZERO,
    };
    let place = CheckPlace::take(user_id, wait)
        .await
        .ok_or_else(|| crate::error::Error::TooManyRequests {
            message: format!(
                "{MOST_CHECKS_PER_USER} of your requests' values are still being checked; try again shortly"
            ),
            retry_after_seconds: 1,
        })?;
    tokio::task::spawn_blocking(move || {
        // Held by the work, not the request: a caller who hangs up does not free the
        // place while the work goes on.
        let _place = place;
        work()
    })
    .await
    .map_err(|err| anyhow::anyhow!("checking values on the blocking pool: {err}").into())
}

/// What a caller of [`off_the_workers`] holds while it waits for a place.
#[derive(Clone, Copy)]
pub(crate) enum Holding {
    /// No connection or lock: it may wait its turn.
    Nothing,
    /// A pooled connection with a row locked.
    Lock,
}

/// Most checks of one user's values ([`off_the_workers`]) running at once: a check may
/// take seconds (a caller's patterns against long values), and a machine has few cores.
pub const MOST_CHECKS_PER_USER: usize = 2;

/// How long a check waits for one of its user's places before it is refused: most
/// checks take a moment, so a few sent together all run.
pub const CHECK_PLACE_WAIT: Duration = Duration::from_secs(1);

/// Each user's places for checks, while any is taken or waited for.
static CHECK_PLACES: LazyLock<Mutex<HashMap<String, Arc<Semaphore>>>> =
    LazyLock::new(Default::default);

/// One of a user's [`MOST_CHECKS_PER_USER`] places, free again when dropped.
struct CheckPlace {
    user_id: String,
    permit: Option<OwnedSemaphorePermit>,
}

impl CheckPlace {
    async fn take(user_id: &str, wait: Duration) -> Option<CheckPlace> {
        let places = Arc::clone(
            check_places()
                .entry(user_id.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(MOST_CHECKS_PER_USER))),
        );
        let mut place = CheckPlace {
            user_id: user_id.to_owned(),
            permit: None,
        };
        // Its own statement: the wait (and its hold on `places`) ends before the place
        // is kept or let go.
        let permit = if wait.is_zero() {
            places.try_acquire_owned().ok()
        } else {
            tokio::time::timeout(wait, places.acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
        };
        place.permit = Some(permit?);
        Some(place)
    }
}

impl Drop for CheckPlace {
    fn drop(&mut self) {
        let mut places = check_places();
        drop(self.permit.take());
        // Nobody holds or waits for one of the user's places: forget them.
        if places
            .get(&self.user_id)
            .is_some_and(|user_places| Arc::strong_count(user_places) == 1)
        {
            places.remove(&self.user_id);
        }
    }
}

fn check_places() -> std::sync::MutexGuard<'static, HashMap<String, Arc<Semaphore>>> {
    CHECK_PLACES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Largest arguments a caller may hand in, as JSON: with a request to create
/// (`tool_args`) or a call to run (`/api/tools/execute`). They are stored with the
/// request its card shows and read back with every read of what waits, so the body
/// limit alone would let one conversation's waiting cards hold a hundred times that
/// limit, and a read of them take many times more memory as it decodes them.
pub const MAX_ARGUMENTS_BYTES: usize = 64 * 1024;

/// Why arguments larger than `most` bytes as JSON are refused ([`MAX_ARGUMENTS_BYTES`],
/// or for an edit of a model's call the model's own limit, so that any call the model
/// may make can be edited); `None` when they fit.
pub fn arguments_too_large(
    arguments: &serde_json::Map<String, serde_json::Value>,
    most: usize,
) -> Option<String> {
    (crate::db::storable::json_size(arguments) > most)
        .then(|| format!("must be at most {most} bytes as JSON"))
}

/// [`arguments_too_large`] as the caller's error (422), naming `field`.
pub fn ensure_arguments_fit(
    field: &str,
    arguments: &serde_json::Map<String, serde_json::Value>,
    most: usize,
) -> crate::error::Result<()> {
    match arguments_too_large(arguments, most) {
        Some(why) => Err(crate::error::Error::unprocessable(
            "the arguments are too large",
            crate::error::FieldErrors::from([(field.to_owned(), why)]),
        )),
        None => Ok(()),
    }
}

/// The request as callers see it, with the tool's argument schema on an approval so a
/// card can offer an edit.
pub fn describe(row: &InputRequestRow, tools: &ToolRegistry) -> InputRequest {
    let mut request = row.to_api();
    if request.kind == RequestKind::Approval {
        request.arguments_schema = tools
            .get(&row.tool_name)
            .map(|tool| shown_parameters(&tool.parameters));
    }
    request
}

/// A tool's parameters as an approval card shows them: each argument's description
/// (its server's words, shown beside the value the user approves) with every character
/// a person cannot see, or that reorders what they see, written out.
fn shown_parameters(parameters: &Value) -> Value {
    let mut shown = parameters.clone();
    let properties = shown
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|properties| properties.values_mut());
    for property in properties {
        if let Some(Value::String(description)) = property.get_mut("description") {
            *description = unseen::written_out(description);
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::{CHECK_PLACE_WAIT, Holding, MOST_CHECKS_PER_USER, off_the_workers};
    use crate::error::Error;

    /// A user with as many checks running as they may have: one more waits for a
    /// place and, none coming free in time, is refused (429), while another user's check
    /// runs; one that waits while a place comes free runs. Nothing is kept once all
    /// are done.
    #[tokio::test]
    async fn a_user_has_at_most_so_many_checks_running_and_no_one_else_waits_for_them() {
        let user = "checks-busy-user";
        let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let mut releases = Vec::new();
        let mut running = Vec::new();
        for _ in 0..MOST_CHECKS_PER_USER {
            let (release, wait) = mpsc::channel::<()>();
            let started = started.clone();
            releases.push(release);
            running.push(tokio::spawn(off_the_workers(
                user,
                Holding::Nothing,
                move || {
                    let _ = started.send(());
                    let _ = wait.recv();
                },
            )));
        }
        for _ in 0..MOST_CHECKS_PER_USER {
            started_rx.recv().await.expect("started");
        }
        let refused = off_the_workers(user, Holding::Nothing, || ()).await;
        assert!(
            matches!(
                refused,
                Err(Error::TooManyRequests {
                    retry_after_seconds: 1,
                    ..
                })
            ),
            "one more check ran"
        );
        assert_eq!(
            off_the_workers("checks-other-user", Holding::Nothing, || 7)
                .await
                .ok(),
            Some(7)
        );
        // Holding a lock, refused at once rather than after the wait.
        let at_once = tokio::time::timeout(
            CHECK_PLACE_WAIT / 2,
            off_the_workers(user, Holding::Lock, || ()),
        )
        .await;
        assert!(
            matches!(at_once, Ok(Err(Error::TooManyRequests { .. }))),
            "a check holding a lock waited"
        );
        let waiting = tokio::spawn(off_the_workers(user, Holding::Nothing, || 8));
        tokio::time::sleep(CHECK_PLACE_WAIT / 4).await;
        drop(releases.pop());
        assert_eq!(waiting.await.expect("joined").ok(), Some(8));
        drop(releases);
        for check in running {
            check.await.expect("joined").expect("ran");
        }
        assert!(!super::check_places().contains_key(user), "places kept");
    }
}
