//! A host's leases: construction, the fencing gate, lockspaces, the VG and global leases
//! around a change, and an LV's lease taken for its activation.

use super::*;

impl Host {
    /// This host as `host_id` through `manager`, waiting up to `wait` for leases other hosts
    /// hold; VG leases are released after every change, as lvmlockd does.
    pub fn new(
        manager: std::sync::Arc<dyn LeaseManager>,
        host_id: u64,
        io_timeout: u32,
        wait: std::time::Duration,
    ) -> Self {
        let linger = std::sync::Arc::new(linger::Linger::none(manager.clone()));
        Self {
            manager,
            host_id,
            io_timeout,
            wait,
            linger,
            observer: None,
            gate: None,
        }
    }

    /// The same host, taking leases that let it write only while `gate` passes.
    pub fn with_gate(mut self, gate: std::sync::Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Checks the gate (see [`Gate`]).
    pub(super) fn gated(&self) -> Result<(), LeaseError> {
        match &self.gate {
            Some(g) => g.check().map_err(|why| LeaseError::Unfenced { why }),
            None => Ok(()),
        }
    }

    /// Takes LV lease `r` for this process only, once the gate passes (a data copy or an
    /// erasure: writes to the LUN under the lease, released when done).
    pub fn acquire_gated(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError> {
        self.gated()?;
        self.manager.acquire(r, mode, false).map(drop)
    }

    /// Gives back the VG lease kept after a change in lockspace `lockspace`, if any.
    pub fn release_kept(&self, lockspace: &str) -> Result<(), LeaseError> {
        self.linger.release_lockspace(lockspace)
    }

    /// Takes LV lease `r` for an activation ([`LeaseManager::acquire_persistent`]), once the
    /// gate passes.
    pub fn acquire_lv(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError> {
        self.gated()?;
        self.manager.acquire_persistent(r, mode)
    }

    /// The same, telling `observer` what every VG lease request cost.
    pub fn with_observer(mut self, observer: std::sync::Arc<dyn observe::LeaseObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Keeps an exclusive VG lease for `idle` after a change, so that the next change (or
    /// read) of this host within that time reuses it instead of acquiring it again; one
    /// acquire is reused for at most `max_hold`. Zero `idle` keeps nothing. See
    /// `lease/linger.rs` for why this is safe beside lvmlockd hosts.
    pub fn with_linger(mut self, idle: std::time::Duration, max_hold: std::time::Duration) -> Self {
        self.linger =
            std::sync::Arc::new(linger::Linger::new(self.manager.clone(), idle, max_hold));
        self
    }

    /// The lockspace of `vg`.
    pub fn lockspace(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
    ) -> Result<LockspaceSpec, LeaseError> {
        layout::lockspace(vg, &at.paths, self.host_id, at.geometry)
            .ok_or_else(|| missing(vg, "lockspace"))
    }

    /// Joins `vg`'s lockspace (`vgchange --lockstart`).
    pub fn start(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        tracing::info!(lockspace = %ls.name, host_id = self.host_id, "joining lockspace");
        self.manager.join(&ls, self.io_timeout)
    }

    /// Fails with [`LeaseError::NotJoined`] unless this host is in `vg`'s lockspace.
    pub fn check_joined(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        if self.manager.joined(&ls)? {
            Ok(())
        } else {
            Err(LeaseError::NotJoined { lockspace: ls.name })
        }
    }

    /// Leaves `vg`'s lockspace (`vgchange --lockstop`), releasing first the VG lease kept
    /// there.
    pub fn stop(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        self.linger.release_lockspace(&ls.name)?;
        self.manager.leave(&ls)
    }

    /// Takes `vg`'s VG lease in `mode` (exclusive to change the VG, shared to read it),
    /// retrying while another host holds it in a conflicting mode, up to [`Host::wait`]; a
    /// lease this host kept (see [`Host::with_linger`]) is reused. Give it back with
    /// [`Host::unlock_vg`]. Returns the lease, and true when it was kept since before the
    /// call (so whatever the caller read before the call was read under it).
    pub fn lock_vg(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        mode: Mode,
    ) -> Result<(ResourceSpec, bool), LeaseError> {
        let r =
            layout::vg_lease(vg, &at.paths, at.geometry).ok_or_else(|| missing(vg, "VG lease"))?;
        let started = std::time::Instant::now();
        let deadline = started + self.wait;
        let busy = std::cell::Cell::new(0);
        if mode == Mode::Exclusive {
            self.gated()?;
        }
        // A kept lease proves the lockspace joined: sanlock ends the holders of a lost one.
        // The value block is asked for so that a release can store one (sanlock keeps it
        // only for leases acquired with it).
        let kept = self.linger.take(&r, mode, deadline, || {
            self.check_joined(vg, at)?;
            self.acquire_waiting(&vg.name, &r, mode, true, &busy)
        });
        if let Some(o) = &self.observer {
            o.vg_lease(&observe::VgLeaseTaken {
                vg: &vg.name,
                waited: started.elapsed(),
                busy: busy.get(),
                outcome: match kept {
                    Ok(true) => observe::Outcome::Kept,
                    Ok(false) => observe::Outcome::Acquired,
                    Err(_) => observe::Outcome::Failed,
                },
            });
        }
        let kept = kept?;
        Ok((r, kept))
    }

    /// Gives back a VG lease from [`Host::lock_vg`], to be stored with `lvb` when given: kept
    /// for a moment when this host lingers, released otherwise.
    pub fn unlock_vg(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        self.linger.give_back(r, lvb, false)
    }

    /// Like [`Host::unlock_vg`], but released at once (the VG is being removed).
    pub fn unlock_vg_now(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        self.linger.give_back(r, lvb, true)
    }

    /// Takes the global lease in `mode` when `vg` holds the enabled one and this host has
    /// joined `vg`'s lockspace (lvmlockd uses the GL of a started lockspace only); `None`
    /// when it does not.
    pub fn lock_gl(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        mode: Mode,
    ) -> Result<Option<ResourceSpec>, LeaseError> {
        let Ok(ls) = self.lockspace(vg, at) else {
            return Ok(None);
        };
        if !self.manager.joined(&ls)? || !self.holds_gl(vg, at)? {
            return Ok(None);
        }
        let r = layout::gl_lease(vg, &at.paths, layout::GL_NAME, at.geometry)
            .ok_or_else(|| missing(vg, "GL lease"))?;
        self.acquire_waiting(&vg.name, &r, mode, false, &std::cell::Cell::new(0))?;
        Ok(Some(r))
    }

    /// Gives `r` back unchanged where nothing can be done about a failure (guards being
    /// dropped): logs it, naming the `kind` of lease.
    pub fn release_or_warn(&self, r: &ResourceSpec, kind: &str) {
        if let Err(e) = self.linger.give_back(r, None, false) {
            tracing::warn!(lease = %r.name, kind, error = %e, "releasing a lease failed");
        }
    }

    /// Acquires `r`, retrying while another host holds it, up to [`Host::wait`]; counts
    /// those refusals in `busy`.
    pub(super) fn acquire_waiting(
        &self,
        vg: &str,
        r: &ResourceSpec,
        mode: Mode,
        want_lvb: bool,
        busy: &std::cell::Cell<u32>,
    ) -> Result<Option<Lvb>, LeaseError> {
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            match self.manager.acquire(r, mode, want_lvb) {
                Ok(lvb) => return Ok(lvb),
                Err(LeaseError::Busy { .. }) if std::time::Instant::now() < deadline => {
                    busy.set(busy.get().saturating_add(1));
                    tracing::debug!(vg, lease = %r.name, "lease busy; retrying");
                    // 20-80 ms, different per process, so contending hosts do not stay in step.
                    let jitter = u64::from(std::process::id() % 61);
                    std::thread::sleep(std::time::Duration::from_millis(20 + jitter));
                }
                Err(LeaseError::Busy { name }) => {
                    return Err(LeaseError::Manager {
                        what: format!("VG {vg} lease {name}"),
                        why: format!("still held by another host after {:?}", self.wait),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Does the shared VG `vg` hold the enabled global lease (`GLLK` in its GL slot)?
    pub fn holds_gl(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<bool, LeaseError> {
        match layout::gl_lease(vg, &at.paths, layout::GL_NAME, at.geometry) {
            Some(gl) => Ok(self.manager.resource_name(&gl)?.as_deref() == Some(layout::GL_NAME)),
            None => Ok(false),
        }
    }
}

/// `local/host_id` of lvm2's lvmlocal.conf (in `LVM_SYSTEM_DIR` or /etc/lvm).
pub fn lvmlocal_host_id() -> Option<u64> {
    let dir = std::env::var("LVM_SYSTEM_DIR").unwrap_or_else(|_| "/etc/lvm".into());
    let text = std::fs::read_to_string(std::path::Path::new(&dir).join("lvmlocal.conf")).ok()?;
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.strip_prefix("host_id"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .find_map(|v| v.trim().parse().ok())
}
