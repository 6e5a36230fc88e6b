//! Finding PVs and VGs on a set of devices: read every label and every metadata area, check
//! every copy of the text, pick the newest valid copy of each VG, and report the rest.

use std::collections::HashMap;
use std::sync::Arc;

use crate::dev::{BlockDevice, Prefetched, PREFETCH};
use crate::label::{self, DiskLocn, LabelError, PvLabel, LABEL_SCAN_SIZE};
use crate::mda::{self, MdaError, MdaHeader, MDA_HEADER_SIZE};
use crate::model::{Imported, ModelWarning, Vg};
use crate::text;
use crate::Error;

/// A metadata area of a PV as found on disk.
#[derive(Debug, Clone)]
pub struct Mda {
    /// Location and size from the pv_header.
    pub locn: DiskLocn,
    /// The header, when it validated.
    pub header: Option<MdaHeader>,
}

/// A device that carries a valid PV label.
#[derive(Debug, Clone)]
pub struct ScannedPv {
    /// Device path (or image file, or in-memory name).
    pub device: String,
    /// Current device size in bytes.
    pub dev_size: u64,
    /// Logical sector size of the device.
    pub sector_size: u32,
    /// The label.
    pub label: PvLabel,
    /// Its metadata areas, in pv_header order.
    pub mdas: Vec<Mda>,
}

/// One VG, from its newest valid metadata copy.
#[derive(Debug, Clone)]
pub struct ScannedVg {
    /// The VG.
    pub vg: Vg,
    /// The committed text it was read from (without the NUL); empty in the scans a session
    /// keeps (it keeps no copy of the text: see `text_bytes`).
    pub text: Arc<String>,
    /// The size of the committed text (without the NUL).
    pub text_bytes: usize,
    /// For each PV of the VG (same order as `vg.pvs`), its index in [`Scan::pvs`].
    pub pv_devices: Vec<Option<usize>>,
}

/// Something a scan noticed but worked around, as lvm2 would warn about it.
#[derive(Debug, thiserror::Error)]
pub enum ScanWarning {
    /// A device could not be opened or read.
    #[error("{0}")]
    Device(Error),
    /// A sector looked like a label but was rejected.
    #[error("{device}: ignoring damaged label: {error}")]
    Label {
        /// Device.
        device: String,
        /// Why.
        error: LabelError,
    },
    /// A metadata area header or its text is unusable.
    #[error("{device}: ignoring metadata area at offset {offset}: {error}")]
    Mda {
        /// Device.
        device: String,
        /// Absolute offset of the area.
        offset: u64,
        /// Why.
        error: Box<Error>,
    },
    /// An older copy of a VG's metadata.
    #[error("{device}: ignoring metadata seqno {seqno} in area at offset {offset} for seqno {newest} of VG {vg}")]
    Stale {
        /// Device.
        device: String,
        /// Absolute offset of the area.
        offset: u64,
        /// VG name.
        vg: String,
        /// Seqno of this copy.
        seqno: u32,
        /// The seqno that was used.
        newest: u32,
    },
    /// A copy with the newest seqno whose text differs from the one used.
    #[error("{device}: metadata in area at offset {offset} has seqno {seqno} of VG {vg} but different text; not used")]
    Mismatch {
        /// Device.
        device: String,
        /// Absolute offset of the area.
        offset: u64,
        /// VG name.
        vg: String,
        /// The seqno.
        seqno: u32,
    },
    /// A PV the VG metadata lists was not found on any scanned device.
    #[error("VG {vg}: PV {pv_id} is missing")]
    MissingPv {
        /// VG name.
        vg: String,
        /// The missing PV's id.
        pv_id: String,
    },
    /// Metadata text had a non-fatal problem.
    #[error("VG {vg}: {warning}")]
    Model {
        /// VG name.
        vg: String,
        /// What.
        warning: ModelWarning,
    },
}

/// Everything a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Devices with a PV label, in scan order.
    pub pvs: Vec<ScannedPv>,
    /// VGs, in order of first appearance.
    pub vgs: Vec<ScannedVg>,
    /// What was noticed and worked around.
    pub warnings: Vec<ScanWarning>,
}

impl Scan {
    /// The VG named `name`.
    pub fn vg(&self, name: &str) -> Result<&ScannedVg, Error> {
        let mut it = self.vgs.iter().filter(|v| v.vg.name == name);
        match (it.next(), it.next()) {
            (Some(v), None) => Ok(v),
            (Some(_), Some(_)) => Err(Error::VgAmbiguous(name.to_owned())),
            (None, _) => Err(Error::VgNotFound(name.to_owned())),
        }
    }

    /// The VG (and its PV index) a scanned PV belongs to, if any.
    pub fn vg_of_pv(&self, pv: usize) -> Option<(&ScannedVg, usize)> {
        self.vgs.iter().find_map(|v| {
            v.pv_devices
                .iter()
                .position(|d| *d == Some(pv))
                .map(|i| (v, i))
        })
    }
}

/// A validated copy of metadata text found in one area.
struct Copy {
    device: String,
    offset: u64,
    checksum: u32,
    text: Arc<String>,
}

/// Scans `devices` for PVs and VGs.
pub fn scan(devices: &[&dyn BlockDevice]) -> Scan {
    let mut out = Scan::default();
    let mut copies: Vec<Copy> = Vec::new();
    for dev in devices {
        match scan_device(*dev, &mut out.warnings) {
            Ok(Some((pv, found))) => {
                out.pvs.push(pv);
                copies.extend(found);
            }
            Ok(None) => {}
            Err(e) => out.warnings.push(ScanWarning::Device(e)),
        }
    }
    choose(&mut out, copies);
    out
}

/// What identifies the on-disk state of a set of devices without reading any metadata text:
/// each labelled device with its label and the headers of its areas (whose committed slots
/// carry the location, size and checksum of the text). Equal fingerprints mean equal texts.
pub type Fingerprint = Vec<(String, PvLabel, Vec<Option<MdaHeader>>)>;

/// The start of `dev`: the label and the first area's header in one read, or the label
/// alone when that read fails (a bad header is then the area's warning).
fn head_view(dev: &dyn BlockDevice) -> std::io::Result<Prefetched<'_>> {
    Prefetched::read(dev, PREFETCH).or_else(|_| Prefetched::read(dev, LABEL_SCAN_SIZE))
}

/// Reads the labels and area headers of `devices` (one read each when the only area
/// header is the first one, at 4 KiB).
pub fn fingerprint(devices: &[&dyn BlockDevice]) -> Fingerprint {
    let mut out = Vec::new();
    for dev in devices {
        let view =
            Prefetched::read(*dev, PREFETCH).or_else(|_| Prefetched::read(*dev, LABEL_SCAN_SIZE));
        let Ok(view) = view else {
            continue;
        };
        let head = &view.head()[..LABEL_SCAN_SIZE.min(view.head().len())];
        let Some(label) = label::scan(head).label else {
            continue;
        };
        let dev: &dyn BlockDevice = &view;
        let headers = label
            .metadata_areas
            .iter()
            .map(|locn| {
                let mut h = [0u8; MDA_HEADER_SIZE as usize];
                let fits = locn
                    .offset
                    .checked_add(locn.size)
                    .is_some_and(|e| e <= dev.size());
                (fits && read(dev, locn.offset, &mut h).is_ok())
                    .then(|| mda::decode(&h, locn.offset, locn.size).ok())
                    .flatten()
            })
            .collect();
        out.push((dev.name().to_owned(), label, headers));
    }
    out
}

impl Scan {
    /// The fingerprint of the devices as this scan found them.
    pub fn fingerprint(&self) -> Fingerprint {
        self.pvs
            .iter()
            .map(|p| {
                (
                    p.device.clone(),
                    p.label.clone(),
                    p.mdas.iter().map(|m| m.header.clone()).collect(),
                )
            })
            .collect()
    }
}

fn read(dev: &dyn BlockDevice, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
    dev.read_at(offset, buf).map_err(|source| Error::Io {
        device: dev.name().to_owned(),
        offset,
        source,
    })
}

/// Reads the label and metadata areas of one device. `Ok(None)`: not a PV.
fn scan_device(
    dev: &dyn BlockDevice,
    warnings: &mut Vec<ScanWarning>,
) -> Result<Option<(ScannedPv, Vec<Copy>)>, Error> {
    let name = dev.name().to_owned();
    let size = dev.size();
    let view = head_view(dev).map_err(|source| Error::Io {
        device: name.clone(),
        offset: 0,
        source,
    })?;
    let dev: &dyn BlockDevice = &view;
    let head = &view.head()[..LABEL_SCAN_SIZE.min(view.head().len())];
    let found = label::scan(head);
    for error in found.rejected {
        tracing::debug!(device = %name, %error, "rejected label sector");
        warnings.push(ScanWarning::Label {
            device: name.clone(),
            error,
        });
    }
    let Some(label) = found.label else {
        return Ok(None);
    };
    tracing::debug!(device = %name, pv = %label.pv_uuid, "found PV label");
    let mut mdas = Vec::new();
    let mut copies = Vec::new();
    for locn in &label.metadata_areas {
        let mut m = Mda {
            locn: *locn,
            header: None,
        };
        match read_mda(dev, locn) {
            Ok((header, copy)) => {
                m.header = Some(header);
                copies.extend(copy);
            }
            Err(error) => {
                tracing::debug!(device = %name, offset = locn.offset, %error, "rejected metadata area");
                warnings.push(ScanWarning::Mda {
                    device: name.clone(),
                    offset: locn.offset,
                    error: Box::new(error),
                });
            }
        }
        mdas.push(m);
    }
    Ok(Some((
        ScannedPv {
            device: name,
            dev_size: size,
            sector_size: dev.logical_sector_size(),
            label,
            mdas,
        },
        copies,
    )))
}

/// Reads the committed text of the area at `locn` (header `h`) into a buffer of its own: the
/// buffer and where the text begins in it. The pieces are read whole sectors at a time into
/// memory aligned for the device, so that it needs no bounce copy; reads never leave the area.
fn read_text(
    dev: &dyn BlockDevice,
    locn: &DiskLocn,
    h: &MdaHeader,
) -> Result<(Vec<u8>, usize), Error> {
    const ALIGN: usize = 4096;
    let slot = &h.committed;
    let [(o1, l1), (o2, l2)] = mda::text_pieces(slot, h.size);
    let sector = |n: u64| n.div_ceil(MDA_HEADER_SIZE) * MDA_HEADER_SIZE;
    // Rounded up to a sector, within the area (a wrapped first piece ends at the area's end).
    let r1 = sector(l1).min(h.size.saturating_sub(o1)) as usize;
    let r2 = sector(l2).min(h.size.saturating_sub(o2)) as usize;
    let (l1, l2) = (l1 as usize, l2 as usize);
    let mut buf: Vec<u8> = Vec::with_capacity(l1.max(r1) + r2.max(l2) + ALIGN);
    let start = buf.as_ptr().align_offset(ALIGN).min(ALIGN - 1);
    // Never shorter than the text (bytes no read reaches stay zero and fail its checksum).
    buf.resize(start + (l1 + r2.max(l2)).max(r1), 0);
    read(dev, locn.offset + o1, &mut buf[start..start + r1])?;
    if l2 > 0 {
        read(dev, locn.offset + o2, &mut buf[start + l1..start + l1 + r2])?;
    }
    Ok((buf, start))
}

/// Reads and checks one area's header and committed text.
fn read_mda(dev: &dyn BlockDevice, locn: &DiskLocn) -> Result<(MdaHeader, Option<Copy>), Error> {
    let name = dev.name().to_owned();
    let mda_err = |source: MdaError| Error::Mda {
        device: name.clone(),
        source,
    };
    let end = locn.offset.checked_add(locn.size);
    if end.is_none_or(|e| e > dev.size()) || locn.size < 2 * MDA_HEADER_SIZE {
        return Err(mda_err(MdaError::Field {
            offset: locn.offset,
            field: "disk_areas_xl (metadata)",
            why: format!(
                "area of {} bytes does not fit the {}-byte device",
                locn.size,
                dev.size()
            ),
        }));
    }
    let mut hbuf = [0u8; MDA_HEADER_SIZE as usize];
    read(dev, locn.offset, &mut hbuf)?;
    let header = mda::decode(&hbuf, locn.offset, locn.size).map_err(&mda_err)?;
    let slot = header.committed;
    if slot.is_empty() || slot.is_ignored() {
        return Ok((header, None));
    }
    // decode() bounded slot.size by the area size, itself inside the device.
    let (buf, start) = read_text(dev, locn, &header)?;
    let size = slot.size as usize;
    let abs = locn.offset + slot.offset;
    let body = mda::check_text(&buf[start..start + size], &slot, abs).map_err(&mda_err)?;
    let body_len = body.len();
    // The text keeps the buffer it was read into: no copy of a large VG's text.
    let mut buf = buf;
    buf.truncate(start + body_len);
    buf.drain(..start);
    let body = String::from_utf8(buf).map_err(|e| Error::Text {
        device: name.clone(),
        offset: abs,
        source: text::TextError::Syntax {
            offset: e.utf8_error().valid_up_to(),
            line: 0,
            what: "metadata text is not UTF-8".into(),
        },
    })?;
    Ok((
        header,
        Some(Copy {
            device: name.clone(),
            offset: locn.offset,
            checksum: slot.checksum,
            text: Arc::new(body),
        }),
    ))
}

/// The copies of one VG (by id), each with its parsed model.
type VgCopies = (crate::uuid::Uuid, Vec<(Arc<Imported>, Copy)>);

/// Parses every distinct text once, groups copies by VG id, keeps the newest of each VG.
fn choose(out: &mut Scan, copies: Vec<Copy>) {
    let mut parsed: HashMap<(u32, usize), Option<Arc<Imported>>> = HashMap::new();
    let mut by_vg: Vec<VgCopies> = Vec::new();
    for c in copies {
        let key = (c.checksum, c.text.len());
        let entry = parsed.entry(key).or_insert_with(|| match import_text(&c) {
            Ok(i) => Some(Arc::new(i)),
            Err(error) => {
                out.warnings.push(ScanWarning::Mda {
                    device: c.device.clone(),
                    offset: c.offset,
                    error: Box::new(error),
                });
                None
            }
        });
        let Some(imp) = entry.clone() else { continue };
        match by_vg.iter_mut().find(|(id, _)| *id == imp.vg.id) {
            Some((_, list)) => list.push((imp, c)),
            None => by_vg.push((imp.vg.id, vec![(imp, c)])),
        }
    }
    for (_, list) in by_vg {
        let newest = list.iter().map(|(i, _)| i.vg.seqno).max().unwrap_or(0);
        let Some((winner, wcopy)) = list.iter().find(|(i, _)| i.vg.seqno == newest) else {
            continue;
        };
        tracing::debug!(vg = %winner.vg.name, seqno = newest, device = %wcopy.device, "using metadata copy");
        for (imp, c) in &list {
            if imp.vg.seqno < newest {
                out.warnings.push(ScanWarning::Stale {
                    device: c.device.clone(),
                    offset: c.offset,
                    vg: imp.vg.name.clone(),
                    seqno: imp.vg.seqno,
                    newest,
                });
            } else if c.text != wcopy.text {
                out.warnings.push(ScanWarning::Mismatch {
                    device: c.device.clone(),
                    offset: c.offset,
                    vg: imp.vg.name.clone(),
                    seqno: newest,
                });
            }
        }
        let vg = winner.vg.clone();
        let pv_devices: Vec<Option<usize>> = vg
            .pvs
            .iter()
            .map(|p| out.pvs.iter().position(|s| s.label.pv_uuid == p.id))
            .collect();
        for (p, d) in vg.pvs.iter().zip(&pv_devices) {
            if d.is_none() {
                out.warnings.push(ScanWarning::MissingPv {
                    vg: vg.name.clone(),
                    pv_id: p.id.to_string(),
                });
            }
        }
        for w in &winner.warnings {
            out.warnings.push(ScanWarning::Model {
                vg: vg.name.clone(),
                warning: w.clone(),
            });
        }
        out.vgs.push(ScannedVg {
            vg,
            text: wcopy.text.clone(),
            text_bytes: wcopy.text.len(),
            pv_devices,
        });
    }
}

fn import_text(c: &Copy) -> Result<Imported, Error> {
    let tree = text::parse(&c.text).map_err(|source| Error::Text {
        device: c.device.clone(),
        offset: c.offset,
        source,
    })?;
    Ok(Vg::from_tree(&tree)?)
}
