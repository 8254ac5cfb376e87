//! Serves the router over HTTP/1 with a header read timeout. `axum::serve` gives hyper
//! no timer, so a client that sends its headers a byte at a time (slowloris) would
//! hold its connection, and a file descriptor, for as long as it likes; here hyper
//! closes a connection whose request headers have not arrived within the timeout.
//! Shutting down works as `axum::serve`'s does: stop accepting, let every connection
//! finish what it is answering, wait for them; but for no longer than the grace period,
//! so a client that stops reading, or sends its body a byte at a time, cannot hold the
//! stop (and the hand-over of the runs after it). A connection whose client takes
//! nothing of an answer for the write timeout is closed: a client that stops reading an
//! event stream would otherwise keep its stream place, and what was queued for it, for
//! as long as it kept the socket open.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// How long to wait before accepting again after the listener failed (out of file
/// descriptors, say), so the loop does not spin.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// How long a connection may wait for its client.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// For a request's headers.
    pub header_read: Duration,
    /// For the client to take any of an answer.
    pub write: Duration,
}

/// Answers connections on `listener` with `app` until `shutdown` completes, then waits
/// up to `grace` for the open connections to finish and closes the rest.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: Timeouts,
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
                .header_read_timeout(timeouts.header_read);
            let stream = WriteDeadline::new(stream, timeouts.write);
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

/// A socket whose writes fail once none could go out for `limit`: hyper then closes the
/// connection and drops the answer it was sending.
struct WriteDeadline<T> {
    inner: T,
    limit: Duration,
    /// Set while writes wait for the client.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> WriteDeadline<T> {
    fn new(inner: T, limit: Duration) -> Self {
        WriteDeadline {
            inner,
            limit,
            stalled: None,
        }
    }

    /// `progress` as it is, or the write's failure once it has waited `limit`.
    fn unless_stalled<R>(
        &mut self,
        cx: &mut Context<'_>,
        progress: Poll<io::Result<R>>,
    ) -> Poll<io::Result<R>> {
        if progress.is_ready() {
            self.stalled = None;
            return progress;
        }
        let limit = self.limit;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        if stalled.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client took nothing of the answer for the write timeout",
            )));
        }
        Poll::Pending
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WriteDeadline<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WriteDeadline<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let progress = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.unless_stalled(cx, progress)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let progress = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.unless_stalled(cx, progress)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let progress = Pin::new(&mut self.inner).poll_flush(cx);
        self.unless_stalled(cx, progress)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;

    use super::*;

    #[tokio::test]
    async fn a_write_the_other_side_never_takes_fails_after_the_limit() {
        let (near, far) = tokio::io::duplex(16);
        let mut socket = WriteDeadline::new(near, Duration::from_millis(200));
        socket.write_all(&[1; 16]).await.expect("fits the buffer");
        let started = tokio::time::Instant::now();
        let stalled = socket.write_all(&[2; 16]).await.expect_err("nobody reads");
        assert_eq!(stalled.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(200));
        drop(far);
    }

    #[tokio::test]
    async fn a_slow_reader_that_keeps_taking_is_not_cut_off() {
        let (near, mut far) = tokio::io::duplex(16);
        let mut socket = WriteDeadline::new(near, Duration::from_millis(300));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0; 8];
            while let Ok(n) = tokio::io::AsyncReadExt::read(&mut far, &mut chunk).await {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&chunk[..n]);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            got.len()
        });
        // 128 bytes, 8 every 100 ms: far longer than the limit in all, never stalled
        // for as long as the limit.
        socket.write_all(&[3; 128]).await.expect("taken, slowly");
        socket.shutdown().await.expect("shut");
        drop(socket);
        assert_eq!(reader.await.expect("reader"), 128);
    }
}
