//! What a device already carries, judged from its first 2 MiB and its last MiB: the driver
//! makes a PV only of a device that carries nothing (pure; [`inspect_device`] does the reads).
//!
//! - Known signatures are named (lvm2 label, filesystems, partition tables, md RAID, LUKS,
//!   swap), wherever blkid would look for them at the device's start and end.
//! - Any other non-zero byte in the first 2 MiB counts too: a SAN hands out zeroed LUNs, so
//!   data there means someone wrote it (the first partition of a zapped disk starts at 1 MiB).
//! - Bytes the caller owns (the creation claim, [`crate::claim`]) are skipped.

use std::fmt;
use std::ops::Range;

use crate::dev::BlockDevice;
use crate::Error;

/// Bytes read from a device's start.
pub const HEAD: u64 = 2 << 20;
/// Bytes read from a device's end.
pub const TAIL: u64 = 1 << 20;

/// Something found on a device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// An lvm2 label (`LABELONE`) in sector `sector`.
    Lvm2Label {
        /// The 512-byte sector (0..=3) holding it.
        sector: u64,
    },
    /// A filesystem's superblock.
    Filesystem(&'static str),
    /// A partition table.
    PartitionTable(&'static str),
    /// An md RAID member's superblock.
    Raid(&'static str),
    /// A LUKS header.
    Luks,
    /// A swap area.
    Swap,
    /// Non-zero bytes with no known signature, first at byte `offset`.
    Data {
        /// Byte offset from the device's start.
        offset: u64,
    },
}

impl fmt::Display for Found {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lvm2Label { sector } => write!(f, "an lvm2 PV label (sector {sector})"),
            Self::Filesystem(t) => write!(f, "a filesystem ({t})"),
            Self::PartitionTable(t) => write!(f, "a partition table ({t})"),
            Self::Raid(t) => write!(f, "an md RAID member superblock ({t})"),
            Self::Luks => write!(f, "a LUKS header"),
            Self::Swap => write!(f, "a swap signature"),
            Self::Data { offset } => write!(f, "non-zero data at byte {offset}"),
        }
    }
}

/// md's superblock magic, little-endian on disk.
const MD_MAGIC: [u8; 4] = [0xfc, 0x4e, 0x2b, 0xa9];

/// Whether `buf` holds `magic` at `at`.
fn has(buf: &[u8], at: usize, magic: &[u8]) -> bool {
    buf.get(at..at + magic.len()) == Some(magic)
}

/// What the first bytes of a device (`head`, up to [`HEAD`]) and its last bytes (`tail`,
/// ending at the device's end, of a device of `size` bytes) carry; bytes of `head` in
/// `skip` are not looked at. `None`: nothing.
pub fn inspect(head: &[u8], tail: &[u8], size: u64, skip: Range<usize>) -> Option<Found> {
    let mut head = head.to_vec();
    if let Some(s) = head.get_mut(skip) {
        s.fill(0);
    }
    let head = &head[..];
    for sector in 0..4u64 {
        if has(head, sector as usize * 512, crate::label::LABEL_ID) {
            return Some(Found::Lvm2Label { sector });
        }
    }
    let known: [(usize, &[u8], Found); 10] = [
        (0, b"LUKS\xba\xbe", Found::Luks),
        (0, b"XFSB", Found::Filesystem("xfs")),
        (1080, &[0x53, 0xef], Found::Filesystem("ext2/3/4")),
        (0x10040, b"_BHRfS_M", Found::Filesystem("btrfs")),
        (4086, b"SWAPSPACE2", Found::Swap),
        (4086, b"SWAP-SPACE", Found::Swap),
        (512, b"EFI PART", Found::PartitionTable("GPT")),
        (4096, b"EFI PART", Found::PartitionTable("GPT (4K sectors)")),
        (0, &MD_MAGIC, Found::Raid("1.1")),
        (4096, &MD_MAGIC, Found::Raid("1.2")),
    ];
    if let Some((_, _, f)) = known.into_iter().find(|(at, m, _)| has(head, *at, m)) {
        return Some(f);
    }
    if has(head, 510, &[0x55, 0xaa]) {
        return Some(Found::PartitionTable("DOS/MBR"));
    }
    if let Some(f) = inspect_tail(tail, size) {
        return Some(f);
    }
    head.iter()
        .position(|&b| b != 0)
        .map(|i| Found::Data { offset: i as u64 })
}

/// Signatures kept at a device's end: md 0.90 and 1.0 superblocks, GPT's backup header.
fn inspect_tail(tail: &[u8], size: u64) -> Option<Found> {
    let base = size.checked_sub(tail.len() as u64)?;
    let at = |offset: u64| offset.checked_sub(base).map(|o| o as usize);
    let md090 = (size & !0xffff).checked_sub(0x10000);
    let md10 = size.checked_sub(8192).map(|o| o & !4095);
    for (offset, version) in [(md090, "0.90"), (md10, "1.0")] {
        if let Some(o) = offset.and_then(at) {
            if has(tail, o, &MD_MAGIC) {
                return Some(Found::Raid(version));
            }
        }
    }
    for sector in [512u64, 4096] {
        if let Some(o) = size.checked_sub(sector).and_then(at) {
            if has(tail, o, b"EFI PART") {
                return Some(Found::PartitionTable("GPT (backup header)"));
            }
        }
    }
    None
}

/// Reads both ends of `dev` and [`inspect`]s them.
pub fn inspect_device(dev: &dyn BlockDevice, skip: Range<usize>) -> Result<Option<Found>, Error> {
    let size = dev.size();
    let mut head = vec![0u8; HEAD.min(size) as usize];
    let span = TAIL.min(size);
    let mut tail = vec![0u8; span as usize];
    dev.read_at(0, &mut head)
        .map_err(crate::commit::io_err(dev, 0))?;
    dev.read_at(size - span, &mut tail)
        .map_err(crate::commit::io_err(dev, size - span))?;
    Ok(inspect(&head, &tail, size, skip))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 8 << 20;

    fn blank() -> (Vec<u8>, Vec<u8>) {
        (vec![0; HEAD as usize], vec![0; TAIL as usize])
    }

    fn put(buf: &mut [u8], at: usize, bytes: &[u8]) {
        buf[at..at + bytes.len()].copy_from_slice(bytes);
    }

    #[test]
    fn blank_device_carries_nothing() {
        let (h, t) = blank();
        assert_eq!(inspect(&h, &t, SIZE, 0..0), None);
    }

    #[test]
    fn head_signatures_are_named() {
        let cases: [(usize, &[u8], Found); 6] = [
            (512, b"LABELONE", Found::Lvm2Label { sector: 1 }),
            (1080, &[0x53, 0xef], Found::Filesystem("ext2/3/4")),
            (0, b"XFSB", Found::Filesystem("xfs")),
            (510, &[0x55, 0xaa], Found::PartitionTable("DOS/MBR")),
            (4096, &MD_MAGIC, Found::Raid("1.2")),
            (4086, b"SWAPSPACE2", Found::Swap),
        ];
        for (at, magic, want) in cases {
            let (mut h, t) = blank();
            put(&mut h, at, magic);
            assert_eq!(inspect(&h, &t, SIZE, 0..0), Some(want));
        }
    }

    #[test]
    fn tail_signatures_are_named() {
        let (h, mut t) = blank();
        let base = (SIZE - TAIL) as usize;
        put(&mut t, (SIZE - 512) as usize - base, b"EFI PART");
        assert_eq!(
            inspect(&h, &t, SIZE, 0..0),
            Some(Found::PartitionTable("GPT (backup header)"))
        );
        let (h, mut t) = blank();
        put(&mut t, ((SIZE - 8192) & !4095) as usize - base, &MD_MAGIC);
        assert_eq!(inspect(&h, &t, SIZE, 0..0), Some(Found::Raid("1.0")));
    }

    #[test]
    fn other_data_and_skipped_bytes() {
        let (mut h, t) = blank();
        h[(1 << 20) + 1080] = 1;
        assert_eq!(
            inspect(&h, &t, SIZE, 0..0),
            Some(Found::Data {
                offset: (1 << 20) + 1080
            })
        );
        assert_eq!(
            inspect(&h, &[0; 64], 10, 0..0),
            Some(Found::Data {
                offset: (1 << 20) + 1080
            })
        );
        let (mut h, t) = blank();
        h[1600] = 7;
        assert_eq!(inspect(&h, &t, SIZE, 1536..2048), None);
    }

    #[test]
    fn small_devices_are_read_whole() {
        let dev = crate::dev::MemDevice::new("d", 4096, 512);
        assert_eq!(inspect_device(&dev, 0..0).expect("read"), None);
        dev.write_at(1024, b"x").expect("write");
        let found = inspect_device(&dev, 0..0).expect("read");
        assert_eq!(found, Some(Found::Data { offset: 1024 }));
    }
}
