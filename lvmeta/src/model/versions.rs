//! Two versions of one VG compared: what a group commit needs to tell a change from none.

use std::sync::Arc;

use super::Vg;

impl Vg {
    /// Whether `other` has the same fields but the LVs, seqno and header (a version of
    /// the same VG whose changes, if any, are in its LVs).
    pub fn same_fields(&self, other: &Vg) -> bool {
        let (a, b) = (self, other);
        a.name == b.name
            && a.id == b.id
            && a.format == b.format
            && a.status == b.status
            && a.flags == b.flags
            && a.tags == b.tags
            && a.system_id == b.system_id
            && a.lock_type == b.lock_type
            && a.lock_args == b.lock_args
            && a.extent_size == b.extent_size
            && a.max_lv == b.max_lv
            && a.max_pv == b.max_pv
            && a.allocation_policy == b.allocation_policy
            && a.profile == b.profile
            && a.metadata_copies == b.metadata_copies
            && a.pvs == b.pvs
            && a.historical_lvs == b.historical_lvs
    }

    /// Whether this version is `base` unchanged: the same fields and the very same LVs
    /// (shared, not equal: an edit copies every LV it touches), in order.
    pub fn unchanged_from(&self, base: &Vg) -> bool {
        self.same_fields(base)
            && self.lvs.len() == base.lvs.len()
            && self
                .lvs
                .iter()
                .zip(&base.lvs)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}
