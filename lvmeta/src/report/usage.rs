//! `Data%` and `Meta%` of active thin pools and thin LVs, from the kernel's status, printed
//! as lvm2 prints them.
//! - Blank for LVs that are not active here, or of other kinds.
//! - Two decimals, rounded, but never to 0.00 or 100.00 unless exactly so (lvm2's rule).

use super::attr::DmState;
use crate::model::{Lv, SegKind, Vg};

/// `used / total` as lvm2 prints a percentage.
#[cfg(any(feature = "dm", test))]
fn percent(used: u64, total: u64) -> String {
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

/// Which usage of LV `lv` the kernel reports: `(data, metadata)`; `None` when not active
/// here or neither a thin pool nor a thin LV.
fn usage(vg: &Vg, lv: &Lv, dm: &DmState) -> Option<(String, String)> {
    if !matches!(dm, DmState::Known(_)) || super::attr::lv_active(vg, lv, dm) != "active" {
        return None;
    }
    let names = crate::activate::dm_names::dm_layer_name;
    match &lv.segments.first()?.kind {
        SegKind::ThinPool(_) => read(&names(&vg.name, &lv.name, "tpool"), 0),
        SegKind::Thin(_) => {
            let sectors = lv.extents() * u64::from(vg.extent_size);
            read(
                &crate::activate::dm_names::dm_name(&vg.name, &lv.name),
                sectors,
            )
        }
        _ => None,
    }
}

#[cfg(feature = "dm")]
fn read(device: &str, thin_sectors: u64) -> Option<(String, String)> {
    use crate::activate::dm::Usage;
    match crate::activate::dm::thin_usage(device)? {
        Usage::Pool { data, metadata } => {
            Some((percent(data.0, data.1), percent(metadata.0, metadata.1)))
        }
        Usage::Thin { mapped } => Some((percent(mapped, thin_sectors), String::new())),
    }
}

#[cfg(not(feature = "dm"))]
fn read(_device: &str, _thin_sectors: u64) -> Option<(String, String)> {
    None
}

/// `data_percent`.
pub fn data_percent(vg: &Vg, lv: &Lv, dm: &DmState) -> String {
    usage(vg, lv, dm).map(|u| u.0).unwrap_or_default()
}

/// `metadata_percent`.
pub fn metadata_percent(vg: &Vg, lv: &Lv, dm: &DmState) -> String {
    usage(vg, lv, dm).map(|u| u.1).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_as_lvm2s() {
        assert_eq!(percent(0, 100), "0.00");
        assert_eq!(percent(1, 1_000_000), "0.01");
        assert_eq!(percent(999_999, 1_000_000), "99.99");
        assert_eq!(percent(100, 100), "100.00");
        assert_eq!(percent(1, 3), "33.33");
        assert_eq!(percent(2, 3), "66.67");
        assert_eq!(percent(5, 0), "");
    }
}
