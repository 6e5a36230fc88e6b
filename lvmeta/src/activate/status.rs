//! What device-mapper targets report of their use, from their status lines (pure parsing;
//! the dm backend asks the kernel). The report's `Data%`, `Meta%` and `Cpy%Sync` come from
//! these, as lvm2's do.
//! - A status that does not parse gives nothing: the report shows a blank, never a guess.

/// What device-mapper says of one device besides its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmDev {
    /// How many openers it has.
    pub open: i32,
    /// Whether it is suspended (I/O to it waits).
    pub suspended: bool,
}

/// How full or how far in sync a device is, by its target's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    /// A thin pool: data chunks and metadata blocks, used and in all.
    Pool {
        /// Data chunks used and in all.
        data: (u64, u64),
        /// Metadata blocks used and in all.
        metadata: (u64, u64),
    },
    /// A thin LV: the 512-byte sectors mapped.
    Thin {
        /// Sectors mapped.
        mapped: u64,
    },
    /// A raid LV: the sectors in sync, of all, and each device's health.
    Raid {
        /// Sectors in sync and in all.
        sync: (u64, u64),
        /// One bit per device, lowest first: set where the kernel says `A` (alive and in
        /// sync); devices past 64 count as not in sync.
        in_sync: u64,
    },
    /// A cached LV (dm-cache): metadata and cache blocks used, and the dirty cache blocks.
    Cache {
        /// Metadata blocks used and in all.
        metadata: (u64, u64),
        /// Cache blocks used and in all.
        data: (u64, u64),
        /// Cache blocks not yet written back to the origin.
        dirty: u64,
    },
    /// An LV with a writecache: its cache blocks in all and free.
    Writecache {
        /// Cache blocks in all.
        total: u64,
        /// Cache blocks free.
        free: u64,
    },
}

/// `used/total`.
fn ratio(word: Option<&&str>) -> Option<(u64, u64)> {
    let (u, t) = word?.split_once('/')?;
    Some((u.parse().ok()?, t.parse().ok()?))
}

/// The usage in `status`, the status line of a device whose (first) target is `target`.
pub fn parse(target: &str, status: &str) -> Option<Usage> {
    let w: Vec<&str> = status.split_whitespace().collect();
    let num = |i: usize| w.get(i).and_then(|x| x.parse::<u64>().ok());
    match target {
        "thin-pool" => {
            let p = super::thin::parse_pool_status(target, status).ok()?;
            Some(Usage::Pool {
                data: p.data,
                metadata: p.metadata,
            })
        }
        "thin" => num(0).map(|mapped| Usage::Thin { mapped }),
        // <raid type> <#devices> <health chars> <in sync>/<all> <sync action> ...
        "raid" => {
            let health = w.get(2)?;
            let in_sync = health
                .bytes()
                .take(64)
                .enumerate()
                .filter(|(_, c)| *c == b'A')
                .fold(0u64, |bits, (i, _)| bits | 1 << i);
            ratio(w.get(3)).map(|sync| Usage::Raid { sync, in_sync })
        }
        // <md block size> <md used>/<md all> <cache block size> <used>/<all> <read hits>
        // <read misses> <write hits> <write misses> <demotions> <promotions> <dirty> ...
        "cache" => Some(Usage::Cache {
            metadata: ratio(w.get(1))?,
            data: ratio(w.get(3))?,
            dirty: num(10)?,
        }),
        // <error> <blocks in all> <free blocks> <blocks under writeback> ...
        "writecache" => {
            let (total, free) = (num(1)?, num(2)?);
            (num(0)? == 0 && free <= total).then_some(Usage::Writecache { total, free })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_as_the_kernel_prints_them() {
        // Lines `dmsetup status` printed in the VM for LVs stock lvm2 made (2026-12-07).
        assert_eq!(
            parse("raid", "raid1 2 AA 16384/16384 idle 0 0 -"),
            Some(Usage::Raid {
                sync: (16384, 16384),
                in_sync: 0b11
            })
        );
        assert_eq!(
            parse("raid", "raid1 3 aDA 8192/245760 resync 0 0 -"),
            Some(Usage::Raid {
                sync: (8192, 245760),
                in_sync: 0b100
            })
        );
        assert_eq!(
            parse(
                "cache",
                "8 46/4096 128 3/256 0 71 0 0 0 3 2 1 writethrough 2 migration_threshold 2048 \
                 smq 0 rw -"
            ),
            Some(Usage::Cache {
                metadata: (46, 4096),
                data: (3, 256),
                dirty: 2
            })
        );
        assert_eq!(
            parse("writecache", "0 4080 4080 0 0 0 0 0 0 0 0 0 0 0"),
            Some(Usage::Writecache {
                total: 4080,
                free: 4080
            })
        );
        assert_eq!(
            parse("thin", "2048 4095"),
            Some(Usage::Thin { mapped: 2048 })
        );
        // A failed or cut status gives nothing.
        assert_eq!(parse("raid", "raid1 2 AD"), None);
        assert_eq!(parse("cache", "Fail"), None);
        assert_eq!(parse("writecache", "-5 4080 4080 0"), None);
        assert_eq!(parse("linear", ""), None);
    }
}
