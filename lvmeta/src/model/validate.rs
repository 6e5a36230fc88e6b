//! The invariants lvm2 checks after importing a VG (`check_pv_segments`,
//! `check_lv_segments`, parts of `vg_validate`), as pure functions over the model.
//!
//! Duplicates are found by sorting, or with a hash map whose hasher (foldhash) is seeded at
//! random per process: metadata read from disk may be hostile, and neither lets it force
//! quadratic work.

use super::{Area, Lv, ModelError, SegKind, Vg};

mod change;
pub use change::{check_change, Delta};

fn err(path: String, field: &str, why: impl Into<String>) -> ModelError {
    ModelError {
        path,
        field: field.to_owned(),
        why: why.into(),
    }
}

fn lv_path(vg: &Vg, lv: &Lv) -> String {
    format!("{}/logical_volumes/{}", vg.name, lv.name)
}

/// Every check lvm2 makes when it reads a VG; the first failure is returned.
pub fn check_read(vg: &Vg) -> Result<(), ModelError> {
    let by_name = ByName::new(vg);
    check_ids(vg, &by_name)?;
    check_lvs(vg, &by_name)?;
    check_extents(vg)
}

/// The checks lvm2's `vg_validate` adds before every write (reference 5.3) beyond
/// [`check_read`]: lock types and lock arguments, one lease per LV, thin device ids unique per
/// pool.
pub fn check_write(vg: &Vg) -> Result<(), ModelError> {
    let vg_err = |field: &str, why: String| Err(err(vg.name.clone(), field, why));
    match vg.lock_type.as_deref() {
        None | Some("none") => {
            if vg.lock_args.is_some() {
                return vg_err("lock_args", "set without a lock_type".into());
            }
            for lv in &vg.lvs {
                lease_of(vg, lv)?;
            }
        }
        Some(t @ ("sanlock" | "dlm" | "idm")) => {
            if vg.system_id.as_deref().is_some_and(|s| !s.is_empty()) {
                return vg_err("system_id", "a shared VG has no system_id".into());
            }
            match vg.lock_args.as_deref() {
                Some(a) if valid_lock_args(a) => {}
                Some(a) => return vg_err("lock_args", format!("{a:?} is not valid")),
                None if t == "sanlock" => return vg_err("lock_args", "missing".into()),
                None => {}
            }
            let mut offsets = Vec::new();
            for lv in &vg.lvs {
                if let Some(o) = lease_of(vg, lv)? {
                    offsets.push((o, &**lv));
                }
            }
            if let Some((o, lv)) = first_duplicate(&mut offsets, |(o, _)| *o) {
                return Err(err(
                    lv_path(vg, lv),
                    "lock_args",
                    format!("lease offset {o} is used twice"),
                ));
            }
        }
        Some(t) => return vg_err("lock_type", format!("unknown lock type {t:?}")),
    }
    let mut ids: Vec<(&str, u32, &Lv)> = vg
        .lvs
        .iter()
        .filter_map(|l| match &l.segments.first()?.kind {
            SegKind::Thin(t) => Some((t.thin_pool.as_str(), t.device_id, &**l)),
            _ => None,
        })
        .collect();
    // The id first: it usually decides without comparing pool names.
    if let Some((pool, id, lv)) = first_duplicate(&mut ids, |(p, i, _)| (*i, *p)) {
        return Err(err(
            lv_path(vg, lv),
            "device_id",
            format!("device_id {id} is used twice in pool {pool}"),
        ));
    }
    Ok(())
}

/// The `lock_args` of LV `lv` are what the VG's lock type wants: none without one, a
/// `<version>:<offset>` with sanlock (returns the offset), the lock type's name otherwise.
pub(super) fn lease_of(vg: &Vg, lv: &Lv) -> Result<Option<u64>, ModelError> {
    let Some(a) = lv.lock_args.as_deref() else {
        return Ok(None);
    };
    match vg.lock_type.as_deref() {
        None | Some("none") => Err(err(
            lv_path(vg, lv),
            "lock_args",
            "set in a VG without a lock_type",
        )),
        Some("sanlock") => a
            .split_once(':')
            .and_then(|(_, o)| o.parse::<u64>().ok())
            .filter(|_| valid_lock_args(a))
            .map(Some)
            .ok_or_else(|| {
                err(
                    lv_path(vg, lv),
                    "lock_args",
                    format!("{a:?} is not <version>:<offset>"),
                )
            }),
        Some(t) if a != t => Err(err(
            lv_path(vg, lv),
            "lock_args",
            format!("{a:?} must be {t:?}"),
        )),
        Some(_) => Ok(None),
    }
}

/// lvm2's lock_args charset (`A-Z a-z 0-9 . _ - + :`) with at most one colon.
fn valid_lock_args(a: &str) -> bool {
    !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_+:".contains(&b))
        && a.bytes().filter(|&b| b == b':').count() <= 1
}

/// The first value that appears twice in `items` (sorted by `key`).
fn first_duplicate<T, K: Ord>(items: &mut [T], key: impl Fn(&T) -> K) -> Option<&T> {
    items.sort_unstable_by_key(&key);
    items
        .windows(2)
        .find(|w| key(&w[0]) == key(&w[1]))
        .map(|w| &w[1])
}

fn check_ids(vg: &Vg, by_name: &ByName<'_>) -> Result<(), ModelError> {
    let mut pv_ids: Vec<_> = vg.pvs.iter().map(|p| p.id).collect();
    if let Some(id) = first_duplicate(&mut pv_ids, |i| *i) {
        return Err(err(
            vg.name.clone(),
            "physical_volumes",
            format!("duplicate PV id {id}"),
        ));
    }
    if let Some(lv) = by_name.duplicate {
        return Err(err(lv_path(vg, lv), "name", "duplicate LV name"));
    }
    // Hashing beats sorting here: LV ids are random, so a sort does its full n log n.
    let mut lv_ids = std::collections::HashSet::with_capacity_and_hasher(
        vg.lvs.len(),
        foldhash::fast::RandomState::default(),
    );
    if let Some(lv) = vg.lvs.iter().find(|l| !lv_ids.insert(&l.id)) {
        return Err(err(
            lv_path(vg, lv),
            "id",
            format!("duplicate LV id {}", lv.id),
        ));
    }
    let mut spares = 0;
    for lv in &vg.lvs {
        check_lv_names(vg, lv)?;
        if is_spare(lv) {
            spares += 1;
            if spares > 1 {
                return Err(err(
                    lv_path(vg, lv),
                    "name",
                    "a VG has at most one pool metadata spare",
                ));
            }
        }
    }
    for t in &vg.tags {
        crate::names::check_tag(t).map_err(|e| err(vg.name.clone(), "tags", e.to_string()))?;
    }
    Ok(())
}

/// An LV's name and tags are ones lvm2 accepts.
pub(super) fn check_lv_names(vg: &Vg, lv: &Lv) -> Result<(), ModelError> {
    crate::names::check_lv_name_in_vg(&vg.name, &lv.name)
        .map_err(|e| err(lv_path(vg, lv), "name", e.to_string()))?;
    for t in &lv.tags {
        crate::names::check_tag(t).map_err(|e| err(lv_path(vg, lv), "tags", e.to_string()))?;
    }
    Ok(())
}

/// A pool metadata spare (lvm2 allows one per VG).
pub fn is_spare(lv: &Lv) -> bool {
    lv.name.contains("_pmspare") && !lv.is_visible()
}

/// LVs by name (foldhash is seeded at random per process, so hostile names cannot aim at
/// collisions), and the first name seen twice.
struct ByName<'v> {
    map: std::collections::HashMap<&'v str, &'v Lv, foldhash::fast::RandomState>,
    duplicate: Option<&'v Lv>,
}

impl<'v> ByName<'v> {
    fn new(vg: &'v Vg) -> Self {
        let mut map = std::collections::HashMap::with_capacity_and_hasher(
            vg.lvs.len(),
            foldhash::fast::RandomState::default(),
        );
        let mut duplicate = None;
        for l in vg.lvs.iter().map(|l| &**l) {
            if map.insert(l.name.as_str(), l).is_some() && duplicate.is_none() {
                duplicate = Some(l);
            }
        }
        Self { map, duplicate }
    }
    fn get(&self, name: &str) -> Option<&'v Lv> {
        self.map.get(name).copied()
    }
}

fn check_lvs(vg: &Vg, by_name: &ByName<'_>) -> Result<(), ModelError> {
    for lv in &vg.lvs {
        check_lv(vg, lv, |n| by_name.get(n))?;
    }
    Ok(())
}

/// One LV's segments: they begin where the previous one ends, the kinds that take one
/// segment have one, a pool's metadata LV is named `*_tmeta`, the LVs they refer to exist
/// (`find` looks them up by name), a thin LV's pool is a pool, mirror images have the
/// mirror's size.
pub(super) fn check_lv<'v>(
    vg: &Vg,
    lv: &Lv,
    find: impl Fn(&str) -> Option<&'v Lv>,
) -> Result<(), ModelError> {
    if lv.segments.is_empty() {
        return Err(err(
            lv_path(vg, lv),
            "segment_count",
            "an LV needs at least one segment",
        ));
    }
    let mut next = 0u64;
    for (i, seg) in lv.segments.iter().enumerate() {
        if u64::from(seg.start_extent) != next {
            return Err(err(
                lv_path(vg, lv),
                &format!("segment{}", i + 1),
                format!(
                    "segment {} should begin at LE {next} (found {})",
                    i + 1,
                    seg.start_extent
                ),
            ));
        }
        next += u64::from(seg.extent_count);
        let mut unknown = None;
        seg.kind.each_lv_ref(|field, target| {
            if unknown.is_none() && (target == lv.name || find(target).is_none()) {
                unknown = Some((field, target));
            }
        });
        if let Some((field, target)) = unknown {
            return Err(err(
                lv_path(vg, lv),
                field,
                format!("refers to unknown LV {target:?}"),
            ));
        }
        if let SegKind::Mirror(m) = &seg.kind {
            for a in &m.areas {
                if let Area::Lv { lv: image, .. } = a {
                    let size = find(image).map_or(0, Lv::extents);
                    if size != u64::from(seg.area_len()) {
                        return Err(err(
                            lv_path(vg, lv),
                            "mirrors",
                            format!("image {image} has {size} extents, not {}", seg.area_len()),
                        ));
                    }
                }
            }
        }
    }
    let single = lv.segments.iter().any(|s| {
        matches!(
            s.kind,
            SegKind::Thin(_)
                | SegKind::ThinPool(_)
                | SegKind::Snapshot(_)
                | SegKind::Raid { .. }
                | SegKind::Cache(_)
                | SegKind::CachePool(_)
        )
    });
    if single && lv.segments.len() != 1 {
        return Err(err(
            lv_path(vg, lv),
            "segment_count",
            format!(
                "{} LVs have exactly one segment",
                lv.segments[0].kind.type_name()
            ),
        ));
    }
    match &lv.segments[0].kind {
        SegKind::ThinPool(p) if !p.metadata.contains("_tmeta") => {
            return Err(err(
                lv_path(vg, lv),
                "metadata",
                format!("thin-pool metadata LV {:?} must contain _tmeta", p.metadata),
            ));
        }
        SegKind::Thin(t) => {
            let pool_ok = find(&t.thin_pool)
                .is_some_and(|p| matches!(p.segments[0].kind, SegKind::ThinPool(_)));
            if !pool_ok {
                return Err(err(
                    lv_path(vg, lv),
                    "thin_pool",
                    format!("{:?} is not a thin pool", t.thin_pool),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

fn check_extents(vg: &Vg) -> Result<(), ModelError> {
    // One vector for all PVs, sized first: (PV, first PE, length, LV name), sorted.
    fn areas(lv: &Lv) -> impl Iterator<Item = (usize, u32, u32)> + '_ {
        lv.segments.iter().flat_map(|seg| {
            seg.kind.areas().iter().filter_map(move |a| match a {
                Area::Pv { pv, pe } => Some((*pv, *pe, seg.area_len())),
                Area::Lv { .. } => None,
            })
        })
    }
    let total = vg.lvs.iter().map(|lv| areas(lv).count()).sum();
    let mut used: Vec<(usize, u32, u32, &str)> = Vec::with_capacity(total);
    for lv in &vg.lvs {
        used.extend(areas(lv).map(|(pv, pe, len)| (pv, pe, len, lv.name.as_str())));
    }
    used.sort_unstable();
    for w in used.windows(2) {
        let (a, b) = (w[0], w[1]);
        if a.0 == b.0 && u64::from(a.1) + u64::from(a.2) > u64::from(b.1) {
            return Err(err(
                format!("{}/physical_volumes/pv{}", vg.name, a.0),
                "pe_count",
                format!("PE {} is used by both {} and {}", b.1, a.3, b.3),
            ));
        }
    }
    Ok(())
}
