//! NodeStageVolume and NodeUnstageVolume: the LV activated under its lease, the filesystem
//! made when the device is blank and mounted at the staging path; undone in reverse.

use std::path::Path;

use lvmeta::activate::ActivateError;
use tonic::Status;

use crate::csi::{NodeStageVolumeRequest, NodeUnstageVolumeRequest};
use crate::kubelet::Place;
use crate::params;
use crate::status::from_activation;
use crate::volume::{volume_of, Mode};

use super::want::Want;
use super::{sys_status, Holds, Node, Staged};

impl Node {
    pub(super) fn stage(&self, req: NodeStageVolumeRequest) -> Result<(), Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("staging_target_path", !req.staging_target_path.is_empty()),
            ("volume_capability", req.volume_capability.is_some()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let staging = self.place("staging_target_path", &req.staging_target_path)?;
        let cap = req
            .volume_capability
            .ok_or_else(|| Status::invalid_argument("volume_capability is required"))?;
        let want = Want::of(&cap)?;
        // Only the driver's VGs (NOT_FOUND for another: no volume of it has this id).
        self.backend.served(&vg)?;
        let _g = self.backend.inflight().enter(&req.volume_id)?;
        // Staged here already: answered from what was read then, without a read.
        let cached = self.staged().get_mut(&req.volume_id).map(|s| {
            // Found again after a restart: staged where kubelet says.
            if s.staging.is_none() && s.fs == want.fs {
                s.staging = staging.duplicate().ok();
            }
            let at = s.staging.as_ref().map(|p| p.path().to_owned());
            let same = at.as_deref() == Some(staging.path()) && s.fs == want.fs;
            (
                same,
                at.unwrap_or_default(),
                s.fs.clone(),
                s.device.clone(),
                s.mode,
            )
        });
        if let Some((same, at, fs, dev, mode)) = cached {
            params::check_capabilities(std::slice::from_ref(&cap), mode)
                .map_err(Status::invalid_argument)?;
            if !same {
                return Err(Status::already_exists(format!(
                    "volume {} is already staged at {} as {}",
                    params::shown(&req.volume_id),
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
        // The volume checked on the read made under the VG's lease, the one the activation
        // places: an LV the driver did not make is NOT_FOUND, never touched.
        let session = self.backend.session();
        let read = session.read_for_activation(&vg).map_err(from_activation)?;
        let vol = volume_of(read.vg(), &lv).ok_or_else(|| {
            Status::not_found(format!(
                "volume {} not found",
                params::shown(&req.volume_id)
            ))
        })?;
        params::check_capabilities(std::slice::from_ref(&cap), vol.mode)
            .map_err(Status::invalid_argument)?;
        // A thin block volume on several nodes: served from the pool's node over NBD (a
        // local VG has one node: staged as for one).
        if want.multi_node && vol.mode == Mode::Thin && read.vg().is_shared() {
            let made = self.stage_shared(read, &vg, &lv, &want)?;
            self.staged().insert(
                req.volume_id,
                Staged {
                    activation: made.activation,
                    device: made.device,
                    remote: Some(made.remote),
                    staging: Some(staging),
                    fs: want.fs,
                    mode: vol.mode,
                    targets: Vec::new(),
                },
            );
            return Ok(());
        }
        // A linear volume on several nodes: a shared lease.
        let shared = want.multi_node && vol.mode == Mode::Linear;
        let activation = read
            .activate(&lv, shared, want.read_only, self.config.activation.as_ref())
            .map_err(from_activation)?;
        // lvm2's update_pool_lv: a thin pool's queue the activation delivered is cleared, a
        // commit (on failure the activation is dropped: its lease goes, its device stays).
        session
            .clear_delivered(&activation.placement, "lvchange -ay")
            .map_err(from_activation)?;
        tracing::info!(volume_id = %params::shown(&req.volume_id), device = %activation.device.display(), shared, read_only = want.read_only, "activated");
        if let Some(fs) = &want.fs {
            if let Err(e) = self.mount_staging(&activation.device, &staging, fs, &want) {
                if let Err(d) = activation.deactivate(self.config.activation.as_ref()) {
                    // Still live: its lease stays held (an orphan once this process ends),
                    // never released under a device that may write.
                    tracing::warn!(volume_id = %params::shown(&req.volume_id), error = %d, "deactivating after a failed stage; the lease stays held");
                    activation.keep_lease();
                }
                return Err(e);
            }
        }
        self.staged().insert(
            req.volume_id,
            Staged {
                device: activation.device.clone(),
                activation: Some(activation),
                remote: None,
                staging: Some(staging),
                fs: want.fs,
                mode: vol.mode,
                targets: Vec::new(),
            },
        );
        Ok(())
    }

    /// Mounts the filesystem on `dev` at `staging`, making it when the device is blank;
    /// nothing to do when `staging` shows `dev` already, refused when it shows another.
    pub(super) fn mount_staging(
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

    pub(super) fn unstage(&self, req: NodeUnstageVolumeRequest) -> Result<(), Status> {
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
        let cached = self.staged().get(&req.volume_id).map(|s| {
            let at = s.staging.as_ref().map(|p| p.path().to_owned());
            (at, s.device.clone())
        });
        let dev = match cached {
            Some((Some(at), _)) if staging.as_ref().map(Place::path) != Some(at.as_path()) => {
                tracing::warn!(volume_id = %params::shown(&req.volume_id), staged_at = %at.display(), "NodeUnstageVolume for another staging path: nothing done");
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
                    tracing::warn!(volume_id = %params::shown(&req.volume_id), staging = %at.path().display(), found, "the staging path holds another mount: left alone, volume not staged there");
                    return Ok(());
                }
                Holds::Nothing => {}
            }
        }
        let staged = self.staged().remove(&req.volume_id);
        let act = self.config.activation.as_ref();
        match staged {
            Some(mut s) => {
                if let Some(r) = &s.remote {
                    if let Err(e) = self.unstage_remote(&req.volume_id, r, s.activation.as_ref()) {
                        self.staged().insert(req.volume_id, s);
                        return Err(e);
                    }
                }
                if let Some(a) = &s.activation {
                    if let Err(e) = a.deactivate(act) {
                        // Its wrapper and export are gone already: what stays staged is
                        // the LV itself (a repeated NodeStage finds that device).
                        let device = a.device.clone();
                        if s.remote.take().is_some() {
                            s.device = device;
                        }
                        self.staged().insert(req.volume_id, s);
                        return Err(from_activation(e.into()));
                    }
                    // Still held until `s` goes: the record is written by the holder.
                    if let Some(r) = &s.remote {
                        self.release_record(a, r);
                    }
                }
            }
            // Not staged by this process (it restarted): remove the devices if they are
            // there and release the lease the ended process left.
            None => {
                self.unstage_leftover(&vg, &lv)?;
                match self.backend.session().deactivate(&vg, &lv, act) {
                    Ok(())
                    | Err(
                        lvmeta::Error::VgNotFound(_)
                        | lvmeta::Error::Activate(ActivateError::NoLv { .. }),
                    ) => {}
                    Err(e) => return Err(from_activation(e)),
                }
            }
        }
        tracing::info!(volume_id = %params::shown(&req.volume_id), "unstaged");
        Ok(())
    }
}
