//! The Node service: a volume staged is its LV activated on this node under the LV's lease
//! (exclusive, or shared for multi-node linear volumes) and, for a filesystem volume, the
//! filesystem (made when the device is blank) mounted at the staging path; publishing
//! bind-mounts that (or the device, for a block volume) at the pod's target path.
//!
//! The lease is held from NodeStage to NodeUnstage by the [`lvmeta::activate::Activation`]
//! kept in [`Node`]; a second node asking for a volume whose lease another node holds gets
//! FAILED_PRECONDITION. Every call is idempotent.
//!
//! Invariants (the node acts only inside its own volumes):
//! - a path is resolved beneath the kubelet directory without following a symlink
//!   ([`crate::kubelet`]); everything is done through that resolution;
//! - only LVs carrying the driver's tag are activated, mounted, unmounted or deactivated
//!   (any other is NOT_FOUND);
//! - a mount is unmounted, and a target removed, only when the mount there shows this
//!   volume's device (mountinfo's `major:minor`); anything else there is left alone;
//! - the cache of staged volumes is checked against the real mounts before it is trusted.

mod fence;
mod handover;
mod publish;
mod recover;
mod requests;
mod service;
mod shared;
mod slot;
mod stage;
mod stats;
mod want;

pub use handover::{DRAIN_WAIT, SHARED_POLL};
pub use service::NodeService;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lvmeta::activate::{self, Activation};
use tonic::Status;

use crate::csi::VolumeCapability;
use crate::driver::Driver;
use crate::kubelet::{KubeletDir, Place};
use crate::mount::{SysError, System};
use crate::params;
use crate::status::from_activation;
use crate::volume::Volume;
use want::Want;

pub use want::DEFAULT_FS;

/// How this node is set up.
pub struct NodeConfig {
    /// The node id Kubernetes knows this node by.
    pub node_id: String,
    /// The kubelet directory: staging and target paths must be below it.
    pub kubelet_dir: PathBuf,
    /// Most volumes staged at once (0: no limit).
    pub max_volumes: i64,
    /// How LVs become devices here.
    pub activation: Arc<dyn activate::Backend>,
    /// Mounts and filesystems.
    pub system: Arc<dyn System>,
}

/// A thin pool active under a staged volume, as the kernel reports it.
pub struct ActivePool {
    /// The VG.
    pub vg: String,
    /// The pool LV.
    pub pool: String,
    /// The kernel's status of the pool.
    pub status: activate::thin::PoolStatus,
}

/// A volume staged on this node.
struct Staged {
    /// The LV's activation here; `None` for a volume attached over NBD (its pool is active
    /// on the node that serves it).
    activation: Option<Activation>,
    /// The device pods get: the activation's, or a wrapper's upper device.
    device: PathBuf,
    /// How the volume is shared with other nodes, when it is.
    remote: Option<shared::Remote>,
    /// Where it is staged; `None` for a volume found again after a restart, until kubelet
    /// stages it again.
    staging: Option<Place>,
    /// `None` for a block volume.
    fs: Option<String>,
    /// The volume's mode, as read when it was staged.
    mode: crate::volume::Mode,
    /// Where it is published.
    targets: Vec<PathBuf>,
}

/// The Node service.
pub struct Node {
    backend: Arc<Driver>,
    config: NodeConfig,
    kubelet: KubeletDir,
    staged: Mutex<HashMap<String, Staged>>,
    /// Held while a request is served and while a volume is unstaged, so that a pool is
    /// not taken down under a request being served.
    serving: Mutex<()>,
    /// This node's NBD server and options (`None`: thin volumes stay on one node).
    nbd: Option<Arc<crate::serve::Serving>>,
}

/// How often the node looks for requests on the pools of its staged thin volumes.
pub const REQUEST_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// What a place shows, compared with a volume's device.
enum Holds {
    /// Not a mount point (or absent).
    Nothing,
    /// A mount of the volume's device.
    This,
    /// A mount of something else (what mountinfo names).
    Other(String),
}

impl Node {
    /// The service for `backend` on the node `config` describes; fails when the kubelet
    /// directory cannot be opened (it is made when missing).
    pub fn new(backend: Arc<Driver>, config: NodeConfig) -> std::io::Result<Self> {
        let kubelet = KubeletDir::open(&config.kubelet_dir)?;
        Ok(Self {
            backend,
            config,
            kubelet,
            staged: Mutex::new(HashMap::new()),
            serving: Mutex::new(()),
            nbd: None,
        })
    }

    /// The same node, serving and attaching thin volumes staged on several nodes through
    /// `nbd`.
    pub fn with_nbd(self, nbd: Arc<crate::serve::Serving>) -> Self {
        self.with_nbd_opt(Some(nbd))
    }

    /// [`Node::with_nbd`] when `nbd` is given; the node as it is otherwise.
    pub fn with_nbd_opt(mut self, nbd: Option<Arc<crate::serve::Serving>>) -> Self {
        self.nbd = nbd;
        self
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, HashMap<String, Staged>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The staging place of staged volume `id`.
    fn staging_of(&self, id: &str) -> Option<Place> {
        self.staged()
            .get(id)
            .and_then(|s| s.staging.as_ref()?.duplicate().ok())
    }

    /// Releases every lease and forgets every staged volume, leaving devices and mounts as
    /// they are (for a caller that removes them itself, as the demo does).
    pub fn release_all(&self) {
        let n = self.staged().drain().count();
        if n > 0 {
            tracing::info!(volumes = n, "released the leases of staged volumes");
        }
    }

    /// Forgets every staged volume without releasing its lease, leaving devices and mounts
    /// as they are (graceful shutdown: kubelet unstages volumes, not the driver). When this
    /// process ends the host keeps the leases as sanlock orphans, so no other node can take
    /// a volume still in use here; the next node plugin adopts a lease when the volume is
    /// staged again, or releases it when the volume is unstaged.
    pub fn keep_all(&self) {
        let staged: Vec<Staged> = self.staged().drain().map(|(_, s)| s).collect();
        if !staged.is_empty() {
            tracing::info!(
                volumes = staged.len(),
                "staged volumes keep their leases as orphans"
            );
        }
        for a in staged.into_iter().filter_map(|s| s.activation) {
            a.keep_lease();
        }
    }

    /// A path argument that must exist up to its parent (FAILED_PRECONDITION otherwise).
    fn place(&self, field: &str, p: &str) -> Result<Place, Status> {
        self.kubelet.place(field, p)?.ok_or_else(|| {
            Status::failed_precondition(format!(
                "{field} {}: its parent directory does not exist",
                params::shown(p)
            ))
        })
    }

    /// The device of volume `id` when it is active here: from its staging, or found from
    /// the metadata.
    fn device_of(&self, id: &str, vg: &str, lv: &str) -> Result<Option<PathBuf>, Status> {
        if let Some(s) = self.staged().get(id) {
            return Ok(Some(s.device.clone()));
        }
        self.backend
            .session()
            .active_device(vg, lv, self.config.activation.as_ref())
            .map_err(from_activation)
    }

    /// What the mount at `at` shows, compared with device `dev`.
    fn holds(&self, at: &Place, dev: &Path) -> Result<Holds, Status> {
        let sys = &self.config.system;
        Ok(match sys.mounted_device(at).map_err(sys_status)? {
            None => Holds::Nothing,
            Some(found) if found == sys.device_id(dev).map_err(sys_status)? => Holds::This,
            Some(found) => Holds::Other(found),
        })
    }

    /// The common start of NodeStage and NodePublish: the capability checked, the volume
    /// marked busy, and found (NOT_FOUND for an LV the driver did not make).
    fn begin(
        &self,
        id: &str,
        vg: &str,
        lv: &str,
        cap: Option<VolumeCapability>,
    ) -> Result<(Want, Volume, crate::inflight::Guard), Status> {
        let cap = cap.ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        let want = Want::of(&cap)?;
        let guard = self.backend.inflight().enter(id)?;
        let vol = self.backend.volume(vg, lv)?;
        params::check_capabilities(std::slice::from_ref(&cap), vol.mode)
            .map_err(Status::invalid_argument)?;
        Ok((want, vol, guard))
    }

    /// This node's id.
    pub fn id(&self) -> &str {
        &self.config.node_id
    }

    /// The thin pools under this node's staged volumes, with what the kernel says of each
    /// (pools it cannot tell of are left out).
    pub fn thin_pools(&self) -> Vec<ActivePool> {
        let placements: Vec<_> = self
            .staged()
            .values()
            .filter_map(|s| Some(s.activation.as_ref()?.placement.clone()))
            .collect();
        placements
            .into_iter()
            .filter_map(|p| {
                let activate::Layout::Thin { pool, .. } = &p.layout else {
                    return None;
                };
                let status = self.config.activation.pool_status(&p).ok()??;
                Some(ActivePool {
                    vg: p.vg.clone(),
                    pool: pool.name.clone(),
                    status,
                })
            })
            .collect()
    }
}

/// A place that cannot be made what the call needs: a symlink is INVALID_ARGUMENT, anything
/// else there (a file where a directory goes) FAILED_PRECONDITION.
fn place_err(field: &str, e: std::io::Error) -> Status {
    match e.kind() {
        std::io::ErrorKind::InvalidInput => Status::invalid_argument(format!("{field}: {e}")),
        _ => Status::failed_precondition(format!("{field}: {e}")),
    }
}

fn sys_status(e: SysError) -> Status {
    Status::internal(e.to_string())
}
