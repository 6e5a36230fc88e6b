//! Choosing a host id from a lockspace's delta lease area, for hosts that are given none.
//!
//! A lockspace's area (sanlock's `src/delta_lease.c`) holds one delta lease per host id:
//! host `h` owns sector `h - 1`, a leader record whose `resource_name` is the name of the
//! sanlock daemon that last held it (by default `<uuid>.<nodename>`; `-e NAME` or
//! sanlock.conf `our_host_name` set it whole). So a host finds its own id again by name,
//! and ids no host ever held are told apart from ids another host (an lvmlockd host
//! beside the driver too) has used.
//!
//! - The order tried: ids last held under one of this host's names (released ones first,
//!   then the most recently acquired); then ids no host ever held, lowest first. Ids held
//!   under other names are never tried.
//! - sanlock cuts its default name to 47 bytes, so a long node name is matched by the part
//!   that fits after the uuid: nodes whose names share that part take each other's
//!   released ids (never a live one: sanlock refuses), so they keep unique ids, not
//!   always their own.
//! - Two hosts that pick one free id at once are told apart by sanlock itself: its delta
//!   lease acquire writes, waits and reads back, and the host that finds the other's
//!   record fails (SANLK_HOSTID_BUSY); it tries its next id.
//! - Records that do not read (another magic, a bad checksum) count as held by another.

use byteorder::{ByteOrder, LittleEndian as LE};

use super::paxos::checksum;
use super::Geometry;

/// `DELTA_DISK_MAGIC`: a delta lease's leader.
pub const DELTA_DISK_MAGIC: u32 = 0x1221_2010;
/// The most bytes of a sanlock name (`NAME_ID_SIZE` 48 with its NUL).
const NAME_MAX: usize = 47;
/// The most hosts of a lockspace.
const MAX_HOSTS: usize = 2000;
/// The checksum covers the leader's first 168 bytes and sits right after them.
const CHECKSUM_LEN: usize = 168;

/// One host id's delta lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaRecord {
    /// The host id (its sector's index plus one).
    pub host_id: u64,
    /// The host id written by its last holder (0: never held).
    pub owner_id: u64,
    /// How many times it was acquired.
    pub generation: u64,
    /// The last holder's sanlock host name (empty: never held).
    pub name: String,
    /// The holder's last renewal (its monotonic seconds; 0: released or never held).
    pub timestamp: u64,
}

impl DeltaRecord {
    /// No host has ever held this id.
    pub fn never_held(&self) -> bool {
        self.owner_id == 0 && self.generation == 0 && self.name.is_empty()
    }

    /// Was it last held by a host named `name` (exactly, or sanlock's default
    /// `<uuid>.<name>`, cut as sanlock cuts it)?
    pub fn held_by(&self, name: &str) -> bool {
        if name.is_empty() {
            return false;
        }
        if self.name == name {
            return true;
        }
        let Some((uuid, node)) = self.name.split_once('.') else {
            return false;
        };
        let fits = NAME_MAX.saturating_sub(uuid.len() + 1).min(name.len());
        !node.is_empty() && name.as_bytes().get(..fits) == Some(node.as_bytes())
    }
}

/// The records of a lockspace area `area` of geometry `g` (at most 2000 hosts); `None`
/// for sectors that are no valid delta leader of their id in that geometry.
pub fn decode_area(area: &[u8], g: Geometry) -> Vec<Option<DeltaRecord>> {
    let sector = g.sector as usize;
    if sector < 512 {
        return Vec::new();
    }
    area.chunks_exact(sector)
        .take(MAX_HOSTS)
        .enumerate()
        .map(|(i, s)| decode(s, i as u64 + 1, g.sector))
        .collect()
}

fn decode(s: &[u8], host_id: u64, sector: u32) -> Option<DeltaRecord> {
    if LE::read_u32(&s[0..4]) != DELTA_DISK_MAGIC {
        return None;
    }
    if LE::read_u32(&s[CHECKSUM_LEN..CHECKSUM_LEN + 4]) != checksum(&s[..CHECKSUM_LEN]) {
        return None;
    }
    // Another geometry's record, or another id's: not this id's lease.
    let owner = LE::read_u64(&s[32..40]);
    if LE::read_u32(&s[12..16]) != sector || (owner != 0 && owner != host_id) {
        return None;
    }
    let name = &s[104..152];
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Some(DeltaRecord {
        host_id,
        owner_id: LE::read_u64(&s[32..40]),
        generation: LE::read_u64(&s[40..48]),
        name: String::from_utf8_lossy(&name[..end]).into_owned(),
        timestamp: LE::read_u64(&s[152..160]),
    })
}

/// The host ids to try, in order, for a host known by `names` (see the module).
pub fn candidates(records: &[Option<DeltaRecord>], names: &[&str]) -> Vec<u64> {
    let mut own: Vec<&DeltaRecord> = records
        .iter()
        .flatten()
        .filter(|r| names.iter().any(|n| r.held_by(n)))
        .collect();
    // Released first (rejoined at once); then by how recently each was acquired.
    own.sort_by_key(|r| (r.timestamp != 0, std::cmp::Reverse(r.generation)));
    let free = records.iter().flatten().filter(|r| r.never_held());
    own.into_iter().chain(free).map(|r| r.host_id).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: Geometry = Geometry {
        sector: 512,
        align: 1 << 20,
    };

    /// A delta leader as sanlock writes it for host `id`.
    fn sector(owner: u64, generation: u64, name: &str, timestamp: u64) -> Vec<u8> {
        let mut s = vec![0u8; 512];
        LE::write_u32(&mut s[0..4], DELTA_DISK_MAGIC);
        LE::write_u32(&mut s[4..8], 0x0003_0004);
        LE::write_u32(&mut s[12..16], 512);
        LE::write_u64(&mut s[24..32], 1);
        LE::write_u64(&mut s[32..40], owner);
        LE::write_u64(&mut s[40..48], generation);
        s[56..62].copy_from_slice(b"lvm_vg");
        s[104..104 + name.len()].copy_from_slice(name.as_bytes());
        LE::write_u64(&mut s[152..160], timestamp);
        let c = checksum(&s[..CHECKSUM_LEN]);
        LE::write_u32(&mut s[CHECKSUM_LEN..CHECKSUM_LEN + 4], c);
        s
    }

    fn area(sectors: &[Vec<u8>]) -> Vec<u8> {
        let mut a = sectors.concat();
        a.resize(1 << 20, 0);
        a
    }

    #[test]
    fn a_host_gets_its_own_id_back_then_never_held_ones() {
        let a = area(&[
            sector(1, 3, "0f1e2d3c-aaaa.node-a", 0),
            sector(0, 0, "", 0),
            sector(3, 1, "lvmlockd-host", 0),
            sector(4, 7, "9a8b7c6d-bbbb.node-b", 500),
            sector(0, 0, "", 0),
        ]);
        let records = decode_area(&a, G);
        assert_eq!(records.len(), 2000, "every host's sector of the area");
        assert_eq!(candidates(&records[..5], &["node-b"]), vec![4, 2, 5]);
        assert_eq!(candidates(&records[..5], &["node-a"]), vec![1, 2, 5]);
        // A new host: never-held ids only (3 is an lvmlockd host's, stopped or not).
        assert_eq!(candidates(&records[..5], &["node-c"]), vec![2, 5]);
        // Zeroed sectors are no delta leaders and are never tried.
        assert!(records[5..].iter().all(Option::is_none));
        // Nor is a record of another id, or of another geometry.
        let moved = area(&[sector(9, 1, "x.node-a", 0)]);
        assert_eq!(decode_area(&moved, G)[0], None);
        let g4k = Geometry {
            sector: 4096,
            align: 8 << 20,
        };
        assert!(decode_area(&a, g4k).iter().all(Option::is_none));
    }

    #[test]
    fn names_match_whole_or_after_the_uuid_only() {
        let r = decode(&sector(2, 1, "abc.node-a", 9), 2, 512).expect("record");
        assert!(r.held_by("node-a") && r.held_by("abc.node-a"));
        assert!(!r.held_by("node") && !r.held_by("a") && !r.held_by(""));
        let exact = decode(&sector(2, 1, "node-a", 9), 2, 512).expect("record");
        assert!(exact.held_by("node-a"));
    }

    #[test]
    fn damaged_records_count_as_held() {
        let mut s = sector(0, 0, "", 0);
        s[100] ^= 1; // within the checksummed bytes
        assert_eq!(decode(&s, 1, 512), None);
        let records = decode_area(&area(&[s, sector(0, 0, "", 0)]), G);
        assert_eq!(candidates(&records[..2], &["x"]), vec![2]);
    }

    #[test]
    fn released_own_ids_come_first_then_the_most_recent() {
        let a = area(&[
            sector(1, 2, "u1.node-a", 0),
            sector(2, 5, "u2.node-a", 10),
            sector(3, 7, "u3.node-a", 20),
        ]);
        assert_eq!(
            candidates(&decode_area(&a, G)[..3], &["node-a"]),
            vec![1, 3, 2]
        );
    }

    #[test]
    fn long_node_names_match_as_sanlock_cuts_them() {
        let uuid = "3c6e0b8a-7f1d-4c2e-9a5b-1d2e3f4a5b6c";
        // snprintf into 48 bytes: 36 + 1 + 10 characters of the node name.
        let cut = format!("{uuid}.worker-nod");
        let r = decode(&sector(4, 1, &cut, 0), 4, 512).expect("record");
        assert!(r.held_by("worker-node-01"));
        assert!(r.held_by("worker-nod"));
        assert!(!r.held_by("worker-no"));
        assert!(!r.held_by("other-node-01"));
    }
}
