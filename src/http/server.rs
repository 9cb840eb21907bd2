//! The connection side of [`Api::serve`]: an accept loop with a connection limit, and per
//! connection the timeouts `axum::serve` does not have.
//!
//! - A request's headers must arrive within [`ApiOptions::request_timeout`] of its first byte
//!   (slowloris); a connection with no request in flight and no byte of a next one is closed
//!   after [`ApiOptions::idle_timeout`] (idle keep-alive, connected and silent).
//! - At most [`connection_limit`] connections are served. At the limit, the connection idle
//!   the longest is closed to make room (idle ones cost nothing to drop); when every
//!   connection has a request in flight, the new one gets `503` and is closed. Running out of
//!   file descriptors on `accept` does the same, so `/healthz` stays reachable however many
//!   idle connections are opened against the process.
//!
//! Each connection is one task that owns its hyper connection; its [`Conn`] record (shared
//! with the accept loop through [`Connections`]) says whether a request is in flight and since
//! when it is idle. Its IO wrapper notes the first byte of a request, its service the start
//! and end of each response.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::options::ApiOptions;

/// The answer to a connection beyond the limit when no idle one can be closed.
const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
content-type: application/json\r\ncache-control: no-store\r\nconnection: close\r\n\
retry-after: 1\r\ncontent-length: 86\r\n\r\n\
{\"error\":\"too many connections with requests in flight\",\"code\":\"too_many_connections\"}";

/// Pause after an `accept` error that closing an idle connection cannot help.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// What one connection is doing.
#[derive(Debug, Clone, Copy)]
enum Activity {
    /// No request in flight since `since`; `request_started`: the first byte of the next one.
    Idle {
        since: Instant,
        request_started: Option<Instant>,
    },
    /// A request is being answered (until its response body is done).
    Busy,
}

/// One connection's record.
#[derive(Debug)]
struct Conn {
    id: u64,
    activity: Mutex<Activity>,
    /// Wakes the connection's task when its deadline moves.
    changed: Notify,
    /// Cancelled to close the connection at once (to make room for a new one).
    close: CancellationToken,
}

impl Conn {
    fn activity(&self) -> Activity {
        *self.activity.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set(&self, activity: Activity) {
        *self.activity.lock().unwrap_or_else(PoisonError::into_inner) = activity;
        self.changed.notify_one();
    }

    /// Bytes arrived: the first ones after an idle spell start the next request's clock.
    fn bytes_arrived(&self) {
        let mut activity = self.activity.lock().unwrap_or_else(PoisonError::into_inner);
        if let Activity::Idle {
            since,
            request_started: None,
        } = *activity
        {
            *activity = Activity::Idle {
                since,
                request_started: Some(Instant::now()),
            };
            drop(activity);
            self.changed.notify_one();
        }
    }

    /// When the connection is to be closed unless something happens; `None` while busy.
    fn deadline(&self, options: &ApiOptions) -> Option<Instant> {
        match self.activity() {
            Activity::Busy => None,
            Activity::Idle {
                request_started: Some(started),
                ..
            } => Some(started + options.request_timeout),
            Activity::Idle { since, .. } => Some(since + options.idle_timeout),
        }
    }

    fn idle_since(&self) -> Option<Instant> {
        match self.activity() {
            Activity::Busy => None,
            Activity::Idle { since, .. } => Some(since),
        }
    }
}

/// Marks a request in flight until dropped (with the response body, or the handler's future).
struct InFlight(Arc<Conn>);

impl InFlight {
    fn new(conn: Arc<Conn>) -> Self {
        conn.set(Activity::Busy);
        Self(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.set(Activity::Idle {
            since: Instant::now(),
            request_started: None,
        });
    }
}

/// The open connections.
#[derive(Debug, Default)]
struct Connections {
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
}

impl Connections {
    fn len(&self) -> usize {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    fn register(&self) -> Arc<Conn> {
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            activity: Mutex::new(Activity::Idle {
                since: Instant::now(),
                request_started: None,
            }),
            changed: Notify::new(),
            close: CancellationToken::new(),
        });
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(conn.id, conn.clone());
        conn
    }

    fn remove(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }

    /// Closes the connection idle the longest; `false` when every one is busy.
    fn close_longest_idle(&self) -> bool {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let oldest = open
            .values()
            .filter_map(|c| c.idle_since().map(|since| (since, c.id)))
            .min();
        let Some((_, id)) = oldest else {
            return false;
        };
        if let Some(conn) = open.remove(&id) {
            conn.close.cancel();
        }
        true
    }
}

/// Removes a connection's record when its task ends.
struct Registered<'a>(&'a Connections, u64);

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

/// The connection limit in force: [`ApiOptions::max_connections`], at most half the
/// process's open-file limit (the rest is left to NATS and everything else), at least 1.
#[must_use]
pub(crate) fn connection_limit(options: &ApiOptions) -> usize {
    let by_files = open_file_limit().map_or(usize::MAX, |n| n / 2);
    options.max_connections.min(by_files).max(1)
}

/// The soft `RLIMIT_NOFILE`, if there is one.
#[cfg(unix)]
fn open_file_limit() -> Option<usize> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `limit` is a valid, writable rlimit; getrlimit only writes to it.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) };
    if rc != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return None;
    }
    usize::try_from(limit.rlim_cur).ok()
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<usize> {
    None
}

/// Whether an `accept` error means the process (or system) is out of file descriptors.
fn out_of_files(e: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// Which router answers a request: asked once per request, so that a listener can change
/// what it serves (a starting process's probes, then its API) on connections already open.
pub(crate) type Routes = Arc<dyn Fn() -> Router + Send + Sync>;

/// Serves the router of `routes` on `listener` until `shutdown` is cancelled, then closes idle
/// connections, lets the others finish their requests, and returns.
pub(crate) async fn serve(
    listener: TcpListener,
    routes: Routes,
    options: ApiOptions,
    shutdown: CancellationToken,
) {
    let connections = Arc::new(Connections::default());
    let options = Arc::new(options);
    let tasks = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                if out_of_files(&e) && connections.close_longest_idle() {
                    tracing::debug!(error = %e, "out of file descriptors: closed an idle connection");
                    // Its descriptor is freed once its task sees the cancellation.
                    tokio::task::yield_now().await;
                } else {
                    tracing::warn!(error = %e, "accepting an HTTP connection failed");
                    tokio::select! {
                        () = shutdown.cancelled() => break,
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
                continue;
            }
        };
        if connections.len() >= connection_limit(&options) && !connections.close_longest_idle() {
            tracing::debug!(%peer, "connection limit reached, every connection busy: 503");
            // A fresh socket's send buffer takes the short answer at once; no task needed.
            let _ = stream.try_write(REFUSED);
            continue;
        }
        let conn = connections.register();
        tasks.spawn(connection(
            stream,
            peer,
            conn,
            connections.clone(),
            routes.clone(),
            options.clone(),
            shutdown.clone(),
        ));
    }
    drop(listener);
    tasks.close();
    tasks.wait().await;
}

/// One connection: hyper's HTTP/1 state machine plus the deadlines of [`Conn`].
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    conn: Arc<Conn>,
    connections: Arc<Connections>,
    routes: Routes,
    options: Arc<ApiOptions>,
    shutdown: CancellationToken,
) {
    let _registered = Registered(&connections, conn.id);
    let _ = stream.set_nodelay(true);
    let io = TokioIo::new(Watched {
        stream,
        conn: conn.clone(),
    });
    let service = Service {
        routes,
        peer,
        conn: conn.clone(),
    };
    let http = http1::Builder::new()
        // Replaced by the deadlines below (hyper's runs from the end of the last response,
        // so it cannot tell an idle keep-alive connection from a slow request).
        .header_read_timeout(None)
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(http);
    let mut draining = false;
    loop {
        let deadline = conn.deadline(&options);
        tokio::select! {
            biased;
            () = conn.close.cancelled() => {
                tracing::debug!(%peer, "closed an idle connection to make room");
                return;
            }
            () = shutdown.cancelled(), if !draining => {
                // Closes it when idle, else after the request in flight.
                http.as_mut().graceful_shutdown();
                draining = true;
            }
            () = conn.changed.notified() => {}
            () = sleep_until(deadline) => {
                if conn.deadline(&options).is_some_and(|d| d <= Instant::now()) {
                    tracing::debug!(%peer, "closed a connection: request or idle timeout");
                    return;
                }
            }
            done = http.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(%peer, error = %e, "HTTP connection ended with an error");
                }
                return;
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// The TCP stream, noting when bytes arrive.
struct Watched {
    stream: TcpStream,
    conn: Arc<Conn>,
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.conn.bytes_arrived();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The router as a hyper service: adds the peer address (`ConnectInfo`) and marks the
/// request in flight until its response body is done.
struct Service {
    routes: Routes,
    peer: SocketAddr,
    conn: Arc<Conn>,
}

type ResponseFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, mut request: Request<Incoming>) -> Self::Future {
        let in_flight = InFlight::new(self.conn.clone());
        request.extensions_mut().insert(ConnectInfo(self.peer));
        let response = TowerToHyperService::new((self.routes)()).call(request);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|body| {
                Body::new(Tracked {
                    body,
                    _in_flight: in_flight,
                })
            }))
        })
    }
}

/// A response body that keeps its request in flight until it is done (or dropped).
struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_is_a_complete_response() {
        let text = std::str::from_utf8(REFUSED).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let json: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(json["code"], "too_many_connections");
    }

    #[tokio::test(start_paused = true)]
    async fn the_longest_idle_connection_is_closed_first_and_busy_ones_never() {
        let connections = Connections::default();
        let a = connections.register();
        tokio::time::advance(Duration::from_secs(1)).await;
        let b = connections.register();
        let c = connections.register();
        let busy = InFlight::new(a.clone());
        assert!(connections.close_longest_idle());
        assert!(b.close.is_cancelled() && !a.close.is_cancelled() && !c.close.is_cancelled());
        assert_eq!(connections.len(), 2);
        let _busy_c = InFlight::new(c.clone());
        assert!(
            !connections.close_longest_idle(),
            "only busy connections left"
        );
        drop(busy);
        assert!(connections.close_longest_idle());
        assert!(a.close.is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_what_the_connection_does() {
        let options = ApiOptions::default()
            .with_request_timeout(Duration::from_secs(10))
            .with_idle_timeout(Duration::from_secs(60));
        let connections = Connections::default();
        let conn = connections.register();
        let start = Instant::now();
        assert_eq!(
            conn.deadline(&options),
            Some(start + Duration::from_secs(60))
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        conn.bytes_arrived();
        let first_byte = Instant::now();
        assert_eq!(
            conn.deadline(&options),
            Some(first_byte + Duration::from_secs(10))
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        conn.bytes_arrived();
        assert_eq!(
            conn.deadline(&options),
            Some(first_byte + Duration::from_secs(10)),
            "trickling bytes do not extend the request's time"
        );
        let request = InFlight::new(conn.clone());
        assert_eq!(conn.deadline(&options), None);
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(request);
        assert_eq!(
            conn.deadline(&options),
            Some(Instant::now() + Duration::from_secs(60))
        );
    }
}
