//! The typed model of a VG (PVs, LVs, segments) and its conversion from and to config text.
//!
//! Import follows lvm2's `import_vsn1.c` in two passes (LV names first, then segments, whose
//! references to other LVs are then checked); export follows `export.c`, field by field, so
//! what lvmeta writes looks like what lvm2 writes.

pub mod extents;
mod flags;
pub mod index;
mod read;
mod reprint;
mod segment;
pub mod validate;
mod versions;
mod write;

use std::sync::Arc;

use crate::names;
use crate::text::{self, Emitter, Style, Tree};
use crate::units::{Bytes, ExtentSize, Extents, Sectors};
use crate::uuid::Uuid;

pub use flags::{word, Word, LV_STATUS, PV_STATUS, SEGTYPE_FLAGS, VG_STATUS, WRITE_LOCKED};
pub use segment::{
    Area, Composite, LvRef, Mirror, SegKind, Segment, Snapshot, Striped, Thin, ThinMessage,
    ThinPool, Unknown, DISCARDS,
};

use read::{fields, Lookup, Section};
pub use reprint::TextCache;
pub use write::lv_text_bytes;

/// Largest thin device id (2^24 - 1).
pub const MAX_THIN_DEVICE_ID: u32 = 0xFF_FFFF;

/// A VG's LVs by name (see [`Vg::by_name`]); the first of duplicate names wins, as
/// [`Vg::lv`] finds it.
pub struct LvIndex<'v>(std::collections::HashMap<&'v str, &'v Lv>);

impl<'v> LvIndex<'v> {
    /// The LV named `name`.
    pub fn get(&self, name: &str) -> Option<&'v Lv> {
        self.0.get(name).copied()
    }
}

/// A model error: which section, which field, what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {field}: {why}")]
pub struct ModelError {
    /// Section path, e.g. `vg0/logical_volumes/lv1/segment1`.
    pub path: String,
    /// The field.
    pub field: String,
    /// What is wrong.
    pub why: String,
}

/// The top-level fields that follow (raw) or precede (file) the VG section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Header {
    /// `description`.
    pub description: Option<String>,
    /// `creation_host`.
    pub creation_host: Option<String>,
    /// `creation_host_system_id`.
    pub creation_host_system_id: Option<String>,
    /// `creation_time` (seconds since the epoch).
    pub creation_time: Option<i64>,
}

/// A physical volume as the VG metadata describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pv {
    /// The PV's id.
    pub id: Uuid,
    /// Last known device path (a hint).
    pub device: Option<String>,
    /// devices-file identity type.
    pub device_id_type: Option<String>,
    /// devices-file identity.
    pub device_id: Option<String>,
    /// Status words.
    pub status: Vec<Word>,
    /// Compatible flags, unknown ones included.
    pub flags: Vec<Word>,
    /// Tags.
    pub tags: Vec<String>,
    /// Device size in sectors.
    pub dev_size: Option<u64>,
    /// Sector of PE 0.
    pub pe_start: u64,
    /// Number of PEs.
    pub pe_count: u32,
    /// Bootloader area start and size, in sectors.
    pub ba: Option<(u64, u64)>,
}

impl Pv {
    /// Where PE 0 starts on the device.
    pub fn data_start(&self) -> Bytes {
        Sectors(self.pe_start).bytes()
    }

    /// True when lvm2 marked the PV `MISSING` (it writes the word in `flags` and accepts it
    /// in `status`): its extents are neither read nor allocated.
    pub fn is_marked_missing(&self) -> bool {
        self.flags
            .iter()
            .chain(&self.status)
            .any(|w| w == "MISSING")
    }
}

/// A logical volume.
#[derive(Debug, Clone, PartialEq)]
pub struct Lv {
    /// Name.
    pub name: String,
    /// Id.
    pub id: Uuid,
    /// Status words (`WRITE` restored from `WRITE_LOCKED`).
    pub status: Vec<Word>,
    /// Compatible flags, unknown ones included.
    pub flags: Vec<Word>,
    /// Tags.
    pub tags: Vec<String>,
    /// Creation time and host.
    pub creation: Option<(u64, String)>,
    /// lvmlockd lock arguments.
    pub lock_args: Option<String>,
    /// Allocation policy.
    pub allocation_policy: Option<String>,
    /// Metadata profile.
    pub profile: Option<String>,
    /// Read-ahead in sectors (0 auto, -1 none).
    pub read_ahead: Option<i64>,
    /// Fixed major number.
    pub major: Option<i64>,
    /// Fixed minor number.
    pub minor: Option<i64>,
    /// Segments, sorted by start extent.
    pub segments: Vec<Segment>,
}

impl Lv {
    /// The pool of a thin LV (`None` for other LVs).
    pub fn thin_pool(&self) -> Option<&str> {
        self.segments.iter().find_map(|s| match &s.kind {
            SegKind::Thin(t) => Some(t.thin_pool.as_str()),
            _ => None,
        })
    }

    /// The thin-pool segment of a thin pool LV (`None` for other LVs).
    pub fn pool(&self) -> Option<&ThinPool> {
        match &self.segments.first()?.kind {
            SegKind::ThinPool(p) => Some(p),
            _ => None,
        }
    }

    /// True when `VISIBLE` is in the status.
    pub fn is_visible(&self) -> bool {
        self.status.iter().any(|s| s == "VISIBLE")
    }
    /// True when `WRITE` is in the status.
    pub fn is_writable(&self) -> bool {
        self.status.iter().any(|s| s == "WRITE")
    }
    /// Size in extents.
    pub fn extents(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| u64::from(s.extent_count))
            .sum()
    }
    /// True when the flag is among `flags`.
    pub fn has_flag(&self, f: &str) -> bool {
        self.flags.iter().any(|x| x == f)
    }
}

/// A volume group.
#[derive(Debug, Clone, PartialEq)]
pub struct Vg {
    /// Name.
    pub name: String,
    /// Id.
    pub id: Uuid,
    /// Metadata sequence number.
    pub seqno: u32,
    /// `format`, informational.
    pub format: Option<String>,
    /// Status words (`WRITE` restored from `WRITE_LOCKED`).
    pub status: Vec<Word>,
    /// Compatible flags, unknown ones included.
    pub flags: Vec<Word>,
    /// Tags.
    pub tags: Vec<String>,
    /// Owner's system id.
    pub system_id: Option<String>,
    /// `sanlock`, `dlm`, `idm` for shared VGs.
    pub lock_type: Option<String>,
    /// Lock manager data.
    pub lock_args: Option<String>,
    /// Extent size in sectors.
    pub extent_size: u32,
    /// 0 = unlimited.
    pub max_lv: u32,
    /// 0 = unlimited.
    pub max_pv: u32,
    /// Allocation policy.
    pub allocation_policy: Option<String>,
    /// Metadata profile.
    pub profile: Option<String>,
    /// `metadata_copies`.
    pub metadata_copies: Option<u32>,
    /// PVs in VG order.
    pub pvs: Vec<Pv>,
    /// LVs in text order; shared between versions of the VG (an edit copies only the LVs
    /// it changes, see [`Vg::lv_mut`]).
    pub lvs: Vec<Arc<Lv>>,
    /// `historical_logical_volumes`, kept verbatim.
    pub historical_lvs: Tree<'static>,
    /// The top-level fields of the text this VG was read from.
    pub header: Header,
}

/// Non-fatal findings while reading a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelWarning {
    /// A key appears twice in a section; the first one was used, as lvm2 does.
    DuplicateKey {
        /// Section path.
        path: String,
        /// The key.
        key: String,
    },
}

impl std::fmt::Display for ModelWarning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelWarning::DuplicateKey { path, key } => {
                write!(f, "{path}: duplicate key {key:?}; the first one is used")
            }
        }
    }
}

/// A VG read from text, with what was noticed on the way.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The VG.
    pub vg: Vg,
    /// Warnings.
    pub warnings: Vec<ModelWarning>,
}

impl Vg {
    /// Is this a shared (lvmlockd) VG?
    pub fn is_shared(&self) -> bool {
        matches!(self.lock_type.as_deref(), Some(t) if t != "none")
    }

    /// Does the text carry `WRITE` as `WRITE_LOCKED`?
    pub fn write_locked(&self) -> bool {
        self.is_shared() || self.system_id.as_deref().is_some_and(|s| !s.is_empty())
    }

    /// The extent size (a VG read or made passed the checks: it is not zero; a zero one is
    /// taken as one sector).
    pub fn extent(&self) -> ExtentSize {
        ExtentSize::new(Sectors(u64::from(self.extent_size))).unwrap_or(ExtentSize::SECTOR)
    }

    /// The extent size in bytes.
    pub fn extent_bytes(&self) -> u64 {
        self.extent().bytes().0
    }

    /// `extents` of this VG's extent size, in bytes.
    pub fn bytes_of(&self, extents: u64) -> Bytes {
        Extents(extents).bytes(self.extent())
    }

    /// Total PEs.
    pub fn extent_count(&self) -> u64 {
        self.pvs.iter().map(|p| u64::from(p.pe_count)).sum()
    }

    /// Allocated PEs on each PV.
    pub fn allocated_per_pv(&self) -> Vec<u64> {
        let mut out = vec![0u64; self.pvs.len()];
        for lv in &self.lvs {
            for seg in &lv.segments {
                let len = u64::from(seg.area_len());
                for a in seg.kind.areas() {
                    if let Area::Pv { pv, .. } = a {
                        out[*pv] += len;
                    }
                }
            }
        }
        out
    }

    /// Free PEs in the VG.
    pub fn free_count(&self) -> u64 {
        self.extent_count() - self.allocated_per_pv().iter().sum::<u64>()
    }

    /// The LV named `name` (looked for newest first: an edit finds the LVs it just added at
    /// once).
    pub fn lv(&self, name: &str) -> Option<&Lv> {
        self.lvs.iter().rev().find(|l| l.name == name).map(|l| &**l)
    }

    /// The LVs by name, for callers that look up many (built once: O(number of LVs)).
    pub fn by_name(&self) -> LvIndex<'_> {
        LvIndex(
            // The newest of one name wins, as in `Vg::lv`.
            self.lvs.iter().map(|l| (l.name.as_str(), &**l)).collect(),
        )
    }

    /// The LV named `name`, to change (copied first when another version shares it).
    pub fn lv_mut(&mut self, name: &str) -> Option<&mut Lv> {
        self.lvs
            .iter_mut()
            .rev()
            .find(|l| l.name == name)
            .map(Arc::make_mut)
    }

    /// Reads a VG from a parsed text (a metadata copy or a backup file).
    pub fn from_tree(tree: &Tree<'_>) -> Result<Imported, ModelError> {
        import(tree)
    }

    /// Parses and reads a VG from text.
    pub fn from_text(text: &str) -> Result<Imported, crate::Error> {
        let tree = text::parse(text).map_err(|e| crate::Error::Text {
            device: String::new(),
            offset: 0,
            source: e,
        })?;
        Ok(import(&tree)?)
    }

    /// The text of this VG: `Style::Raw` is what goes on disk (VG section first, then the
    /// header fields), `Style::File` is what a backup file holds.
    pub fn to_text(&self, style: Style, generator: &str) -> String {
        let cap = 1024 + self.lvs.len() * 512;
        write::export(self, Emitter::with_capacity(style, cap), generator)
    }

    /// Like [`Vg::to_text`], writing into `buf`'s allocation (for writers that commit often).
    pub fn write_text(&self, style: Style, generator: &str, buf: String) -> String {
        write::export(self, Emitter::reusing(style, buf), generator)
    }

    /// The text of [`Vg::to_text`] in [`Style::Raw`], printed into `cache` in place of the
    /// text it holds: the text of every LV still shared with that version is kept, not
    /// printed again (work proportional to the change, for writers of large VGs).
    pub fn write_text_cached<'c>(&self, generator: &str, cache: &'c mut TextCache) -> &'c str {
        cache.print(self, generator);
        cache.text()
    }
}

fn import(tree: &Tree<'_>) -> Result<Imported, ModelError> {
    let top = Section::root(tree, tree.top(), "");
    let mut warnings = Vec::new();
    let contents = top.opt_str("contents")?;
    if contents.as_deref() != Some("Text Format Volume Group") {
        return Err(top.err("contents", "missing or not \"Text Format Volume Group\""));
    }
    if top.opt_int("version")? != Some(1) {
        return Err(top.err("version", "missing or not 1"));
    }
    let (vg_node, sec) = top
        .sections()
        .next()
        .ok_or_else(|| top.err("", "no VG section"))?;
    let name = tree.key(vg_node).to_owned();
    names::check_vg_name(&name).map_err(|e| top.err(&name, e.to_string()))?;
    fields!(sec, &mut warnings, {
        id = "id",
        seqno = "seqno",
        format = "format",
        status = "status",
        vg_flags = "flags",
        tags = "tags",
        system_id = "system_id",
        lock_type = "lock_type",
        lock_args = "lock_args",
        extent_size = "extent_size",
        max_lv = "max_lv",
        max_pv = "max_pv",
        allocation_policy = "allocation_policy",
        profile = "profile",
        metadata_copies = "metadata_copies",
    });
    let id = parse_id(&sec, id)?;
    let mut status = sec.req_words(status)?;
    let mut vflags = sec.words(vg_flags)?;
    check_status(&sec, &status, &[flags::VG_STATUS])?;
    flags::unlock_write(&mut status, &mut vflags);
    let format = sec.opt_str(format)?;
    if let Some(f) = &format {
        if !["lvm2", "2", "text"].contains(&f.to_ascii_lowercase().as_str()) {
            return Err(sec.err("format", format!("unknown format {f:?}")));
        }
    }
    let extent_size = sec.req_u32(extent_size)?;
    if extent_size == 0 {
        return Err(sec.err("extent_size", "must not be 0"));
    }
    let mut vg = Vg {
        name,
        id,
        seqno: sec.req_u32(seqno)?,
        format,
        status,
        flags: vflags,
        tags: sec.str_list(tags)?,
        system_id: sec.opt_str(system_id)?,
        lock_type: sec.opt_str(lock_type)?,
        lock_args: sec.opt_str(lock_args)?,
        extent_size,
        max_lv: sec.req_u32(max_lv)?,
        max_pv: sec.req_u32(max_pv)?,
        allocation_policy: sec.opt_str(allocation_policy)?,
        profile: sec.opt_str(profile)?,
        metadata_copies: sec.opt_u32(metadata_copies)?,
        pvs: Vec::new(),
        lvs: Vec::new(),
        historical_lvs: Tree::default(),
        header: Header {
            description: top.opt_str("description")?,
            creation_host: top.opt_str("creation_host")?,
            creation_host_system_id: top.opt_str("creation_host_system_id")?,
            creation_time: top.opt_int("creation_time")?,
        },
    };
    let pv_sec = sec
        .sub("physical_volumes")
        .ok_or_else(|| sec.err("physical_volumes", "missing"))?;
    let mut pv_keys: Vec<(&str, usize)> = Vec::new();
    for (n, ps) in pv_sec.sections() {
        pv_keys.push((pv_sec.tree.key(n), vg.pvs.len()));
        vg.pvs.push(read_pv(&ps, &mut warnings)?);
    }
    // Sorted for binary search; a key used twice cannot be resolved.
    pv_keys.sort_unstable();
    if let Some(w) = pv_keys.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(pv_sec.err(w[0].0, "duplicate PV section"));
    }
    if let Some(lv_sec) = sec.sub("logical_volumes") {
        read_lvs(&lv_sec, &mut vg, &pv_keys, &mut warnings)?;
    }
    if let Some(h) = sec.sub("historical_logical_volumes") {
        vg.historical_lvs = tree.subtree(h.nodes);
    }
    validate::check_read(&vg)?;
    Ok(Imported { vg, warnings })
}

fn parse_id<'t>(sec: &Section<'t, '_>, id: impl Lookup<'t>) -> Result<Uuid, ModelError> {
    let s = sec.req_ref(id)?;
    Uuid::parse(s).map_err(|e| sec.err("id", e.to_string()))
}

fn check_status(
    sec: &Section<'_, '_>,
    status: &[Word],
    known: &[&[&str]],
) -> Result<(), ModelError> {
    match flags::unknown_status(status, known) {
        Some(w) => Err(sec.err("status", format!("unknown status flag {w:?}"))),
        None => Ok(()),
    }
}

fn read_pv(ps: &Section<'_, '_>, warnings: &mut Vec<ModelWarning>) -> Result<Pv, ModelError> {
    fields!(ps, warnings, {
        id = "id",
        device = "device",
        device_id_type = "device_id_type",
        device_id = "device_id",
        status = "status",
        pv_flags = "flags",
        tags = "tags",
        dev_size = "dev_size",
        pe_start = "pe_start",
        pe_count = "pe_count",
        ba_start = "ba_start",
        ba_size = "ba_size",
    });
    let status = ps.req_words(status)?;
    check_status(ps, &status, &[flags::PV_STATUS])?;
    let ba = match (ps.opt_u64(ba_start)?, ps.opt_u64(ba_size)?) {
        (Some(s), Some(z)) => Some((s, z)),
        (None, None) => None,
        _ => return Err(ps.err("ba_start", "ba_start and ba_size go together")),
    };
    Ok(Pv {
        id: parse_id(ps, id)?,
        device: ps.opt_str(device)?,
        device_id_type: ps.opt_str(device_id_type)?,
        device_id: ps.opt_str(device_id)?,
        status,
        flags: ps.words(pv_flags)?,
        tags: ps.str_list(tags)?,
        dev_size: ps.opt_u64(dev_size)?,
        pe_start: ps.req_u64(pe_start)?,
        pe_count: ps.req_u32(pe_count)?,
        ba,
    })
}

fn read_lvs(
    lv_sec: &Section<'_, '_>,
    vg: &mut Vg,
    pv_keys: &[(&str, usize)],
    warnings: &mut Vec<ModelWarning>,
) -> Result<(), ModelError> {
    let pe_counts: Vec<u32> = vg.pvs.iter().map(|p| p.pe_count).collect();
    let pv_ids: Vec<String> = vg.pvs.iter().map(|p| p.id.to_string()).collect();
    let names = segment::Names {
        pvs: pv_keys,
        pe_counts: &pe_counts,
        pv_ids: &pv_ids,
    };
    vg.lvs.reserve(lv_sec.nodes.len());
    for (n, ls) in lv_sec.sections() {
        fields!(ls, warnings, {
            id = "id",
            status = "status",
            lv_flags = "flags",
            tags = "tags",
            creation_time = "creation_time",
            creation_host = "creation_host",
            lock_args = "lock_args",
            allocation_policy = "allocation_policy",
            profile = "profile",
            read_ahead = "read_ahead",
            major = "major",
            minor = "minor",
            segment_count = "segment_count",
        });
        let mut status = ls.req_words(status)?;
        let mut lflags = ls.words(lv_flags)?;
        check_status(&ls, &status, &[flags::LV_STATUS, flags::SEGTYPE_FLAGS])?;
        flags::unlock_write(&mut status, &mut lflags);
        let creation = match (ls.opt_u64(creation_time)?, ls.opt_str(creation_host)?) {
            (Some(t), Some(h)) => Some((t, h)),
            (None, None) => None,
            (Some(_), None) => return Err(ls.err("creation_host", "missing with creation_time")),
            (None, Some(_)) => return Err(ls.err("creation_time", "missing with creation_host")),
        };
        let segment_count = ls.req_u32(segment_count)?;
        // Exact capacity: a Vec of large elements would otherwise start with room for four.
        let mut segments = Vec::with_capacity((segment_count as usize).min(ls.nodes.len()));
        for (_, seg_sec) in ls.sections() {
            segments.push(segment::read_segment(&seg_sec, &names, warnings)?);
        }
        if segments.len() != segment_count as usize {
            return Err(ls.err(
                "segment_count",
                "segment_count and actual number of segments disagree",
            ));
        }
        segments.sort_by_key(|s| s.start_extent);
        vg.lvs.push(Arc::new(Lv {
            name: lv_sec.tree.key(n).to_owned(),
            id: parse_id(&ls, id)?,
            status,
            flags: lflags,
            tags: ls.str_list(tags)?,
            creation,
            lock_args: ls.opt_str(lock_args)?,
            allocation_policy: ls.opt_str(allocation_policy)?,
            profile: ls.opt_str(profile)?,
            read_ahead: ls.opt_int(read_ahead)?,
            major: ls.opt_int(major)?,
            minor: ls.opt_int(minor)?,
            segments,
        }));
    }
    Ok(())
}
