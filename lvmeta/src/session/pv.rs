//! The verbs that change PVs and the VG namespace (`pvcreate`, `vgcreate`, `vgextend`, ...):
//! lvm2's global lock (and lvmlockd's global lease), then labels and whole metadata areas.

use super::write::{describe, next_version};
use super::{members, places, vg_places, writable, Session};
use crate::commit::{self, flush, io_err, write};
use crate::edit::{self, EditError, NewPv, VgSpec};

use crate::layout::{self, PvOptions};
use crate::lease;
use crate::lockfile::{FileLock, Resource};
use crate::model::Vg;
use crate::scan::{Scan, ScannedPv};
use crate::units::Bytes;
use crate::uuid::Uuid;
use crate::Error;

impl Session {
    /// The largest logical sector size of the named devices (512 when none is open here):
    /// what a shared VG's lease sizes follow.
    pub fn sector_size(&self, devices: &[&str]) -> u32 {
        self.devices
            .iter()
            .filter(|d| devices.contains(&d.name()))
            .map(|d| d.logical_sector_size())
            .max()
            .unwrap_or(512)
    }

    /// The indexes in `vg.pvs` of the PVs on `devices` (the PVs an allocation may use);
    /// an error names a device that holds no PV, or a PV of another VG.
    pub fn pv_indexes(&self, vg: &Vg, devices: &[&str]) -> Result<Vec<usize>, Error> {
        let scan = self.current();
        devices
            .iter()
            .map(|&d| {
                let bad = |why: String| Error::Device {
                    device: d.to_owned(),
                    why,
                };
                let label = scan
                    .pvs
                    .iter()
                    .find(|p| p.device == d)
                    .ok_or_else(|| bad("not a PV".into()))?;
                vg.pvs
                    .iter()
                    .position(|p| p.id == label.label.pv_uuid)
                    .ok_or_else(|| bad(format!("not a PV of volume group \"{}\"", vg.name)))
            })
            .collect()
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
        let size = crate::label::SECTOR;
        write(dev, sector * size as u64, &[0u8; crate::label::SECTOR])?;
        flush(dev)?;
        self.invalidate_hints()?;
        tracing::info!(device, "pvremove");
        Ok(())
    }

    /// Orphan PVs for `devices`, initialising devices that carry no label (as lvm2's
    /// vgcreate and vgextend do); `guard` passes before each label is written.
    fn orphans(
        &self,
        devices: &[&str],
        opts: &PvOptions,
        guard: Guard<'_>,
    ) -> Result<Vec<ScannedPv>, Error> {
        let scan = self.scan();
        for d in devices {
            if !scan.pvs.iter().any(|p| p.device == *d) {
                guard()?;
                self.pvcreate_locked(&scan, d, opts, false)?;
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
        self.vgcreate_with(spec, devices, &PvOptions::default())
    }

    /// `vgcreate` with the `pvcreate` options (`--metadatasize`, ...) for devices that carry
    /// no label yet.
    pub fn vgcreate_with(
        &self,
        spec: &VgSpec,
        devices: &[&str],
        opts: &PvOptions,
    ) -> Result<Vg, Error> {
        self.vgcreate_guarded(spec, devices, opts, &|| Ok(()))
    }

    /// [`Session::vgcreate_with`], writing only while `guard` passes: it is asked once the
    /// locks are held, before each label, before the leases and before the metadata.
    /// - A shared VG's leases are written before its metadata: a VG that exists has them.
    pub(super) fn vgcreate_guarded(
        &self,
        spec: &VgSpec,
        devices: &[&str],
        opts: &PvOptions,
        guard: Guard<'_>,
    ) -> Result<Vg, Error> {
        let _g = self.global()?;
        let _v = self.lock(Resource::Vg(spec.name.clone()))?;
        let _o = self.lock(Resource::Orphans)?;
        let scan = self.scan();
        if scan.vgs.iter().any(|v| v.vg.name == spec.name) {
            return Err(Error::Device {
                device: spec.name.clone(),
                why: format!("A volume group called {} already exists.", spec.name),
            });
        }
        if spec.shared.is_some() && self.host.is_none() && !self.nolocking {
            return Err(Error::SharedWithoutLeases(spec.name.clone()));
        }
        guard()?;
        let pvs = self.orphans(devices, opts, guard)?;
        let new: Vec<NewPv> = pvs.iter().map(new_pv).collect();
        let mut vg = edit::vg::create(spec, &new, &edit::Stamp::now())?;
        describe(&mut vg, "vgcreate");
        if let Some(h) = self.host_for(&vg)? {
            // Another shared VG on these devices may already hold the enabled global lease.
            let mut gl_elsewhere = false;
            for other in scan.vgs.iter().filter(|o| o.vg.is_shared()) {
                gl_elsewhere |= h.holds_gl(&other.vg, &places(&scan, other))?;
            }
            // The new VG's PVs are `pvs`, in order.
            let at = vg_places(&vg, &pvs.iter().map(Some).collect::<Vec<_>>());
            guard()?;
            h.init_vg(&vg, &at, gl_elsewhere)?;
        }
        let joined: Vec<&ScannedPv> = pvs.iter().collect();
        guard()?;
        self.forget();
        self.commit(&vg, &joined, &joined)?;
        self.invalidate_hints()?;
        tracing::info!(vg = %vg.name, pvs = devices.len(), "vgcreate");
        Ok(vg)
    }

    /// `vgextend`.
    pub fn vgextend(&self, vg: &str, devices: &[&str]) -> Result<Vg, Error> {
        self.vgextend_with(vg, devices, &PvOptions::default())
    }

    /// `vgextend` with the `pvcreate` options for devices that carry no label yet.
    pub fn vgextend_with(&self, vg: &str, devices: &[&str], opts: &PvOptions) -> Result<Vg, Error> {
        self.vgextend_guarded(vg, devices, opts, &|| Ok(()))
    }

    /// [`Session::vgextend_with`], writing only while `guard` passes (asked under the locks
    /// and the VG lease, before each label and before the metadata).
    pub(super) fn vgextend_guarded(
        &self,
        vg: &str,
        devices: &[&str],
        opts: &PvOptions,
        guard: Guard<'_>,
    ) -> Result<Vg, Error> {
        let _g = self.global()?;
        let _v = self.lock(Resource::Vg(vg.to_owned()))?;
        let _o = self.lock(Resource::Orphans)?;
        let lease = self.vg_lease(vg)?;
        let pvs = self.orphans(devices, opts, guard)?;
        let scan = self.scan();
        let sv = writable(&scan, vg)?;
        let new: Vec<NewPv> = pvs.iter().map(new_pv).collect();
        let mut out = edit::vg::extend(sv.vg.clone(), &edit::EditCtx::standalone(), &new)?;
        next_version(&mut out, sv.vg.seqno, None, "vgextend")?;
        let mut all = members(&scan, sv)?;
        let joined: Vec<&ScannedPv> = pvs.iter().collect();
        all.extend(joined.iter().copied());
        guard()?;
        self.forget();
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
        let mut out = edit::vg::reduce(sv.vg.clone(), &edit::EditCtx::standalone(), &remove)?;
        next_version(&mut out, sv.vg.seqno, None, "vgreduce")?;
        let keep: Vec<&ScannedPv> = all
            .iter()
            .enumerate()
            .filter(|(i, _)| !remove.contains(i))
            .map(|(_, p)| *p)
            .collect();
        self.forget();
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
        commit::write_label(dev, &p.label.with_used(false))?;
        flush(dev)
    }
}

/// Asked before each write of a guarded change: an error stops it there.
pub(super) type Guard<'a> = &'a dyn Fn() -> Result<(), Error>;

/// What [`Session::global`] holds: the global lease (released first) and the file lock.
struct Global {
    /// Released first (fields drop in order), then the file lock.
    lease: Option<lease::Held>,
    _file: Option<FileLock>,
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

/// The PV a scanned orphan becomes in a VG.
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
        dev_size: Bytes(p.dev_size),
        pe_start: Bytes(pe_start),
        tail: Bytes(tail),
        bootloader: p
            .label
            .extension
            .as_ref()
            .and_then(|e| e.bootloader_areas.first())
            .map(|b| (Bytes(b.offset), Bytes(b.size))),
    }
}
