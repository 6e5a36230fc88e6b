//! lvm2's `lv_attr` and what it is made of: whether LVs are active ([`DmState`]), how the
//! LVs of a VG refer to each other ([`LvUses`]); and the LV field that follows from the
//! same facts: its path.

use super::kernel::DmState;
use crate::model::{Lv, SegKind, Vg};

/// How the LVs of a VG refer to each other, gathered in one pass so that per-LV fields need
/// no scan of the whole VG.
pub struct LvUses<'v> {
    /// (referenced LV, referring field, referring segment's type), sorted.
    refs: Vec<(&'v str, &'v str, &'v str)>,
    /// (COW LV, origin LV) of old-style snapshots, sorted.
    cows: Vec<(&'v str, &'v str)>,
    /// Origins of old-style snapshots, sorted.
    pub(super) origins: Vec<&'v str>,
    /// Image LVs of raid segments, sorted: (image, its raid LV, its index there).
    raid_images: Vec<(&'v str, &'v str, usize)>,
    /// Metadata LVs of raid segments, sorted.
    raid_metas: Vec<&'v str>,
}

impl<'v> LvUses<'v> {
    /// Indexes every reference between the LVs of `vg`.
    pub fn of(vg: &'v Vg) -> Self {
        let mut refs = Vec::new();
        let mut cows = Vec::new();
        let mut raid_images = Vec::new();
        let mut raid_metas = Vec::new();
        for (lv, seg) in vg
            .lvs
            .iter()
            .flat_map(|l| l.segments.iter().map(move |s| (l.name.as_str(), s)))
        {
            let ty = seg.kind.type_name();
            seg.kind
                .each_lv_ref(|field, target| refs.push((target, field, ty)));
            if let SegKind::Snapshot(s) = &seg.kind {
                cows.push((s.cow.as_str(), s.origin.as_str()));
            }
            raid_images.extend(seg.kind.raid_images().enumerate().map(|(i, m)| (m, lv, i)));
            raid_metas.extend(seg.kind.raid_metas());
        }
        let mut origins: Vec<&str> = cows.iter().map(|(_, o)| *o).collect();
        refs.sort_unstable();
        cows.sort_unstable();
        origins.sort_unstable();
        raid_images.sort_unstable();
        raid_metas.sort_unstable();
        Self {
            refs,
            cows,
            origins,
            raid_images,
            raid_metas,
        }
    }

    /// The types of the segments that name `lv` in `field`.
    fn users<'a>(&'a self, lv: &'a str, field: &'a str) -> impl Iterator<Item = &'v str> + 'a {
        let i = self
            .refs
            .partition_point(|(l, f, _)| (*l, *f) < (lv, field));
        self.refs[i..]
            .iter()
            .take_while(move |(l, f, _)| *l == lv && *f == field)
            .map(|(_, _, t)| *t)
    }

    /// Does a segment name `lv` in `field`?
    pub(super) fn used_as(&self, lv: &str, field: &str) -> bool {
        self.users(lv, field).next().is_some()
    }

    /// Does a segment of type `segtype` name `lv` in `field`?
    pub(super) fn used_as_by(&self, lv: &str, field: &str, segtype: &str) -> bool {
        self.users(lv, field).any(|t| t == segtype)
    }

    /// The origin of the old-style snapshot whose COW LV is `lv`.
    pub(super) fn origin_of_cow(&self, lv: &str) -> Option<&'v str> {
        let i = self.cows.partition_point(|(c, _)| *c < lv);
        self.cows.get(i).filter(|(c, _)| *c == lv).map(|(_, o)| *o)
    }

    /// Is `lv` an image of a raid LV?
    pub(super) fn is_raid_image(&self, lv: &str) -> bool {
        self.raid_image(lv).is_some()
    }

    /// The raid LV that uses image `lv`, and the image's index in it.
    pub(super) fn raid_image(&self, lv: &str) -> Option<(&'v str, usize)> {
        let i = self
            .raid_images
            .binary_search_by(|(m, _, _)| (*m).cmp(lv))
            .ok()?;
        let (_, raid, index) = self.raid_images[i];
        Some((raid, index))
    }

    /// Is `lv` a metadata LV of a raid LV?
    pub(super) fn is_raid_meta(&self, lv: &str) -> bool {
        self.raid_metas.binary_search(&lv).is_ok()
    }

    /// The origin LV of a cache or writecache LV (`<lv>_corig`, `<lv>_wcorig`).
    fn is_cache_origin(&self, lv: &str) -> bool {
        self.used_as_by(lv, "origin", "cache") || self.used_as_by(lv, "origin", "writecache")
    }

    /// A cache volume (`--cachevol`): the fast LV of a cache or writecache LV.
    fn is_cache_vol(&self, lv: &Lv) -> bool {
        lv.has_flag("CACHE_VOL")
            || self.used_as_by(&lv.name, "writecache", "writecache")
            || (self.used_as_by(&lv.name, "cache_pool", "cache")
                && !matches!(
                    lv.segments.first().map(|s| &s.kind),
                    Some(SegKind::CachePool(_))
                ))
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

/// Whether raid image `image` is in sync: its raid LV's status marks it `A` (lvm2's
/// `lv_raid_image_in_sync`); not when the status cannot be read.
fn image_in_sync(vg: &Vg, uses: &LvUses<'_>, image: &str, dm: &DmState) -> bool {
    let Some((raid, index)) = uses.raid_image(image) else {
        return false;
    };
    vg.lv(raid)
        .and_then(|lv| super::kernel::raid_in_sync(vg, lv, dm))
        .is_some_and(|bits| index < 64 && bits & (1 << index) != 0)
}

/// lvm2's 10-character `lv_attr`. The state, open and health columns are those of an LV
/// that is not active when device-mapper knows nothing of it (lvmeta reads no kernel status).
pub fn lv_attr(lv: &Lv, uses: &LvUses<'_>, vg: &Vg, dm: &DmState) -> String {
    let Some(kind) = lv.segments.first().map(|s| &s.kind) else {
        return String::new();
    };
    let name = lv.name.as_str();
    let used_as = |field: &str| uses.used_as(name, field);
    let used_as_by = |field: &str, segtype: &str| uses.used_as_by(name, field, segtype);
    let is_origin = uses.origins.binary_search(&name).is_ok();
    let is_cow = uses.origin_of_cow(name).is_some();
    let hidden = !lv.is_visible();
    let raid_image = uses.is_raid_image(name);
    let raid_meta = uses.is_raid_meta(name) || name.contains("_rmeta_");
    let cache_origin = uses.is_cache_origin(name);
    let cache_vol = uses.is_cache_vol(lv);
    let raid_type = matches!(kind, SegKind::Raid { .. }) || raid_image || raid_meta;
    let uuid = crate::activate::runs::dm_uuid(vg, lv);
    let (c4, c5) = dm.columns(&uuid, matches!(kind, SegKind::ThinPool(_)));
    let not_synced = lv.status.iter().any(|s| s == "NOTSYNCED");
    let c0 = match kind {
        SegKind::Mirror(m) if m.extents_moved.is_some() => 'p',
        _ if lv.status.iter().any(|s| s == "CONVERTING") => 'c',
        _ if is_origin => 'o',
        _ if used_as_by("metadata", "thin-pool")
            || used_as_by("metadata", "cache-pool")
            || used_as("meta_dev")
            || (hidden && name.contains("_pmspare"))
            || raid_meta =>
        {
            'e'
        }
        SegKind::Cache(_) | SegKind::CachePool(_) | SegKind::Writecache(_) => 'C',
        _ if used_as_by("data", "cache-pool") || cache_vol => 'C',
        SegKind::Raid { .. } if not_synced => 'R',
        SegKind::Raid { .. } => 'r',
        SegKind::Mirror(_) if not_synced => 'M',
        SegKind::Mirror(_) => 'm',
        SegKind::Thin(_) => 'V',
        SegKind::VdoPool(_) => 'd',
        _ if used_as_by("data", "vdo-pool") => 'D',
        SegKind::Error | SegKind::Zero => 'v',
        SegKind::ThinPool(_) => 't',
        _ if used_as("pool") => 'T',
        _ if name.contains("_mimage_") => 'i',
        SegKind::Integrity(_) => 'g',
        // In sync, as the raid LV's kernel status says of this image, for active images.
        _ if raid_image
            && hidden
            && matches!(c4, 'a' | 's')
            && image_in_sync(vg, uses, name, dm) =>
        {
            'i'
        }
        _ if raid_image => 'I',
        _ if used_as("mirror_log") => 'l',
        _ if is_cow => 's',
        _ if cache_origin => 'o',
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
    let c6 = match kind {
        SegKind::Thin(_) | SegKind::ThinPool(_) => 't',
        SegKind::Cache(_) | SegKind::CachePool(_) | SegKind::Writecache(_) => 'C',
        _ if cache_origin || cache_vol => 'C',
        _ if raid_type => 'r',
        SegKind::Mirror(_) => 'm',
        SegKind::Snapshot(_) => 's',
        _ if is_origin || is_cow => 's',
        SegKind::Vdo(_) | SegKind::VdoPool(_) => 'V',
        SegKind::Unknown(_) => 'u',
        SegKind::Error | SegKind::Zero => 'v',
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
    // Health: unknown (`X`) for raid LVs and their sub-LVs without device-mapper; nothing to
    // report for LVs that are not active.
    let c8 = if raid_type && matches!(dm, DmState::Unknown) {
        'X'
    } else {
        '-'
    };
    let c9 = if lv.has_flag("ACTIVATION_SKIP") {
        'k'
    } else {
        '-'
    };
    [c0, c1, c2, c3, c4, c5, c6, c7, c8, c9].iter().collect()
}
