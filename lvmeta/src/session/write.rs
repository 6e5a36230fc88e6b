//! The write step of a commit: the VG's text printed once into reused buffers, put onto
//! every metadata area by [`crate::commit`] (text, flush, headers, flush), and the scan the
//! session's readers share replaced by one that holds the new VG.

use std::sync::Arc;

use super::{Session, GENERATOR};
use crate::commit::{self, Area, LabelWrite};
use crate::mda::{self, MdaError, MdaHeader};
use crate::model::{TextCache, Vg};
use crate::scan::{Scan, ScannedPv, ScannedVg};
use crate::Error;

/// What a commit reuses from the last one: the text it wrote, where it was written from
/// (aligned, zeroes after it: see [`commit::Text`]), reprinted in place, so that only the LVs
/// that changed are printed again.
pub(super) struct Scratch(TextCache);

impl Default for Scratch {
    fn default() -> Self {
        Self(TextCache::aligned(4096, commit::Text::ZEROES))
    }
}

/// An area a commit wrote: its device, its index on the device, its new header.
pub(super) type Written = (String, usize, MdaHeader);

/// How full a VG's metadata areas are: the committed text against the largest text its
/// smallest area takes (lvm2 keeps the committed copy and the next one both in an area).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataUse {
    /// Bytes of the committed text, NUL included.
    pub used: u64,
    /// The largest text every area of the VG takes (0: no area).
    pub max: u64,
    /// The device of that smallest area.
    pub device: String,
}

impl MetadataUse {
    /// Whether `more` bytes of text still fit.
    pub fn fits(&self, more: u64) -> bool {
        self.used.saturating_add(more) <= self.max
    }

    /// The share of the room used, in percent.
    pub fn percent(&self) -> f64 {
        match self.max {
            0 => 100.0,
            m => self.used as f64 * 100.0 / m as f64,
        }
    }
}

/// One metadata area in use by a VG.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataArea {
    /// The PV's device.
    pub device: String,
    /// The area's size in bytes, header included.
    pub size: u64,
    /// The largest text it takes (it keeps the committed copy and the next one).
    pub max_text: u64,
}

/// The metadata areas in use by `sv` (ignored ones left out), PV by PV.
pub(in crate::session) fn metadata_areas(scan: &Scan, sv: &ScannedVg) -> Vec<MetadataArea> {
    sv.pv_devices
        .iter()
        .flatten()
        .flat_map(|&i| scan.pvs[i].mdas.iter().map(move |m| (i, m)))
        .filter(|(_, m)| !m.header.as_ref().is_some_and(|h| h.committed.is_ignored()))
        .map(|(i, m)| MetadataArea {
            device: scan.pvs[i].device.clone(),
            size: m.locn.size,
            max_text: mda::max_text_size(m.locn.size),
        })
        .collect()
}

/// How full the metadata areas of `sv` are.
pub(in crate::session) fn metadata_use(scan: &Scan, sv: &ScannedVg) -> MetadataUse {
    let smallest = metadata_areas(scan, sv)
        .into_iter()
        .min_by_key(|a| a.max_text);
    MetadataUse {
        used: sv.text_bytes as u64 + 1,
        max: smallest.as_ref().map_or(0, |a| a.max_text),
        device: smallest.map_or_else(String::new, |a| a.device),
    }
}

/// The checksum of the committed text of `sv` in its first metadata area in use: with the
/// VG's id and seqno, what tells one written version from another.
pub(in crate::session) fn committed_checksum(scan: &Scan, sv: &ScannedVg) -> Option<u32> {
    sv.pv_devices
        .iter()
        .flatten()
        .flat_map(|&i| scan.pvs[i].mdas.iter())
        .filter_map(|m| m.header.as_ref())
        .find(|h| !h.committed.is_ignored() && !h.committed.is_empty())
        .map(|h| h.committed.checksum)
}

impl Session {
    /// Writes `vg` to the areas of `pvs`; the PVs in `joining` get `PV_EXT_USED` and fresh
    /// area headers first. Returns the text's size and each written area's new header
    /// (device, index of the area on it, header). A text too large for an area is
    /// [`Error::MetadataFull`], and nothing is written.
    pub(super) fn commit(
        &self,
        vg: &Vg,
        pvs: &[&ScannedPv],
        joining: &[&ScannedPv],
    ) -> Result<(usize, Vec<Written>), Error> {
        let mut scratch = self.scratch.lock().unwrap_or_else(|p| p.into_inner());
        let scratch = &mut *scratch;
        vg.write_text_cached(GENERATOR, &mut scratch.0);
        let text = commit::Text::laid_out(scratch.0.buffer(), scratch.0.text_range());
        let size = text.len() - 1;
        let mut labels = Vec::new();
        let mut areas = Vec::new();
        let mut at = Vec::new();
        for p in pvs {
            let dev = self.dev(&p.device)?;
            let joins = joining.iter().any(|j| j.device == p.device);
            if joins {
                labels.push(LabelWrite {
                    dev,
                    label: p.label.with_used(true),
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
        let result = commit::commit(&labels, &areas, &text).map_err(|e| match e {
            Error::Mda {
                device,
                source: MdaError::TooLarge { size, max, .. },
            } => Error::MetadataFull {
                vg: vg.name.clone(),
                device,
                size,
                max,
            },
            e => e,
        });
        let written = at
            .into_iter()
            .zip(result?)
            .map(|((d, i), h)| (d, i, h))
            .collect();
        Ok((size, written))
    }

    /// Commits `out` (VG `vg` of `from`) to the areas of `pvs`, then makes the scan readers
    /// share one that holds it: readers wait meanwhile, so none of them sees the new headers
    /// before the new VG and rescans. Returns that scan.
    pub(super) fn commit_and_publish(
        &self,
        from: &Scan,
        vg: &str,
        out: Vg,
        pvs: &[&ScannedPv],
    ) -> Result<Arc<Scan>, Error> {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let (text_bytes, written) = match self.commit(&out, pvs, &[]) {
            Ok(w) => w,
            Err(e) => {
                // What the devices hold now is for the next reader to find out.
                *cache = None;
                return Err(e);
            }
        };
        let mut next = Scan {
            pvs: from.pvs.clone(),
            vgs: Vec::with_capacity(from.vgs.len()),
            warnings: Vec::new(),
        };
        for (device, mda, header) in written {
            if let Some(p) = next.pvs.iter_mut().find(|p| p.device == device) {
                if let Some(m) = p.mdas.get_mut(mda) {
                    m.header = Some(header);
                }
            }
        }
        let mut out = Some(out);
        for sv in &from.vgs {
            next.vgs.push(match (sv.vg.name == vg, out.take()) {
                (true, Some(vg)) => ScannedVg {
                    vg,
                    text: Arc::default(),
                    text_bytes,
                    pv_devices: sv.pv_devices.clone(),
                },
                (_, o) => {
                    out = o;
                    sv.clone()
                }
            });
        }
        let next = Arc::new(next);
        *cache = Some(next.clone());
        self.remember(&next);
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) =
            (Arc::downgrade(&next), vg.to_owned());
        Ok(next)
    }

    /// Whether `scan` is the one the last commit of VG `vg` published.
    pub(super) fn published(&self, scan: &Arc<Scan>, vg: &str) -> bool {
        let p = self.published.lock().unwrap_or_else(|p| p.into_inner());
        std::sync::Weak::ptr_eq(&p.0, &Arc::downgrade(scan)) && p.1 == vg
    }
}

/// Makes `out` the version after `committed` (or after `floor`, when higher: a restored
/// backup's), written by `verb`. Refused when the seqno would overflow.
pub(super) fn next_version(
    out: &mut Vg,
    committed: u32,
    floor: Option<u32>,
    verb: &str,
) -> Result<(), Error> {
    let above = committed.max(floor.unwrap_or(0));
    out.seqno = above.checked_add(1).ok_or_else(|| {
        crate::edit::refused(
            out.name.clone(),
            format!("no version can be numbered after seqno {above}, the largest lvm2 has"),
        )
    })?;
    describe(out, verb);
    Ok(())
}

/// The metadata's description of a change: `Write from lvmeta <verb>.`, this host, now.
pub(super) fn describe(vg: &mut Vg, verb: &str) {
    let stamp = crate::edit::Stamp::now();
    vg.header.description = Some(format!("Write from lvmeta {verb}."));
    vg.header.creation_host = Some(stamp.host);
    vg.header.creation_time = i64::try_from(stamp.time).ok();
}
