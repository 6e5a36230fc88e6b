//! The commit pipeline: every change of a VG's LVs goes through [`Session::update`] (or a
//! variant of it) and reads top to bottom in [`Session::change`]:
//! 1. the caller's turn (`group.rs`): lead the VG's next group, or join the open one;
//! 2. the leader takes lvm2's VG file lock and the [`Guard`] (a shared VG's lease, or this
//!    session's pool holds in a VG without leases), and reads the VG under it, with the
//!    index of its LVs the last commit kept ([`Session::begin`], [`Indexed`]);
//! 3. each edit of the group applied in turn ([`Session::apply`]): pure ([`crate::edit`]),
//!    checked on what it changed through the index, then by the guard (an LV removed or a
//!    pool changed that another holder uses); a failing edit fails its caller alone;
//! 4. the group written ([`Session::write_group`]): new LV leases, new pools' metadata
//!    zeroed, new LVs' ends cleared, ONE commit (two ordered writes per area: `write.rs`),
//!    the leases of removed LVs released and freed, the new VG published to readers and
//!    its index kept, the guard released with the new seqno.

use std::collections::HashMap;
use std::sync::Arc;

use super::group::{Outcome, Turn};
use super::guard::{Guard, HeldLeases, VgHold};
use super::write::next_version;
use super::{copies_agree, lease_align, members, places, writable, Session};
use crate::edit::{self, EditCtx, EditError};
use crate::lease;
use crate::lockfile::{FileLock, Resource};
use crate::model::index::{Indexed, VgIndex};
use crate::model::{validate, Lv, Vg};
use crate::scan::Scan;
use crate::uuid::Uuid;
use crate::Error;

pub(super) use super::write::{committed_checksum, metadata_areas, metadata_use};
pub use super::write::{MetadataArea, MetadataUse};

/// What an edit passed to [`Session::update`] returns: the changed VG, alone or with a
/// value for the caller (the edit functions of [`crate::edit`] return one or the other).
pub trait Edited {
    /// What the caller gets back.
    type Value;
    /// The VG and the value.
    fn split(self) -> (Vg, Self::Value);
}

impl Edited for Vg {
    type Value = ();
    fn split(self) -> (Vg, ()) {
        (self, ())
    }
}

impl<T> Edited for (Vg, T) {
    type Value = T;
    fn split(self) -> (Vg, T) {
        self
    }
}

/// How a change is made.
struct Change<'a> {
    /// Its verb, in the metadata's description.
    verb: &'a str,
    /// Thin pools whose leases the caller holds (where they are active).
    owned: &'a [&'a str],
    /// Pools the VG did not have are new (their metadata LV is zeroed), not restored from a
    /// backup (left as they are).
    new_pools_are_new: bool,
    /// New linear LVs whose ends are cleared.
    clear_ends: &'a [&'a str],
    /// Written as a group of its own (a restore or repair replaces the whole VG).
    alone: bool,
    /// The committed version is above this seqno too (a restored backup's).
    seqno_floor: Option<u32>,
}

impl<'a> Change<'a> {
    fn new(verb: &'a str, owned: &'a [&'a str], clear_ends: &'a [&'a str]) -> Self {
        Self {
            verb,
            owned,
            new_pools_are_new: true,
            clear_ends,
            alone: false,
            seqno_floor: None,
        }
    }
}

/// A group being formed: the VG as its edits leave it, and what they need written.
pub(super) struct Bench {
    /// The scan the group started from, read under the guard.
    scan: Arc<Scan>,
    /// The VG as the group's edits leave it, with its index (shared with the edit running).
    base: Arc<Indexed>,
    guard: Guard,
    /// Edits that went in.
    edits: usize,
    /// Their verbs, each once.
    verbs: Vec<String>,
    /// Pools the group's edits made new: their metadata LVs are zeroed.
    new_pools: Vec<Uuid>,
    /// LVs whose ends are cleared if new: the name, and the id an LV of that name had
    /// before the edit.
    clears: Vec<(String, Option<Uuid>)>,
    /// Leases the guard took for removed LVs or changed pools: released after the commit
    /// (or when the group ends otherwise).
    held: HeldLeases,
    /// The lease areas of removed LVs the guard found free, for [`lease::Host::free_old_lvs`].
    seen: Vec<(u64, lease::SeenFree)>,
    /// What the group's edits freed: not handed out again before the commit.
    reserved: edit::Reserved,
    /// Byte alignment of new leases, as lvmlockd aligns them on the VG's lease device.
    lease_align: u64,
    /// The lowest seqno the group's version may have, less one (a restored backup's).
    seqno_floor: Option<u32>,
    /// Every label and area of the VG holds its newest version: an edit that changes
    /// nothing need not be written (else it is, to mend them).
    copies_agree: bool,
    /// The VG's text as the group's edits leave it, estimated (committed size plus what each
    /// edit's LVs add or take away), against the room of its smallest area.
    room: MetadataUse,
}

/// The index of a VG's LVs as a commit left them, for the next group of the VG.
pub(super) struct KeptIndex {
    /// The VG's id, seqno and the checksum of its committed text: the index is that
    /// version's (another writer's commit, a VG of that name made anew, or two writers
    /// of one seqno without locks change one of them).
    id: Uuid,
    seqno: u32,
    text: Option<u32>,
    index: VgIndex,
}

/// What a change's text may differ from the sum of its LVs' by (the description, seqno and
/// time lines): kept free when a group's text is estimated.
const TEXT_MARGIN: u64 = 1024;

impl Session {
    /// Applies `edit` to the VG under its lock (and, in a shared VG, its VG lease) and commits
    /// the VG it returns; `verb` names the change in the metadata's description. The edit gets
    /// the VG by value (a copy that shares its LVs with the cached one: an edit copies only
    /// the LVs it changes) and returns the changed VG with whatever the caller wants back
    /// (a new LV's name, say). Concurrent changes of one VG are committed together.
    pub fn update<R: Edited>(
        &self,
        vg: &str,
        verb: &str,
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        self.change(vg, &Change::new(verb, &[], &[]), edit)
    }

    /// [`Session::update`] by the holder of the leases of the thin pools named in `owned`
    /// (the host where they are active), whose changes then need no lease of their own.
    pub fn update_holding<R: Edited>(
        &self,
        vg: &str,
        verb: &str,
        owned: &[&str],
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        self.change(vg, &Change::new(verb, owned, &[]), edit)
    }

    /// [`Session::update_holding`] that also zeroes the first and last MiB
    /// ([`super::END_BYTES`]) of the linear LVs named in `clear` that the edit creates,
    /// before the commit that adds them (an LV of that name that was there already is left
    /// alone).
    pub fn update_clearing<R: Edited>(
        &self,
        vg: &str,
        verb: &str,
        owned: &[&str],
        clear: &[&str],
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        self.change(vg, &Change::new(verb, owned, clear), edit)
    }

    /// `vgck --updatemetadata`: writes the VG's newest version again, as a new seqno, to
    /// every area, repairing areas left behind by a crash or holding a damaged header.
    pub fn repair(&self, vg: &str) -> Result<Vg, Error> {
        self.forget();
        let how = Change {
            alone: true,
            ..Change::new("vgck --updatemetadata", &[], &[])
        };
        self.change(vg, &how, |out, ctx| {
            edit::check(&out, ctx)?;
            Ok(out)
        })?;
        self.vg(vg)
    }

    /// `vgcfgrestore`: writes `from` (a backup or an older copy) as the VG's next version.
    /// Its PVs must be the VG's PVs.
    pub fn restore(&self, vg: &str, from: &Vg) -> Result<Vg, Error> {
        let how = Change {
            new_pools_are_new: false,
            alone: true,
            seqno_floor: Some(from.seqno),
            ..Change::new("vgcfgrestore", &[], &[])
        };
        self.change(vg, &how, |cur, ctx| {
            let out = from.clone();
            let mut ids: Vec<_> = out.pvs.iter().map(|p| p.id).collect();
            let mut cur_ids: Vec<_> = cur.pvs.iter().map(|p| p.id).collect();
            ids.sort_unstable();
            cur_ids.sort_unstable();
            if ids != cur_ids || out.name != cur.name {
                return Err(EditError::Refused {
                    object: vg.to_owned(),
                    why: "the backup names other PVs or another VG".into(),
                });
            }
            edit::check(&out, ctx)?;
            Ok(out)
        })?;
        self.vg(vg)
    }

    /// [`Session::update`] as `how` says: the pipeline, top to bottom.
    fn change<R: Edited>(
        &self,
        vg: &str,
        how: &Change<'_>,
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        let mut member = match self.groups.turn(vg, how.alone) {
            Turn::Lead => return self.lead(vg, how, edit),
            Turn::Join(m) => m,
        };
        let value = self.apply(member.bench(), how, edit);
        let group = member.applied(value.is_ok());
        let value = value?;
        let Some(group) = group else {
            return Err(Error::Device {
                device: vg.to_owned(),
                why: "internal: the group commit closed before this change joined it".into(),
            });
        };
        match self.groups.outcome(vg, group) {
            Ok(_) => Ok(value),
            Err(e) => Err(Error::Group(e)),
        }
    }

    /// Leads a group: begins it, applies the leader's own edit, gathers the members' edits,
    /// writes the group and posts the outcome to the members.
    fn lead<R: Edited>(
        &self,
        vg: &str,
        how: &Change<'_>,
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        let mut leading = Leading {
            session: self,
            vg,
            group: None,
            posted: false,
        };
        let (mut bench, file) = self.begin(vg)?;
        let mine = self.apply(&mut bench, how, edit);
        let bench = match how.alone {
            true => bench,
            false => {
                let (bench, group) = self.groups.gather(vg, bench);
                leading.group = group;
                bench
            }
        };
        let outcome: Outcome = self.write_group(vg, bench).map_err(Arc::new);
        // The next leader may take the file lock at once.
        drop(file);
        leading.finish(&outcome);
        let value = mine?;
        match outcome {
            Ok(_) => Ok(value),
            // The members' share of the error may still be held: the leader shares it too.
            Err(e) => Err(Arc::try_unwrap(e).unwrap_or_else(Error::Group)),
        }
    }

    /// Takes lvm2's VG file lock and the guard, and reads the VG under them.
    fn begin(&self, vg: &str) -> Result<(Bench, Option<FileLock>), Error> {
        let file = self.lock(Resource::Vg(vg.to_owned()))?;
        let first = self.cached_for(vg);
        let sv = writable(&first, vg)?;
        let (guard, scan) = match self.host_for(&sv.vg)? {
            Some(h) => {
                let at = places(&first, sv);
                let (lease, kept) = h.lock_vg(&sv.vg, &at, lease::Mode::Exclusive)?;
                let guard = Guard::Leased(Box::new(VgHold {
                    host: h.clone(),
                    lease: Some(lease),
                    at,
                }));
                // A lease kept since before `first` was read: nobody can have changed the
                // VG. Otherwise another host may have: read again under the lease.
                // - A held VG's `first` is the cached scan, which may be older than a
                //   lease taken since (activation, a locked read): checked again too.
                let fresh = kept && !self.holds(vg);
                (guard, if fresh { first } else { self.current() })
            }
            None => (Guard::Local, first),
        };
        let name = vg;
        let sv = writable(&scan, name)?;
        let (vg, room, text) = (
            sv.vg.clone(),
            metadata_use(&scan, sv),
            committed_checksum(&scan, sv),
        );
        // The edits are checked against this version: it must pass the write checks (a
        // version read from disk passed only the read checks; one this session committed
        // passed both).
        if !self.published(&scan, name) {
            validate::check_write(&vg).map_err(|e| Error::Edit(EditError::Invalid(e)))?;
        }
        let kept = self.lock_indexes().remove(name);
        let base = match kept {
            Some(k) if (k.id, k.seqno, k.text) == (vg.id, vg.seqno, text) => {
                Indexed::resume(vg, k.index)
            }
            _ => Indexed::of(vg),
        };
        let copies_agree = copies_agree(&scan, name);
        let lease_align = lease_align(&scan, sv);
        let bench = Bench {
            copies_agree,
            scan,
            base: Arc::new(base),
            guard,
            edits: 0,
            verbs: Vec::new(),
            new_pools: Vec::new(),
            clears: Vec::new(),
            held: HeldLeases {
                host: self.host.clone(),
                list: Vec::new(),
            },
            seen: Vec::new(),
            reserved: edit::Reserved::default(),
            lease_align,
            seqno_floor: None,
            room,
        };
        Ok((bench, file))
    }

    /// Applies one change's edit to the group's VG; on any error the group's VG is left as
    /// it was (leases the edit's checks took stay on the bench, released with the group's).
    fn apply<R: Edited>(
        &self,
        b: &mut Bench,
        how: &Change<'_>,
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        let base = b.base.clone();
        let owned: Vec<Uuid> = how
            .owned
            .iter()
            .filter_map(|n| base.vg().lv(n).map(|l| l.id))
            .collect();
        let clears: Vec<(String, Option<Uuid>)> = how
            .clear_ends
            .iter()
            .map(|n| ((*n).to_owned(), base.vg().lv(n).map(|l| l.id)))
            .collect();
        // Lease slots and extents earlier changes of the group freed are not handed out.
        let ctx =
            EditCtx::in_group(base.clone(), b.reserved.clone()).with_lease_align(b.lease_align);
        let (out, value) = edit(base.vg().clone(), &ctx)?.split();
        // Nothing changed (a retry of a change already made): nothing to check or write.
        // The caller still waits for the group's outcome: its answer may rest on an earlier
        // edit of the group. Written all the same when a label or area lags behind (a
        // commit that failed half way: the retry mends it), and by a repair or restore.
        if !how.alone && b.copies_agree && out.unchanged_from(base.vg()) {
            return Ok(value);
        }
        // Every invariant lvm2 checks, looking only at what the edit changed: the group's VG
        // before it passed them.
        let delta = validate::check_change(base.vg(), &out, Some(base.index()))
            .map_err(EditError::Invalid)?;
        // Before anything is written: refused when a removed LV (or a changed thin pool) is
        // in use; what the check takes is held until the commit is done (or failed). Only
        // the LVs the edit removed or replaced can be gone or changed.
        let locked = match &b.guard {
            Guard::Leased(h) => {
                let old = lease::LeaseRef::of_lvs(delta.removed.iter().copied());
                h.host.lock_changed_lvs(&old, &out, &h.at, &owned)?
            }
            Guard::Local => {
                self.check_local_pools(&self.local_pool_states(base.vg()), &out, &owned)?;
                lease::Locked::default()
            }
        };
        // Released with the group's leases, whatever becomes of this edit.
        b.held.list.extend(locked.held);
        b.seen.extend(locked.seen);
        let old_ids: std::collections::HashSet<Uuid> = delta.removed.iter().map(|l| l.id).collect();
        // Pools the edit made (a restored pool's metadata holds its thin devices: never
        // zeroed).
        let made: Vec<Uuid> = match how.new_pools_are_new {
            true => delta
                .changed
                .iter()
                .filter(|l| l.pool().is_some() && !old_ids.contains(&l.id))
                .map(|l| l.id)
                .collect(),
            false => Vec::new(),
        };
        // An edit whose text would not fit fails alone, before the group is written.
        let locked_vg = out.write_locked();
        let pvs = out.pvs.len();
        let text = |lvs: &[&Lv]| -> u64 {
            lvs.iter()
                .map(|l| crate::model::lv_text_bytes(l, locked_vg, pvs) as u64)
                .sum()
        };
        let used = (b.room.used + text(&delta.changed)).saturating_sub(text(&delta.removed));
        if used + TEXT_MARGIN > b.room.max {
            return Err(Error::MetadataFull {
                vg: out.name.clone(),
                device: b.room.device.clone(),
                size: used + TEXT_MARGIN,
                max: b.room.max,
            });
        }
        b.room.used = used;
        for id in made {
            if !b.new_pools.contains(&id) {
                b.new_pools.push(id);
            }
        }
        b.reserved.add_freed(&delta);
        b.clears.extend(clears);
        if !b.verbs.iter().any(|v| v == how.verb) {
            b.verbs.push(how.verb.to_owned());
        }
        let index = base
            .index()
            .change(base.vg(), &out, &delta.removed, &delta.changed);
        drop(delta);
        // The edit's context and this function's handle hold the base too: with them gone
        // `make_mut` changes it in place (else it would copy the whole VG and its index,
        // once per edit of a group).
        drop(ctx);
        drop(base);
        b.edits += 1;
        b.seqno_floor = b.seqno_floor.max(how.seqno_floor);
        debug_assert_eq!(Arc::strong_count(&b.base), 1, "the group's base is shared");
        Arc::make_mut(&mut b.base).advance(out, index);
        Ok(value)
    }

    /// Writes a group: what its edits need before the commit, the commit, then lease
    /// bookkeeping. Returns the committed seqno (the start's when no edit went in).
    fn write_group(&self, vg: &str, bench: Bench) -> Result<u32, Error> {
        let Bench {
            scan,
            base,
            guard,
            edits,
            verbs,
            new_pools,
            clears,
            held,
            seen,
            seqno_floor,
            ..
        } = bench;
        let (mut out, index) = Arc::try_unwrap(base)
            .unwrap_or_else(|b| (*b).clone())
            .into_parts();
        let start = match writable(&scan, vg) {
            Ok(s) => s,
            Err(e) => {
                guard.release(None)?;
                return Err(e);
            }
        };
        if edits == 0 {
            // Nothing changed: the index is still the committed version's.
            let kept = KeptIndex {
                id: start.vg.id,
                seqno: start.vg.seqno,
                text: committed_checksum(&scan, start),
                index,
            };
            self.lock_indexes().insert(vg.to_owned(), kept);
            guard.release(None)?;
            return Ok(start.vg.seqno);
        }
        // One new version, whatever the number of edits (a restore's is above the backup's).
        if let Err(e) = next_version(&mut out, start.vg.seqno, seqno_floor, &verbs.join(", ")) {
            guard.release(None)?;
            return Err(e);
        }
        let next = out.seqno;
        let before = lease::LeaseRef::of(&start.vg);
        let paths = places(&scan, start).paths;
        let committed = match &guard {
            Guard::Leased(h) => h
                .host
                .init_new_lvs(&before, &out, &h.at)
                .map_err(Error::from),
            Guard::Local => Ok(()),
        }
        .and_then(|()| self.zero_new_lvs(&out, &new_pools, &clears, &paths))
        .and_then(|()| {
            let pvs = members(&scan, start)?;
            self.commit_and_publish(&scan, vg, out, &pvs)
        });
        // The removed LVs' leases go back before they are marked free.
        drop(held);
        let now = match committed {
            Ok(now) => now,
            Err(e) => {
                guard.release(None)?;
                return Err(e);
            }
        };
        let out = now.vgs.iter().find(|v| v.vg.name == vg).map(|v| &v.vg);
        let seqno = out.map_or(next, |v| v.seqno);
        if let Some(sv) = now.vgs.iter().find(|v| v.vg.name == vg) {
            let kept = KeptIndex {
                id: sv.vg.id,
                seqno,
                text: committed_checksum(&now, sv),
                index,
            };
            self.lock_indexes().insert(vg.to_owned(), kept);
        }
        tracing::info!(vg, verb = %verbs.join(", "), edits, seqno, "committed");
        // Committed: what follows is bookkeeping, whose failure is logged, not reported as
        // a failed change.
        if let (Guard::Leased(h), Some(out)) = (&guard, out) {
            if let Err(e) = h.host.free_old_lvs(&before, out, &h.at, &seen) {
                tracing::warn!(vg, error = %e, "marking the removed LVs' leases free");
            }
        }
        if let Err(e) = guard.release(Some(seqno)) {
            tracing::warn!(vg, seqno, error = %e, "releasing the VG lease after a commit");
        }
        Ok(seqno)
    }

    fn lock_indexes(&self) -> std::sync::MutexGuard<'_, HashMap<String, KeptIndex>> {
        self.indexes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The leader's duty to post its group's outcome and step down, also when it fails or
/// panics before writing (its members then get an error instead of waiting forever).
struct Leading<'s> {
    session: &'s Session,
    vg: &'s str,
    group: Option<u64>,
    posted: bool,
}

impl Leading<'_> {
    fn finish(mut self, outcome: &Outcome) {
        self.session.groups.finish(self.vg, self.group, outcome);
        self.posted = true;
    }
}

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        if self.posted {
            return;
        }
        let abandoned = Err(Arc::new(Error::Device {
            device: self.vg.to_owned(),
            why: "the change leading this group commit ended before writing it".into(),
        }));
        self.session
            .groups
            .finish(self.vg, self.group.take(), &abandoned);
    }
}
