//! One LISTEN connection per server: tells every open event stream which conversation
//! has new events, whichever replica wrote them.

use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::events::CHANNEL;

pub struct EventHub {
    sender: broadcast::Sender<Uuid>,
}

impl EventHub {
    pub fn start(pool: PgPool) -> Arc<Self> {
        let (sender, _) = broadcast::channel(1024);
        let hub = Arc::new(EventHub { sender });
        let publisher = hub.sender.clone();
        tokio::spawn(async move {
            loop {
                if let Err(err) = listen(&pool, &publisher).await {
                    tracing::warn!(error = %err, "event listener lost its connection; reconnecting");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        hub
    }

    /// Conversation ids with new events. Streams also poll now and then, so a missed
    /// notification only delays an event.
    pub fn subscribe(&self) -> broadcast::Receiver<Uuid> {
        self.sender.subscribe()
    }
}

async fn listen(pool: &PgPool, publisher: &broadcast::Sender<Uuid>) -> sqlx::Result<()> {
    let mut listener = PgListener::connect_with(pool).await?;
    listener.listen(CHANNEL).await?;
    loop {
        let notification = listener.recv().await?;
        if let Ok(conversation_id) = notification.payload().parse::<Uuid>() {
            // No subscribers is fine.
            let _ = publisher.send(conversation_id);
        }
    }
}
