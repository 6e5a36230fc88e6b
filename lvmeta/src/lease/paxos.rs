//! sanlock's paxos lease area on disk (sanlock's `src/leader.h`, `src/paxos_dblock.h`), as far as lvmeta needs it:
//! recognising a lease that no host has ever acquired, and renaming it in place.
//!
//! `sanlock_write_resource` rewrites a lease's whole area (1 MiB, or 8 MiB with 4 KiB
//! sectors): about 35 ms through the daemon. lvmlockd does that twice in an LV's life, when
//! its slot gets the LV's uuid and when it goes back to `#unused`. A slot that nobody has
//! acquired since it was written holds nothing but its leader (sector 0) and a fresh request
//! record (sector 1); every host block is zero. Writing it again with another name changes
//! only the leader's resource name and checksum, so the same bytes can be had with one sector
//! write. [`renamed_leader`] checks that an area is exactly such a lease and returns its new
//! sector 0; anything else (held once, another lockspace, other geometry, damage) is refused
//! and the caller writes the whole area through sanlock.

use byteorder::{ByteOrder, LittleEndian as LE};

use super::Geometry;

/// `PAXOS_DISK_MAGIC`: sector 0 of a resource lease.
pub const PAXOS_DISK_MAGIC: u32 = 0x0615_2010;
/// `PAXOS_DISK_VERSION` 6.4 (minor 4: the leader carries the align flags).
const PAXOS_DISK_VERSION: u32 = 0x0006_0004;
/// `REQ_DISK_MAGIC`: sector 1, the request record.
const REQ_DISK_MAGIC: u32 = 0x0829_2011;
/// `LFL_ALIGN_1M` and `LFL_ALIGN_8M`.
const LFL_ALIGN_1M: u32 = 0x10;
const LFL_ALIGN_8M: u32 = 0x80;
/// `SANLK_NAME_LEN`.
const NAME_LEN: usize = 48;
/// Byte ranges of the leader record.
const SPACE_NAME: std::ops::Range<usize> = 56..104;
const RESOURCE_NAME: std::ops::Range<usize> = 104..152;
/// The checksum covers the leader's first 168 bytes and sits right after them.
const CHECKSUM_LEN: usize = 168;
/// Fields that are zero in a lease nobody has held: owner_id, owner_generation, lver (32..56),
/// timestamp and unused1 (152..168), write_id, write_generation, write_timestamp (176..200).
const HOLDER_FIELDS: [std::ops::Range<usize>; 3] = [32..56, 152..168, 176..200];

/// sanlock's checksum: CRC-32C seeded with `!1`, no final xor.
pub fn checksum(data: &[u8]) -> u32 {
    !crc32c::crc32c_append(1, data)
}

/// Why a lease area cannot be renamed in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unfit {
    /// The buffer is not one whole lease area of the geometry.
    #[error("area is {0} bytes, not one lease area")]
    Size(usize),
    /// Sector 0 is not a version 6.4 paxos leader.
    #[error("sector 0 is not a paxos leader of version 6.4")]
    Magic,
    /// The leader's checksum does not match.
    #[error("leader checksum mismatch")]
    Checksum,
    /// Sector size, host counts or align flags differ from what sanlock writes today.
    #[error("leader geometry differs from a fresh lease's")]
    Geometry,
    /// The lease belongs to another lockspace.
    #[error("leader belongs to another lockspace")]
    Lockspace,
    /// A host has held the lease (owner, version or timestamps set).
    #[error("the lease has been held")]
    Held,
    /// The request record is not a fresh one.
    #[error("request record is not fresh")]
    Request,
    /// A host block (ballot or shared-mode record) is in use.
    #[error("host block {0} is in use")]
    HostBlock(usize),
    /// The new name does not fit sanlock's 48 bytes.
    #[error("resource name is longer than {NAME_LEN} bytes")]
    Name,
}

/// The host count and leader flags sanlock gives a lease of lvmlockd's two geometries
/// (`size_to_max_hosts`: 512/1M and 4K/8M both hold 2000 hosts).
fn hosts_and_flag(g: Geometry) -> Option<(u64, u32)> {
    match (g.sector, g.align) {
        (512, 0x10_0000) => Some((2000, LFL_ALIGN_1M)),
        (4096, 0x80_0000) => Some((2000, LFL_ALIGN_8M)),
        _ => None,
    }
}

fn name_field(name: &str) -> Option<[u8; NAME_LEN]> {
    let b = name.as_bytes();
    let mut out = [0u8; NAME_LEN];
    out.get_mut(..b.len())?.copy_from_slice(b);
    Some(out)
}

/// The new sector 0 for the never-held lease in `area` (one whole lease area of geometry `g`
/// in lockspace `lockspace`) under resource name `name`: byte for byte what
/// `sanlock_write_resource` would write there.
pub fn renamed_leader(
    area: &[u8],
    g: Geometry,
    lockspace: &str,
    name: &str,
) -> Result<Vec<u8>, Unfit> {
    let sector = g.sector as usize;
    let (hosts, flag) = hosts_and_flag(g).ok_or(Unfit::Geometry)?;
    if area.len() as u64 != g.align {
        return Err(Unfit::Size(area.len()));
    }
    let new_name = name_field(name).ok_or(Unfit::Name)?;
    let space = name_field(lockspace).ok_or(Unfit::Lockspace)?;
    let leader = &area[..sector];
    if LE::read_u32(&leader[0..4]) != PAXOS_DISK_MAGIC
        || LE::read_u32(&leader[4..8]) != PAXOS_DISK_VERSION
    {
        return Err(Unfit::Magic);
    }
    if LE::read_u32(&leader[CHECKSUM_LEN..CHECKSUM_LEN + 4]) != checksum(&leader[..CHECKSUM_LEN]) {
        return Err(Unfit::Checksum);
    }
    if LE::read_u32(&leader[8..12]) != flag
        || LE::read_u32(&leader[12..16]) != g.sector
        || LE::read_u64(&leader[16..24]) != hosts
        || LE::read_u64(&leader[24..32]) != hosts
    {
        return Err(Unfit::Geometry);
    }
    if leader[SPACE_NAME] != space {
        return Err(Unfit::Lockspace);
    }
    if HOLDER_FIELDS
        .iter()
        .any(|r| leader[r.clone()].iter().any(|&b| b != 0))
        || leader[200..].iter().any(|&b| b != 0)
    {
        return Err(Unfit::Held);
    }
    let request = &area[sector..2 * sector];
    if LE::read_u32(&request[0..4]) != REQ_DISK_MAGIC || request[8..].iter().any(|&b| b != 0) {
        return Err(Unfit::Request);
    }
    // Host blocks: sector 2 + host_id - 1 for host ids 1..=num_hosts (2 + 2000 sectors fit
    // the 2048 of either geometry).
    let blocks = &area[2 * sector..(2 + hosts as usize) * sector];
    // OR-folding a sector (no early exit) vectorizes: 1 MiB in tens of microseconds, where a
    // byte-wise `any` took half a millisecond.
    if let Some(i) = blocks
        .chunks(sector)
        .position(|b| b.iter().fold(0u8, |acc, &x| acc | x) != 0)
    {
        return Err(Unfit::HostBlock(i + 1));
    }
    let mut out = leader.to_vec();
    out[RESOURCE_NAME].copy_from_slice(&new_name);
    let sum = checksum(&out[..CHECKSUM_LEN]);
    LE::write_u32(&mut out[CHECKSUM_LEN..CHECKSUM_LEN + 4], sum);
    Ok(out)
}

/// The leader's `timestamp`: zero (`LEASE_FREE`) unless a host holds the lease exclusively
/// (sanlock clears it on release; a dead holder leaves it set).
const TIMESTAMP: std::ops::Range<usize> = 152..160;
/// `MBLOCK_OFFSET`: a host's shared-mode record inside its host block.
const MBLOCK_OFFSET: usize = 128;
/// `MBLOCK_SHARED`.
const MBLOCK_SHARED: u32 = 1;

/// Does no host hold the lease in `area` (one whole lease area of geometry `g`), as far as
/// the disk shows: the leader free (timestamp zero) and no host's shared-mode record set?
/// `false` also when a dead host's mark is left (only an acquire through the daemon can take
/// such a lease over); an area that is not a checksummed paxos lease is an error.
pub fn unheld(area: &[u8], g: Geometry) -> Result<bool, Unfit> {
    let sector = g.sector as usize;
    if area.len() as u64 != g.align || sector < MBLOCK_OFFSET + 4 {
        return Err(Unfit::Size(area.len()));
    }
    let leader = &area[..sector];
    if LE::read_u32(&leader[0..4]) != PAXOS_DISK_MAGIC {
        return Err(Unfit::Magic);
    }
    if LE::read_u32(&leader[CHECKSUM_LEN..CHECKSUM_LEN + 4]) != checksum(&leader[..CHECKSUM_LEN]) {
        return Err(Unfit::Checksum);
    }
    if LE::read_u64(&leader[TIMESTAMP]) != 0 {
        return Ok(false);
    }
    // Bounded by the area: at most sectors - 2 host blocks, whatever num_hosts says.
    let hosts = usize::try_from(LE::read_u64(&leader[16..24])).unwrap_or(usize::MAX);
    let blocks = area.len() / sector - 2;
    let shared = area[2 * sector..]
        .chunks(sector)
        .take(hosts.min(blocks))
        .any(|b| LE::read_u32(&b[MBLOCK_OFFSET..MBLOCK_OFFSET + 4]) & MBLOCK_SHARED != 0);
    Ok(!shared)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sector 0 as `sanlock direct init -r lvm_vg:#unused:FILE:1048576` (sanlock 3.8.5) wrote
    /// it, and as it wrote it for the name below: the two differ only in name and checksum.
    const UNUSED: &str = "10201506040006001000000000020000d007000000000000d0070000000000000000000000000000000000000000000000000000000000006c766d5f766700000000000000000000000000000000000000000000000000000000000000000000000000000000000023756e75736564000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000286a31c900000000000000000000000000000000000000000000000000000000";
    const NAMED: &str = "10201506040006001000000000020000d007000000000000d0070000000000000000000000000000000000000000000000000000000000006c766d5f766700000000000000000000000000000000000000000000000000000000000000000000000000000000000061626364656641422d313233342d787878782d797979792d7a7a7a7a2d777777772d767676767676000000000000000000000000000000000000000000000000654a21a600000000000000000000000000000000000000000000000000000000";
    const NAME: &str = "abcdefAB-1234-xxxx-yyyy-zzzz-wwww-vvvvvv";
    const G: Geometry = Geometry {
        sector: 512,
        align: 1 << 20,
    };

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// A whole fresh area with `leader` in sector 0, as sanlock writes it.
    fn area(leader: &str) -> Vec<u8> {
        let mut a = vec![0u8; 1 << 20];
        let l = hex(leader);
        a[..l.len()].copy_from_slice(&l);
        LE::write_u32(&mut a[512..516], REQ_DISK_MAGIC);
        LE::write_u32(&mut a[516..520], 0x0001_0001);
        a
    }

    #[test]
    fn renaming_a_fresh_lease_writes_what_sanlock_writes() {
        let got = renamed_leader(&area(UNUSED), G, "lvm_vg", NAME).expect("fresh");
        assert_eq!(got, area(NAMED)[..512].to_vec());
        let back = renamed_leader(&area(NAMED), G, "lvm_vg", "#unused").expect("fresh");
        assert_eq!(back, area(UNUSED)[..512].to_vec());
    }

    #[test]
    fn a_lease_is_unheld_unless_its_leader_or_a_shared_record_says_so() {
        let a = area(NAMED);
        assert_eq!(unheld(&a, G), Ok(true));
        let mut ex = a.clone();
        ex[152] = 9; // timestamp: held exclusively
        let s = checksum(&ex[..CHECKSUM_LEN]);
        LE::write_u32(&mut ex[CHECKSUM_LEN..CHECKSUM_LEN + 4], s);
        assert_eq!(unheld(&ex, G), Ok(false));
        let mut sh = a.clone();
        sh[(2 + 1999) * 512 + MBLOCK_OFFSET] = 1; // host 2000 holds it shared
        assert_eq!(unheld(&sh, G), Ok(false));
        // A released ballot (host block data without the shared flag) is not a holder.
        let mut released = a.clone();
        released[2 * 512 + 3] = 1;
        assert_eq!(unheld(&released, G), Ok(true));
        let mut bad = a.clone();
        bad[110] ^= 1;
        assert_eq!(unheld(&bad, G), Err(Unfit::Checksum));
        assert_eq!(unheld(&a[..4096], G), Err(Unfit::Size(4096)));
    }

    #[test]
    fn leases_that_are_not_fresh_are_refused() {
        let a = area(UNUSED);
        let with = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = a.clone();
            f(&mut b);
            renamed_leader(&b, G, "lvm_vg", NAME).expect_err("refused")
        };
        let resum = |b: &mut Vec<u8>| {
            let s = checksum(&b[..CHECKSUM_LEN]);
            LE::write_u32(&mut b[CHECKSUM_LEN..CHECKSUM_LEN + 4], s);
        };
        assert_eq!(with(&|b| b[0] ^= 1), Unfit::Magic);
        assert_eq!(with(&|b| b[110] ^= 1), Unfit::Checksum);
        assert_eq!(
            with(&|b| {
                b[48] = 7; // lver
                resum(b)
            }),
            Unfit::Held
        );
        assert_eq!(
            with(&|b| {
                b[16] = 1; // num_hosts
                resum(b)
            }),
            Unfit::Geometry
        );
        assert_eq!(with(&|b| b[520] = 1), Unfit::Request);
        // Host 2's ballot block, and host 2000's shared-mode record at byte 128 of its block.
        assert_eq!(with(&|b| b[3 * 512 + 3] = 1), Unfit::HostBlock(2));
        assert_eq!(with(&|b| b[2001 * 512 + 128] = 1), Unfit::HostBlock(2000));
        let short = &a[..4096];
        assert_eq!(
            renamed_leader(short, G, "lvm_vg", NAME),
            Err(Unfit::Size(4096))
        );
        assert_eq!(
            renamed_leader(&a, G, "lvm_other", NAME),
            Err(Unfit::Lockspace)
        );
        assert_eq!(
            renamed_leader(&a, G, "lvm_vg", &"x".repeat(49)),
            Err(Unfit::Name)
        );
        // Bytes past the last host block are not sanlock's: they may hold anything.
        let mut tail = a.clone();
        tail[(1 << 20) - 1] = 9;
        assert!(renamed_leader(&tail, G, "lvm_vg", NAME).is_ok());
    }
}
