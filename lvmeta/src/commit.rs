//! The write protocol: one new metadata text onto every metadata area of a VG, so that a crash
//! at any write leaves every area pointing at either the old or the new copy.
//!
//! Order (lvm2's `vg_write` + `vg_commit`, reference 2.4): label rewrites and fresh area
//! headers first (PVs joining the VG), then the text into the free part of every area's
//! circular buffer (never over the committed copy), a flush, then each area's header with
//! slot 0 pointing at the new copy, a flush. Until a header write lands, that area still
//! names the old copy; the header is one sector, which devices write atomically.
//!
//! lvm2 also writes a "precommitted" slot 1 between the two steps; only its activation code
//! reads it (to preload device-mapper tables), so lvmeta skips that third synchronous write.
//! Slot 1 is always written back empty, as lvm2's commit leaves it.

use crate::crc;
use crate::dev::BlockDevice;
use crate::label::{self, PvLabel, SECTOR};
use crate::mda::{self, MdaHeader, RawLocn};
use crate::Error;

/// One metadata area to receive the text.
pub struct Area<'d> {
    /// The device holding it.
    pub dev: &'d dyn BlockDevice,
    /// Its current header (or, for a fresh area, a header with both slots empty).
    pub header: MdaHeader,
    /// Write `header` before the text: the area is new or its header was damaged.
    pub fresh: bool,
}

/// A label sector to rewrite before any text (a PV joining or leaving the VG).
pub struct LabelWrite<'d> {
    /// The device.
    pub dev: &'d dyn BlockDevice,
    /// The new label.
    pub label: PvLabel,
}

/// One planned transfer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Absolute byte offset.
    pub offset: u64,
    /// The bytes.
    pub data: Vec<u8>,
}

/// What goes to one area: the text pieces and the header that commits them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AreaPlan {
    /// Text writes (one, or two when the copy wraps).
    pub text: Vec<Write>,
    /// The committed header after the change.
    pub header: MdaHeader,
}

/// Plans the writes that put `text` (without NUL) into an area whose header is `h`: lvm2's
/// placement, the NUL, zeroes up to the next 512-byte boundary. Pure; nothing is written.
pub fn plan_area(h: &MdaHeader, text: &[u8]) -> Result<AreaPlan, mda::MdaError> {
    let mut bytes = Vec::with_capacity(text.len() + SECTOR);
    bytes.extend_from_slice(text);
    bytes.push(0);
    let mut slot = mda::next_slot(h, bytes.len() as u64)?;
    slot.checksum = crc::calc(&bytes);
    let [(o1, l1), (o2, l2)] = mda::text_pieces(&slot, h.size);
    let pad = |d: &mut Vec<u8>| d.resize(d.len().div_ceil(SECTOR) * SECTOR, 0);
    // A copy that wraps fills its first piece exactly to the end of the area; the piece that
    // ends the copy is padded with zeroes to the next sector (still inside the area, whose
    // size is a whole number of sectors).
    let text: Vec<Write> = if l2 > 0 {
        let mut rest = bytes.split_off(l1 as usize);
        pad(&mut rest);
        vec![
            Write {
                offset: h.start + o1,
                data: bytes,
            },
            Write {
                offset: h.start + o2,
                data: rest,
            },
        ]
    } else {
        pad(&mut bytes);
        vec![Write {
            offset: h.start + o1,
            data: bytes,
        }]
    };
    // Padding never runs past the area, even one whose size is not a whole number of sectors.
    let mut text = text;
    for w in &mut text {
        let room = (h.start + h.size).saturating_sub(w.offset);
        w.data.truncate(usize::try_from(room).unwrap_or(usize::MAX));
    }
    Ok(AreaPlan {
        text,
        header: MdaHeader {
            committed: slot,
            precommitted: RawLocn::default(),
            ..h.clone()
        },
    })
}

/// Maps an I/O error on `dev` at `offset` to [`Error::Io`].
pub(crate) fn io_err(
    dev: &dyn BlockDevice,
    offset: u64,
) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io {
        device: dev.name().to_owned(),
        offset,
        source,
    }
}

/// Writes `data` at `offset`.
pub(crate) fn write(dev: &dyn BlockDevice, offset: u64, data: &[u8]) -> Result<(), Error> {
    dev.write_at(offset, data).map_err(io_err(dev, offset))
}

/// Makes the device's completed writes durable.
pub(crate) fn flush(dev: &dyn BlockDevice) -> Result<(), Error> {
    dev.flush().map_err(io_err(dev, 0))
}

/// Writes a label sector.
pub fn write_label(dev: &dyn BlockDevice, l: &PvLabel) -> Result<(), Error> {
    let sector = label::encode(l).map_err(|source| Error::Label {
        device: dev.name().to_owned(),
        source,
    })?;
    write(dev, l.sector * SECTOR as u64, &sector)
}

/// Writes an area header.
pub fn write_header(dev: &dyn BlockDevice, h: &MdaHeader) -> Result<(), Error> {
    write(dev, h.start, &mda::encode(h))
}

/// Commits `text` to every area: labels, fresh headers, text, flush, headers, flush. Returns
/// the new header of each area, in order. When the text does not fit an area, nothing at all
/// is written.
pub fn commit(
    labels: &[LabelWrite<'_>],
    areas: &[Area<'_>],
    text: &str,
) -> Result<Vec<MdaHeader>, Error> {
    let plans = areas
        .iter()
        .map(|a| {
            plan_area(&a.header, text.as_bytes()).map_err(|source| Error::Mda {
                device: a.dev.name().to_owned(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    tracing::debug!(
        areas = areas.len(),
        labels = labels.len(),
        bytes = text.len() + 1,
        "commit"
    );
    for l in labels {
        write_label(l.dev, &l.label)?;
    }
    for a in areas.iter().filter(|a| a.fresh) {
        write_header(a.dev, &a.header)?;
    }
    for (a, p) in areas.iter().zip(&plans) {
        for w in &p.text {
            write(a.dev, w.offset, &w.data)?;
        }
    }
    for l in labels {
        flush(l.dev)?;
    }
    for a in areas {
        flush(a.dev)?;
    }
    for (a, p) in areas.iter().zip(&plans) {
        write_header(a.dev, &p.header)?;
    }
    for a in areas {
        flush(a.dev)?;
    }
    Ok(plans.into_iter().map(|p| p.header).collect())
}

/// A header with both slots empty, as `pvcreate` and `vgremove` leave it.
pub fn empty_header(start: u64, size: u64) -> MdaHeader {
    MdaHeader {
        start,
        size,
        committed: RawLocn::default(),
        precommitted: RawLocn::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn plan_pads_and_wraps() {
        let h = empty_header(4096, 61440);
        let p = plan_area(&h, b"vg {}\n").expect("fits");
        assert_eq!(p.text.len(), 1);
        assert_eq!(p.text[0].offset, 4096 + 512);
        assert_eq!(p.text[0].data.len(), 512);
        assert_eq!(p.header.committed.size, 7);
        assert_eq!(p.header.committed.checksum, crc::calc(b"vg {}\n\0"));
        // A copy near the end wraps: first piece exactly to the end, rest at 512, padded.
        let h = MdaHeader {
            committed: RawLocn {
                offset: 30720,
                size: 27000,
                checksum: 0,
                flags: 0,
            },
            ..empty_header(4096, 61440)
        };
        let text = vec![b'v'; 6156];
        let p = plan_area(&h, &text).expect("fits");
        assert_eq!(p.header.committed.offset, 57856);
        assert_eq!(p.text[0].offset, 4096 + 57856);
        assert_eq!(p.text[0].data.len(), 61440 - 57856);
        assert_eq!(p.text[1].offset, 4096 + 512);
        assert_eq!(p.text[1].data.len(), 3072);
    }

    #[test]
    fn too_large_writes_nothing() {
        let dev = MemDevice::new("m", 1 << 20, 512);
        let before = dev.to_bytes();
        let areas = [
            Area {
                dev: &dev,
                header: empty_header(4096, 1 << 19),
                fresh: true,
            },
            Area {
                dev: &dev,
                header: empty_header(4096 + (1 << 19), 61440),
                fresh: true,
            },
        ];
        let text = "v".repeat(40_000);
        assert!(matches!(
            commit(&[], &areas, &text),
            Err(Error::Mda {
                source: mda::MdaError::TooLarge { .. },
                ..
            })
        ));
        assert_eq!(dev.to_bytes(), before);
    }
}
