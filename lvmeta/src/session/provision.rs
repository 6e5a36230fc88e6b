//! A VG made and grown on devices that carry nothing, by hosts that may race each other:
//! what a driver given only devices and a VG name does.
//!
//! - Every device is judged first ([`crate::signature`]); one that carries anything is left
//!   alone and reported.
//! - The creation claim ([`crate::claim`]) on the first device lets one host at a time make
//!   the VG; under it the devices are judged again, so a host that lost the race finds the
//!   VG made and does nothing.
//! - A device is added under a claim on itself (and the VG lease `vgextend` takes).
//! - A host that died under its claim leaves its record and maybe orphan PV labels: the
//!   next host, finding that record before it writes its own, takes the stale claim over
//!   and uses those labels.
//! - Every write of the change asks the claim first (`vgcreate_guarded`): a claim that ran
//!   out of time while a lock was waited for stops it before it writes.

use crate::claim::{self, Claim, Sector};
use crate::edit::VgSpec;
use crate::layout::PvOptions;
use crate::scan::Scan;
use crate::signature;
use crate::Error;

use super::Session;

/// How VGs and PVs are made.
#[derive(Debug, Clone)]
pub struct Provision {
    /// The VG (name, extent size, shared or not).
    pub spec: VgSpec,
    /// How new PVs are laid out (their metadata area's size).
    pub pv: PvOptions,
    /// The creation claim's timing.
    pub timing: claim::Timing,
    /// This host's name, written in claim records.
    pub host_name: String,
}

/// What [`Session::create_vg_once`] and [`Session::extend_blank`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Provisioned {
    /// The VG was made by this call.
    pub created: bool,
    /// Devices this call added to the VG.
    pub extended: Vec<String>,
    /// Devices left alone, with what they carry.
    pub refused: Vec<(String, String)>,
}

impl Session {
    /// Makes VG `p.spec` on `devices` unless it exists: only when every device carries
    /// nothing, and by one racing host only. `refused` names what stopped it.
    pub fn create_vg_once(&self, p: &Provision, devices: &[&str]) -> Result<Provisioned, Error> {
        let Some(first) = devices.first() else {
            return Err(Error::VgNotFound(p.spec.name.clone()));
        };
        let name = &p.spec.name;
        if self.scan().vg(name).is_ok() {
            return Ok(Provisioned::default());
        }
        let dev = self.dev(first)?;
        // A maker's record for this VG before this one writes its own: the orphan PV labels
        // beside it are that maker's.
        let left = matches!(claim::read(dev)?, Sector::Claim(r) if &r.vg == name);
        let refused = self.carrying(&self.scan(), devices, left)?;
        if !refused.is_empty() {
            return Ok(Provisioned {
                refused,
                ..Provisioned::default()
            });
        }
        let claim = Claim::acquire(dev, name, &p.host_name, p.timing, 2 * p.timing.stale)?;
        // Judged again under the claim: the host that held it before may have made the VG.
        let scan = self.scan();
        let refused = match scan.vg(name) {
            Ok(_) => Vec::new(),
            Err(_) => self.carrying(&scan, devices, left)?,
        };
        if scan.vg(name).is_ok() || !refused.is_empty() {
            claim.release()?;
            return Ok(Provisioned {
                refused,
                ..Provisioned::default()
            });
        }
        let made = self.vgcreate_guarded(&p.spec, devices, &p.pv, &|| claim.check());
        let released = claim.release();
        let vg = made?;
        released?;
        tracing::info!(vg = %vg.name, devices = ?devices, "made the VG on blank devices");
        Ok(Provisioned {
            created: true,
            ..Provisioned::default()
        })
    }

    /// Adds to existing VG `p.spec.name` those of `devices` that are not its PVs and carry
    /// nothing; `refused` names the others that are not its PVs.
    pub fn extend_blank(&self, p: &Provision, devices: &[&str]) -> Result<Provisioned, Error> {
        let name = &p.spec.name;
        let mut out = Provisioned::default();
        for d in devices {
            let scan = self.scan();
            if is_member(&scan, name, d) {
                continue;
            }
            let dev = self.dev(d)?;
            let left = matches!(claim::read(dev)?, Sector::Claim(r) if &r.vg == name);
            if let Some(why) = self.carries(&scan, d, left)? {
                out.refused.push(((*d).to_owned(), why));
                continue;
            }
            let claim = Claim::acquire(dev, name, &p.host_name, p.timing, 2 * p.timing.stale)?;
            let scan = self.scan();
            let done = if is_member(&scan, name, d) {
                Ok(false)
            } else {
                match self.carries(&scan, d, left) {
                    Err(e) => Err(e),
                    Ok(Some(why)) => {
                        out.refused.push(((*d).to_owned(), why));
                        Ok(false)
                    }
                    Ok(None) => self
                        .vgextend_guarded(name, &[d], &p.pv, &|| claim.check())
                        .map(|_| true),
                }
            };
            let released = claim.release();
            if done? {
                tracing::info!(vg = %name, device = d, "added a blank device to the VG");
                out.extended.push((*d).to_owned());
            }
            released?;
        }
        Ok(out)
    }

    /// What each of `devices` carries that stops it becoming a PV (`left`: see
    /// [`Session::carries`]).
    fn carrying(
        &self,
        scan: &Scan,
        devices: &[&str],
        left: bool,
    ) -> Result<Vec<(String, String)>, Error> {
        let mut out = Vec::new();
        for d in devices {
            if let Some(why) = self.carries(scan, d, left)? {
                out.push(((*d).to_owned(), why));
            }
        }
        Ok(out)
    }

    /// What device `d` carries that stops it becoming a PV (`None`: nothing). An orphan PV
    /// label counts unless `left`: a maker of the VG left its claim record (read before
    /// this host wrote its own) and died between its labels and its metadata.
    fn carries(&self, scan: &Scan, d: &str, left: bool) -> Result<Option<String>, Error> {
        if let Some(i) = scan.pvs.iter().position(|p| p.device == d) {
            if let Some((other, _)) = scan.vg_of_pv(i) {
                return Ok(Some(format!("a PV of VG {}", other.vg.name)));
            }
            return Ok(match left {
                true => None,
                false => Some("an lvm2 PV label of no VG (an orphan PV)".into()),
            });
        }
        let dev = self.dev(d)?;
        let skip = claim::OFFSET as usize..claim::OFFSET as usize + claim::LEN;
        let skip = match claim::read(dev)? {
            Sector::Claim(_) => skip,
            _ => 0..0,
        };
        Ok(signature::inspect_device(dev, skip)?.map(|f| f.to_string()))
    }
}

/// Whether device `d` is a PV of VG `vg` in `scan`.
fn is_member(scan: &Scan, vg: &str, d: &str) -> bool {
    scan.pvs
        .iter()
        .position(|p| p.device == d)
        .and_then(|i| scan.vg_of_pv(i))
        .is_some_and(|(v, _)| v.vg.name == vg)
}
