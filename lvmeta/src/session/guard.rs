//! What guards a VG while a group of its changes is formed and written: its VG lease in a
//! shared VG, lvm2's file lock alone in a local one; and the LV leases a group holds until
//! its commit is done; in a local VG, the pools this session has active, which no change
//! of another holder may touch.

use super::Session;
use crate::lease;
use crate::model::Vg;
use crate::uuid::Uuid;
use crate::Error;

/// What guards a VG while a group of its changes is formed and written.
pub(super) enum Guard {
    /// A shared VG: its VG lease, held exclusively by this host.
    Leased(Box<VgHold>),
    /// A VG without leases (local, or `--nolocking`): lvm2's file lock alone; this session's
    /// thin pool activations stand in for pool leases.
    Local,
}

/// A shared VG's lease, held exclusively; dropped unreleased (an error path), it is
/// released unchanged.
pub(super) struct VgHold {
    pub(super) host: lease::Host,
    pub(super) lease: Option<lease::ResourceSpec>,
    pub(super) at: lease::VgPlaces,
}

impl Guard {
    /// Releases the VG lease; lvmlockd hosts learn a committed seqno from its value block.
    pub(super) fn release(self, seqno: Option<u32>) -> Result<(), Error> {
        if let Guard::Leased(mut h) = self {
            if let Some(r) = h.lease.take() {
                h.host.unlock_vg(&r, seqno.map(lease::Lvb::for_seqno))?;
            }
        }
        Ok(())
    }
}

impl Drop for VgHold {
    fn drop(&mut self) {
        if let Some(r) = self.lease.take() {
            self.host.release_or_warn(&r, "VG");
        }
    }
}

/// LV leases held until a group's commit is done; released when dropped.
pub(super) struct HeldLeases {
    pub(super) host: Option<lease::Host>,
    pub(super) list: Vec<lease::ResourceSpec>,
}

impl Drop for HeldLeases {
    fn drop(&mut self) {
        if let Some(h) = &self.host {
            for r in &self.list {
                h.release_or_warn(r, "removed LV");
            }
        }
    }
}

impl Session {
    /// The thin pools of `vg` active through this session (in a VG without leases), with
    /// their id and pool state.
    pub(super) fn local_pool_states(&self, vg: &Vg) -> Vec<(Uuid, String, lease::PoolState)> {
        if self.local_pools.is_empty() {
            return Vec::new();
        }
        vg.lvs
            .iter()
            .filter(|l| self.local_pools.held(&vg.name, &l.name))
            .filter_map(|l| Some((l.id, l.name.clone(), lease::pool_state(l)?)))
            .collect()
    }

    /// In a VG without leases: refuses a change to a pool active through this session
    /// (other than by its holder, `owned`), as [`lease::Host::lock_changed_lvs`] does with
    /// leases.
    pub(super) fn check_local_pools(
        &self,
        before: &[(Uuid, String, lease::PoolState)],
        out: &Vg,
        owned: &[Uuid],
    ) -> Result<(), Error> {
        for (id, name, state) in before {
            let now = out.lvs.iter().find(|l| l.id == *id);
            let same = now.and_then(|l| lease::pool_state(l)).as_ref() == Some(state);
            if !same && !owned.contains(id) {
                return Err(lease::LeaseError::InUse {
                    lv: format!("{}/{name}", out.name),
                }
                .into());
            }
        }
        Ok(())
    }
}
