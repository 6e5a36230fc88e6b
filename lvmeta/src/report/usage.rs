//! `Data%`, `Meta%` and `Cpy%Sync` of active LVs, from the kernel's status, printed as lvm2
//! prints them:
//! - thin pools and thin LVs: data and metadata used;
//! - raid LVs: `Cpy%Sync`, the share in sync;
//! - cached LVs, and the cache pool they use: cache blocks and metadata used, `Cpy%Sync` the
//!   share of the used cache blocks that are dirty;
//! - LVs with a writecache: `Data%`, the share of its blocks in use.
//!
//! Blank for LVs that are not active here, or of other kinds. Two decimals, rounded, but
//! never to 0.00 or 100.00 unless exactly so (lvm2's rule).

use super::kernel::{active, read, DmState};
use crate::activate::status::Usage;
use crate::model::{Lv, SegKind, Vg};

/// `used / total` as lvm2 prints a percentage.
fn percent((used, total): (u64, u64)) -> String {
    if total == 0 {
        return String::new();
    }
    // lvm2's fixed point: a millionth of a percent.
    let p = u128::from(used) * 100_000_000 / u128::from(total);
    let shown = match p {
        0 => 0.0,
        1..=9_999 => 0.01,
        99_990_001..=99_999_999 => 99.99,
        _ => p as f64 / 1_000_000.0,
    };
    format!("{shown:.2}")
}

/// The three columns of LV `lv`: data, metadata, copy; blank where the kernel says nothing.
fn columns(vg: &Vg, lv: &Lv, dm: &DmState) -> [String; 3] {
    let blank = || [String::new(), String::new(), String::new()];
    if !matches!(dm, DmState::Known(_)) {
        return blank();
    }
    let Some(seg) = lv.segments.first() else {
        return blank();
    };
    let dm_name = crate::activate::dm_names::dm_name;
    // A cache pool reports through the LV it caches, as lvm2 shows it, active or not.
    let (device, sectors) = match &seg.kind {
        SegKind::CachePool(_) => match cached_by(vg, &lv.name) {
            Some(user) if active(vg, user, dm) => (dm_name(&vg.name, &user.name), 0),
            _ => return blank(),
        },
        _ if !active(vg, lv, dm) => return blank(),
        SegKind::ThinPool(_) => (
            crate::activate::dm_names::dm_layer_name(&vg.name, &lv.name, "tpool"),
            0,
        ),
        SegKind::Thin(_) => (
            dm_name(&vg.name, &lv.name),
            lv.extents() * u64::from(vg.extent_size),
        ),
        // raid0 has no copies to sync: lvm2 leaves it blank, so its status is not asked.
        SegKind::Raid { level, .. } if level.starts_with("raid0") => return blank(),
        SegKind::Raid { .. } | SegKind::Cache(_) | SegKind::Writecache(_) => {
            (dm_name(&vg.name, &lv.name), 0)
        }
        _ => return blank(),
    };
    let Some(usage) = read(&device) else {
        return blank();
    };
    match usage {
        Usage::Pool { data, metadata } => [percent(data), percent(metadata), String::new()],
        Usage::Thin { mapped } => [percent((mapped, sectors)), String::new(), String::new()],
        Usage::Raid { sync, .. } => [String::new(), String::new(), percent(sync)],
        Usage::Cache {
            metadata,
            data,
            dirty,
        } => [percent(data), percent(metadata), dirty_share(dirty, data.0)],
        Usage::Writecache { total, free } => {
            [percent((total - free, total)), String::new(), String::new()]
        }
    }
}

/// The dirty share of a cache's used blocks; 0.00 while it holds none.
fn dirty_share(dirty: u64, used: u64) -> String {
    match used {
        0 => percent((0, 1)),
        _ => percent((dirty.min(used), used)),
    }
}

/// The LV that cache pool `pool` caches.
fn cached_by<'v>(vg: &'v Vg, pool: &str) -> Option<&'v Lv> {
    vg.lvs.iter().map(|l| &**l).find(|l| {
        l.segments.first().is_some_and(
            |s| matches!(&s.kind, SegKind::Cache(b) if b.lv("cache_pool") == Some(pool)),
        )
    })
}

/// One LV's `Data%`, `Meta%` and `Cpy%Sync`, read from the kernel once for all three columns
/// of its row (`lvs` shows all three by default).
#[derive(Default)]
pub struct Percents(std::cell::OnceCell<[String; 3]>);

impl Percents {
    /// `data_percent`, `metadata_percent`, `copy_percent` (also `sync_percent`), in order.
    pub fn of(&self, vg: &Vg, lv: &Lv, dm: &DmState) -> &[String; 3] {
        self.0.get_or_init(|| columns(vg, lv, dm))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_as_lvm2s() {
        assert_eq!(percent((0, 100)), "0.00");
        assert_eq!(percent((1, 1_000_000)), "0.01");
        assert_eq!(percent((999_999, 1_000_000)), "99.99");
        assert_eq!(percent((100, 100)), "100.00");
        assert_eq!(percent((1, 3)), "33.33");
        assert_eq!(percent((2, 3)), "66.67");
        assert_eq!(percent((5, 0)), "");
        // A cache's dirty share is of its used blocks; none used reads 0.00.
        assert_eq!(dirty_share(0, 0), "0.00");
        assert_eq!(dirty_share(1, 4), "25.00");
    }
}
