//! The node's part of fencing (see [`crate::fencing`]): volumes live here without their
//! lease are fenced, forgotten, their leases let go and, when nothing has them open, their
//! devices removed.

use std::collections::HashSet;

use lvmeta::activate::dm_names::dm_name;
use lvmeta::lease::Standing;

use crate::fencing::Swept;
use crate::volume::Volumes;

use super::shared::Remote;
use super::Node;

impl Node {
    /// Fences every volume of served VG `vg` that is live on this host while this host
    /// does not hold its lease in a healthy lockspace (as `standing`, then a fresh account,
    /// both say), then lets its lease go; records what it did in `out`.
    ///
    /// Invariants:
    /// - a lease is acquired before its device is made and let go after it is removed, so a
    ///   volume found live and then unheld by an account asked after that is really
    ///   unprotected (one staged meanwhile shows its lease in the second account);
    /// - a volume being staged or unstaged (its in-flight guard taken) is left to the next
    ///   sweep: that call decides with the lease in hand;
    /// - a staged entry goes only once its stack is fenced; every staged entry of a fenced
    ///   stack goes (a thin pool's lease covers all its thin LVs), releasing the lease.
    pub(crate) fn fence_unheld(&self, vg: &str, standing: &Standing, out: &mut Swept) {
        let session = self.backend.session();
        let act = self.config.activation.as_ref();
        let volumes = match Volumes::new(session, vg).list_seen() {
            Ok(v) => v,
            // Never read by this process (it started while the LUN did not answer): what
            // the lost leases tell is all there is.
            Err(e) => return self.fence_unknown(vg, standing, &e.to_string(), out),
        };
        // Only volumes with a device here are looked at (one listing, not one per volume).
        let present: HashSet<String> = match act.devices() {
            Ok(d) => d.into_iter().map(|(n, _)| n).collect(),
            Err(e) => {
                out.failed.push(format!("{vg}: listing devices: {e}"));
                return;
            }
        };
        let unheld = |s: &Standing, lv: &str, out: &mut Swept| {
            session
                .live_without_lease(vg, lv, s, act)
                .unwrap_or_else(|e| {
                    tracing::error!(vg, lv, error = %e, "fencing sweep: cannot tell whether the volume is protected");
                    out.failed.push(format!("{vg}/{lv}: {e}"));
                    false
                })
        };
        let mut candidates = Vec::new();
        for v in volumes {
            if present.contains(&dm_name(vg, &v.name)) && unheld(standing, &v.name, out) {
                candidates.push(v.name);
            }
        }
        if candidates.is_empty() {
            return;
        }
        let fresh = match session.standing() {
            Ok(Some(s)) => s,
            other => {
                out.failed
                    .push(format!("{vg}: asking the lock manager again: {other:?}"));
                return;
            }
        };
        for lv in candidates {
            let id = format!("{vg}/{lv}");
            let Ok(_busy) = self.backend.inflight().enter(&id) else {
                continue;
            };
            if !unheld(&fresh, &lv, out) {
                continue;
            }
            self.close_exports(vg, Some(&lv));
            match session.fence(vg, &lv, act) {
                Ok(devices) => {
                    tracing::error!(volume_id = %id, ?devices, "fenced: this host no longer holds the volume's lease; its I/O now fails");
                    self.forget_fenced(vg);
                    if let Err(e) = session.let_go_covering(vg, &lv) {
                        tracing::warn!(volume_id = %id, error = %e, "letting go of a fenced volume's lease");
                    }
                    // Removed now unless something still has it open (a mount, a pod's
                    // process): then kubelet's NodeUnstageVolume removes it.
                    match session.deactivate_seen(vg, &lv, act) {
                        Ok(()) => {
                            tracing::info!(volume_id = %id, "fenced volume's devices removed")
                        }
                        Err(e) => {
                            tracing::info!(volume_id = %id, reason = %e, "fenced volume's devices stay until it is unstaged")
                        }
                    }
                    out.fenced.push(id);
                }
                Err(e) => {
                    tracing::error!(volume_id = %id, error = %e, "cannot fence a volume whose lease is lost: its lease stays held, so a failed lockspace ends in a watchdog reset");
                    out.failed.push(format!("{id}: {e}"));
                }
            }
        }
    }

    /// Forgets every staged volume of `vg` whose stack is fenced, removing its devices where
    /// nothing has them open and releasing its lease (one that is being let go anyway).
    fn forget_fenced(&self, vg: &str) {
        let act = self.config.activation.as_ref();
        let gone: Vec<_> = {
            let mut staged = self.staged();
            let ids: Vec<String> = staged
                .iter()
                .filter(|(_, s)| {
                    s.activation.as_ref().is_some_and(|a| {
                        a.placement.vg == vg && act.is_fenced(&a.placement).unwrap_or(true)
                    })
                })
                .map(|(id, _)| id.clone())
                .collect();
            ids.into_iter()
                .filter_map(|id| staged.remove(&id))
                .collect()
        };
        // Their exports go too (already closed when they were the fenced candidates).
        if let Some(nbd) = self.nbd.as_deref() {
            for s in &gone {
                if let Some(Remote::Served { board, .. }) = &s.remote {
                    nbd.remove(&board.lv_id);
                }
            }
        }
        // Removed where nothing has them open, and released, outside the map's lock.
        for a in gone.into_iter().filter_map(|s| s.activation) {
            if a.deactivate(act).is_ok() {
                tracing::info!(vg, lv = %a.placement.lv, "fenced volume's devices removed");
            }
        }
    }

    /// Fences, with no metadata of `vg` at hand, every device of it the lost leases (or,
    /// with none, its name) point at.
    fn fence_unknown(&self, vg: &str, standing: &Standing, why: &str, out: &mut Swept) {
        let act = self.config.activation.as_ref();
        match self.backend.session().fence_lost(vg, standing, act) {
            Ok(devices) if devices.is_empty() => {}
            Ok(devices) => {
                // After the fence here (the served LVs are not known before it): their
                // requests failing meanwhile were held, and now end unanswered.
                self.close_exports(vg, None);
                tracing::error!(vg, ?devices, reason = %why, "fenced every device of the VG on this host: its lockspace is lost and its metadata unknown here");
                self.forget_fenced(vg);
                out.fenced
                    .extend(devices.into_iter().map(|d| format!("{vg}: {d}")));
            }
            Err(f) => out
                .failed
                .push(format!("{vg}: {why}; by its lost leases: {f}")),
        }
    }

    /// Closes this node's NBD exports of `vg` (of LV `lv` only, when given) before their
    /// devices are fenced: clients then get no reply (their kernel requeues the requests
    /// and waits for another server, a pause) rather than the fenced device's I/O errors,
    /// and their probes find the export gone.
    fn close_exports(&self, vg: &str, lv: Option<&str>) {
        let Some(nbd) = self.nbd.as_deref() else {
            return;
        };
        let served: Vec<String> = self
            .staged()
            .values()
            .filter_map(|s| match &s.remote {
                Some(Remote::Served { board, .. })
                    if board.vg == vg && lv.is_none_or(|l| board.lv == l) =>
                {
                    Some(board.lv_id.clone())
                }
                _ => None,
            })
            .collect();
        for lv_id in served {
            if nbd.remove(&lv_id).is_some() {
                tracing::warn!(vg, lv_id = %lv_id, "NBD export closed: this host lost the pool's lease; its clients wait for another server");
            }
        }
    }
}
