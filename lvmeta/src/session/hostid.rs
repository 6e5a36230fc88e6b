//! `vgchange --lockstart` for a host given no host id: the id is chosen from the VG's
//! lockspace ([`crate::lease::hostid`]) and taken by joining it.
//!
//! - An id this host's sanlock daemon already joined the lockspace under wins (a second
//!   process of the host, or a restart of the one that joined).
//! - Then the id this host uses in its other lockspaces, if the area allows it; then the
//!   ids the area names for this host, then ids no host ever held. The area is read again
//!   before each try; an id another live host takes meanwhile (SANLK_HOSTID_BUSY) is
//!   skipped for the next.

use std::path::Path;

use super::{places, Session};
use crate::dev::{BlockDevice, FileDevice};
use crate::lease::{self, hostid, LeaseError};
use crate::Error;

impl Session {
    /// Joins shared VG `vg`'s lockspace under a host id chosen for this host: known by the
    /// lock manager's host name and by `names` (the node name, as in sanlock's default
    /// `<uuid>.<nodename>`); `template` is this host's lease manager (its own id is not
    /// used). The id joined.
    pub fn lockstart_choosing(
        &self,
        vg: &str,
        names: &[&str],
        template: &lease::Host,
    ) -> Result<u64, Error> {
        let host_for = |id| {
            lease::Host::new(
                template.manager.clone(),
                id,
                template.io_timeout,
                template.wait,
            )
        };
        let scan = self.current();
        let sv = scan.vg(vg)?;
        let at = places(&scan, sv);
        let ls = lease::layout::lockspace(&sv.vg, &at.paths, 0, at.geometry).ok_or_else(|| {
            LeaseError::Manager {
                what: format!("lockspace of VG {vg}"),
                why: "the VG has no lvmlock LV on a device given".into(),
            }
        })?;
        // One lease manager serves every id: its account of this host tells whether the
        // lockspace is joined already, and the name this host's records carry.
        let standing = template.manager.standing()?;
        let joined = standing
            .lockspace(&ls.name)
            .filter(|l| !l.failed)
            .map(|l| l.host_id);
        if let Some(id) = joined.filter(|&id| id > 0) {
            return Ok(id);
        }
        // The id this host uses in its other lockspaces, where it is free here too: lvm2
        // gives a host one id for every VG.
        let elsewhere = standing
            .lockspaces
            .iter()
            .filter(|l| l.name.starts_with(lease::LOCKSPACE_PREFIX) && l.host_id > 0)
            .map(|l| l.host_id)
            .next();
        let dev = FileDevice::open(Path::new(&ls.path)).map_err(|e| LeaseError::Manager {
            what: format!("lockspace {} on {}", ls.name, ls.path),
            why: e.to_string(),
        })?;
        let mut names = names.to_vec();
        names.push(&standing.host_name);
        let mut tried = Vec::new();
        loop {
            // Read again before each try: an id another host took meanwhile is skipped
            // rather than waited for (sanlock waits out a live owner before refusing).
            // Bounded by the geometry: 1 MiB, or 8 MiB with 4 KiB sectors.
            let mut area = vec![0u8; at.geometry.align as usize];
            dev.read_at(ls.offset, &mut area)
                .map_err(|e| LeaseError::Manager {
                    what: format!("lockspace {} on {} at {}", ls.name, ls.path, ls.offset),
                    why: e.to_string(),
                })?;
            let records = hostid::decode_area(&area, at.geometry);
            let mut order = hostid::candidates(&records, &names);
            if let Some(id) = elsewhere.filter(|id| order.contains(id)) {
                order.retain(|&o| o != id);
                order.insert(0, id);
            }
            let Some(id) = order.into_iter().find(|id| !tried.contains(id)) else {
                break;
            };
            tried.push(id);
            match host_for(id).start(&sv.vg, &at) {
                Ok(()) => {
                    // Another process of this host may have joined first, under its own id.
                    let id = template
                        .manager
                        .standing()?
                        .lockspace(&ls.name)
                        .map_or(id, |l| l.host_id);
                    tracing::info!(lockspace = %ls.name, host_id = id, "joined under a chosen host id");
                    return Ok(id);
                }
                Err(LeaseError::HostIdBusy { .. }) => {
                    tracing::info!(lockspace = %ls.name, host_id = id, "host id taken by another host: trying the next");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(LeaseError::Manager {
            what: format!("choosing a host id in lockspace {}", ls.name),
            why: "every id is held by another host".into(),
        }
        .into())
    }
}
