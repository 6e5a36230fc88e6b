//! The serve board ([`super::board`]) read from and written to the lock device.
//!
//! - One read for the whole board (45 sectors), one sector per write: an entry is never
//!   half of two writes, and a torn sector fails its checksum (read as no entry).
//! - Who may write what is the caller's rule (the record: the pool lease's holder; a slot:
//!   its host); this module only puts bytes where the board says.

use crate::dev::BlockDevice;

use super::board::{
    board_at, slot_offset, Board, BoardError, ServeRecord, Slot, BOARD_SECTORS, SLOTS,
};
use super::{HostView, ResourceSpec};

/// Why a board could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum BoardIoError {
    /// The lease area has no board, or an entry cannot be encoded.
    #[error("serve board of {lv} at {device}: {source}")]
    Board {
        /// The lock device.
        device: String,
        /// The pool LV's id.
        lv: String,
        /// What is wrong.
        source: BoardError,
    },
    /// The device failed.
    #[error("serve board at {device} offset {offset}: {source}")]
    Io {
        /// The lock device.
        device: String,
        /// Byte offset of the transfer.
        offset: u64,
        /// The device's error.
        source: std::io::Error,
    },
}

fn board_err(dev: &dyn BlockDevice, lv: &str) -> impl Fn(BoardError) -> BoardIoError {
    let (device, lv) = (dev.name().to_owned(), lv.to_owned());
    move |source| BoardIoError::Board {
        device: device.clone(),
        lv: lv.clone(),
        source,
    }
}

/// The board of pool LV `pool_lv_id`, whose lease is `spec`, as on `dev` now.
pub fn read(
    dev: &dyn BlockDevice,
    spec: &ResourceSpec,
    pool_lv_id: &str,
) -> Result<Board, BoardIoError> {
    let (at, sector) = board_at(spec.offset, spec.geometry).map_err(board_err(dev, pool_lv_id))?;
    let mut bytes = vec![0u8; BOARD_SECTORS as usize * sector as usize];
    dev.read_at(at, &mut bytes)
        .map_err(|source| BoardIoError::Io {
            device: dev.name().to_owned(),
            offset: at,
            source,
        })?;
    Board::decode(&bytes, sector, pool_lv_id).map_err(board_err(dev, pool_lv_id))
}

/// Writes the serve record of pool LV `pool_lv_id` (one sector, durable on return).
pub fn write_record(
    dev: &dyn BlockDevice,
    spec: &ResourceSpec,
    pool_lv_id: &str,
    record: &ServeRecord,
) -> Result<(), BoardIoError> {
    let entry = record
        .encode(pool_lv_id)
        .map_err(board_err(dev, pool_lv_id))?;
    write_entry(dev, spec, pool_lv_id, 0, &entry)
}

/// Writes slot `index` (below [`SLOTS`]) of pool LV `pool_lv_id` (one sector, durable).
pub fn write_slot(
    dev: &dyn BlockDevice,
    spec: &ResourceSpec,
    pool_lv_id: &str,
    index: usize,
    slot: &Slot,
) -> Result<(), BoardIoError> {
    if index >= SLOTS {
        return Err(board_err(dev, pool_lv_id)(BoardError::Slot(index)));
    }
    let entry = slot
        .encode(pool_lv_id)
        .map_err(board_err(dev, pool_lv_id))?;
    let sector = spec.geometry.sector;
    write_entry(dev, spec, pool_lv_id, slot_offset(index, sector), &entry)
}

/// Claims the slot `slot`'s host should use for its LV ([`Board::slot_for`], `view` saying
/// what the lock manager knows of a host) and writes `slot` there; the index. The caller
/// holds the VG lease exclusively, so no other host claims at the same time.
pub fn claim(
    dev: &dyn BlockDevice,
    spec: &ResourceSpec,
    pool_lv_id: &str,
    slot: &Slot,
    view: &dyn Fn(u64) -> Option<HostView>,
) -> Result<usize, BoardIoError> {
    let board = read(dev, spec, pool_lv_id)?;
    let hosts = board.host_views(view);
    let index = board
        .slot_for(slot.host, &slot.lv_id, &hosts)
        .ok_or_else(|| board_err(dev, pool_lv_id)(BoardError::Full))?;
    write_slot(dev, spec, pool_lv_id, index, slot)?;
    Ok(index)
}

fn write_entry(
    dev: &dyn BlockDevice,
    spec: &ResourceSpec,
    pool_lv_id: &str,
    rel: u64,
    entry: &[u8],
) -> Result<(), BoardIoError> {
    let (at, sector) = board_at(spec.offset, spec.geometry).map_err(board_err(dev, pool_lv_id))?;
    let mut sector_bytes = vec![0u8; sector as usize];
    sector_bytes[..entry.len()].copy_from_slice(entry);
    let offset = at + rel;
    let io = |source| BoardIoError::Io {
        device: dev.name().to_owned(),
        offset,
        source,
    };
    dev.write_at(offset, &sector_bytes).map_err(io)?;
    dev.flush().map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::{Fault, FaultyDevice, MemDevice};
    use crate::lease::board::{ServeState, SlotState, NO_ADDR};
    use crate::lease::Geometry;

    const POOL: &str = "0123456789abcdef0123456789abcdef";

    fn spec() -> ResourceSpec {
        ResourceSpec {
            lockspace: "lvm_vg".into(),
            name: POOL.into(),
            path: "/dev/mapper/vg-lvmlock".into(),
            offset: 3 << 20,
            geometry: Geometry::for_sector(512),
        }
    }

    fn record(epoch: u64) -> ServeRecord {
        ServeRecord {
            epoch,
            host: 1,
            generation: 1,
            state: ServeState::Serving,
            addr: "127.0.0.1:10809".parse().expect("addr"),
            successor: 0,
            written_ms: 5,
            secret: [epoch as u8; 16],
        }
    }

    #[test]
    fn a_board_is_written_one_sector_at_a_time_and_read_back() {
        let dev = MemDevice::new("lock", 8 << 20, 512);
        assert_eq!(read(&dev, &spec(), POOL).expect("empty"), Board::default());
        write_record(&dev, &spec(), POOL, &record(1)).expect("record");
        let slot = Slot {
            lv_id: POOL.into(),
            host: 2,
            generation: 4,
            state: SlotState::Staged,
            read_only: false,
            epoch: 1,
            written_ms: 6,
            addr: NO_ADDR,
        };
        write_slot(&dev, &spec(), POOL, 43, &slot).expect("last slot");
        assert!(
            write_slot(&dev, &spec(), POOL, 44, &slot).is_err(),
            "no 45th slot"
        );
        let b = read(&dev, &spec(), POOL).expect("read");
        assert_eq!(b.record, Some(record(1)));
        assert_eq!(b.slots, vec![(43, slot)]);
        // Only sectors 2003..2047 of the area were written.
        let bytes = dev.to_bytes();
        let area = &bytes[3 << 20..4 << 20];
        assert!(area[..2003 * 512].iter().all(|&x| x == 0));
    }

    #[test]
    fn a_torn_record_reads_as_none_never_as_another() {
        // The two records differ before and after the tear (epoch, secret).
        let dev = MemDevice::new("lock", 8 << 20, 512);
        write_record(&dev, &spec(), POOL, &record(1)).expect("record");
        let torn = FaultyDevice::new(dev, Fault::TearWrite { n: 0, bytes: 100 });
        assert!(write_record(&torn, &spec(), POOL, &record(2)).is_err());
        let dev = torn.into_inner();
        assert_eq!(read(&dev, &spec(), POOL).expect("read").record, None);
    }
}
