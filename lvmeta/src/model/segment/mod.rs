//! LV segments: the common fields and one typed variant per segment type lvm2 2.03 knows,
//! plus [`SegKind::Unknown`], kept verbatim.
//!
//! Read from a `segmentN` section in `read.rs`, written back in `write.rs`.

use crate::text::Tree;

mod read;
mod write;

pub(crate) use read::{read_segment, Names};
pub(crate) use write::write_segment;

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

impl Composite {
    /// The LV named in `field` (the first, for lists).
    pub fn lv(&self, field: &str) -> Option<&str> {
        self.refs
            .iter()
            .find(|r| r.field == field)
            .map(|r| r.lv.as_str())
    }

    /// The integer value of a top-level field of the body.
    pub fn int(&self, key: &str) -> Option<i64> {
        let t = &self.fields;
        t.top()
            .iter()
            .find(|n| t.key(n) == key)
            .and_then(|n| match n.body {
                crate::text::Body::Value(crate::text::Value::Int(i)) => Some(i),
                _ => None,
            })
    }
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

    /// A raid segment's image LVs, in order: every second entry of `raids` (which pairs a
    /// metadata LV with each image), every entry of `raid0_lvs`; empty for other segments.
    pub fn raid_images(&self) -> impl Iterator<Item = &str> {
        self.raid_refs(|field, i| field == "raid0_lvs" || i % 2 == 1)
    }

    /// A raid segment's metadata LVs (the first of each `raids` pair), in order.
    pub fn raid_metas(&self) -> impl Iterator<Item = &str> {
        self.raid_refs(|field, i| field == "raids" && i % 2 == 0)
    }

    fn raid_refs(&self, pick: impl Fn(&str, usize) -> bool) -> impl Iterator<Item = &str> {
        let refs = match self {
            SegKind::Raid { body, .. } => &body.refs[..],
            _ => &[],
        };
        refs.iter()
            .enumerate()
            .filter(move |(i, r)| pick(r.field, *i))
            .map(|(_, r)| r.lv.as_str())
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
