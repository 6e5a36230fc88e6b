//! The report fields, named as lvm2 names them, and their values.

use super::attr::LvUses;
use super::kernel::DmState;
use crate::model::{Area, Lv, SegKind, Segment, ThinPool, Vg};
use crate::scan::{Mda, Scan, ScannedVg};
use crate::units::Sectors;

/// Which object a field describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Object {
    /// A physical volume.
    Pv,
    /// A volume group.
    Vg,
    /// A logical volume.
    Lv,
    /// One segment of a logical volume.
    Seg,
}

/// One report field.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The name given to `-o`.
    pub name: &'static str,
    /// The key in JSON output (differs from `name` for a few fields, as in lvm2).
    pub json: &'static str,
    /// Column title.
    pub title: &'static str,
    /// What it describes.
    pub object: Object,
}

const fn f(name: &'static str, title: &'static str, object: Object) -> Field {
    Field {
        name,
        json: name,
        title,
        object,
    }
}

/// Every field lvmeta reports.
pub const FIELDS: &[Field] = &[
    f("lv_name", "LV", Object::Lv),
    f("lv_uuid", "LV UUID", Object::Lv),
    f("lv_size", "LSize", Object::Lv),
    f("lv_attr", "Attr", Object::Lv),
    f("seg_count", "#Seg", Object::Lv),
    f("lv_tags", "LV Tags", Object::Lv),
    f("pool_lv", "Pool", Object::Lv),
    f("origin", "Origin", Object::Lv),
    Field {
        name: "lv_lock_args",
        json: "lv_lockargs",
        title: "LLockArgs",
        object: Object::Lv,
    },
    // Kernel status columns of lvm2's default lvs: blank for LVs that are not active; of
    // active ones lvmeta reads thin pools' and thin LVs' (`usage.rs`).
    f("data_percent", "Data%", Object::Lv),
    f("metadata_percent", "Meta%", Object::Lv),
    f("move_pv", "Move", Object::Lv),
    f("mirror_log", "Log", Object::Lv),
    f("copy_percent", "Cpy%Sync", Object::Lv),
    f("sync_percent", "Cpy%Sync", Object::Lv),
    f("convert_lv", "Convert", Object::Lv),
    f("lv_full_name", "LV", Object::Lv),
    f("lv_path", "Path", Object::Lv),
    f("lv_dm_path", "DMPath", Object::Lv),
    f("lv_active", "Active", Object::Lv),
    f("lv_layout", "Layout", Object::Lv),
    f("lv_role", "Role", Object::Lv),
    f("lv_time", "CTime", Object::Lv),
    f("lv_host", "Host", Object::Lv),
    f("chunk_size", "Chunk", Object::Seg),
    f("segtype", "Type", Object::Seg),
    f("seg_size", "SSize", Object::Seg),
    f("devices", "Devices", Object::Seg),
    f("seg_start_pe", "Start", Object::Seg),
    f("seg_size_pe", "SSize", Object::Seg),
    f("stripes", "#Str", Object::Seg),
    f("stripe_size", "Stripe", Object::Seg),
    f("discards", "Discards", Object::Seg),
    f("zero", "Zero", Object::Seg),
    f("vg_name", "VG", Object::Vg),
    f("vg_uuid", "VG UUID", Object::Vg),
    f("vg_size", "VSize", Object::Vg),
    f("vg_free", "VFree", Object::Vg),
    f("vg_extent_size", "Ext", Object::Vg),
    f("vg_extent_count", "#Ext", Object::Vg),
    f("vg_free_count", "Free", Object::Vg),
    f("pv_count", "#PV", Object::Vg),
    f("lv_count", "#LV", Object::Vg),
    f("snap_count", "#SN", Object::Vg),
    f("vg_seqno", "Seq", Object::Vg),
    f("vg_tags", "VG Tags", Object::Vg),
    f("vg_lock_type", "LockType", Object::Vg),
    f("vg_lock_args", "VLockArgs", Object::Vg),
    f("vg_systemid", "System ID", Object::Vg),
    f("vg_attr", "Attr", Object::Vg),
    f("vg_mda_count", "#VMda", Object::Vg),
    f("vg_mda_size", "VMdaSize", Object::Vg),
    f("vg_mda_free", "VMdaFree", Object::Vg),
    f("pv_name", "PV", Object::Pv),
    f("pv_uuid", "PV UUID", Object::Pv),
    f("pv_fmt", "Fmt", Object::Pv),
    f("pv_attr", "Attr", Object::Pv),
    f("pv_size", "PSize", Object::Pv),
    f("pv_free", "PFree", Object::Pv),
    f("dev_size", "DevSize", Object::Pv),
    f("pe_start", "1st PE", Object::Pv),
    f("pv_pe_count", "PE", Object::Pv),
    f("pv_pe_alloc_count", "Alloc", Object::Pv),
    f("pv_mda_count", "#PMda", Object::Pv),
    f("pv_mda_size", "PMdaSize", Object::Pv),
    f("pv_mda_free", "PMdaFree", Object::Pv),
    f("pv_tags", "PV Tags", Object::Pv),
    f("pv_used", "Used", Object::Pv),
];

/// A field's value before formatting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    /// Text, left-aligned.
    Str(String),
    /// A count, right-aligned.
    Num(u64),
    /// A signed number, right-aligned (`--binary`: 1, 0, or -1 for unknown).
    Int(i64),
    /// A size in bytes, formatted with the chosen units.
    Size(u64),
}

/// Context for the fields of one VG.
pub struct VgCtx<'a> {
    /// The scan the VG came from.
    pub scan: &'a Scan,
    /// The VG.
    pub svg: &'a ScannedVg,
}

fn tags(t: &[String]) -> Cell {
    let mut v: Vec<&str> = t.iter().map(String::as_str).collect();
    v.sort_unstable();
    Cell::Str(v.join(","))
}

/// A VG field.
pub fn vg_field(c: &VgCtx<'_>, name: &str) -> Option<Cell> {
    let vg = &c.svg.vg;
    let ext = vg.extent_bytes();
    Some(match name {
        "vg_name" => Cell::Str(vg.name.clone()),
        "vg_uuid" => Cell::Str(vg.id.to_string()),
        "vg_size" => Cell::Size(vg.extent_count() * ext),
        "vg_free" => Cell::Size(vg.free_count() * ext),
        "vg_extent_size" => Cell::Size(ext),
        "vg_extent_count" => Cell::Num(vg.extent_count()),
        "vg_free_count" => Cell::Num(vg.free_count()),
        "pv_count" => Cell::Num(vg.pvs.len() as u64),
        "lv_count" => Cell::Num(vg.lvs.iter().filter(|l| l.is_visible()).count() as u64),
        // Old-style (COW) snapshots; thin snapshots are thin LVs.
        "snap_count" => Cell::Num(
            vg.lvs
                .iter()
                .filter(|l| {
                    l.segments
                        .iter()
                        .any(|s| matches!(s.kind, SegKind::Snapshot(_)))
                })
                .count() as u64,
        ),
        "vg_seqno" => Cell::Num(u64::from(vg.seqno)),
        "vg_tags" => tags(&vg.tags),
        "vg_lock_type" => Cell::Str(vg.lock_type.clone().unwrap_or_default()),
        "vg_lock_args" => Cell::Str(vg.lock_args.clone().unwrap_or_default()),
        "vg_systemid" => Cell::Str(vg.system_id.clone().unwrap_or_default()),
        "vg_attr" => Cell::Str(vg_attr(vg, c.svg.pv_devices.iter().any(Option::is_none))),
        "vg_mda_count" | "vg_mda_size" | "vg_mda_free" => {
            let mdas = c
                .svg
                .pv_devices
                .iter()
                .flatten()
                .flat_map(|&i| &c.scan.pvs[i].mdas);
            mda_field(mdas, name)
        }
        _ => return None,
    })
}

/// `*_mda_count`, `*_mda_size` (the smallest area) and `*_mda_free` (the least free) of a
/// PV's or a VG's metadata areas (free space and a VG's size: those not ignored); 0 without
/// any.
fn mda_field<'m>(mdas: impl Iterator<Item = &'m Mda>, name: &str) -> Cell {
    if name.ends_with("_count") {
        return Cell::Num(mdas.count() as u64);
    }
    // Free space is of the areas in use, and so is a VG's size: lvm2 leaves ignored areas
    // out of those (a PV whose only area is ignored has 0 free), not out of a PV's size.
    let in_use_only = name.ends_with("_free") || name.starts_with("vg_");
    let ignored = |m: &Mda| m.header.as_ref().is_some_and(|h| h.committed.is_ignored());
    let in_use = mdas.filter(|m| !(in_use_only && ignored(m)));
    let least = match name.ends_with("_free") {
        true => in_use.filter_map(mda_free).min(),
        false => in_use.map(|m| m.locn.size).min(),
    };
    Cell::Size(least.unwrap_or(0))
}

/// lvm2's free space of a metadata area: half of what is left beside the current text (a
/// commit writes the new text next to the old one), in whole sectors.
/// - lvm2 counts the text as its size plus one sector (measured against lvm2 2.03.16: the
///   free space of areas holding texts of 0 to 2786 bytes).
/// - None for an area whose header did not validate.
fn mda_free(m: &Mda) -> Option<u64> {
    const SECTOR: u64 = 512;
    let h = m.header.as_ref()?;
    let room = h.size.saturating_sub(SECTOR);
    let text = h.committed.size + SECTOR;
    Some(room.saturating_sub(2 * text) / 2 / SECTOR * SECTOR)
}

fn vg_attr(vg: &Vg, partial: bool) -> String {
    let has = |w: &str| vg.status.iter().any(|s| s == w);
    let alloc = match vg.allocation_policy.as_deref() {
        Some("contiguous") => 'c',
        Some("cling") => 'l',
        Some("anywhere") => 'a',
        _ => 'n',
    };
    let shared = if vg.is_shared() {
        's'
    } else if has("CLUSTERED") {
        'c'
    } else {
        '-'
    };
    [
        if has("WRITE") { 'w' } else { 'r' },
        if has("RESIZEABLE") { 'z' } else { '-' },
        if has("EXPORTED") { 'x' } else { '-' },
        if partial { 'p' } else { '-' },
        alloc,
        shared,
    ]
    .iter()
    .collect()
}

/// A PV field for scanned PV `i`.
pub fn pv_field(scan: &Scan, i: usize, name: &str) -> Option<Cell> {
    let spv = &scan.pvs[i];
    let member = scan.vg_of_pv(i);
    if let Some((svg, _)) = member {
        if let Some(c) = vg_field(&VgCtx { scan, svg }, name) {
            return Some(c);
        }
    } else if name.starts_with("vg_mda_") {
        // An orphan's VG has no areas: lvm2 prints 0.
        return Some(mda_field(std::iter::empty(), name));
    } else if name.starts_with("vg_") {
        return Some(Cell::Str(String::new()));
    }
    let (pe_count, alloc, ext, pe_start, pv_tags, allocatable) = match member {
        Some((svg, p)) => {
            let pv = &svg.vg.pvs[p];
            let alloc = svg.vg.allocated_per_pv()[p];
            let allocatable = pv.status.iter().any(|s| s == "ALLOCATABLE");
            (
                u64::from(pv.pe_count),
                alloc,
                svg.vg.extent_bytes(),
                pv.data_start().0,
                pv.tags.clone(),
                allocatable,
            )
        }
        None => (
            0,
            0,
            0,
            spv.label.data_areas.first().map_or(0, |d| d.offset),
            Vec::new(),
            false,
        ),
    };
    let pv_size = if member.is_some() {
        pe_count * ext
    } else {
        spv.label.device_size
    };
    Some(match name {
        "pv_name" => Cell::Str(spv.device.clone()),
        "pv_uuid" => Cell::Str(spv.label.pv_uuid.to_string()),
        "pv_fmt" => Cell::Str("lvm2".into()),
        "pv_attr" => Cell::Str(format!("{}--", if allocatable { 'a' } else { '-' })),
        "pv_size" => Cell::Size(pv_size),
        "pv_free" => Cell::Size(if member.is_some() {
            (pe_count - alloc) * ext
        } else {
            pv_size
        }),
        "dev_size" => Cell::Size(spv.dev_size),
        "pe_start" => Cell::Size(pe_start),
        "pv_pe_count" => Cell::Num(pe_count),
        "pv_pe_alloc_count" => Cell::Num(alloc),
        "pv_used" => Cell::Size(alloc * ext),
        "pv_mda_count" | "pv_mda_size" | "pv_mda_free" => mda_field(spv.mdas.iter(), name),
        "pv_tags" => tags(&pv_tags),
        "vg_name" => Cell::Str(String::new()),
        _ => return None,
    })
}

/// An LV or segment field; `seg` is the segment of this row (the first when rows are LVs);
/// `pct` keeps the LV's percentages once read.
pub fn lv_field(
    c: &VgCtx<'_>,
    uses: &LvUses<'_>,
    lv: &Lv,
    seg: &Segment,
    dm: &DmState,
    pct: &super::usage::Percents,
    name: &str,
) -> Option<Cell> {
    if let Some(v) = vg_field(c, name) {
        return Some(v);
    }
    let vg = &c.svg.vg;
    let ext = vg.extent_bytes();
    Some(match name {
        "lv_name" => Cell::Str(lv.name.clone()),
        "lv_uuid" => Cell::Str(lv.id.to_string()),
        "lv_size" => Cell::Size(lv.extents() * ext),
        "lv_attr" => Cell::Str(super::attr::lv_attr(lv, uses, vg, dm)),
        "seg_count" => Cell::Num(lv.segments.len() as u64),
        "lv_tags" => tags(&lv.tags),
        "pool_lv" => Cell::Str(lv_name_shown(vg, pool_of(lv))),
        "origin" => Cell::Str(lv_name_shown(vg, origin_of(lv, uses))),
        "lv_lock_args" => Cell::Str(lv.lock_args.clone().unwrap_or_default()),
        "segtype" => Cell::Str(seg.report_type().to_owned()),
        "seg_size" => Cell::Size(u64::from(seg.extent_count) * ext),
        "data_percent" => Cell::Str(pct.of(vg, lv, dm)[0].clone()),
        "metadata_percent" => Cell::Str(pct.of(vg, lv, dm)[1].clone()),
        "copy_percent" | "sync_percent" => Cell::Str(pct.of(vg, lv, dm)[2].clone()),
        "move_pv" | "mirror_log" | "convert_lv" => Cell::Str(String::new()),
        "lv_full_name" => Cell::Str(format!("{}/{}", vg.name, lv.name)),
        "lv_path" => Cell::Str(super::attr::lv_path(vg, lv)),
        "lv_dm_path" => Cell::Str(format!(
            "/dev/mapper/{}",
            crate::activate::dm_names::dm_name(&vg.name, &lv.name)
        )),
        "lv_active" => Cell::Str(super::kernel::lv_active(vg, lv, dm).into()),
        "lv_layout" => Cell::Str(super::roles::layout(lv)),
        "lv_role" => Cell::Str(super::roles::role(lv, uses)),
        "lv_time" => Cell::Str(
            lv.creation
                .as_ref()
                .map_or_else(String::new, |c| super::roles::time(c.0)),
        ),
        "lv_host" => Cell::Str(
            lv.creation
                .as_ref()
                .map_or_else(String::new, |c| c.1.clone()),
        ),
        "chunk_size" => Cell::Size(match &seg.kind {
            SegKind::ThinPool(p) => Sectors(u64::from(p.chunk_size)).bytes().0,
            _ => 0,
        }),
        "devices" => Cell::Str(devices(c, seg)),
        "seg_start_pe" => Cell::Num(u64::from(seg.start_extent)),
        "seg_size_pe" => Cell::Num(u64::from(seg.extent_count)),
        // lvm2's area count: stripes, mirror or raid images, the one sub-LV a pool, cache,
        // writecache or integrity segment stacks on.
        "stripes" => Cell::Num(match &seg.kind {
            SegKind::Striped(s) => s.areas.len() as u64,
            SegKind::Mirror(m) => m.areas.len() as u64,
            SegKind::Raid { .. } => seg.kind.raid_images().count() as u64,
            SegKind::ThinPool(_)
            | SegKind::CachePool(_)
            | SegKind::Cache(_)
            | SegKind::Writecache(_)
            | SegKind::Integrity(_)
            | SegKind::VdoPool(_) => 1,
            _ => 0,
        }),
        "stripe_size" => Cell::Size(match &seg.kind {
            SegKind::Striped(s) if s.areas.len() > 1 => {
                Sectors(u64::from(s.stripe_size.unwrap_or(0))).bytes().0
            }
            SegKind::Raid { body, .. } => body
                .int("stripe_size")
                .and_then(|v| u64::try_from(v).ok())
                .map_or(0, |v| Sectors(v).bytes().0),
            _ => 0,
        }),
        "discards" => Cell::Str(
            pool_settings(vg, seg).map_or_else(String::new, |p| p.discards_mode().to_owned()),
        ),
        "zero" => Cell::Str(match pool_settings(vg, seg) {
            Some(p) if p.zero_new_blocks => "zero".into(),
            Some(_) => String::new(),
            None => "unknown".into(),
        }),
        _ => return None,
    })
}

/// The thin pool whose settings (`discards`, `zero`) a segment shows, as lvm2 reports them:
/// a pool's own, a thin LV's pool's, none for other segments.
fn pool_settings<'v>(vg: &'v Vg, seg: &'v Segment) -> Option<&'v ThinPool> {
    match &seg.kind {
        SegKind::ThinPool(p) => Some(p),
        SegKind::Thin(t) => vg.lv(&t.thin_pool)?.pool(),
        _ => None,
    }
}

/// An LV name as lvm2's reports show the LVs a field names: hidden ones in brackets.
fn lv_name_shown(vg: &Vg, name: Option<&str>) -> String {
    match name {
        Some(n) if vg.lv(n).is_some_and(|l| !l.is_visible()) => format!("[{n}]"),
        Some(n) => n.to_owned(),
        None => String::new(),
    }
}

/// The pool a report shows: a thin LV's thin pool, a cache LV's cache pool or cache volume,
/// a writecache LV's cache volume.
fn pool_of(lv: &Lv) -> Option<&str> {
    match &lv.segments.first()?.kind {
        SegKind::Thin(t) => Some(&t.thin_pool),
        SegKind::Cache(b) => b.lv("cache_pool"),
        SegKind::Writecache(b) => b.lv("writecache"),
        _ => None,
    }
}

/// The origin a report shows: thin snapshot origin, the origin of an old COW snapshot, the
/// origin sub-LV of a cache, writecache or integrity LV.
fn origin_of<'l>(lv: &'l Lv, uses: &LvUses<'l>) -> Option<&'l str> {
    match &lv.segments.first()?.kind {
        SegKind::Thin(t) => t.origin.as_deref().or(t.external_origin.as_deref()),
        SegKind::Cache(b) | SegKind::Writecache(b) | SegKind::Integrity(b) => b.lv("origin"),
        _ => uses.origin_of_cow(&lv.name),
    }
}

fn devices(c: &VgCtx<'_>, seg: &Segment) -> String {
    let area = |a: &Area| match a {
        Area::Pv { pv, pe } => {
            let dev = c.svg.pv_devices[*pv].map_or("[unknown]", |d| c.scan.pvs[d].device.as_str());
            format!("{dev}({pe})")
        }
        Area::Lv { lv, le } => format!("{lv}({le})"),
    };
    // The sub-LV a pool, cache, writecache or integrity segment stacks on, the images of a
    // raid segment: from their start.
    let sub = |lv: Option<&str>| lv.map(|l| format!("{l}(0)"));
    let parts: Vec<String> = match &seg.kind {
        SegKind::ThinPool(p) => sub(Some(&p.pool)).into_iter().collect(),
        SegKind::CachePool(b) | SegKind::VdoPool(b) => sub(b.lv("data")).into_iter().collect(),
        SegKind::Cache(b) | SegKind::Writecache(b) | SegKind::Integrity(b) => {
            sub(b.lv("origin")).into_iter().collect()
        }
        SegKind::Raid { .. } => seg
            .kind
            .raid_images()
            .filter_map(|i| sub(Some(i)))
            .collect(),
        k => k.areas().iter().map(area).collect(),
    };
    parts.join(",")
}
