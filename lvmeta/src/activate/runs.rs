//! Where a linear or striped LV's bytes lie on this host's devices: its segments as byte
//! ranges of the PVs (never a thin layout: [`super::plan::place`] adds those). Pure.

use crate::model::{Area, Lv, SegKind, Vg};
use crate::units::{Bytes, Extents, Sectors};

use super::placement::{Layout, Piece, Placement, Stripe};
use super::ActivateError;

/// The device-mapper uuid lvm2 gives LV `lv` of `vg`: `LVM-`, then both ids without their
/// dashes.
pub(crate) fn dm_uuid(vg: &Vg, lv: &Lv) -> String {
    format!(
        "LVM-{}{}",
        String::from_utf8_lossy(vg.id.raw()),
        String::from_utf8_lossy(lv.id.raw())
    )
}

/// Places LV `lv` of `vg` segment by segment: linear pieces or stripes, or
/// [`Layout::Other`] naming the first segment type that is neither (or `striped over
/// LVs`); `paths[i]` is the
/// device of the VG's PV `i` on this host.
pub(crate) fn runs(
    vg: &Vg,
    lv: &str,
    paths: &[Option<String>],
) -> Result<Placement, ActivateError> {
    let l = vg.lv(lv).ok_or_else(|| ActivateError::NoLv {
        vg: vg.name.clone(),
        lv: lv.into(),
    })?;
    let ext = vg.extent();
    let dm_uuid = dm_uuid(vg, l);
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
        let area_extents = Extents(u64::from(seg.extent_count) / n);
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
            let data = vg.pvs.get(*pv).ok_or_else(missing)?.data_start();
            placed.push(Piece {
                device,
                offset: Bytes(data.0.saturating_add(Extents::from(*pe).bytes(ext).0)),
                len: area_extents.bytes(ext),
            });
        }
        if other.is_some() {
            break;
        }
        if let [piece] = placed.as_slice() {
            match pieces.last_mut() {
                Some(last)
                    if last.device == piece.device
                        && last.offset.checked_add(last.len) == Some(piece.offset) =>
                {
                    last.len = last.len.saturating_add(piece.len)
                }
                _ => pieces.push(piece.clone()),
            }
        }
        stripes.push(Stripe {
            len: Extents::from(seg.extent_count).bytes(ext),
            stripe_bytes: Sectors(u64::from(stripe_size.unwrap_or(0))).bytes(),
            areas: placed,
        });
    }
    let layout = match other {
        Some(t) => Layout::Other(t),
        None if stripes.iter().any(|s| s.areas.len() > 1) => Layout::Striped(stripes),
        None => Layout::Linear(pieces),
    };
    let bytes = Extents(l.extents()).bytes(ext);
    Ok(Placement {
        vg: vg.name.clone(),
        lv: lv.into(),
        bytes,
        layout,
        dm_uuid,
    })
}
