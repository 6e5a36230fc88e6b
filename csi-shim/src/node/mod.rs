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

mod requests;
mod service;
mod want;

pub use service::NodeService;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use lvmeta::activate::{self, ActivateError, Activation};
use tonic::Status;

use crate::controller::Backend;
use crate::csi::{
    volume_usage, NodeExpandVolumeRequest, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse,
    NodePublishVolumeRequest, NodeStageVolumeRequest, NodeUnpublishVolumeRequest,
    NodeUnstageVolumeRequest, VolumeCapability, VolumeCondition, VolumeUsage,
};
use crate::kubelet::{KubeletDir, Place};
use crate::mount::{Source, SysError, System};
use crate::params;
use crate::status::from_activation;
use crate::volume::{Mode, Volume};
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
    activation: Activation,
    staging: Place,
    /// `None` for a block volume.
    fs: Option<String>,
    /// Where it is published.
    targets: Vec<PathBuf>,
}

/// The Node service.
pub struct Node {
    backend: Arc<Backend>,
    config: NodeConfig,
    kubelet: KubeletDir,
    staged: Mutex<HashMap<String, Staged>>,
    /// Held while a request is served and while a volume is unstaged, so that a pool is
    /// not taken down under a request being served.
    serving: Mutex<()>,
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
    pub fn new(backend: Arc<Backend>, config: NodeConfig) -> std::io::Result<Self> {
        let kubelet = KubeletDir::open(&config.kubelet_dir)?;
        Ok(Self {
            backend,
            config,
            kubelet,
            staged: Mutex::new(HashMap::new()),
            serving: Mutex::new(()),
        })
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, HashMap<String, Staged>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The staging place of staged volume `id`.
    fn staging_of(&self, id: &str) -> Option<Place> {
        self.staged()
            .get(id)
            .and_then(|s| s.staging.duplicate().ok())
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
        for s in staged {
            s.activation.keep_lease();
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
            return Ok(Some(s.activation.device.clone()));
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

    fn stage(&self, req: NodeStageVolumeRequest) -> Result<(), Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("staging_target_path", !req.staging_target_path.is_empty()),
            ("volume_capability", req.volume_capability.is_some()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let staging = self.place("staging_target_path", &req.staging_target_path)?;
        let (want, vol, _g) = self.begin(&req.volume_id, &vg, &lv, req.volume_capability)?;
        let cached = self.staged().get(&req.volume_id).map(|s| {
            let same = s.staging.path() == staging.path() && s.fs == want.fs;
            (
                same,
                s.staging.path().to_owned(),
                s.fs.clone(),
                s.activation.device.clone(),
            )
        });
        if let Some((same, at, fs, dev)) = cached {
            if !same {
                return Err(Status::already_exists(format!(
                    "volume {} is already staged at {} as {}",
                    req.volume_id,
                    at.display(),
                    fs.as_deref().unwrap_or("a block device")
                )));
            }
            // Staged here before: the mount must still be there (made again if it is not).
            if let Some(fs) = &want.fs {
                self.mount_staging(&dev, &staging, fs, &want)?;
            }
            return Ok(());
        }
        let max = self.config.max_volumes;
        if max > 0 && self.staged().len() as i64 >= max {
            return Err(Status::resource_exhausted(format!(
                "this node already has {max} volumes staged (its limit)"
            )));
        }
        // A mount already at the staging path must be this volume's (left by an earlier
        // process); anything else is refused before the volume is touched.
        if let Some(found) = self
            .config
            .system
            .mounted_device(&staging)
            .map_err(sys_status)?
        {
            let ours = match self.device_of(&req.volume_id, &vg, &lv)? {
                Some(dev) => self.config.system.device_id(&dev).map_err(sys_status)? == found,
                None => false,
            };
            if !ours {
                return Err(Status::failed_precondition(format!(
                    "staging path {} holds another mount ({found}); not touched",
                    staging.path().display()
                )));
            }
        }
        // Several nodes at once only for linear volumes (checked above): a shared lease.
        let shared = want.multi_node && vol.mode == Mode::Linear;
        let activation = self
            .backend
            .session()
            .activate(
                &vg,
                &lv,
                shared,
                want.read_only,
                self.config.activation.as_ref(),
            )
            .map_err(from_activation)?;
        tracing::info!(volume_id = %req.volume_id, device = %activation.device.display(), shared, read_only = want.read_only, "activated");
        if let Some(fs) = &want.fs {
            if let Err(e) = self.mount_staging(&activation.device, &staging, fs, &want) {
                if let Err(d) = activation.deactivate(self.config.activation.as_ref()) {
                    tracing::warn!(volume_id = %req.volume_id, error = %d, "deactivating after a failed stage");
                }
                return Err(e);
            }
        }
        self.staged().insert(
            req.volume_id,
            Staged {
                activation,
                staging,
                fs: want.fs,
                targets: Vec::new(),
            },
        );
        Ok(())
    }

    /// Mounts the filesystem on `dev` at `staging`, making it when the device is blank;
    /// nothing to do when `staging` shows `dev` already, refused when it shows another.
    fn mount_staging(
        &self,
        dev: &Path,
        staging: &Place,
        fs: &str,
        want: &Want,
    ) -> Result<(), Status> {
        match self.holds(staging, dev)? {
            Holds::This => return Ok(()),
            Holds::Other(found) => {
                return Err(Status::failed_precondition(format!(
                    "staging path {} holds another mount ({found}); not touched",
                    staging.path().display()
                )))
            }
            Holds::Nothing => {}
        }
        let sys = &self.config.system;
        match sys.fs_type(dev).map_err(sys_status)? {
            None if want.read_only => {
                return Err(Status::failed_precondition(
                    "the volume is blank and staged read-only: nothing to mount",
                ))
            }
            None => sys.mkfs(dev, fs).map_err(sys_status)?,
            Some(found) if found != fs => {
                return Err(Status::failed_precondition(format!(
                    "the volume holds {found}, the capability asks for {fs}"
                )))
            }
            Some(_) => {}
        }
        staging
            .make_dir()
            .map_err(|e| Status::failed_precondition(format!("staging path: {e}")))?;
        let mut flags = want.flags.clone();
        if want.read_only {
            flags.push("ro".into());
        }
        sys.mount(dev, staging, fs, &flags).map_err(sys_status)?;
        if let Some(gid) = want.group {
            // The pod's fsGroup owns the filesystem's root, setgid so new files inherit it.
            let root = staging.via_parent();
            let set = std::os::unix::fs::chown(&root, None, Some(gid)).and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o2775))
            });
            if let Err(e) = set {
                let _ = sys.umount(staging);
                return Err(Status::internal(format!(
                    "{}: setting group {gid}: {e}",
                    staging.path().display()
                )));
            }
        }
        Ok(())
    }

    fn unstage(&self, req: NodeUnstageVolumeRequest) -> Result<(), Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("staging_target_path", !req.staging_target_path.is_empty()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let staging = self
            .kubelet
            .place("staging_target_path", &req.staging_target_path)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let _serving = self.serving.lock().unwrap_or_else(|p| p.into_inner());
        let cached = self
            .staged()
            .get(&req.volume_id)
            .map(|s| (s.staging.path().to_owned(), s.activation.device.clone()));
        let dev = match cached {
            Some((at, _)) if staging.as_ref().map(Place::path) != Some(at.as_path()) => {
                tracing::warn!(volume_id = %req.volume_id, staged_at = %at.display(), "NodeUnstageVolume for another staging path: nothing done");
                return Ok(());
            }
            Some((_, dev)) => Some(dev),
            None => {
                // Only the driver's volumes are ever touched.
                self.backend.volume(&vg, &lv)?;
                self.device_of(&req.volume_id, &vg, &lv)?
            }
        };
        if let (Some(at), Some(dev)) = (&staging, &dev) {
            match self.holds(at, dev)? {
                Holds::This => self.config.system.umount(at).map_err(sys_status)?,
                Holds::Other(found) => {
                    tracing::warn!(volume_id = %req.volume_id, staging = %at.path().display(), found, "the staging path holds another mount: left alone, volume not staged there");
                    return Ok(());
                }
                Holds::Nothing => {}
            }
        }
        let staged = self.staged().remove(&req.volume_id);
        let act = self.config.activation.as_ref();
        match staged {
            Some(s) => {
                if let Err(e) = s.activation.deactivate(act) {
                    self.staged().insert(req.volume_id, s);
                    return Err(from_activation(e.into()));
                }
            }
            // Not staged by this process (it restarted): remove the device if it is there
            // and release the lease the ended process left.
            None => match self.backend.session().deactivate(&vg, &lv, act) {
                Ok(()) => {}
                Err(
                    lvmeta::Error::VgNotFound(_)
                    | lvmeta::Error::Activate(ActivateError::NoLv { .. }),
                ) => {}
                Err(e) => return Err(from_activation(e)),
            },
        }
        tracing::info!(volume_id = %req.volume_id, "unstaged");
        Ok(())
    }

    fn publish(&self, req: NodePublishVolumeRequest) -> Result<(), Status> {
        // The staging path is required: this driver stages (STAGE_UNSTAGE_VOLUME).
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("staging_target_path", !req.staging_target_path.is_empty()),
            ("target_path", !req.target_path.is_empty()),
            ("volume_capability", req.volume_capability.is_some()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let target = self.place("target_path", &req.target_path)?;
        let staging = self.place("staging_target_path", &req.staging_target_path)?;
        let (want, _, _g) = self.begin(&req.volume_id, &vg, &lv, req.volume_capability)?;
        let not_staged = || {
            Status::failed_precondition(format!(
                "volume {} is not staged at {}",
                req.volume_id,
                staging.path().display()
            ))
        };
        let dev = self
            .device_of(&req.volume_id, &vg, &lv)?
            .ok_or_else(not_staged)?;
        if want.fs.is_some() && !matches!(self.holds(&staging, &dev)?, Holds::This) {
            return Err(not_staged());
        }
        match self.holds(&target, &dev)? {
            Holds::This => {
                self.remember_target(&req.volume_id, target.path());
                return Ok(());
            }
            Holds::Other(found) => {
                return Err(Status::failed_precondition(format!(
                    "target path {} holds another mount ({found}); not touched",
                    target.path().display()
                )))
            }
            Holds::Nothing => {}
        }
        if want.single_writer {
            let elsewhere = self.staged().get(&req.volume_id).and_then(|s| {
                s.targets
                    .iter()
                    .find(|t| *t != target.path())
                    .map(|t| t.display().to_string())
            });
            if let Some(other) = elsewhere {
                return Err(Status::failed_precondition(format!(
                    "volume {} is SINGLE_NODE_SINGLE_WRITER and already published at {other}",
                    req.volume_id
                )));
            }
        }
        let read_only = req.readonly || want.read_only;
        let made = match want.fs {
            Some(_) => target.make_dir(),
            None => target.make_file(),
        }
        .map_err(|e| place_err("target_path", e))?;
        let source = match want.fs {
            Some(_) => Source::Mount(&staging),
            None => Source::Device(&dev),
        };
        let sys = &self.config.system;
        let bound = sys.bind(source, &target, read_only).map_err(sys_status);
        let checked = bound.and_then(|()| match self.holds(&target, &dev)? {
            Holds::This => Ok(()),
            _ => {
                let _ = sys.umount(&target);
                Err(Status::internal(format!(
                    "{}: the bind mount does not show the volume",
                    target.path().display()
                )))
            }
        });
        if let Err(e) = checked {
            if made {
                let _ = target.remove_any();
            }
            return Err(e);
        }
        self.remember_target(&req.volume_id, target.path());
        tracing::info!(volume_id = %req.volume_id, target = %target.path().display(), read_only, "published");
        Ok(())
    }

    fn remember_target(&self, id: &str, target: &Path) {
        if let Some(s) = self.staged().get_mut(id) {
            if !s.targets.iter().any(|t| t == target) {
                s.targets.push(target.to_owned());
            }
        }
    }

    fn unpublish(&self, req: NodeUnpublishVolumeRequest) -> Result<(), Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("target_path", !req.target_path.is_empty()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let target = self.kubelet.place("target_path", &req.target_path)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        if !self.staged().contains_key(&req.volume_id) {
            // Only the driver's volumes are ever touched.
            self.backend.volume(&vg, &lv)?;
        }
        // Not active here, or no such path: nothing of this volume can be mounted there.
        let (Some(target), Some(dev)) = (target, self.device_of(&req.volume_id, &vg, &lv)?) else {
            return Ok(());
        };
        match self.holds(&target, &dev)? {
            Holds::This => {}
            Holds::Other(found) => {
                tracing::warn!(volume_id = %req.volume_id, target = %target.path().display(), found, "the target holds another mount: left alone");
                return Ok(());
            }
            Holds::Nothing => return Ok(()),
        }
        self.config.system.umount(&target).map_err(sys_status)?;
        if let Some(s) = self.staged().get_mut(&req.volume_id) {
            s.targets.retain(|t| t != target.path());
        }
        // The target held this volume's mount, which only a publish makes: made by it.
        if let Err(e) = target.remove_any() {
            tracing::warn!(volume_id = %req.volume_id, error = %e, "unpublished; the target stays");
        }
        tracing::info!(volume_id = %req.volume_id, target = %target.path().display(), "unpublished");
        Ok(())
    }

    fn stats(&self, req: NodeGetVolumeStatsRequest) -> Result<NodeGetVolumeStatsResponse, Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("volume_path", !req.volume_path.is_empty()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let not_here = || {
            Status::not_found(format!(
                "volume path {} does not hold volume {}",
                params::shown(&req.volume_path),
                req.volume_id
            ))
        };
        // A path that is not a kubelet path (relative, outside, through a symlink) holds no
        // volume of this driver: NOT_FOUND, as the spec says of a path where the volume is
        // not.
        let path = match self.kubelet.place("volume_path", &req.volume_path) {
            Err(e) if e.code() == tonic::Code::InvalidArgument => None,
            p => p?,
        };
        self.backend.volume(&vg, &lv)?;
        let path = path.ok_or_else(not_here)?;
        let dev = self
            .device_of(&req.volume_id, &vg, &lv)?
            .ok_or_else(not_here)?;
        let pool = self.pool_condition(&req.volume_id);
        let pool_bad = matches!(pool, Some(Err(_)));
        let pool_note = match &pool {
            Some(Ok(m) | Err(m)) => format!("; {m}"),
            None => String::new(),
        };
        let sys = &self.config.system;
        if !matches!(self.holds(&path, &dev)?, Holds::This) {
            // A path of this volume's staging whose mount is gone: abnormal, not unknown.
            let known = self.staged().get(&req.volume_id).is_some_and(|s| {
                s.staging.path() == path.path() || s.targets.iter().any(|t| t == path.path())
            });
            if !known || path.open().ok().flatten().is_none() {
                return Err(not_here());
            }
            return Ok(NodeGetVolumeStatsResponse {
                usage: Vec::new(),
                volume_condition: Some(VolumeCondition {
                    abnormal: true,
                    message: format!("{} is not a mount point{pool_note}", path.path().display()),
                }),
            });
        }
        let fs = self.fs_of(&req.volume_id, &dev, None)?;
        let usage = match fs {
            Some(_) => {
                let u = sys.usage(&path).map_err(sys_status)?;
                vec![
                    usage(
                        volume_usage::Unit::Bytes,
                        u.bytes_total,
                        u.bytes_available,
                        u.bytes_used,
                    ),
                    usage(
                        volume_usage::Unit::Inodes,
                        u.inodes_total,
                        u.inodes_free,
                        u.inodes_total.saturating_sub(u.inodes_free),
                    ),
                ]
            }
            None => {
                let total = sys.device_bytes(&path).map_err(sys_status)?;
                vec![usage(volume_usage::Unit::Bytes, total, 0, 0)]
            }
        };
        Ok(NodeGetVolumeStatsResponse {
            usage,
            volume_condition: Some(VolumeCondition {
                abnormal: pool_bad,
                message: format!("mounted{pool_note}"),
            }),
        })
    }

    /// The filesystem of volume `id` (`None`: a block volume): as staged, else as the
    /// capability says, else as found on `dev`.
    fn fs_of(&self, id: &str, dev: &Path, want: Option<&Want>) -> Result<Option<String>, Status> {
        if let Some(s) = self.staged().get(id) {
            return Ok(s.fs.clone());
        }
        match want {
            Some(w) => Ok(w.fs.clone()),
            None => self.config.system.fs_type(dev).map_err(sys_status),
        }
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
            .map(|s| s.activation.placement.clone())
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

    /// What the kernel says of the thin pool under staged volume `id`: `Err` saying what is
    /// wrong with it, `Ok` with how full it is; `None` when the volume has no pool here.
    fn pool_condition(&self, id: &str) -> Option<Result<String, String>> {
        let p = self.staged().get(id)?.activation.placement.clone();
        let activate::Layout::Thin { pool, .. } = &p.layout else {
            return None;
        };
        let name = format!("thin pool {}/{}", p.vg, pool.name);
        match self.config.activation.pool_status(&p) {
            Ok(None) => None,
            Ok(Some(st)) => Some(match st.problem() {
                Some(problem) => Err(format!("{name} {problem} ({})", st.usage())),
                None => Ok(format!("{name}: {}", st.usage())),
            }),
            Err(e) => Some(Err(format!("{name}: {e}"))),
        }
    }

    fn expand(&self, req: NodeExpandVolumeRequest) -> Result<i64, Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("volume_path", !req.volume_path.is_empty()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let path = self.kubelet.place("volume_path", &req.volume_path)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let vol: Volume = self.backend.volume(&vg, &lv)?;
        let act = self.config.activation.as_ref();
        let dev = self.device_of(&req.volume_id, &vg, &lv)?.ok_or_else(|| {
            Status::failed_precondition(format!(
                "volume {} is not staged on this node",
                req.volume_id
            ))
        })?;
        let path = match path {
            Some(p) if matches!(self.holds(&p, &dev)?, Holds::This) => p,
            _ => {
                return Err(Status::not_found(format!(
                    "volume path {} does not hold volume {}",
                    params::shown(&req.volume_path),
                    req.volume_id
                )))
            }
        };
        self.backend
            .session()
            .refresh(&vg, &lv, act)
            .map_err(from_activation)?;
        let want = req.volume_capability.as_ref().map(Want::of).transpose()?;
        if let Some(fs) = self.fs_of(&req.volume_id, &dev, want.as_ref())? {
            self.config
                .system
                .grow(&dev, &path, &fs)
                .map_err(sys_status)?;
        }
        tracing::info!(volume_id = %req.volume_id, bytes = vol.bytes, "node expansion done");
        Ok(i64::try_from(vol.bytes).unwrap_or(i64::MAX))
    }
}

fn usage(unit: volume_usage::Unit, total: u64, available: u64, used: u64) -> VolumeUsage {
    let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    VolumeUsage {
        available: i(available),
        total: i(total),
        used: i(used),
        unit: unit as i32,
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
