//! VG-level edits: create, extend, reduce, tags.

use std::borrow::Cow;

use super::{check, refused, EditCtx, EditError, LvSpec, Stamp};
use crate::model::{Header, Pv, Vg};
use crate::text::Tree;
use crate::units::{Bytes, ExtentSize, Sectors};
use crate::uuid::Uuid;

/// lvm2's default extent size: 4 MiB, in sectors.
pub const DEFAULT_EXTENT_SIZE: u32 = 8192;

/// A PV joining a VG, as its label and layout describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPv {
    /// The PV id from the label.
    pub id: Uuid,
    /// Device path (a hint in the metadata).
    pub device: String,
    /// Device size.
    pub dev_size: Bytes,
    /// Where PE 0 starts (the model keeps it in sectors).
    pub pe_start: Bytes,
    /// Reserved at the end of the device (the second metadata area).
    pub tail: Bytes,
    /// Bootloader area (offset, size).
    pub bootloader: Option<(Bytes, Bytes)>,
}

/// A shared (lvmlockd, sanlock) VG's locking set-up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedVg {
    /// Size of the hidden `lvmlock` LV (256 MiB, or 1 GiB with 4K sectors).
    pub lock_lv_size: Bytes,
}

impl SharedVg {
    /// What lvmlockd sizes `lvmlock` at for devices of `sector`-byte logical sectors: 256 MiB,
    /// or 1 GiB when leases are 4K-sector sized.
    pub fn for_sector(sector: u32) -> Self {
        Self {
            lock_lv_size: Bytes(if sector > 512 { 1 << 30 } else { 256 << 20 }),
        }
    }
}

/// What `vgcreate` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VgSpec {
    /// VG name.
    pub name: String,
    /// Extent size in sectors (`-s`).
    pub extent_size: u32,
    /// Tags (`--addtag`).
    pub tags: Vec<String>,
    /// `--shared`.
    pub shared: Option<SharedVg>,
}

/// The extent size `vgcreate -s` asked for (checked by `check_extent_size` first).
fn extent_of(extent_size: u32) -> ExtentSize {
    ExtentSize::new(Sectors(u64::from(extent_size))).unwrap_or(ExtentSize::SECTOR)
}

fn pv_of(p: &NewPv, extent_size: u32) -> Result<Pv, EditError> {
    let usable = p.dev_size.saturating_sub(p.pe_start).saturating_sub(p.tail);
    let pe_count = usable.extents_floor(extent_of(extent_size));
    let pe_count = pe_count.to_u32().ok_or_else(|| {
        refused(
            p.device.clone(),
            "more than 2^32 extents: use a larger extent size",
        )
    })?;
    if pe_count == 0 {
        return Err(refused(
            p.device.clone(),
            "too small for one extent of this VG",
        ));
    }
    Ok(Pv {
        id: p.id,
        device: Some(p.device.clone()),
        device_id_type: None,
        device_id: None,
        status: vec![Cow::Borrowed("ALLOCATABLE")],
        flags: Vec::new(),
        tags: Vec::new(),
        dev_size: Some(p.dev_size.sectors_floor().0),
        pe_start: p.pe_start.sectors_floor().0,
        pe_count,
        ba: p
            .bootloader
            .map(|(o, s)| (o.sectors_floor().0, s.sectors_floor().0)),
    })
}

fn check_extent_size(extent_size: u32) -> Result<(), EditError> {
    // lvm2: a power of 2 of at least 1 KiB (2 sectors).
    if extent_size < 2 || !extent_size.is_power_of_two() {
        return Err(EditError::Option {
            option: "-s",
            why: format!(
                "physical extent size {} KiB must be a power of 2 of at least 1 KiB",
                extent_size / 2
            ),
        });
    }
    Ok(())
}

/// The VG `vgcreate` writes (seqno 1); a shared VG gets its `lvmlock` LV first.
pub fn create(spec: &VgSpec, pvs: &[NewPv], stamp: &Stamp) -> Result<Vg, EditError> {
    crate::names::check_vg_name(&spec.name)?;
    check_extent_size(spec.extent_size)?;
    if pvs.is_empty() {
        return Err(refused(spec.name.clone(), "a VG needs at least one PV"));
    }
    for t in &spec.tags {
        crate::names::check_tag(t)?;
    }
    if spec.shared.is_some() && spec.name.len() > 60 {
        return Err(refused(
            spec.name.clone(),
            "a shared VG name is at most 60 characters (lockspace lvm_<name>)",
        ));
    }
    let mut vg = Vg {
        name: spec.name.clone(),
        id: Uuid::random(),
        seqno: 1,
        format: Some("lvm2".into()),
        status: ["RESIZEABLE", "READ", "WRITE"].map(Cow::Borrowed).to_vec(),
        flags: Vec::new(),
        tags: spec.tags.clone(),
        system_id: None,
        lock_type: None,
        lock_args: None,
        extent_size: spec.extent_size,
        max_lv: 0,
        max_pv: 0,
        allocation_policy: None,
        profile: None,
        metadata_copies: Some(0),
        pvs: Vec::new(),
        lvs: Vec::new(),
        historical_lvs: Tree::default(),
        header: Header {
            description: Some(String::new()),
            creation_host: Some(stamp.host.clone()),
            creation_host_system_id: None,
            creation_time: i64::try_from(stamp.time).ok(),
        },
    };
    for p in pvs {
        if vg.pvs.iter().any(|q| q.id == p.id) {
            return Err(refused(p.device.clone(), "PV listed twice"));
        }
        vg.pvs.push(pv_of(p, spec.extent_size)?);
    }
    // A new VG is never part of a group commit.
    let ctx = EditCtx::standalone();
    if let Some(sh) = &spec.shared {
        vg.lock_type = Some("sanlock".into());
        vg.lock_args = Some("1.0.0:lvmlock".into());
        let extents = sh
            .lock_lv_size
            .extents_floor(extent_of(spec.extent_size))
            .to_u32()
            .unwrap_or(u32::MAX)
            .max(1);
        let mut lv = LvSpec::linear("lvmlock", extents, stamp.clone());
        lv.internal = true;
        super::add::create_in(&mut vg, &ctx, &lv)?;
        if let Some(l) = vg.lv_mut("lvmlock") {
            l.status.retain(|s| s != "VISIBLE");
            l.read_ahead = Some(-1);
        }
    }
    check(&vg, &ctx)?;
    Ok(vg)
}

/// `vgextend`: adds PVs.
pub fn extend(vg: Vg, ctx: &EditCtx, pvs: &[NewPv]) -> Result<Vg, EditError> {
    let mut out = vg;
    for p in pvs {
        if out.pvs.iter().any(|q| q.id == p.id) {
            return Err(refused(
                p.device.clone(),
                format!("already in volume group \"{}\"", out.name),
            ));
        }
        out.pvs.push(pv_of(p, out.extent_size)?);
    }
    check(&out, ctx)?;
    Ok(out)
}

/// `vgreduce`: removes PVs (by index) that no LV uses.
pub fn reduce(vg: Vg, ctx: &EditCtx, remove: &[usize]) -> Result<Vg, EditError> {
    let used = vg.allocated_per_pv();
    for &i in remove {
        let name = vg.pvs.get(i).map_or_else(
            || format!("PV #{i}"),
            |p| p.device.clone().unwrap_or_else(|| p.id.to_string()),
        );
        if used.get(i).copied().unwrap_or(0) > 0 {
            return Err(refused(name, "Physical volume is still in use."));
        }
    }
    if remove.len() >= vg.pvs.len() {
        return Err(refused(
            vg.name.clone(),
            "Can't remove final physical volume; use vgremove",
        ));
    }
    let mut out = vg;
    // Renumber PV references: the PV list shrinks.
    let keep: Vec<usize> = (0..out.pvs.len()).filter(|i| !remove.contains(i)).collect();
    let new_index = |old: usize| keep.iter().position(|&k| k == old);
    for lv in &mut out.lvs {
        for seg in &mut std::sync::Arc::make_mut(lv).segments {
            for a in seg.kind.areas_mut() {
                if let crate::model::Area::Pv { pv, .. } = a {
                    *pv = new_index(*pv).unwrap_or(*pv);
                }
            }
        }
    }
    out.pvs = keep.iter().map(|&i| out.pvs[i].clone()).collect();
    check(&out, ctx)?;
    Ok(out)
}

/// `vgchange --addtag/--deltag`.
pub fn change_tags(vg: Vg, ctx: &EditCtx, add: &[String], del: &[String]) -> Result<Vg, EditError> {
    let mut out = vg;
    super::parts::apply_tags(&mut out.tags, add, del)?;
    check(&out, ctx)?;
    Ok(out)
}
