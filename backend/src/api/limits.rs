//! Per-user limits on the API: requests per minute (a keyed token bucket, answered
//! with 429 and `Retry-After`, held until the allowance refills) and open event streams. One user's flood spends their
//! own allowance, never another user's.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::auth;
use crate::config::Limits;
use crate::error::{Error, Result};
use crate::state::AppState;

/// The longest a refused request is held before its 429.
const LONGEST_REFUSAL_PAUSE: Duration = Duration::from_secs(1);

/// A request over its user's allowance: the 429 to answer, after `pause` (until the
/// allowance has a request again, at most [`LONGEST_REFUSAL_PAUSE`]). A client that
/// ignores `Retry-After` and asks again at once is slowed to the pace of its allowance,
/// so its flood costs the server (and every other user) a small fraction of the CPU.
struct Refusal {
    error: Error,
    pause: Duration,
}

/// The live counters behind [`Limits`].
pub struct UserLimits {
    requests: DefaultKeyedRateLimiter<String>,
    streams: Mutex<HashMap<String, u32>>,
    limits: Limits,
}

impl UserLimits {
    pub fn new(limits: Limits) -> Self {
        let per_minute = NonZeroU32::new(limits.requests_per_minute).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(limits.request_burst).unwrap_or(NonZeroU32::MIN);
        UserLimits {
            requests: RateLimiter::keyed(Quota::per_minute(per_minute).allow_burst(burst)),
            streams: Mutex::new(HashMap::new()),
            limits,
        }
    }

    /// Spends one of the user's requests, or says how long to wait: the refusal, and
    /// how long to hold it before answering.
    fn check_request(&self, user_id: &str) -> std::result::Result<(), Refusal> {
        self.requests
            .check_key(&user_id.to_owned())
            .map_err(|not_until| {
                let wait = not_until.wait_time_from(DefaultClock::default().now());
                Refusal {
                    error: Error::TooManyRequests {
                        message: format!(
                            "too many requests: at most {} a minute; try again shortly",
                            self.limits.requests_per_minute
                        ),
                        retry_after_seconds: wait.as_secs_f64().ceil() as u64,
                    },
                    pause: wait.min(LONGEST_REFUSAL_PAUSE),
                }
            })
    }

    /// Spends one of the user's requests; over the allowance, the 429 to answer once
    /// its pause is over (see [`Refusal`]).
    pub async fn spend_request(&self, user_id: &str) -> Result<()> {
        match self.check_request(user_id) {
            Ok(()) => Ok(()),
            Err(refused) => {
                tokio::time::sleep(refused.pause).await;
                Err(refused.error)
            }
        }
    }

    /// Holds one of the user's event-stream places until the returned slot is dropped.
    pub fn open_stream(self: &Arc<Self>, user_id: &str) -> Result<StreamSlot> {
        let mut open = self
            .streams
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(user_id.to_owned()).or_default();
        if *count >= self.limits.open_streams {
            return Err(Error::TooManyRequests {
                message: format!(
                    "at most {} event streams may be open at once; close one first",
                    self.limits.open_streams
                ),
                retry_after_seconds: 5,
            });
        }
        *count += 1;
        Ok(StreamSlot {
            limits: Arc::clone(self),
            user_id: user_id.to_owned(),
        })
    }

    /// Forgets users whose allowance has refilled, so the table does not grow forever.
    pub fn forget_idle(&self) {
        self.requests.retain_recent();
        self.requests.shrink_to_fit();
    }
}

/// One open event stream of a user; its place is given back when it is dropped.
pub struct StreamSlot {
    limits: Arc<UserLimits>,
    user_id: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self
            .limits
            .streams
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.user_id) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.user_id);
            }
        }
    }
}

/// Counts every request that carries a valid bearer token against its user. Requests
/// without one pass through: their handler answers 401, or they are public.
pub async fn per_user_rate(
    State(state): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if let Ok(user_id) = auth::bearer_user(&state, request.headers())
        && let Err(refused) = state.limits.spend_request(&user_id).await
    {
        return refused.into_response();
    }
    next.run(request).await
}
