//! The PV label: `label_header`, `pv_header` and `pv_header_extension` in one 512-byte sector,
//! found in one of the first four sectors of a PV. Pure decode and encode over bytes.

use byteorder::{ByteOrder, LittleEndian as LE};

use crate::crc;
use crate::uuid::Uuid;

/// Bytes lvm2 reads from the start of a device to look for a label (4 sectors).
pub const LABEL_SCAN_SIZE: usize = 2048;
/// Size of the label sector.
pub const SECTOR: usize = 512;
/// `label_header.id`.
pub const LABEL_ID: &[u8; 8] = b"LABELONE";
/// `label_header.type`.
pub const LABEL_TYPE: &[u8; 8] = b"LVM2 001";
/// The pv_header offset lvm2 always writes.
pub const PV_HEADER_OFFSET: u32 = 32;
/// `pv_header_extension.version` lvm2 2.03 writes.
pub const PV_EXT_VERSION: u32 = 2;
/// `pv_header_extension.flags` bit: the PV belongs to a VG.
pub const PV_EXT_USED: u32 = 1;

/// `{offset, size}` in bytes, as stored in the pv_header lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLocn {
    /// Absolute byte offset on the device.
    pub offset: u64,
    /// Size in bytes (0 for a data area: "to the end of the device").
    pub size: u64,
}

/// `pv_header_extension`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvExtension {
    /// Extension version (2 for lvm2 2.03).
    pub version: u32,
    /// Flags; bit 0 is [`PV_EXT_USED`].
    pub flags: u32,
    /// Bootloader areas.
    pub bootloader_areas: Vec<DiskLocn>,
}

/// A decoded label sector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvLabel {
    /// Sector (0..=3) the label sits in.
    pub sector: u64,
    /// The PV's id.
    pub pv_uuid: Uuid,
    /// Device size in bytes recorded by the last writer.
    pub device_size: u64,
    /// Data areas (lvm2 writes one: `{pe_start bytes, 0}`).
    pub data_areas: Vec<DiskLocn>,
    /// Metadata areas (0, 1 or 2).
    pub metadata_areas: Vec<DiskLocn>,
    /// The extension; `None` when its version is 0 (very old writers).
    pub extension: Option<PvExtension>,
}

impl PvLabel {
    /// This label with `PV_EXT_USED` set or cleared (a PV joining or leaving a VG), the
    /// extension made (version 2) when it had none.
    pub fn with_used(&self, used: bool) -> PvLabel {
        let mut l = self.clone();
        let ext = l.extension.get_or_insert_with(|| PvExtension {
            version: PV_EXT_VERSION,
            flags: 0,
            bootloader_areas: Vec::new(),
        });
        ext.version = PV_EXT_VERSION;
        if used {
            ext.flags |= PV_EXT_USED;
        } else {
            ext.flags &= !PV_EXT_USED;
        }
        l
    }
}

/// Why a label sector was rejected. Offsets are absolute byte offsets on the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    /// `sector_xl` names another sector than the one the label was found in.
    #[error("label at offset {offset} says it belongs in sector {claims}")]
    WrongSector {
        /// Where the label was found.
        offset: u64,
        /// Its `sector_xl`.
        claims: u64,
    },
    /// The CRC over bytes 20..511 does not match `crc_xl`.
    #[error(
        "label at offset {offset}: checksum 0x{computed:08x} does not match crc_xl 0x{stored:08x}"
    )]
    Checksum {
        /// Where the label was found.
        offset: u64,
        /// `crc_xl`.
        stored: u32,
        /// What the bytes give.
        computed: u32,
    },
    /// `type` is not `LVM2 001`.
    #[error("label at offset {offset}: type {found:?} is not \"LVM2 001\"")]
    Type {
        /// Where the label was found.
        offset: u64,
        /// The type bytes.
        found: String,
    },
    /// A field points outside the sector or holds an impossible value.
    #[error("label at offset {offset}: field {field}: {why}")]
    Field {
        /// Absolute offset of the field.
        offset: u64,
        /// The field's name.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
}

/// Result of looking at the first four sectors of a device.
#[derive(Debug, Default)]
pub struct LabelScan {
    /// The first valid label, if any.
    pub label: Option<PvLabel>,
    /// Sectors that start with `LABELONE` but were rejected.
    pub rejected: Vec<LabelError>,
}

/// Looks for a label in `buf` (the first [`LABEL_SCAN_SIZE`] bytes of a device), as lvm2
/// does: the first sector that starts with `LABELONE` and validates wins.
pub fn scan(buf: &[u8]) -> LabelScan {
    let mut out = LabelScan::default();
    for (i, sector) in buf
        .chunks_exact(SECTOR)
        .take(LABEL_SCAN_SIZE / SECTOR)
        .enumerate()
    {
        if &sector[..8] != LABEL_ID {
            continue;
        }
        match decode(sector, i as u64) {
            Ok(l) => {
                out.label = Some(l);
                break;
            }
            Err(e) => out.rejected.push(e),
        }
    }
    out
}

/// Decodes the label in `sector` (exactly 512 bytes) found at sector index `index`.
pub fn decode(sector: &[u8], index: u64) -> Result<PvLabel, LabelError> {
    let base = index * SECTOR as u64;
    if sector.len() != SECTOR {
        return Err(LabelError::Field {
            offset: base,
            field: "label sector",
            why: format!("{} bytes instead of 512", sector.len()),
        });
    }
    let claims = LE::read_u64(&sector[8..16]);
    if claims != index {
        return Err(LabelError::WrongSector {
            offset: base,
            claims,
        });
    }
    let stored = LE::read_u32(&sector[16..20]);
    let computed = crc::calc(&sector[20..]);
    if stored != computed {
        return Err(LabelError::Checksum {
            offset: base,
            stored,
            computed,
        });
    }
    if &sector[24..32] != LABEL_TYPE {
        return Err(LabelError::Type {
            offset: base + 24,
            found: String::from_utf8_lossy(&sector[24..32]).into_owned(),
        });
    }
    let pvh = LE::read_u32(&sector[20..24]) as usize;
    if !(32..=SECTOR - 40).contains(&pvh) {
        return Err(LabelError::Field {
            offset: base + 20,
            field: "offset_xl",
            why: format!("pv_header offset {pvh} is outside 32..=472"),
        });
    }
    let mut raw = [0u8; 32];
    raw.copy_from_slice(&sector[pvh..pvh + 32]);
    let pv_uuid = Uuid::from_raw(raw).map_err(|e| LabelError::Field {
        offset: base + pvh as u64,
        field: "pv_uuid",
        why: e.to_string(),
    })?;
    let device_size = LE::read_u64(&sector[pvh + 32..pvh + 40]);
    let mut pos = pvh + 40;
    let data_areas = read_list(sector, base, &mut pos, "disk_areas_xl (data)")?;
    let metadata_areas = read_list(sector, base, &mut pos, "disk_areas_xl (metadata)")?;
    let extension = if pos + 8 <= SECTOR && LE::read_u32(&sector[pos..pos + 4]) != 0 {
        let version = LE::read_u32(&sector[pos..pos + 4]);
        let flags = LE::read_u32(&sector[pos + 4..pos + 8]);
        pos += 8;
        let bootloader_areas = read_list(sector, base, &mut pos, "bootloader_areas_xl")?;
        Some(PvExtension {
            version,
            flags,
            bootloader_areas,
        })
    } else {
        None
    };
    if metadata_areas.len() > 2 {
        return Err(LabelError::Field {
            offset: base + pvh as u64 + 40,
            field: "disk_areas_xl (metadata)",
            why: format!(
                "{} metadata areas; lvm2 allows at most 2",
                metadata_areas.len()
            ),
        });
    }
    Ok(PvLabel {
        sector: index,
        pv_uuid,
        device_size,
        data_areas,
        metadata_areas,
        extension,
    })
}

/// Reads a `disk_locn` list ending at the first entry with offset 0.
fn read_list(
    sector: &[u8],
    base: u64,
    pos: &mut usize,
    field: &'static str,
) -> Result<Vec<DiskLocn>, LabelError> {
    let mut out = Vec::new();
    loop {
        if *pos + 16 > SECTOR {
            return Err(LabelError::Field {
                offset: base + *pos as u64,
                field,
                why: "list has no terminator inside the label sector".into(),
            });
        }
        let offset = LE::read_u64(&sector[*pos..*pos + 8]);
        let size = LE::read_u64(&sector[*pos + 8..*pos + 16]);
        *pos += 16;
        if offset == 0 {
            return Ok(out);
        }
        out.push(DiskLocn { offset, size });
    }
}

/// Encodes `label` as the 512-byte sector lvm2 writes (pv_header at offset 32, `{0,0}`
/// terminators, an explicit empty bootloader entry, CRC last).
pub fn encode(label: &PvLabel) -> Result<[u8; SECTOR], LabelError> {
    let mut s = [0u8; SECTOR];
    s[..8].copy_from_slice(LABEL_ID);
    LE::write_u64(&mut s[8..16], label.sector);
    LE::write_u32(&mut s[20..24], PV_HEADER_OFFSET);
    s[24..32].copy_from_slice(LABEL_TYPE);
    s[32..64].copy_from_slice(label.pv_uuid.raw());
    LE::write_u64(&mut s[64..72], label.device_size);
    let mut pos = 72;
    let put = |s: &mut [u8; SECTOR], pos: &mut usize, l: DiskLocn, field| {
        if *pos + 16 > SECTOR {
            return Err(LabelError::Field {
                offset: label.sector * SECTOR as u64 + *pos as u64,
                field,
                why: "too many entries for one sector".into(),
            });
        }
        LE::write_u64(&mut s[*pos..*pos + 8], l.offset);
        LE::write_u64(&mut s[*pos + 8..*pos + 16], l.size);
        *pos += 16;
        Ok(())
    };
    let end = DiskLocn { offset: 0, size: 0 };
    for l in &label.data_areas {
        put(&mut s, &mut pos, *l, "disk_areas_xl (data)")?;
    }
    put(&mut s, &mut pos, end, "disk_areas_xl (data)")?;
    for l in &label.metadata_areas {
        put(&mut s, &mut pos, *l, "disk_areas_xl (metadata)")?;
    }
    put(&mut s, &mut pos, end, "disk_areas_xl (metadata)")?;
    if let Some(ext) = &label.extension {
        if pos + 8 > SECTOR {
            return Err(LabelError::Field {
                offset: label.sector * SECTOR as u64 + pos as u64,
                field: "pv_header_extension",
                why: "no room in the sector".into(),
            });
        }
        LE::write_u32(&mut s[pos..pos + 4], ext.version);
        LE::write_u32(&mut s[pos + 4..pos + 8], ext.flags);
        pos += 8;
        for l in &ext.bootloader_areas {
            put(&mut s, &mut pos, *l, "bootloader_areas_xl")?;
        }
        if ext.bootloader_areas.is_empty() {
            put(&mut s, &mut pos, end, "bootloader_areas_xl")?;
        }
        put(&mut s, &mut pos, end, "bootloader_areas_xl")?;
    }
    let c = crc::calc(&s[20..]);
    LE::write_u32(&mut s[16..20], c);
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The label sector lvm2 2.03.16 wrote (`tests/fixtures`).
    pub(crate) fn reference_sector() -> [u8; 512] {
        let hex = concat!(
            "4c4142454c4f4e45",
            "0100000000000000",
            "09c1a95f",
            "20000000",
            "4c564d3220303031",
            "66573279566b426e38585547696938414b75525a5a67636b447754434d626641",
            "0000001000000000",
            "0000100000000000",
            "0000000000000000",
            "00000000000000000000000000000000",
            "0010000000000000",
            "00f00f0000000000",
            "00000000000000000000000000000000",
            "02000000",
            "01000000"
        );
        let mut s = [0u8; 512];
        for (i, b) in (0..hex.len()).step_by(2).enumerate() {
            s[i] = u8::from_str_radix(&hex[b..b + 2], 16).expect("hex");
        }
        s
    }

    #[test]
    fn decodes_lvm2_sector() {
        let s = reference_sector();
        let l = decode(&s, 1).expect("valid label");
        assert_eq!(
            l.pv_uuid.to_string(),
            "fW2yVk-Bn8X-UGii-8AKu-RZZg-ckDw-TCMbfA"
        );
        assert_eq!(l.device_size, 0x1000_0000);
        assert_eq!(
            l.data_areas,
            vec![DiskLocn {
                offset: 0x100000,
                size: 0
            }]
        );
        assert_eq!(
            l.metadata_areas,
            vec![DiskLocn {
                offset: 0x1000,
                size: 0xff000
            }]
        );
        let ext = l.extension.clone().expect("extension");
        assert_eq!((ext.version, ext.flags), (2, 1));
        assert!(ext.bootloader_areas.is_empty());
        assert_eq!(encode(&l).expect("encodes"), s);
    }

    #[test]
    fn scan_finds_sector_and_reports_damage() {
        let mut buf = vec![0u8; LABEL_SCAN_SIZE];
        buf[512..1024].copy_from_slice(&reference_sector());
        assert_eq!(scan(&buf).label.map(|l| l.sector), Some(1));
        buf[600] ^= 1;
        let s = scan(&buf);
        assert!(s.label.is_none());
        assert!(matches!(
            s.rejected[0],
            LabelError::Checksum { offset: 512, .. }
        ));
        // A correct label copied to the wrong sector is refused.
        let mut buf = vec![0u8; LABEL_SCAN_SIZE];
        buf[1024..1536].copy_from_slice(&reference_sector());
        assert!(matches!(
            scan(&buf).rejected[0],
            LabelError::WrongSector { claims: 1, .. }
        ));
    }

    /// Cases of lvm2's test/unit/metadata_security_t.c.
    #[test]
    fn lvm2_metadata_security_cases() {
        let build = |offset_xl: u32, fill: &dyn Fn(&mut [u8; 512])| {
            let mut s = [0u8; 512];
            s[..8].copy_from_slice(LABEL_ID);
            LE::write_u64(&mut s[8..16], 1);
            LE::write_u32(&mut s[20..24], offset_xl);
            s[24..32].copy_from_slice(LABEL_TYPE);
            fill(&mut s);
            let c = crc::calc(&s[20..]);
            LE::write_u32(&mut s[16..20], c);
            s
        };
        let uuid_at =
            |at: usize| move |s: &mut [u8; 512]| s[at..at + 32].copy_from_slice(&[b'A'; 32]);
        // label-offset/oob, label-offset/one-past, label-offset/valid
        assert!(decode(&build(0x2000, &|_| {}), 1).is_err());
        assert!(decode(&build(512 - 40 + 1, &|_| {}), 1).is_err());
        assert!(decode(&build(32, &uuid_at(32)), 1).is_ok());
        // disk-locn/no-terminator
        let full = build(32, &|s| {
            s[32..64].copy_from_slice(&[b'A'; 32]);
            for (n, chunk) in s[72..].chunks_exact_mut(16).enumerate() {
                LE::write_u64(&mut chunk[..8], 0x100000 + n as u64 * 0x1000);
                LE::write_u64(&mut chunk[8..], 0x1000);
            }
        });
        assert!(matches!(decode(&full, 1), Err(LabelError::Field { .. })));
        // disk-locn/extension-overflow: the lists end exactly at the end of the sector, so
        // there is no room for an extension (two metadata areas, the most lvm2 allows).
        let tight = build(40, &|s| {
            s[40..72].copy_from_slice(&[b'A'; 32]);
            LE::write_u64(&mut s[80..88], 0x100000);
            LE::write_u64(&mut s[88..96], 0x1000);
            // data terminator at 96..112; metadata entries up to the terminator at 496..512
            for o in (112..496).step_by(16) {
                LE::write_u64(&mut s[o..o + 8], 0x1000);
                LE::write_u64(&mut s[o + 8..o + 16], 0x100000);
            }
        });
        // 24 metadata areas: more than lvm2 ever writes, refused as such.
        assert!(matches!(
            decode(&tight, 1),
            Err(LabelError::Field {
                field: "disk_areas_xl (metadata)",
                ..
            })
        ));
        let tight2 = build(40 + 384 - 32, &|s| {
            let p = 40 + 384 - 32;
            s[p..p + 32].copy_from_slice(&[b'A'; 32]);
            let d = p + 40;
            LE::write_u64(&mut s[d..d + 8], 0x100000);
            LE::write_u64(&mut s[d + 32..d + 40], 0x1000);
            LE::write_u64(&mut s[d + 40..d + 48], 0x100000);
            LE::write_u64(&mut s[d + 48..d + 56], 0x2000);
            LE::write_u64(&mut s[d + 56..d + 64], 0x100000);
        });
        let l = decode(&tight2, 1).expect("layout is valid");
        assert_eq!(l.metadata_areas.len(), 2);
        assert!(l.extension.is_none(), "no room for an extension");
        // disk-locn/normal
        let normal = build(32, &|s| {
            s[32..64].copy_from_slice(&[b'A'; 32]);
            LE::write_u64(&mut s[72..80], 0x100000);
            LE::write_u64(&mut s[80..88], 0x1000);
            LE::write_u32(&mut s[120..124], 2);
        });
        assert!(decode(&normal, 1).expect("valid").extension.is_some());
    }

    #[test]
    fn hostile_offsets_are_typed_errors() {
        let mut s = reference_sector();
        LE::write_u32(&mut s[20..24], 500);
        let c = crc::calc(&s[20..]);
        LE::write_u32(&mut s[16..20], c);
        assert!(matches!(
            decode(&s, 1),
            Err(LabelError::Field {
                field: "offset_xl",
                ..
            })
        ));
        // A list with no terminator.
        let mut s = reference_sector();
        for chunk in s[72..].chunks_mut(8) {
            chunk.copy_from_slice(&1u64.to_le_bytes());
        }
        let c = crc::calc(&s[20..]);
        LE::write_u32(&mut s[16..20], c);
        assert!(matches!(decode(&s, 1), Err(LabelError::Field { .. })));
    }
}
