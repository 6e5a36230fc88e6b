//! Two versions of one VG compared: what a group commit needs to tell a change from none.

use std::sync::Arc;

use super::Vg;

impl Vg {
    /// Whether `other` has the same fields but the LVs, seqno and header (a version of
    /// the same VG whose changes, if any, are in its LVs).
    ///
    /// Every field is named: a field added to [`Vg`] does not compile here until it is
    /// compared or said not to be.
    pub(crate) fn same_fields(&self, other: &Vg) -> bool {
        let Vg {
            name,
            id,
            seqno: _,
            format,
            status,
            flags,
            tags,
            system_id,
            lock_type,
            lock_args,
            extent_size,
            max_lv,
            max_pv,
            allocation_policy,
            profile,
            metadata_copies,
            pvs,
            lvs: _,
            historical_lvs,
            header: _,
        } = self;
        *name == other.name
            && *id == other.id
            && *format == other.format
            && *status == other.status
            && *flags == other.flags
            && *tags == other.tags
            && *system_id == other.system_id
            && *lock_type == other.lock_type
            && *lock_args == other.lock_args
            && *extent_size == other.extent_size
            && *max_lv == other.max_lv
            && *max_pv == other.max_pv
            && *allocation_policy == other.allocation_policy
            && *profile == other.profile
            && *metadata_copies == other.metadata_copies
            && *pvs == other.pvs
            && *historical_lvs == other.historical_lvs
    }

    /// Whether this version is `base` unchanged: the same fields and the very same LVs
    /// (shared, not equal: an edit copies every LV it touches), in order.
    pub(crate) fn unchanged_from(&self, base: &Vg) -> bool {
        self.same_fields(base)
            && self.lvs.len() == base.lvs.len()
            && self
                .lvs
                .iter()
                .zip(&base.lvs)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}
