//! The two-layer wrapper of a volume used on several hosts: what a pod opens is the upper
//! device, a `linear` over the lower one, which is a `linear` over whatever holds the data
//! now (the thin LV on the host whose pool is active, an NBD device elsewhere). Swapping
//! the backing is: hold the upper (suspend without flush: I/O in flight completes, new I/O
//! queues), load the lower's new table, release the upper. The pod never sees the swap.
//!
//! - Names carry the host id (`lvmeta-h<host>-<lv id>`, `-lower`), so several node
//!   processes can share one kernel in tests; uuids start `LVMETA-WRAP-`, never `LVM-`, so
//!   lvm2 ignores these devices and the fencing planners never pick them.
//! - Pure: names, uuids and tables; `dm/wrap.rs` makes them.

use crate::units::Sectors;

/// The uuid prefix of every wrapper device.
pub const WRAP_UUID_PREFIX: &str = "LVMETA-WRAP-";

/// One volume's wrapper on one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wrap {
    /// The host's id in the VG's lockspace.
    pub host: u64,
    /// The VG's id (lvm2's, dashes or not).
    pub vg_id: String,
    /// The LV's id (lvm2's, dashes or not).
    pub lv_id: String,
}

impl Wrap {
    /// The wrapper of LV `lv_id` of VG `vg_id` on host `host`.
    pub fn new(host: u64, vg_id: &str, lv_id: &str) -> Self {
        let bare = |s: &str| s.chars().filter(|c| *c != '-').collect::<String>();
        Self {
            host,
            vg_id: bare(vg_id),
            lv_id: bare(lv_id),
        }
    }

    /// The upper device's name: what pods open, as `/dev/mapper/<name>`.
    pub fn upper_name(&self) -> String {
        format!("lvmeta-h{}-{}", self.host, self.lv_id)
    }

    /// The upper device's node, where pods find it.
    pub fn upper_path(&self) -> std::path::PathBuf {
        std::path::Path::new("/dev/mapper").join(self.upper_name())
    }

    /// The lower device's name.
    pub fn lower_name(&self) -> String {
        format!("{}-lower", self.upper_name())
    }

    /// The upper device's uuid.
    pub fn upper_uuid(&self) -> String {
        format!(
            "{WRAP_UUID_PREFIX}{}{}-h{}",
            self.vg_id, self.lv_id, self.host
        )
    }

    /// The lower device's uuid.
    pub fn lower_uuid(&self) -> String {
        format!("{}-lower", self.upper_uuid())
    }
}

/// A table line: start, length, target, arguments (sectors).
pub type Line = (u64, u64, String, String);

/// A `linear` table of `sectors` over device `backing` (`major:minor`) from its start.
pub fn linear_over(sectors: Sectors, backing: (u32, u32)) -> Vec<Line> {
    vec![(
        0,
        sectors.0,
        "linear".into(),
        format!("{}:{} 0", backing.0, backing.1),
    )]
}

/// The backing `major:minor` of a table [`linear_over`] made; None for any other table.
pub fn backing_of(table: &[Line]) -> Option<(u32, u32)> {
    let [(0, _, target, args)] = table else {
        return None;
    };
    let (dev, offset) = args.split_once(' ')?;
    let (major, minor) = dev.split_once(':')?;
    (target == "linear" && offset == "0").then_some(())?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_uuids_are_per_host_and_never_lvm2s() {
        let w = Wrap::new(7, "abc-def", "0123-4567");
        assert_eq!(w.upper_name(), "lvmeta-h7-01234567");
        assert_eq!(w.lower_name(), "lvmeta-h7-01234567-lower");
        assert_eq!(w.upper_uuid(), "LVMETA-WRAP-abcdef01234567-h7");
        assert_eq!(w.lower_uuid(), "LVMETA-WRAP-abcdef01234567-h7-lower");
        assert!(!w.upper_uuid().starts_with("LVM-"));
        assert_ne!(
            Wrap::new(8, "abc-def", "0123-4567").upper_name(),
            w.upper_name()
        );
    }

    #[test]
    fn tables_round_trip_their_backing() {
        let t = linear_over(Sectors(2048), (43, 0));
        assert_eq!(t, vec![(0, 2048, "linear".into(), "43:0 0".into())]);
        assert_eq!(backing_of(&t), Some((43, 0)));
        assert_eq!(backing_of(&[(0, 8, "error".into(), String::new())]), None);
        assert_eq!(
            backing_of(&[(0, 8, "linear".into(), "43:0 8".into())]),
            None
        );
    }
}
