//! Metadata areas: the 512-byte `mda_header` with its `raw_locn` slots, and where the text of
//! a slot lies in the circular buffer that follows the header. Pure functions over bytes.

use byteorder::{ByteOrder, LittleEndian as LE};

use crate::crc;

/// Size of the mda_header.
pub const MDA_HEADER_SIZE: u64 = 512;
/// `mda_header.magic` (`FMTT_MAGIC`).
pub const FMTT_MAGIC: &[u8; 16] =
    b"\x20\x4c\x56\x4d\x32\x20\x78\x5b\x35\x41\x25\x72\x30\x4e\x2a\x3e";
/// `mda_header.version`.
pub const FMTT_VERSION: u32 = 1;
/// `raw_locn.flags` bit: this metadata area is ignored.
pub const RAW_LOCN_IGNORED: u32 = 1;

/// One `raw_locn` slot: where a copy of the metadata text lies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawLocn {
    /// Offset of the text relative to the mda start (>= 512 when used).
    pub offset: u64,
    /// Length of the text including its terminating NUL.
    pub size: u64,
    /// lvm2 CRC of those bytes.
    pub checksum: u32,
    /// [`RAW_LOCN_IGNORED`] or 0.
    pub flags: u32,
}

impl RawLocn {
    /// True when the slot points to no text.
    pub fn is_empty(&self) -> bool {
        self.offset == 0 && self.size == 0
    }
    /// True when the area is marked ignored (`pvchange --metadataignore y`).
    pub fn is_ignored(&self) -> bool {
        self.flags & RAW_LOCN_IGNORED != 0
    }
}

/// A decoded and validated `mda_header`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MdaHeader {
    /// Absolute byte offset of the area (and of this header).
    pub start: u64,
    /// Size of the whole area in bytes, header included.
    pub size: u64,
    /// Slot 0: committed metadata.
    pub committed: RawLocn,
    /// Slot 1: precommitted metadata (normally empty).
    pub precommitted: RawLocn,
}

/// Why an mda_header (or a slot in it) was rejected. Offsets are absolute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MdaError {
    /// Checksum over bytes 4..511 wrong.
    #[error("mda header at offset {offset}: checksum 0x{computed:08x} does not match checksum_xl 0x{stored:08x}")]
    Checksum {
        /// Header offset.
        offset: u64,
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// A field holds a value lvm2 rejects.
    #[error("mda header at offset {offset}: field {field}: {why}")]
    Field {
        /// Absolute offset of the field.
        offset: u64,
        /// Field name.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The text of a slot does not match its checksum.
    #[error("metadata text at offset {offset} ({size} bytes): checksum 0x{computed:08x} does not match raw_locn 0x{stored:08x}")]
    TextChecksum {
        /// Absolute offset of the first piece.
        offset: u64,
        /// Text size.
        size: u64,
        /// Stored value.
        stored: u32,
        /// Computed value.
        computed: u32,
    },
    /// New metadata text is larger than lvm2 allows for this area.
    #[error("metadata area at offset {offset}: text of {size} bytes exceeds the maximum metadata size ({max} bytes) by {} bytes", size - max)]
    TooLarge {
        /// Absolute offset of the area.
        offset: u64,
        /// Size of the new text, NUL included.
        size: u64,
        /// Largest size that fits.
        max: u64,
    },
    /// The text does not begin with a VG name.
    #[error("metadata text at offset {offset} does not begin with a valid VG name")]
    TextName {
        /// Absolute offset of the text.
        offset: u64,
    },
}

/// Decodes the header in `buf` (512 bytes), which was read at absolute `start` of an area the
/// pv_header says is `expected_size` bytes long.
pub fn decode(buf: &[u8], start: u64, expected_size: u64) -> Result<MdaHeader, MdaError> {
    let field = |rel: u64, field, why: String| MdaError::Field {
        offset: start.saturating_add(rel),
        field,
        why,
    };
    if buf.len() != MDA_HEADER_SIZE as usize {
        return Err(field(
            0,
            "mda_header",
            format!("{} bytes instead of 512", buf.len()),
        ));
    }
    let stored = LE::read_u32(&buf[0..4]);
    let computed = crc::calc(&buf[4..]);
    if stored != computed {
        return Err(MdaError::Checksum {
            offset: start,
            stored,
            computed,
        });
    }
    if &buf[4..20] != FMTT_MAGIC {
        return Err(field(4, "magic", "not the lvm2 text format magic".into()));
    }
    let version = LE::read_u32(&buf[20..24]);
    if version != FMTT_VERSION {
        return Err(field(20, "version", format!("{version}, expected 1")));
    }
    let hstart = LE::read_u64(&buf[24..32]);
    if hstart != start {
        return Err(field(
            24,
            "start",
            format!("{hstart}, but the header was read at {start}"),
        ));
    }
    let size = LE::read_u64(&buf[32..40]);
    if size != expected_size {
        return Err(field(
            32,
            "size",
            format!("{size}, but the pv_header says {expected_size}"),
        ));
    }
    if size < 2 * MDA_HEADER_SIZE {
        return Err(field(32, "size", format!("{size} leaves no room for text")));
    }
    let slot = |i: usize| {
        let b = &buf[40 + 24 * i..64 + 24 * i];
        RawLocn {
            offset: LE::read_u64(&b[0..8]),
            size: LE::read_u64(&b[8..16]),
            checksum: LE::read_u32(&b[16..20]),
            flags: LE::read_u32(&b[20..24]),
        }
    };
    // The slot list ends at the first entry with offset 0 (lvm2 main rejects a header whose
    // slots fill the whole sector).
    let slots = (buf.len() - 40) / 24;
    if (0..slots).all(|i| slot(i).offset != 0) {
        return Err(field(
            40,
            "raw_locns",
            "no terminating entry inside the header".into(),
        ));
    }
    let (committed, precommitted) = (slot(0), slot(1));
    for (i, s) in [committed, precommitted].iter().enumerate() {
        if s.is_empty() {
            continue;
        }
        let rel = 40 + 24 * i as u64;
        if s.offset < MDA_HEADER_SIZE || s.offset >= size {
            return Err(field(
                rel,
                "raw_locn.offset",
                format!("{} is outside the text area 512..{size}", s.offset),
            ));
        }
        if s.size == 0 || s.size > size - MDA_HEADER_SIZE || s.size > u64::from(u32::MAX) {
            return Err(field(
                rel + 8,
                "raw_locn.size",
                format!("{} does not fit the {size}-byte area", s.size),
            ));
        }
    }
    Ok(MdaHeader {
        start,
        size,
        committed,
        precommitted,
    })
}

/// Encodes `h` as the 512 bytes lvm2 writes.
pub fn encode(h: &MdaHeader) -> [u8; MDA_HEADER_SIZE as usize] {
    let mut b = [0u8; MDA_HEADER_SIZE as usize];
    b[4..20].copy_from_slice(FMTT_MAGIC);
    LE::write_u32(&mut b[20..24], FMTT_VERSION);
    LE::write_u64(&mut b[24..32], h.start);
    LE::write_u64(&mut b[32..40], h.size);
    for (i, s) in [h.committed, h.precommitted].iter().enumerate() {
        let o = 40 + 24 * i;
        LE::write_u64(&mut b[o..o + 8], s.offset);
        LE::write_u64(&mut b[o + 8..o + 16], s.size);
        LE::write_u32(&mut b[o + 16..o + 20], s.checksum);
        LE::write_u32(&mut b[o + 20..o + 24], s.flags);
    }
    let c = crc::calc(&b[4..]);
    LE::write_u32(&mut b[0..4], c);
    b
}

/// Where the text of `slot` lies, as (offset relative to the mda start, length) pieces: one
/// piece, or two when the text wraps from the end of the area back to offset 512.
pub fn text_pieces(slot: &RawLocn, mda_size: u64) -> [(u64, u64); 2] {
    let first = slot.size.min(mda_size - slot.offset);
    [(slot.offset, first), (MDA_HEADER_SIZE, slot.size - first)]
}

/// The largest text (NUL included) lvm2 writes to an area of `mda_size` bytes: half the text
/// area less one sector, so that the committed copy and the new one always both fit.
pub fn max_text_size(mda_size: u64) -> u64 {
    (mda_size.saturating_sub(MDA_HEADER_SIZE) / 2).saturating_sub(MDA_HEADER_SIZE)
}

/// Where lvm2 puts the next copy of `size` bytes of text in the area described by `h`: after
/// the committed copy, rounded up to 512 bytes, back at 512 when too little room is left
/// (lvm2's `_next_rlocn_offset`). The returned slot has no checksum yet.
pub fn next_slot(h: &MdaHeader, size: u64) -> Result<RawLocn, MdaError> {
    let max = max_text_size(h.size);
    if size > max || size == 0 {
        return Err(MdaError::TooLarge {
            offset: h.start,
            size,
            max,
        });
    }
    let c = h.committed;
    let offset = if c.is_empty() || c.is_ignored() {
        MDA_HEADER_SIZE
    } else {
        let end = c.offset + c.size;
        let old_last = if end <= h.size {
            end - 1
        } else {
            end - h.size + MDA_HEADER_SIZE - 1
        };
        let next = (old_last + 1).div_ceil(MDA_HEADER_SIZE) * MDA_HEADER_SIZE;
        if h.size - old_last < MDA_HEADER_SIZE || next > h.size - MDA_HEADER_SIZE {
            MDA_HEADER_SIZE
        } else {
            next
        }
    };
    let slot = RawLocn {
        offset,
        size,
        checksum: 0,
        flags: 0,
    };
    if !c.is_empty() && !c.is_ignored() && overlaps(&slot, &c, h.size) {
        // Unreachable with sizes below the maximum; lvm2 keeps the same guard.
        return Err(MdaError::Field {
            offset: h.start + 40,
            field: "raw_locn",
            why: format!(
                "new text at {offset}+{size} would overwrite the committed copy at {}+{}",
                c.offset, c.size
            ),
        });
    }
    Ok(slot)
}

/// True when the text of `a` and of `b` share a byte of the area.
fn overlaps(a: &RawLocn, b: &RawLocn, mda_size: u64) -> bool {
    let pa = text_pieces(a, mda_size);
    let pb = text_pieces(b, mda_size);
    pa.iter().any(|&(o1, l1)| {
        pb.iter()
            .any(|&(o2, l2)| l1 > 0 && l2 > 0 && o1 < o2 + l2 && o2 < o1 + l1)
    })
}

/// Checks assembled text (both pieces, in order) against `slot` and cuts it at its first NUL.
/// `abs` is the absolute offset of the first piece, for messages.
pub fn check_text<'a>(text: &'a [u8], slot: &RawLocn, abs: u64) -> Result<&'a [u8], MdaError> {
    let computed = crc::calc(text);
    if computed != slot.checksum {
        return Err(MdaError::TextChecksum {
            offset: abs,
            size: slot.size,
            stored: slot.checksum,
            computed,
        });
    }
    let text = memchr::memchr(0, text).map_or(text, |end| &text[..end]);
    // lvm2 takes the bytes up to the first whitespace or '{' as the VG name.
    let name_end = text
        .iter()
        .position(|b| b.is_ascii_whitespace() || *b == b'{')
        .unwrap_or(text.len());
    let name = std::str::from_utf8(&text[..name_end]).unwrap_or("");
    if crate::names::check_vg_name(name).is_err() {
        return Err(MdaError::TextName { offset: abs });
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lvm2_header_vector() {
        let mut b = [0u8; 512];
        // Reference section 2.2: slot 0 = {0x23200, 0x1449, 0xA9078E0E}, CRC 0xBB7F96F3.
        b[4..20].copy_from_slice(FMTT_MAGIC);
        LE::write_u32(&mut b[20..24], 1);
        LE::write_u64(&mut b[24..32], 0x1000);
        LE::write_u64(&mut b[32..40], 0xff000);
        LE::write_u64(&mut b[40..48], 0x23200);
        LE::write_u64(&mut b[48..56], 0x1449);
        LE::write_u32(&mut b[56..60], 0xA9078E0E);
        assert_eq!(crc::calc(&b[4..]), 0xBB7F96F3);
        LE::write_u32(&mut b[0..4], 0xBB7F96F3);
        let h = decode(&b, 0x1000, 0xff000).expect("valid");
        assert_eq!(h.committed.offset, 0x23200);
        assert_eq!(encode(&h), b);
    }

    #[test]
    fn wrapping_pieces() {
        let slot = RawLocn {
            offset: 58880,
            size: 6157,
            checksum: 0,
            flags: 0,
        };
        assert_eq!(text_pieces(&slot, 61440), [(58880, 2560), (512, 3597)]);
        let slot = RawLocn {
            offset: 512,
            size: 1088,
            checksum: 0,
            flags: 0,
        };
        assert_eq!(text_pieces(&slot, 1044480), [(512, 1088), (512, 0)]);
    }

    fn header(size: u64, committed: RawLocn) -> MdaHeader {
        MdaHeader {
            start: 4096,
            size,
            committed,
            precommitted: RawLocn::default(),
        }
    }

    #[test]
    fn placement_follows_lvm2() {
        let at = |offset, size| RawLocn {
            offset,
            size,
            checksum: 0,
            flags: 0,
        };
        // Empty area: 512. Default area after vgcreate (1088 bytes at 512): next at 2048.
        assert_eq!(
            next_slot(&header(1044480, at(0, 0)), 1100).map(|s| s.offset),
            Ok(512)
        );
        assert_eq!(
            next_slot(&header(1044480, at(512, 1088)), 1100).map(|s| s.offset),
            Ok(2048)
        );
        // The wrap observed with lvm2 (reference 2.3): 61440-byte area.
        let wrapped = at(58880, 6157);
        assert_eq!(
            next_slot(&header(61440, wrapped), 6200).map(|s| s.offset),
            Ok(4608)
        );
        assert_eq!(max_text_size(61440), 29952);
        assert_eq!(max_text_size(1044480), 521472);
        assert!(matches!(
            next_slot(&header(61440, at(512, 100)), 29953),
            Err(MdaError::TooLarge { max: 29952, .. })
        ));
        // Too close to the end: back to 512.
        let near_end = header(61440, at(31232, 29952));
        assert_eq!(next_slot(&near_end, 29952).map(|s| s.offset), Ok(512));
        // A copy that would run into the committed one is refused.
        let hostile = header(61440, at(512, 60000));
        assert!(matches!(
            next_slot(&hostile, 600),
            Err(MdaError::Field { .. })
        ));
    }

    /// Cases of lvm2's test/unit/metadata_security_t.c.
    #[test]
    fn lvm2_metadata_security_cases() {
        let hdr = |size: u64, off: u64, len: u64| {
            encode(&MdaHeader {
                start: 4096,
                size,
                committed: RawLocn {
                    offset: off,
                    size: len,
                    checksum: 0,
                    flags: 0,
                },
                precommitted: RawLocn::default(),
            })
        };
        // mda-size/zero, mda-size/one, mda-size/valid
        assert!(decode(&hdr(0, 512, 4096), 4096, 0).is_err());
        assert!(decode(&hdr(1, 512, 4096), 4096, 1).is_err());
        assert!(decode(&hdr(1 << 20, 512, 4096), 4096, 1 << 20).is_ok());
        // rlocn/size-truncation: 8 GiB area, 4 GiB offset, ~8 GiB text
        let big = hdr(0x2_0000_0000, 0x1_0000_0000, 0x1_FFFF_FE00);
        assert!(matches!(
            decode(&big, 4096, 0x2_0000_0000),
            Err(MdaError::Field {
                field: "raw_locn.size",
                ..
            })
        ));
        // rlocn/offset-oob
        assert!(decode(&hdr(1 << 20, 2 << 20, 4096), 4096, 1 << 20).is_err());
        // raw-locns/no-terminator
        let mut b = hdr(1 << 20, 512, 4096);
        for i in 0..19 {
            let o = 40 + 24 * i;
            LE::write_u64(&mut b[o..o + 8], 0x100000 + i as u64 * 0x1000);
            LE::write_u64(&mut b[o + 8..o + 16], 0x1000);
        }
        let c = crc::calc(&b[4..]);
        LE::write_u32(&mut b[0..4], c);
        assert!(matches!(
            decode(&b, 4096, 1 << 20),
            Err(MdaError::Field {
                field: "raw_locns",
                ..
            })
        ));
    }

    #[test]
    fn rejects_hostile_slots() {
        let h = MdaHeader {
            start: 4096,
            size: 65536,
            committed: RawLocn {
                offset: 70000,
                size: 10,
                checksum: 0,
                flags: 0,
            },
            precommitted: RawLocn::default(),
        };
        let b = encode(&h);
        assert!(matches!(
            decode(&b, 4096, 65536),
            Err(MdaError::Field {
                field: "raw_locn.offset",
                ..
            })
        ));
        let h = MdaHeader {
            committed: RawLocn {
                offset: 512,
                size: 65536,
                checksum: 0,
                flags: 0,
            },
            ..h
        };
        assert!(matches!(
            decode(&encode(&h), 4096, 65536),
            Err(MdaError::Field {
                field: "raw_locn.size",
                ..
            })
        ));
        assert!(matches!(
            decode(&encode(&h), 8192, 65536),
            Err(MdaError::Field { field: "start", .. })
        ));
        let mut b = encode(&h);
        b[100] = 1;
        assert!(matches!(
            decode(&b, 4096, 65536),
            Err(MdaError::Checksum { .. })
        ));
    }
}
