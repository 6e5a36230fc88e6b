//! The node's part of fencing (see [`crate::fencing`]): volumes live here without their
//! lease are fenced, forgotten and their orphans dropped.

use lvmeta::lease::Standing;

use crate::fencing::Swept;
use crate::volume::Volumes;

use super::Node;

impl Node {
    /// Fences every volume of served VG `vg` that is live on this host while this host
    /// does not hold its lease in a healthy lockspace (as `standing`, then a fresh account,
    /// both say), then lets its lease and orphan go; records what it did in `out`.
    ///
    /// Invariants:
    /// - a lease is acquired before its device is made and let go after it is removed, so a
    ///   volume found live and then unheld by an account asked after that is really
    ///   unprotected (one staged meanwhile shows its lease in the second account);
    /// - the staged entry (and with it the lease) goes only once the fence succeeded.
    pub(crate) fn fence_unheld(&self, vg: &str, standing: &Standing, out: &mut Swept) {
        let session = self.backend.session();
        let act = self.config.activation.as_ref();
        let volumes = match Volumes::new(session, vg).list_seen() {
            Ok(v) => v,
            // Never read by this process (it started while the LUN did not answer): what
            // the lost leases tell is all there is.
            Err(e) => {
                match session.fence_lost(vg, standing, act) {
                    Ok(devices) if devices.is_empty() => {}
                    Ok(devices) => {
                        tracing::error!(vg, ?devices, reason = %e, "fenced every device of the VG on this host: its lockspace is lost and its metadata unknown here");
                        out.fenced
                            .extend(devices.into_iter().map(|d| format!("{vg}: {d}")));
                    }
                    Err(f) => out
                        .failed
                        .push(format!("{vg}: {e}; by its lost leases: {f}")),
                }
                return;
            }
        };
        let unheld = |s: &Standing, lv: &str| {
            session
                .live_without_lease(vg, lv, s, act)
                .unwrap_or_else(|e| {
                    tracing::debug!(vg, lv, error = %e, "fencing sweep: cannot tell");
                    false
                })
        };
        let candidates: Vec<String> = volumes
            .into_iter()
            .map(|v| v.name)
            .filter(|lv| unheld(standing, lv))
            .collect();
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
        for lv in candidates.iter().filter(|lv| unheld(&fresh, lv)) {
            let id = format!("{vg}/{lv}");
            match session.fence(vg, lv, act) {
                Ok(devices) => {
                    tracing::error!(volume_id = %id, ?devices, "fenced: this host no longer holds the volume's lease; its I/O now fails");
                    let gone = self.staged().remove(&id);
                    // Released (or let go, in a lost lockspace) outside the map's lock.
                    drop(gone);
                    if let Err(e) = session.drop_orphan(vg, lv) {
                        tracing::warn!(volume_id = %id, error = %e, "dropping the orphan of a fenced volume");
                    }
                    // Removed now unless something still has it open (a mount, a pod's
                    // process): then kubelet's NodeUnstageVolume removes it.
                    match session.deactivate_seen(vg, lv, act) {
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
                    tracing::error!(volume_id = %id, error = %e, "cannot fence a volume whose lease is lost: its lease stays held, so the watchdog resets this host if the lockspace failed");
                    out.failed.push(format!("{id}: {e}"));
                }
            }
        }
    }
}
