//! The driver every gRPC test talks to: Identity, Controller and Node served on a unix socket
//! in a temp dir, backed by the real lvmeta volume layer on an in-memory LUN with the fake
//! activation backend and fake mounts; and request builders.
#![allow(dead_code)] // each test file uses its own part of this

use std::sync::Arc;

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::node_client::NodeClient;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use csi_shim::driver::Driver;
use csi_shim::mount::Fake;
use csi_shim::node::{Node, NodeConfig};
use lvmeta::activate::FakeBackend;
use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::edit::VgSpec;
use lvmeta::layout::PvOptions;
use lvmeta::session::Session;
use tonic::transport::Channel;

pub const MIB: i64 = 1 << 20;

pub struct Harness {
    pub identity: IdentityClient<Channel>,
    pub controller: ControllerClient<Channel>,
    pub node: NodeClient<Channel>,
    /// The Node service itself (for what no RPC shows, e.g. metrics).
    pub node_service: Arc<Node>,
    pub socket: std::path::PathBuf,
    /// The kubelet directory the node service accepts paths under.
    pub kubelet: std::path::PathBuf,
    pub activation: Arc<FakeBackend>,
    /// The driver's backend (its session), shared with the server.
    pub backend: Arc<Driver>,
    pub system: Arc<Fake>,
    /// The in-memory LUN (for checking volume data).
    pub lun: Arc<MemDevice>,
    pub _dir: tempfile::TempDir,
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub server: tokio::task::JoinHandle<()>,
}

/// A driver serving VG `vg` (200 MiB, 4 MiB extents) and the absent VG `gone`.
pub async fn driver() -> Harness {
    driver_of(200 << 20).await
}

/// A driver serving VG `vg` on a LUN of `bytes` (memory is only used where written).
pub async fn driver_of(bytes: u64) -> Harness {
    let (backend, dev) = backend_of(bytes);
    serve(backend, dev).await
}

/// A driver whose node activates thin volumes too, over simulated kernel thin pools
/// ([`FakeBackend::with_thin`]), and whose controller waits at most `wait` for the node.
pub async fn driver_thin(wait: std::time::Duration) -> Harness {
    let (backend, dev) = backend_of(200 << 20);
    serve_with(
        backend.with_holder_wait(wait),
        dev,
        Arc::new(FakeBackend::with_thin()),
    )
    .await
}

/// A driver serving VG `vg` on a LUN of `bytes` whose PV is made with `pv`.
pub async fn driver_with_pv(bytes: u64, pv: &PvOptions) -> Harness {
    let (backend, dev) = backend_with(bytes, pv);
    serve(backend, dev).await
}

/// The backend over a new LUN of `bytes` holding VG `vg`, and the LUN.
fn backend_of(bytes: u64) -> (Driver, Arc<MemDevice>) {
    backend_with(bytes, &PvOptions::default())
}

/// [`backend_of`] with the PV made with `pv`.
fn backend_with(bytes: u64, pv: &PvOptions) -> (Driver, Arc<MemDevice>) {
    let dev = Arc::new(MemDevice::new("lun", bytes, 512));
    let session = Session::new(vec![Box::new(dev.clone()) as Box<dyn BlockDevice>]);
    session.pvcreate("lun", pv, false).expect("pvcreate");
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: None,
    };
    session.vgcreate(&spec, &["lun"]).expect("vgcreate");
    (Driver::new(session, vec!["vg".into()]), dev)
}

pub async fn serve(backend: Driver, lun: Arc<MemDevice>) -> Harness {
    serve_with(backend, lun, Arc::new(FakeBackend::default())).await
}

/// Serves `backend` with `activation` as the node's backend.
pub async fn serve_with(
    backend: Driver,
    lun: Arc<MemDevice>,
    activation: Arc<FakeBackend>,
) -> Harness {
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("csi.sock");
    // A stale socket from an earlier run is replaced.
    std::os::unix::net::UnixListener::bind(&socket).expect("stale socket");
    let listener = csi_shim::server::listen(&socket).expect("listen");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let kubelet = dir.path().join("kubelet");
    let system = Arc::new(Fake::new(64 << 20));
    // The controller and the node are on one host: the node's devices are the host's.
    let backend = Arc::new(backend.with_host_devices(activation.clone()));
    let node = Arc::new(
        Node::new(
            backend.clone(),
            NodeConfig {
                node_id: "node-1".into(),
                kubelet_dir: kubelet.clone(),
                max_volumes: 4,
                activation: activation.clone(),
                system: system.clone(),
            },
        )
        .expect("node"),
    );
    let served = backend.clone();
    let node_service = node.clone();
    let server = tokio::spawn(async move {
        csi_shim::server::serve(served, Some(node), listener, async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    });
    let channel = csi_shim::client::connect(&socket).await.expect("connect");
    Harness {
        identity: IdentityClient::new(channel.clone()),
        controller: ControllerClient::new(channel.clone()),
        node: NodeClient::new(channel),
        node_service,
        socket,
        kubelet,
        activation,
        backend,
        system,
        lun,
        _dir: dir,
        stop: Some(tx),
        server,
    }
}

// Each test file uses some of these.
#[allow(unused_imports)]
pub use csi_shim::testing::{cap, create_request as create, modify_request as modify};

pub fn rwo() -> Vec<VolumeCapability> {
    vec![cap(Access::SingleNodeWriter, Some("ext4"))]
}

/// `path` below the kubelet directory, its parent made as the kubelet makes it.
pub fn kubelet_path(d: &Harness, path: &str) -> String {
    let p = d.kubelet.join(path);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("parent of a kubelet path");
    }
    p.display().to_string()
}

pub fn stage(d: &Harness, id: &str, staging: &str, c: VolumeCapability) -> NodeStageVolumeRequest {
    csi_shim::testing::stage_request(id, &kubelet_path(d, staging), c)
}

pub fn publish(
    d: &Harness,
    id: &str,
    staging: &str,
    target: &str,
    c: VolumeCapability,
) -> NodePublishVolumeRequest {
    kubelet_path(d, target);
    let staging = d.kubelet.join(staging).display().to_string();
    csi_shim::testing::publish_request(id, &staging, &kubelet_path(d, target), c)
}

/// A test whose outside tool is missing: a visible skip (straight to stderr, which the
/// harness does not capture), or a failure when CI=true or LVMETA_REQUIRE_PRIVILEGED=1.
pub fn skip_or_fail(msg: &str) {
    let required = lvmeta::testing::privileged_required();
    assert!(!required, "{msg} (CI=true: this test must run)");
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED {msg}");
}

/// A session over a new 512 MiB LUN holding shared VG `vg` (leases in memory, this host id
/// 3, 300 ms lease wait; `host` may add to the host), its lockspace joined; and the LUN.
pub fn shared_vg(
    host: impl FnOnce(lvmeta::lease::Host) -> lvmeta::lease::Host,
) -> (Session, Arc<MemDevice>) {
    shared_vg_on(Arc::default(), host)
}

/// [`shared_vg`] with the leases kept in `fake`.
pub fn shared_vg_on(
    fake: Arc<lvmeta::lease::FakeLeases>,
    host: impl FnOnce(lvmeta::lease::Host) -> lvmeta::lease::Host,
) -> (Session, Arc<MemDevice>) {
    let lun = Arc::new(MemDevice::new("lun", 512 << 20, 512));
    let h = lvmeta::lease::Host::new(fake, 3, 10, std::time::Duration::from_millis(300));
    let session =
        Session::new(vec![Box::new(lun.clone()) as Box<dyn BlockDevice>]).with_host(host(h));
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: Some(lvmeta::edit::SharedVg {
            lock_lv_size: lvmeta::units::Bytes(256 << 20),
        }),
    };
    session
        .vgcreate(&spec, &["lun"])
        .expect("vgcreate --shared");
    session.lockstart("vg").expect("lockstart");
    (session, lun)
}

/// A driver over shared VG `vg` whose leases are `fake`'s, fencing `required` or not, whose
/// node activates through `activation`.
pub async fn shared_driver_with(
    fake: Arc<lvmeta::lease::FakeLeases>,
    required: bool,
    activation: Arc<FakeBackend>,
) -> Harness {
    use csi_shim::fencing::{self, Fencing};
    let f = Arc::new(Fencing::new(
        Some(fake.clone() as Arc<dyn lvmeta::lease::LeaseManager>),
        required,
        None,
    ));
    let gate = Arc::new(fencing::Gate(f.clone()));
    let (session, lun) = shared_vg_on(fake, |h| h.with_gate(gate));
    let backend = Driver::new(session, vec!["vg".into()]).with_fencing(f);
    serve_with(backend, lun, activation).await
}
