//! Where `pvcreate` puts things on a new PV: metadata areas, bootloader area, first extent.
//! Pure arithmetic following lvm2 2.03's `_text_pv_add_metadata_area` and `set_pe_align`
//! (lvm2's `lib/format_text/format-text.c`, `lib/metadata/pv.c`), so that a PV made by lvmeta is laid out byte for byte as lvm2
//! lays it out.

use crate::label::{DiskLocn, PvExtension, PvLabel, PV_EXT_VERSION};
use crate::units::Bytes;
use crate::uuid::Uuid;

/// Start of the first metadata area: the label scan size rounded up to a 4 KiB page.
pub const MDA0_START: u64 = 4096;
/// Default data alignment: PE 0 at 1 MiB.
pub const DEFAULT_ALIGNMENT: u64 = 1 << 20;
/// Smallest metadata area lvm2 creates (8 pages).
pub const MDA_SIZE_MIN: u64 = 8 * 4096;
/// Smallest device lvm2 accepts as a PV (`DEFAULT_PV_MIN_SIZE_KB`).
pub const PV_MIN_SIZE: u64 = 2 << 20;

/// What `pvcreate` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvOptions {
    /// `--pvmetadatacopies`: 0, 1 or 2 metadata areas.
    pub metadata_copies: u8,
    /// `--metadatasize` (default: what ends the first area at the alignment).
    pub metadata_size: Option<Bytes>,
    /// `--dataalignment` (default 1 MiB).
    pub data_alignment: Option<Bytes>,
    /// `--dataalignmentoffset`.
    pub data_alignment_offset: Bytes,
    /// `--bootloaderareasize`.
    pub bootloader_area_size: Bytes,
}

impl Default for PvOptions {
    fn default() -> Self {
        Self {
            metadata_copies: 1,
            metadata_size: None,
            data_alignment: None,
            data_alignment_offset: Bytes(0),
            bootloader_area_size: Bytes(0),
        }
    }
}

/// The planned layout of a PV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PvLayout {
    /// Metadata areas, first one first.
    pub mdas: Vec<DiskLocn>,
    /// Bootloader area, if one was asked for.
    pub bootloader: Option<DiskLocn>,
    /// Byte offset of PE 0.
    pub pe_start: u64,
}

/// A layout that cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// An option has a value lvm2 refuses.
    #[error("{option}: {why}")]
    Option {
        /// The option.
        option: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The device cannot hold the areas.
    #[error("device of {size} bytes is too small: {why}")]
    TooSmall {
        /// Device size in bytes.
        size: u64,
        /// What does not fit.
        why: String,
    },
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

/// Plans the layout of a `dev_size`-byte device.
pub fn plan(dev_size: u64, o: &PvOptions) -> Result<PvLayout, LayoutError> {
    let opt = |option, why: String| Err(LayoutError::Option { option, why });
    if o.metadata_copies > 2 {
        return opt(
            "--pvmetadatacopies",
            format!("{} (must be 0, 1 or 2)", o.metadata_copies),
        );
    }
    // Byte arithmetic of the on-disk layout from here on.
    let align = o.data_alignment.map_or(DEFAULT_ALIGNMENT, |b| b.0);
    let (offset, boot) = (o.data_alignment_offset.0, o.bootloader_area_size.0);
    if align == 0 || !align.is_multiple_of(512) {
        return opt(
            "--dataalignment",
            format!("{align} is not a positive multiple of 512"),
        );
    }
    if !offset.is_multiple_of(512) || !boot.is_multiple_of(512) {
        return opt(
            "--dataalignmentoffset/--bootloaderareasize",
            "must be multiples of 512".into(),
        );
    }
    if dev_size < PV_MIN_SIZE {
        return Err(LayoutError::TooSmall {
            size: dev_size,
            why: format!("a PV needs at least {PV_MIN_SIZE} bytes"),
        });
    }
    // The requested size, rounded to whole pages, at least the minimum.
    let requested = round_up(
        o.metadata_size
            .map_or(DEFAULT_ALIGNMENT - MDA0_START, |b| b.0),
        4096,
    )
    .max(MDA_SIZE_MIN);
    let aligned_end = |end: u64| round_up(end.saturating_sub(offset), align) + offset;
    let mut mdas = Vec::new();
    let mut end = 0;
    if o.metadata_copies > 0 {
        // Grow the area so that it ends on the alignment (when that still fits).
        let mut size = requested;
        let grown = aligned_end(MDA0_START + size) - MDA0_START;
        if MDA0_START + grown <= dev_size {
            size = grown;
        }
        mdas.push(DiskLocn {
            offset: MDA0_START,
            size,
        });
        end = MDA0_START + size;
    }
    let bootloader = (boot > 0).then(|| DiskLocn {
        offset: end.max(MDA0_START),
        size: round_up(boot, align),
    });
    let pe_start = match bootloader {
        Some(b) => b.offset + b.size,
        None if end == 0 => aligned_end(MDA0_START),
        None => end,
    };
    let mut data_end = dev_size;
    if o.metadata_copies == 2 {
        // At the end of the device, its start aligned down.
        let start = dev_size.saturating_sub(requested);
        let start = start - start.saturating_sub(offset) % align;
        data_end = start;
        mdas.push(DiskLocn {
            offset: start,
            size: dev_size - start,
        });
    }
    if data_end <= pe_start {
        return Err(LayoutError::TooSmall {
            size: dev_size,
            why: format!("no room for data after the first extent at {pe_start}"),
        });
    }
    Ok(PvLayout {
        mdas,
        bootloader,
        pe_start,
    })
}

impl PvLayout {
    /// The label `pvcreate` writes for this layout (an orphan PV: `PV_EXT_USED` clear).
    pub fn label(&self, id: Uuid, dev_size: u64) -> PvLabel {
        PvLabel {
            sector: 1,
            pv_uuid: id,
            device_size: dev_size,
            data_areas: vec![DiskLocn {
                offset: self.pe_start,
                size: 0,
            }],
            metadata_areas: self.mdas.clone(),
            extension: Some(PvExtension {
                version: PV_EXT_VERSION,
                flags: 0,
                bootloader_areas: self.bootloader.into_iter().collect(),
            }),
        }
    }

    /// Bytes at the end of the device reserved for the second metadata area.
    pub fn tail_reserved(&self, dev_size: u64) -> u64 {
        self.mdas
            .get(1)
            .map_or(0, |m| dev_size.saturating_sub(m.offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn locn(offset: u64, size: u64) -> DiskLocn {
        DiskLocn { offset, size }
    }

    #[test]
    fn lvm2_default() {
        let l = plan(256 * MIB, &PvOptions::default()).expect("fits");
        assert_eq!(l.mdas, vec![locn(0x1000, 0xFF000)]);
        assert_eq!(l.pe_start, MIB);
        assert_eq!(l.bootloader, None);
    }

    #[test]
    fn lvm2_two_copies_and_bootloader() {
        // Reference 1.6, second example.
        let o = PvOptions {
            metadata_copies: 2,
            bootloader_area_size: Bytes(MIB),
            ..PvOptions::default()
        };
        let l = plan(256 * MIB, &o).expect("fits");
        assert_eq!(
            l.mdas,
            vec![locn(0x1000, 0xFF000), locn(0xFF00000, 0x100000)]
        );
        assert_eq!(l.bootloader, Some(locn(0x100000, 0x100000)));
        assert_eq!(l.pe_start, 2 * MIB);
        assert_eq!(l.tail_reserved(256 * MIB), MIB);
    }

    #[test]
    fn lvm2_small_area() {
        // `--dataalignment 64k --metadatasize 32k` (the "wrapped" fixture).
        let o = PvOptions {
            metadata_size: Some(Bytes(32 << 10)),
            data_alignment: Some(Bytes(64 << 10)),
            metadata_copies: 2,
            ..PvOptions::default()
        };
        let l = plan(64 * MIB, &o).expect("fits");
        assert_eq!(l.mdas[0], locn(4096, 61440));
        assert_eq!(l.pe_start, 65536);
        assert_eq!(l.mdas[1], locn(64 * MIB - 65536, 65536));
        // `--metadatasize 64k` alone still ends the area at 1 MiB.
        let o = PvOptions {
            metadata_size: Some(Bytes(64 << 10)),
            ..PvOptions::default()
        };
        assert_eq!(
            plan(64 * MIB, &o).expect("fits").mdas[0],
            locn(4096, 0xFF000)
        );
    }

    #[test]
    fn refuses_what_lvm2_refuses() {
        assert!(plan(MIB, &PvOptions::default()).is_err());
        let bad = PvOptions {
            metadata_copies: 3,
            ..PvOptions::default()
        };
        assert!(plan(256 * MIB, &bad).is_err());
        let bad = PvOptions {
            data_alignment: Some(Bytes(1000)),
            ..PvOptions::default()
        };
        assert!(plan(256 * MIB, &bad).is_err());
        // No metadata area: PE 0 at the alignment.
        let none = PvOptions {
            metadata_copies: 0,
            ..PvOptions::default()
        };
        assert_eq!(plan(256 * MIB, &none).expect("fits").pe_start, MIB);
    }
}
