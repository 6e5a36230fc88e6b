//! The metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper), anything else 404.
//!
//! Invariants (the port is reachable from the pod network):
//! - at most [`MAX_CONNECTIONS`] connections at once, and as many again closing
//!   ([`crate::slots`]): a new connection at the cap takes the place of an idle one
//!   (between requests; never used first, else idle longest), which is dropped at once, and
//!   is closed at once when every connection is in a request, so none waits in the listen
//!   backlog behind idle ones;
//! - a request's headers must arrive within [`HEADER_TIMEOUT`] (an idle keep-alive
//!   connection's next request too), a connection serves at most [`MAX_REQUESTS`] requests
//!   and ends after [`CONNECTION_TIMEOUT`], so idle, half-sent or chatty connections do not
//!   hold a place;
//! - concurrent requests share one scrape at a time and reuse a result younger than
//!   [`SCRAPE_REUSE`] (waiting without a thread), so a flood of scrapes cannot fill the blocking pool that CSI
//!   calls and Probe use;
//! - a failing accept (descriptors exhausted) is retried after a pause, logged once a minute.

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::Scope;
use crate::driver::Driver;
use crate::node::Node;
use crate::slots::{Slot, Table};

/// Most connections served at once.
pub const MAX_CONNECTIONS: usize = 16;
/// How long a request's headers may take to arrive, counted from the end of the previous
/// response on a keep-alive connection.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Most requests served on one connection (the last one's response says `Connection:
/// close`).
pub const MAX_REQUESTS: usize = 16;
/// How long one connection may last, whatever it does.
pub const CONNECTION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// How long a scrape's result answers later requests.
pub const SCRAPE_REUSE: std::time::Duration = std::time::Duration::from_secs(1);
/// The pause after a failed accept.
const ACCEPT_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoint reports: the backend's metrics, its VGs' gauges when `vgs`, and the
/// thin pools of `node` when given.
#[derive(Clone)]
pub struct Endpoint {
    backend: Arc<Driver>,
    vgs: bool,
    node: Option<Arc<Node>>,
    /// The last scrape and when it was made; held while one is made.
    last: Arc<tokio::sync::Mutex<Option<(std::time::Instant, Bytes)>>>,
}

impl Endpoint {
    /// The metrics of `backend` (its [`super::Metrics`] and session), with the served VGs'
    /// gauges when `vgs` (the controller), and the thin pools of `node` when given.
    pub fn new(backend: Arc<Driver>, vgs: bool, node: Option<Arc<Node>>) -> Self {
        Endpoint {
            backend,
            vgs,
            node,
            last: Arc::default(),
        }
    }

    /// The answer to one request.
    async fn answer(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != hyper::Method::GET || req.uri().path() != "/metrics" {
            let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return r;
        }
        // One scrape at a time; those who waited for it take its result.
        let mut last = self.last.lock().await;
        let fresh = last
            .as_ref()
            .filter(|(t, _)| t.elapsed() < SCRAPE_REUSE)
            .map(|(_, b)| b.clone());
        let text = match fresh {
            Some(b) => Ok(b),
            None => {
                let me = self.clone();
                // The scrape reads the session: a blocking call.
                let made = tokio::task::spawn_blocking(move || {
                    let scope = Scope {
                        vgs: me.vgs,
                        node: me.node.as_deref(),
                    };
                    Bytes::from(me.backend.metrics().scrape(&me.backend, &scope))
                })
                .await;
                if let Ok(b) = &made {
                    *last = Some((std::time::Instant::now(), b.clone()));
                }
                made
            }
        };
        drop(last);
        match text {
            Ok(text) => {
                let mut r = Response::new(Full::new(text));
                if let Ok(v) = hyper::header::HeaderValue::from_str(CONTENT_TYPE) {
                    r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
                }
                r
            }
            Err(e) => {
                tracing::error!(error = %e, "the metrics scrape panicked");
                let mut r = Response::new(Full::new(Bytes::from_static(b"scrape failed\n")));
                *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                r
            }
        }
    }
}

/// Serves `endpoint` on `listener` until `shutdown` resolves (connections in progress are
/// dropped then: a scrape is retried by Prometheus).
pub async fn serve(listener: TcpListener, endpoint: Endpoint, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    let table = Table::new(MAX_CONNECTIONS);
    let mut last_warning: Option<std::time::Instant> = None;
    let mut warn = |what: &str, e: Option<&std::io::Error>| {
        if last_warning.is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(60)) {
            let errno = e.and_then(std::io::Error::raw_os_error);
            tracing::warn!(errno, error = e.map(tracing::field::display), "{what}");
            last_warning = Some(std::time::Instant::now());
        }
    };
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    warn("accepting a metrics connection", Some(&e));
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            },
        };
        let Some(slot) = table.admit() else {
            warn(
                "every metrics connection is in a request: closing new ones",
                None,
            );
            continue;
        };
        tokio::spawn(connection(stream, peer, slot, endpoint.clone()));
    }
}

/// Serves one connection until it ends, times out or is evicted.
async fn connection(
    stream: tokio::net::TcpStream,
    peer: std::net::SocketAddr,
    slot: Slot,
    endpoint: Endpoint,
) {
    let slot = Arc::new(slot);
    let served = Arc::new(AtomicUsize::new(0));
    let busy = slot.clone();
    let service = hyper::service::service_fn(move |req| {
        let endpoint = endpoint.clone();
        let served = served.fetch_add(1, Ordering::Relaxed) + 1;
        let busy = busy.busy();
        async move {
            let mut response = endpoint.answer(req).await;
            drop(busy);
            if served >= MAX_REQUESTS {
                response.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, Infallible>(response)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        r = tokio::time::timeout(CONNECTION_TIMEOUT, conn) => match r {
            Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics connection"),
            Err(_) => tracing::debug!(%peer, "metrics connection timed out"),
            Ok(Ok(())) => {}
        },
        () = slot.evicted() => tracing::debug!(%peer, "metrics connection closed for a newer one"),
    }
}
