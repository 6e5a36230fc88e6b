//! Every lease a new shared VG writes (`vgcreate --shared`), and LV leases across a change:
//! what the metadata named before, new slots initialised, changed LVs locked, freed slots
//! written `#unused`.

use std::collections::HashMap;

use super::*;

/// An LV's lease as the metadata names it, kept from before a change to compare with after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// LV name.
    pub name: String,
    /// LV id.
    pub id: crate::uuid::Uuid,
    /// Its `lock_args`.
    pub lock_args: String,
    /// A thin pool's state for its kernel pool: what changes when its thin LVs or its table
    /// features do.
    pub pool: Option<PoolState>,
}

impl LeaseRef {
    /// The LVs of `vg` that have a lease.
    pub fn of(vg: &crate::model::Vg) -> Vec<LeaseRef> {
        Self::of_lvs(vg.lvs.iter().map(|l| &**l))
    }

    /// Those of `lvs` that have a lease.
    pub fn of_lvs<'a>(lvs: impl IntoIterator<Item = &'a crate::model::Lv>) -> Vec<LeaseRef> {
        lvs.into_iter()
            .filter_map(|l| {
                Some(LeaseRef {
                    name: l.name.clone(),
                    id: l.id,
                    lock_args: l.lock_args.clone()?,
                    pool: pool_state(l),
                })
            })
            .collect()
    }

    /// The offset of its lease in `lvmlock`.
    pub(super) fn offset(&self) -> Option<u64> {
        layout::lease_offset(&self.lock_args)
    }

    /// The same LV in `new` (by id), under the same lease.
    fn kept_in<'a>(&self, new: &ById<'a>) -> Option<&'a crate::model::Lv> {
        new.get(&self.id)
            .copied()
            .filter(|l| l.lock_args.as_ref() == Some(&self.lock_args))
    }
}

/// What the host where a thin pool is active must deliver to its kernel pool when it
/// changes: a change to any of it needs the pool's lease (or its holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// The transaction id.
    pub transaction_id: u64,
    /// The queued messages.
    pub messages: Vec<crate::model::ThinMessage>,
    /// Zeroing of new chunks (a pool table feature).
    pub zero_new_blocks: bool,
    /// The discard handling (a pool table feature).
    pub discards: Option<String>,
}

/// A thin pool LV's [`PoolState`] (`None` for other LVs).
pub fn pool_state(lv: &crate::model::Lv) -> Option<PoolState> {
    lv.pool().map(|p| PoolState {
        transaction_id: p.transaction_id,
        messages: p.messages.clone(),
        zero_new_blocks: p.zero_new_blocks,
        discards: p.discards.clone(),
    })
}

impl Host {
    /// Writes what `vgcreate --shared` and lvmlockd write: the lockspace, the GL lease (enabled
    /// unless `gl_elsewhere`: lvmlockd enables the global lease in one VG only), the VG lease
    /// and `#unused` in every LV lease slot.
    pub fn init_vg(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        gl_elsewhere: bool,
    ) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        self.manager.init_lockspace(&ls, self.io_timeout)?;
        let g = at.geometry;
        let gl_name = if gl_elsewhere {
            layout::GL_DISABLED
        } else {
            layout::GL_NAME
        };
        let gl =
            layout::gl_lease(vg, &at.paths, gl_name, g).ok_or_else(|| missing(vg, "GL lease"))?;
        let vgl = layout::vg_lease(vg, &at.paths, g).ok_or_else(|| missing(vg, "VG lease"))?;
        self.manager.init_resource(&gl)?;
        self.manager.init_resource(&vgl)?;
        for slot in layout::lv_slots(vg, &at.paths, g) {
            self.manager.init_resource(&slot)?;
        }
        Ok(())
    }

    /// Before a commit: writes the lease of every LV of `new` that has a lease offset it did
    /// not have in `old` (lvmlockd's `init_lv`).
    pub fn init_new_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
    ) -> Result<(), LeaseError> {
        let old: HashMap<crate::uuid::Uuid, &String> =
            old.iter().map(|o| (o.id, &o.lock_args)).collect();
        for lv in &new.lvs {
            let before = old.get(&lv.id).copied();
            if lv.lock_args.is_some() && before != lv.lock_args.as_ref() {
                if let Some(r) = layout::lv_lease(new, &at.paths, &lv.name, at.geometry) {
                    self.manager.init_resource(&r)?;
                }
            }
        }
        Ok(())
    }

    /// Before a commit, under the VG lease held exclusively: makes sure no host holds the
    /// lease of any LV of `old` that `new` no longer has, as lvmlockd's `lvremove` does by
    /// taking it, so that an LV active on any host is never removed; and the lease of any thin
    /// pool whose thin LVs or table settings change (its [`PoolState`] differs), as
    /// lvmlockd's `lvcreate`/`lvremove` of a thin LV take the pool's lease, so that a pool
    /// active on a host never gets messages or settings that only its next activation would
    /// deliver (a snapshot cut later than asked, a delete under a live device). Either gives
    /// [`LeaseError::InUse`], and nothing is held. Pools in `owned` are the caller's: it
    /// holds their leases (a host clearing the queue it delivered). A lease the disk does not
    /// show free is taken exclusively without waiting; release the returned leases after the
    /// commit, before [`Host::free_old_lvs`], which takes what was seen of the free ones.
    pub fn lock_changed_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
        owned: &[crate::uuid::Uuid],
    ) -> Result<Locked, LeaseError> {
        let mut out = Locked::default();
        let removed = gone(old, new).map(|g| (g, true));
        let pools = changed_pools(old, new, owned).map(|c| (c, false));
        for ((lv, offset), is_gone) in removed.chain(pools) {
            let Some(r) = layout::lease_at(new, &at.paths, &lv.id.to_string(), offset, at.geometry)
            else {
                continue;
            };
            // Under the VG lease held exclusively no host can start taking an LV lease (every
            // activation reads the VG under its lease shared first, lvmlockd's included), so
            // a lease the disk shows free stays free: no acquire needed. Anything else is
            // settled by the daemon, which also takes over a dead host's lease.
            if let Some(seen) = self.manager.unheld(&r)? {
                if is_gone {
                    out.seen.push((offset, seen));
                }
                continue;
            }
            match self.manager.acquire(&r, Mode::Exclusive, false) {
                Ok(_) => out.held.push(r),
                Err(e) => {
                    for h in &out.held {
                        self.release_or_warn(h, "removed LV");
                    }
                    return Err(match e {
                        LeaseError::Busy { .. } | LeaseError::Orphan { .. } => LeaseError::InUse {
                            lv: format!("{}/{}", new.name, lv.name),
                        },
                        e => e,
                    });
                }
            }
        }
        Ok(out)
    }

    /// After a commit: marks the lease slots of LVs that are gone `#unused` (lvmlockd's
    /// `free_lv`), from what [`Host::lock_changed_lvs`] saw of them (`seen`) where it found
    /// them free.
    pub fn free_old_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
        seen: &[(u64, SeenFree)],
    ) -> Result<(), LeaseError> {
        // A slot an LV of `new` holds is never marked free (it cannot be, as the edits of a
        // group do not hand out slots freed earlier in it; this keeps it so regardless).
        let held: std::collections::HashSet<u64> = new
            .lvs
            .iter()
            .filter_map(|l| layout::lease_offset(l.lock_args.as_deref()?))
            .collect();
        for (_, offset) in gone(old, new).filter(|(_, o)| !held.contains(o)) {
            let Some(r) =
                layout::lease_at(new, &at.paths, layout::UNUSED_NAME, offset, at.geometry)
            else {
                continue;
            };
            match seen.iter().find(|(o, _)| *o == offset) {
                Some((_, s)) => self.manager.init_free_resource(&r, s)?,
                None => self.manager.init_resource(&r)?,
            }
        }
        Ok(())
    }
}

/// The LVs of `old` whose lease `new` no longer has (removed, or given another slot), with
/// the offset of that lease in `lvmlock`.
fn gone<'a>(
    old: &'a [LeaseRef],
    new: &'a crate::model::Vg,
) -> impl Iterator<Item = (&'a LeaseRef, u64)> + 'a {
    let new = by_id(new);
    old.iter().filter_map(move |lv| match lv.kept_in(&new) {
        Some(_) => None,
        None => Some((lv, lv.offset()?)),
    })
}

/// The LVs of a VG by id.
type ById<'a> = HashMap<crate::uuid::Uuid, &'a crate::model::Lv>;

fn by_id(vg: &crate::model::Vg) -> ById<'_> {
    vg.lvs.iter().map(|l| (l.id, &**l)).collect()
}

/// The thin pools of `old` still in `new`, under the same lease, whose [`PoolState`]
/// (transaction id, message queue, table settings) `new` changes, with the offset of their
/// lease in `lvmlock`; pools in `owned` (whose lease the caller holds) are left out.
fn changed_pools<'a>(
    old: &'a [LeaseRef],
    new: &'a crate::model::Vg,
    owned: &'a [crate::uuid::Uuid],
) -> impl Iterator<Item = (&'a LeaseRef, u64)> + 'a {
    let new = by_id(new);
    old.iter().filter_map(move |lv| {
        let before = lv.pool.as_ref()?;
        let now = lv.kept_in(&new)?;
        if pool_state(now).as_ref() == Some(before) || owned.contains(&lv.id) {
            return None;
        }
        Some((lv, lv.offset()?))
    })
}
