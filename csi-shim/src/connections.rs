//! The CSI socket's connections: accepted by a loop of our own (tonic's ends quietly at the
//! first accept error it does not expect, EMFILE among them) and served by hyper's HTTP/2
//! within bounds, so that no client, however hostile, stops the server or grows its memory
//! without limit. docs/csi.md ("Limits and timeouts") says why each value is what it is.
//!
//! Invariants:
//! - at most [`Limits::max_connections`] connections are served ([`crate::slots`]: at the
//!   cap the connection idle longest makes room, dropped [`EVICT_GRACE`] after its GOAWAY,
//!   and when none is idle the new one is closed at once);
//! - at most [`Limits::max_streams`] streams per connection (SETTINGS_MAX_CONCURRENT_STREAMS,
//!   enforced by h2 from the first frame);
//! - a failed accept is logged with its errno and retried after a pause that doubles up to
//!   [`ACCEPT_PAUSE_MAX`]; only an error saying that the listener itself is broken ends
//!   serving, and then as an error;
//! - a connection is pinged every [`Limits::keepalive`] and closed when a ping is not
//!   answered within [`Limits::keepalive_timeout`]; with no stream for [`Limits::idle`] it is
//!   closed gracefully (GOAWAY), and dropped if still open [`CLOSE_GRACE`] later;
//! - at shutdown every connection gets GOAWAY; calls in progress finish, and a connection
//!   with none is dropped if still open [`SHUTDOWN_GRACE`] later;
//! - a call's request is read whole before it is handled (no CSI call streams): within
//!   [`Limits::body_timeout`], at most [`MAX_REQUEST_BYTES`], and the request bytes of all
//!   calls in progress together at most [`Limits::request_budget`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tonic::body::BoxBody;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::Bytes;
use tonic::Status;
use tower::ServiceExt;

use crate::authority::Mended;
use crate::every::Every;
use crate::slots::{Slot, Table};

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket could not be made.
    #[error("{path}: {source}")]
    Socket {
        /// The socket path.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A thread of the server could not be started.
    #[error("starting the {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The socket stopped accepting connections (not for a shortage, which is waited out).
    #[error("accepting connections: {0}")]
    Accept(std::io::Error),
}

/// The error of the services served (tonic's router).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The longest request a call may send: tonic's largest decoded message (4 MiB, as gRPC's
/// default) and the 5-byte gRPC frame header.
pub const MAX_REQUEST_BYTES: usize = (4 << 20) + 5;
/// The HTTP/2 flow-control windows (stream and connection): how much of a client's data h2
/// buffers before it is read.
pub const WINDOW: u32 = 256 << 10;
/// The largest header list a client may send (SETTINGS_MAX_HEADER_LIST_SIZE; hyper's default).
pub const MAX_HEADER_LIST: u32 = 16 << 10;
/// The first pause after a failed accept.
pub const ACCEPT_PAUSE: Duration = Duration::from_millis(10);
/// The longest pause between failed accepts.
pub const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);
/// How long an idle connection told to close may take to do so.
pub const CLOSE_GRACE: Duration = Duration::from_secs(30);
/// How long a connection told to close to make room may take to do so (time to send its
/// GOAWAY: a flood of connections must not pile up closing ones).
pub const EVICT_GRACE: Duration = Duration::from_millis(100);
/// How long a connection with no call in progress may stay open once the server shuts down
/// (time for a live client to read the GOAWAY; a stalled one does not hold up the exit).
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);
/// How often a persisting problem (failing accepts, a full table) is logged at most.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The bounds of the CSI socket's connections; [`Limits::default`] is what csi-shim serves
/// with (tests shorten the timeouts).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most connections served at once.
    pub max_connections: usize,
    /// Most streams (calls) in progress per connection.
    pub max_streams: u32,
    /// How often an HTTP/2 ping checks that the client is there.
    pub keepalive: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// How long a connection may have no stream before it is closed.
    pub idle: Duration,
    /// How long a call's request may take to arrive once its headers have.
    pub body_timeout: Duration,
    /// The request bytes of all calls in progress together.
    pub request_budget: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 32,
            max_streams: 64,
            keepalive: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(20),
            idle: Duration::from_secs(300),
            body_timeout: Duration::from_secs(10),
            request_budget: 32 << 20,
        }
    }
}

/// Serves `service` on every connection accepted from `listener` until `shutdown`
/// resolves, then closes the connections gracefully and returns once the calls in flight
/// have finished. An error only when the listener itself fails.
pub async fn serve<S>(
    listener: UnixListener,
    service: S,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError>
where
    S: tower::Service<Request<BoxBody>, Response = Response<BoxBody>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    tokio::pin!(shutdown);
    let table = Table::new(limits.max_connections);
    let (stop, stopping) = watch::channel(false);
    let mut tasks = tokio::task::JoinSet::new();
    let mut failures = Failures::default();
    let full = Every::default();
    'accept: loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(done) = tasks.join_next() => reap(done),
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    failures.recovered();
                    match table.admit() {
                        Some(slot) => {
                            let conn = connection(stream, slot, service.clone(), limits.clone(), stopping.clone());
                            tasks.spawn(conn);
                        }
                        None => {
                            if full.due(LOG_EVERY) {
                                tracing::warn!(connections = table.len(), "every CSI connection is busy: closing new ones");
                            }
                        }
                    }
                }
                Err(e) if listener_broken(&e) => {
                    tracing::error!(errno = e.raw_os_error(), error = %e, "the CSI socket cannot accept connections");
                    return Err(ServeError::Accept(e));
                }
                Err(e) => {
                    let pause = failures.failed(&e);
                    tokio::select! {
                        () = &mut shutdown => break 'accept,
                        () = tokio::time::sleep(pause) => {}
                    }
                }
            },
        }
    }
    // Every connection closes gracefully: calls in flight finish first.
    let _ = stop.send(true);
    while let Some(done) = tasks.join_next().await {
        reap(done);
    }
    Ok(())
}

/// Logs a connection task that panicked.
fn reap(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done {
        tracing::error!(error = %e, "a CSI connection's task failed");
    }
}

/// Whether an accept error says the listening socket itself is unusable (retrying cannot
/// help), rather than a shortage (descriptors, memory) or one client's trouble.
fn listener_broken(e: &std::io::Error) -> bool {
    use nix::libc;
    matches!(
        e.raw_os_error(),
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP | libc::EFAULT)
    )
}

/// A run of failed accepts: how long to pause, and when it was last logged.
struct Failures {
    count: u64,
    pause: Duration,
    log: Every,
}

impl Default for Failures {
    fn default() -> Self {
        Failures {
            count: 0,
            pause: ACCEPT_PAUSE,
            log: Every::default(),
        }
    }
}

impl Failures {
    /// One more failure: logged (at most every [`LOG_EVERY`]), and the pause before the next
    /// accept.
    fn failed(&mut self, e: &std::io::Error) -> Duration {
        self.count += 1;
        let pause = self.pause;
        if self.log.due(LOG_EVERY) {
            tracing::warn!(
                errno = e.raw_os_error(),
                error = %e,
                failures = self.count,
                pause_ms = pause.as_millis() as u64,
                "accepting a CSI connection failed; retrying"
            );
        }
        self.pause = (pause * 2).min(ACCEPT_PAUSE_MAX);
        pause
    }

    /// An accept succeeded: the run is over.
    fn recovered(&mut self) {
        if self.count > 0 {
            tracing::info!(failures = self.count, "accepting CSI connections again");
            *self = Failures::default();
        }
    }
}

/// Why a connection is being closed by the server.
#[derive(Debug, Clone, Copy)]
enum Closing {
    /// No stream for [`Limits::idle`] (dropped if still open [`CLOSE_GRACE`] later), or a
    /// newer connection took its place (dropped [`EVICT_GRACE`] later): dropped then.
    Early(Instant),
    /// The server shuts down (since then): calls in flight finish, then the connection is
    /// dropped if still open [`SHUTDOWN_GRACE`] later.
    Shutdown(Instant),
}

/// Serves one connection until it ends (see the module's invariants).
async fn connection<S>(
    stream: UnixStream,
    slot: Slot,
    service: S,
    limits: Limits,
    mut stopping: watch::Receiver<bool>,
) where
    S: tower::Service<Request<BoxBody>, Response = Response<BoxBody>, Error = BoxError>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let slot = Arc::new(slot);
    let mut activity = slot.activity();
    let streams = slot.clone();
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        // The stream counts as open until its response body is dropped (sent or reset).
        let busy = streams.busy();
        let req = req.map(|b| {
            b.map_err(|e| Status::from_error(Box::new(e)))
                .boxed_unsync()
        });
        let call = service.clone().oneshot(req);
        async move {
            // A failure of the router itself answers as a gRPC status, as tonic does.
            let response = call
                .await
                .unwrap_or_else(|e| Status::from_error(e).into_http());
            Ok::<_, std::convert::Infallible>(response.map(|b| {
                b.map_frame(move |f| {
                    let _open = &busy;
                    f
                })
                .boxed_unsync()
            }))
        }
    });
    let mut http = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http.timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_streams)
        .keep_alive_interval(limits.keepalive)
        .keep_alive_timeout(limits.keepalive_timeout)
        .initial_stream_window_size(WINDOW)
        .initial_connection_window_size(WINDOW)
        .max_header_list_size(MAX_HEADER_LIST);
    let conn = http.serve_connection(TokioIo::new(Mended::new(stream)), svc);
    tokio::pin!(conn);
    let mut closing: Option<Closing> = None;
    loop {
        let now = *activity.borrow_and_update();
        let idle_until = (now.open == 0 && closing.is_none()).then(|| now.since + limits.idle);
        let drop_at = match closing {
            Some(Closing::Early(at)) => Some(at),
            Some(Closing::Shutdown(since)) if now.open == 0 => {
                Some(since.max(now.since) + SHUTDOWN_GRACE)
            }
            _ => None,
        };
        let early = || Closing::Early(Instant::now() + CLOSE_GRACE);
        let (why, how) = tokio::select! {
            ended = conn.as_mut() => {
                if let Err(e) = ended {
                    tracing::debug!(error = %e, "a CSI connection ended");
                }
                return;
            }
            () = sleep_until(drop_at) => {
                tracing::debug!("dropping a CSI connection that did not close");
                return;
            }
            Ok(()) = activity.changed() => continue,
            () = sleep_until(idle_until) => ("idle", early()),
            () = slot.evicted(), if closing.is_none() => {
                ("a newer connection takes its place", Closing::Early(Instant::now() + EVICT_GRACE))
            }
            Ok(()) = stopping.changed(), if !matches!(closing, Some(Closing::Shutdown(_))) => ("shutdown", Closing::Shutdown(Instant::now())),
        };
        tracing::debug!(why, "closing a CSI connection");
        conn.as_mut().graceful_shutdown();
        closing = Some(how);
    }
}

/// Sleeps until `at`; never resolves for `None`.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// A layer reading each call's request whole before the call is handled ([`Collect`]).
#[derive(Clone)]
pub struct CollectLayer {
    budget: Arc<Semaphore>,
    timeout: Duration,
}

impl CollectLayer {
    /// Requests read within `limits.body_timeout`, under `limits.request_budget`.
    pub fn new(limits: &Limits) -> Self {
        CollectLayer {
            budget: Arc::new(Semaphore::new(limits.request_budget)),
            timeout: limits.body_timeout,
        }
    }
}

impl<S> tower::Layer<S> for CollectLayer {
    type Service = Collect<S>;

    fn layer(&self, inner: S) -> Collect<S> {
        Collect {
            inner,
            budget: self.budget.clone(),
            timeout: self.timeout,
        }
    }
}

/// Reads a call's request whole, within a time and a size, its bytes counted against a
/// budget shared by all calls until the call ends; answers DEADLINE_EXCEEDED or
/// RESOURCE_EXHAUSTED itself when the request is late or too large.
#[derive(Clone)]
pub struct Collect<S> {
    inner: S,
    budget: Arc<Semaphore>,
    timeout: Duration,
}

impl<S> tower::Service<Request<BoxBody>> for Collect<S>
where
    S: tower::Service<Request<BoxBody>, Response = Response<BoxBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<BoxBody>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn Future<Output = Result<Response<BoxBody>, S::Error>> + Send + 'static>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<BoxBody>) -> Self::Future {
        // The service made ready is the one called; a clone takes its place.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let (budget, timeout) = (self.budget.clone(), self.timeout);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let (bytes, permits) = match tokio::time::timeout(timeout, read(body, budget)).await {
                Ok(Ok(read)) => read,
                Ok(Err(status)) => return Ok(status.into_http()),
                Err(_) => {
                    let late = format!("the request did not arrive within {timeout:?}");
                    return Ok(Status::deadline_exceeded(late).into_http());
                }
            };
            let body = Full::new(bytes).map_err(|never| match never {});
            let response = inner
                .call(Request::from_parts(parts, body.boxed_unsync()))
                .await;
            drop(permits);
            response
        })
    }
}

/// A request body, whole: at most [`MAX_REQUEST_BYTES`] (refused from its gRPC frame header
/// on, before the rest is read), each chunk counted against `budget` (waiting for room)
/// before it is kept.
async fn read(
    mut body: BoxBody,
    budget: Arc<Semaphore>,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), Status> {
    let too_large = |n: usize| {
        Status::resource_exhausted(format!(
            "request of {n} bytes exceeds {MAX_REQUEST_BYTES} bytes"
        ))
    };
    let mut buf: Vec<u8> = Vec::new();
    let mut permits: Option<OwnedSemaphorePermit> = None;
    while let Some(frame) = body.frame().await {
        // Trailers are not part of a CSI request.
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        let total = buf.len() + data.len();
        if total > MAX_REQUEST_BYTES {
            return Err(too_large(total));
        }
        // Within MAX_REQUEST_BYTES, so within u32 and the budget (which is never closed).
        let n = u32::try_from(data.len()).map_err(|_| too_large(total))?;
        let p = budget
            .clone()
            .acquire_many_owned(n)
            .await
            .map_err(|_| Status::unavailable("the server is shutting down"))?;
        match &mut permits {
            Some(all) => all.merge(p),
            None => permits = Some(p),
        }
        if buf.is_empty() && data.len() >= 5 {
            // The gRPC frame header announces the message's length: room for all of it.
            let announced = 5 + u32::from_be_bytes([data[1], data[2], data[3], data[4]]) as usize;
            if announced > MAX_REQUEST_BYTES {
                return Err(too_large(announced));
            }
            buf.reserve_exact(announced);
        }
        buf.extend_from_slice(&data);
    }
    Ok((Bytes::from(buf), permits))
}
