//! The metrics endpoint: `GET /metrics` over HTTP/1.1 (hyper), anything else 404.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::Scope;
use crate::controller::Backend;
use crate::node::Node;

/// The content type of the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the endpoint reports: the backend's metrics, its VGs' gauges when `vgs`, and the
/// thin pools of `node` when given.
#[derive(Clone)]
pub struct Endpoint {
    /// The driver's backend (its [`super::Metrics`] and session).
    pub backend: Arc<Backend>,
    /// Report the served VGs' gauges (the controller does).
    pub vgs: bool,
    /// This node, for its thin pools.
    pub node: Option<Arc<Node>>,
}

impl Endpoint {
    /// The answer to one request.
    async fn answer(&self, req: Request<Incoming>) -> Response<Full<Bytes>> {
        if req.method() != hyper::Method::GET || req.uri().path() != "/metrics" {
            let mut r = Response::new(Full::new(Bytes::from_static(b"not found\n")));
            *r.status_mut() = StatusCode::NOT_FOUND;
            return r;
        }
        let me = self.clone();
        // The scrape reads the session: a blocking call.
        let text = tokio::task::spawn_blocking(move || {
            let scope = Scope {
                vgs: me.vgs,
                node: me.node.as_deref(),
            };
            me.backend.metrics().scrape(&me.backend, &scope)
        })
        .await;
        match text {
            Ok(text) => {
                let mut r = Response::new(Full::new(Bytes::from(text)));
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
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a metrics connection");
                    continue;
                }
            },
        };
        let endpoint = endpoint.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let endpoint = endpoint.clone();
                async move { Ok::<_, Infallible>(endpoint.answer(req).await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "metrics connection");
            }
        });
    }
}
