//! How many queries of one user a sql tool runs at once. A call over the limit waits
//! its turn for a bounded time, then fails; one user cannot take every connection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most `max` running queries per user (in this server process).
pub struct PerUserLimit {
    max: usize,
    users: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// One running query of a user; the place is given back on drop.
pub struct Slot<'a> {
    permit: Option<OwnedSemaphorePermit>,
    user: String,
    limit: &'a PerUserLimit,
}

impl PerUserLimit {
    pub fn new(max: usize) -> Self {
        PerUserLimit {
            max,
            users: Mutex::new(HashMap::new()),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    /// A place for `user`, waiting at most `wait` for one to free; `None` when none did.
    pub async fn acquire(&self, user: &str, wait: Duration) -> Option<Slot<'_>> {
        let semaphore = {
            let mut users = self
                .users
                .lock()
                .unwrap_or_else(|poison| poison.into_inner());
            users
                .entry(user.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(self.max)))
                .clone()
        };
        let permit = match tokio::time::timeout(wait, semaphore.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            // The semaphore is never closed; a timeout is the only real way out.
            Ok(Err(_)) | Err(_) => {
                self.forget_if_idle(user);
                return None;
            }
        };
        Some(Slot {
            permit: Some(permit),
            user: user.to_owned(),
            limit: self,
        })
    }

    /// Drops the user's entry once nobody holds or waits for it, so the map does not
    /// grow with every user ever seen. Holders and waiters each keep a clone of the Arc.
    fn forget_if_idle(&self, user: &str) {
        let mut users = self
            .users
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if users
            .get(user)
            .is_some_and(|semaphore| Arc::strong_count(semaphore) == 1)
        {
            users.remove(user);
        }
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        drop(self.permit.take());
        self.limit.forget_if_idle(&self.user);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHORT: Duration = Duration::from_millis(50);

    #[tokio::test]
    async fn a_user_gets_at_most_max_places_and_others_are_not_affected() {
        let limit = PerUserLimit::new(2);
        let first = limit.acquire("ann", SHORT).await.expect("first");
        let second = limit.acquire("ann", SHORT).await.expect("second");
        assert!(limit.acquire("ann", SHORT).await.is_none());
        let bob = limit.acquire("bob", SHORT).await;
        assert!(bob.is_some());
        drop(first);
        let third = limit.acquire("ann", SHORT).await;
        assert!(third.is_some());
        drop((second, third, bob));
        assert!(limit.users.lock().expect("lock").is_empty());
    }

    #[tokio::test]
    async fn a_waiting_call_gets_the_place_that_frees() {
        let limit = Arc::new(PerUserLimit::new(1));
        let held = limit.acquire("ann", SHORT).await.expect("first");
        let waiter = {
            let limit = limit.clone();
            tokio::spawn(
                async move { limit.acquire("ann", Duration::from_secs(5)).await.is_some() },
            )
        };
        tokio::time::sleep(SHORT).await;
        drop(held);
        assert!(waiter.await.expect("join"));
        assert!(limit.users.lock().expect("lock").is_empty());
    }
}
