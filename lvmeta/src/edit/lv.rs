//! LV edits: create (linear, striped), remove, resize, rename, change.

use std::borrow::Cow;
use std::sync::Arc;

use super::add::create_in;
use super::parts::{apply_tags, status_words, users};
use super::parts::{grow, lv_index, new_lv, new_name, rename_refs, segments_of, shrink};
use super::slots::assign_lease;
use super::{check, refused, EditCtx, EditError};
use crate::model::extents::PeRun;
use crate::model::{SegKind, Vg, Word};

pub use super::spec::{LvChange, LvSpec, Permission, DEFAULT_STRIPE_SIZE};

/// `lvcreate` of a linear or striped LV. Returns the changed VG and the new LV's name.
pub fn create(vg: Vg, ctx: &EditCtx, spec: &LvSpec) -> Result<(Vg, String), EditError> {
    let mut out = vg;
    let i = create_in(&mut out, ctx, spec)?;
    let name = out.lvs[i].name.clone();
    check(&out, ctx)?;
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
        assign_lease(&mut out, ctx, index, ctx.lease_align(), avoid_leases, 0)?;
    }
    check(&out, ctx)?;
    Ok((out, name))
}

/// Refuses when LV `name` no longer has `extents` extents. A size worked out from a read
/// made before the VG's lease (`+SIZE`, `-SIZE`, the grow/shrink checks) is stale once
/// another host has resized the LV under the lease since.
pub fn expect_size(vg: &Vg, name: &str, extents: u32) -> Result<(), EditError> {
    let now = vg.lvs[lv_index(vg, name)?].extents();
    if now == u64::from(extents) {
        return Ok(());
    }
    Err(refused(
        format!("{}/{name}", vg.name),
        format!(
            "its size changed from {extents} to {now} extents while this command ran \
             (another host resized it); run the command again"
        ),
    ))
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
    check(&out, ctx)?;
    Ok(out)
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
    check(&out, ctx)?;
    Ok(out)
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
    check(&out, ctx)?;
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
    check(&out, ctx)?;
    Ok(out)
}
