//! Where an LV's blocks are on this host's devices: its segments as byte ranges of the PVs,
//! the input of every activation backend. Pure.

use crate::model::{Area, SegKind, Vg};

use super::thin::{plan_pool, PoolPlan};
use super::ActivateError;

/// One contiguous run of an LV's bytes on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The device (as the scan named it).
    pub device: String,
    /// Byte offset on the device.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// One segment of a striped LV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripe {
    /// Length of the segment in bytes (all its areas together).
    pub len: u64,
    /// Stripe size in bytes (0 for a one-area segment).
    pub stripe_bytes: u64,
    /// One area per stripe, each `len / areas` bytes long.
    pub areas: Vec<Piece>,
}

/// How an LV's bytes are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Linear: pieces in LV order (adjacent pieces on one device merged).
    Linear(Vec<Piece>),
    /// Striped: each segment in LV order, one area per stripe (a linear segment has one).
    Striped(Vec<Stripe>),
    /// A thin LV: device `device_id` of its pool.
    Thin {
        /// The pool, with what its kernel target needs.
        pool: Box<PoolPlan>,
        /// The thin device's id in the pool.
        device_id: u32,
    },
    /// A thin pool activated by itself (`lvchange -ay vg/pool`).
    Pool(Box<PoolPlan>),
    /// Anything that needs a device-mapper target other than linear: the segment type.
    Other(String),
}

/// An LV to activate: which one, its size and its layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The VG.
    pub vg: String,
    /// The LV.
    pub lv: String,
    /// Size in bytes.
    pub bytes: u64,
    /// Where its bytes are.
    pub layout: Layout,
    /// The device-mapper uuid lvm2 gives the LV's device: `LVM-`, then the VG's and the LV's
    /// ids without their dashes (so stock lvm2 on this host sees it active).
    pub dm_uuid: String,
}

impl Placement {
    /// The single piece of a one-piece linear LV.
    pub fn single(&self) -> Option<&Piece> {
        match &self.layout {
            Layout::Linear(p) if p.len() == 1 => p.first(),
            _ => None,
        }
    }

    /// Every run of the PVs' devices this LV's bytes live on: its pieces, its stripes'
    /// areas, or its pool's metadata and data (for a thin LV or pool).
    pub fn pieces(&self) -> Vec<&Piece> {
        match &self.layout {
            Layout::Linear(p) => p.iter().collect(),
            Layout::Striped(s) => s.iter().flat_map(|s| &s.areas).collect(),
            Layout::Thin { pool, .. } | Layout::Pool(pool) => {
                let mut out = pool.metadata.pieces();
                out.extend(pool.data.pieces());
                out
            }
            Layout::Other(_) => Vec::new(),
        }
    }
}

impl Piece {
    /// Do `self` and `other` share a byte of the same device?
    pub fn overlaps(&self, other: &Piece) -> bool {
        self.device == other.device
            && self.offset < other.offset.saturating_add(other.len)
            && other.offset < self.offset.saturating_add(self.len)
    }
}

/// The runs of the devices under bytes `[start, start + len)` of a linear LV laid out as
/// `pieces` (fewer bytes when the LV is shorter).
pub fn byte_runs(pieces: &[Piece], start: u64, len: u64) -> Vec<Piece> {
    let end = start.saturating_add(len);
    let mut out = Vec::new();
    let mut at = 0u64;
    for p in pieces {
        let (from, to) = (start.max(at), end.min(at + p.len));
        if from < to {
            out.push(Piece {
                device: p.device.clone(),
                offset: p.offset + (from - at),
                len: to - from,
            });
        }
        at += p.len;
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
    bytes: u64,
    max: u64,
) -> Option<Vec<(Piece, Piece)>> {
    let (mut i, mut i_off, mut j, mut j_off) = (0, 0, 0, 0);
    let mut left = bytes;
    let mut runs = Vec::new();
    while left > 0 {
        let (a, b) = (src.get(i)?, dst.get(j)?);
        let n = (a.len - i_off).min(b.len - j_off).min(max.max(1)).min(left);
        runs.push((
            Piece {
                device: a.device.clone(),
                offset: a.offset + i_off,
                len: n,
            },
            Piece {
                device: b.device.clone(),
                offset: b.offset + j_off,
                len: n,
            },
        ));
        left -= n;
        (i_off, j_off) = (i_off + n, j_off + n);
        if i_off == a.len {
            (i, i_off) = (i + 1, 0);
        }
        if j_off == b.len {
            (j, j_off) = (j + 1, 0);
        }
    }
    Some(runs)
}

/// The device-mapper uuid lvm2 gives LV `lv` of `vg`: `LVM-`, then both ids without their
/// dashes.
pub(crate) fn dm_uuid(vg: &Vg, lv: &crate::model::Lv) -> String {
    format!(
        "LVM-{}{}",
        String::from_utf8_lossy(vg.id.raw()),
        String::from_utf8_lossy(lv.id.raw())
    )
}

/// Places LV `lv` of `vg`; `paths[i]` is the device of the VG's PV `i` on this host.
pub fn place(vg: &Vg, lv: &str, paths: &[Option<String>]) -> Result<Placement, ActivateError> {
    let l = vg.lv(lv).ok_or_else(|| ActivateError::NoLv {
        vg: vg.name.clone(),
        lv: lv.into(),
    })?;
    let ext = vg.extent_bytes();
    let dm_uuid = dm_uuid(vg, l);
    let thin_layout = match l.segments.first().map(|s| &s.kind) {
        Some(SegKind::Thin(t)) if t.external_origin.is_none() && t.merge.is_none() => {
            Some(Layout::Thin {
                pool: Box::new(plan_pool(vg, &t.thin_pool, paths)?),
                device_id: t.device_id,
            })
        }
        Some(SegKind::ThinPool(_)) => Some(Layout::Pool(Box::new(plan_pool(vg, lv, paths)?))),
        _ => None,
    };
    if let Some(layout) = thin_layout {
        return Ok(Placement {
            vg: vg.name.clone(),
            lv: lv.into(),
            bytes: l.extents() * ext,
            layout,
            dm_uuid,
        });
    }
    let mut pieces: Vec<Piece> = Vec::new();
    let mut stripes: Vec<Stripe> = Vec::new();
    let mut other = None;
    for seg in &l.segments {
        let (areas, stripe_size) = match &seg.kind {
            SegKind::Striped(st) if !st.areas.is_empty() => (&st.areas, st.stripe_size),
            k => {
                other = Some(k.type_name().to_owned());
                break;
            }
        };
        let n = areas.len() as u64;
        let area_extents = u64::from(seg.extent_count) / n;
        let mut placed = Vec::with_capacity(areas.len());
        for area in areas {
            let Area::Pv { pv, pe } = area else {
                other = Some("striped over LVs".to_owned());
                break;
            };
            let missing = || ActivateError::MissingPv {
                vg: vg.name.clone(),
                lv: lv.into(),
                pv: *pv,
            };
            let device = paths.get(*pv).cloned().flatten().ok_or_else(missing)?;
            let pe_start = vg.pvs.get(*pv).ok_or_else(missing)?.pe_start * 512;
            placed.push(Piece {
                device,
                offset: pe_start + u64::from(*pe) * ext,
                len: area_extents * ext,
            });
        }
        if other.is_some() {
            break;
        }
        if let [piece] = placed.as_slice() {
            match pieces.last_mut() {
                Some(last)
                    if last.device == piece.device && last.offset + last.len == piece.offset =>
                {
                    last.len += piece.len
                }
                _ => pieces.push(piece.clone()),
            }
        }
        stripes.push(Stripe {
            len: u64::from(seg.extent_count) * ext,
            stripe_bytes: u64::from(stripe_size.unwrap_or(0)) * 512,
            areas: placed,
        });
    }
    let layout = match other {
        Some(t) => Layout::Other(t),
        None if stripes.iter().any(|s| s.areas.len() > 1) => Layout::Striped(stripes),
        None => Layout::Linear(pieces),
    };
    let bytes = l
        .segments
        .iter()
        .map(|s| u64::from(s.extent_count) * ext)
        .sum();
    Ok(Placement {
        vg: vg.name.clone(),
        lv: lv.into(),
        bytes,
        layout,
        dm_uuid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(device: &str, offset: u64, len: u64) -> Piece {
        Piece {
            device: device.into(),
            offset,
            len,
        }
    }

    #[test]
    fn copy_runs_follow_both_layouts_in_bounded_steps() {
        let src = [piece("a", 100, 30), piece("b", 0, 50)];
        let dst = [piece("c", 1000, 50), piece("c", 5000, 100)];
        let runs = copy_runs(&src, &dst, 80, 20).expect("fits");
        let want = [
            (piece("a", 100, 20), piece("c", 1000, 20)),
            (piece("a", 120, 10), piece("c", 1020, 10)),
            (piece("b", 0, 20), piece("c", 1030, 20)),
            (piece("b", 20, 20), piece("c", 5000, 20)),
            (piece("b", 40, 10), piece("c", 5020, 10)),
        ];
        assert_eq!(runs, want);
        assert_eq!(runs.iter().map(|r| r.0.len).sum::<u64>(), 80);
        // Part of a layout; a layout too short.
        assert_eq!(copy_runs(&src, &dst, 5, 20).map(|r| r.len()), Some(1));
        assert_eq!(copy_runs(&src, &dst[..1], 80, 20), None);
        assert_eq!(copy_runs(&src, &dst, 0, 20), Some(vec![]));
    }

    #[test]
    fn byte_runs_map_lv_bytes_to_devices() {
        let lv = [piece("a", 100, 30), piece("b", 0, 50)];
        assert_eq!(byte_runs(&lv, 0, 10), [piece("a", 100, 10)]);
        assert_eq!(
            byte_runs(&lv, 25, 10),
            [piece("a", 125, 5), piece("b", 0, 5)]
        );
        assert_eq!(byte_runs(&lv, 70, 100), [piece("b", 40, 10)]);
        assert!(byte_runs(&lv, 80, 10).is_empty());
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
        let pe0 = vg.pvs[0].pe_start * 512;
        let b = place(&vg, "b", &paths).expect("b");
        assert_eq!(b.bytes, 4 << 20);
        let piece = b.single().expect("one piece");
        assert_eq!(
            (piece.device.as_str(), piece.offset),
            ("d0", pe0 + (8 << 20))
        );
        // a: extents 0-1, then 3 more after b's extent: two pieces.
        let a = place(&vg, "a", &paths).expect("a");
        assert_eq!(a.bytes, 20 << 20);
        let Layout::Linear(p) = &a.layout else {
            panic!("linear")
        };
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].offset, p[0].len), (pe0, 8 << 20));
        assert_eq!((p[1].offset, p[1].len), (pe0 + (12 << 20), 12 << 20));
        assert!(a.single().is_none());
        // Spanning both PVs.
        let big = place(&vg, "big", &paths).expect("big");
        let Layout::Linear(p) = &big.layout else {
            panic!("linear")
        };
        assert_eq!(p.iter().map(|x| x.len).sum::<u64>(), big.bytes);
        assert!(p.iter().any(|x| x.device == "d1"));
        // Striped over both PVs: one segment, an area on each.
        let st = place(&vg, "st", &paths).expect("st");
        let Layout::Striped(segs) = &st.layout else {
            panic!("striped: {:?}", st.layout)
        };
        assert_eq!(segs.len(), 1);
        assert_eq!((segs[0].len, segs[0].stripe_bytes), (st.bytes, 64 << 10));
        let devices: Vec<&str> = segs[0].areas.iter().map(|a| a.device.as_str()).collect();
        assert_eq!(devices, ["d0", "d1"]);
        assert!(segs[0].areas.iter().all(|a| a.len == st.bytes / 2));
        assert!(st.single().is_none());
        // Thin and missing.
        let t = place(&vg, "t", &paths).expect("t");
        let Layout::Thin { pool, device_id } = &t.layout else {
            panic!("thin: {:?}", t.layout)
        };
        assert_eq!(
            (pool.name.as_str(), *device_id, t.bytes),
            ("pool", 1, 4 << 20)
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
