//! StorageClass parameters, volume ids and volume capabilities: what a request may ask for,
//! checked before any storage work.

use std::collections::HashMap;

use lvmeta::volume::Mode;
use tonic::Status;

use crate::csi::volume_capability::access_mode::Mode as Access;
use crate::csi::volume_capability::AccessType;
use crate::csi::VolumeCapability;

/// The VG volumes are carved from (required).
pub const VG: &str = "vg";
/// `linear` (default) or `thin`.
pub const MODE: &str = "mode";
/// The filesystem of filesystem volumes, as external-provisioner passes it.
pub const FSTYPE: &str = "csi.storage.k8s.io/fstype";
/// Names external-provisioner adds with `--extra-create-metadata`; accepted and ignored.
const EXTRA_METADATA: &[&str] = &[
    "csi.storage.k8s.io/pvc/name",
    "csi.storage.k8s.io/pvc/namespace",
    "csi.storage.k8s.io/pv/name",
];
/// Names external-snapshotter adds with `--extra-create-metadata`; the only snapshot
/// parameters accepted (and ignored).
const SNAPSHOT_METADATA: &[&str] = &[
    "csi.storage.k8s.io/volumesnapshot/name",
    "csi.storage.k8s.io/volumesnapshot/namespace",
    "csi.storage.k8s.io/volumesnapshotcontent/name",
];

/// Checks VolumeSnapshotClass parameters: none are known, so any other is INVALID_ARGUMENT.
pub fn check_snapshot_parameters(p: &HashMap<String, String>) -> Result<(), Status> {
    match p.keys().find(|k| !SNAPSHOT_METADATA.contains(&k.as_str())) {
        Some(k) => Err(Status::invalid_argument(format!(
            "unknown snapshot parameter {k:?} (snapshots take none)"
        ))),
        None => Ok(()),
    }
}

/// Filesystems the node formats.
pub const FILESYSTEMS: &[&str] = &["ext4", "xfs"];

/// What a StorageClass asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    /// The VG.
    pub vg: String,
    /// Linear or thin.
    pub mode: Mode,
}

impl Class {
    /// Reads the parameters; an unknown key or value is INVALID_ARGUMENT.
    pub fn parse(p: &HashMap<String, String>) -> Result<Self, Status> {
        for k in p.keys() {
            if ![VG, MODE, FSTYPE].contains(&k.as_str()) && !EXTRA_METADATA.contains(&k.as_str()) {
                return Err(Status::invalid_argument(format!(
                    "unknown parameter {k:?} (known: {VG}, {MODE}, {FSTYPE})"
                )));
            }
        }
        let vg = p
            .get(VG)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Status::invalid_argument(format!("parameter {VG:?} is required")))?;
        lvmeta::names::check_vg_name(vg).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let mode = match p.get(MODE).map(String::as_str) {
            None | Some("") => Mode::Linear,
            Some(m) => Mode::parse(m).ok_or_else(|| {
                Status::invalid_argument(format!("parameter {MODE:?} is {m:?}, not linear or thin"))
            })?,
        };
        if let Some(fs) = p.get(FSTYPE).filter(|f| !f.is_empty()) {
            check_fs(fs)?;
        }
        Ok(Self {
            vg: vg.clone(),
            mode,
        })
    }

    /// The context handed to the node with the volume.
    pub fn context(&self) -> HashMap<String, String> {
        HashMap::from([
            (VG.to_owned(), self.vg.clone()),
            (MODE.to_owned(), self.mode.as_str().to_owned()),
        ])
    }
}

fn check_fs(fs: &str) -> Result<(), Status> {
    if FILESYSTEMS.contains(&fs) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "filesystem {fs:?} is not supported (ext4 or xfs)"
        )))
    }
}

/// The topology key saying "this node sees every PV of VG `vg`": `lvmeta.csi.k8s.io/vg-<vg>`
/// (value `yes`). `None` for VG names that cannot be a Kubernetes label name (`+`, or longer
/// than 60 characters): such VGs get no topology.
pub fn topology_key(vg: &str) -> Option<String> {
    let ok = vg.len() <= 60
        && vg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && vg.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    ok.then(|| format!("{}/vg-{vg}", crate::DRIVER_NAME))
}

/// The value of every topology key.
pub const TOPOLOGY_VALUE: &str = "yes";

/// The topology segment of the nodes that see VG `vg`.
pub fn topology(vg: &str) -> Option<crate::csi::Topology> {
    topology_key(vg).map(|k| crate::csi::Topology {
        segments: HashMap::from([(k, TOPOLOGY_VALUE.to_owned())]),
    })
}

/// Whether accessibility requirements can be met by a volume of VG `vg`: with requisite
/// segments, one of them must be `vg`'s; with preferred ones only, likewise.
pub fn topology_allows(req: Option<&crate::csi::TopologyRequirement>, vg: &str) -> bool {
    let Some(r) = req else {
        return true;
    };
    let list = if r.requisite.is_empty() {
        &r.preferred
    } else {
        &r.requisite
    };
    if list.is_empty() {
        return true;
    }
    let Some(key) = topology_key(vg) else {
        return false;
    };
    list.iter()
        .any(|t| t.segments.get(&key).map(String::as_str) == Some(TOPOLOGY_VALUE))
}

/// A volume id: `<vg>/<lv>`.
pub fn volume_id(vg: &str, name: &str) -> String {
    format!("{vg}/{name}")
}

/// The VG and LV of a volume id; NOT_FOUND for ids this driver cannot have made.
pub fn parse_volume_id(id: &str) -> Result<(String, String), Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument("volume id is empty"));
    }
    let bad = || Status::not_found(format!("volume {id:?} does not exist (ids are VG/LV)"));
    let (vg, lv) = id.split_once('/').ok_or_else(bad)?;
    lvmeta::names::check_vg_name(vg).map_err(|_| bad())?;
    lvmeta::names::check_lv_name(lv).map_err(|_| bad())?;
    Ok((vg.to_owned(), lv.to_owned()))
}

/// Checks that every capability can be honoured by a volume of `mode`; the message says
/// what cannot.
pub fn check_capabilities(caps: &[VolumeCapability], mode: Mode) -> Result<(), String> {
    if caps.is_empty() {
        return Err("volume capabilities are missing".into());
    }
    for c in caps {
        let access = c
            .access_mode
            .as_ref()
            .and_then(|a| Access::try_from(a.mode).ok())
            .unwrap_or(Access::Unknown);
        let block = match &c.access_type {
            Some(AccessType::Block(_)) => true,
            Some(AccessType::Mount(m)) => {
                if !m.fs_type.is_empty() {
                    check_fs(&m.fs_type).map_err(|s| s.message().to_owned())?;
                }
                false
            }
            None => return Err("access type (block or mount) is missing".into()),
        };
        let multi_node = matches!(
            access,
            Access::MultiNodeReaderOnly
                | Access::MultiNodeSingleWriter
                | Access::MultiNodeMultiWriter
        );
        match access {
            Access::Unknown => return Err("access mode is missing or unknown".into()),
            _ if multi_node && mode == Mode::Thin => {
                return Err(format!(
                    "{} needs several nodes at once; thin volumes are active on one node only (use mode linear)",
                    access.as_str_name()
                ))
            }
            Access::MultiNodeSingleWriter | Access::MultiNodeMultiWriter if !block => {
                return Err(format!(
                    "{} on a filesystem would corrupt it (ext4 and xfs are single-host); use a block volume",
                    access.as_str_name()
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::{Topology, TopologyRequirement};

    #[test]
    fn topology_keys_and_requirements() {
        assert_eq!(
            topology_key("vg0").as_deref(),
            Some("lvmeta.csi.k8s.io/vg-vg0")
        );
        assert_eq!(topology_key("a+b"), None);
        assert_eq!(topology_key("ends-"), None);
        assert_eq!(topology_key(&"v".repeat(61)), None);
        let seg = |vg: &str| Topology {
            segments: HashMap::from([(format!("lvmeta.csi.k8s.io/vg-{vg}"), "yes".into())]),
        };
        let other = Topology {
            segments: HashMap::from([("kubernetes.io/hostname".into(), "n1".into())]),
        };
        let req = |requisite: Vec<Topology>, preferred: Vec<Topology>| TopologyRequirement {
            requisite,
            preferred,
        };
        assert!(topology_allows(None, "vg0"));
        assert!(topology_allows(Some(&req(vec![], vec![])), "vg0"));
        assert!(topology_allows(
            Some(&req(vec![other.clone(), seg("vg0")], vec![])),
            "vg0"
        ));
        assert!(!topology_allows(
            Some(&req(vec![seg("vg1")], vec![seg("vg0")])),
            "vg0"
        ));
        assert!(topology_allows(Some(&req(vec![], vec![seg("vg0")])), "vg0"));
        assert!(!topology_allows(Some(&req(vec![other], vec![])), "vg0"));
        assert!(!topology_allows(
            Some(&req(vec![seg("a+b")], vec![])),
            "a+b"
        ));
    }
}
