//! The Node service: a volume staged is its LV activated on this node under the LV's lease
//! (exclusive, or shared for multi-node linear volumes) and, for a filesystem volume, the
//! filesystem (made when the device is blank) mounted at the staging path; publishing
//! bind-mounts that (or the device, for a block volume) at the pod's target path.
//!
//! The lease is held from NodeStage to NodeUnstage by the [`lvmeta::activate::Activation`]
//! kept in [`Node`]; a second node asking for a volume whose lease another node holds gets
//! FAILED_PRECONDITION. Every call is idempotent and checks its paths (absolute, no `..`,
//! under the kubelet directory) before touching anything.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use lvmeta::activate::{self, ActivateError, Activation};
use lvmeta::lease::LeaseError;
use lvmeta::volume::{Mode, Volume};
use tonic::{Request, Response, Status};

use crate::controller::Backend;
use crate::csi::node_server::Node as NodeRpc;
use crate::csi::node_service_capability::{rpc, Rpc, Type as CapType};
use crate::csi::volume_capability::access_mode::Mode as Access;
use crate::csi::volume_capability::{AccessType, MountVolume};
use crate::csi::{
    volume_usage, NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesRequest,
    NodeGetCapabilitiesResponse, NodeGetInfoRequest, NodeGetInfoResponse,
    NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse, NodePublishVolumeRequest,
    NodePublishVolumeResponse, NodeServiceCapability, NodeStageVolumeRequest,
    NodeStageVolumeResponse, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    NodeUnstageVolumeRequest, NodeUnstageVolumeResponse, VolumeCapability, VolumeCondition,
    VolumeUsage,
};
use crate::mount::{SysError, System};
use crate::params;
use crate::status::from_lvmeta;

/// Filesystem made on a blank volume when the capability names none.
pub const DEFAULT_FS: &str = "ext4";

/// How this node is set up.
pub struct NodeConfig {
    /// The node id Kubernetes knows this node by.
    pub node_id: String,
    /// The kubelet directory: staging and target paths must be under it.
    pub kubelet_dir: PathBuf,
    /// Most volumes staged at once (0: no limit).
    pub max_volumes: i64,
    /// How LVs become devices here.
    pub activation: Arc<dyn activate::Backend>,
    /// Mounts and filesystems.
    pub system: Arc<dyn System>,
}

/// A volume staged on this node.
struct Staged {
    activation: Activation,
    staging: PathBuf,
    /// `None` for a block volume.
    fs: Option<String>,
    /// Where it is published.
    targets: Vec<PathBuf>,
}

/// The Node service.
pub struct Node {
    backend: Arc<Backend>,
    config: NodeConfig,
    staged: Mutex<HashMap<String, Staged>>,
    /// Held while a request is served and while a volume is unstaged, so that a pool is
    /// not taken down under a request being served.
    serving: Mutex<()>,
}

/// How often the node looks for requests on the pools of its staged thin volumes.
pub const REQUEST_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// A staged thin volume, as the request server needs it.
struct ThinStaged {
    vg: String,
    lv: String,
    pool: String,
    /// The mount to freeze, for a filesystem volume.
    staging: Option<PathBuf>,
}

impl Node {
    /// The service for `backend` on the node `config` describes.
    pub fn new(backend: Arc<Backend>, config: NodeConfig) -> Self {
        Self {
            backend,
            config,
            staged: Mutex::new(HashMap::new()),
            serving: Mutex::new(()),
        }
    }

    /// Serves the requests posted on the pools of the thin volumes staged here (see
    /// [`lvmeta::volume::Request`]): for each, freezes the filesystem whose data it takes,
    /// makes the change as the pool's holder, delivers it to the kernel pool, thaws, and
    /// removes the request. A request that fails is logged and removed, so the controller
    /// stops waiting for it.
    pub fn serve_requests(&self) {
        let mut pools: Vec<ThinStaged> = Vec::new();
        for s in self.staged().values() {
            let p = &s.activation.placement;
            let activate::Layout::Thin { pool, .. } = &p.layout else {
                continue;
            };
            pools.push(ThinStaged {
                vg: p.vg.clone(),
                lv: p.lv.clone(),
                pool: pool.name.clone(),
                staging: s.fs.as_ref().map(|_| s.staging.clone()),
            });
        }
        for t in &pools {
            let holder = lvmeta::volume::Volumes::new(self.backend.session(), &t.vg)
                .holding(vec![t.pool.clone()]);
            let requests = match holder.fresh_requests(&t.pool) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(vg = %t.vg, pool = %t.pool, error = %e, "reading requests");
                    continue;
                }
            };
            for r in requests {
                let _serving = self.serving.lock().unwrap_or_else(|p| p.into_inner());
                let still = self.staged().values().any(|s| {
                    s.activation.placement.vg == t.vg && s.activation.placement.lv == t.lv
                });
                if !still {
                    break;
                }
                let result = self.serve_one(&holder, t, &pools, &r);
                let tag = r.to_string();
                match &result {
                    Ok(()) => {
                        tracing::info!(vg = %t.vg, pool = %t.pool, request = %tag, "served a request")
                    }
                    Err(e) => {
                        tracing::warn!(vg = %t.vg, pool = %t.pool, request = %tag, error = %e, "request failed; dropping it")
                    }
                }
                if let Err(e) = holder.finish(&t.pool, &r) {
                    tracing::warn!(vg = %t.vg, pool = %t.pool, request = %tag, error = %e, "removing the request");
                }
            }
        }
    }

    /// One request on `t`'s pool, made through `holder`: the filesystem it reads frozen
    /// around the change and its delivery to the kernel pool.
    fn serve_one(
        &self,
        holder: &lvmeta::volume::Volumes<'_>,
        t: &ThinStaged,
        all: &[ThinStaged],
        r: &lvmeta::volume::Request,
    ) -> Result<(), String> {
        let sys = &self.config.system;
        let frozen = r
            .reads_volume()
            .and_then(|v| all.iter().find(|s| s.vg == t.vg && s.lv == v))
            .and_then(|s| s.staging.clone());
        if let Some(path) = &frozen {
            sys.freeze(path, true).map_err(|e| e.to_string())?;
        }
        let done = holder.serve(r).map_err(|e| e.to_string()).and_then(|()| {
            self.backend
                .session()
                .refresh(&t.vg, &t.lv, self.config.activation.as_ref())
                .map(drop)
                .map_err(|e| e.to_string())
        });
        if let Some(path) = &frozen {
            if let Err(e) = sys.freeze(path, false) {
                tracing::error!(path = %path.display(), error = %e, "could not thaw the filesystem");
                return done.and(Err(e.to_string()));
            }
        }
        done
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, HashMap<String, Staged>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
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

    /// A path argument: required, absolute, without `..`, under the kubelet directory.
    fn checked_path(&self, field: &str, p: &str) -> Result<PathBuf, Status> {
        if p.is_empty() {
            return Err(Status::invalid_argument(format!("{field} is required")));
        }
        let path = PathBuf::from(p);
        if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
            return Err(Status::invalid_argument(format!(
                "{field} {p:?} must be absolute and without '..'"
            )));
        }
        if !path.starts_with(&self.config.kubelet_dir) {
            return Err(Status::invalid_argument(format!(
                "{field} {p:?} is not under the kubelet directory {}",
                self.config.kubelet_dir.display()
            )));
        }
        Ok(path)
    }

    /// The device of a volume active here: from its staging, or found from the metadata.
    fn device_of(&self, id: &str, vg: &str, lv: &str) -> Result<Option<PathBuf>, Status> {
        if let Some(s) = self.staged().get(id) {
            return Ok(Some(s.activation.device.clone()));
        }
        self.backend
            .session()
            .active_device(vg, lv, self.config.activation.as_ref())
            .map_err(node_err)
    }

    fn stage(&self, req: NodeStageVolumeRequest) -> Result<(), Status> {
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let staging = self.checked_path("staging_target_path", &req.staging_target_path)?;
        let cap = req
            .volume_capability
            .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        let want = Want::of(&cap)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let vol = self.backend.volume(&vg, &lv)?;
        params::check_capabilities(std::slice::from_ref(&cap), vol.mode)
            .map_err(Status::invalid_argument)?;
        if let Some(s) = self.staged().get(&req.volume_id) {
            if s.staging == staging && s.fs == want.fs {
                return Ok(());
            }
            return Err(Status::already_exists(format!(
                "volume {} is already staged at {} as {}",
                req.volume_id,
                s.staging.display(),
                s.fs.as_deref().unwrap_or("a block device")
            )));
        }
        let max = self.config.max_volumes;
        if max > 0 && self.staged().len() as i64 >= max {
            return Err(Status::resource_exhausted(format!(
                "this node already has {max} volumes staged (its limit)"
            )));
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
            .map_err(node_err)?;
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

    /// Formats a blank device and mounts it at `staging` (nothing to do if it is mounted).
    fn mount_staging(
        &self,
        dev: &Path,
        staging: &Path,
        fs: &str,
        want: &Want,
    ) -> Result<(), Status> {
        let sys = &self.config.system;
        if sys.mounted(staging).map_err(sys_status)?.is_some() {
            return Ok(());
        }
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
        std::fs::create_dir_all(staging)
            .map_err(|e| Status::internal(format!("{}: {e}", staging.display())))?;
        let mut options = want.flags.clone();
        if want.read_only {
            options.push("ro".into());
        }
        sys.mount(dev, staging, fs, &options).map_err(sys_status)?;
        if let Some(gid) = want.group {
            // The pod's fsGroup owns the filesystem's root, setgid so new files inherit it.
            let set = std::os::unix::fs::chown(staging, None, Some(gid)).and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o2775))
            });
            if let Err(e) = set {
                let _ = sys.umount(staging);
                return Err(Status::internal(format!(
                    "{}: setting group {gid}: {e}",
                    staging.display()
                )));
            }
        }
        Ok(())
    }

    fn unstage(&self, req: NodeUnstageVolumeRequest) -> Result<(), Status> {
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let staging = self.checked_path("staging_target_path", &req.staging_target_path)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let _serving = self.serving.lock().unwrap_or_else(|p| p.into_inner());
        let sys = &self.config.system;
        if sys.mounted(&staging).map_err(sys_status)?.is_some() {
            sys.umount(&staging).map_err(sys_status)?;
        }
        let staged = self.staged().remove(&req.volume_id);
        let act = self.config.activation.as_ref();
        match staged {
            Some(s) => {
                if let Err(e) = s.activation.deactivate(act) {
                    self.staged().insert(req.volume_id, s);
                    return Err(node_err(e.into()));
                }
            }
            // Not staged by this process (it restarted): remove the device if it is there.
            None => match self.backend.session().deactivate(&vg, &lv, act) {
                Ok(()) => {}
                Err(
                    lvmeta::Error::VgNotFound(_)
                    | lvmeta::Error::Activate(ActivateError::NoLv { .. }),
                ) => {}
                Err(e) => return Err(node_err(e)),
            },
        }
        tracing::info!(volume_id = %req.volume_id, "unstaged");
        Ok(())
    }

    fn publish(&self, req: NodePublishVolumeRequest) -> Result<(), Status> {
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let target = self.checked_path("target_path", &req.target_path)?;
        let staging = self.checked_path("staging_target_path", &req.staging_target_path)?;
        let cap = req
            .volume_capability
            .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        let want = Want::of(&cap)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let vol = self.backend.volume(&vg, &lv)?;
        params::check_capabilities(std::slice::from_ref(&cap), vol.mode)
            .map_err(Status::invalid_argument)?;
        let sys = &self.config.system;
        if sys.mounted(&target).map_err(sys_status)?.is_some() {
            return Ok(());
        }
        if want.single_writer {
            let elsewhere = self.staged().get(&req.volume_id).and_then(|s| {
                s.targets
                    .iter()
                    .find(|t| **t != target)
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
        let not_staged = || {
            Status::failed_precondition(format!(
                "volume {} is not staged at {}",
                req.volume_id,
                staging.display()
            ))
        };
        let source = match &want.fs {
            None => self
                .device_of(&req.volume_id, &vg, &lv)?
                .ok_or_else(not_staged)?,
            Some(_) => {
                sys.mounted(&staging)
                    .map_err(sys_status)?
                    .ok_or_else(not_staged)?;
                staging
            }
        };
        let made = if want.fs.is_none() {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Status::internal(format!("{}: {e}", parent.display())))?;
            }
            std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&target)
                .map(drop)
        } else {
            std::fs::create_dir_all(&target)
        };
        made.map_err(|e| Status::internal(format!("{}: {e}", target.display())))?;
        sys.bind(&source, &target, read_only).map_err(sys_status)?;
        if let Some(s) = self.staged().get_mut(&req.volume_id) {
            s.targets.push(target.clone());
        }
        tracing::info!(volume_id = %req.volume_id, target = %target.display(), read_only, "published");
        Ok(())
    }

    fn unpublish(&self, req: NodeUnpublishVolumeRequest) -> Result<(), Status> {
        params::parse_volume_id(&req.volume_id)?;
        let target = self.checked_path("target_path", &req.target_path)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let sys = &self.config.system;
        if sys.mounted(&target).map_err(sys_status)?.is_some() {
            sys.umount(&target).map_err(sys_status)?;
        }
        if let Some(s) = self.staged().get_mut(&req.volume_id) {
            s.targets.retain(|t| *t != target);
        }
        let removed = match std::fs::symlink_metadata(&target) {
            Ok(m) if m.is_dir() => std::fs::remove_dir(&target),
            Ok(_) => std::fs::remove_file(&target),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        removed.map_err(|e| Status::internal(format!("{}: {e}", target.display())))?;
        Ok(())
    }

    fn stats(&self, req: NodeGetVolumeStatsRequest) -> Result<NodeGetVolumeStatsResponse, Status> {
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let path = self.checked_path("volume_path", &req.volume_path)?;
        self.backend.volume(&vg, &lv)?;
        let meta = std::fs::metadata(&path).map_err(|_| {
            Status::not_found(format!("volume path {} does not exist", path.display()))
        })?;
        let sys = &self.config.system;
        let mounted = sys.mounted(&path).map_err(sys_status)?.is_some();
        let pool = self.pool_condition(&req.volume_id);
        let mut message = if mounted {
            "mounted".to_owned()
        } else {
            format!("{} is not a mount point", path.display())
        };
        if let Some(Ok(m) | Err(m)) = &pool {
            message = format!("{message}; {m}");
        }
        let condition = Some(VolumeCondition {
            abnormal: !mounted || matches!(pool, Some(Err(_))),
            message,
        });
        let usage = if meta.is_dir() {
            if !mounted {
                return Ok(NodeGetVolumeStatsResponse {
                    usage: Vec::new(),
                    volume_condition: condition,
                });
            }
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
        } else {
            let total = sys.device_bytes(&path).map_err(sys_status)?;
            vec![usage(volume_usage::Unit::Bytes, total, 0, 0)]
        };
        Ok(NodeGetVolumeStatsResponse {
            usage,
            volume_condition: condition,
        })
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
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let path = self.checked_path("volume_path", &req.volume_path)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        let vol: Volume = self.backend.volume(&vg, &lv)?;
        let act = self.config.activation.as_ref();
        let dev = self.device_of(&req.volume_id, &vg, &lv)?.ok_or_else(|| {
            Status::failed_precondition(format!(
                "volume {} is not staged on this node",
                req.volume_id
            ))
        })?;
        self.backend
            .session()
            .refresh(&vg, &lv, act)
            .map_err(node_err)?;
        let fs = match self.staged().get(&req.volume_id) {
            Some(s) => s.fs.clone(),
            None => match req.volume_capability.as_ref().map(Want::of).transpose()? {
                Some(w) => w.fs,
                None => self.config.system.fs_type(&dev).map_err(sys_status)?,
            },
        };
        if let Some(fs) = fs {
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

/// What a volume capability asks of the node.
struct Want {
    /// Filesystem (`None`: block).
    fs: Option<String>,
    /// mount(8) options.
    flags: Vec<String>,
    /// Group to own the filesystem root (VOLUME_MOUNT_GROUP).
    group: Option<u32>,
    read_only: bool,
    multi_node: bool,
    /// SINGLE_NODE_SINGLE_WRITER: published at one target path at most.
    single_writer: bool,
}

impl Want {
    fn of(cap: &VolumeCapability) -> Result<Self, Status> {
        let access = cap
            .access_mode
            .as_ref()
            .and_then(|a| Access::try_from(a.mode).ok())
            .unwrap_or(Access::Unknown);
        let read_only = matches!(
            access,
            Access::SingleNodeReaderOnly | Access::MultiNodeReaderOnly
        );
        let multi_node = matches!(
            access,
            Access::MultiNodeReaderOnly
                | Access::MultiNodeSingleWriter
                | Access::MultiNodeMultiWriter
        );
        let single_writer = access == Access::SingleNodeSingleWriter;
        let (fs, flags, group) = match &cap.access_type {
            Some(AccessType::Block(_)) => (None, Vec::new(), None),
            Some(AccessType::Mount(MountVolume {
                fs_type,
                mount_flags,
                volume_mount_group,
            })) => {
                let fs = if fs_type.is_empty() {
                    DEFAULT_FS.to_owned()
                } else {
                    fs_type.clone()
                };
                if !params::FILESYSTEMS.contains(&fs.as_str()) {
                    return Err(Status::invalid_argument(format!(
                        "filesystem {fs:?} is not supported (ext4 or xfs)"
                    )));
                }
                for f in mount_flags {
                    if f.is_empty() || f.contains([',', '\n', '\0']) {
                        return Err(Status::invalid_argument(format!("bad mount flag {f:?}")));
                    }
                }
                let group = if volume_mount_group.is_empty() {
                    None
                } else {
                    Some(volume_mount_group.parse().map_err(|_| {
                        Status::invalid_argument(format!(
                            "volume_mount_group {volume_mount_group:?} is not a numeric group id"
                        ))
                    })?)
                };
                (Some(fs), mount_flags.clone(), group)
            }
            None => {
                return Err(Status::invalid_argument(
                    "access type (block or mount) is missing",
                ))
            }
        };
        Ok(Self {
            fs,
            flags,
            group,
            read_only,
            multi_node,
            single_writer,
        })
    }
}

/// The CSI code for a failed activation: a lease held elsewhere or a layout this node cannot
/// build is FAILED_PRECONDITION.
fn node_err(e: lvmeta::Error) -> Status {
    match e {
        lvmeta::Error::Lease(LeaseError::Busy { name }) => Status::failed_precondition(format!(
            "the volume's lease {name} is held by another node (it is in use there)"
        )),
        lvmeta::Error::Activate(e @ ActivateError::Unsupported { .. }) => {
            Status::failed_precondition(e.to_string())
        }
        lvmeta::Error::Activate(e) => Status::internal(e.to_string()),
        e => from_lvmeta(e),
    }
}

fn sys_status(e: SysError) -> Status {
    Status::internal(e.to_string())
}

/// The gRPC face of [`Node`].
pub struct NodeService {
    node: Arc<Node>,
}

impl NodeService {
    /// The service over `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }

    /// Runs `f` on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Node) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        crate::status::blocking(&self.node, f).await
    }
}

#[tonic::async_trait]
impl NodeRpc for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(volume_id = %req.volume_id, staging = %req.staging_target_path, "NodeStageVolume");
        self.blocking(move |n| n.stage(req)).await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(volume_id = %req.volume_id, "NodeUnstageVolume");
        self.blocking(move |n| n.unstage(req)).await?;
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(volume_id = %req.volume_id, target = %req.target_path, "NodePublishVolume");
        self.blocking(move |n| n.publish(req)).await?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(volume_id = %req.volume_id, target = %req.target_path, "NodeUnpublishVolume");
        self.blocking(move |n| n.unpublish(req)).await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        Ok(Response::new(self.blocking(move |n| n.stats(req)).await?))
    }

    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        tracing::info!(volume_id = %req.volume_id, "NodeExpandVolume");
        let capacity_bytes = self.blocking(move |n| n.expand(req)).await?;
        Ok(Response::new(NodeExpandVolumeResponse { capacity_bytes }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let caps = [
            rpc::Type::StageUnstageVolume,
            rpc::Type::GetVolumeStats,
            rpc::Type::ExpandVolume,
            rpc::Type::VolumeCondition,
            rpc::Type::SingleNodeMultiWriter,
            rpc::Type::VolumeMountGroup,
        ];
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: caps
                .iter()
                .map(|t| NodeServiceCapability {
                    r#type: Some(CapType::Rpc(Rpc { r#type: *t as i32 })),
                })
                .collect(),
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        let vgs = self.blocking(|n| Ok(n.backend.visible_vgs())).await?;
        let mut segments = HashMap::new();
        for vg in vgs {
            if let Some(k) = params::topology_key(&vg) {
                segments.insert(k, params::TOPOLOGY_VALUE.to_owned());
            }
        }
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node.config.node_id.clone(),
            max_volumes_per_node: self.node.config.max_volumes,
            // One segment: every VG served whose PVs this node sees.
            accessible_topology: Some(crate::csi::Topology { segments }),
        }))
    }
}
