//! A gRPC channel to the driver's unix socket (the tests' and the demo's client side).

use std::path::Path;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Connects to the CSI endpoint at `socket`.
pub async fn connect(socket: &Path) -> Result<Channel, tonic::transport::Error> {
    let path = socket.to_owned();
    // The URI is required by tonic and ignored: every connection goes to the socket.
    Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
}
