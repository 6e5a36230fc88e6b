//! Device-mapper tables of LVs and thin pools as libdevmapper writes them: pure.

use super::super::thin::PoolPlan;
use super::super::{ActivateError, Piece, Stripe};
use crate::units::{Bytes, Sectors};

/// One line of a device-mapper table: start and length in sectors, target, parameters (the
/// kernel's units: [`Bytes`] become sectors here, rounded down).
pub type TableLine = (u64, u64, String, String);

/// The `thin-pool` line of `pool` over metadata device `meta` and data device `data`, as
/// libdevmapper writes it: chunk size, low water mark 0 (lvm2's default threshold of 100%),
/// then the feature words lvm2 sets ([`PoolPlan::features`]).
pub fn pool_table(pool: &PoolPlan, meta: (u32, u32), data: (u32, u32)) -> TableLine {
    let features = pool.features();
    let mut params = format!(
        "{}:{} {}:{} {} 0 {}",
        meta.0,
        meta.1,
        data.0,
        data.1,
        pool.chunk_size.0,
        features.len()
    );
    for f in features {
        params.push(' ');
        params.push_str(f);
    }
    (0, pool.bytes.sectors_floor().0, "thin-pool".into(), params)
}

/// The `thin` line of a thin LV of `bytes` that is device `device_id` of the pool device
/// `tpool`.
pub fn thin_table(bytes: Bytes, tpool: (u32, u32), device_id: u32) -> TableLine {
    (
        0,
        bytes.sectors_floor().0,
        "thin".into(),
        format!("{}:{} {device_id}", tpool.0, tpool.1),
    )
}

/// A one-line `linear` table over all of device `dev`: how lvm2 exposes a used pool.
pub(super) fn over(bytes: Bytes, dev: (u32, u32)) -> TableLine {
    (
        0,
        bytes.sectors_floor().0,
        "linear".into(),
        format!("{}:{} 0", dev.0, dev.1),
    )
}

/// The table of a linear LV laid out as `pieces`: one `linear` target per piece, in sectors,
/// the device named by its `major:minor` (`devnum` finds it for a device path).
pub fn linear_table(
    pieces: &[Piece],
    mut devnum: impl FnMut(&str) -> Result<(u32, u32), ActivateError>,
) -> Result<Vec<TableLine>, ActivateError> {
    let mut start = 0;
    let mut table = Vec::with_capacity(pieces.len());
    for p in pieces {
        let (major, minor) = devnum(&p.device)?;
        let len = p.len.sectors_floor().0;
        table.push((
            start,
            len,
            "linear".to_owned(),
            format!("{major}:{minor} {}", p.offset.sectors_floor().0),
        ));
        start += len;
    }
    Ok(table)
}

/// The table of a striped LV laid out as `segments`: per segment a `striped` target
/// (`<stripes> <stripe size> <dev> <offset>...`, in sectors, as lvm2 writes it), or `linear`
/// for a one-area segment.
pub fn striped_table(
    segments: &[Stripe],
    mut devnum: impl FnMut(&str) -> Result<(u32, u32), ActivateError>,
) -> Result<Vec<TableLine>, ActivateError> {
    let mut start = 0;
    let mut table = Vec::with_capacity(segments.len());
    for seg in segments {
        let len = seg.len.sectors_floor().0;
        let mut devs = Vec::with_capacity(seg.areas.len());
        for a in &seg.areas {
            let (major, minor) = devnum(&a.device)?;
            devs.push(format!("{major}:{minor} {}", a.offset.sectors_floor().0));
        }
        let line = match devs.as_slice() {
            [one] => ("linear".to_owned(), one.clone()),
            _ => (
                "striped".to_owned(),
                format!(
                    "{} {} {}",
                    devs.len(),
                    seg.stripe_bytes.sectors_floor().0,
                    devs.join(" ")
                ),
            ),
        };
        table.push((start, len, line.0, line.1));
        start += len;
    }
    Ok(table)
}

/// The byte ranges of block devices a table maps directly (`linear` and `striped` targets;
/// other targets map other device-mapper devices): device number, offset and length.
pub fn mapped_ranges(table: &[TableLine]) -> Vec<((u32, u32), Bytes, Bytes)> {
    let devnum = |s: &str| {
        let (a, b) = s.split_once(':')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    let mut out = Vec::new();
    for (_, len, target, params) in table {
        let words: Vec<&str> = params.split_whitespace().collect();
        let (areas, per_area) = match (target.as_str(), words.as_slice()) {
            ("linear", [dev, off, ..]) => (vec![(*dev, *off)], *len),
            ("striped", [n, _chunk, rest @ ..]) => {
                let n: u64 = n.parse().unwrap_or(0);
                let pairs: Vec<(&str, &str)> = rest.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                (pairs, len.checked_div(n).unwrap_or(0))
            }
            _ => continue,
        };
        for (dev, off) in areas {
            if let (Some(d), Ok(o)) = (devnum(dev), off.parse::<u64>()) {
                out.push((d, Sectors(o).bytes(), Sectors(per_area).bytes()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activate::dm::{dm_layer_name, dm_name};
    use crate::activate::{Layout, Placement};

    #[test]
    fn mapped_ranges_read_linear_and_striped_tables() {
        let table: Vec<TableLine> = vec![
            (0, 8, "linear".into(), "7:0 2048".into()),
            (8, 16, "striped".into(), "2 128 7:1 0 7:2 4096".into()),
            (24, 8, "thin".into(), "253:3 1".into()),
            (32, 8, "linear".into(), "garbage".into()),
        ];
        assert_eq!(
            mapped_ranges(&table),
            vec![
                ((7, 0), Bytes(2048 * 512), Bytes(8 * 512)),
                ((7, 1), Bytes(0), Bytes(8 * 512)),
                ((7, 2), Bytes(4096 * 512), Bytes(8 * 512))
            ]
        );
    }

    #[test]
    fn names_double_dashes_as_lvm2_does() {
        assert_eq!(dm_name("vg", "lv"), "vg-lv");
        assert_eq!(dm_name("my-vg", "pvc-1-a"), "my--vg-pvc--1--a");
    }

    #[test]
    fn a_linear_table_maps_each_piece_in_sectors() {
        let pieces = [
            Piece {
                device: "/dev/sdb".into(),
                offset: Bytes(1 << 20),
                len: Bytes(4 << 20),
            },
            Piece {
                device: "/dev/sdc".into(),
                offset: Bytes(9 << 20),
                len: Bytes(8 << 20),
            },
        ];
        let table = linear_table(&pieces, |d| {
            Ok(if d == "/dev/sdb" { (8, 16) } else { (8, 32) })
        })
        .expect("table");
        // As `dmsetup table` prints an lvm2 LV of the same layout.
        let lines: Vec<String> = table
            .iter()
            .map(|(s, l, t, p)| format!("{s} {l} {t} {p}"))
            .collect();
        assert_eq!(
            lines,
            ["0 8192 linear 8:16 2048", "8192 16384 linear 8:32 18432"]
        );
        let missing = linear_table(&pieces, |d| {
            Err(ActivateError::Io {
                device: d.into(),
                why: "gone".into(),
            })
        });
        assert!(missing.is_err());
    }

    fn pool(zero: bool, discards: &str, error_if_no_space: bool) -> PoolPlan {
        let sub = |lv: &str| Placement {
            vg: "vg".into(),
            lv: lv.into(),
            bytes: Bytes(4 << 20),
            layout: Layout::Linear(vec![]),
            dm_uuid: String::new(),
        };
        PoolPlan {
            name: "pool".into(),
            dm_uuid: "LVM-x".into(),
            bytes: Bytes(100 << 20),
            metadata: sub("pool_tmeta"),
            data: sub("pool_tdata"),
            chunk_size: crate::units::Sectors(128),
            zero_new_blocks: zero,
            discards: discards.into(),
            error_if_no_space,
            transaction_id: 1,
            messages: vec![],
            thin_lvs: vec![],
        }
    }

    fn line(t: &TableLine) -> String {
        format!("{} {} {} {}", t.0, t.1, t.2, t.3)
    }

    #[test]
    fn a_striped_table_has_one_target_per_segment() {
        let area = |device: &str, offset: u64| Piece {
            device: device.into(),
            offset: Bytes(offset),
            len: Bytes(8 << 20),
        };
        let segments = [
            Stripe {
                len: Bytes(16 << 20),
                stripe_bytes: Bytes(64 << 10),
                areas: vec![area("/dev/sdb", 1 << 20), area("/dev/sdc", 1 << 20)],
            },
            Stripe {
                len: Bytes(8 << 20),
                stripe_bytes: Bytes(0),
                areas: vec![area("/dev/sdb", 9 << 20)],
            },
        ];
        let table = striped_table(&segments, |d| {
            Ok(if d == "/dev/sdb" { (8, 16) } else { (8, 32) })
        })
        .expect("table");
        let lines: Vec<String> = table.iter().map(line).collect();
        // As `dmsetup table` prints `lvcreate -i2 -I64k` followed by a linear extension.
        assert_eq!(
            lines,
            [
                "0 32768 striped 2 128 8:16 2048 8:32 2048",
                "32768 16384 linear 8:16 18432"
            ]
        );
    }

    #[test]
    fn thin_tables_are_written_as_libdevmapper_writes_them() {
        // lvm2's defaults (zeroing, passdown): no feature words.
        let (meta, data) = ((253, 0), (253, 1));
        assert_eq!(
            line(&pool_table(&pool(true, "passdown", false), meta, data)),
            "0 204800 thin-pool 253:0 253:1 128 0 0"
        );
        assert_eq!(
            line(&pool_table(&pool(false, "nopassdown", true), meta, data)),
            "0 204800 thin-pool 253:0 253:1 128 0 3 skip_block_zeroing no_discard_passdown \
             error_if_no_space"
        );
        assert_eq!(
            line(&pool_table(&pool(true, "ignore", false), meta, data)),
            "0 204800 thin-pool 253:0 253:1 128 0 1 ignore_discard"
        );
        assert_eq!(
            line(&thin_table(Bytes(1 << 30), (253, 2), 7)),
            "0 2097152 thin 253:2 7"
        );
        assert_eq!(
            line(&over(Bytes(100 << 20), (253, 2))),
            "0 204800 linear 253:2 0"
        );
        assert_eq!(dm_layer_name("my-vg", "pool", "tpool"), "my--vg-pool-tpool");
    }

    #[test]
    fn lvm2_gives_the_device_its_uuid_without_dashes() {
        use crate::edit::{self, LvSpec};
        use crate::testing::{session_with_vg, stamp};
        let s = session_with_vg(1);
        let stamp = stamp();
        s.update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear("a", 1, stamp)).map(|x| x.0)
        })
        .expect("lvcreate");
        let vg = s.vg("vg").expect("vg");
        let p = crate::activate::place(&vg, "a", &[Some("pv0".into())]).expect("place");
        let want = format!(
            "LVM-{}{}",
            vg.id.to_string().replace('-', ""),
            vg.lv("a").expect("a").id.to_string().replace('-', "")
        );
        assert_eq!(p.dm_uuid, want);
        assert_eq!(p.dm_uuid.len(), 4 + 64);
    }
}
