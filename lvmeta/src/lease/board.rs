//! The serve board: who serves a thin pool's volumes to other hosts over NBD, at what
//! address, and which hosts have them staged. It lives in the spare sectors at the end of
//! the pool LV's own lease area, so it needs no metadata commit and no lease of its own.
//!
//! - A paxos lease area has 2048 sectors: leader (0), request (1), host dblocks (2..2001),
//!   the LVB (2002, sanlock's `LVB_SECTOR`). Sectors 2003..2047 are read and written by
//!   nobody else (checked against sanlock and lvmlockd by tests/lockd/mixed.sh).
//! - Sector 2003 is the [`ServeRecord`], written only by the holder of the pool's lease;
//!   sectors 2004..2047 are [`Slot`]s, one per (host, staged LV), each written by its host.
//! - Each entry uses the first 512 bytes of its sector, little-endian, with a CRC-32C over
//!   bytes 16..512, and names the pool LV: an entry left from another LV, a torn write or
//!   garbage reads as no entry, never as a wrong one.
//! - Only the geometries with 2000 hosts per area (512-byte sectors in 1 MiB, 4 KiB in
//!   8 MiB) have spare sectors: others are refused.
//!
//! Pure: bytes in, entries out, and where they lie; callers do the I/O.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

use byteorder::{ByteOrder, LittleEndian as LE};

use super::{Geometry, HostState, HostView};

/// The serve record's sector in a lease area.
pub const RECORD_SECTOR: u64 = 2003;
/// The slots: sectors 2004..2048.
pub const SLOTS: usize = 44;
/// Sectors the board spans.
pub const BOARD_SECTORS: u64 = 1 + SLOTS as u64;
/// Bytes of each entry that carry data.
pub const ENTRY_LEN: usize = 512;

const RECORD_MAGIC: &[u8; 8] = b"LVMNBDSR";
const SLOT_MAGIC: &[u8; 8] = b"LVMNBDCL";
const VERSION: u16 = 1;
const ID_LEN: usize = 32;

/// Why a board cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoardError {
    /// The lockspace's geometry leaves no spare sectors.
    #[error("lease areas of {sector}-byte sectors in {align} bytes have no spare sectors for a serve board")]
    Geometry {
        /// Sector size.
        sector: u32,
        /// Area size.
        align: u64,
    },
    /// A buffer is not the board's size.
    #[error("board buffer of {0} bytes, not {BOARD_SECTORS} sectors")]
    Size(usize),
    /// A slot index past the last slot.
    #[error("slot {0}: a board has {SLOTS} slots")]
    Slot(usize),
    /// Every slot is taken by other hosts' stagings.
    #[error("all {SLOTS} slots are taken: the pool's volumes are staged on too many other hosts")]
    Full,
    /// An LV id is not 32 letters and digits (lvm2's id without dashes).
    #[error("LV id {0:?} is not 32 letters and digits without dashes")]
    LvId(String),
}

/// Byte offset of the board in the lease area at `area`, and its sector size.
pub fn board_at(area: u64, g: Geometry) -> Result<(u64, u32), BoardError> {
    let fits = matches!((g.sector, g.align), (512, 0x10_0000) | (4096, 0x80_0000));
    if !fits {
        return Err(BoardError::Geometry {
            sector: g.sector,
            align: g.align,
        });
    }
    Ok((area + RECORD_SECTOR * u64::from(g.sector), g.sector))
}

/// What the serving host is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeState {
    /// Serving at the record's address.
    Serving,
    /// Handing over to the successor: clients hold their devices and report drained.
    Pausing,
    /// The lease was released for the successor.
    Released,
}

/// Sector 2003: who serves the pool's volumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeRecord {
    /// Grows by one each time a host starts serving.
    pub epoch: u64,
    /// The serving host's id and its sanlock generation (the lease's owner).
    pub host: u64,
    /// Its generation in the lockspace.
    pub generation: u64,
    /// What it is doing.
    pub state: ServeState,
    /// Where its NBD server listens.
    pub addr: SocketAddr,
    /// The host asked to serve next (0: any staged host).
    pub successor: u64,
    /// When written (Unix milliseconds).
    pub written_ms: u64,
    /// Random per epoch: part of every export name, so only hosts that read the LUN know it.
    pub secret: [u8; 16],
}

/// What a host's slot says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotState {
    /// The host has the volume staged through the server.
    Staged,
    /// The host holds its device for the handover of `epoch`.
    Drained,
    /// The server of `epoch` is gone: the host wants the pool.
    WantsPool,
    /// The host unstaged: the slot may be reused.
    Leaving,
}

/// Sectors 2004..2047: one host's staging of one thin LV of the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// The thin LV (32 characters).
    pub lv_id: String,
    /// The host and its generation.
    pub host: u64,
    /// Its generation in the lockspace.
    pub generation: u64,
    /// What it says.
    pub state: SlotState,
    /// Staged read-only.
    pub read_only: bool,
    /// The epoch the state refers to.
    pub epoch: u64,
    /// When written (Unix milliseconds).
    pub written_ms: u64,
    /// The address the host connects from (the server checks it).
    pub addr: IpAddr,
}

/// `id` as the board stores it: lvm2's id without dashes, 32 characters.
fn bare_id(id: &str) -> Result<[u8; ID_LEN], BoardError> {
    let bare: Vec<u8> = id.bytes().filter(|b| *b != b'-').collect();
    // lvm2's id characters only: these ids end up in device names.
    if !bare.iter().all(u8::is_ascii_alphanumeric) {
        return Err(BoardError::LvId(id.to_owned()));
    }
    bare.as_slice()
        .try_into()
        .map_err(|_| BoardError::LvId(id.to_owned()))
}

/// An entry's header and checksum over `b` (512 bytes).
fn seal(b: &mut [u8; ENTRY_LEN], magic: &[u8; 8], pool: &[u8; ID_LEN]) {
    b[..8].copy_from_slice(magic);
    LE::write_u16(&mut b[8..10], VERSION);
    b[16..48].copy_from_slice(pool);
    let crc = crc32c::crc32c(&b[16..]);
    LE::write_u32(&mut b[12..16], crc);
}

/// Whether `b` is a sealed entry of kind `magic` for pool `pool`.
fn sealed(b: &[u8], magic: &[u8; 8], pool: &[u8; ID_LEN]) -> bool {
    b.len() >= ENTRY_LEN
        && &b[..8] == magic
        && LE::read_u16(&b[8..10]) == VERSION
        && b[10..12] == [0, 0]
        && LE::read_u32(&b[12..16]) == crc32c::crc32c(&b[16..ENTRY_LEN])
        && &b[16..48] == pool
}

/// Address family, port, 16 address bytes and scope id at `b[at..at + 24]`.
fn put_addr(b: &mut [u8], at: usize, ip: IpAddr, port: u16, scope: u32) {
    let (family, bytes) = match ip {
        IpAddr::V4(v4) => (4u8, v4.to_ipv6_mapped().octets()),
        IpAddr::V6(v6) => (6u8, v6.octets()),
    };
    b[at] = family;
    LE::write_u16(&mut b[at + 2..at + 4], port);
    b[at + 4..at + 20].copy_from_slice(&bytes);
    LE::write_u32(&mut b[at + 20..at + 24], scope);
}

fn get_addr(b: &[u8], at: usize) -> Option<SocketAddr> {
    let port = LE::read_u16(&b[at + 2..at + 4]);
    let bytes: [u8; 16] = b[at + 4..at + 20].try_into().ok()?;
    let v6 = Ipv6Addr::from(bytes);
    match b[at] {
        4 => Some(SocketAddr::new(IpAddr::V4(v6.to_ipv4_mapped()?), port)),
        6 => {
            let scope = LE::read_u32(&b[at + 20..at + 24]);
            Some(SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)))
        }
        _ => None,
    }
}

impl ServeRecord {
    /// The record's bytes for pool LV `pool_lv_id`.
    pub fn encode(&self, pool_lv_id: &str) -> Result<[u8; ENTRY_LEN], BoardError> {
        let pool = bare_id(pool_lv_id)?;
        let mut b = [0u8; ENTRY_LEN];
        LE::write_u64(&mut b[48..56], self.epoch);
        LE::write_u64(&mut b[56..64], self.host);
        LE::write_u64(&mut b[64..72], self.generation);
        b[72] = match self.state {
            ServeState::Serving => 1,
            ServeState::Pausing => 2,
            ServeState::Released => 3,
        };
        let scope = match self.addr {
            SocketAddr::V6(a) => a.scope_id(),
            SocketAddr::V4(_) => 0,
        };
        put_addr(&mut b, 76, self.addr.ip(), self.addr.port(), scope);
        LE::write_u64(&mut b[104..112], self.successor);
        LE::write_u64(&mut b[112..120], self.written_ms);
        b[120..136].copy_from_slice(&self.secret);
        seal(&mut b, RECORD_MAGIC, &pool);
        Ok(b)
    }

    /// The record in `b` (one entry) for pool LV `pool_lv_id`; None when there is none (zero,
    /// another pool's, torn, damaged).
    pub fn decode(b: &[u8], pool_lv_id: &str) -> Result<Option<Self>, BoardError> {
        let pool = bare_id(pool_lv_id)?;
        if !sealed(b, RECORD_MAGIC, &pool) {
            return Ok(None);
        }
        let state = match b[72] {
            1 => ServeState::Serving,
            2 => ServeState::Pausing,
            3 => ServeState::Released,
            _ => return Ok(None),
        };
        let Some(addr) = get_addr(b, 76) else {
            return Ok(None);
        };
        let r = Self {
            epoch: LE::read_u64(&b[48..56]),
            host: LE::read_u64(&b[56..64]),
            generation: LE::read_u64(&b[64..72]),
            state,
            addr,
            successor: LE::read_u64(&b[104..112]),
            written_ms: LE::read_u64(&b[112..120]),
            secret: b[120..136].try_into().unwrap_or_default(),
        };
        canonical(r.encode(pool_lv_id)?, b, r)
    }
}

impl Slot {
    /// The slot's bytes for pool LV `pool_lv_id`.
    pub fn encode(&self, pool_lv_id: &str) -> Result<[u8; ENTRY_LEN], BoardError> {
        let pool = bare_id(pool_lv_id)?;
        let lv = bare_id(&self.lv_id)?;
        let mut b = [0u8; ENTRY_LEN];
        b[48..80].copy_from_slice(&lv);
        LE::write_u64(&mut b[80..88], self.host);
        LE::write_u64(&mut b[88..96], self.generation);
        b[96] = match self.state {
            SlotState::Staged => 1,
            SlotState::Drained => 2,
            SlotState::WantsPool => 3,
            SlotState::Leaving => 4,
        };
        b[97] = u8::from(self.read_only);
        LE::write_u64(&mut b[104..112], self.epoch);
        LE::write_u64(&mut b[112..120], self.written_ms);
        put_addr(&mut b, 120, self.addr, 0, 0);
        seal(&mut b, SLOT_MAGIC, &pool);
        Ok(b)
    }

    /// The slot in `b` for pool LV `pool_lv_id`; None when free, another pool's or damaged.
    pub fn decode(b: &[u8], pool_lv_id: &str) -> Result<Option<Self>, BoardError> {
        let pool = bare_id(pool_lv_id)?;
        if !sealed(b, SLOT_MAGIC, &pool) {
            return Ok(None);
        }
        let state = match b[96] {
            1 => SlotState::Staged,
            2 => SlotState::Drained,
            3 => SlotState::WantsPool,
            4 => SlotState::Leaving,
            _ => return Ok(None),
        };
        let Some(addr) = get_addr(b, 120) else {
            return Ok(None);
        };
        let lv_id = String::from_utf8_lossy(&b[48..80]).into_owned();
        let slot = Self {
            lv_id,
            host: LE::read_u64(&b[80..88]),
            generation: LE::read_u64(&b[88..96]),
            state,
            read_only: b[97] & 1 != 0,
            epoch: LE::read_u64(&b[104..112]),
            written_ms: LE::read_u64(&b[112..120]),
            addr: addr.ip(),
        };
        match slot.encode(pool_lv_id) {
            Ok(again) => canonical(again, b, slot),
            // An LV id that is not one (the bytes were not text).
            Err(_) => Ok(None),
        }
    }
}

impl Slot {
    /// Was this slot written in a life of its host that has ended, as `hosts` (the lock
    /// manager's view of the lockspace) shows?
    /// - a later generation of its host id: the host joined again since (a reset or a
    ///   restart), so it no longer follows what this slot says;
    /// - the same generation, free or dead: it left the lockspace, or stopped renewing long
    ///   enough to have been reset.
    ///
    /// A slot written without a generation (0), or whose host the manager has not seen, is
    /// never stale.
    pub fn is_stale(&self, hosts: &[HostView]) -> bool {
        self.generation != 0
            && hosts.iter().any(|h| {
                h.host_id == self.host
                    && (h.generation > self.generation
                        || (h.generation == self.generation
                            && matches!(h.state, HostState::Free | HostState::Dead)))
            })
    }
}

/// `entry` when it encodes back to exactly the bytes it came from (no stray bits in unused
/// fields or padding), else no entry.
fn canonical<T>(again: [u8; ENTRY_LEN], b: &[u8], entry: T) -> Result<Option<T>, BoardError> {
    Ok((again[..] == b[..ENTRY_LEN]).then_some(entry))
}

/// A whole board as read: the record and every slot (by index), for pool LV `pool_lv_id`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Board {
    /// The serve record, if any.
    pub record: Option<ServeRecord>,
    /// The slots in use, with their index.
    pub slots: Vec<(usize, Slot)>,
}

impl Board {
    /// Decodes the board's `BOARD_SECTORS` sectors of `sector` bytes each.
    pub fn decode(bytes: &[u8], sector: u32, pool_lv_id: &str) -> Result<Self, BoardError> {
        let s = sector as usize;
        if bytes.len() != BOARD_SECTORS as usize * s || s < ENTRY_LEN {
            return Err(BoardError::Size(bytes.len()));
        }
        let record = ServeRecord::decode(&bytes[..s], pool_lv_id)?;
        let mut slots = Vec::new();
        for i in 0..SLOTS {
            let at = (1 + i) * s;
            if let Some(slot) = Slot::decode(&bytes[at..at + s], pool_lv_id)? {
                slots.push((i, slot));
            }
        }
        Ok(Self { record, slots })
    }

    /// The board without the slots [`Slot::is_stale`] finds stale in `hosts`.
    pub fn without_stale(mut self, hosts: &[HostView]) -> Self {
        self.slots.retain(|(_, s)| !s.is_stale(hosts));
        self
    }

    /// The slots naming LV `lv_id` (lvm2's id, with or without its dashes), with their
    /// index.
    pub fn slots_of<'a>(&'a self, lv_id: &str) -> impl Iterator<Item = &'a (usize, Slot)> + 'a {
        let lv: String = lv_id.chars().filter(|c| *c != '-').collect();
        self.slots.iter().filter(move |(_, s)| s.lv_id == lv)
    }

    /// What `view` (the lock manager) says of each host that has a slot.
    pub fn host_views(&self, view: &dyn Fn(u64) -> Option<HostView>) -> Vec<HostView> {
        let mut ids: Vec<u64> = self.slots.iter().map(|(_, s)| s.host).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().filter_map(view).collect()
    }

    /// The slot a host should use for `lv_id`: its own, else a free or left one, else one
    /// of another host that is DEAD or FREE now in `hosts` (the lock manager's view);
    /// None when every slot is taken by others.
    /// - A host that joined again since it wrote a slot is alive: its slot is not
    ///   reused, it writes the slot again in its new life.
    /// - A host whose slot was reused claims another (under the VG lease) once it joins
    ///   again, and writes its old one no more.
    pub fn slot_for(&self, host: u64, lv_id: &str, hosts: &[HostView]) -> Option<usize> {
        let own = self
            .slots_of(lv_id)
            .find(|(_, s)| s.host == host)
            .map(|(i, _)| *i);
        let entry = |i: usize| self.slots.iter().find(|(j, _)| *j == i).map(|(_, s)| s);
        let free = |i: &usize| entry(*i).is_none_or(|s| s.state == SlotState::Leaving);
        let gone = |id: u64| {
            hosts
                .iter()
                .any(|h| h.host_id == id && matches!(h.state, HostState::Dead | HostState::Free))
        };
        let ended = |i: &usize| entry(*i).is_some_and(|s| s.host != host && gone(s.host));
        own.or_else(|| (0..SLOTS).find(free))
            .or_else(|| (0..SLOTS).find(ended))
    }
}

/// Byte offset of slot `index` relative to the record's sector.
pub fn slot_offset(index: usize, sector: u32) -> u64 {
    (1 + index as u64) * u64::from(sector)
}

/// The unspecified IPv4 address (a slot written before the host knows its address).
pub const NO_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const POOL: &str = "aaaaaa-bbbb-cccc-dddd-eeee-ffff-gggggg";
    const THIN: &str = "0123456789abcdef0123456789abcdef";

    fn record() -> ServeRecord {
        ServeRecord {
            epoch: 7,
            host: 2,
            generation: 3,
            state: ServeState::Serving,
            addr: "[fe80::5054:ff:fe00:2%3]:10809".parse().expect("addr"),
            successor: 0,
            written_ms: 1_700_000_000_000,
            secret: [9; 16],
        }
    }

    fn slot() -> Slot {
        Slot {
            lv_id: THIN.into(),
            host: 5,
            generation: 1,
            state: SlotState::Staged,
            read_only: true,
            epoch: 7,
            written_ms: 1_700_000_000_001,
            addr: "10.1.2.3".parse().expect("ip"),
        }
    }

    #[test]
    fn entries_round_trip_and_belong_to_their_pool() {
        let r = record();
        let b = r.encode(POOL).expect("encode");
        assert_eq!(ServeRecord::decode(&b, POOL), Ok(Some(r)));
        let other = "zzzzzz-bbbb-cccc-dddd-eeee-ffff-gggggg";
        assert_eq!(
            ServeRecord::decode(&b, other),
            Ok(None),
            "another pool's record"
        );
        assert_eq!(Slot::decode(&b, POOL), Ok(None), "a record is not a slot");
        let s = slot();
        let b = s.encode(POOL).expect("encode");
        assert_eq!(Slot::decode(&b, POOL), Ok(Some(s)));
        assert_eq!(
            ServeRecord::decode(&[0; 512], POOL),
            Ok(None),
            "zeroes: none"
        );
        assert!(ServeRecord::decode(&[0; 512], "short").is_err());
        let v4 = ServeRecord {
            addr: "127.0.0.1:10809".parse().expect("addr"),
            ..record()
        };
        let b = v4.encode(POOL).expect("encode");
        assert_eq!(ServeRecord::decode(&b, POOL), Ok(Some(v4)));
    }

    #[test]
    fn only_geometries_with_spare_sectors_have_a_board() {
        let g = |sector, align| Geometry { sector, align };
        assert_eq!(
            board_at(1 << 20, g(512, 1 << 20)),
            Ok(((1 << 20) + 2003 * 512, 512))
        );
        assert_eq!(board_at(0, g(4096, 8 << 20)), Ok((2003 * 4096, 4096)));
        assert!(
            board_at(0, g(4096, 1 << 20)).is_err(),
            "250 hosts: sector 252 is the LVB"
        );
    }

    #[test]
    fn a_board_reads_its_slots_and_finds_one_for_a_host() {
        let mut bytes = vec![0u8; BOARD_SECTORS as usize * 512];
        bytes[..512].copy_from_slice(&record().encode(POOL).expect("encode"));
        let at = slot_offset(3, 512) as usize;
        bytes[at..at + 512].copy_from_slice(&slot().encode(POOL).expect("encode"));
        let board = Board::decode(&bytes, 512, POOL).expect("decode");
        assert_eq!(board.record, Some(record()));
        assert_eq!(board.slots, vec![(3, slot())]);
        assert_eq!(board.slot_for(5, THIN, &[]), Some(3), "its own");
        assert_eq!(board.slot_for(6, THIN, &[]), Some(0), "the first free one");
        // Full: another host's slot is reused only once its host's life ended.
        let mut full = board.clone();
        full.slots = (0..SLOTS)
            .map(|i| {
                (
                    i,
                    Slot {
                        host: 10 + i as u64,
                        ..slot()
                    },
                )
            })
            .collect();
        assert_eq!(full.slot_for(6, THIN, &[]), None, "all taken");
        let ended = HostView {
            host_id: 12,
            generation: 1,
            state: HostState::Dead,
        };
        assert_eq!(full.slot_for(6, THIN, &[ended]), Some(2), "host 12 is dead");
        assert_eq!(
            full.slot_for(12, "f".repeat(32).as_str(), &[ended]),
            None,
            "not its own"
        );
        let rejoined = HostView {
            generation: 9,
            state: HostState::Live,
            ..ended
        };
        assert_eq!(
            full.slot_for(6, THIN, &[rejoined]),
            None,
            "alive in a later life"
        );
        assert!(Board::decode(&bytes[..512], 512, POOL).is_err());
    }

    #[test]
    fn a_slot_of_an_ended_host_life_is_stale() {
        let view = |generation, state| {
            vec![HostView {
                host_id: 5,
                generation,
                state,
            }]
        };
        let s = slot();
        assert!(!s.is_stale(&view(1, HostState::Live)), "its life");
        assert!(!s.is_stale(&view(1, HostState::Fail)), "not dead yet");
        assert!(!s.is_stale(&view(1, HostState::Unknown)));
        assert!(s.is_stale(&view(1, HostState::Dead)), "reset");
        assert!(s.is_stale(&view(1, HostState::Free)), "left");
        assert!(s.is_stale(&view(2, HostState::Live)), "joined again since");
        assert!(!s.is_stale(&view(0, HostState::Free)), "an older view");
        assert!(!s.is_stale(&[]), "a host never seen");
        let unknown = Slot {
            generation: 0,
            ..slot()
        };
        assert!(
            !unknown.is_stale(&view(9, HostState::Dead)),
            "no generation"
        );
        let board = Board {
            record: None,
            slots: vec![(0, slot()), (1, Slot { host: 6, ..slot() })],
        };
        let live = board.without_stale(&view(2, HostState::Live));
        assert_eq!(live.slots, vec![(1, Slot { host: 6, ..slot() })]);
    }

    proptest! {
        /// Any one byte changed in an entry (the header's bytes tried more often): read as
        /// no entry, never as another (the unused tail is covered by the checksum too).
        #[test]
        fn a_damaged_entry_is_never_misread(at in prop_oneof![0usize..512, 8usize..16], x in 1u8..=255) {
            let mut b = record().encode(POOL).expect("encode");
            b[at] ^= x;
            prop_assert_eq!(ServeRecord::decode(&b, POOL), Ok(None));
            let mut b = slot().encode(POOL).expect("encode");
            b[at] ^= x;
            prop_assert_eq!(Slot::decode(&b, POOL), Ok(None));
        }
    }
}
