//! NodeGetVolumeStats and NodeExpandVolume: space, inodes and the volume's condition as this
//! node sees it (mounts, the kernel's thin pool), and online growth of the filesystem.

use std::path::Path;

use lvmeta::activate;
use tonic::Status;

use crate::csi::{
    volume_usage, NodeExpandVolumeRequest, NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse,
    VolumeCondition, VolumeUsage,
};
use crate::params;
use crate::status::from_activation;
use crate::volume::Volume;

use super::shared::Remote;
use super::want::Want;
use super::{sys_status, Holds, Node};

impl Node {
    pub(super) fn stats(
        &self,
        req: NodeGetVolumeStatsRequest,
    ) -> Result<NodeGetVolumeStatsResponse, Status> {
        params::require(&[
            ("volume_id", !req.volume_id.is_empty()),
            ("volume_path", !req.volume_path.is_empty()),
        ])?;
        let (vg, lv) = params::parse_volume_id(&req.volume_id)?;
        let not_here = || {
            Status::not_found(format!(
                "volume path {} does not hold volume {}",
                params::shown(&req.volume_path),
                params::shown(&req.volume_id)
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
                s.staging.as_ref().is_some_and(|p| p.path() == path.path())
                    || s.targets.iter().any(|t| t == path.path())
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
    pub(super) fn fs_of(
        &self,
        id: &str,
        dev: &Path,
        want: Option<&Want>,
    ) -> Result<Option<String>, Status> {
        if let Some(s) = self.staged().get(id) {
            return Ok(s.fs.clone());
        }
        match want {
            Some(w) => Ok(w.fs.clone()),
            None => self.config.system.fs_type(dev).map_err(sys_status),
        }
    }

    /// What the kernel says of the thin pool under staged volume `id`: `Err` saying what is
    /// wrong with it, `Ok` with how full it is; `None` when the volume has no pool here.
    pub(super) fn pool_condition(&self, id: &str) -> Option<Result<String, String>> {
        let p = self
            .staged()
            .get(id)?
            .activation
            .as_ref()?
            .placement
            .clone();
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

    pub(super) fn expand(&self, req: NodeExpandVolumeRequest) -> Result<i64, Status> {
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
                params::shown(&req.volume_id)
            ))
        })?;
        let path = match path {
            Some(p) if matches!(self.holds(&p, &dev)?, Holds::This) => p,
            _ => {
                return Err(Status::not_found(format!(
                    "volume path {} does not hold volume {}",
                    params::shown(&req.volume_path),
                    params::shown(&req.volume_id)
                )))
            }
        };
        // The device takes its new size (a thin pool its queue, then cleared by a commit);
        // one attached over NBD once its server grew it, one served here with its export.
        let shared = self.staged().get(&req.volume_id).and_then(|s| {
            let thin = s.activation.as_ref().map(|a| a.device.clone());
            s.remote.as_ref().map(|r| (r.clone(), thin))
        });
        match shared {
            Some((Remote::Attached(a), _)) => self.grow_attached(&a, vol.bytes)?,
            Some((served, Some(thin))) => {
                self.backend
                    .session()
                    .refresh(&vg, &lv, act)
                    .map_err(from_activation)?;
                self.grow_served(&thin, &served)?;
            }
            _ => {
                self.backend
                    .session()
                    .refresh(&vg, &lv, act)
                    .map_err(from_activation)?;
            }
        }
        let want = req.volume_capability.as_ref().map(Want::of).transpose()?;
        if let Some(fs) = self.fs_of(&req.volume_id, &dev, want.as_ref())? {
            self.config
                .system
                .grow(&dev, &path, &fs)
                .map_err(sys_status)?;
        }
        tracing::info!(volume_id = %params::shown(&req.volume_id), bytes = vol.bytes, "node expansion done");
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
