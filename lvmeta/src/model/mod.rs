//! The typed model of a VG (PVs, LVs, segments) and its conversion from and to config text.
//!
//! Import follows lvm2's `import_vsn1.c` in two passes (LV names first, then segments, whose
//! references to other LVs are then checked); export follows `export.c`, field by field, so
//! what lvmeta writes looks like what lvm2 writes.

mod flags;
pub mod index;
mod read;
mod segment;
pub mod validate;

use std::sync::Arc;

use crate::names;
use crate::text::{self, Emitter, Style, Tree};
use crate::uuid::Uuid;

pub use flags::{word, Word, LV_STATUS, PV_STATUS, SEGTYPE_FLAGS, VG_STATUS, WRITE_LOCKED};
pub use segment::{
    Area, Composite, LvRef, Mirror, SegKind, Segment, Snapshot, Striped, Thin, ThinMessage,
    ThinPool, Unknown, DISCARDS,
};

use read::{fields, Lookup, Section};

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

    /// The extent size in bytes.
    pub fn extent_bytes(&self) -> u64 {
        u64::from(self.extent_size) * 512
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
        export(self, Emitter::with_capacity(style, cap), generator, None)
    }

    /// Like [`Vg::to_text`], writing into `buf`'s allocation (for writers that commit often).
    pub fn write_text(&self, style: Style, generator: &str, buf: String) -> String {
        export(self, Emitter::reusing(style, buf), generator, None)
    }

    /// The text of [`Vg::to_text`] in [`Style::Raw`], appended to `buf`, copying the text of
    /// every LV still shared with a version `cache` printed before instead of printing it
    /// again (work proportional to the change, for writers of large VGs).
    pub fn write_text_cached(&self, generator: &str, buf: String, cache: &mut TextCache) -> String {
        export(
            self,
            Emitter::appending(Style::Raw, buf),
            generator,
            Some(cache),
        )
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

fn export(vg: &Vg, mut e: Emitter, generator: &str, cache: Option<&mut TextCache>) -> String {
    let style = e.style();
    if style == Style::File {
        e.line(&format!("# Generated by {generator}"));
        e.blank();
        write_header(&mut e, vg);
        e.blank();
    }
    let locked = vg.write_locked();
    e.open(&vg.name);
    write_id(&mut e, &vg.id);
    e.int("seqno", i64::from(vg.seqno));
    if let Some(f) = &vg.format {
        e.str("format", f);
    }
    let (st, fl) = flags::lock_write(&vg.status, &vg.flags, locked);
    e.str_list("status", &st);
    e.str_list("flags", &fl);
    if !vg.tags.is_empty() {
        e.str_list("tags", &vg.tags);
    }
    if let Some(s) = &vg.system_id {
        e.str("system_id", s);
    }
    if let Some(t) = &vg.lock_type {
        e.str("lock_type", t);
        if let Some(a) = &vg.lock_args {
            e.str("lock_args", a);
        }
    }
    e.int("extent_size", i64::from(vg.extent_size));
    e.int("max_lv", i64::from(vg.max_lv));
    e.int("max_pv", i64::from(vg.max_pv));
    if let Some(a) = &vg.allocation_policy {
        e.blank();
        e.str("allocation_policy", a);
    }
    if let Some(p) = &vg.profile {
        e.str("profile", p);
    }
    e.int(
        "metadata_copies",
        i64::from(vg.metadata_copies.unwrap_or(0)),
    );
    e.blank();
    let pv_keys: Vec<String> = (0..vg.pvs.len()).map(|i| format!("pv{i}")).collect();
    e.open("physical_volumes");
    for (pv, key) in vg.pvs.iter().zip(&pv_keys) {
        e.blank();
        write_pv(&mut e, key, pv);
    }
    e.close();
    e.blank();
    if !vg.lvs.is_empty() {
        e.open("logical_volumes");
        // Visible LVs first, then hidden ones, each in model order (one pass over the status
        // lists).
        let (visible, hidden): (Vec<&Arc<Lv>>, Vec<&Arc<Lv>>) =
            vg.lvs.iter().partition(|l| l.is_visible());
        let order = visible.into_iter().chain(hidden);
        match cache {
            // Raw text only: a backup file's indentation is not cached.
            Some(c) if style == Style::Raw => {
                c.generation = c.generation.wrapping_add(1);
                for lv in order {
                    e.blank();
                    c.write(&mut e, lv, locked, &pv_keys);
                }
                let now = c.generation;
                c.entries.retain(|_, x| x.printed == now);
            }
            _ => {
                for lv in order {
                    e.blank();
                    write_lv(&mut e, lv, locked, &pv_keys);
                }
            }
        }
        e.close();
    }
    e.blank();
    if !vg.historical_lvs.top().is_empty() {
        e.open("historical_logical_volumes");
        e.nodes(&vg.historical_lvs, vg.historical_lvs.top());
        e.close();
    }
    e.close();
    if style == Style::Raw {
        e.line(&format!("# Generated by {generator}"));
        e.blank();
        write_header(&mut e, vg);
        e.blank();
    }
    e.finish()
}

/// The printed text of LVs, kept from one print of a VG to the next (see
/// [`Vg::write_text_cached`]).
///
/// Keyed by the LV's allocation: an edit that changes an LV copies it first
/// ([`Vg::lv_mut`]), so an LV at the same address is the same LV; each entry holds its LV, so
/// that address is never reused for another while the entry exists. Entries of LVs the last
/// print did not see are dropped.
#[derive(Default)]
pub struct TextCache {
    entries: std::collections::HashMap<usize, Printed>,
    generation: u64,
}

/// One LV's text.
struct Printed {
    /// Holds the address the entry is keyed by.
    _lv: Arc<Lv>,
    /// Whether it was printed for a write-locked VG (`WRITE` travels as a flag).
    locked: bool,
    text: Box<str>,
    /// The print that last used it.
    printed: u64,
}

impl TextCache {
    fn write(&mut self, e: &mut Emitter, lv: &Arc<Lv>, locked: bool, pv_keys: &[String]) {
        let key = Arc::as_ptr(lv) as usize;
        if let Some(p) = self.entries.get_mut(&key).filter(|p| p.locked == locked) {
            e.verbatim(&p.text);
            p.printed = self.generation;
            return;
        }
        let from = e.len();
        write_lv(e, lv, locked, pv_keys);
        let p = Printed {
            _lv: lv.clone(),
            locked,
            text: e.since(from).into(),
            printed: self.generation,
        };
        self.entries.insert(key, p);
    }
}

/// The bytes of `lv`'s text in [`Style::Raw`] (in a write-locked VG when `locked`), with the
/// empty line before it: what adding or removing it changes a VG's text by.
pub fn lv_text_bytes(lv: &Lv, locked: bool, pvs: usize) -> usize {
    let keys: Vec<String> = (0..pvs).map(|i| format!("pv{i}")).collect();
    let mut e = Emitter::with_capacity(Style::Raw, 1024);
    e.blank();
    write_lv(&mut e, lv, locked, &keys);
    e.len()
}

/// `id = "<dashed uuid>"`, without formatting machinery.
fn write_id(e: &mut Emitter, id: &Uuid) {
    let d = id.dashed();
    // Ids hold only the ASCII alphabet and dashes.
    e.str("id", std::str::from_utf8(&d).unwrap_or_default());
}

fn write_header(e: &mut Emitter, vg: &Vg) {
    e.str("contents", "Text Format Volume Group");
    e.int("version", 1);
    e.blank();
    e.str(
        "description",
        vg.header.description.as_deref().unwrap_or(""),
    );
    e.blank();
    if let Some(h) = &vg.header.creation_host {
        e.str("creation_host", h);
    }
    if let Some(s) = &vg.header.creation_host_system_id {
        e.str("creation_host_system_id", s);
    }
    if let Some(t) = vg.header.creation_time {
        e.int("creation_time", t);
    }
}

fn write_pv(e: &mut Emitter, key: &str, pv: &Pv) {
    e.open(key);
    write_id(e, &pv.id);
    e.str("device", pv.device.as_deref().unwrap_or(""));
    e.blank();
    if let (Some(t), Some(i)) = (&pv.device_id_type, &pv.device_id) {
        e.str("device_id_type", t);
        e.str("device_id", i);
    }
    e.str_list("status", &pv.status);
    e.str_list("flags", &pv.flags);
    if !pv.tags.is_empty() {
        e.str_list("tags", &pv.tags);
    }
    if let Some(d) = pv.dev_size {
        e.int("dev_size", d as i64);
    }
    e.int("pe_start", pv.pe_start as i64);
    e.int("pe_count", i64::from(pv.pe_count));
    if let Some((s, z)) = pv.ba {
        e.int("ba_start", s as i64);
        e.int("ba_size", z as i64);
    }
    e.close();
}

fn write_lv(e: &mut Emitter, lv: &Lv, locked: bool, pv_keys: &[String]) {
    e.open(&lv.name);
    write_id(e, &lv.id);
    if locked && lv.is_writable() {
        // WRITE travels as the WRITE_LOCKED flag (without building new lists per LV).
        e.str_iter(
            "status",
            lv.status.iter().map(|w| &**w).filter(|w| *w != "WRITE"),
        );
        e.str_iter(
            "flags",
            std::iter::once(flags::WRITE_LOCKED).chain(lv.flags.iter().map(|w| &**w)),
        );
    } else {
        e.str_list("status", &lv.status);
        e.str_list("flags", &lv.flags);
    }
    if !lv.tags.is_empty() {
        e.str_list("tags", &lv.tags);
    }
    if let Some((t, h)) = &lv.creation {
        e.int("creation_time", *t as i64);
        e.str("creation_host", h);
    }
    if let Some(a) = &lv.lock_args {
        e.str("lock_args", a);
    }
    if let Some(a) = &lv.allocation_policy {
        e.str("allocation_policy", a);
    }
    if let Some(p) = &lv.profile {
        e.str("profile", p);
    }
    if let Some(r) = lv.read_ahead {
        e.int("read_ahead", r);
    }
    if let Some(m) = lv.major {
        e.int("major", m);
    }
    if let Some(m) = lv.minor {
        e.int("minor", m);
    }
    e.int("segment_count", lv.segments.len() as i64);
    e.blank();
    for (i, seg) in lv.segments.iter().enumerate() {
        segment::write_segment(e, i + 1, seg, pv_keys);
    }
    e.close();
}
