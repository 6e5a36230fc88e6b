//! Adding an LV: its extents allocated by lvm2's policy, then (shared VG) a lease slot.

use std::sync::Arc;

use super::parts::{new_lv, new_name, segments_of};
use super::slots::{assign_lease, SPARE_LEASE_SLOTS};
use super::spec::DEFAULT_STRIPE_SIZE;
use super::{EditCtx, EditError, LvSpec};
use crate::model::Vg;

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

/// Adds an LV to `vg` (no validation: the callers check).
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
        assign_lease(vg, ctx, index, ctx.lease_align(), &[], SPARE_LEASE_SLOTS)?;
    }
    Ok(index)
}
