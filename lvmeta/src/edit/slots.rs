//! LV lease slots in a shared VG's `lvmlock` LV, as lvmlockd lays them out: one per LV that
//! lvmlockd gives a lease (`lock_args = "1.0.0:<offset>"`), the first free one taken, freed
//! ones reused, `lvmlock` grown by 256 MiB when short.
//!
//! Invariants:
//! - no two LVs hold the same slot, nor a slot an earlier change of the same group freed
//!   (its old lease is on disk until the commit lands);
//! - a creation leaves [`SPARE_LEASE_SLOTS`] free, so a removal that holds its extents for
//!   erasure ([`super::lv::hold`]) finds a slot without growing `lvmlock`.

use std::sync::Arc;

use super::parts::{grow, lv_index};
use super::{refused, EditCtx, EditError};
use crate::lease::layout::FIRST_LV_SLOT;
pub use crate::lease::layout::LEASE_ALIGN;
use crate::model::Vg;
use crate::units::Bytes;
/// What lvm2 adds to a full `lvmlock` LV (`global/sanlock_lv_extend`), in bytes.
const LOCK_LV_EXTEND: Bytes = Bytes(256 << 20);
/// Lease slots a created LV leaves free in `lvmlock` (growing it when fewer would be):
/// - a removal that holds the extents it frees ([`super::lv::hold`]) takes a slot other
///   than the one it frees, so in a VG too full for `lvmlock` to grow it needs a spare one;
/// - one per removal in a group commit: a removal beyond them fails alone (no space) and
///   goes through when retried after the commit.
pub const SPARE_LEASE_SLOTS: usize = 8;

/// The lease offsets LVs of the VG hold, sorted.
pub fn leases_in_use(vg: &Vg) -> Vec<u64> {
    let mut used: Vec<u64> = vg
        .lvs
        .iter()
        .filter_map(|l| crate::lease::layout::lease_offset(l.lock_args.as_deref()?))
        .collect();
    used.sort_unstable();
    used
}

/// The free slots (byte offsets, in order) of `lvmlock` (`vg.lvs[lock_lv]`) at alignment
/// `align`, given the sorted `used` ones.
fn free_slots<'a>(
    vg: &Vg,
    lock_lv: usize,
    align: u64,
    used: &'a [u64],
) -> impl Iterator<Item = u64> + 'a {
    let size = vg.bytes_of(vg.lvs[lock_lv].extents()).0;
    (FIRST_LV_SLOT..)
        .map(move |k| k * align)
        .take_while(move |o| o + align <= size)
        .filter(move |o| used.binary_search(o).is_err())
}

/// The first of the `free` slots, when `spare` more follow it.
fn first_with_spare(mut free: impl Iterator<Item = u64>, spare: usize) -> Option<u64> {
    let first = free.next()?;
    (free.take(spare).count() == spare).then_some(first)
}

/// Extents of one growth of `lvmlock` in `vg`.
fn growth(vg: &Vg) -> u32 {
    LOCK_LV_EXTEND
        .extents_floor(vg.extent())
        .to_u32()
        .unwrap_or(u32::MAX)
        .max(1)
}

/// Gives `vg.lvs[index]` the first free lease slot of `lvmlock` that is not in `avoid`,
/// growing `lvmlock` by 256 MiB (as lvm2 does) while fewer than `spare` others would stay
/// free.
pub(crate) fn assign_lease(
    vg: &mut Vg,
    ctx: &EditCtx,
    index: usize,
    align: u64,
    avoid: &[u64],
    spare: usize,
) -> Result<(), EditError> {
    let lock_lv = lv_index(vg, "lvmlock")
        .map_err(|_| refused(vg.name.clone(), "shared VG without an lvmlock LV"))?;
    let mut used = leases_in_use(vg);
    used.extend_from_slice(avoid);
    // Slots an earlier change of the group freed are still their old owners' on disk.
    used.extend_from_slice(ctx.reserved_leases());
    used.sort_unstable();
    loop {
        if let Some(offset) = first_with_spare(free_slots(vg, lock_lv, align, &used), spare) {
            Arc::make_mut(&mut vg.lvs[index]).lock_args = Some(format!("1.0.0:{offset}"));
            return Ok(());
        }
        let more = growth(vg);
        grow(vg, ctx, lock_lv, more, None)?;
    }
}

/// Extents `lvmlock` takes from the free ones when one more LV with a lease (at alignment
/// `align`) is created in `vg`: 0 in a VG without `lvmlock` and while enough slots are
/// free.
pub fn lease_growth(vg: &Vg, align: u64) -> u32 {
    if !vg.is_shared() {
        return 0;
    }
    let Ok(lock_lv) = lv_index(vg, "lvmlock") else {
        return 0;
    };
    let used = leases_in_use(vg);
    match first_with_spare(free_slots(vg, lock_lv, align, &used), SPARE_LEASE_SLOTS) {
        Some(_) => 0,
        None => growth(vg),
    }
}
