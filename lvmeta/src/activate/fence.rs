//! Fencing an LV on this host, planned: which devices of its stack get an `error` table
//! once the lease that covers it is lost. Pure; a backend loads the tables.
//!
//! Invariants:
//! - every device that maps the LV's bytes on the PVs is in the plan (a thin LV's or pool's
//!   `_tmeta` and `_tdata`: the pool itself writes its metadata), so nothing reaches the
//!   LUN through this host's tables once they are loaded; the `-tpool` layer and the pool
//!   LV's own device only ever write through those two and are left as they are;
//! - the pool's lease covers all its thin LVs, so fencing one fences them all;
//! - top down: users see I/O errors at the device they opened first;
//! - a device is named together with the uuid it must carry: one of another VG or tool
//!   is never touched.

use super::dm_names::dm_name;
use super::{Layout, Placement};

/// The uuid a device must have to be fenced as part of a stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UuidMatch {
    /// Exactly this uuid.
    Exact(String),
    /// Any uuid starting with this (a thin LV of the pool: `LVM-<vg id>`).
    Prefix(String),
}

impl UuidMatch {
    /// Does a device with uuid `found` qualify?
    pub fn matches(&self, found: &str) -> bool {
        match self {
            UuidMatch::Exact(u) => found == u,
            UuidMatch::Prefix(p) => found.starts_with(p.as_str()),
        }
    }
}

/// One device to fence: its device-mapper name and the uuid it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FenceTarget {
    /// Device-mapper name.
    pub name: String,
    /// The uuid it must carry.
    pub uuid: UuidMatch,
}

/// `LVM-` and the VG's id: the first 36 characters of any LV's device uuid.
fn vg_prefix(dm_uuid: &str) -> String {
    dm_uuid.chars().take(36).collect()
}

/// The devices to fence for `p`, top down.
pub fn stack(p: &Placement) -> Vec<FenceTarget> {
    let exact = |name: String, uuid: String| FenceTarget {
        name,
        uuid: UuidMatch::Exact(uuid),
    };
    let pool = match &p.layout {
        Layout::Thin { pool, .. } | Layout::Pool(pool) => pool,
        _ => return vec![exact(dm_name(&p.vg, &p.lv), p.dm_uuid.clone())],
    };
    let mut out: Vec<FenceTarget> = pool
        .thin_lvs
        .iter()
        .map(|(_, lv)| FenceTarget {
            name: dm_name(&p.vg, lv),
            uuid: UuidMatch::Prefix(vg_prefix(&pool.dm_uuid)),
        })
        .collect();
    // The LV itself, should the pool's list not name it (a thin LV made after the plan).
    if let Layout::Thin { .. } = &p.layout {
        if !out.iter().any(|t| t.name == dm_name(&p.vg, &p.lv)) {
            out.insert(0, exact(dm_name(&p.vg, &p.lv), p.dm_uuid.clone()));
        }
    }
    for (sub, suffix) in [(&pool.data, "tdata"), (&pool.metadata, "tmeta")] {
        out.push(exact(
            dm_name(&sub.vg, &sub.lv),
            format!("{}-{suffix}", sub.dm_uuid),
        ));
    }
    out
}

/// The devices to fence when nothing but the lost leases is known (the metadata cannot be
/// read): every device of each VG that holds a device of an LV whose lease was lost, as
/// device-mapper names them (`LVM-`, the VG's id, the LV's id, a layer suffix). LV ids in
/// `lost` are lease names (lvm2's uuid with dashes). The `-tpool` layers are left out, as
/// in [`stack`]; lower layers after upper ones.
pub fn by_lost_leases(devices: &[(String, String)], lost: &[String]) -> Vec<String> {
    let ids: Vec<String> = lost.iter().map(|l| l.replace('-', "")).collect();
    let lv_of = |uuid: &str| uuid.get(36..68).map(str::to_owned);
    let vgs: Vec<&str> = devices
        .iter()
        .filter(|(_, u)| u.starts_with("LVM-") && lv_of(u).is_some_and(|lv| ids.contains(&lv)))
        .filter_map(|(_, u)| u.get(..36))
        .collect();
    let mut out: Vec<(bool, String)> = devices
        .iter()
        .filter(|(_, u)| vgs.iter().any(|v| u.starts_with(v)) && !u.ends_with("-tpool"))
        .map(|(n, u)| (u.ends_with("-tdata") || u.ends_with("-tmeta"), n.clone()))
        .collect();
    out.sort();
    out.into_iter().map(|(_, n)| n).collect()
}

/// The devices of LVs of VGs named `vg` on this host, by device-mapper name (`<vg>-`, the
/// name's dashes doubled) and lvm2 uuid (`LVM-`), without their `-tpool` layers; lower
/// layers last. For when neither the metadata nor a lease tells which LVs are there.
pub fn by_vg_name(devices: &[(String, String)], vg: &str) -> Vec<String> {
    let prefix = super::dm_names::dm_name(vg, "");
    let mut out: Vec<(bool, String)> = devices
        .iter()
        .filter(|(n, u)| {
            // After `<vg>-` an LV name, whose dashes are doubled: a dash there means a VG
            // whose name goes on (`<vg>-x`).
            n.strip_prefix(&prefix)
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('-'))
                && u.starts_with("LVM-")
                && !u.ends_with("-tpool")
        })
        .map(|(n, u)| (u.ends_with("-tdata") || u.ends_with("-tmeta"), n.clone()))
        .collect();
    out.sort();
    out.into_iter().map(|(_, n)| n).collect()
}

/// The table that fails every I/O to a device of `sectors`.
pub fn error_table(sectors: u64) -> (u64, u64, String, String) {
    (0, sectors, "error".into(), String::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activate::thin::PoolPlan;
    use crate::activate::Piece;
    use crate::units::Bytes;

    fn linear(lv: &str, uuid: &str) -> Placement {
        Placement {
            vg: "vg".into(),
            lv: lv.into(),
            bytes: Bytes(1 << 20),
            layout: Layout::Linear(vec![Piece {
                device: "/dev/vda".into(),
                offset: Bytes(1 << 20),
                len: Bytes(1 << 20),
            }]),
            dm_uuid: uuid.into(),
        }
    }

    #[test]
    fn lost_leases_alone_name_every_device_of_their_vg() {
        let vg = "a".repeat(32);
        let other = "b".repeat(32);
        let lease = "Xk2Xk2-aaaa-bbbb-cccc-dddd-eeee-ffffff";
        let id = lease.replace('-', "");
        let dev = |n: &str, u: String| (n.to_owned(), u);
        let devices = vec![
            dev("vg-pool_tdata", format!("LVM-{vg}{}-tdata", "d".repeat(32))),
            dev("vg-t1", format!("LVM-{vg}{}", "t".repeat(32))),
            dev("vg-pool-tpool", format!("LVM-{vg}{id}-tpool")),
            dev("vg-pool", format!("LVM-{vg}{id}")),
            dev("other-x", format!("LVM-{other}{}", "x".repeat(32))),
            dev("lun", String::new()),
        ];
        assert_eq!(
            by_lost_leases(&devices, &[lease.to_owned()]),
            ["vg-pool", "vg-t1", "vg-pool_tdata"]
        );
        assert!(by_lost_leases(&devices, &["nothing-of-ours".into()]).is_empty());
    }

    #[test]
    fn a_vg_name_alone_names_its_devices_and_no_other_vgs() {
        let u = |s: &str| format!("LVM-{}{}{s}", "a".repeat(32), "b".repeat(32));
        let devices = vec![
            ("vg-pvc--1".to_owned(), u("")),
            ("vg-pool_tdata".to_owned(), u("-tdata")),
            ("vg-pool-tpool".to_owned(), u("-tpool")),
            ("vg--x-lv".to_owned(), u("")),
            ("vgx-lv".to_owned(), u("")),
            ("vg-nolvm".to_owned(), "CRYPT-x".to_owned()),
        ];
        assert_eq!(by_vg_name(&devices, "vg"), ["vg-pvc--1", "vg-pool_tdata"]);
        assert_eq!(by_vg_name(&devices, "vg-x"), ["vg--x-lv"]);
    }

    #[test]
    fn a_linear_lv_is_its_one_device() {
        let u = format!("LVM-{}{}", "a".repeat(32), "b".repeat(32));
        assert_eq!(
            stack(&linear("data", &u)),
            [FenceTarget {
                name: "vg-data".into(),
                uuid: UuidMatch::Exact(u)
            }]
        );
    }

    #[test]
    fn a_thin_lv_fences_its_pool_and_every_thin_lv_of_it_top_down() {
        let vg = "a".repeat(32);
        let pool_uuid = format!("LVM-{vg}{}", "p".repeat(32));
        let pool = PoolPlan {
            name: "pool".into(),
            dm_uuid: pool_uuid.clone(),
            bytes: Bytes(1 << 30),
            metadata: linear("pool_tmeta", &format!("LVM-{vg}{}", "m".repeat(32))),
            data: linear("pool_tdata", &format!("LVM-{vg}{}", "d".repeat(32))),
            chunk_size: crate::units::Sectors(128),
            zero_new_blocks: false,
            discards: "passdown".into(),
            error_if_no_space: false,
            transaction_id: 1,
            messages: Vec::new(),
            thin_lvs: vec![(1, "t1".into()), (2, "t2".into())],
        };
        let p = Placement {
            layout: Layout::Thin {
                pool: Box::new(pool),
                device_id: 1,
            },
            ..linear("t1", &format!("LVM-{vg}{}", "t".repeat(32)))
        };
        let s = stack(&p);
        let names: Vec<&str> = s.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["vg-t1", "vg-t2", "vg-pool_tdata", "vg-pool_tmeta"]);
        assert!(s[1].uuid.matches(&format!("LVM-{vg}{}", "z".repeat(32))));
        assert!(!s[1]
            .uuid
            .matches(&format!("LVM-{}{}", "c".repeat(32), "z".repeat(32))));
        assert_eq!(
            s[3].uuid,
            UuidMatch::Exact(format!("LVM-{vg}{}-tmeta", "m".repeat(32)))
        );
        assert_eq!(error_table(8).2, "error");
    }
}
