//! A session: the devices lvmeta may use, the cached model of what they hold, and the verbs,
//! with their I/O. Where to read:
//! - `update.rs`: the commit pipeline every LV change goes through, top to
//!   bottom: lock, read under the lease, edit, validate, lease bookkeeping, commit, release;
//!   concurrent changes of one VG written as one group commit (`group.rs`).
//! - `pv.rs`: the verbs that change PVs and the VG namespace; `activation.rs`: LVs brought up
//!   on this host; `data.rs`: the data plane (zeroing, copies, erasure).
//! - here: the session itself, its scan cache (shared read-only by concurrent readers,
//!   replaced by each commit), and reads under lvmlockd's leases.
//!
//! Each change re-reads the metadata under lvm2's file lock (and a shared VG's lease), so
//! lvmeta and stock lvm commands on the same host never interleave.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::activate;
use crate::dev::BlockDevice;
use crate::lease;
use crate::lockfile::{self, FileLock, Resource};
use crate::model::Vg;
use crate::scan::{self, Scan, ScanWarning, ScannedPv, ScannedVg};
use crate::Error;

mod activation;
mod board;
mod data;
mod group;
mod guard;
mod hold;
mod hostid;
mod provision;
mod pv;
mod update;
mod write;
pub use activation::ActivationRead;
pub use board::PoolBoard;
pub use data::{Erase, EraseWith, END_BYTES};
pub use provision::{Provision, Provisioned};
pub use update::{Edited, MetadataArea, MetadataUse};

/// The largest transfer of [`Session::copy_lv`].
const COPY_CHUNK: u64 = 1 << 20;

/// What lvmeta writes as the generator line of metadata it commits.
pub const GENERATOR: &str = concat!("lvmeta ", env!("CARGO_PKG_VERSION"));

/// A set of devices lvmeta may read and write, and where lvm2's lock files live.
pub struct Session {
    devices: Vec<Box<dyn BlockDevice>>,
    lock_dir: Option<PathBuf>,
    run_dir: Option<PathBuf>,
    /// The last scan, replaced by each commit of [`Session::update`]; shared read-only by
    /// readers while the devices' labels and area headers still match it (see
    /// [`scan::Fingerprint`]). A scan a commit published carries no warnings (its VG's areas
    /// were just rewritten); reports of warnings scan afresh.
    cache: Mutex<Option<Arc<Scan>>>,
    /// The last scan each VG was found in (by name): what fencing works from when the
    /// devices cannot be read any more.
    seen: Mutex<std::collections::HashMap<String, Arc<Scan>>>,
    /// This host's lock manager for shared VGs.
    host: Option<lease::Host>,
    /// Buffers of the last commit, reused by the next one.
    scratch: Mutex<write::Scratch>,
    /// The scan the last commit published, and the VG it committed (which passed every
    /// check).
    published: Mutex<(std::sync::Weak<Scan>, String)>,
    /// The groups of changes being formed and written, by VG.
    groups: group::Groups<update::Bench>,
    /// The index of the LVs of each VG as this session last committed it (see
    /// [`update::KeptIndex`]): the next group starts from it instead of indexing anew.
    indexes: Mutex<std::collections::HashMap<String, update::KeptIndex>>,
    /// Change shared VGs without leases (lvm2's `--nolocking`).
    nolocking: bool,
    /// Thin pools active through this session in VGs without leases.
    local_pools: activate::LocalPools,
    /// The thin pool leases held by this session's activations (`vg/pool` -> mode and the
    /// hold), shared by the pool's thin LVs active here.
    pool_leases: Mutex<PoolLeases>,
    /// The VG whose lvm2 file lock this session keeps (see [`Session::hold`]), and the lock
    /// (`None` without a lock directory).
    held: Mutex<Option<(String, Option<FileLock>)>>,
}

impl Session {
    /// A session over `devices`, taking no file locks (tests, images).
    pub fn new(devices: Vec<Box<dyn BlockDevice>>) -> Self {
        Self {
            devices,
            lock_dir: None,
            run_dir: None,
            cache: Mutex::new(None),
            seen: Mutex::default(),
            host: None,
            nolocking: false,
            scratch: Mutex::default(),
            indexes: Mutex::default(),
            local_pools: activate::LocalPools::default(),
            pool_leases: Mutex::default(),
            published: Mutex::default(),
            groups: group::Groups::default(),
            held: Mutex::default(),
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
        let scan = self.current();
        let sv = scan.vg(vg)?;
        match self.host_for(&sv.vg)? {
            None => Ok(()),
            Some(h) => Ok(h.check_joined(&sv.vg, &places(&scan, sv))?),
        }
    }

    /// The lock manager's account of this host (`None` without leases): see
    /// [`lease::Standing`].
    pub fn standing(&self) -> Result<Option<lease::Standing>, Error> {
        match &self.host {
            Some(h) => Ok(Some(h.manager.standing()?)),
            None => Ok(None),
        }
    }

    /// Is `vg` shared (its leases in lockspace [`lease::layout::lockspace_name`])? As last
    /// found, without reading any device.
    pub fn is_shared(&self, vg: &str) -> Result<bool, Error> {
        Ok(self.seen(vg)?.vg(vg)?.vg.is_shared())
    }

    /// Gives back the VG lease this process keeps after a change in `vg`'s lockspace, if
    /// any (a lost lockspace: nothing protects it any more).
    pub fn release_kept(&self, vg: &str) -> Result<(), Error> {
        if let Some(h) = &self.host {
            h.release_kept(&lease::layout::lockspace_name(vg))?;
        }
        Ok(())
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
        let scan = self.current();
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

    /// The cached scan while the devices still match it, else a new scan, cached. Readers
    /// share it; a commit replaces it (`commit_and_publish`). Concurrent readers that find it
    /// stale wait for one rescan instead of each making their own.
    fn current(&self) -> Arc<Scan> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = cache.as_ref() {
            if c.fingerprint() == scan::fingerprint(&self.devices()) {
                return c.clone();
            }
        }
        let mut fresh = scan::scan(&self.devices());
        // Nothing the session does reads the text again (the model holds it all): at 10,000
        // thin volumes it is 16 MB less to keep.
        for sv in &mut fresh.vgs {
            sv.text = Arc::default();
        }
        let fresh = Arc::new(fresh);
        *cache = Some(fresh.clone());
        self.remember(&fresh);
        fresh
    }

    /// Keeps `scan` as the last one each of its VGs was found in.
    fn remember(&self, scan: &Arc<Scan>) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        for sv in &scan.vgs {
            seen.insert(sv.vg.name.clone(), scan.clone());
        }
    }

    /// The last scan VG `vg` was found in, without reading any device (a lost path cannot
    /// hold fencing up): every LV this host activated was in it, since activating reads.
    fn seen(&self, vg: &str) -> Result<Arc<Scan>, Error> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(vg)
            .cloned()
            .ok_or_else(|| Error::VgNotFound(vg.to_owned()))
    }

    /// VG `vg` as last found, without reading any device: every LV this host activated is
    /// in it, and a lost path cannot hold fencing up.
    pub fn seen_vg(&self, vg: &str) -> Result<Vg, Error> {
        Ok(self.seen(vg)?.vg(vg)?.vg.clone())
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

    /// Takes `res`'s file lock; `None` without a lock directory, or for the VG this session
    /// holds ([`Session::hold`]: flock would wait for itself).
    fn lock(&self, res: Resource) -> Result<Option<FileLock>, Error> {
        let Some(dir) = &self.lock_dir else {
            return Ok(None);
        };
        if let Resource::Vg(vg) = &res {
            if self.holds(vg) {
                return Ok(None);
            }
        }
        lockfile::lock(dir, &res, true)
            .map(Some)
            .map_err(|source| Error::Lock {
                path: dir.display().to_string(),
                source,
            })
    }

    /// Scans for a report the way lvmlockd's reporting commands read: the global lease shared
    /// when `vgs` is empty (every VG is read), each selected shared VG's lease shared where
    /// this host has joined its lockspace, then the metadata read again under them (the
    /// cached scan while the devices' labels and area headers match it). The returned
    /// [`ReadLocks`] releases the leases when dropped and names the shared VGs read without
    /// one (lockspace not started, no lvmlock LV, or no lease manager).
    pub fn read_locked(&self, vgs: &[&str]) -> Result<(Arc<Scan>, ReadLocks), Error> {
        let scan = self.current();
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
        Ok((self.current(), locks))
    }

    /// The VG as this session last read or wrote it (a copy that shares its LVs).
    pub fn vg(&self, name: &str) -> Result<Vg, Error> {
        self.view(name).map(|v| v.vg().clone())
    }

    /// The VG as this session last read or wrote it, shared with other readers: no copy.
    pub fn view(&self, name: &str) -> Result<VgView, Error> {
        let scan = self.cached_for(name);
        let index = scan
            .vgs
            .iter()
            .position(|v| v.vg.name == name)
            .ok_or_else(|| Error::VgNotFound(name.to_owned()))?;
        // The scan's own ambiguity check (two VGs of one name).
        scan.vg(name)?;
        Ok(VgView { scan, index })
    }

    /// [`Session::vg`], with the indexes (in `vg.pvs`) of the PVs that no device of this
    /// session holds or that the metadata marks missing
    /// ([`crate::model::Pv::is_marked_missing`]): lvm2's missing PVs, whose extents cannot be
    /// read.
    pub fn vg_and_missing(&self, name: &str) -> Result<(Vg, Vec<usize>), Error> {
        let v = self.view(name)?;
        Ok((v.vg().clone(), v.missing()))
    }

    /// What `vgck` reports for VG `vg`: the scan's warnings about its areas and copies.
    pub fn check(&self, vg: &str) -> Result<Vec<String>, Error> {
        let scan = self.scan();
        Ok(warnings_of(&scan, vg)?
            .into_iter()
            .map(ToString::to_string)
            .collect())
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
}

/// A VG of the session's cached scan, shared read-only (see [`Session::view`]).
pub struct VgView {
    scan: Arc<Scan>,
    index: usize,
}

impl VgView {
    fn scanned(&self) -> &ScannedVg {
        &self.scan.vgs[self.index]
    }

    /// Byte alignment of the VG's leases on its lease device, as lvmlockd aligns them.
    pub fn lease_align(&self) -> u64 {
        lease_align(&self.scan, self.scanned())
    }

    /// The VG.
    pub fn vg(&self) -> &Vg {
        &self.scanned().vg
    }

    /// The indexes (in `vg.pvs`) of the PVs that no device of the session holds or that the
    /// metadata marks missing: lvm2's missing PVs, whose extents cannot be read.
    pub fn missing(&self) -> Vec<usize> {
        let sv = self.scanned();
        sv.vg
            .pvs
            .iter()
            .zip(&sv.pv_devices)
            .enumerate()
            .filter(|(_, (pv, dev))| dev.is_none() || pv.is_marked_missing())
            .map(|(i, _)| i)
            .collect()
    }

    /// How full the VG's metadata areas are.
    pub fn metadata(&self) -> MetadataUse {
        update::metadata_use(&self.scan, self.scanned())
    }

    /// The VG's metadata areas in use, PV by PV.
    pub fn metadata_areas(&self) -> Vec<MetadataArea> {
        update::metadata_areas(&self.scan, self.scanned())
    }
}

impl std::ops::Deref for VgView {
    type Target = Vg;
    fn deref(&self) -> &Vg {
        self.vg()
    }
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

/// Where a shared VG's leases are: each PV's device, and lvmlockd's geometry for the sector
/// size of the PV holding `lvmlock`.
fn places(scan: &Scan, sv: &ScannedVg) -> lease::VgPlaces {
    let pvs: Vec<Option<&ScannedPv>> = sv
        .pv_devices
        .iter()
        .map(|d| d.map(|i| &scan.pvs[i]))
        .collect();
    vg_places(&sv.vg, &pvs)
}

/// Where `vg`'s leases are, its PVs found on `pvs` (VG order; `None`: missing): the device
/// of each PV, and the geometry of the `lvmlock` LV's PV.
fn vg_places(vg: &Vg, pvs: &[Option<&ScannedPv>]) -> lease::VgPlaces {
    let lock_pv = lease::layout::lv_byte(vg, "lvmlock", 0).map_or(0, |(pv, _)| pv);
    let sector = pvs
        .get(lock_pv)
        .copied()
        .flatten()
        .map_or(512, |p| p.sector_size);
    lease::VgPlaces {
        paths: pvs.iter().map(|p| p.map(|p| p.device.clone())).collect(),
        geometry: lease::Geometry::for_sector(sector),
    }
}

/// Byte alignment of a VG's leases on its lease device (a VG without leases: lvmlockd's
/// default, and no look for `lvmlock` among its LVs).
fn lease_align(scan: &Scan, sv: &ScannedVg) -> u64 {
    match sv.vg.is_shared() {
        true => places(scan, sv).geometry.align,
        false => lease::layout::LEASE_ALIGN,
    }
}

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

/// The scan's warnings about VG `vg`: its copies, and the labels and areas of its PVs.
fn warnings_of<'a>(scan: &'a Scan, vg: &str) -> Result<Vec<&'a ScanWarning>, Error> {
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
        .collect())
}

/// Whether every label and metadata area of VG `vg` holds its newest version (no older or
/// different copy, no unreadable area): a commit would not rewrite anything lost.
fn copies_agree(scan: &Scan, vg: &str) -> bool {
    warnings_of(scan, vg).is_ok_and(|w| {
        !w.iter().any(|w| {
            matches!(
                w,
                ScanWarning::Mda { .. }
                    | ScanWarning::Label { .. }
                    | ScanWarning::Stale { .. }
                    | ScanWarning::Mismatch { .. }
            )
        })
    })
}
