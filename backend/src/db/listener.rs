//! One LISTEN connection per server. It learns which conversation has new events,
//! whichever replica wrote them, reads them once and hands them to every stream that
//! follows that conversation here, so a notification costs one read per server, not
//! one per open stream.
//!
//! A notification names the conversation and the event id (or that the conversation is
//! gone), never the event: Postgres delivers a payload to every session that listens on
//! the database, past row-level security, so what a user's run said must not ride in it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use protocol::chat::StreamEvent;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

use super::events::{self, CHANNEL};

/// Most events one read takes; a longer backlog is read in several.
const BATCH: usize = 500;

/// New events of one conversation, read once for every stream following it here.
#[derive(Debug)]
pub struct EventBatch {
    pub conversation_id: Uuid,
    /// Every event of the conversation with an id above this one, up to the last of
    /// `events`, is in `events`. A stream that has sent everything up to here goes on
    /// from the batch; one further behind reads the gap for itself.
    pub complete_after: i64,
    pub events: Vec<StreamEvent>,
    /// Someone said the conversation is gone: each stream following it looks for
    /// itself (a stream's position says nothing about it, whatever it is).
    pub gone: bool,
}

pub struct EventHub {
    news: broadcast::Sender<Uuid>,
    batches: broadcast::Sender<Arc<EventBatch>>,
    followed: Mutex<HashMap<Uuid, Followed>>,
    reads: AtomicU64,
    /// Whether the connection listens now: a notification sent while it does not is
    /// never heard (streams and waiters poll meanwhile).
    listening: watch::Sender<bool>,
}

/// A conversation some stream here follows.
struct Followed {
    streams: usize,
    /// The last event id read for it; `None` until the first read, and again after a
    /// failed read or a lost connection (notifications may have been missed).
    position: Option<i64>,
}

/// A stream's place among its conversation's followers; dropping it leaves.
pub struct Following {
    hub: Arc<EventHub>,
    conversation_id: Uuid,
    batches: broadcast::Receiver<Arc<EventBatch>>,
}

impl Following {
    /// The next batch of the followed conversation; `None` when batches were missed
    /// (the stream fell behind), so the stream reads for itself.
    pub async fn next(&mut self) -> Option<Arc<EventBatch>> {
        loop {
            match self.batches.recv().await {
                Ok(batch) if batch.conversation_id == self.conversation_id => return Some(batch),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return None,
                Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
            }
        }
    }
}

impl Drop for Following {
    fn drop(&mut self) {
        let mut followed = self.hub.followed();
        if let Some(entry) = followed.get_mut(&self.conversation_id) {
            entry.streams -= 1;
            if entry.streams == 0 {
                followed.remove(&self.conversation_id);
            }
        }
    }
}

impl EventHub {
    pub fn start(pool: PgPool) -> Arc<Self> {
        let (news, _) = broadcast::channel(1024);
        let (batches, _) = broadcast::channel(1024);
        let hub = Arc::new(EventHub {
            news,
            batches,
            followed: Mutex::new(HashMap::new()),
            reads: AtomicU64::new(0),
            listening: watch::channel(false).0,
        });
        let listener = hub.clone();
        tokio::spawn(async move {
            loop {
                // In a task of its own, so that even a panic (a notification no one
                // foresaw) ends one connection, not listening for good.
                let (hub, on) = (listener.clone(), pool.clone());
                let result = tokio::spawn(async move { hub.listen(&on).await }).await;
                listener.listening.send_replace(false);
                // The pool closes as the server stops: nothing is lost, nothing to say.
                if pool.is_closed() {
                    return;
                }
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => {
                        tracing::warn!(error = %err, "event listener lost its connection; reconnecting");
                    }
                    Err(panicked) => {
                        tracing::error!(error = %panicked, "event listener failed; reconnecting");
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        hub
    }

    /// Conversation ids with new events, for waiters that read for themselves. They
    /// also poll now and then, so a missed notification only delays them.
    pub fn subscribe(&self) -> broadcast::Receiver<Uuid> {
        self.news.subscribe()
    }

    /// Follows a conversation's new events. Follow before reading what is already
    /// there, so nothing written in between is missed.
    pub fn follow(self: &Arc<Self>, conversation_id: Uuid) -> Following {
        let batches = self.batches.subscribe();
        self.followed()
            .entry(conversation_id)
            .or_insert(Followed {
                streams: 0,
                position: None,
            })
            .streams += 1;
        Following {
            hub: self.clone(),
            conversation_id,
            batches,
        }
    }

    /// How many reads of new events this server has made for its streams.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// Waits until the connection listens, so what is written from then on is heard.
    #[cfg(test)]
    pub async fn listening(&self) {
        let mut listening = self.listening.subscribe();
        // The sender lives as long as the hub.
        let _ = listening.wait_for(|listening| *listening).await;
    }

    fn followed(&self) -> MutexGuard<'_, HashMap<Uuid, Followed>> {
        // The map stays consistent whatever a panicking holder did: counts and
        // positions are each written in one step.
        self.followed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn set_position(&self, conversation_id: Uuid, position: Option<i64>) -> bool {
        match self.followed().get_mut(&conversation_id) {
            Some(entry) => {
                entry.position = position;
                true
            }
            None => false,
        }
    }

    async fn listen(&self, pool: &PgPool) -> sqlx::Result<()> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        // Notifications sent while no connection listened are lost: start over.
        for entry in self.followed().values_mut() {
            entry.position = None;
        }
        self.listening.send_replace(true);
        loop {
            let notification = listener.recv().await?;
            let Some(notice) = parse_payload(notification.payload()) else {
                continue;
            };
            match notice {
                Notice::Event {
                    conversation_id,
                    event_id,
                } => {
                    // No subscribers is fine.
                    let _ = self.news.send(conversation_id);
                    if let Err(err) = self
                        .read_for_followers(pool, conversation_id, event_id)
                        .await
                    {
                        tracing::warn!(error = %err, "could not read new events for the streams; each reads for itself");
                        self.set_position(conversation_id, None);
                    }
                }
                Notice::Gone { conversation_id } => {
                    let _ = self.news.send(conversation_id);
                    // Each stream following it reads for itself, and finds the
                    // conversation gone (one still there, whoever said otherwise,
                    // costs a read, no more).
                    if self.followed().contains_key(&conversation_id) {
                        let _ = self.batches.send(Arc::new(EventBatch {
                            conversation_id,
                            complete_after: i64::MAX,
                            events: Vec::new(),
                            gone: true,
                        }));
                    }
                }
            }
        }
    }

    /// Reads the conversation's events from where this server last read (or from the
    /// notified event) and hands them to its followers. Ids of one conversation become
    /// visible in order (see `events::append`) and notifications arrive in commit
    /// order, so every event before the notified one is already there.
    async fn read_for_followers(
        &self,
        pool: &PgPool,
        conversation_id: Uuid,
        event_id: i64,
    ) -> sqlx::Result<()> {
        let position = match self.followed().get(&conversation_id) {
            None => return Ok(()),
            Some(entry) => entry.position,
        };
        let mut after = match position {
            // An earlier read already took this event.
            Some(position) if position >= event_id => return Ok(()),
            Some(position) => position,
            None => event_id.saturating_sub(1),
        };
        loop {
            let mut tx = super::begin_background(pool).await?;
            let (batch, more) = events::after(&mut tx, conversation_id, after, BATCH).await?;
            tx.commit().await?;
            self.reads.fetch_add(1, Ordering::Relaxed);
            let Some(last) = batch.last().map(|event| event.id) else {
                return Ok(());
            };
            if !self.set_position(conversation_id, Some(last)) {
                return Ok(());
            }
            // No stream may be listening any more; that is fine.
            let _ = self.batches.send(Arc::new(EventBatch {
                conversation_id,
                complete_after: after,
                events: batch,
                gone: false,
            }));
            after = last;
            if !more {
                return Ok(());
            }
        }
    }
}

/// What a notification on the events channel says.
#[derive(Debug, PartialEq)]
enum Notice {
    /// `<conversation id> <event id>`, as `events::append` sends it.
    Event {
        conversation_id: Uuid,
        event_id: i64,
    },
    /// `<conversation id> gone`, as `conversations::delete` sends it.
    Gone { conversation_id: Uuid },
}

fn parse_payload(payload: &str) -> Option<Notice> {
    let (conversation, rest) = payload.split_once(' ')?;
    let conversation_id = conversation.parse().ok()?;
    if rest == "gone" {
        return Some(Notice::Gone { conversation_id });
    }
    // Event ids count up from 1; anything else is not a notice of ours.
    let event_id = rest.parse().ok().filter(|id: &i64| *id > 0)?;
    Some(Notice::Event {
        conversation_id,
        event_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::{self, conversations, events};
    use protocol::chat::EventKind;

    #[test]
    fn a_payload_names_a_conversation_and_an_event_or_its_end() {
        let id = Uuid::new_v4();
        assert_eq!(
            parse_payload(&format!("{id} 42")),
            Some(Notice::Event {
                conversation_id: id,
                event_id: 42
            })
        );
        assert_eq!(
            parse_payload(&format!("{id} gone")),
            Some(Notice::Gone {
                conversation_id: id
            })
        );
        assert_eq!(parse_payload(&id.to_string()), None);
        assert_eq!(parse_payload(&format!("{id} x")), None);
        assert_eq!(parse_payload("x 42"), None);
        assert_eq!(parse_payload("x gone"), None);
        // Any session on the database may notify the channel: ids no event has are
        // not taken for one (the smallest would overflow the read's starting point).
        assert_eq!(parse_payload(&format!("{id} 0")), None);
        assert_eq!(parse_payload(&format!("{id} -1")), None);
        assert_eq!(parse_payload(&format!("{id} {}", i64::MIN)), None);
    }

    async fn write_event(pool: &PgPool, conversation_id: Uuid, user: &str, n: usize) {
        let mut tx = db::begin_as_user(pool, user).await.expect("begin");
        events::append(
            &mut tx,
            conversation_id,
            user,
            None,
            &EventKind::ElicitationCompleted {
                request_id: Uuid::new_v4(),
                tool_call_id: format!("call_{n}"),
            },
        )
        .await
        .expect("append");
        tx.commit().await.expect("commit");
    }

    #[tokio::test]
    async fn streams_of_one_conversation_share_one_read_per_notification() {
        let pool = db::tests::scratch_pool().await;
        let hub = EventHub::start(pool.clone());
        let user = "hub-user";
        let conversation_id = {
            let mut tx = db::begin_as_user(&pool, user).await.expect("begin");
            let conversation = conversations::insert(&mut tx, user, "t")
                .await
                .expect("conversation");
            tx.commit().await.expect("commit");
            conversation.id
        };
        // A notification sent before the connection listens is never heard.
        tokio::time::timeout(Duration::from_secs(30), hub.listening())
            .await
            .expect("the listener never connected");
        let mut news = hub.subscribe();
        write_event(&pool, conversation_id, user, 0).await;
        tokio::time::timeout(Duration::from_secs(10), news.recv())
            .await
            .expect("the listener never heard the first event")
            .expect("news");
        let mut streams: Vec<Following> = (0..10).map(|_| hub.follow(conversation_id)).collect();

        let reads_before = hub.reads();
        for n in 1..=3 {
            write_event(&pool, conversation_id, user, n).await;
        }
        let mut all = Vec::new();
        for stream in &mut streams {
            let mut seen = Vec::new();
            while seen.len() < 3 {
                let batch = tokio::time::timeout(Duration::from_secs(10), stream.next())
                    .await
                    .expect("a batch")
                    .expect("no batch missed");
                seen.extend(batch.events.iter().map(|event| event.id));
            }
            all.push(seen);
        }
        let reads = hub.reads() - reads_before;
        assert!(
            (1..=3).contains(&reads),
            "10 streams, 3 notifications: {reads} reads"
        );
        let stored: Vec<i64> = {
            let mut tx = db::begin_as_user(&pool, user).await.expect("begin");
            let (stored, _) = events::after(&mut tx, conversation_id, 0, 100)
                .await
                .expect("events");
            stored.iter().skip(1).map(|event| event.id).collect()
        };
        for seen in all {
            assert_eq!(
                seen, stored,
                "every stream gets every new event once, in order"
            );
        }

        // Streams that leave are forgotten.
        drop(streams);
        assert!(hub.followed().is_empty());
    }
}
