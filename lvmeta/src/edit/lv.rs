//! LV edits: create (linear, striped), remove, resize, rename, change.

use std::borrow::Cow;
use std::sync::Arc;

use super::slots::{assign_lease, SPARE_LEASE_SLOTS};
use super::{finish, refused, EditCtx, EditError, Stamp};
use crate::model::extents::PeRun;
use crate::model::{Area, Lv, SegKind, Segment, Striped, Vg, Word};
use crate::uuid::Uuid;

/// lvm2's default stripe size: 64 KiB, in sectors.
pub const DEFAULT_STRIPE_SIZE: u32 = 128;

/// `-p r|rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Permission {
    /// Read and write.
    #[default]
    ReadWrite,
    /// Read only.
    ReadOnly,
}

/// What `lvcreate` (linear or striped) was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvSpec {
    /// `-n`; `lvol<N>` when absent.
    pub name: Option<String>,
    /// Size in extents (a multiple of `stripes`).
    pub extents: u32,
    /// `-i` (1: linear).
    pub stripes: u32,
    /// `-I` in sectors (default 64 KiB when striped).
    pub stripe_size: Option<u32>,
    /// PVs (indices in the VG) allocation may use; all when `None`.
    pub pvs: Option<Vec<usize>>,
    /// `--addtag`.
    pub tags: Vec<String>,
    /// `-p`.
    pub permission: Permission,
    /// `--setactivationskip y`.
    pub activation_skip: bool,
    /// Creation time and host.
    pub stamp: Stamp,
    /// Byte alignment of sanlock leases in `lvmlock` (1 MiB; 8 MiB on 4K-sector devices).
    pub lease_align: u64,
    /// An LV lvm2 makes itself (sub-LVs, `lvmlock`): reserved names allowed, no lease.
    pub internal: bool,
}

impl LvSpec {
    /// A linear LV of `extents` extents.
    pub fn linear(name: &str, extents: u32, stamp: Stamp) -> Self {
        Self {
            name: Some(name.to_owned()),
            extents,
            stripes: 1,
            stripe_size: None,
            pvs: None,
            tags: Vec::new(),
            permission: Permission::ReadWrite,
            activation_skip: false,
            stamp,
            lease_align: super::slots::LEASE_ALIGN,
            internal: false,
        }
    }
}

/// What `lvchange` was asked for (each field: change it when set).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LvChange {
    /// `--addtag`.
    pub add_tags: Vec<String>,
    /// `--deltag`.
    pub del_tags: Vec<String>,
    /// `-p`.
    pub permission: Option<Permission>,
    /// `--setactivationskip`.
    pub activation_skip: Option<bool>,
}

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

fn check_stripes(vg: &Vg, spec: &LvSpec) -> Result<Option<u32>, EditError> {
    if spec.stripes == 0 {
        return Err(EditError::Option {
            option: "-i",
            why: "the number of stripes must be at least 1".into(),
        });
    }
    if spec.extents == 0 || !spec.extents.is_multiple_of(spec.stripes) {
        return Err(EditError::Option {
            option: "-L/-l",
            why: format!(
                "{} extents is not a positive multiple of {} stripes",
                spec.extents, spec.stripes
            ),
        });
    }
    if spec.stripes == 1 {
        return Ok(None);
    }
    let size = spec.stripe_size.unwrap_or(DEFAULT_STRIPE_SIZE);
    if !size.is_power_of_two() || size < 8 || size > vg.extent_size {
        return Err(EditError::Option {
            option: "-I",
            why: format!(
                "stripe size {} KiB must be a power of 2 between 4 KiB and the extent size",
                size / 2
            ),
        });
    }
    Ok(Some(size))
}

/// Adds an LV to `vg` (no seqno change, no validation: the callers finish).
pub(crate) fn create_in(vg: &mut Vg, ctx: &EditCtx, spec: &LvSpec) -> Result<usize, EditError> {
    let name = new_name(vg, ctx, spec.name.as_deref(), spec.internal)?;
    for t in &spec.tags {
        crate::names::check_tag(t)?;
    }
    let stripe_size = check_stripes(vg, spec)?;
    let pieces = ctx.free_map(vg).allocate(
        &vg.name,
        &name,
        spec.stripes,
        spec.extents / spec.stripes,
        spec.pvs.as_deref(),
    )?;
    let mut lv = new_lv(&name, spec, true);
    lv.segments = segments_of(&pieces, 0, stripe_size);
    vg.lvs.push(Arc::new(lv));
    let index = vg.lvs.len() - 1;
    if vg.is_shared() && !spec.internal {
        assign_lease(vg, ctx, index, spec.lease_align, &[], SPARE_LEASE_SLOTS)?;
    }
    Ok(index)
}

/// `lvcreate` of a linear or striped LV. Returns the changed VG and the new LV's name.
pub fn create(vg: Vg, ctx: &EditCtx, spec: &LvSpec) -> Result<(Vg, String), EditError> {
    let mut out = vg;
    let i = create_in(&mut out, ctx, spec)?;
    let name = out.lvs[i].name.clone();
    finish(&mut out, ctx)?;
    Ok((out, name))
}

/// A new linear LV `spec.name` made of exactly `pieces` (free extents of `vg`), in that
/// order: what holds the extents a change freed until their data are erased. `spec.extents`,
/// `stripes` and `pvs` are not used. In a shared VG its lease takes no slot in
/// `avoid_leases` (those the same change freed: they are marked unused after the commit).
/// Returns the changed VG and the LV's name.
pub fn hold(
    vg: Vg,
    ctx: &EditCtx,
    pieces: &[PeRun],
    spec: &LvSpec,
    avoid_leases: &[u64],
) -> Result<(Vg, String), EditError> {
    let mut out = vg;
    let name = new_name(&out, ctx, spec.name.as_deref(), spec.internal)?;
    for t in &spec.tags {
        crate::names::check_tag(t)?;
    }
    if pieces.is_empty() {
        return Err(refused(name, "no extents to hold"));
    }
    let mut used = ctx.used(&out);
    for e in pieces {
        let on_pv = out
            .pvs
            .get(e.pv)
            .is_some_and(|p| u64::from(e.pe) + u64::from(e.len) <= u64::from(p.pe_count));
        if e.len == 0 || !on_pv || !used.take_free(*e) {
            return Err(refused(
                name,
                format!(
                    "extents {}..{} of PV #{} are not free",
                    e.pe,
                    u64::from(e.pe) + u64::from(e.len),
                    e.pv
                ),
            ));
        }
    }
    let linear: Vec<Vec<PeRun>> = pieces.iter().map(|e| vec![*e]).collect();
    let mut lv = new_lv(&name, spec, true);
    lv.segments = segments_of(&linear, 0, None);
    out.lvs.push(Arc::new(lv));
    let index = out.lvs.len() - 1;
    if out.is_shared() && !spec.internal {
        assign_lease(&mut out, ctx, index, spec.lease_align, avoid_leases, 0)?;
    }
    finish(&mut out, ctx)?;
    Ok((out, name))
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

/// `lvextend`/`lvreduce`/`lvresize` to `extents` extents. Shrinking needs `force` (data
/// beyond the new end is lost); thin LVs only change their virtual size.
pub fn resize(
    vg: Vg,
    ctx: &EditCtx,
    name: &str,
    extents: u32,
    pvs: Option<&[usize]>,
    force: bool,
) -> Result<Vg, EditError> {
    let mut out = vg;
    let i = lv_index(&out, name)?;
    let current = u32::try_from(out.lvs[i].extents()).unwrap_or(u32::MAX);
    if extents == current {
        return Err(refused(
            format!("{}/{name}", out.name),
            format!("New size ({extents} extents) matches existing size ({current} extents)."),
        ));
    }
    if extents == 0 {
        return Err(EditError::Option {
            option: "-L/-l",
            why: "size must be positive".into(),
        });
    }
    if extents < current && !force {
        return Err(refused(
            format!("{}/{name}", out.name),
            format!("shrinking from {current} to {extents} extents loses data; use -f to force"),
        ));
    }
    match out.lvs[i].segments.first().map(|s| &s.kind) {
        Some(SegKind::Thin(_)) => {
            Arc::make_mut(&mut out.lvs[i]).segments[0].extent_count = extents;
        }
        Some(SegKind::ThinPool(_)) => super::thin::resize_pool(&mut out, ctx, i, extents, pvs)?,
        Some(SegKind::Striped(_)) if extents > current => {
            grow(&mut out, ctx, i, extents - current, pvs)?
        }
        Some(SegKind::Striped(_)) => shrink(&mut out, i, extents),
        _ => {
            return Err(refused(
                format!("{}/{name}", out.name),
                "lvmeta resizes linear, striped, thin and thin-pool LVs",
            ))
        }
    }
    finish(&mut out, ctx)?;
    Ok(out)
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

/// `lvremove` of one LV (with `force`, a thin pool takes its thin LVs along).
pub fn remove(vg: Vg, ctx: &EditCtx, name: &str, force: bool) -> Result<Vg, EditError> {
    let mut out = vg;
    let i = lv_index(&out, name)?;
    let lv = &out.lvs[i];
    if !lv.is_visible() {
        return Err(refused(
            format!("{}/{name}", out.name),
            "Can't remove hidden or internal logical volume",
        ));
    }
    match lv.segments.first().map(|s| &s.kind) {
        Some(SegKind::ThinPool(_)) => super::thin::remove_pool(&mut out, name, force)?,
        Some(SegKind::Thin(_)) => super::thin::remove_thin(&mut out, name)?,
        _ => {
            let by = users(&out, name);
            if !by.is_empty() {
                return Err(refused(
                    format!("{}/{name}", out.name),
                    format!("in use by {}", by.join(", ")),
                ));
            }
            out.lvs.remove(i);
        }
    }
    finish(&mut out, ctx)?;
    Ok(out)
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

/// `lvrename` (a thin pool's `_tdata`/`_tmeta` follow it).
pub fn rename(vg: Vg, ctx: &EditCtx, from: &str, to: &str) -> Result<Vg, EditError> {
    let mut out = vg;
    let i = lv_index(&out, from)?;
    if !out.lvs[i].is_visible() {
        return Err(refused(
            format!("{}/{from}", out.name),
            "Cannot rename internal LV",
        ));
    }
    crate::names::check_new_lv_name(&out.name, to)?;
    if out.lv(to).is_some() {
        return Err(EditError::Exists {
            what: "Logical Volume",
            name: to.to_owned(),
            vg: out.name.clone(),
        });
    }
    let subs: Vec<(String, String)> = match &out.lvs[i].segments[0].kind {
        SegKind::ThinPool(p) => [&p.pool, &p.metadata]
            .iter()
            .map(|s| ((*s).clone(), s.replacen(from, to, 1)))
            .collect(),
        _ => Vec::new(),
    };
    rename_refs(&mut out, from, to);
    for (a, b) in subs {
        if out.lv(&b).is_some() {
            return Err(EditError::Exists {
                what: "Logical Volume",
                name: b,
                vg: out.name.clone(),
            });
        }
        rename_refs(&mut out, &a, &b);
    }
    finish(&mut out, ctx)?;
    Ok(out)
}

/// `lvchange --addtag/--deltag/-p/--setactivationskip`.
pub fn change(vg: Vg, ctx: &EditCtx, name: &str, c: &LvChange) -> Result<Vg, EditError> {
    let mut out = vg;
    let i = lv_index(&out, name)?;
    let lv = Arc::make_mut(&mut out.lvs[i]);
    apply_tags(&mut lv.tags, &c.add_tags, &c.del_tags)?;
    if let Some(p) = c.permission {
        let visible = lv.is_visible();
        let rest: Vec<Word> = lv
            .status
            .iter()
            .filter(|s| !matches!(s.as_ref(), "READ" | "WRITE" | "VISIBLE"))
            .cloned()
            .collect();
        lv.status = status_words(p, visible);
        lv.status.extend(rest);
    }
    if let Some(skip) = c.activation_skip {
        lv.flags.retain(|f| f != "ACTIVATION_SKIP");
        if skip {
            lv.flags.push(Cow::Borrowed("ACTIVATION_SKIP"));
        }
    }
    finish(&mut out, ctx)?;
    Ok(out)
}
