//! The verbs, with their I/O: lock (lvm2's file locks), scan, edit (pure, [`crate::edit`]),
//! commit ([`crate::commit`]). Each call re-reads the metadata under the lock, so lvmeta and
//! stock lvm commands on the same host never interleave.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::activate::{self, Activation, Backend, Layout, Placement};
use crate::commit::{self, flush, io_err, write, Area, LabelWrite};
use crate::dev::BlockDevice;
use crate::edit::{self, EditError, NewPv, VgSpec};
use crate::label::{PvLabel, PV_EXT_USED};
use crate::layout::{self, PvOptions};
use crate::lease;
use crate::lockfile::{self, FileLock, Resource};
use crate::mda::MdaHeader;
use crate::model::Vg;
use crate::scan::{self, Scan, ScanWarning, ScannedPv, ScannedVg};
use crate::text::Style;
use crate::uuid::Uuid;
use crate::Error;

mod data;
pub use data::{Erase, EraseWith, END_BYTES};

/// The largest transfer of [`Session::copy_lv`].
const COPY_CHUNK: u64 = 1 << 20;

/// What lvmeta writes as the generator line of metadata it commits.
pub const GENERATOR: &str = concat!("lvmeta ", env!("CARGO_PKG_VERSION"));

/// A set of devices lvmeta may read and write, and where lvm2's lock files live.
pub struct Session {
    devices: Vec<Box<dyn BlockDevice>>,
    lock_dir: Option<PathBuf>,
    run_dir: Option<PathBuf>,
    /// The last scan, kept up to date by [`Session::update`]; used again while the devices'
    /// labels and area headers still match it (see [`scan::Fingerprint`]).
    cache: Mutex<Option<Scan>>,
    /// This host's lock manager for shared VGs.
    host: Option<lease::Host>,
    /// Buffers of the last commit (printed text, padded copy), reused by the next one.
    scratch: Mutex<(String, Vec<u8>)>,
    /// Change shared VGs without leases (lvm2's `--nolocking`).
    nolocking: bool,
    /// Thin pools active through this session in VGs without leases.
    local_pools: activate::LocalPools,
    /// The thin pool leases held by this session's activations (`vg/pool` -> mode and the
    /// hold), shared by the pool's thin LVs active here.
    pool_leases: Mutex<PoolLeases>,
    /// Held by every change: the threads of one process take their turns here (the file
    /// lock does that only when there is a lock directory, and a host's VG lease is one
    /// lease for all of them).
    changing: Mutex<()>,
}

impl Session {
    /// A session over `devices`, taking no file locks (tests, images).
    pub fn new(devices: Vec<Box<dyn BlockDevice>>) -> Self {
        Self {
            devices,
            lock_dir: None,
            run_dir: None,
            cache: Mutex::new(None),
            host: None,
            nolocking: false,
            scratch: Mutex::new((String::new(), Vec::new())),
            local_pools: activate::LocalPools::default(),
            pool_leases: Mutex::default(),
            changing: Mutex::new(()),
        }
    }

    /// Takes leases in shared VGs as `host`.
    pub fn with_host(mut self, host: lease::Host) -> Self {
        self.host = Some(host);
        self
    }

    /// Changes shared VGs without leases (lvm2's `--nolocking`: only safe when no other host
    /// uses the VG).
    pub fn without_locking(mut self) -> Self {
        self.nolocking = true;
        self
    }

    /// The lease manager, or why a shared VG cannot be changed.
    fn host_for(&self, vg: &Vg) -> Result<Option<&lease::Host>, Error> {
        match (&self.host, vg.is_shared(), self.nolocking) {
            (_, false, _) | (None, true, true) => Ok(None),
            (Some(h), true, _) => Ok(Some(h)),
            (None, true, false) => Err(Error::SharedWithoutLeases(vg.name.clone())),
        }
    }

    /// `vgchange --lockstart`: joins the VG's lockspace as this host.
    pub fn lockstart(&self, vg: &str) -> Result<(), Error> {
        self.with_lockspace(vg, lease::Host::start)
    }

    /// Succeeds when `vg` can be changed now: it reads, and when it is shared this host has
    /// joined its lockspace (a readiness probe).
    pub fn ready(&self, vg: &str) -> Result<(), Error> {
        let scan = self.scan();
        let sv = scan.vg(vg)?;
        match self.host_for(&sv.vg)? {
            None => Ok(()),
            Some(h) => Ok(h.check_joined(&sv.vg, &places(&scan, sv))?),
        }
    }

    /// `vgchange --lockstop`: leaves the VG's lockspace.
    pub fn lockstop(&self, vg: &str) -> Result<(), Error> {
        self.with_lockspace(vg, lease::Host::stop)
    }

    fn with_lockspace(
        &self,
        vg: &str,
        f: fn(&lease::Host, &Vg, &lease::VgPlaces) -> Result<(), lease::LeaseError>,
    ) -> Result<(), Error> {
        let scan = self.scan();
        let sv = scan.vg(vg)?;
        let h = self
            .host
            .as_ref()
            .ok_or_else(|| Error::SharedWithoutLeases(vg.to_owned()))?;
        Ok(f(h, &sv.vg, &places(&scan, sv))?)
    }

    /// Tells stock lvm2 on this host about changed PVs through `<dir>/newhints` (lvm2's
    /// run directory, normally `/run/lvm`): lvm2 scans only the devices in its hints file
    /// until that file appears, so without it a PV made by lvmeta would look missing.
    pub fn with_run_dir(mut self, dir: PathBuf) -> Self {
        self.run_dir = Some(dir);
        self
    }

    /// Marks lvm2's device hints stale.
    fn invalidate_hints(&self) -> Result<(), Error> {
        let Some(dir) = &self.run_dir else {
            return Ok(());
        };
        let path = dir.join("newhints");
        std::fs::create_dir_all(dir)
            .and_then(|()| std::fs::write(&path, b""))
            .map_err(|source| Error::Lock {
                path: path.display().to_string(),
                source,
            })
    }

    /// Takes lvm2's file locks in `dir` (lvm2's `global/locking_dir`, normally
    /// [`lockfile::DEFAULT_LOCK_DIR`]).
    pub fn with_lock_dir(mut self, dir: PathBuf) -> Self {
        self.lock_dir = Some(dir);
        self
    }

    /// The devices, in order.
    pub fn devices(&self) -> Vec<&dyn BlockDevice> {
        self.devices.iter().map(|d| d.as_ref()).collect()
    }

    /// Scans every device.
    pub fn scan(&self) -> Scan {
        self.forget();
        scan::scan(&self.devices())
    }

    /// Drops the cached scan (every change other than [`Session::update`] does).
    fn forget(&self) {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The cached scan if the devices still match it, else a new scan.
    /// Puts `scan` back as the cached scan.
    fn keep(&self, scan: Scan) {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(scan);
    }

    fn current(&self) -> Scan {
        let cached = self.cache.lock().unwrap_or_else(|p| p.into_inner()).take();
        match cached {
            Some(c) if c.fingerprint() == scan::fingerprint(&self.devices()) => {
                tracing::debug!("metadata unchanged since the last scan; using it");
                c
            }
            _ => scan::scan(&self.devices()),
        }
    }

    fn dev(&self, name: &str) -> Result<&dyn BlockDevice, Error> {
        self.devices
            .iter()
            .map(|d| d.as_ref())
            .find(|d| d.name() == name)
            .ok_or_else(|| Error::Device {
                device: name.to_owned(),
                why: "not among the devices lvmeta was given".into(),
            })
    }

    fn lock(&self, res: Resource) -> Result<Option<FileLock>, Error> {
        let Some(dir) = &self.lock_dir else {
            return Ok(None);
        };
        lockfile::lock(dir, &res, true)
            .map(Some)
            .map_err(|source| Error::Lock {
                path: dir.display().to_string(),
                source,
            })
    }

    /// lvm2's global file lock, then, where a shared VG whose lockspace this host has joined
    /// holds the enabled global lease, that lease exclusively (lvmlockd's `lockd_global` for
    /// the commands that change PVs and the VG namespace).
    fn global(&self) -> Result<Global, Error> {
        let mut g = Global {
            lease: None,
            _file: self.lock(Resource::Global)?,
        };
        if let Some(h) = &self.host {
            let scan = self.scan();
            for sv in scan.vgs.iter().filter(|v| v.vg.is_shared()) {
                if let Some(r) = h.lock_gl(&sv.vg, &places(&scan, sv), lease::Mode::Exclusive)? {
                    g.lease = Some(lease::Held::new(h.clone(), r, "global"));
                    break;
                }
            }
        }
        Ok(g)
    }

    /// The VG lease of `vg` when it is shared (see [`VgLease`]); the caller scans again
    /// under it.
    fn vg_lease(&self, vg: &str) -> Result<VgLease<'_>, Error> {
        let scan = self.scan();
        let sv = writable(&scan, vg)?;
        let held = match self.host_for(&sv.vg)? {
            Some(h) => {
                let (r, _) = h.lock_vg(&sv.vg, &places(&scan, sv), lease::Mode::Exclusive)?;
                Some((h, r))
            }
            None => None,
        };
        Ok(VgLease { held })
    }

    /// Scans for a report the way lvmlockd's reporting commands read: the global lease shared
    /// when `vgs` is empty (every VG is read), each selected shared VG's lease shared where
    /// this host has joined its lockspace, then a fresh scan under them. The returned
    /// [`ReadLocks`] releases the leases when dropped and names the shared VGs read without
    /// one (lockspace not started, no lvmlock LV, or no lease manager).
    pub fn read_locked(&self, vgs: &[&str]) -> Result<(Scan, ReadLocks), Error> {
        let scan = self.scan();
        let mut locks = ReadLocks {
            held: Vec::new(),
            unlocked: Vec::new(),
        };
        let selected = |n: &str| vgs.is_empty() || vgs.contains(&n);
        let shared: Vec<&ScannedVg> = scan
            .vgs
            .iter()
            .filter(|v| v.vg.is_shared() && selected(&v.vg.name))
            .collect();
        let Some(h) = &self.host else {
            locks.unlocked = shared.iter().map(|v| v.vg.name.clone()).collect();
            return Ok((scan, locks));
        };
        if vgs.is_empty() {
            for sv in &shared {
                if let Some(r) = h.lock_gl(&sv.vg, &places(&scan, sv), lease::Mode::Shared)? {
                    locks.held.push(lease::Held::new(h.clone(), r, "read"));
                    break;
                }
            }
        }
        for sv in &shared {
            let at = places(&scan, sv);
            if h.lockspace(&sv.vg, &at).is_err() {
                locks.unlocked.push(sv.vg.name.clone());
                continue;
            }
            match h.lock_vg(&sv.vg, &at, lease::Mode::Shared) {
                Ok((r, _)) => locks.held.push(lease::Held::new(h.clone(), r, "read")),
                Err(lease::LeaseError::NotJoined { .. }) => locks.unlocked.push(sv.vg.name.clone()),
                Err(e) => return Err(e.into()),
            }
        }
        if locks.held.is_empty() {
            return Ok((scan, locks));
        }
        Ok((self.scan(), locks))
    }

    /// Activates LV `lv` of `vg` on this host through `backend`, as `lvchange -ay` (`-asy`
    /// with `shared`) does with lvmlockd: the VG read under its lease shared, the LV's lease
    /// (a thin LV's: its pool's) taken exclusively, or shared for shared activation, and held
    /// by the returned [`Activation`] for as long as it lives. A lease another host holds in a
    /// conflicting mode fails at once with [`lease::LeaseError::Busy`].
    pub fn activate(
        &self,
        vg: &str,
        lv: &str,
        shared: bool,
        read_only: bool,
        backend: &dyn Backend,
    ) -> Result<Activation, Error> {
        let (scan, locks) = self.read_locked(&[vg])?;
        let sv = scan.vg(vg)?;
        let at = places(&scan, sv);
        let placement = activate::place(&sv.vg, lv, &at.paths)?;
        let mode = if shared {
            lease::Mode::Shared
        } else {
            lease::Mode::Exclusive
        };
        let lease = match self.host_for(&sv.vg)? {
            Some(h) => {
                h.check_joined(&sv.vg, &at)?;
                let (owner, r) = covering_lease(&sv.vg, &at, lv)?;
                let key = format!("{vg}/{owner}");
                let mut pools = self.pool_leases.lock().unwrap_or_else(|p| p.into_inner());
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
                        h.manager.acquire_persistent(&r, mode)?;
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
        drop(locks);
        // Without leases, this session's count of the pool stands in for its lease.
        let local = match (&lease, &placement.layout) {
            (None, Layout::Thin { pool, .. } | Layout::Pool(pool)) => {
                Some(self.local_pools.hold(vg, &pool.name))
            }
            _ => None,
        };
        // The activation owns the lease from here: a backend failure releases it.
        let mut held = Activation::new(placement, PathBuf::new(), lease);
        if let Some(h) = local {
            held = held.with_local_hold(h);
        }
        held.device = backend.activate(&held.placement, read_only)?;
        self.clear_delivered(&held.placement, "lvchange -ay")?;
        Ok(held)
    }

    /// After the backend brought `p`'s kernel pool to the metadata's transaction id: clears
    /// the pool's queue, or the next change would join messages already sent without a new
    /// transaction id (lvm2's `update_pool_lv`). The caller holds the pool's lease.
    fn clear_delivered(&self, p: &Placement, verb: &str) -> Result<(), Error> {
        if let Layout::Thin { pool, .. } | Layout::Pool(pool) = &p.layout {
            if !pool.messages.is_empty() {
                let (name, tid) = (pool.name.as_str(), pool.transaction_id);
                self.update_holding(&p.vg, verb, &[name], |v| {
                    edit::thin::delivered(v, name, tid)
                })?;
                tracing::info!(vg = %p.vg, pool = name, transaction_id = tid, "cleared the delivered thin pool messages");
            }
        }
        Ok(())
    }

    /// Where LV `lv` of `vg` is on this host's devices, from a fresh scan.
    fn placement(&self, vg: &str, lv: &str) -> Result<Placement, Error> {
        let scan = self.scan();
        let sv = scan.vg(vg)?;
        Ok(activate::place(&sv.vg, lv, &places(&scan, sv).paths)?)
    }

    /// Removes LV `lv`'s device on this host, found from the metadata (an activation whose
    /// [`Activation`] is gone, as after a restart), then releases the orphan of its lease
    /// (a thin LV's: its pool's, unless another thin LV of the pool is still active here)
    /// that the ended process left.
    pub fn deactivate(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<(), Error> {
        let scan = self.scan();
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
        if h.manager.release_orphans(&r)? > 0 {
            tracing::info!(
                vg,
                lv = owner,
                "released the orphan lease an ended process left"
            );
        }
        Ok(())
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

    /// Brings an active LV's device up to the metadata (`lvchange --refresh`): its size after
    /// `lvextend`; for a thin LV also its pool's size and the pool's queued messages, which
    /// are then cleared. The caller holds the LV's lease (a thin LV's: its pool's).
    pub fn refresh(&self, vg: &str, lv: &str, backend: &dyn Backend) -> Result<Placement, Error> {
        let placement = self.placement(vg, lv)?;
        // Not live here: nothing to bring up to date, and no queue delivered to clear.
        if !live(backend, &placement)? {
            return Ok(placement);
        }
        backend.refresh(&placement)?;
        self.clear_delivered(&placement, "lvchange --refresh")?;
        Ok(placement)
    }

    /// `pvcreate`: labels `device` as an orphan PV. Refuses a PV of a VG; an orphan PV is
    /// re-initialised only with `force`.
    pub fn pvcreate(&self, device: &str, opts: &PvOptions, force: bool) -> Result<Uuid, Error> {
        let _g = self.global()?;
        let _o = self.lock(Resource::Orphans)?;
        let scan = self.scan();
        self.pvcreate_locked(&scan, device, opts, force)
    }

    fn pvcreate_locked(
        &self,
        scan: &Scan,
        device: &str,
        opts: &PvOptions,
        force: bool,
    ) -> Result<Uuid, Error> {
        let dev = self.dev(device)?;
        if let Some(i) = scan.pvs.iter().position(|p| p.device == device) {
            if let Some((vg, _)) = scan.vg_of_pv(i) {
                return Err(Error::Device {
                    device: device.to_owned(),
                    why: format!("physical volume belongs to volume group \"{}\"", vg.vg.name),
                });
            }
            if !force {
                return Err(Error::Device {
                    device: device.to_owned(),
                    why: "already a physical volume (use -f to re-initialise)".into(),
                });
            }
        }
        let size = dev.size();
        let plan = layout::plan(size, opts).map_err(|source| Error::Layout {
            device: device.to_owned(),
            source,
        })?;
        let id = Uuid::random();
        let label = plan.label(id, size);
        // Areas first, label last: a crash before the label leaves no half-made PV.
        let zero = vec![0u8; 4096];
        for m in &plan.mdas {
            let n = zero.len().min(m.size as usize);
            write(dev, m.offset, &zero[..n])?;
            commit::write_header(dev, &commit::empty_header(m.offset, m.size))?;
        }
        flush(dev)?;
        // Other labels in sectors 0-3 would shadow ours: clear them as lvm2 does.
        let mut head = vec![0u8; crate::label::LABEL_SCAN_SIZE];
        dev.read_at(0, &mut head).map_err(io_err(dev, 0))?;
        for (i, s) in head.chunks(crate::label::SECTOR).enumerate() {
            if i as u64 != label.sector && &s[..8] == crate::label::LABEL_ID {
                write(
                    dev,
                    (i * crate::label::SECTOR) as u64,
                    &[0u8; crate::label::SECTOR],
                )?;
            }
        }
        commit::write_label(dev, &label)?;
        flush(dev)?;
        self.invalidate_hints()?;
        tracing::info!(device, pv = %id, pe_start = plan.pe_start, "pvcreate");
        Ok(id)
    }

    /// `pvremove`: wipes the label of an orphan PV.
    pub fn pvremove(&self, device: &str) -> Result<(), Error> {
        let _g = self.global()?;
        let _o = self.lock(Resource::Orphans)?;
        let scan = self.scan();
        let dev = self.dev(device)?;
        let Some(i) = scan.pvs.iter().position(|p| p.device == device) else {
            return Err(Error::Device {
                device: device.to_owned(),
                why: "not a physical volume".into(),
            });
        };
        if let Some((vg, _)) = scan.vg_of_pv(i) {
            return Err(Error::Device {
                device: device.to_owned(),
                why: format!("physical volume belongs to volume group \"{}\"", vg.vg.name),
            });
        }
        let sector = scan.pvs[i].label.sector;
        write(dev, sector * 512, &[0u8; 512])?;
        flush(dev)?;
        self.invalidate_hints()?;
        tracing::info!(device, "pvremove");
        Ok(())
    }

    /// Orphan PVs for `devices`, initialising devices that carry no label (as lvm2's
    /// vgcreate and vgextend do).
    fn orphans(&self, devices: &[&str]) -> Result<Vec<ScannedPv>, Error> {
        let scan = self.scan();
        for d in devices {
            if !scan.pvs.iter().any(|p| p.device == *d) {
                self.pvcreate_locked(&scan, d, &PvOptions::default(), false)?;
            }
        }
        let scan = self.scan();
        devices
            .iter()
            .map(|d| {
                let i = scan
                    .pvs
                    .iter()
                    .position(|p| p.device == *d)
                    .ok_or_else(|| Error::Device {
                        device: (*d).to_owned(),
                        why: "no PV label after pvcreate".into(),
                    })?;
                if let Some((vg, _)) = scan.vg_of_pv(i) {
                    return Err(Error::Device {
                        device: (*d).to_owned(),
                        why: format!("physical volume belongs to volume group \"{}\"", vg.vg.name),
                    });
                }
                Ok(scan.pvs[i].clone())
            })
            .collect()
    }

    /// `vgcreate`.
    pub fn vgcreate(&self, spec: &VgSpec, devices: &[&str]) -> Result<Vg, Error> {
        let _g = self.global()?;
        let _v = self.lock(Resource::Vg(spec.name.clone()))?;
        let _o = self.lock(Resource::Orphans)?;
        if self.scan().vgs.iter().any(|v| v.vg.name == spec.name) {
            return Err(Error::Device {
                device: spec.name.clone(),
                why: format!("A volume group called {} already exists.", spec.name),
            });
        }
        if spec.shared.is_some() && self.host.is_none() && !self.nolocking {
            return Err(Error::SharedWithoutLeases(spec.name.clone()));
        }
        let pvs = self.orphans(devices)?;
        let new: Vec<NewPv> = pvs.iter().map(new_pv).collect();
        let mut vg = edit::vg::create(spec, &new, &edit::Stamp::now())?;
        describe(&mut vg, "vgcreate");
        let host = self.host_for(&vg)?;
        let joined: Vec<&ScannedPv> = pvs.iter().collect();
        self.commit(&vg, &joined, &joined)?;
        self.invalidate_hints()?;
        if let Some(h) = host {
            let scan = self.scan();
            let sv = scan.vg(&vg.name)?;
            // Another shared VG on these devices may already hold the enabled global lease.
            let mut gl_elsewhere = false;
            for other in scan
                .vgs
                .iter()
                .filter(|o| o.vg.name != vg.name && o.vg.is_shared())
            {
                gl_elsewhere |= h.holds_gl(&other.vg, &places(&scan, other))?;
            }
            h.init_vg(&vg, &places(&scan, sv), gl_elsewhere)?;
        }
        tracing::info!(vg = %vg.name, pvs = devices.len(), "vgcreate");
        Ok(vg)
    }

    /// `vgextend`.
    pub fn vgextend(&self, vg: &str, devices: &[&str]) -> Result<Vg, Error> {
        let _g = self.global()?;
        let _v = self.lock(Resource::Vg(vg.to_owned()))?;
        let _o = self.lock(Resource::Orphans)?;
        let pvs = self.orphans(devices)?;
        let lease = self.vg_lease(vg)?;
        let scan = self.scan();
        let sv = writable(&scan, vg)?;
        let new: Vec<NewPv> = pvs.iter().map(new_pv).collect();
        let mut out = edit::vg::extend(sv.vg.clone(), &new)?;
        describe(&mut out, "vgextend");
        let mut all = members(&scan, sv)?;
        let joined: Vec<&ScannedPv> = pvs.iter().collect();
        all.extend(joined.iter().copied());
        self.commit(&out, &all, &joined)?;
        lease.release(out.seqno)?;
        self.invalidate_hints()?;
        Ok(out)
    }

    /// `vgreduce`: removes unused PVs from the VG and makes them orphans again.
    pub fn vgreduce(&self, vg: &str, devices: &[&str]) -> Result<Vg, Error> {
        let _g = self.global()?;
        let _v = self.lock(Resource::Vg(vg.to_owned()))?;
        let _o = self.lock(Resource::Orphans)?;
        let lease = self.vg_lease(vg)?;
        let scan = self.scan();
        let sv = writable(&scan, vg)?;
        let all = members(&scan, sv)?;
        let remove: Vec<usize> = devices
            .iter()
            .map(|d| {
                all.iter()
                    .position(|p| p.device == *d)
                    .ok_or_else(|| Error::Device {
                        device: (*d).to_owned(),
                        why: format!("not a PV of volume group \"{vg}\""),
                    })
            })
            .collect::<Result<_, _>>()?;
        let mut out = edit::vg::reduce(sv.vg.clone(), &remove)?;
        describe(&mut out, "vgreduce");
        let keep: Vec<&ScannedPv> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| !remove.contains(i))
            .map(|(_, p)| *p)
            .collect();
        self.commit(&out, &keep, &[])?;
        lease.release(out.seqno)?;
        for &i in &remove {
            self.orphan(all[i])?;
        }
        self.invalidate_hints()?;
        Ok(out)
    }

    /// `vgremove`: clears every metadata area and makes the PVs orphans. LVs must be removed
    /// first unless `force`.
    pub fn vgremove(&self, vg: &str, force: bool) -> Result<(), Error> {
        let gl = self.global()?;
        let _v = self.lock(Resource::Vg(vg.to_owned()))?;
        let _o = self.lock(Resource::Orphans)?;
        let scan = self.scan();
        let sv = writable(&scan, vg)?;
        let visible = sv.vg.lvs.iter().filter(|l| l.is_visible()).count();
        if visible > 0 && !force {
            return Err(EditError::Refused {
                object: vg.to_owned(),
                why: format!("volume group contains {visible} logical volume(s); use -f"),
            }
            .into());
        }
        // A shared VG goes under its VG lease; the lease is released marked "removed", so
        // lvmlockd hosts refuse to use the VG from then on, and this host leaves the lockspace.
        let lease = match self.host_for(&sv.vg)? {
            Some(h) => {
                let at = places(&scan, sv);
                let (r, _) = h.lock_vg(&sv.vg, &at, lease::Mode::Exclusive)?;
                Some((h, r, at))
            }
            None => None,
        };
        let removed =
            members(&scan, sv).and_then(|pvs| pvs.iter().try_for_each(|p| self.orphan(p)));
        // The global lease may live in this VG's lockspace, which is left below.
        drop(gl);
        if let Some((h, r, at)) = &lease {
            let lvb = removed.as_ref().ok().map(|()| lease::Lvb {
                flags: lease::layout::LVB_REMOVED,
                ..lease::Lvb::for_seqno(sv.vg.seqno)
            });
            h.unlock_vg_now(r, lvb)?;
            if removed.is_ok() {
                h.stop(&sv.vg, at)?;
            }
        }
        removed?;
        self.invalidate_hints()?;
        tracing::info!(vg, "vgremove");
        Ok(())
    }

    /// Empties a PV's areas, then clears `PV_EXT_USED` in its label.
    fn orphan(&self, p: &ScannedPv) -> Result<(), Error> {
        let dev = self.dev(&p.device)?;
        for m in &p.mdas {
            commit::write_header(dev, &commit::empty_header(m.locn.offset, m.locn.size))?;
        }
        flush(dev)?;
        commit::write_label(dev, &with_used(&p.label, false))?;
        flush(dev)
    }

    /// Applies `edit` to the VG under its lock (and, in a shared VG, its VG lease) and commits
    /// the VG it returns; `verb` names the change in the metadata's description. The edit gets
    /// the VG by value (no copy is made: the session's cached scan hands it over) and returns
    /// the changed VG with whatever the caller wants back (a new LV's name, say).
    pub fn update<R: Edited>(
        &self,
        vg: &str,
        verb: &str,
        edit: impl FnOnce(Vg) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        self.update_holding(vg, verb, &[], edit)
    }

    /// [`Session::update`] by the holder of the leases of the thin pools named in `owned`
    /// (the host where they are active), whose changes then need no lease of their own.
    pub fn update_holding<R: Edited>(
        &self,
        vg: &str,
        verb: &str,
        owned: &[&str],
        edit: impl FnOnce(Vg) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        let how = Change {
            verb,
            owned,
            new_pools_are_new: true,
            clear_ends: &[],
        };
        self.change(vg, &how, edit)
    }

    /// [`Session::update_holding`] that also zeroes the first and last MiB
    /// ([`END_BYTES`]) of the linear LVs named in `clear` that the edit creates, before the
    /// commit that adds them (an LV of that name that was there already is left alone).
    pub fn update_clearing<R: Edited>(
        &self,
        vg: &str,
        verb: &str,
        owned: &[&str],
        clear: &[&str],
        edit: impl FnOnce(Vg) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        let how = Change {
            verb,
            owned,
            new_pools_are_new: true,
            clear_ends: clear,
        };
        self.change(vg, &how, edit)
    }

    /// [`Session::update`] as `how` says.
    fn change<R: Edited>(
        &self,
        vg: &str,
        how: &Change<'_>,
        edit: impl FnOnce(Vg) -> Result<R, EditError>,
    ) -> Result<R::Value, Error> {
        let _turn = self.changing.lock().unwrap_or_else(|p| p.into_inner());
        let _v = self.lock(Resource::Vg(vg.to_owned()))?;
        let first = self.current();
        let lease = match self.host_for(&writable(&first, vg)?.vg)? {
            Some(h) => {
                let sv = writable(&first, vg)?;
                let at = places(&first, sv);
                let (r, kept) = h.lock_vg(&sv.vg, &at, lease::Mode::Exclusive)?;
                Some((h, r, at, kept))
            }
            None => None,
        };
        let result = self.update_locked(
            first,
            vg,
            how,
            edit,
            lease.as_ref().map(|(h, r, at, kept)| (*h, r, at, *kept)),
        );
        if let Some((h, r, _, _)) = &lease {
            // lvmlockd hosts learn the new seqno from the value block.
            let lvb = result
                .as_ref()
                .ok()
                .map(|(seqno, _)| lease::Lvb::for_seqno(*seqno));
            h.unlock_vg(r, lvb)?;
        }
        result.map(|(_, t)| t)
    }

    /// [`Session::update`] once the file lock and (for a shared VG) the VG lease are held.
    /// Returns the new seqno and the edit's value.
    fn update_locked<R: Edited>(
        &self,
        first: Scan,
        vg: &str,
        how: &Change<'_>,
        edit: impl FnOnce(Vg) -> Result<R, EditError>,
        lease: Option<(&lease::Host, &lease::ResourceSpec, &lease::VgPlaces, bool)>,
    ) -> Result<(u32, R::Value), Error> {
        let verb = how.verb;
        let mut scan = match lease {
            // A lease kept since before `first` was read: nobody can have changed the VG.
            Some((_, _, _, true)) | None => first,
            // Another host may have changed the VG before we got the lease: check again.
            Some(_) => {
                *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(first);
                self.current()
            }
        };
        let sv = writable(&scan, vg)?;
        let pvs: Vec<ScannedPv> = members(&scan, sv)?.into_iter().cloned().collect();
        let before = lease::LeaseRef::of(&sv.vg);
        let local_before = match lease {
            None => self.local_pool_states(&sv.vg),
            Some(_) => Vec::new(),
        };
        let owned: Vec<Uuid> = how
            .owned
            .iter()
            .filter_map(|n| sv.vg.lv(n).map(|l| l.id))
            .collect();
        let old_pools: Vec<Uuid> = sv
            .vg
            .lvs
            .iter()
            .filter(|l| l.pool().is_some())
            .map(|l| l.id)
            .collect();
        let clear_before: Vec<Option<Uuid>> = how
            .clear_ends
            .iter()
            .map(|n| sv.vg.lv(n).map(|l| l.id))
            .collect();
        let paths = places(&scan, sv).paths;
        let index = scan.vgs.iter().position(|v| v.vg.name == vg).unwrap_or(0);
        // The VG leaves the scan for the edit; the scan is cached again only after a commit.
        let taken = scan.vgs.swap_remove(index);
        let (mut out, value) = edit(taken.vg)?.split();
        describe(&mut out, verb);
        // First, so that nothing is written when a removed LV (or a changed thin pool) is
        // in use; held until the commit is done (or failed).
        let removed = match lease {
            Some((h, _, at, _)) => h.lock_changed_lvs(&before, &out, at, &owned)?,
            None => {
                self.check_local_pools(&local_before, &out, &owned)?;
                lease::Locked::default()
            }
        };
        let all: Vec<&ScannedPv> = pvs.iter().collect();
        let committed = lease
            .map_or(Ok(()), |(h, _, at, _)| h.init_new_lvs(&before, &out, at))
            .map_err(Error::from)
            .and_then(|()| {
                // A restored pool's metadata holds its thin devices: never zeroed.
                if how.new_pools_are_new {
                    self.zero_new_pool_metadata(&out, &old_pools, &paths)
                } else {
                    Ok(())
                }
            })
            .and_then(|()| self.clear_new_ends(&out, how.clear_ends, &clear_before, &paths))
            .and_then(|()| self.commit(&out, &all, &[]));
        if let Some((h, _, _, _)) = lease {
            for r in &removed.held {
                h.release_or_warn(r, "removed LV");
            }
        }
        let (text, written) = committed?;
        tracing::info!(vg, verb, seqno = out.seqno, "committed");
        if let Some((h, _, at, _)) = lease {
            h.free_old_lvs(&before, &out, at, &removed.seen)?;
        }
        // The scan now describes the devices as they are: keep it for the next change.
        for (device, mda, header) in written {
            if let Some(p) = scan.pvs.iter_mut().find(|p| p.device == device) {
                if let Some(m) = p.mdas.get_mut(mda) {
                    m.header = Some(header);
                }
            }
        }
        let seqno = out.seqno;
        scan.vgs.push(ScannedVg {
            vg: out,
            text,
            pv_devices: taken.pv_devices,
        });
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(scan);
        Ok((seqno, value))
    }

    /// The thin pools of `vg` active through this session (in a VG without leases), with
    /// their id and pool state.
    fn local_pool_states(&self, vg: &Vg) -> Vec<(Uuid, String, lease::PoolState)> {
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
    fn check_local_pools(
        &self,
        before: &[(Uuid, String, lease::PoolState)],
        out: &Vg,
        owned: &[Uuid],
    ) -> Result<(), Error> {
        for (id, name, state) in before {
            let now = out.lvs.iter().find(|l| l.id == *id);
            let same = now.and_then(lease::pool_state).as_ref() == Some(state);
            if !same && !owned.contains(id) {
                return Err(lease::LeaseError::InUse {
                    lv: format!("{}/{name}", out.name),
                }
                .into());
            }
        }
        Ok(())
    }

    /// The VG as this session last read or wrote it.
    pub fn vg(&self, name: &str) -> Result<Vg, Error> {
        self.vg_and_missing(name).map(|(vg, _)| vg)
    }

    /// [`Session::vg`], with the indexes (in `vg.pvs`) of the PVs that no device of this
    /// session holds or that the metadata marks missing
    /// ([`crate::model::Pv::is_marked_missing`]): lvm2's missing PVs, whose extents cannot be
    /// read.
    pub fn vg_and_missing(&self, name: &str) -> Result<(Vg, Vec<usize>), Error> {
        let scan = self.current();
        let out = scan.vg(name).map(|v| {
            let missing =
                v.vg.pvs
                    .iter()
                    .zip(&v.pv_devices)
                    .enumerate()
                    .filter(|(_, (pv, dev))| dev.is_none() || pv.is_marked_missing())
                    .map(|(i, _)| i)
                    .collect();
            (v.vg.clone(), missing)
        });
        self.keep(scan);
        out
    }

    /// `vgck --updatemetadata`: writes the VG's newest version again, as a new seqno, to
    /// every area, repairing areas left behind by a crash or holding a damaged header.
    pub fn repair(&self, vg: &str) -> Result<Vg, Error> {
        self.forget();
        self.update(vg, "vgck --updatemetadata", |mut out| {
            edit::finish(&mut out)?;
            Ok(out)
        })?;
        self.vg(vg)
    }

    /// What `vgck` reports for VG `vg`: the scan's warnings about its areas and copies.
    pub fn check(&self, vg: &str) -> Result<Vec<String>, Error> {
        let scan = self.scan();
        let sv = scan.vg(vg)?;
        let devices: Vec<&str> = sv
            .pv_devices
            .iter()
            .flatten()
            .map(|&i| scan.pvs[i].device.as_str())
            .collect();
        Ok(scan
            .warnings
            .iter()
            .filter(|w| match w {
                ScanWarning::Mda { device, .. } | ScanWarning::Label { device, .. } => {
                    devices.contains(&device.as_str())
                }
                ScanWarning::Stale { vg: v, .. }
                | ScanWarning::Mismatch { vg: v, .. }
                | ScanWarning::MissingPv { vg: v, .. }
                | ScanWarning::Model { vg: v, .. } => v == vg,
                ScanWarning::Device(_) => false,
            })
            .map(ToString::to_string)
            .collect())
    }

    /// `vgcfgrestore`: writes `from` (a backup or an older copy) as the VG's next version.
    /// Its PVs must be the VG's PVs.
    pub fn restore(&self, vg: &str, from: &Vg) -> Result<Vg, Error> {
        let how = Change {
            verb: "vgcfgrestore",
            owned: &[],
            new_pools_are_new: false,
            clear_ends: &[],
        };
        self.change(vg, &how, |cur| {
            let mut out = from.clone();
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
            out.seqno = out.seqno.max(cur.seqno);
            edit::finish(&mut out)?;
            Ok(out)
        })?;
        self.vg(vg)
    }

    /// Older versions of the VG still readable in its metadata areas, newest first (the
    /// committed one included).
    pub fn history(&self, vg: &str) -> Result<Vec<Vg>, Error> {
        let scan = self.scan();
        let sv = scan.vg(vg)?;
        let mut found: Vec<Vg> = Vec::new();
        for p in members(&scan, sv)? {
            let dev = self.dev(&p.device)?;
            for m in &p.mdas {
                let Some(h) = &m.header else { continue };
                for v in crate::history::copies(dev, h, &sv.vg.name)? {
                    if v.id == sv.vg.id && !found.iter().any(|f| f.seqno == v.seqno) {
                        found.push(v);
                    }
                }
            }
        }
        found.sort_by_key(|v| std::cmp::Reverse(v.seqno));
        Ok(found)
    }

    /// Writes `vg` to the areas of `pvs`; the PVs in `joining` get `PV_EXT_USED` and fresh
    /// area headers first. Returns the text and each written area's new header (device,
    /// index of the area on it, header).
    fn commit(
        &self,
        vg: &Vg,
        pvs: &[&ScannedPv],
        joining: &[&ScannedPv],
    ) -> Result<(Arc<str>, Vec<Written>), Error> {
        self.forget();
        // The text and the sector-padded copy reuse the last commit's allocations.
        let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        let printed = vg.write_text(Style::Raw, GENERATOR, std::mem::take(&mut scratch.0));
        let text = commit::Text::new(printed.as_bytes(), std::mem::take(&mut scratch.1));
        let mut labels = Vec::new();
        let mut areas = Vec::new();
        let mut at = Vec::new();
        for p in pvs {
            let dev = self.dev(&p.device)?;
            let joins = joining.iter().any(|j| j.device == p.device);
            if joins {
                labels.push(LabelWrite {
                    dev,
                    label: with_used(&p.label, true),
                });
            }
            for (i, m) in p.mdas.iter().enumerate() {
                let header = match &m.header {
                    Some(h) if !joins => h.clone(),
                    _ => commit::empty_header(m.locn.offset, m.locn.size),
                };
                if header.committed.is_ignored() {
                    continue;
                }
                let fresh = joins || m.header.is_none();
                areas.push(Area { dev, header, fresh });
                at.push((p.device.clone(), i));
            }
        }
        if areas.is_empty() {
            return Err(Error::Device {
                device: vg.name.clone(),
                why: "no metadata area to write to (every PV has --pvmetadatacopies 0 or ignored areas)".into(),
            });
        }
        let result = commit::commit(&labels, &areas, &text);
        let kept: Arc<str> = Arc::from(printed.as_str());
        *scratch = (printed, text.into_scratch());
        let written = at
            .into_iter()
            .zip(result?)
            .map(|((d, i), h)| (d, i, h))
            .collect();
        Ok((kept, written))
    }
}

/// Where a shared VG's leases are: each PV's device, and lvmlockd's geometry for the sector
/// size of the PV holding `lvmlock`.
/// What [`Session::global`] holds: the global lease (released first) and the file lock.
struct Global {
    /// Released first (fields drop in order), then the file lock.
    lease: Option<lease::Held>,
    _file: Option<FileLock>,
}

/// The shared leases a report holds while it reads (see [`Session::read_locked`]); released,
/// last taken first, when dropped.
pub struct ReadLocks {
    held: Vec<lease::Held>,
    /// Shared VGs read without a lease: their view may be stale.
    pub unlocked: Vec<String>,
}

impl Drop for ReadLocks {
    fn drop(&mut self) {
        // Last taken first (a Vec would drop them first to last).
        while let Some(h) = self.held.pop() {
            drop(h);
        }
    }
}

/// A shared VG's lease held for one change: [`VgLease::release`] announces the committed
/// seqno in its value block; dropped on an error path, it is released unchanged.
struct VgLease<'s> {
    held: Option<(&'s lease::Host, lease::ResourceSpec)>,
}

impl VgLease<'_> {
    fn release(mut self, seqno: u32) -> Result<(), Error> {
        if let Some((h, r)) = self.held.take() {
            h.unlock_vg(&r, Some(lease::Lvb::for_seqno(seqno)))?;
        }
        Ok(())
    }
}

impl Drop for VgLease<'_> {
    fn drop(&mut self) {
        if let Some((h, r)) = self.held.take() {
            h.release_or_warn(&r, "VG");
        }
    }
}

/// How a change is made: its verb (in the metadata's description), the thin pools whose
/// leases the caller holds, whether pools the VG did not have are new (their metadata LV is
/// zeroed) or restored from a backup (left as it is), and the new LVs whose ends are cleared.
struct Change<'a> {
    verb: &'a str,
    owned: &'a [&'a str],
    new_pools_are_new: bool,
    clear_ends: &'a [&'a str],
}

/// The LV whose lease covers LV `lv` of `vg` (a thin LV's pool; any other LV itself), with
/// that lease.
fn covering_lease<'a>(
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

fn places(scan: &Scan, sv: &ScannedVg) -> lease::VgPlaces {
    let paths: Vec<Option<String>> = sv
        .pv_devices
        .iter()
        .map(|d| d.map(|i| scan.pvs[i].device.clone()))
        .collect();
    let lock_pv = lease::layout::lv_byte(&sv.vg, "lvmlock", 0).map_or(0, |(pv, _)| pv);
    let sector = sv
        .pv_devices
        .get(lock_pv)
        .copied()
        .flatten()
        .map_or(512, |i| scan.pvs[i].sector_size);
    lease::VgPlaces {
        paths,
        geometry: lease::Geometry::for_sector(sector),
    }
}

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

/// An area a commit wrote: its device, its index on the device, its new header.
type Written = (String, usize, MdaHeader);

/// See `Session::pool_leases`.
type PoolLeases = std::collections::HashMap<String, (lease::Mode, std::sync::Weak<lease::Held>)>;

/// The VG `name`, refusing to change one whose PVs are not all present.
fn writable<'s>(scan: &'s Scan, name: &str) -> Result<&'s ScannedVg, Error> {
    let sv = scan.vg(name)?;
    let missing: Vec<String> = sv
        .vg
        .pvs
        .iter()
        .zip(&sv.pv_devices)
        .filter(|(_, d)| d.is_none())
        .map(|(p, _)| p.id.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(Error::MissingPvs {
            vg: name.to_owned(),
            missing: missing.join(", "),
        });
    }
    Ok(sv)
}

/// The scanned PVs of a VG, in the VG's PV order.
fn members<'s>(scan: &'s Scan, sv: &ScannedVg) -> Result<Vec<&'s ScannedPv>, Error> {
    sv.pv_devices
        .iter()
        .zip(&sv.vg.pvs)
        .map(|(d, p)| {
            d.map(|i| &scan.pvs[i]).ok_or_else(|| Error::MissingPvs {
                vg: sv.vg.name.clone(),
                missing: p.id.to_string(),
            })
        })
        .collect()
}

fn new_pv(p: &ScannedPv) -> NewPv {
    let pe_start = p.label.data_areas.first().map_or(0, |d| d.offset);
    let tail = p
        .label
        .metadata_areas
        .iter()
        .filter(|m| m.offset > pe_start)
        .map(|m| p.dev_size.saturating_sub(m.offset))
        .max()
        .unwrap_or(0);
    NewPv {
        id: p.label.pv_uuid,
        device: p.device.clone(),
        dev_size: p.dev_size,
        pe_start,
        tail,
        bootloader: p
            .label
            .extension
            .as_ref()
            .and_then(|e| e.bootloader_areas.first())
            .map(|b| (b.offset, b.size)),
    }
}

fn with_used(l: &PvLabel, used: bool) -> PvLabel {
    let mut l = l.clone();
    let ext = l
        .extension
        .get_or_insert_with(|| crate::label::PvExtension {
            version: crate::label::PV_EXT_VERSION,
            flags: 0,
            bootloader_areas: Vec::new(),
        });
    ext.version = crate::label::PV_EXT_VERSION;
    if used {
        ext.flags |= PV_EXT_USED;
    } else {
        ext.flags &= !PV_EXT_USED;
    }
    l
}

fn describe(vg: &mut Vg, verb: &str) {
    let stamp = edit::Stamp::now();
    vg.header.description = Some(format!("Write from lvmeta {verb}."));
    vg.header.creation_host = Some(stamp.host);
    vg.header.creation_time = i64::try_from(stamp.time).ok();
}

/// See [`Session::live`].
fn live(backend: &dyn Backend, p: &Placement) -> Result<bool, Error> {
    Ok(backend.active(p)?.is_some() || backend.pool_status(p)?.is_some())
}
