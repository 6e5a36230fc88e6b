//! LV segments: the common fields and one typed variant per segment type lvm2 2.03 knows,
//! plus [`SegKind::Unknown`], kept verbatim.

use crate::text::{Emitter, Node, Tree, Value};

use super::read::{fields, Field, Section};
use super::{ModelError, ModelWarning};

/// Where one area of a segment lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Area {
    /// Extents of a PV: index into the VG's PV list and the first PE.
    Pv {
        /// Index of the PV in [`super::Vg::pvs`].
        pv: usize,
        /// First physical extent.
        pe: u32,
    },
    /// Extents of another LV of the VG.
    Lv {
        /// The LV's name.
        lv: String,
        /// First logical extent in that LV.
        le: u32,
    },
}

/// `striped` (and `linear`, which lvm2 writes as striped with one stripe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Striped {
    /// Stripe size in sectors; required when there is more than one stripe.
    pub stripe_size: Option<u32>,
    /// One area per stripe.
    pub areas: Vec<Area>,
}

/// Old dm-mirror (also pvmove's temporary LV).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// Region size in sectors.
    pub region_size: Option<u32>,
    /// The mirror log LV.
    pub mirror_log: Option<String>,
    /// pvmove progress.
    pub extents_moved: Option<u32>,
    /// One area per image.
    pub areas: Vec<Area>,
}

/// A queued thin-pool message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThinMessage {
    /// `create = "<thin LV>"`.
    Create(String),
    /// `delete = <device_id>`.
    Delete(u32),
}

/// `thin-pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinPool {
    /// The metadata LV (`<pool>_tmeta`).
    pub metadata: String,
    /// The data LV (`<pool>_tdata`).
    pub pool: String,
    /// The pool's transaction id.
    pub transaction_id: u64,
    /// Data block size in sectors.
    pub chunk_size: u32,
    /// `passdown`, `nopassdown` or `ignore` (absent means `ignore`).
    pub discards: Option<String>,
    /// Zero newly provisioned blocks.
    pub zero_new_blocks: bool,
    /// `crop_metadata`, when written.
    pub crop_metadata: Option<u32>,
    /// Queued messages, in order.
    pub messages: Vec<ThinMessage>,
}

/// The values of a thin pool's `discards` (lvm2's `--discards`).
pub const DISCARDS: [&str; 3] = ["passdown", "nopassdown", "ignore"];

impl ThinPool {
    /// Its `discards`, with lvm2's reading of an absent one: `ignore`.
    pub fn discards_mode(&self) -> &str {
        self.discards.as_deref().unwrap_or("ignore")
    }
}

/// `thin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thin {
    /// The pool LV.
    pub thin_pool: String,
    /// The pool's transaction id when this LV was created.
    pub transaction_id: u64,
    /// Device id inside the pool (1..=0xFFFFFF).
    pub device_id: u32,
    /// Origin of a thin snapshot.
    pub origin: Option<String>,
    /// External (read-only) origin.
    pub external_origin: Option<String>,
    /// LV being merged into this one.
    pub merge: Option<String>,
}

/// Old-style COW `snapshot` (the hidden `snapshotN` LV).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// COW chunk size in sectors.
    pub chunk_size: u32,
    /// The origin LV.
    pub origin: String,
    /// The COW LV.
    pub cow: String,
    /// Written as `merging_store` instead of `cow_store`.
    pub merging: bool,
}

impl Snapshot {
    /// The field that names the COW LV.
    pub fn store_key(&self) -> &'static str {
        if self.merging {
            "merging_store"
        } else {
            "cow_store"
        }
    }
}

/// A reference from a segment field to another LV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvRef {
    /// The field holding the name (`origin`, `cache_pool`, `raids`, ...).
    pub field: &'static str,
    /// The LV named there.
    pub lv: String,
}

/// raid, cache, cache-pool, writecache, integrity, vdo and vdo-pool segments: the LVs they
/// reference, typed and checked, and every field kept in order for writing back unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct Composite {
    /// Sub-LVs named by the segment.
    pub refs: Vec<LvRef>,
    /// The type-specific fields, verbatim.
    pub fields: Tree<'static>,
}

/// A segment type lvm2 2.03.16 does not know, kept verbatim.
#[derive(Debug, Clone, PartialEq)]
pub struct Unknown {
    /// The whole `type` string.
    pub type_name: String,
    /// Every other field of the segment, verbatim.
    pub fields: Tree<'static>,
}

/// The type-specific part of a segment.
#[derive(Debug, Clone, PartialEq)]
pub enum SegKind {
    /// striped / linear.
    Striped(Striped),
    /// mirror.
    Mirror(Mirror),
    /// thin-pool.
    ThinPool(ThinPool),
    /// thin.
    Thin(Thin),
    /// snapshot.
    Snapshot(Snapshot),
    /// raid0, raid0_meta, raid1, raid4, raid5*, raid6*, raid10*.
    Raid {
        /// The raid type name.
        level: String,
        /// Images and metadata LVs.
        body: Composite,
    },
    /// cache.
    Cache(Composite),
    /// cache-pool.
    CachePool(Composite),
    /// writecache.
    Writecache(Composite),
    /// integrity.
    Integrity(Composite),
    /// vdo.
    Vdo(Composite),
    /// vdo-pool.
    VdoPool(Composite),
    /// error.
    Error,
    /// zero.
    Zero,
    /// Anything else.
    Unknown(Unknown),
}

/// One segment of an LV.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// First LE of the segment in its LV.
    pub start_extent: u32,
    /// Number of LEs.
    pub extent_count: u32,
    /// raid reshape space.
    pub reshape_count: Option<u32>,
    /// raid data copies.
    pub data_copies: Option<u32>,
    /// `+FLAG` suffixes of the type.
    pub type_flags: Vec<String>,
    /// Segment tags.
    pub tags: Vec<String>,
    /// Type-specific data.
    pub kind: SegKind,
}

const RAID_TYPES: &[&str] = &[
    "raid0",
    "raid0_meta",
    "raid1",
    "raid10",
    "raid10_near",
    "raid4",
    "raid5",
    "raid5_n",
    "raid5_la",
    "raid5_ls",
    "raid5_ra",
    "raid5_rs",
    "raid6",
    "raid6_nc",
    "raid6_nr",
    "raid6_zr",
    "raid6_la_6",
    "raid6_ls_6",
    "raid6_ra_6",
    "raid6_rs_6",
    "raid6_n_6",
];

/// Fields every segment has, not part of the type-specific body.
const COMMON: &[&str] = &[
    "start_extent",
    "extent_count",
    "reshape_count",
    "data_copies",
    "type",
    "tags",
];

impl SegKind {
    /// The type name lvm2 writes (without `+FLAG` suffixes).
    pub fn type_name(&self) -> &str {
        match self {
            SegKind::Striped(_) => "striped",
            SegKind::Mirror(_) => "mirror",
            SegKind::ThinPool(_) => "thin-pool",
            SegKind::Thin(_) => "thin",
            SegKind::Snapshot(_) => "snapshot",
            SegKind::Raid { level, .. } => level,
            SegKind::Cache(_) => "cache",
            SegKind::CachePool(_) => "cache-pool",
            SegKind::Writecache(_) => "writecache",
            SegKind::Integrity(_) => "integrity",
            SegKind::Vdo(_) => "vdo",
            SegKind::VdoPool(_) => "vdo-pool",
            SegKind::Error => "error",
            SegKind::Zero => "zero",
            SegKind::Unknown(u) => &u.type_name,
        }
    }

    /// Calls `f` with each LV this segment refers to and the field naming it (a visitor, so
    /// that validating a large VG allocates nothing per segment).
    pub fn each_lv_ref<'s>(&'s self, mut f: impl FnMut(&'static str, &'s str)) {
        let mut areas = |a: &'s [Area], field: &'static str| {
            for x in a {
                if let Area::Lv { lv, .. } = x {
                    f(field, lv.as_str());
                }
            }
        };
        match self {
            SegKind::Striped(s) => areas(&s.areas, "stripes"),
            SegKind::Mirror(m) => {
                areas(&m.areas, "mirrors");
                if let Some(l) = &m.mirror_log {
                    f("mirror_log", l);
                }
            }
            SegKind::ThinPool(p) => {
                f("metadata", &p.metadata);
                f("pool", &p.pool);
            }
            SegKind::Thin(t) => {
                f("thin_pool", &t.thin_pool);
                for (field, v) in [
                    ("origin", &t.origin),
                    ("external_origin", &t.external_origin),
                    ("merge", &t.merge),
                ] {
                    if let Some(v) = v {
                        f(field, v);
                    }
                }
            }
            SegKind::Snapshot(s) => {
                f("origin", &s.origin);
                f(s.store_key(), &s.cow);
            }
            k => {
                if let Some(body) = k.composite() {
                    for r in &body.refs {
                        f(r.field, r.lv.as_str());
                    }
                }
            }
        }
    }

    /// The verbatim body of raid, cache, cache-pool, writecache, integrity, vdo and vdo-pool
    /// segments.
    pub fn composite(&self) -> Option<&Composite> {
        match self {
            SegKind::Raid { body, .. }
            | SegKind::Cache(body)
            | SegKind::CachePool(body)
            | SegKind::Writecache(body)
            | SegKind::Integrity(body)
            | SegKind::Vdo(body)
            | SegKind::VdoPool(body) => Some(body),
            _ => None,
        }
    }

    /// The areas, mutable (for renumbering PVs).
    pub fn areas_mut(&mut self) -> &mut [Area] {
        match self {
            SegKind::Striped(s) => &mut s.areas,
            SegKind::Mirror(m) => &mut m.areas,
            _ => &mut [],
        }
    }

    /// Applies `fix` to every LV name this segment refers to (used by renames). Composite
    /// bodies are kept verbatim, so LVs they name cannot be renamed.
    pub fn rename_lv(&mut self, fix: impl Fn(&mut String)) {
        for a in self.areas_mut() {
            if let Area::Lv { lv, .. } = a {
                fix(lv);
            }
        }
        match self {
            SegKind::Mirror(m) => m.mirror_log.iter_mut().for_each(&fix),
            SegKind::ThinPool(p) => {
                fix(&mut p.metadata);
                fix(&mut p.pool);
                for m in &mut p.messages {
                    if let ThinMessage::Create(n) = m {
                        fix(n);
                    }
                }
            }
            SegKind::Thin(t) => {
                fix(&mut t.thin_pool);
                for v in [&mut t.origin, &mut t.external_origin, &mut t.merge] {
                    v.iter_mut().for_each(&fix);
                }
            }
            SegKind::Snapshot(s) => {
                fix(&mut s.origin);
                fix(&mut s.cow);
            }
            _ => {}
        }
    }

    /// The areas (PV or LV extents) the segment maps, for striped and mirror segments.
    pub fn areas(&self) -> &[Area] {
        match self {
            SegKind::Striped(s) => &s.areas,
            SegKind::Mirror(m) => &m.areas,
            _ => &[],
        }
    }
}

impl Segment {
    /// Extents each area covers.
    pub fn area_len(&self) -> u32 {
        match &self.kind {
            SegKind::Striped(s) if !s.areas.is_empty() => self.extent_count / s.areas.len() as u32,
            _ => self.extent_count,
        }
    }

    /// The name the `segtype` report field shows (`linear` for one stripe).
    pub fn report_type(&self) -> &str {
        match &self.kind {
            SegKind::Striped(s) if s.areas.len() == 1 => "linear",
            k => k.type_name(),
        }
    }
}

/// Resolves names while segments are read.
pub(crate) struct Names<'m> {
    /// (PV section key, PV index), sorted by key.
    pub pvs: &'m [(&'m str, usize)],
    /// PE count of each PV.
    pub pe_counts: &'m [u32],
    /// PV ids for messages.
    pub pv_ids: &'m [String],
}

/// Reads one `segmentN` section of an LV into a typed segment.
pub(crate) fn read_segment(
    sec: &Section<'_, '_>,
    names: &Names<'_>,
    warnings: &mut Vec<ModelWarning>,
) -> Result<Segment, ModelError> {
    // The fields of the frequent types (striped, thin) in one pass; others look theirs up.
    fields!(sec, warnings, {
        start_extent = "start_extent",
        extent_count = "extent_count",
        type_ = "type",
        reshape_count = "reshape_count",
        data_copies = "data_copies",
        tags = "tags",
        stripe_count = "stripe_count",
        stripes = "stripes",
        stripe_size = "stripe_size",
        thin_pool = "thin_pool",
        transaction_id = "transaction_id",
        device_id = "device_id",
        origin = "origin",
        external_origin = "external_origin",
        merge = "merge",
    });
    let start_extent = sec.req_u32(start_extent)?;
    let extent_count = sec.req_u32(extent_count)?;
    let full_type = sec.req_ref(type_)?;
    let (base, type_flags) = split_type(full_type);
    let mut seg = Segment {
        start_extent,
        extent_count,
        reshape_count: sec.opt_u32(reshape_count)?,
        data_copies: sec.opt_u32(data_copies)?,
        type_flags,
        tags: sec.str_list(tags)?,
        kind: SegKind::Error,
    };
    let body = || -> Tree<'static> {
        let rest: Vec<Node> = sec
            .nodes
            .iter()
            .filter(|n| !COMMON.contains(&sec.tree.key(n)))
            .copied()
            .collect();
        sec.tree.subtree(&rest)
    };
    seg.kind = match base {
        "striped" | "linear" => {
            let count = sec.req_u32(stripe_count)?;
            let areas = read_areas(sec, stripes, count, &seg, names)?;
            let stripe_size = sec.opt_u32(stripe_size)?;
            if count > 1 && stripe_size.is_none() {
                return Err(sec.err("stripe_size", "missing for a striped segment"));
            }
            SegKind::Striped(Striped { stripe_size, areas })
        }
        "mirror" => {
            let count = sec.req_u32("mirror_count")?;
            let mirror_log = sec.opt_str("mirror_log")?;
            let region_size = sec.opt_u32("region_size")?;
            if mirror_log.is_some() && region_size.is_none() {
                return Err(sec.err("region_size", "missing for a mirror with a log"));
            }
            SegKind::Mirror(Mirror {
                region_size,
                mirror_log,
                extents_moved: sec.opt_u32("extents_moved")?,
                areas: read_areas(sec, sec.field("mirrors"), count, &seg, names)?,
            })
        }
        "thin-pool" => SegKind::ThinPool(read_thin_pool(sec)?),
        "thin" => {
            let device_id = sec.req_u32(device_id)?;
            if device_id > super::MAX_THIN_DEVICE_ID {
                return Err(sec.err("device_id", format!("{device_id} is above 0xFFFFFF")));
            }
            SegKind::Thin(Thin {
                thin_pool: sec.req_str(thin_pool)?,
                transaction_id: sec.req_u64(transaction_id)?,
                device_id,
                origin: sec.opt_str(origin)?,
                external_origin: sec.opt_str(external_origin)?,
                merge: sec.opt_str(merge)?,
            })
        }
        "snapshot" => {
            let (cow, merging) = match (sec.opt_str("cow_store")?, sec.opt_str("merging_store")?) {
                (Some(c), None) => (c, false),
                (None, Some(m)) => (m, true),
                _ => {
                    return Err(sec.err(
                        "cow_store",
                        "exactly one of cow_store and merging_store is required",
                    ))
                }
            };
            SegKind::Snapshot(Snapshot {
                chunk_size: sec.req_u32("chunk_size")?,
                origin: sec.req_str("origin")?,
                cow,
                merging,
            })
        }
        "error" => SegKind::Error,
        "zero" => SegKind::Zero,
        t if RAID_TYPES.contains(&t) => {
            let list = if sec.value("raids").is_some() {
                "raids"
            } else {
                "raid0_lvs"
            };
            let names = sec.req_str_list(list)?;
            let refs = names
                .into_iter()
                .map(|lv| LvRef {
                    field: if list == "raids" {
                        "raids"
                    } else {
                        "raid0_lvs"
                    },
                    lv,
                })
                .collect();
            SegKind::Raid {
                level: t.to_owned(),
                body: Composite {
                    refs,
                    fields: body(),
                },
            }
        }
        "cache" => SegKind::Cache(composite(sec, &["cache_pool", "origin"], &[], body())?),
        "cache-pool" => SegKind::CachePool(composite(sec, &["data", "metadata"], &[], body())?),
        "writecache" => {
            SegKind::Writecache(composite(sec, &["writecache", "origin"], &[], body())?)
        }
        "integrity" => SegKind::Integrity(composite(sec, &["origin"], &["meta_dev"], body())?),
        "vdo" => SegKind::Vdo(composite(sec, &["vdo_pool"], &[], body())?),
        "vdo-pool" => SegKind::VdoPool(composite(sec, &["data"], &[], body())?),
        _ => {
            tracing::warn!(path = %sec.path, segtype = %full_type, "unrecognised segment type, kept verbatim");
            seg.type_flags.clear();
            SegKind::Unknown(Unknown {
                type_name: full_type.to_owned(),
                fields: body(),
            })
        }
    };
    Ok(seg)
}

/// A segment `type` split into its base type and `+FLAG` suffixes. lvm2 2.03.16: an unknown
/// flag makes the whole string an unknown segment type.
fn split_type(full_type: &str) -> (&str, Vec<String>) {
    let Some((base, rest)) = full_type.split_once('+') else {
        return (full_type, Vec::new());
    };
    if rest
        .split('+')
        .all(|f| super::flags::SEGTYPE_FLAGS.contains(&f))
    {
        (base, rest.split('+').map(str::to_owned).collect())
    } else {
        (full_type, Vec::new())
    }
}

fn composite(
    sec: &Section<'_, '_>,
    required: &[&'static str],
    optional: &[&'static str],
    fields: Tree<'static>,
) -> Result<Composite, ModelError> {
    let mut refs = Vec::new();
    for &f in required {
        refs.push(LvRef {
            field: f,
            lv: sec.req_str(f)?,
        });
    }
    for &f in optional {
        if let Some(lv) = sec.opt_str(f)? {
            refs.push(LvRef { field: f, lv });
        }
    }
    Ok(Composite { refs, fields })
}

fn read_thin_pool(sec: &Section<'_, '_>) -> Result<ThinPool, ModelError> {
    let chunk_size = sec.req_u32("chunk_size")?;
    if !(128..=2_097_152).contains(&chunk_size) || chunk_size % 128 != 0 {
        return Err(sec.err(
            "chunk_size",
            format!("{chunk_size} is not a multiple of 128 in 128..=2097152"),
        ));
    }
    let discards = sec.opt_str("discards")?;
    if let Some(d) = &discards {
        if !DISCARDS.contains(&d.as_str()) {
            return Err(sec.err("discards", format!("unknown value {d:?}")));
        }
    }
    let mut messages = Vec::new();
    for (_, msec) in sec.sections() {
        {
            messages.push(match (msec.opt_str("create")?, msec.opt_u32("delete")?) {
                (Some(lv), None) => ThinMessage::Create(lv),
                (None, Some(id)) => ThinMessage::Delete(id),
                _ => {
                    return Err(
                        msec.err("create", "a message needs exactly one of create and delete")
                    )
                }
            });
        }
    }
    Ok(ThinPool {
        metadata: sec.req_str("metadata")?,
        pool: sec.req_str("pool")?,
        transaction_id: sec.req_u64("transaction_id")?,
        chunk_size,
        discards,
        zero_new_blocks: sec.opt_int("zero_new_blocks")?.unwrap_or(0) != 0,
        crop_metadata: sec.opt_u32("crop_metadata")?,
        messages,
    })
}

fn read_areas<'t>(
    sec: &Section<'t, '_>,
    field: Field<'t>,
    count: u32,
    seg: &Segment,
    names: &Names<'_>,
) -> Result<Vec<Area>, ModelError> {
    let key = field.key;
    let items = match field.value {
        Some(Value::Array(span)) => sec.tree.items(*span),
        Some(_) => return Err(sec.err(key, "must be a list")),
        None => return Err(sec.err(key, "missing")),
    };
    if count == 0 || items.len() != 2 * count as usize {
        return Err(sec.err(key, format!("{} entries for {count} areas", items.len())));
    }
    if !seg.extent_count.is_multiple_of(count) && key == "stripes" {
        return Err(sec.err(
            "extent_count",
            format!("{} is not a multiple of {count} stripes", seg.extent_count),
        ));
    }
    let area_len = if key == "stripes" {
        seg.extent_count / count
    } else {
        seg.extent_count
    };
    let mut out = Vec::with_capacity(count as usize);
    for pair in items.chunks(2) {
        let (Some(name), Value::Int(pos)) = (sec.tree.value_str(&pair[0]), &pair[1]) else {
            return Err(sec.err(key, "entries must be \"name\", integer pairs"));
        };
        let pos = u32::try_from(*pos)
            .map_err(|_| sec.err(key, format!("position {pos} out of range")))?;
        let pv_index = names
            .pvs
            .binary_search_by(|(k, _)| (*k).cmp(name))
            .ok()
            .map(|i| names.pvs[i].1);
        if let Some(pv) = pv_index {
            if u64::from(pos) + u64::from(area_len) > u64::from(names.pe_counts[pv]) {
                return Err(sec.err(
                    key,
                    format!(
                        "segment with extent {} in PV {} not found",
                        u64::from(pos) + u64::from(area_len) - 1,
                        names.pv_ids[pv]
                    ),
                ));
            }
            out.push(Area::Pv { pv, pe: pos });
        } else {
            out.push(Area::Lv {
                lv: name.to_owned(),
                le: pos,
            });
        }
    }
    Ok(out)
}

/// Writes the segment as lvm2's exporter does.
pub(crate) fn write_segment(e: &mut Emitter, index: usize, seg: &Segment, pv_keys: &[String]) {
    e.open_numbered("segment", index);
    e.int("start_extent", i64::from(seg.start_extent));
    e.int("extent_count", i64::from(seg.extent_count));
    e.blank();
    if let Some(r) = seg.reshape_count {
        e.int("reshape_count", i64::from(r));
    }
    if let Some(d) = seg.data_copies {
        e.int("data_copies", i64::from(d));
    }
    if seg.type_flags.is_empty() {
        e.str("type", seg.kind.type_name());
    } else {
        let mut ty = seg.kind.type_name().to_owned();
        for f in &seg.type_flags {
            ty.push('+');
            ty.push_str(f);
        }
        e.str("type", &ty);
    }
    if !seg.tags.is_empty() {
        e.str_list("tags", &seg.tags);
    }
    match &seg.kind {
        SegKind::Striped(s) => {
            e.int("stripe_count", s.areas.len() as i64);
            if let Some(sz) = s.stripe_size.filter(|_| s.areas.len() > 1) {
                e.int("stripe_size", i64::from(sz));
            }
            e.blank();
            write_areas(e, "stripes", &s.areas, pv_keys);
        }
        SegKind::Mirror(m) => {
            e.int("mirror_count", m.areas.len() as i64);
            if let Some(x) = m.extents_moved {
                e.int("extents_moved", i64::from(x));
            }
            if let Some(l) = &m.mirror_log {
                e.str("mirror_log", l);
            }
            if let Some(r) = m.region_size {
                e.int("region_size", i64::from(r));
            }
            e.blank();
            write_areas(e, "mirrors", &m.areas, pv_keys);
        }
        SegKind::ThinPool(p) => {
            e.str("metadata", &p.metadata);
            e.str("pool", &p.pool);
            e.int("transaction_id", p.transaction_id as i64);
            e.int("chunk_size", i64::from(p.chunk_size));
            if let Some(d) = &p.discards {
                e.str("discards", d);
            }
            if p.zero_new_blocks {
                e.int("zero_new_blocks", 1);
            }
            if let Some(c) = p.crop_metadata {
                e.int("crop_metadata", i64::from(c));
            }
            for (i, m) in p.messages.iter().enumerate() {
                e.open_numbered("message", i + 1);
                match m {
                    ThinMessage::Create(lv) => e.str("create", lv),
                    ThinMessage::Delete(id) => e.int("delete", i64::from(*id)),
                }
                e.close();
            }
        }
        SegKind::Thin(t) => {
            e.str("thin_pool", &t.thin_pool);
            e.int("transaction_id", t.transaction_id as i64);
            if let Some(o) = &t.origin {
                e.str("origin", o);
            }
            if let Some(m) = &t.merge {
                e.str("merge", m);
            }
            if let Some(x) = &t.external_origin {
                e.str("external_origin", x);
            }
            e.int("device_id", i64::from(t.device_id));
        }
        SegKind::Snapshot(s) => {
            e.int("chunk_size", i64::from(s.chunk_size));
            e.str("origin", &s.origin);
            e.str(s.store_key(), &s.cow);
        }
        SegKind::Unknown(u) => e.nodes(&u.fields, u.fields.top()),
        k => {
            if let Some(body) = k.composite() {
                e.nodes(&body.fields, body.fields.top());
            }
        }
    }
    e.close();
}

fn write_areas(e: &mut Emitter, key: &str, areas: &[Area], pv_keys: &[String]) {
    e.line(&format!("{key} = ["));
    let n = areas.len();
    for (i, a) in areas.iter().enumerate() {
        let sep = if i + 1 < n { "," } else { "" };
        let line = match a {
            Area::Pv { pv, pe } => format!("\t{}, {pe}{sep}", crate::text::quote(&pv_keys[*pv])),
            Area::Lv { lv, le } => format!("\t{}, {le}{sep}", crate::text::quote(lv)),
        };
        if e.style() == crate::text::Style::File {
            e.line(&line);
        } else {
            e.line(line.trim_start_matches('\t'));
        }
    }
    e.line("]");
}
