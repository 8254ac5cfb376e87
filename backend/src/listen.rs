//! Serves the router over HTTP/1 with a header read timeout. `axum::serve` gives hyper
//! no timer, so a client that sends its headers a byte at a time (slowloris) would
//! hold its connection, and a file descriptor, for as long as it likes; here hyper
//! closes a connection whose request headers have not arrived within the timeout.
//! Shutting down works as `axum::serve`'s does: stop accepting, let every connection
//! finish what it is answering, wait for them; but for no longer than the grace period,
//! so a client that stops reading, or sends its body a byte at a time, cannot hold the
//! stop (and the hand-over of the runs after it).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long to wait before accepting again after the listener failed (out of file
/// descriptors, say), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Answers connections on `listener` with `app` until `shutdown` completes, then waits
/// up to `grace` for the open connections to finish and closes the rest.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    header_read_timeout: Duration,
    grace: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let (closing, closed) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    tracing::warn!(error = %err, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        if let Err(err) = stream.set_nodelay(true) {
            tracing::debug!(error = %err, "could not set TCP_NODELAY");
        }
        let service = TowerToHyperService::new(app.clone());
        let mut closing_now = closed.clone();
        connections.spawn(async move {
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout);
            let mut connection = pin!(builder.serve_connection(TokioIo::new(stream), service));
            tokio::select! {
                _ = connection.as_mut() => return,
                _ = closing_now.wait_for(|closing| *closing) => {}
            }
            connection.as_mut().graceful_shutdown();
            let _ = connection.await;
        });
        // Finished connections are reaped as new ones come, so the set stays small.
        while connections.try_join_next().is_some() {}
    }
    let _ = closing.send(true);
    let drained = tokio::time::timeout(grace, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = connections.len(),
            "closed the connections still open when the grace period ended"
        );
        connections.shutdown().await;
    }
}
