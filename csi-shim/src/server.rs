//! Serving the CSI services on a unix socket: created 0600 (a stale socket from an earlier run
//! is removed first), shut down gracefully (calls in flight finish) when `shutdown` resolves.
//! Connections are accepted and bounded by [`crate::connections`]; every connection's header
//! blocks pass through [`crate::authority`], so clients that name the socket's path as their
//! authority (gRPC's C core) are served too.

use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use tokio::net::UnixListener;
use tonic::codegen::http;

use crate::connections::{CollectLayer, Limits};
use crate::controller::ControllerService;
use crate::csi::controller_server::ControllerServer;
use crate::csi::identity_server::IdentityServer;
use crate::csi::node_server::NodeServer;
use crate::driver::Driver;
use crate::identity::IdentityService;
use crate::node::{Node, NodeService};

pub use crate::connections::ServeError;

/// A unix socket listening at `path`, readable and writable by its owner only.
pub fn listen(path: &Path) -> Result<UnixListener, ServeError> {
    let err = |source| ServeError::Socket {
        path: path.display().to_string(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(m) if std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()) => {
            std::fs::remove_file(path).map_err(err)?
        }
        Ok(_) => {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            )))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(err(e)),
    }
    let l = UnixListener::bind(path).map_err(err)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(err)?;
    Ok(l)
}

/// Serves Identity, Controller and, when `node` is given, Node for `backend` on `listener`
/// (and the node's requests, [`Node::serve_requests`], every [`crate::node::REQUEST_POLL`])
/// until `shutdown` resolves, within the default [`Limits`]. The caller decides what becomes
/// of the node's staged volumes' leases ([`Node::keep_all`] or [`Node::release_all`]).
/// Returns an error only when serving stopped for another reason than `shutdown`.
pub async fn serve(
    backend: Arc<Driver>,
    node: Option<Arc<Node>>,
    listener: UnixListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    serve_within(backend, node, listener, Limits::default(), shutdown).await
}

/// Runs `f` on `node` on a blocking thread every `period` (a late run delays the next)
/// until aborted.
fn every(
    node: Arc<Node>,
    period: std::time::Duration,
    what: &'static str,
    f: fn(&Node),
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let n = node.clone();
            if tokio::task::spawn_blocking(move || f(&n)).await.is_err() {
                tracing::error!("{what} panicked");
            }
        }
    })
}

/// [`serve`] within `limits`.
pub async fn serve_within(
    backend: Arc<Driver>,
    node: Option<Arc<Node>>,
    listener: UnixListener,
    limits: Limits,
    shutdown: impl Future<Output = ()>,
) -> Result<(), ServeError> {
    // The node serves requests on the pools of its staged thin volumes, and follows the
    // servers of the thin volumes it attached over NBD, until shutdown.
    let requests = node.clone().map(|n| {
        every(
            n,
            crate::node::REQUEST_POLL,
            "the request server",
            Node::serve_requests,
        )
    });
    let shared = node.clone().filter(|n| n.shares()).map(|n| {
        every(
            n,
            crate::node::SHARED_POLL,
            "the NBD watch",
            Node::watch_shared,
        )
    });
    // The controller erases deleted volumes' extents until shutdown.
    let wiper = match backend.erase() {
        Some(_) if backend.runs_wiper() => Some(crate::wiper::spawn(backend.clone()).map_err(
            |source| ServeError::Thread {
                what: "wiper",
                source,
            },
        )?),
        _ => None,
    };
    let stop_wiper = backend.wiper().clone();
    let metrics = backend.metrics().clone();
    let service = tonic::transport::Server::builder()
        .layer(tower::layer::layer_fn(|inner| Observe {
            inner,
            metrics: metrics.clone(),
        }))
        .layer(CollectLayer::new(&limits))
        .add_service(IdentityServer::new(IdentityService::new(backend.clone())))
        .add_service(ControllerServer::new(ControllerService::new(backend)))
        .add_optional_service(node.map(|n| NodeServer::new(NodeService::new(n))))
        .into_service();
    let served = crate::connections::serve(listener, service, limits, shutdown).await;
    for task in [requests, shared].into_iter().flatten() {
        task.abort();
    }
    // An erasure in progress stops at its next chunk (the next wiper does it again).
    stop_wiper.stop();
    if let Some(w) = wiper {
        if tokio::task::spawn_blocking(move || w.join()).await.is_err() {
            tracing::error!("the wiper panicked");
        }
    }
    if let Err(e) = &served {
        tracing::error!(error = %e, "the CSI server stopped");
    }
    served
}

/// Records every call's duration by method and code in the metrics, and logs every call that
/// fails, at warn, with its method, code and message (escaped): the status of a failed unary
/// call travels in the response headers (a success's in the trailers: OK).
#[derive(Clone)]
struct Observe<S> {
    inner: S,
    metrics: Arc<crate::metrics::Metrics>,
}

impl<S, B, R> tower::Service<http::Request<B>> for Observe<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<
        Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send + 'static>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let method = req.uri().path().to_owned();
        let call = self.inner.call(req);
        let metrics = self.metrics.clone();
        let started = std::time::Instant::now();
        Box::pin(async move {
            let response = call.await?;
            let mut code = tonic::Code::Ok;
            if let Some(st) = tonic::Status::from_header_map(response.headers()) {
                code = st.code();
                if code != tonic::Code::Ok {
                    tracing::warn!(method = %method, code = ?code, message = %crate::params::shown(st.message()), "call failed");
                }
            }
            metrics.rpc(&method, code, started.elapsed());
            Ok(response)
        })
    }
}
