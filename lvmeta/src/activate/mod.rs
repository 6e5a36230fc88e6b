//! Activation: making an LV's blocks a block device on this host, without lvm.
//!
//! [`plan`] (pure) turns an LV into byte ranges of the PVs' devices; a [`Backend`] makes a
//! device of them. The `dm` backend (feature `dm`) builds device-mapper tables for linear
//! LVs of any shape; [`loopdev::LoopBackend`] exposes one-piece linear LVs as
//! loop devices over the PV's device (offset and size limit, direct I/O, read-only when
//! asked), for kernels without device-mapper; [`FakeBackend`] keeps activations in memory for
//! tests. Leases are not taken here: [`crate::session::Session::activate`] takes the LV's lease
//! around a backend call.

#[cfg(feature = "dm")]
pub mod dm;
pub mod dm_names;
pub mod fence;
pub mod loopdev;
mod placement;
pub mod plan;
pub(crate) mod runs;
pub mod status;
pub mod thin;
pub mod wrap;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

pub use plan::{place, Layout, Piece, Placement, Stripe};

/// Why an LV could not be activated or deactivated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActivateError {
    /// The LV is not in the VG.
    #[error("LV {vg}/{lv} not found")]
    NoLv {
        /// The VG.
        vg: String,
        /// The LV.
        lv: String,
    },
    /// A PV the LV uses is not visible on this host.
    #[error("LV {vg}/{lv}: PV #{pv} of the VG is not visible on this host")]
    MissingPv {
        /// The VG.
        vg: String,
        /// The LV.
        lv: String,
        /// Index of the PV in the VG.
        pv: usize,
    },
    /// The backend cannot build this layout: the kernel feature that would.
    #[error("LV {lv}: {why}")]
    Unsupported {
        /// `vg/lv`.
        lv: String,
        /// What is missing (the kernel feature).
        why: String,
    },
    /// A device on this host maps the LV's bytes (it is active or in use here).
    #[error("LV {lv} is in use on this host: {by} maps its extents")]
    InUse {
        /// `vg/lv`.
        lv: String,
        /// The device that maps them.
        by: String,
    },
    /// A system call failed.
    #[error("{device}: {why}")]
    Io {
        /// The device or control file.
        device: String,
        /// What failed.
        why: String,
    },
}

/// This host's best backend: device-mapper when the kernel has it (feature `dm`), else loop
/// devices (one-piece linear LVs only); `None` when neither is there.
pub fn best() -> Option<std::sync::Arc<dyn Backend>> {
    #[cfg(feature = "dm")]
    if let Some(d) = dm::DmBackend::probe() {
        return Some(std::sync::Arc::new(d));
    }
    loopdev::LoopBackend::probe().map(|l| std::sync::Arc::new(l) as std::sync::Arc<dyn Backend>)
}

/// Makes LVs block devices on this host.
pub trait Backend: Send + Sync {
    /// A short name for logs and messages (`loop`, `fake`).
    fn name(&self) -> &'static str;
    /// The device of `p` when it is active on this host.
    fn active(&self, p: &Placement) -> Result<Option<PathBuf>, ActivateError>;
    /// Makes `p` a device (read-only when asked) and returns its path; an LV already active
    /// with the same access is returned as is.
    fn activate(&self, p: &Placement, read_only: bool) -> Result<PathBuf, ActivateError>;
    /// Removes `p`'s device; nothing to do when it is not active.
    fn deactivate(&self, p: &Placement) -> Result<(), ActivateError>;
    /// Brings `p`'s active device up to the metadata: its new size (the LV was extended in
    /// place) and, for a thin LV or pool, the pool's size and its queued messages.
    fn refresh(&self, p: &Placement) -> Result<(), ActivateError>;
    /// The kernel's status of the thin pool under `p` (a thin LV or a pool) when that pool
    /// is active on this host; `None` for other layouts and inactive pools. A failed pool
    /// is an error saying so.
    fn pool_status(&self, p: &Placement) -> Result<Option<thin::PoolStatus>, ActivateError>;
    /// The devices on this host that map any byte of `pieces`, whatever LV they were made
    /// for: a range that must not be written or handed out while one does.
    fn users(&self, pieces: &[&Piece]) -> Result<Vec<PathBuf>, ActivateError>;
    /// Can this backend fence ([`Backend::fence`])?
    fn can_fence(&self) -> bool;
    /// Replaces the table of every device of `p`'s stack on this host with an `error`
    /// target of the same size ([`fence::stack`]), in place: their users get I/O errors at
    /// once and nothing reaches the PVs through them any more. Returns the devices fenced
    /// (none when `p` is not active here). The devices stay until deactivated.
    fn fence(&self, p: &Placement) -> Result<Vec<String>, ActivateError>;
    /// Has a device of `p`'s stack been fenced (and not removed since)?
    fn is_fenced(&self, p: &Placement) -> Result<bool, ActivateError>;
    /// Every device this backend made on this host, by name and uuid (for fencing when the
    /// metadata cannot be read: [`fence::by_lost_leases`]); none for a backend without
    /// such names.
    fn devices(&self) -> Result<Vec<(String, String)>, ActivateError>;
    /// Fences device `name` (one of [`Backend::devices`]) in place, as [`Backend::fence`].
    fn fence_device(&self, name: &str) -> Result<(), ActivateError>;
    /// Makes wrapper `w` ([`wrap`]) over block device `backing` for `sectors`, read-only when
    /// asked; the upper device's path. Only device-mapper backends have wrappers.
    fn wrap(
        &self,
        w: &wrap::Wrap,
        backing: &str,
        sectors: crate::units::Sectors,
        read_only: bool,
    ) -> Result<PathBuf, ActivateError> {
        let _ = (backing, sectors, read_only);
        Err(no_wrappers(self.name(), w))
    }
    /// Removes wrapper `w` (upper, then lower); refused while its upper device is open.
    fn unwrap(&self, w: &wrap::Wrap) -> Result<(), ActivateError> {
        Err(no_wrappers(self.name(), w))
    }
    /// The `major:minor` `w`'s lower device maps, when `w` is made on this host.
    fn wrapped(&self, w: &wrap::Wrap) -> Result<Option<(u32, u32)>, ActivateError> {
        let _ = w;
        Ok(None)
    }
    /// Holds `w`'s upper device: I/O in flight completes, new I/O waits for the release.
    fn hold(&self, w: &wrap::Wrap) -> Result<(), ActivateError> {
        Err(no_wrappers(self.name(), w))
    }
    /// Is `w`'s upper device held now (false when `w` is not made here)?
    fn held(&self, w: &wrap::Wrap) -> Result<bool, ActivateError> {
        let _ = w;
        Ok(false)
    }
    /// Points `w`'s lower device at block device `backing` (while held).
    fn switch(
        &self,
        w: &wrap::Wrap,
        backing: &str,
        sectors: crate::units::Sectors,
        read_only: bool,
    ) -> Result<(), ActivateError> {
        let _ = (backing, sectors, read_only);
        Err(no_wrappers(self.name(), w))
    }
    /// Releases `w`'s upper device: queued I/O goes on to the lower device's backing.
    fn release(&self, w: &wrap::Wrap) -> Result<(), ActivateError> {
        Err(no_wrappers(self.name(), w))
    }
    /// Gives `w` a new size over `backing`, which grew under it (I/O pauses meanwhile).
    fn resize_wrap(
        &self,
        w: &wrap::Wrap,
        backing: &str,
        sectors: crate::units::Sectors,
        read_only: bool,
    ) -> Result<(), ActivateError> {
        let _ = (backing, sectors, read_only);
        Err(no_wrappers(self.name(), w))
    }
}

/// A backend without device-mapper cannot stack a wrapper.
fn no_wrappers(backend: &str, w: &wrap::Wrap) -> ActivateError {
    ActivateError::Unsupported {
        lv: w.upper_name(),
        why: format!("the {backend} backend has no wrapper devices: they need device-mapper"),
    }
}

/// Activations in memory (tests): one-piece linear LVs, as the loop backend; with
/// [`FakeBackend::with_thin`] also thin LVs and pools, over a simulated kernel thin pool that
/// keeps its transaction id and devices from one activation to the next (as the pool's
/// metadata LV does) and checks every message it gets.
#[derive(Debug, Default)]
pub struct FakeBackend {
    active: Mutex<HashMap<(String, String), (Placement, bool)>>,
    thin: Option<Mutex<HashMap<String, FakePool>>>,
    /// Devices fenced, in order (every one ever).
    fenced: Mutex<Vec<String>>,
    /// Devices fenced and not removed since.
    fenced_now: Mutex<Vec<String>>,
}

/// A simulated kernel thin pool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FakePool {
    /// Its transaction id.
    pub transaction_id: u64,
    /// Its thin devices.
    pub devices: std::collections::BTreeSet<u32>,
    /// Every message it got, in order.
    pub received: Vec<String>,
    /// The feature words of its table as last loaded ([`thin::PoolPlan::features`]).
    pub features: Vec<String>,
    /// The status line it reports instead of a healthy one (a simulated failure).
    pub status: Option<String>,
}

impl FakePool {
    /// Applies `m` as dm-thin does: a create of an existing id, a snapshot of or a delete of
    /// a missing one, and a wrong `set_transaction_id` fail.
    fn take(&mut self, m: thin::PoolMessage) -> Result<(), String> {
        use thin::PoolMessage as M;
        self.received.push(m.to_string());
        match m {
            M::CreateThin(id) if self.devices.insert(id) => Ok(()),
            M::CreateSnap { id, origin }
                if self.devices.contains(&origin) && self.devices.insert(id) =>
            {
                Ok(())
            }
            M::Delete(id) if self.devices.remove(&id) => Ok(()),
            M::SetTransactionId { from, to } if from == self.transaction_id => {
                self.transaction_id = to;
                Ok(())
            }
            m => Err(format!("message {m} refused")),
        }
    }
}

impl FakeBackend {
    /// A backend that also activates thin LVs and pools (see the type's documentation).
    pub fn with_thin() -> Self {
        Self {
            thin: Some(Mutex::default()),
            ..Self::default()
        }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), (Placement, bool)>> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Is `vg/lv` active, and read-only?
    pub fn state(&self, vg: &str, lv: &str) -> Option<bool> {
        self.map()
            .get(&(vg.to_owned(), lv.to_owned()))
            .map(|(_, ro)| *ro)
    }

    /// Every device fenced so far, in order ([`Backend::fence`]), removed since or not.
    pub fn fenced(&self) -> Vec<String> {
        self.fenced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The simulated kernel pool of the pool LV with device uuid `dm_uuid`, after `change`
    /// (which simulates another tool), if the pool was ever activated.
    pub fn pool(&self, dm_uuid: &str, change: impl FnOnce(&mut FakePool)) -> Option<FakePool> {
        let mut pools = self
            .thin
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let p = pools.get_mut(dm_uuid)?;
        change(p);
        Some(p.clone())
    }

    /// Loads the table of the simulated kernel pool of `plan` and brings the pool up to date
    /// by lvm2's rule.
    fn deliver(&self, p: &Placement, plan: &thin::PoolPlan) -> Result<(), ActivateError> {
        let Some(pools) = &self.thin else {
            return Err(needs_device_mapper(p));
        };
        let mut pools = pools.lock().unwrap_or_else(|p| p.into_inner());
        let kernel = pools.entry(plan.dm_uuid.clone()).or_default();
        kernel.features = plan.features().into_iter().map(str::to_owned).collect();
        for m in thin::deliveries(plan, kernel.transaction_id)? {
            kernel.take(m).map_err(|why| ActivateError::Io {
                device: format!("fake {}-tpool", plan.name),
                why,
            })?;
        }
        Ok(())
    }
}

/// Where the fake puts `p`'s device: a path no machine has, named as device-mapper's node.
fn fake_path(p: &Placement) -> PathBuf {
    PathBuf::from("/dev/fake").join(dm_names::dm_name(&p.vg, &p.lv))
}

/// The error a one-piece backend gives for any other layout.
pub fn needs_device_mapper(p: &Placement) -> ActivateError {
    let why = match &p.layout {
        Layout::Linear(pieces) => format!(
            "{} pieces need device-mapper's linear target (dm-linear), which this kernel lacks",
            pieces.len()
        ),
        Layout::Striped(_) => {
            "striped LVs need device-mapper's striped target (dm-stripe), which this kernel lacks"
                .into()
        }
        Layout::Thin { .. } | Layout::Pool(_) => {
            "thin LVs need device-mapper's thin-pool target (dm-thin-pool), which this kernel lacks"
                .into()
        }
        Layout::Other(t) => format!(
            "{t} LVs need device-mapper (dm-{}), which this kernel lacks",
            t.split(' ').next().unwrap_or(t)
        ),
    };
    ActivateError::Unsupported {
        lv: format!("{}/{}", p.vg, p.lv),
        why,
    }
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }
    fn active(&self, p: &Placement) -> Result<Option<PathBuf>, ActivateError> {
        Ok(self.state(&p.vg, &p.lv).map(|_| fake_path(p)))
    }
    fn activate(&self, p: &Placement, read_only: bool) -> Result<PathBuf, ActivateError> {
        let thin = match &p.layout {
            Layout::Thin { pool, .. } | Layout::Pool(pool) => Some(pool),
            _ => None,
        };
        match thin {
            Some(pool) if self.state(&p.vg, &p.lv).is_none() => self.deliver(p, pool)?,
            None if p.single().is_none() => return Err(needs_device_mapper(p)),
            _ => {}
        }
        self.map()
            .entry((p.vg.clone(), p.lv.clone()))
            .or_insert((p.clone(), read_only));
        Ok(fake_path(p))
    }
    fn deactivate(&self, p: &Placement) -> Result<(), ActivateError> {
        self.map().remove(&(p.vg.clone(), p.lv.clone()));
        let name = dm_names::dm_name(&p.vg, &p.lv);
        self.fenced_now
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|f| *f != name);
        Ok(())
    }
    fn refresh(&self, p: &Placement) -> Result<(), ActivateError> {
        if self.state(&p.vg, &p.lv).is_none() {
            return Ok(());
        }
        match &p.layout {
            Layout::Thin { pool, .. } | Layout::Pool(pool) => self.deliver(p, pool)?,
            _ if p.single().is_none() => return Err(needs_device_mapper(p)),
            _ => {}
        }
        if let Some(e) = self.map().get_mut(&(p.vg.clone(), p.lv.clone())) {
            e.0 = p.clone();
        }
        Ok(())
    }
    fn pool_status(&self, p: &Placement) -> Result<Option<thin::PoolStatus>, ActivateError> {
        let (Layout::Thin { pool, .. } | Layout::Pool(pool)) = &p.layout else {
            return Ok(None);
        };
        if self.state(&p.vg, &p.lv).is_none() {
            return Ok(None);
        }
        let Some(kernel) = self.pool(&pool.dm_uuid, |_| {}) else {
            return Ok(None);
        };
        let line = kernel.status.unwrap_or_else(|| {
            format!(
                "{} 10/1024 {}/1024 - rw discard_passdown queue_if_no_space - 1024",
                kernel.transaction_id,
                kernel.devices.len()
            )
        });
        thin::parse_pool_status(&format!("fake {}-tpool", pool.name), &line).map(Some)
    }
    fn can_fence(&self) -> bool {
        true
    }
    fn fence(&self, p: &Placement) -> Result<Vec<String>, ActivateError> {
        // The LVs of the stack active here (a thin LV's pool: all its thin LVs).
        let lvs: Vec<String> = match &p.layout {
            Layout::Thin { pool, .. } | Layout::Pool(pool) => {
                let mut v: Vec<String> = pool.thin_lvs.iter().map(|(_, l)| l.clone()).collect();
                v.push(p.lv.clone());
                v
            }
            _ => vec![p.lv.clone()],
        };
        let mut done = Vec::new();
        for lv in lvs {
            if self.state(&p.vg, &lv).is_some() {
                let name = dm_names::dm_name(&p.vg, &lv);
                if !done.contains(&name) {
                    done.push(name);
                }
            }
        }
        self.fenced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(done.iter().cloned());
        self.fenced_now
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(done.iter().cloned());
        Ok(done)
    }
    fn devices(&self) -> Result<Vec<(String, String)>, ActivateError> {
        Ok(self
            .map()
            .values()
            .map(|(p, _)| (dm_names::dm_name(&p.vg, &p.lv), p.dm_uuid.clone()))
            .collect())
    }
    fn fence_device(&self, name: &str) -> Result<(), ActivateError> {
        for list in [&self.fenced, &self.fenced_now] {
            list.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(name.to_owned());
        }
        Ok(())
    }
    fn is_fenced(&self, p: &Placement) -> Result<bool, ActivateError> {
        let fenced = self.fenced_now.lock().unwrap_or_else(|p| p.into_inner());
        Ok(self.state(&p.vg, &p.lv).is_some() && fenced.contains(&dm_names::dm_name(&p.vg, &p.lv)))
    }
    fn users(&self, pieces: &[&Piece]) -> Result<Vec<PathBuf>, ActivateError> {
        Ok(self
            .map()
            .values()
            .filter(|(p, _)| {
                p.pieces()
                    .iter()
                    .any(|a| pieces.iter().any(|b| a.overlaps(b)))
            })
            .map(|(p, _)| fake_path(p))
            .collect())
    }
}

/// The thin pools active through this process in VGs without leases, counted by
/// activation: what stands in for the pool's lease there (one host, one process), so that a
/// change to a pool active here is refused as it is elsewhere ([`crate::lease::LeaseError::InUse`]).
#[derive(Debug, Clone, Default)]
pub struct LocalPools(std::sync::Arc<Mutex<HashMap<(String, String), usize>>>);

impl LocalPools {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), usize>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more activation of pool `vg/pool`, until the returned hold is dropped.
    pub fn hold(&self, vg: &str, pool: &str) -> LocalHold {
        let key = (vg.to_owned(), pool.to_owned());
        *self.map().entry(key.clone()).or_insert(0) += 1;
        LocalHold {
            pools: self.clone(),
            key,
        }
    }

    /// Is no pool active through this process?
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// Is pool `vg/pool` active through this process?
    pub fn held(&self, vg: &str, pool: &str) -> bool {
        self.map().contains_key(&(vg.to_owned(), pool.to_owned()))
    }
}

/// One activation's count in [`LocalPools`], given back when dropped.
#[derive(Debug)]
pub struct LocalHold {
    pools: LocalPools,
    key: (String, String),
}

impl Drop for LocalHold {
    fn drop(&mut self) {
        let mut m = self.pools.map();
        if let Some(n) = m.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.key);
            }
        }
    }
}

/// An LV active on this host: its device, and the LV lease held for as long as it is active
/// (released when this is dropped, see [`crate::lease::Held`]).
pub struct Activation {
    /// Where the LV's bytes are.
    pub placement: Placement,
    /// Its block device.
    pub device: PathBuf,
    /// Lease mode held (`None` outside shared VGs).
    pub mode: Option<crate::lease::Mode>,
    /// Shared by the activations of one thin pool's LVs in this process (the pool's lease
    /// covers them all): released when the last one goes.
    lease: Option<std::sync::Arc<crate::lease::Held>>,
    /// A thin pool held in a VG without leases.
    local: Option<LocalHold>,
}

impl std::fmt::Debug for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Activation")
            .field("placement", &self.placement)
            .field("device", &self.device)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Activation {
    /// An activation holding `lease` (in its mode) for `placement` at `device`.
    pub fn new(
        placement: Placement,
        device: PathBuf,
        lease: Option<(std::sync::Arc<crate::lease::Held>, crate::lease::Mode)>,
    ) -> Self {
        let mode = lease.as_ref().map(|l| l.1);
        Self {
            placement,
            device,
            mode,
            lease: lease.map(|(h, _)| h),
            local: None,
        }
    }

    /// The same activation, also holding its thin pool in a VG without leases.
    pub fn with_local_hold(mut self, hold: LocalHold) -> Self {
        self.local = Some(hold);
        self
    }

    /// Removes the device through `backend`; drop the activation afterwards to release the
    /// lease. Fails (lease still held) while the device is in use.
    pub fn deactivate(&self, backend: &dyn Backend) -> Result<(), ActivateError> {
        backend.deactivate(&self.placement)
    }

    /// Forgets the activation without releasing its lease, for a process about to end with
    /// the LV still in use: the host keeps the (persistent) lease as an orphan, so no other
    /// host can take the LV, and [`crate::session::Session::activate`] or
    /// [`crate::session::Session::deactivate`] of the next process adopts or releases it.
    pub fn keep_lease(mut self) {
        // Shared with another activation of the pool: the last one to go keeps it.
        if let Some(Ok(l)) = self.lease.take().map(std::sync::Arc::try_unwrap) {
            l.keep();
        }
    }
}
