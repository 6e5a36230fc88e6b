//! StorageClass parameters, volume ids and volume capabilities: what a request may ask for,
//! checked before any storage work.

use std::collections::HashMap;

use tonic::Status;

use crate::csi::volume_capability::access_mode::Mode as Access;
use crate::csi::volume_capability::AccessType;
use crate::csi::VolumeCapability;
use crate::volume::{Mode, PoolOptions};

/// The VG volumes are carved from (required).
pub const VG: &str = "vg";
/// `linear` (default) or `thin`.
pub const MODE: &str = "mode";
/// Thin volumes: zero new pool chunks before their first use, `true` (default) or `false`
/// (lvm2's `-Z`). Mutable.
pub const ZERO: &str = "zero";
/// Thin volumes: what the pool does with discards, `passdown` (default), `nopassdown` or
/// `ignore` (lvm2's `--discards`). Mutable.
pub const DISCARDS: &str = "discards";
/// The parameters that can change on a live volume (ControllerModifyVolume).
pub const MUTABLE: [&str; 2] = [ZERO, DISCARDS];
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
            "unknown snapshot parameter {} (snapshots take none)",
            shown(k)
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
    /// A thin volume's pool settings.
    pub options: PoolOptions,
}

impl Class {
    /// Reads the parameters and the mutable parameters (which win where both name a key);
    /// an unknown key or value is INVALID_ARGUMENT.
    pub fn parse(
        p: &HashMap<String, String>,
        mutable: &HashMap<String, String>,
    ) -> Result<Self, Status> {
        for k in p.keys() {
            let known = [VG, MODE, FSTYPE].contains(&k.as_str()) || MUTABLE.contains(&k.as_str());
            if !known && !EXTRA_METADATA.contains(&k.as_str()) {
                return Err(Status::invalid_argument(format!(
                    "unknown parameter {} (known: {VG}, {MODE}, {FSTYPE}, {ZERO}, {DISCARDS})",
                    shown(k)
                )));
            }
        }
        let mut both: HashMap<String, String> = p
            .iter()
            .filter(|(k, _)| MUTABLE.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        both.extend(mutable.iter().map(|(k, v)| (k.clone(), v.clone())));
        let options = parse_mutable(&both)?;
        let vg = p
            .get(VG)
            .filter(|v| !v.is_empty())
            .ok_or_else(|| Status::invalid_argument(format!("parameter {VG:?} is required")))?;
        lvmeta::names::check_vg_name(vg).map_err(|e| {
            let lvmeta::names::NameError::Invalid { why, .. } = e;
            Status::invalid_argument(format!(
                "parameter {VG:?} is {}, not a VG name: {why}",
                shown(vg)
            ))
        })?;
        let mode = match p.get(MODE).map(String::as_str) {
            None | Some("") => Mode::Linear,
            Some(m) => Mode::parse(m).ok_or_else(|| {
                Status::invalid_argument(format!(
                    "parameter {MODE:?} is {}, not linear or thin",
                    shown(m)
                ))
            })?,
        };
        if let Some(fs) = p.get(FSTYPE).filter(|f| !f.is_empty()) {
            check_fs(fs)?;
        }
        if mode == Mode::Linear && !options.is_empty() {
            return Err(linear_has_no_options());
        }
        Ok(Self {
            vg: vg.clone(),
            mode,
            options,
        })
    }
}

/// The context handed to the node with a volume of `mode` in `vg`.
pub fn context(vg: &str, mode: Mode) -> HashMap<String, String> {
    HashMap::from([
        (VG.to_owned(), vg.to_owned()),
        (MODE.to_owned(), mode.as_str().to_owned()),
    ])
}

/// INVALID_ARGUMENT for pool settings asked of a linear volume.
pub fn linear_has_no_options() -> Status {
    Status::invalid_argument(format!(
        "parameters {ZERO:?} and {DISCARDS:?} are settings of a thin volume's pool (mode thin); a linear volume has none"
    ))
}

/// Reads mutable parameters (VolumeAttributesClass parameters): `zero` and `discards`
/// only; any other key or an unknown value is INVALID_ARGUMENT.
pub fn parse_mutable(p: &HashMap<String, String>) -> Result<PoolOptions, Status> {
    if let Some(k) = p.keys().find(|k| !MUTABLE.contains(&k.as_str())) {
        return Err(Status::invalid_argument(format!(
            "parameter {} cannot change on a live volume (mutable: {ZERO}, {DISCARDS})",
            shown(k)
        )));
    }
    let zero = match p.get(ZERO).map(String::as_str) {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(z) => {
            return Err(Status::invalid_argument(format!(
                "parameter {ZERO:?} is {}, not true or false",
                shown(z)
            )))
        }
    };
    let discards = match p.get(DISCARDS) {
        None => None,
        Some(d) if lvmeta::model::DISCARDS.contains(&d.as_str()) => Some(d.clone()),
        Some(d) => {
            return Err(Status::invalid_argument(format!(
                "parameter {DISCARDS:?} is {}, not passdown, nopassdown or ignore",
                shown(d)
            )))
        }
    };
    Ok(PoolOptions { zero, discards })
}

fn check_fs(fs: &str) -> Result<(), Status> {
    if FILESYSTEMS.contains(&fs) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "filesystem {} is not supported (ext4 or xfs)",
            shown(fs)
        )))
    }
}

/// The topology key saying "this node sees every PV of VG `vg`": `topology.lvmeta.csi/vg-<vg>`
/// (value `yes`). `None` for VG names that cannot be a Kubernetes label name (`+`, or longer
/// than 60 characters): such VGs get no topology.
///
/// The kubelet sets this label on its own Node, and the NodeRestriction admission plugin
/// forbids kubelets labels under `kubernetes.io` and `k8s.io` (so not the driver's name).
pub fn topology_key(vg: &str) -> Option<String> {
    let ok = vg.len() <= 60
        && vg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && vg.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    ok.then(|| format!("{TOPOLOGY_PREFIX}/vg-{vg}"))
}

/// The label prefix of the topology keys.
pub const TOPOLOGY_PREFIX: &str = "topology.lvmeta.csi";

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

/// The start of the LV name of a CSI name that cannot be an LV name itself.
pub const HASHED_PREFIX: &str = "csi-h-";

/// The LV name for the CSI name `name` of a volume or snapshot in VG `vg`: `name` itself when
/// lvm2 accepts it as a new LV name with room for a thin pool's `-pool_tdata` behind it, or
/// else `csi-h-` and 32 hex digits of a 128-bit FNV-1a hash of it. CSI allows any name up to
/// 128 bytes; lvm2 allows 127 bytes for VG and LV name together, a few characters and no
/// reserved words. The mapping is stable (idempotency by name depends on it), and no plain
/// name starts with the prefix (nor with [`crate::volume::WIPE_PREFIX`], the names of
/// deleted volumes' extents), so the kinds never meet.
pub fn lv_name(vg: &str, name: &str) -> String {
    let fits = lvmeta::names::check_new_lv_name(vg, name).is_ok()
        && lvmeta::names::check_lv_name_in_vg(vg, &format!("{name}-pool_tdata")).is_ok();
    let reserved = name.starts_with(HASHED_PREFIX) || name.starts_with(crate::volume::WIPE_PREFIX);
    if fits && !reserved {
        return name.to_owned();
    }
    format!("{HASHED_PREFIX}{:032x}", fnv1a_128(name.as_bytes()))
}

/// The 128-bit FNV-1a hash.
fn fnv1a_128(data: &[u8]) -> u128 {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    data.iter()
        .fold(OFFSET, |h, &b| (h ^ u128::from(b)).wrapping_mul(PRIME))
}

/// The longest CSI name (of a volume or snapshot) the spec allows, in bytes.
pub const MAX_NAME_BYTES: usize = 128;

/// A CSI name argument `field`: required, at most [`MAX_NAME_BYTES`] bytes.
pub fn check_name(field: &str, name: &str) -> Result<(), Status> {
    if name.is_empty() {
        return Err(Status::invalid_argument(format!("{field} is required")));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(Status::invalid_argument(format!(
            "{field} {} has {} bytes; CSI names have at most {MAX_NAME_BYTES}",
            shown(name),
            name.len()
        )));
    }
    Ok(())
}

/// A request string as logs and messages show it: escaped (newlines, escape sequences and
/// quotes as Rust writes them in a string literal) and cut to 128 characters, so that no
/// request can forge a log line or fill the log.
pub fn shown(s: &str) -> String {
    const MAX: usize = 128;
    match s.char_indices().nth(MAX) {
        Some((end, _)) => format!("{:?}... ({} bytes)", &s[..end], s.len()),
        None => format!("{s:?}"),
    }
}

/// A volume id: `<vg>/<lv>`.
pub fn volume_id(vg: &str, name: &str) -> String {
    format!("{vg}/{name}")
}

/// INVALID_ARGUMENT naming the first of a request's required `fields` (name, whether it
/// is set) that is missing. Called first: a request's arguments are checked before the
/// volume it names is looked up (INVALID_ARGUMENT before NOT_FOUND, as the CSI spec and
/// csi-sanity expect).
pub fn require(fields: &[(&str, bool)]) -> Result<(), Status> {
    match fields.iter().find(|(_, set)| !set) {
        Some((name, _)) => Err(Status::invalid_argument(format!("{name} is required"))),
        None => Ok(()),
    }
}

/// The VG and LV of a volume id; NOT_FOUND for ids this driver cannot have made.
pub fn parse_volume_id(id: &str) -> Result<(String, String), Status> {
    if id.is_empty() {
        return Err(Status::invalid_argument("volume id is empty"));
    }
    let bad = || {
        Status::not_found(format!(
            "volume {} does not exist (ids are VG/LV)",
            shown(id)
        ))
    };
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
            _ if multi_node && mode == Mode::Thin && !block => {
                return Err(format!(
                    "{} on a thin volume needs volumeMode Block: other nodes reach a thin volume \
                     over NBD as a block device (a filesystem is single-host; use mode linear \
                     for a read-only filesystem on several nodes)",
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

    #[test]
    fn csi_names_that_cannot_be_lv_names_are_hashed_stably() {
        assert_eq!(lv_name("vg", "pvc-0e6f3c"), "pvc-0e6f3c");
        let long = "x".repeat(128);
        for n in [
            long.as_str(),
            "bad name!",
            "x_tmeta",
            "snapshot1",
            "csi-h-1234",
        ] {
            let lv = lv_name("vg", n);
            assert!(lv.starts_with(HASHED_PREFIX) && lv.len() == 38, "{n}: {lv}");
            assert!(lvmeta::names::check_new_lv_name("vg", &lv).is_ok(), "{lv}");
            assert_eq!(lv, lv_name("vg", n), "stable");
        }
        assert_ne!(lv_name("vg", "bad name!"), lv_name("vg", "bad name?"));
        // The published FNV-1a 128 test vector for "a".
        assert_eq!(fnv1a_128(b"a"), 0xd228_cb69_6f1a_8caf_7891_2b70_4e4a_8964);
        // A name too long only together with a thin pool's sub-LV names is hashed too.
        let edge = "y".repeat(127 - 3 - 2 - "-pool_tdata".len());
        assert_eq!(lv_name("vg", &edge), edge);
        assert!(lv_name("vg", &format!("{edge}y")).starts_with(HASHED_PREFIX));
    }
    use crate::csi::{Topology, TopologyRequirement};

    #[test]
    fn topology_keys_and_requirements() {
        assert_eq!(
            topology_key("vg0").as_deref(),
            Some("topology.lvmeta.csi/vg-vg0")
        );
        // NodeRestriction: a kubelet may not set its Node's labels under these domains.
        for domain in ["kubernetes.io", "k8s.io"] {
            assert!(TOPOLOGY_PREFIX != domain && !TOPOLOGY_PREFIX.ends_with(&format!(".{domain}")));
        }
        assert_eq!(topology_key("a+b"), None);
        assert_eq!(topology_key("ends-"), None);
        assert_eq!(topology_key(&"v".repeat(61)), None);
        let seg = |vg: &str| Topology {
            segments: HashMap::from([(format!("topology.lvmeta.csi/vg-{vg}"), "yes".into())]),
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
