//! lvm2's `lv_attr` and the LV fields that follow from the same facts: its path and
//! whether it is active.

use super::fields::{DmState, LvUses};
use crate::model::{Lv, SegKind, Vg};

/// `/dev/VG/LV` for an LV that has a usable device of its own (visible, not a pool).
pub(super) fn lv_path(vg: &Vg, lv: &Lv) -> String {
    let pool = matches!(
        lv.segments.first().map(|s| &s.kind),
        Some(SegKind::ThinPool(_) | SegKind::CachePool(_) | SegKind::VdoPool(_))
    );
    match lv.is_visible() && !pool {
        true => format!("/dev/{}/{}", vg.name, lv.name),
        false => String::new(),
    }
}

/// `active`, empty, or `unknown` where device-mapper cannot be asked (lvm2's words).
pub(super) fn lv_active(vg: &Vg, lv: &Lv, dm: &DmState) -> &'static str {
    if matches!(dm, DmState::Unknown) {
        return "unknown";
    }
    let uuid = crate::activate::runs::dm_uuid(vg, lv);
    let pool = matches!(
        lv.segments.first().map(|s| &s.kind),
        Some(SegKind::ThinPool(_))
    );
    match dm.columns(&uuid, pool).0 {
        'a' => "active",
        _ => "",
    }
}

/// lvm2's 10-character `lv_attr`.
pub fn lv_attr(lv: &Lv, uses: &LvUses<'_>, vg: &Vg, dm: &DmState) -> String {
    let kind = &lv.segments[0].kind;
    let used_as = |field: &str| uses.used_as(&lv.name, field);
    let is_origin = uses.origins.binary_search(&lv.name.as_str()).is_ok();
    let is_cow = uses.origin_of_cow(&lv.name).is_some();
    let hidden = !lv.is_visible();
    let c0 = match kind {
        SegKind::ThinPool(_) => 't',
        SegKind::Thin(_) => 'V',
        SegKind::Raid { .. } => 'r',
        SegKind::Mirror(m) if m.extents_moved.is_some() => 'p',
        SegKind::Mirror(_) => 'm',
        SegKind::Cache(_) | SegKind::Writecache(_) => 'C',
        SegKind::VdoPool(_) => 'd',
        SegKind::Error | SegKind::Zero => 'v',
        _ if is_origin => 'o',
        _ if is_cow => 's',
        _ if used_as("pool") => 'T',
        _ if used_as("metadata")
            || (hidden && lv.name.contains("_pmspare"))
            || lv.name.contains("_rmeta_") =>
        {
            'e'
        }
        _ if used_as("raids") || used_as("raid0_lvs") || lv.name.contains("_mimage_") => 'i',
        _ if used_as("mirror_log") => 'l',
        _ if used_as("data") && lv.name.contains("_vdata") => 'D',
        _ => '-',
    };
    let c1 = if lv.is_writable() { 'w' } else { 'r' };
    let c2 = match lv.allocation_policy.as_deref() {
        Some("contiguous") => 'c',
        Some("cling") => 'l',
        Some("anywhere") => 'a',
        Some("normal") => 'n',
        _ => 'i',
    };
    let c3 = if lv.status.iter().any(|s| s == "FIXED_MINOR") {
        'm'
    } else {
        '-'
    };
    let uuid = crate::activate::runs::dm_uuid(vg, lv);
    let (c4, c5) = dm.columns(&uuid, matches!(kind, SegKind::ThinPool(_)));
    let c6 = match kind {
        SegKind::Thin(_) | SegKind::ThinPool(_) => 't',
        SegKind::Mirror(_) => 'm',
        SegKind::Raid { .. } => 'r',
        SegKind::Snapshot(_) => 's',
        SegKind::Cache(_) | SegKind::CachePool(_) | SegKind::Writecache(_) => 'C',
        SegKind::Vdo(_) | SegKind::VdoPool(_) => 'V',
        SegKind::Error | SegKind::Zero => 'v',
        SegKind::Unknown(_) => 'u',
        _ if is_origin || is_cow => 's',
        _ => '-',
    };
    // Zeroing: a pool's setting, shown on the pool and on its thin LVs.
    let zeroing_pool = |name: &str| {
        vg.lv(name).is_some_and(|p| {
            matches!(p.segments.first().map(|s| &s.kind), Some(SegKind::ThinPool(tp)) if tp.zero_new_blocks)
        })
    };
    let c7 = match kind {
        SegKind::ThinPool(p) if p.zero_new_blocks => 'z',
        SegKind::Thin(t) if zeroing_pool(&t.thin_pool) => 'z',
        _ => '-',
    };
    let c8 = '-';
    let c9 = if lv.has_flag("ACTIVATION_SKIP") {
        'k'
    } else {
        '-'
    };
    [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9].iter().collect()
}
