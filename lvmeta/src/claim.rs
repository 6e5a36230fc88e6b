//! The creation claim: one host at a time makes a VG on blank devices.
//!
//! Before the VG exists there is no lease to take, so the claim is a record in a sector
//! lvm2 leaves unused, and mutual exclusion comes from timing, as in sanlock's delta leases:
//! - the record lives at byte [`OFFSET`] (sector 3): lvm2 looks for its label in sectors 0-3
//!   and writes sector 1; no filesystem or partition table signature sits there;
//! - a creator writes its record only where it read none, or a record that stayed the same
//!   for [`Timing::stale`] (a creator that died);
//! - it then waits [`Timing::settle`] and reads again: still its own, it holds the claim;
//! - a holder checks the claim before it writes and finishes well inside `stale`;
//!   releasing clears the sector, so a made PV looks as stock `pvcreate` leaves it.
//!
//! Assumes a creator's read and its following write are less than `settle` apart (sanlock
//! assumes the same of its io_timeout). On a device of 4 KiB logical sectors the record
//! shares block 0 with the label: its writes read that block again just before (the
//! device's read-modify-write), so the same assumption keeps a label written meanwhile.

use std::time::{Duration, Instant};

use crate::dev::BlockDevice;
use crate::Error;

/// Byte offset of the claim record.
pub const OFFSET: u64 = 1536;
/// Length of the claim record.
pub const LEN: usize = 512;
/// The record's first bytes.
const MAGIC: &[u8; 16] = b"lvmeta vgcreate\0";
/// Longest VG name and host name kept.
const VG_LEN: usize = 128;
const HOST_LEN: usize = 64;

/// One creator's claim record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Random, one per attempt: tells two creators apart.
    pub token: u64,
    /// When the attempt began (seconds since the epoch; for messages only).
    pub since: u64,
    /// The VG being made.
    pub vg: String,
    /// The creator's host name (for messages).
    pub host: String,
}

/// What the claim sector holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sector {
    /// Zeroes.
    Empty,
    /// A claim record.
    Claim(Record),
    /// Anything else.
    Other,
}

/// Encodes `r`: magic, token, since, VG name, host name (truncated), then the CRC-32 of
/// the rest in the last 4 bytes.
pub fn encode(r: &Record) -> [u8; LEN] {
    let mut s = [0u8; LEN];
    s[..16].copy_from_slice(MAGIC);
    s[16..24].copy_from_slice(&r.token.to_le_bytes());
    s[24..32].copy_from_slice(&r.since.to_le_bytes());
    let vg = cut(&r.vg, VG_LEN - 1);
    s[32..32 + vg.len()].copy_from_slice(vg);
    let host = cut(&r.host, HOST_LEN - 1);
    let h = 32 + VG_LEN;
    s[h..h + host.len()].copy_from_slice(host);
    let crc = crc32fast::hash(&s[..LEN - 4]);
    s[LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    s
}

/// The first bytes of `s`, at most `max`, ending on a character boundary.
fn cut(s: &str, max: usize) -> &[u8] {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s.as_bytes()[..end]
}

/// Decodes a claim sector (`s` shorter than [`LEN`] is [`Sector::Other`]).
pub fn decode(s: &[u8]) -> Sector {
    let Some(s) = s.get(..LEN) else {
        return Sector::Other;
    };
    if s.iter().all(|&b| b == 0) {
        return Sector::Empty;
    }
    let crc = u32::from_le_bytes([s[LEN - 4], s[LEN - 3], s[LEN - 2], s[LEN - 1]]);
    if &s[..16] != MAGIC || crc32fast::hash(&s[..LEN - 4]) != crc {
        return Sector::Other;
    }
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let text = |r: std::ops::Range<usize>| {
        let b = &s[r];
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    Sector::Claim(Record {
        token: u64_at(16),
        since: u64_at(24),
        vg: text(32..32 + VG_LEN),
        host: text(32 + VG_LEN..32 + VG_LEN + HOST_LEN),
    })
}

/// The claim's timing.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// How long a creator waits after writing its record before it reads it back.
    pub settle: Duration,
    /// How long a record must stay the same before another creator may take over.
    pub stale: Duration,
    /// How often a waiting creator reads the record.
    pub poll: Duration,
}

impl Default for Timing {
    /// 10 s settle (sanlock's default io_timeout), 60 s stale, 1 s poll.
    fn default() -> Self {
        Self {
            settle: Duration::from_secs(10),
            stale: Duration::from_secs(60),
            poll: Duration::from_secs(1),
        }
    }
}

/// A held claim; [`Claim::release`] clears it.
pub struct Claim<'d> {
    dev: &'d dyn BlockDevice,
    record: Record,
    since: Instant,
    timing: Timing,
}

impl std::fmt::Debug for Claim<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Claim")
            .field("device", &self.dev.name())
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// Reads and decodes `dev`'s claim sector.
pub fn read(dev: &dyn BlockDevice) -> Result<Sector, Error> {
    let mut s = [0u8; LEN];
    dev.read_at(OFFSET, &mut s)
        .map_err(crate::commit::io_err(dev, OFFSET))?;
    Ok(decode(&s))
}

fn write(dev: &dyn BlockDevice, s: &[u8; LEN]) -> Result<(), Error> {
    crate::commit::write(dev, OFFSET, s)?;
    crate::commit::flush(dev)
}

fn refused(dev: &dyn BlockDevice, why: String) -> Error {
    Error::Device {
        device: dev.name().to_owned(),
        why,
    }
}

impl<'d> Claim<'d> {
    /// Takes the claim on `dev` to make VG `vg`, as host `host`, waiting out another
    /// creator's claim for at most `give_up`. Errors: I/O, a sector that holds something
    /// else, or another creator still holding the claim after `give_up`.
    pub fn acquire(
        dev: &'d dyn BlockDevice,
        vg: &str,
        host: &str,
        timing: Timing,
        give_up: Duration,
    ) -> Result<Self, Error> {
        let record = Record {
            token: {
                let mut t = [0u8; 8];
                t.copy_from_slice(&crate::uuid::Uuid::random().raw()[..8]);
                u64::from_le_bytes(t)
            },
            since: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            vg: vg.to_owned(),
            host: host.to_owned(),
        };
        let ours = encode(&record);
        let start = Instant::now();
        // The last other record seen, and since when it has not changed.
        let mut seen: Option<(Record, Instant)> = None;
        let mut written: Option<Instant> = None;
        let mut waited: Option<()> = None;
        loop {
            let free = match read(dev)? {
                Sector::Empty => true,
                Sector::Other => {
                    return Err(refused(
                        dev,
                        format!("byte {OFFSET} holds data that is not a creation claim"),
                    ))
                }
                Sector::Claim(r) if r.token == record.token => {
                    return Ok(Self {
                        dev,
                        record,
                        since: written.unwrap_or_else(Instant::now),
                        timing,
                    });
                }
                Sector::Claim(r) => match &seen {
                    Some((s, at)) if *s == r => at.elapsed() >= timing.stale,
                    _ => {
                        seen = Some((r, Instant::now()));
                        false
                    }
                },
            };
            if free {
                // The claim's time runs from this write: a rival counts from a later read.
                written = Some(Instant::now());
                write(dev, &ours)?;
                std::thread::sleep(timing.settle);
                continue;
            }
            if waited.is_none() {
                waited = Some(());
                if let Some((r, _)) = &seen {
                    tracing::info!(device = dev.name(), holder = %r.host, vg = %r.vg, "waiting for another maker's creation claim");
                }
            }
            if start.elapsed() >= give_up {
                let who = seen.map_or_else(String::new, |(r, _)| {
                    format!(" by host {} for VG {}", r.host, r.vg)
                });
                return Err(refused(
                    dev,
                    format!("the creation claim at byte {OFFSET} is held{who}"),
                ));
            }
            std::thread::sleep(timing.poll);
        }
    }

    /// Whether the claim is still this creator's with time left to use it: a rival counts
    /// `stale` from a read after this creator's write, and this one stops `settle` before
    /// that (room for the write it is about to make).
    pub fn check(&self) -> Result<(), Error> {
        let left = self.timing.stale.saturating_sub(self.timing.settle);
        if self.since.elapsed() >= left {
            return Err(refused(
                self.dev,
                format!("the creation claim ran out of time ({} s)", left.as_secs()),
            ));
        }
        match read(self.dev)? {
            Sector::Claim(r) if r.token == self.record.token => Ok(()),
            _ => Err(refused(
                self.dev,
                "the creation claim was taken by another creator".into(),
            )),
        }
    }

    /// Clears the record if it is still this creator's.
    pub fn release(self) -> Result<(), Error> {
        match read(self.dev)? {
            Sector::Claim(r) if r.token == self.record.token => write(self.dev, &[0u8; LEN]),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn quick() -> Timing {
        Timing {
            settle: Duration::from_millis(30),
            stale: Duration::from_millis(400),
            poll: Duration::from_millis(5),
        }
    }

    #[test]
    fn records_round_trip_and_damage_is_other() {
        let r = Record {
            token: 7,
            since: 1_700_000_000,
            vg: "vg0".into(),
            host: "node-a".into(),
        };
        let mut s = encode(&r);
        assert_eq!(decode(&s), Sector::Claim(r));
        assert_eq!(decode(&[0u8; LEN]), Sector::Empty);
        s[40] ^= 1;
        assert_eq!(decode(&s), Sector::Other);
        assert_eq!(decode(&s[..10]), Sector::Other);
    }

    #[test]
    fn long_names_are_cut_not_overflowed() {
        let r = Record {
            token: 1,
            since: 0,
            vg: "v".repeat(500),
            host: "h".repeat(500),
        };
        let Sector::Claim(back) = decode(&encode(&r)) else {
            panic!("not a claim");
        };
        assert_eq!((back.vg.len(), back.host.len()), (VG_LEN - 1, HOST_LEN - 1));
    }

    #[test]
    fn one_of_many_racing_creators_holds_it_at_a_time() {
        let dev = MemDevice::new("lun", 1 << 20, 512);
        let inside = AtomicUsize::new(0);
        let most = AtomicUsize::new(0);
        let wins = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for i in 0..4 {
                let (dev, inside, most, wins) = (&dev, &inside, &most, &wins);
                s.spawn(move || {
                    let host = format!("h{i}");
                    let c = Claim::acquire(dev, "vg", &host, quick(), Duration::from_secs(20))
                        .expect("acquire");
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    c.check().expect("still held");
                    std::thread::sleep(Duration::from_millis(20));
                    inside.fetch_sub(1, Ordering::SeqCst);
                    wins.fetch_add(1, Ordering::SeqCst);
                    c.release().expect("release");
                });
            }
        });
        assert_eq!(most.load(Ordering::SeqCst), 1);
        assert_eq!(wins.load(Ordering::SeqCst), 4);
        assert_eq!(read(&dev).expect("read"), Sector::Empty);
    }

    #[test]
    fn a_dead_creators_claim_is_taken_over_once_stale() {
        let dev = MemDevice::new("lun", 1 << 20, 512);
        let dead = Claim::acquire(&dev, "vg", "dead", quick(), Duration::ZERO).expect("first");
        std::mem::forget(dead);
        let t = Instant::now();
        let c = Claim::acquire(&dev, "vg", "next", quick(), Duration::from_secs(5))
            .expect("taken over");
        assert!(t.elapsed() >= quick().stale);
        c.check().expect("held");
    }

    #[test]
    fn a_held_claim_is_reported_with_its_holder() {
        let dev = MemDevice::new("lun", 1 << 20, 512);
        let _held = Claim::acquire(&dev, "vg", "node-a", quick(), Duration::ZERO).expect("first");
        let e = Claim::acquire(&dev, "vg", "node-b", quick(), Duration::from_millis(50))
            .expect_err("held");
        assert!(
            e.to_string().contains("held by host node-a for VG vg"),
            "{e}"
        );
    }

    #[test]
    fn a_clobbered_or_expired_claim_fails_its_check() {
        let dev = Arc::new(MemDevice::new("lun", 1 << 20, 512));
        let c = Claim::acquire(dev.as_ref(), "vg", "a", quick(), Duration::ZERO).expect("a");
        let other = Record {
            token: 99,
            since: 0,
            vg: "vg".into(),
            host: "b".into(),
        };
        write(dev.as_ref(), &encode(&other)).expect("clobber");
        assert!(c.check().is_err());
        c.release().expect("release leaves b's record");
        assert_eq!(read(dev.as_ref()).expect("read"), Sector::Claim(other));
        let dev = MemDevice::new("lun", 1 << 20, 512);
        let c = Claim::acquire(&dev, "vg", "a", quick(), Duration::ZERO).expect("a");
        std::thread::sleep(quick().stale);
        assert!(c
            .check()
            .expect_err("expired")
            .to_string()
            .contains("ran out of time"));
    }

    #[test]
    fn foreign_bytes_in_the_sector_are_refused() {
        let dev = MemDevice::new("lun", 1 << 20, 512);
        dev.write_at(OFFSET + 3, b"x").expect("write");
        let e = Claim::acquire(&dev, "vg", "a", quick(), Duration::ZERO).expect_err("refused");
        assert!(e.to_string().contains("not a creation claim"), "{e}");
    }
}
