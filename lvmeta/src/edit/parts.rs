//! The pieces every LV edit is made of: names, lookups, new LVs and their segments, tags,
//! references between LVs, and growing or cutting an LV's extents.

use std::borrow::Cow;
use std::sync::Arc;

use super::{refused, EditCtx, EditError, LvSpec, Permission};
use crate::model::extents::PeRun;
use crate::model::{Area, Lv, SegKind, Segment, Striped, Vg, Word};
use crate::uuid::Uuid;

/// Adds and removes tags, keeping order and refusing invalid ones.
pub(crate) fn apply_tags(
    tags: &mut Vec<String>,
    add: &[String],
    del: &[String],
) -> Result<(), EditError> {
    for t in add {
        crate::names::check_tag(t)?;
        if !tags.contains(t) {
            tags.push(t.clone());
        }
    }
    tags.retain(|t| !del.contains(t));
    Ok(())
}

/// The first `lvol<N>` name not in use.
pub(crate) fn next_lvol_name(vg: &Vg) -> String {
    let mut n = 0u64;
    loop {
        let name = format!("lvol{n}");
        if vg.lv(&name).is_none() {
            return name;
        }
        n += 1;
    }
}

/// The name of a new LV: the one asked for (checked against lvm2's rules, reserved names
/// allowed only for `internal` LVs) or the first free `lvol<N>`; refused if taken.
pub(crate) fn new_name(
    vg: &Vg,
    ctx: &EditCtx,
    asked: Option<&str>,
    internal: bool,
) -> Result<String, EditError> {
    let name = asked.map_or_else(|| next_lvol_name(vg), str::to_owned);
    if internal {
        crate::names::check_lv_name_in_vg(&vg.name, &name)?;
    } else {
        crate::names::check_new_lv_name(&vg.name, &name)?;
    }
    if !ctx.lacks_lv(vg, &name) && vg.lv(&name).is_some() {
        return Err(EditError::Exists {
            what: "Logical Volume",
            name,
            vg: vg.name.clone(),
        });
    }
    Ok(name)
}

pub(crate) fn lv_index(vg: &Vg, name: &str) -> Result<usize, EditError> {
    // Newest first, as `Vg::lv`.
    vg.lvs
        .iter()
        .rposition(|l| l.name == name)
        .ok_or_else(|| EditError::NoLv {
            vg: vg.name.clone(),
            lv: name.to_owned(),
        })
}

pub(crate) fn status_words(permission: Permission, visible: bool) -> Vec<Word> {
    let mut s = vec![Cow::Borrowed("READ")];
    if permission == Permission::ReadWrite {
        s.push(Cow::Borrowed("WRITE"));
    }
    if visible {
        s.push(Cow::Borrowed("VISIBLE"));
    }
    s
}

/// A new LV with no segments yet.
pub(crate) fn new_lv(name: &str, spec: &LvSpec, visible: bool) -> Lv {
    Lv {
        name: name.to_owned(),
        id: Uuid::random(),
        status: status_words(spec.permission, visible),
        flags: if spec.activation_skip {
            vec![Cow::Borrowed("ACTIVATION_SKIP")]
        } else {
            Vec::new()
        },
        tags: spec.tags.clone(),
        creation: Some((spec.stamp.time, spec.stamp.host.clone())),
        lock_args: None,
        allocation_policy: None,
        profile: None,
        read_ahead: None,
        major: None,
        minor: None,
        segments: Vec::new(),
    }
}

/// Striped segments for allocated pieces, starting at LE `start`.
pub(crate) fn segments_of(
    pieces: &[Vec<PeRun>],
    mut start: u32,
    stripe_size: Option<u32>,
) -> Vec<Segment> {
    pieces
        .iter()
        .map(|p| {
            let count = p.iter().map(|e| e.len).sum();
            let seg = Segment {
                start_extent: start,
                extent_count: count,
                reshape_count: None,
                data_copies: None,
                type_flags: Vec::new(),
                tags: Vec::new(),
                kind: SegKind::Striped(Striped {
                    stripe_size: if p.len() > 1 { stripe_size } else { None },
                    areas: p.iter().map(|e| Area::Pv { pv: e.pv, pe: e.pe }).collect(),
                }),
            };
            start += count;
            seg
        })
        .collect()
}

/// Extends `vg.lvs[index]` (linear or striped) by `extents`: contiguous to its last segment
/// where the next extents are free, then by the normal policy.
pub(crate) fn grow(
    vg: &mut Vg,
    ctx: &EditCtx,
    index: usize,
    extents: u32,
    pvs: Option<&[usize]>,
) -> Result<(), EditError> {
    let lv_name = vg.lvs[index].name.clone();
    let (stripes, stripe_size, ends) = {
        let Some(last) = vg.lvs[index].segments.last() else {
            return Err(refused(lv_name, "LV has no segments"));
        };
        let SegKind::Striped(st) = &last.kind else {
            return Err(refused(
                lv_name,
                format!("cannot extend a {} LV this way", last.kind.type_name()),
            ));
        };
        // Where each stripe's last area ends: contiguous growth starts there.
        let area_len = last.area_len();
        let ends: Option<Vec<PeRun>> = st
            .areas
            .iter()
            .map(|a| match a {
                Area::Pv { pv, pe } => Some(PeRun {
                    pv: *pv,
                    pe: pe + area_len,
                    len: 0,
                }),
                Area::Lv { .. } => None,
            })
            .collect();
        (st.areas.len() as u32, st.stripe_size, ends)
    };
    // Rounded up to the stripe boundary, as lvm2 does.
    let mut free = ctx.free_map(vg);
    let mut per_stripe = extents.div_ceil(stripes);
    if let Some(ends) = ends.filter(|e| pvs.is_none_or(|p| e.iter().all(|x| p.contains(&x.pv)))) {
        let room = ends
            .iter()
            .map(|e| free.run_at(e.pv, e.pe))
            .min()
            .unwrap_or(0)
            .min(per_stripe);
        if room > 0 {
            let piece: Vec<PeRun> = ends.iter().map(|e| PeRun { len: room, ..*e }).collect();
            free.reserve(&piece);
            if let Some(seg) = Arc::make_mut(&mut vg.lvs[index]).segments.last_mut() {
                seg.extent_count += room * stripes;
            }
            per_stripe -= room;
        }
    }
    if per_stripe > 0 {
        let pieces = free.allocate(&vg.name, &lv_name, stripes, per_stripe, pvs)?;
        let lv = Arc::make_mut(&mut vg.lvs[index]);
        let start = u32::try_from(lv.extents()).unwrap_or(u32::MAX);
        lv.segments.extend(segments_of(&pieces, start, stripe_size));
    }
    Ok(())
}

/// Cuts `vg.lvs[index]` down to `keep` extents (from the end).
pub(crate) fn shrink(vg: &mut Vg, index: usize, keep: u32) {
    let lv = Arc::make_mut(&mut vg.lvs[index]);
    lv.segments.retain(|s| s.start_extent < keep);
    if let Some(last) = lv.segments.last_mut() {
        let end = last.start_extent + last.extent_count;
        if end > keep {
            let stripes = match &last.kind {
                SegKind::Striped(s) => s.areas.len() as u32,
                _ => 1,
            };
            let cut = (end - keep) / stripes * stripes;
            last.extent_count -= cut;
        }
    }
}

/// LVs other than `name` that refer to it.
pub(crate) fn users<'v>(vg: &'v Vg, name: &str) -> Vec<&'v str> {
    vg.lvs
        .iter()
        .filter(|l| l.name != name)
        .filter(|l| {
            let mut refers = false;
            for s in &l.segments {
                s.kind.each_lv_ref(|_, t| refers |= t == name);
            }
            refers
        })
        .map(|l| l.name.as_str())
        .collect()
}

/// Renames every reference to LV `from` in the VG.
pub(crate) fn rename_refs(vg: &mut Vg, from: &str, to: &str) {
    let fix = |s: &mut String| {
        if s == from {
            *s = to.to_owned();
        }
    };
    for lv in &mut vg.lvs {
        // Only the LVs the rename touches are copied (the others stay shared).
        let mut renamed = (**lv).clone();
        if renamed.name == from {
            renamed.name = to.to_owned();
        }
        for seg in &mut renamed.segments {
            seg.kind.rename_lv(fix);
        }
        if renamed != **lv {
            *lv = Arc::new(renamed);
        }
    }
}
