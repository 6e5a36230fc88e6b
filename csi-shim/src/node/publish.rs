//! NodePublishVolume and NodeUnpublishVolume: the staged filesystem (or the device, for a
//! block volume) bind-mounted at the pod's target path, and only that mount removed.

use std::path::Path;

use lvmeta::activate::dm_names::dm_name;
use tonic::Status;

use crate::csi::{NodePublishVolumeRequest, NodeUnpublishVolumeRequest};
use crate::kubelet::Place;
use crate::mount::Source;
use crate::params;

use super::{place_err, sys_status, Holds, Node};

impl Node {
    pub(super) fn publish(&self, req: NodePublishVolumeRequest) -> Result<(), Status> {
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
                params::shown(&req.volume_id),
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
                    params::shown(&req.volume_id)
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
        tracing::info!(volume_id = %params::shown(&req.volume_id), target = %target.path().display(), read_only, "published");
        Ok(())
    }

    pub(super) fn remember_target(&self, id: &str, target: &Path) {
        if let Some(s) = self.staged().get_mut(id) {
            if !s.targets.iter().any(|t| t == target) {
                s.targets.push(target.to_owned());
            }
        }
    }

    pub(super) fn unpublish(&self, req: NodeUnpublishVolumeRequest) -> Result<(), Status> {
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
        // No such path: nothing can be mounted there.
        let Some(target) = target else {
            return Ok(());
        };
        // A block volume's bind outlives its device node (a fence or an unstage elsewhere
        // removed the device, or it was made anew): the bind shows the deleted node of the
        // volume's device-mapper name, whatever this process knows of the volume.
        let name = self
            .config
            .system
            .deleted_node(&target)
            .map_err(sys_status)?;
        if name.as_deref() == Some(dm_name(&vg, &lv).as_str()) {
            return self.unbind(&req.volume_id, &target);
        }
        // Not active here: nothing else of this volume can be mounted there.
        let Some(dev) = self.device_of(&req.volume_id, &vg, &lv)? else {
            return Ok(());
        };
        match self.holds(&target, &dev)? {
            Holds::This => self.unbind(&req.volume_id, &target),
            Holds::Other(found) => {
                tracing::warn!(volume_id = %params::shown(&req.volume_id), target = %target.path().display(), found, "the target holds another mount: left alone");
                Ok(())
            }
            Holds::Nothing => Ok(()),
        }
    }

    /// Unmounts volume `id`'s mount at `target` and removes the target.
    fn unbind(&self, id: &str, target: &Place) -> Result<(), Status> {
        self.config.system.umount(target).map_err(sys_status)?;
        if let Some(s) = self.staged().get_mut(id) {
            s.targets.retain(|t| t != target.path());
        }
        // The target held this volume's mount, which only a publish makes: made by it.
        if let Err(e) = target.remove_any() {
            tracing::warn!(volume_id = %params::shown(id), error = %e, "unpublished; the target stays");
        }
        tracing::info!(volume_id = %params::shown(id), target = %target.path().display(), "unpublished");
        Ok(())
    }
}
