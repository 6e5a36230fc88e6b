//! The invariants lvm2 checks after importing a VG (`check_pv_segments`,
//! `check_lv_segments`, parts of `vg_validate`), as pure functions over the model.

use std::collections::{HashMap, HashSet};

use super::{Area, ModelError, SegKind, Vg};

fn err(path: String, field: &str, why: impl Into<String>) -> ModelError {
    ModelError {
        path,
        field: field.to_owned(),
        why: why.into(),
    }
}

/// Every check lvm2 makes when it reads a VG; the first failure is returned.
pub fn check_read(vg: &Vg) -> Result<(), ModelError> {
    check_ids(vg)?;
    check_lvs(vg)?;
    check_extents(vg)
}

fn check_ids(vg: &Vg) -> Result<(), ModelError> {
    let mut pv_ids = HashSet::new();
    for pv in &vg.pvs {
        if !pv_ids.insert(pv.id) {
            return Err(err(
                vg.name.clone(),
                "physical_volumes",
                format!("duplicate PV id {}", pv.id),
            ));
        }
    }
    let mut lv_ids = HashSet::new();
    let mut spares = 0;
    for lv in &vg.lvs {
        let path = format!("{}/logical_volumes/{}", vg.name, lv.name);
        crate::names::check_lv_name_in_vg(&vg.name, &lv.name)
            .map_err(|e| err(path.clone(), "name", e.to_string()))?;
        if !lv_ids.insert(lv.id) {
            return Err(err(path, "id", format!("duplicate LV id {}", lv.id)));
        }
        if !lv.is_visible() && lv.name.contains("_pmspare") {
            spares += 1;
            if spares > 1 {
                return Err(err(
                    path,
                    "name",
                    "a VG has at most one pool metadata spare",
                ));
            }
        }
        for t in &lv.tags {
            crate::names::check_tag(t).map_err(|e| err(path.clone(), "tags", e.to_string()))?;
        }
    }
    for t in &vg.tags {
        crate::names::check_tag(t).map_err(|e| err(vg.name.clone(), "tags", e.to_string()))?;
    }
    Ok(())
}

fn check_lvs(vg: &Vg) -> Result<(), ModelError> {
    let by_name: HashMap<&str, &super::Lv> = vg.lvs.iter().map(|l| (l.name.as_str(), l)).collect();
    for lv in &vg.lvs {
        let path = format!("{}/logical_volumes/{}", vg.name, lv.name);
        if lv.segments.is_empty() {
            return Err(err(
                path,
                "segment_count",
                "an LV needs at least one segment",
            ));
        }
        let mut next = 0u64;
        for (i, seg) in lv.segments.iter().enumerate() {
            if u64::from(seg.start_extent) != next {
                return Err(err(
                    path,
                    &format!("segment{}", i + 1),
                    format!(
                        "segment {} should begin at LE {next} (found {})",
                        i + 1,
                        seg.start_extent
                    ),
                ));
            }
            next += u64::from(seg.extent_count);
            for (field, target) in seg.kind.lv_refs() {
                if target == lv.name || !by_name.contains_key(target) {
                    return Err(err(path, field, format!("refers to unknown LV {target:?}")));
                }
            }
            if let SegKind::Mirror(m) = &seg.kind {
                for a in &m.areas {
                    if let Area::Lv { lv: image, .. } = a {
                        let size = by_name.get(image.as_str()).map_or(0, |l| l.extents());
                        if size != u64::from(seg.area_len()) {
                            return Err(err(
                                path,
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
                path,
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
                    path,
                    "metadata",
                    format!("thin-pool metadata LV {:?} must contain _tmeta", p.metadata),
                ));
            }
            SegKind::Thin(t) => {
                let pool_ok = by_name
                    .get(t.thin_pool.as_str())
                    .is_some_and(|p| matches!(p.segments[0].kind, SegKind::ThinPool(_)));
                if !pool_ok {
                    return Err(err(
                        path,
                        "thin_pool",
                        format!("{:?} is not a thin pool", t.thin_pool),
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_extents(vg: &Vg) -> Result<(), ModelError> {
    let mut used: Vec<Vec<(u32, u32, &str)>> = vec![Vec::new(); vg.pvs.len()];
    for lv in &vg.lvs {
        for seg in &lv.segments {
            for a in seg.kind.areas() {
                if let Area::Pv { pv, pe } = a {
                    used[*pv].push((*pe, seg.area_len(), &lv.name));
                }
            }
        }
    }
    for (i, ranges) in used.iter_mut().enumerate() {
        ranges.sort_unstable();
        for w in ranges.windows(2) {
            let (a, b) = (w[0], w[1]);
            if u64::from(a.0) + u64::from(a.1) > u64::from(b.0) {
                return Err(err(
                    format!("{}/physical_volumes/pv{i}", vg.name),
                    "pe_count",
                    format!("PE {} is used by both {} and {}", b.0, a.2, b.2),
                ));
            }
        }
    }
    Ok(())
}
