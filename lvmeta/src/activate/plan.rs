//! Where an LV's blocks are on this host's devices: its segments as byte ranges of the PVs,
//! the input of every activation backend. Pure.

use crate::model::{SegKind, Vg};
use crate::units::{Bytes, Extents};

pub use super::placement::{Layout, Piece, Placement, Stripe};
use super::runs::{dm_uuid, runs};
use super::thin::plan_pool;
use super::ActivateError;

/// The runs of the devices under bytes `[start, start + len)` of a linear LV laid out as
/// `pieces` (fewer bytes when the LV is shorter).
pub fn byte_runs(pieces: &[Piece], start: Bytes, len: Bytes) -> Vec<Piece> {
    let (start, end) = (start.0, start.0.saturating_add(len.0));
    let mut out = Vec::new();
    let mut at = 0u64;
    for p in pieces {
        let (from, to) = (start.max(at), end.min(at.saturating_add(p.len.0)));
        if from < to {
            out.push(Piece {
                device: p.device.clone(),
                offset: Bytes(p.offset.0 + (from - at)),
                len: Bytes(to - from),
            });
        }
        at = at.saturating_add(p.len.0);
        if at >= end {
            break;
        }
    }
    out
}

/// The transfers that copy the first `bytes` of a linear LV laid out as `src` onto one laid
/// out as `dst`: pairs of equally long pieces (from, to), none longer than `max` (> 0).
/// `None` when either layout holds fewer than `bytes`.
pub fn copy_runs(
    src: &[Piece],
    dst: &[Piece],
    bytes: Bytes,
    max: Bytes,
) -> Option<Vec<(Piece, Piece)>> {
    let (mut i, mut i_off, mut j, mut j_off) = (0, 0, 0, 0);
    let mut left = bytes.0;
    let mut runs = Vec::new();
    while left > 0 {
        let (a, b) = (src.get(i)?, dst.get(j)?);
        let n = (a.len.0 - i_off)
            .min(b.len.0 - j_off)
            .min(max.0.max(1))
            .min(left);
        let piece = |p: &Piece, off: u64| Piece {
            device: p.device.clone(),
            offset: Bytes(p.offset.0 + off),
            len: Bytes(n),
        };
        runs.push((piece(a, i_off), piece(b, j_off)));
        left -= n;
        (i_off, j_off) = (i_off + n, j_off + n);
        if i_off == a.len.0 {
            (i, i_off) = (i + 1, 0);
        }
        if j_off == b.len.0 {
            (j, j_off) = (j + 1, 0);
        }
    }
    Some(runs)
}

/// Places LV `lv` of `vg`; `paths[i]` is the device of the VG's PV `i` on this host.
pub fn place(vg: &Vg, lv: &str, paths: &[Option<String>]) -> Result<Placement, ActivateError> {
    let l = vg.lv(lv).ok_or_else(|| ActivateError::NoLv {
        vg: vg.name.clone(),
        lv: lv.into(),
    })?;
    let layout = match l.segments.first().map(|s| &s.kind) {
        Some(SegKind::Thin(t)) if t.external_origin.is_none() && t.merge.is_none() => {
            Layout::Thin {
                pool: Box::new(plan_pool(vg, &t.thin_pool, paths)?),
                device_id: t.device_id,
            }
        }
        Some(SegKind::ThinPool(_)) => Layout::Pool(Box::new(plan_pool(vg, lv, paths)?)),
        _ => return runs(vg, lv, paths),
    };
    Ok(Placement {
        vg: vg.name.clone(),
        lv: lv.into(),
        bytes: Extents(l.extents()).bytes(vg.extent()),
        layout,
        dm_uuid: dm_uuid(vg, l),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(device: &str, offset: u64, len: u64) -> Piece {
        Piece {
            device: device.into(),
            offset: Bytes(offset),
            len: Bytes(len),
        }
    }

    #[test]
    fn copy_runs_follow_both_layouts_in_bounded_steps() {
        let src = [piece("a", 100, 30), piece("b", 0, 50)];
        let dst = [piece("c", 1000, 50), piece("c", 5000, 100)];
        let runs = copy_runs(&src, &dst, Bytes(80), Bytes(20)).expect("fits");
        let want = [
            (piece("a", 100, 20), piece("c", 1000, 20)),
            (piece("a", 120, 10), piece("c", 1020, 10)),
            (piece("b", 0, 20), piece("c", 1030, 20)),
            (piece("b", 20, 20), piece("c", 5000, 20)),
            (piece("b", 40, 10), piece("c", 5020, 10)),
        ];
        assert_eq!(runs, want);
        assert_eq!(runs.iter().map(|r| r.0.len.0).sum::<u64>(), 80);
        // Part of a layout; a layout too short.
        assert_eq!(
            copy_runs(&src, &dst, Bytes(5), Bytes(20)).map(|r| r.len()),
            Some(1)
        );
        assert_eq!(copy_runs(&src, &dst[..1], Bytes(80), Bytes(20)), None);
        assert_eq!(copy_runs(&src, &dst, Bytes(0), Bytes(20)), Some(vec![]));
    }

    #[test]
    fn byte_runs_map_lv_bytes_to_devices() {
        let lv = [piece("a", 100, 30), piece("b", 0, 50)];
        assert_eq!(byte_runs(&lv, Bytes(0), Bytes(10)), [piece("a", 100, 10)]);
        assert_eq!(
            byte_runs(&lv, Bytes(25), Bytes(10)),
            [piece("a", 125, 5), piece("b", 0, 5)]
        );
        assert_eq!(byte_runs(&lv, Bytes(70), Bytes(100)), [piece("b", 40, 10)]);
        assert!(byte_runs(&lv, Bytes(80), Bytes(10)).is_empty());
        assert!(piece("a", 0, 10).overlaps(&piece("a", 9, 1)));
        assert!(!piece("a", 0, 10).overlaps(&piece("a", 10, 1)));
        assert!(!piece("a", 0, 10).overlaps(&piece("b", 0, 10)));
    }
    use crate::edit::{self, LvSpec, PoolSpec, ThinSpec};
    use crate::testing::{session_with_vg, stamp};

    fn vg() -> Vg {
        let s = session_with_vg(2);
        s.update("vg", "t", |v, ctx| {
            let v = edit::lv::create(v, ctx, &LvSpec::linear("a", 2, stamp()))?.0;
            let v = edit::lv::create(v, ctx, &LvSpec::linear("b", 1, stamp()))?.0;
            let v = edit::lv::resize(v, ctx, "a", 5, None, false)?;
            let v = edit::lv::create(v, ctx, &LvSpec::linear("big", 14, stamp()))?.0;
            let mut st = LvSpec::linear("st", 2, stamp());
            (st.stripes, st.stripe_size) = (2, Some(128));
            let v = edit::lv::create(v, ctx, &st)?.0;
            let pool = PoolSpec {
                data: LvSpec::linear("pool", 1, stamp()),
                chunk_size: None,
                metadata_extents: None,
                discards: "passdown".into(),
                zero: true,
            };
            let (v, pool) = edit::thin::create_pool(v, ctx, &pool)?;
            let thin = ThinSpec {
                name: Some("t".into()),
                pool,
                extents: 1,
                origin: None,
                tags: vec![],
                activation_skip: None,
                stamp: stamp(),
            };
            Ok(edit::thin::create_thin(v, ctx, &thin)?.0)
        })
        .expect("lvs");
        s.vg("vg").expect("vg")
    }

    #[test]
    fn linear_lvs_become_pieces_of_the_pvs() {
        let vg = vg();
        let paths = [Some("d0".to_owned()), Some("d1".to_owned())];
        let pe0 = vg.pvs[0].data_start().0;
        let b = place(&vg, "b", &paths).expect("b");
        assert_eq!(b.bytes, Bytes(4 << 20));
        let piece = b.single().expect("one piece");
        assert_eq!(
            (piece.device.as_str(), piece.offset.0),
            ("d0", pe0 + (8 << 20))
        );
        // a: extents 0-1, then 3 more after b's extent: two pieces.
        let a = place(&vg, "a", &paths).expect("a");
        assert_eq!(a.bytes, Bytes(20 << 20));
        let Layout::Linear(p) = &a.layout else {
            panic!("linear")
        };
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].offset.0, p[0].len.0), (pe0, 8 << 20));
        assert_eq!((p[1].offset.0, p[1].len.0), (pe0 + (12 << 20), 12 << 20));
        assert!(a.single().is_none());
        // Spanning both PVs.
        let big = place(&vg, "big", &paths).expect("big");
        let Layout::Linear(p) = &big.layout else {
            panic!("linear")
        };
        assert_eq!(p.iter().map(|x| x.len.0).sum::<u64>(), big.bytes.0);
        assert!(p.iter().any(|x| x.device == "d1"));
        // Striped over both PVs: one segment, an area on each.
        let st = place(&vg, "st", &paths).expect("st");
        let Layout::Striped(segs) = &st.layout else {
            panic!("striped: {:?}", st.layout)
        };
        assert_eq!(segs.len(), 1);
        assert_eq!(
            (segs[0].len, segs[0].stripe_bytes),
            (st.bytes, Bytes(64 << 10))
        );
        let devices: Vec<&str> = segs[0].areas.iter().map(|a| a.device.as_str()).collect();
        assert_eq!(devices, ["d0", "d1"]);
        assert!(segs[0].areas.iter().all(|a| a.len.0 == st.bytes.0 / 2));
        assert!(st.single().is_none());
        // Thin and missing.
        let t = place(&vg, "t", &paths).expect("t");
        let Layout::Thin { pool, device_id } = &t.layout else {
            panic!("thin: {:?}", t.layout)
        };
        assert_eq!(
            (pool.name.as_str(), *device_id, t.bytes),
            ("pool", 1, Bytes(4 << 20))
        );
        assert!(pool.metadata.single().is_some() && pool.data.single().is_some());
        assert!(matches!(
            place(&vg, "pool", &paths).expect("pool").layout,
            Layout::Pool(_)
        ));
        assert!(matches!(
            place(&vg, "nope", &paths),
            Err(ActivateError::NoLv { .. })
        ));
        assert!(matches!(
            place(&vg, "b", &[None, None]),
            Err(ActivateError::MissingPv { pv: 0, .. })
        ));
    }
}
