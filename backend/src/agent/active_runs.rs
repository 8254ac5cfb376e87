//! The runs this server is driving right now, so a stopping server can let them finish
//! their current step and then hand them over, or fail them when the grace period ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;
use uuid::Uuid;

#[derive(Default)]
pub struct ActiveRuns {
    runs: Mutex<HashMap<Uuid, String>>,
    changed: Notify,
}

/// Holds a run's place while it is driven; dropping it frees the place.
pub struct Driving {
    runs: Arc<ActiveRuns>,
    run_id: Uuid,
}

impl Drop for Driving {
    fn drop(&mut self) {
        self.runs.lock().remove(&self.run_id);
        self.runs.changed.notify_waiters();
    }
}

impl ActiveRuns {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, String>> {
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Records that `run_id` (of `user_id`) is being driven here.
    pub fn enter(self: &Arc<Self>, run_id: Uuid, user_id: &str) -> Driving {
        self.lock().insert(run_id, user_id.to_owned());
        Driving {
            runs: self.clone(),
            run_id,
        }
    }

    /// The runs driven now, with their users.
    pub fn snapshot(&self) -> Vec<(Uuid, String)> {
        self.lock()
            .iter()
            .map(|(run, user)| (*run, user.clone()))
            .collect()
    }

    /// Waits until no run is driven here or `deadline` passes; `true` when none is left.
    pub async fn until_idle(&self, deadline: Instant) -> bool {
        loop {
            let changed = self.changed.notified();
            if self.lock().is_empty() {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return self.lock().is_empty();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn waiting_ends_when_the_last_run_leaves_or_at_the_deadline() {
        let runs = Arc::new(ActiveRuns::default());
        let first = runs.enter(Uuid::new_v4(), "ann");
        let second = runs.enter(Uuid::new_v4(), "bob");
        assert_eq!(runs.snapshot().len(), 2);
        drop(first);
        let soon = Instant::now() + Duration::from_millis(50);
        assert!(!runs.until_idle(soon).await, "one run is still driven");
        let waiter = {
            let runs = runs.clone();
            tokio::spawn(async move {
                runs.until_idle(Instant::now() + Duration::from_secs(30))
                    .await
            })
        };
        drop(second);
        assert!(waiter.await.unwrap_or(false), "idle once the last run left");
    }
}
