//! Activation on this host: an LV's device brought up, refreshed and taken down through an
//! [`activate::Backend`], under the LV's lease (a thin LV's: its pool's) in a shared VG.

use std::path::PathBuf;
use std::sync::Arc;

use super::{places, ReadLocks, Session};
use crate::activate::{self, Activation, Backend, Layout, Placement};
use crate::edit;
use crate::lease;
use crate::model::Vg;
use crate::scan::Scan;
use crate::Error;

impl Session {
    /// Activates LV `lv` of `vg` as `lvchange -ay` does: [`Session::activate_devices`], then
    /// [`Session::clear_delivered`] (a commit, when a thin pool's queue was delivered).
    pub fn activate(
        &self,
        vg: &str,
        lv: &str,
        shared: bool,
        read_only: bool,
        backend: &dyn Backend,
    ) -> Result<Activation, Error> {
        let held = self.activate_devices(vg, lv, shared, read_only, backend)?;
        self.clear_delivered(&held.placement, "lvchange -ay")?;
        Ok(held)
    }

    /// Brings LV `lv` of `vg` up on this host through `backend`, as `lvchange -ay` (`-asy`
    /// with `shared`) does with lvmlockd: the VG read under its lease shared, the LV's lease
    /// (a thin LV's: its pool's) taken exclusively, or shared for shared activation, and held
    /// by the returned [`Activation`] for as long as it lives. A lease another host holds in a
    /// conflicting mode fails at once with [`lease::LeaseError::Busy`]. Writes no metadata: a
    /// thin pool's queue the backend delivered is cleared by [`Session::clear_delivered`].
    pub fn activate_devices(
        &self,
        vg: &str,
        lv: &str,
        shared: bool,
        read_only: bool,
        backend: &dyn Backend,
    ) -> Result<Activation, Error> {
        self.read_for_activation(vg)?
            .activate(lv, shared, read_only, backend)
    }

    /// VG `vg` read for an activation, under its lease (shared) in a shared VG: what the
    /// caller checks on this read before [`ActivationRead::activate`] takes the LV's lease.
    pub fn read_for_activation(&self, vg: &str) -> Result<ActivationRead<'_>, Error> {
        let (scan, locks) = self.read_locked(&[vg])?;
        let read = scan.vg(vg)?.vg.clone();
        Ok(ActivationRead {
            session: self,
            scan,
            locks,
            vg: read,
        })
    }

    /// After the backend brought `p`'s kernel pool to the metadata's transaction id: clears
    /// the pool's queue, or the next change would join messages already sent without a new
    /// transaction id (lvm2's `update_pool_lv`). A commit (as `verb`), only when the pool
    /// had queued messages. The caller holds the pool's lease.
    pub fn clear_delivered(&self, p: &Placement, verb: &str) -> Result<(), Error> {
        if let Layout::Thin { pool, .. } | Layout::Pool(pool) = &p.layout {
            if !pool.messages.is_empty() {
                let (name, tid) = (pool.name.as_str(), pool.transaction_id);
                self.update_holding(&p.vg, verb, &[name], |v, ctx| {
                    edit::thin::delivered(v, ctx, name, tid)
                })?;
                tracing::info!(vg = %p.vg, pool = name, transaction_id = tid, "cleared the delivered thin pool messages");
            }
        }
        Ok(())
    }

    /// Where LV `lv` of `vg` is on this host's devices, from a fresh scan.
    fn placement(&self, vg: &str, lv: &str) -> Result<Placement, Error> {
        let scan = self.current();
        let sv = scan.vg(vg)?;
        Ok(activate::place(&sv.vg, lv, &places(&scan, sv).paths)?)
    }

    /// Removes LV `lv`'s device on this host, found from the metadata (an activation whose
    /// [`Activation`] is gone, as after a restart), then releases the orphan of its lease
    /// (a thin LV's: its pool's, unless another thin LV of the pool is still active here)
    /// that the ended process left.
    pub fn deactivate(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<(), Error> {
        let scan = self.current();
        let sv = scan.vg(vg)?;
        let at = places(&scan, sv);
        backend.deactivate(&activate::place(&sv.vg, lv, &at.paths)?)?;
        let Some(h) = self.host_for(&sv.vg)? else {
            return Ok(());
        };
        let Ok((owner, r)) = covering_lease(&sv.vg, &at, lv) else {
            return Ok(());
        };
        // Another active thin LV of the pool still needs the pool's lease.
        for other in sv.vg.lvs.iter().filter(|l| l.name != lv) {
            if other.thin_pool() == Some(owner) {
                if let Ok(p) = activate::place(&sv.vg, &other.name, &at.paths) {
                    if backend.active(&p)?.is_some() {
                        return Ok(());
                    }
                }
            }
        }
        // A lost lockspace lets nothing be acquired: the orphan is dropped without it.
        let released = match h.manager.release_orphans(&r) {
            Err(lease::LeaseError::NotJoined { .. }) => h.manager.drop_orphans(&r)?,
            other => other?,
        };
        if released > 0 {
            tracing::info!(
                vg,
                lv = owner,
                "released the orphan lease an ended process left"
            );
        }
        Ok(())
    }

    /// Fences LV `lv` of `vg` on this host ([`Backend::fence`]): found from the metadata
    /// as last found, reading no device and taking no lease (the path or the lease may be
    /// lost already). Returns the devices fenced.
    pub fn fence(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<Vec<String>, Error> {
        let scan = self.seen(vg)?;
        let sv = scan.vg(vg)?;
        let p = activate::place(&sv.vg, lv, &places(&scan, sv).paths)?;
        Ok(backend.fence(&p)?)
    }

    /// Removes LV `lv`'s devices on this host, the LV found in the metadata as last found
    /// (reading no device; see [`Session::fence`]); fails while a device is open.
    pub fn deactivate_seen(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<(), Error> {
        let scan = self.seen(vg)?;
        let sv = scan.vg(vg)?;
        let p = activate::place(&sv.vg, lv, &places(&scan, sv).paths)?;
        Ok(backend.deactivate(&p)?)
    }

    /// Whether LV `lv` of `vg` is live on this host (see [`Session::live`]), not fenced
    /// already, although this host does not hold the lease that covers it (a thin LV's: its pool's) in a healthy
    /// lockspace, as `standing` tells: a device that may write where another host may
    /// write next. `false` in a VG without leases.
    pub fn live_without_lease(
        &self,
        vg: &str,
        lv: &str,
        standing: &lease::Standing,
        backend: &dyn Backend,
    ) -> Result<bool, Error> {
        let scan = self.seen(vg)?;
        let sv = scan.vg(vg)?;
        if self.host_for(&sv.vg)?.is_none() {
            return Ok(false);
        }
        let at = places(&scan, sv);
        let p = activate::place(&sv.vg, lv, &at.paths)?;
        if !live(backend, &p)? || backend.is_fenced(&p)? {
            return Ok(false);
        }
        let (_, r) = covering_lease(&sv.vg, &at, lv)?;
        Ok(!standing.holds(&r.lockspace, &r.name))
    }

    /// Fences, when VG `vg` cannot be found (its metadata was never read by this process and
    /// the devices do not answer), every device of this host that belongs to the VG of an
    /// LV whose lease this host holds in `vg`'s lockspace although that lockspace is not
    /// healthy ([`activate::fence::by_lost_leases`]), then lets those leases go. Returns the
    /// devices fenced.
    pub fn fence_lost(
        &self,
        vg: &str,
        standing: &lease::Standing,
        backend: &dyn Backend,
    ) -> Result<Vec<String>, Error> {
        let ls = lease::layout::lockspace_name(vg);
        if standing.healthy(&ls) {
            return Ok(Vec::new());
        }
        let lost: Vec<String> = standing
            .held
            .iter()
            .filter(|h| h.lockspace == ls)
            .map(|h| h.name.clone())
            .collect();
        let devices = backend.devices()?;
        let mut names = activate::fence::by_lost_leases(&devices, &lost);
        // No lease left to go by (the holder gone with them): every device of an LV of a
        // VG of this name (`<vg>-...` with an lvm2 uuid).
        if names.is_empty() {
            names = activate::fence::by_vg_name(&devices, vg);
        }
        for n in &names {
            backend.fence_device(n)?;
        }
        if let (Some(h), false) = (&self.host, names.is_empty()) {
            h.manager.let_go(&ls, &lost)?;
        }
        Ok(names)
    }

    /// Lets go of the lease covering LV `lv` of `vg` ([`lease::LeaseManager::let_go`]):
    /// released if this process or its holder holds it, its orphan dropped, with no disk I/O
    /// and no acquire (also in a failed lockspace). Only once its devices are fenced; the LV
    /// is found as last found, reading no device.
    pub fn let_go_covering(&self, vg: &str, lv: &str) -> Result<(), Error> {
        let scan = self.seen(vg)?;
        let sv = scan.vg(vg)?;
        let Some(h) = self.host_for(&sv.vg)? else {
            return Ok(());
        };
        let (_, r) = covering_lease(&sv.vg, &places(&scan, sv), lv)?;
        Ok(h.manager.let_go(&r.lockspace, &[r.name])?)
    }

    /// The device of LV `lv` when it is active on this host.
    pub fn active_device(
        &self,
        vg: &str,
        lv: &str,
        backend: &dyn Backend,
    ) -> Result<Option<PathBuf>, Error> {
        Ok(backend.active(&self.placement(vg, lv)?)?)
    }

    /// Whether LV `lv` is live in this host's kernel: active, or (a thin pool) up under an
    /// active thin LV although the pool LV itself is not active, as lvm2 counts it.
    pub fn live(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<bool, Error> {
        live(backend, &self.placement(vg, lv)?)
    }

    /// lvm2's rule for `lvchange --discards`: the kernel turns a thin pool's discard support
    /// on or off (to or from `ignore`) only while the pool is inactive, so that change of
    /// pool `pool` is refused while the pool is live on this host through `backend`. (A pool
    /// active on another host is refused by its lease.)
    pub fn check_discard_switch(
        &self,
        vg: &str,
        pool: &str,
        opts: &edit::thin::PoolOptions,
        backend: &dyn Backend,
    ) -> Result<(), Error> {
        let v = self.vg(vg)?;
        let Some(p) = v.lv(pool).and_then(|l| l.pool()) else {
            return Ok(());
        };
        if !opts.switches_discard_support(p) || !self.live(vg, pool, backend)? {
            return Ok(());
        }
        Err(edit::refused(
            format!("{vg}/{pool}"),
            "Cannot change support for discards while the pool volume is active",
        )
        .into())
    }

    /// Refreshes an active LV as `lvchange --refresh` does: [`Session::refresh_devices`],
    /// then [`Session::clear_delivered`] (a commit, when a thin pool's queue was delivered).
    pub fn refresh(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<Placement, Error> {
        let (placement, live) = self.refresh_devices(vg, lv, backend)?;
        // Not live here: no queue was delivered, none is cleared.
        if live {
            self.clear_delivered(&placement, "lvchange --refresh")?;
        }
        Ok(placement)
    }

    /// Brings an active LV's device up to the metadata: its size after `lvextend`; for a
    /// thin LV also its pool's size and the pool's queued messages (cleared by
    /// [`Session::clear_delivered`]: this writes no metadata). The caller holds the LV's
    /// lease (a thin LV's: its pool's); in a shared VG the lock manager must say this host
    /// still holds it. Returns the LV's placement and whether it is live here (when not,
    /// nothing was done and nothing is to be cleared).
    pub fn refresh_devices(
        &self,
        vg: &str,
        lv: &str,
        backend: &dyn Backend,
    ) -> Result<(Placement, bool), Error> {
        let scan = self.current();
        let sv = scan.vg(vg)?;
        let at = places(&scan, sv);
        let placement = activate::place(&sv.vg, lv, &at.paths)?;
        // Not live here: nothing to bring up to date, and no queue delivered to clear.
        if !live(backend, &placement)? {
            return Ok((placement, false));
        }
        // In a shared VG only under the lease, still held by this host in a healthy
        // lockspace: a device whose lease is lost stays as it is (fenced).
        if let Some(h) = self.host_for(&sv.vg)? {
            let (_, r) = covering_lease(&sv.vg, &at, lv)?;
            if !h.manager.standing()?.holds(&r.lockspace, &r.name) {
                return Err(lease::LeaseError::NotJoined {
                    lockspace: r.lockspace,
                }
                .into());
            }
        }
        backend.refresh(&placement)?;
        Ok((placement, true))
    }
}

/// A VG read under its lease for an activation ([`Session::read_for_activation`]): the
/// VG lease (shared) is held until the LV's lease is, then let go.
pub struct ActivationRead<'s> {
    session: &'s Session,
    scan: Arc<Scan>,
    locks: ReadLocks,
    vg: Vg,
}

impl ActivationRead<'_> {
    /// The VG as read under its lease.
    pub fn vg(&self) -> &Vg {
        &self.vg
    }

    /// Brings LV `lv` up, as [`Session::activate_devices`] describes, on this read.
    pub fn activate(
        self,
        lv: &str,
        shared: bool,
        read_only: bool,
        backend: &dyn Backend,
    ) -> Result<Activation, Error> {
        let vg = self.vg.name.as_str();
        let scan = &self.scan;
        let sv = scan.vg(vg)?;
        let at = places(scan, sv);
        let placement = activate::place(&sv.vg, lv, &at.paths)?;
        // As lvmlockd: only linear and striped LVs are active on several hosts at once (two
        // hosts' thin pools would both write one pool's metadata).
        let plain = sv.vg.lv(lv).is_some_and(|l| {
            l.segments
                .iter()
                .all(|s| matches!(s.kind, crate::model::SegKind::Striped(_)))
        });
        if shared && !plain {
            return Err(edit::refused(
                format!("{vg}/{lv}"),
                "Shared activation not compatible with LV type",
            )
            .into());
        }
        let mode = if shared {
            lease::Mode::Shared
        } else {
            lease::Mode::Exclusive
        };
        let lease = match self.session.host_for(&sv.vg)? {
            Some(h) => {
                h.check_joined(&sv.vg, &at)?;
                let (owner, r) = covering_lease(&sv.vg, &at, lv)?;
                let key = format!("{vg}/{owner}");
                let mut pools = self
                    .session
                    .pool_leases
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                // A thin pool's lease held for another of its thin LVs active here covers
                // this one too (lvmlockd's lock of the pool, as a count).
                let shared_hold = match (&placement.layout, pools.get(&key)) {
                    (Layout::Thin { .. }, Some((m, w))) if *m == mode => w.upgrade(),
                    _ => None,
                };
                let held = match shared_hold {
                    Some(held) => held,
                    None => {
                        // Persistent, as lvmlockd takes it: should this process end while
                        // the LV is active, the host keeps the lease as an orphan and the LV
                        // stays protected; the next process adopts it here, or releases it
                        // on deactivation.
                        h.acquire_lv(&r, mode)?;
                        let held = Arc::new(lease::Held::new(h.clone(), r, "LV"));
                        if matches!(placement.layout, Layout::Thin { .. }) {
                            pools.retain(|_, (_, w)| w.strong_count() > 0);
                            pools.insert(key, (mode, Arc::downgrade(&held)));
                        }
                        held
                    }
                };
                Some((held, mode))
            }
            None => None,
        };
        drop(self.locks);
        // Without leases, this session's count of the pool stands in for its lease.
        let local = match (&lease, &placement.layout) {
            (None, Layout::Thin { pool, .. } | Layout::Pool(pool)) => {
                Some(self.session.local_pools.hold(vg, &pool.name))
            }
            _ => None,
        };
        // The activation owns the lease from here: a backend failure releases it.
        let mut held = Activation::new(placement, PathBuf::new(), lease);
        if let Some(h) = local {
            held = held.with_local_hold(h);
        }
        held.device = backend.activate(&held.placement, read_only)?;
        Ok(held)
    }
}

/// The LV whose lease covers LV `lv` of `vg` (a thin LV's pool; any other LV itself), with
/// that lease.
pub(super) fn covering_lease<'a>(
    vg: &'a Vg,
    at: &lease::VgPlaces,
    lv: &'a str,
) -> Result<(&'a str, lease::ResourceSpec), lease::LeaseError> {
    let owner = vg.lv(lv).and_then(|l| l.thin_pool()).unwrap_or(lv);
    let r = lease::layout::lv_lease(vg, &at.paths, owner, at.geometry).ok_or_else(|| {
        lease::LeaseError::Manager {
            what: format!("LV {}/{owner}", vg.name),
            why: "has no lease (lock_args) in a shared VG".into(),
        }
    })?;
    Ok((owner, r))
}

/// See [`Session::live`].
fn live(backend: &dyn Backend, p: &Placement) -> Result<bool, Error> {
    Ok(backend.active(p)?.is_some() || backend.pool_status(p)?.is_some())
}
