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

/// One planned transfer: `range` of a [`Text`] buffer to absolute byte `offset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// Absolute byte offset.
    pub offset: u64,
    /// The bytes, as a range of [`Text::buffer`].
    pub range: std::ops::Range<usize>,
}

/// What goes to one area: the text pieces and the header that commits them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AreaPlan {
    /// Text writes (one, or two when the copy wraps).
    pub text: Vec<Write>,
    /// The committed header after the change.
    pub header: MdaHeader,
}

/// The metadata text as it goes to disk, where it already is: its bytes in a buffer, followed
/// there by zero bytes (the NUL, and what pads any piece to a whole sector). At a 4 KiB-aligned
/// address, block devices take it without a bounce copy. Shared by every area of a commit.
#[derive(Debug, Clone)]
pub struct Text<'a> {
    buf: &'a [u8],
    start: usize,
    len: usize,
    checksum: u32,
}

impl<'a> Text<'a> {
    /// The zero bytes a laid-out text needs after it (see [`Text::laid_out`]).
    pub const ZEROES: usize = 2 * SECTOR;

    /// The text at `range` of `buf`, which holds at least [`Text::ZEROES`] zero bytes after
    /// it (a shorter buffer gets pieces cut short at its end, never past it).
    pub fn laid_out(buf: &'a [u8], range: std::ops::Range<usize>) -> Self {
        let body = buf.get(range.clone()).unwrap_or_default();
        Self {
            buf,
            start: range.start,
            len: body.len() + 1,
            checksum: crc::update(crc::calc(body), &[0]),
        }
    }

    /// Bytes of the text, NUL included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the text is empty (it never is: it holds at least its NUL).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole buffer [`Write::range`]s index into.
    pub fn buffer(&self) -> &[u8] {
        self.buf
    }
}

/// `text` laid out in a buffer of its own for [`Text::laid_out`]: the buffer and where the
/// text is in it (a 4 KiB-aligned address).
pub fn lay_out(text: &[u8]) -> (Vec<u8>, std::ops::Range<usize>) {
    let mut buf: Vec<u8> = Vec::with_capacity(text.len() + Text::ZEROES + 4096);
    let start = buf.as_ptr().align_offset(4096).min(4095);
    buf.resize(start, 0);
    buf.extend_from_slice(text);
    buf.resize(start + text.len() + Text::ZEROES, 0);
    (buf, start..start + text.len())
}

/// Plans the writes that put `text` into an area whose header is `h`: lvm2's placement, the
/// NUL, zeroes up to the next 512-byte boundary. Pure; nothing is written.
pub fn plan_area(h: &MdaHeader, text: &Text<'_>) -> Result<AreaPlan, mda::MdaError> {
    let mut slot = mda::next_slot(h, text.len as u64)?;
    slot.checksum = text.checksum;
    let [(o1, l1), (o2, l2)] = mda::text_pieces(&slot, h.size);
    let (l1, l2) = (l1 as usize, l2 as usize);
    let round = |n: usize| n.div_ceil(SECTOR) * SECTOR;
    // A copy that wraps fills its first piece exactly to the end of the area; the piece that
    // ends the copy is padded with zeroes to the next sector.
    let mut writes = if l2 > 0 {
        vec![
            Write {
                offset: h.start + o1,
                range: text.start..text.start + l1,
            },
            Write {
                offset: h.start + o2,
                range: text.start + l1..text.start + l1 + round(l2),
            },
        ]
    } else {
        vec![Write {
            offset: h.start + o1,
            range: text.start..text.start + round(l1),
        }]
    };
    // Padding never runs past the area, even one whose size is not a whole number of sectors.
    for w in &mut writes {
        let room = (h.start + h.size).saturating_sub(w.offset);
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        w.range.end = w.range.end.min(w.range.start + room).min(text.buf.len());
    }
    Ok(AreaPlan {
        text: writes,
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
    text: &Text<'_>,
) -> Result<Vec<MdaHeader>, Error> {
    let plans = areas
        .iter()
        .map(|a| {
            plan_area(&a.header, text).map_err(|source| Error::Mda {
                device: a.dev.name().to_owned(),
                source,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    tracing::debug!(
        areas = areas.len(),
        labels = labels.len(),
        bytes = text.len,
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
            write(a.dev, w.offset, &text.buffer()[w.range.clone()])?;
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
        let (buf, at) = lay_out(b"vg {}\n");
        let t = Text::laid_out(&buf, at);
        let p = plan_area(&h, &t).expect("fits");
        assert_eq!(p.text.len(), 1);
        assert_eq!(p.text[0].offset, 4096 + 512);
        assert_eq!(p.text[0].range.len(), 512);
        assert_eq!(&t.buffer()[p.text[0].range.clone()][..8], b"vg {}\n\0\0");
        assert_eq!(
            t.buffer()[p.text[0].range.start..]
                .as_ptr()
                .align_offset(4096),
            0
        );
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
        let (buf, at) = lay_out(&[b'v'; 6156]);
        let t = Text::laid_out(&buf, at);
        let p = plan_area(&h, &t).expect("fits");
        assert_eq!(p.header.committed.offset, 57856);
        assert_eq!(p.text[0].offset, 4096 + 57856);
        assert_eq!(p.text[0].range.len(), 61440 - 57856);
        assert_eq!(p.text[1].offset, 4096 + 512);
        assert_eq!(p.text[1].range.len(), 3072);
        let tail = &t.buffer()[p.text[1].range.clone()];
        assert_eq!((tail[2572], tail[2573], tail[3071]), (0, 0, 0));
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
        let (buf, at) = lay_out("v".repeat(40_000).as_bytes());
        let text = Text::laid_out(&buf, at);
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
