//! What this machine's kernel says of LVs: which are active, open or suspended
//! ([`DmState`]), and the status of an LV's device ([`read`]). Reports read it; lvmeta reads
//! no other kernel state for them.

use crate::activate::status::{DmDev, Usage};
use crate::model::{Lv, SegKind, Vg};

/// Whether LVs are active, as far as this machine can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DmState {
    /// No device-mapper here: state and open columns show `X`, as lvm2 does without it.
    Unknown,
    /// The device-mapper devices: dm uuid (`LVM-<vg uuid><lv uuid>[-<layer>]` for LVs) ->
    /// open count and suspension.
    /// - Ordered, so that an LV's devices (its uuid, then its layers') are found by a range
    ///   lookup, not by a walk over every device.
    Known(std::collections::BTreeMap<String, DmDev>),
}

impl DmState {
    /// Asks device-mapper; `Unknown` when the kernel has none (or lvmeta is built without
    /// its `dm` feature).
    pub fn probe() -> Self {
        #[cfg(feature = "dm")]
        if let Some(m) = crate::activate::dm::device_opens() {
            return DmState::Known(m);
        }
        DmState::Unknown
    }

    /// lvm2's state and open columns of the LV with dm uuid `uuid`:
    /// - active: a device with that uuid, or with it and a layer suffix (a pool's `_tdata`
    ///   is `<uuid>-tdata`); a thin pool only with its own device, not by its `-tpool`;
    /// - open: the device's open count, a pool's from its `-tpool` when that is up;
    /// - `s` instead of `a` while the LV's own device is suspended.
    pub(super) fn columns(&self, uuid: &str, pool: bool) -> (char, char) {
        let DmState::Known(devices) = self else {
            return ('X', 'X');
        };
        let mine = |u: &str| {
            u == uuid
                || (!pool
                    && u.strip_prefix(uuid)
                        .is_some_and(|rest| rest.starts_with('-')))
        };
        let Some(open) = devices
            .range::<str, _>((std::ops::Bound::Included(uuid), std::ops::Bound::Unbounded))
            .take_while(|(u, _)| u.starts_with(uuid))
            .filter(|(u, _)| mine(u))
            .map(|(_, d)| d.open)
            .max()
        else {
            return ('-', '-');
        };
        let open = match devices.get(&format!("{uuid}-tpool")) {
            Some(d) if pool => d.open,
            _ => open,
        };
        let state = match devices.get(uuid) {
            Some(d) if d.suspended => 's',
            _ => 'a',
        };
        (state, if open > 0 { 'o' } else { '-' })
    }
}

/// `active`, empty, or `unknown` where device-mapper cannot be asked (lvm2's words).
pub(super) fn lv_active(vg: &Vg, lv: &Lv, dm: &DmState) -> &'static str {
    if matches!(dm, DmState::Unknown) {
        return "unknown";
    }
    let uuid = crate::activate::runs::dm_uuid(vg, lv);
    let pool = matches!(
        lv.segments.first().map(|s| &s.kind),
        Some(SegKind::ThinPool(_))
    );
    match dm.columns(&uuid, pool).0 {
        'a' | 's' => "active",
        _ => "",
    }
}

/// Whether LV `lv` is active here (suspended included).
pub(super) fn active(vg: &Vg, lv: &Lv, dm: &DmState) -> bool {
    lv_active(vg, lv, dm) == "active"
}

/// Which devices of active raid LV `lv` the kernel has in sync ([`Usage::Raid`]).
/// - Every device counts as in sync once the whole LV is (lvm2's `lv_raid_image_in_sync`
///   asks the sync ratio before the health characters).
pub(super) fn raid_in_sync(vg: &Vg, lv: &Lv, dm: &DmState) -> Option<u64> {
    if !matches!(dm, DmState::Known(_)) || !active(vg, lv, dm) {
        return None;
    }
    match read(&crate::activate::dm_names::dm_name(&vg.name, &lv.name))? {
        Usage::Raid { sync, .. } if sync.0 == sync.1 => Some(u64::MAX),
        Usage::Raid { in_sync, .. } => Some(in_sync),
        _ => None,
    }
}

/// The usage device-mapper device `device` reports.
#[cfg(feature = "dm")]
pub(super) fn read(device: &str) -> Option<Usage> {
    crate::activate::dm::usage(device)
}

#[cfg(not(feature = "dm"))]
pub(super) fn read(_device: &str) -> Option<Usage> {
    None
}
