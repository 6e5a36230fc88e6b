//! lvm2's `lv_attr` and what it is made of: whether LVs are active ([`DmState`]), how the
//! LVs of a VG refer to each other ([`LvUses`]); and the LV fields that follow from the
//! same facts: its path and whether it is active.

use crate::model::{Lv, SegKind, Vg};

/// Whether LVs are active, as far as this machine can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmState {
    /// No device-mapper here: state and open columns show `X`, as lvm2 does without it.
    Unknown,
    /// The device-mapper devices: dm uuid (`LVM-<vg uuid><lv uuid>[-<layer>]` for LVs) ->
    /// open count.
    Known(std::collections::HashMap<String, i32>),
}

impl DmState {
    /// Asks device-mapper; `Unknown` when the kernel has none (or lvmeta is built without
    /// its `dm` feature).
    pub fn probe() -> Self {
        #[cfg(feature = "dm")]
        if let Some(m) = crate::activate::dm::device_opens() {
            return DmState::Known(m);
        }
        DmState::Unknown
    }

    /// lvm2's state and open columns of the LV with dm uuid `uuid`:
    /// - active: a device with that uuid, or with it and a layer suffix (a pool's `_tdata`
    ///   is `<uuid>-tdata`); a thin pool only with its own device, not by its `-tpool`;
    /// - open: the device's open count, a pool's from its `-tpool` when that is up.
    pub(super) fn columns(&self, uuid: &str, pool: bool) -> (char, char) {
        let DmState::Known(devices) = self else {
            return ('X', 'X');
        };
        let mine = |u: &str| {
            u == uuid
                || (!pool
                    && u.strip_prefix(uuid)
                        .is_some_and(|rest| rest.starts_with('-')))
        };
        let Some(open) = devices
            .iter()
            .filter(|(u, _)| mine(u))
            .map(|(_, &o)| o)
            .max()
        else {
            return ('-', '-');
        };
        let open = match devices.get(&format!("{uuid}-tpool")) {
            Some(&o) if pool => o,
            _ => open,
        };
        ('a', if open > 0 { 'o' } else { '-' })
    }
}

/// How the LVs of a VG refer to each other, gathered in one pass so that per-LV fields need
/// no scan of the whole VG.
pub struct LvUses<'v> {
    /// (referenced LV, referring field), sorted.
    refs: Vec<(&'v str, &'v str)>,
    /// (COW LV, origin LV) of old-style snapshots, sorted.
    cows: Vec<(&'v str, &'v str)>,
    /// Origins of old-style snapshots, sorted.
    pub(super) origins: Vec<&'v str>,
}

impl<'v> LvUses<'v> {
    /// Indexes every reference between the LVs of `vg`.
    pub fn of(vg: &'v Vg) -> Self {
        let mut refs = Vec::new();
        let mut cows = Vec::new();
        for seg in vg.lvs.iter().flat_map(|l| &l.segments) {
            seg.kind
                .each_lv_ref(|field, target| refs.push((target, field)));
            if let SegKind::Snapshot(s) = &seg.kind {
                cows.push((s.cow.as_str(), s.origin.as_str()));
            }
        }
        let mut origins: Vec<&str> = cows.iter().map(|(_, o)| *o).collect();
        refs.sort_unstable();
        cows.sort_unstable();
        origins.sort_unstable();
        Self {
            refs,
            cows,
            origins,
        }
    }

    /// Does a segment name `lv` in `field`?
    pub(super) fn used_as(&self, lv: &str, field: &str) -> bool {
        self.refs.binary_search(&(lv, field)).is_ok()
    }

    /// The origin of the old-style snapshot whose COW LV is `lv`.
    pub(super) fn origin_of_cow(&self, lv: &str) -> Option<&'v str> {
        let i = self.cows.partition_point(|(c, _)| *c < lv);
        self.cows.get(i).filter(|(c, _)| *c == lv).map(|(_, o)| *o)
    }
}

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
