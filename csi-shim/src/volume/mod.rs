//! Volumes as a container orchestrator sees them: named, sized in bytes, made of one LV
//! (`linear`) or of one thin LV in a thin pool of its own (`thin`, as KubeSAN does), each
//! change one commit.
//!
//! The volume's name is its LV's name; its pool is `<name>-pool`. The tag
//! `lvmeta.csi/mode=<mode>` marks the LVs this layer made, so that other LVs in the VG are
//! neither listed nor touched. Every call is idempotent where the orchestrator needs it:
//! creating a volume that exists with a compatible size returns it, deleting one that is gone
//! succeeds.

mod condition;
mod request;
mod tune;
mod wipe;

pub use condition::{condition, Condition};
pub use request::{Posted, Request, MAX_AGE as REQUEST_MAX_AGE, REQUEST_TAG};
pub use wipe::{is_wipe, WIPE_PREFIX, WIPE_TAG};

use lvmeta::activate::Backend;
pub use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, EditCtx, EditError, LvSpec, PoolSpec, Stamp, ThinSpec};
use lvmeta::model::{Lv, SegKind, Vg};
use lvmeta::session::{Session, VgView};

/// The tag prefix marking a volume's LV and telling its mode.
pub const MODE_TAG: &str = "lvmeta.csi/mode=";

/// The tag marking a snapshot LV and naming the volume it was taken of.
pub const SNAPSHOT_TAG: &str = "lvmeta.csi/snapshot-of=";

/// The tag a linear clone carries, naming its source, until its data are copied.
pub const CLONE_PENDING_TAG: &str = "lvmeta.csi/clone-pending-from=";

/// How a volume's blocks are provided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A linear LV: fully allocated, can be active on several hosts at once.
    Linear,
    /// A thin LV in a pool of its own: snapshots and clones, one host at a time.
    Thin,
}

impl Mode {
    /// The StorageClass spelling (`linear`, `thin`).
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Linear => "linear",
            Mode::Thin => "thin",
        }
    }

    /// Metadata text one more volume of this mode adds, with a margin for names of up to
    /// 63 characters, the wipe LV its deletion holds and the 1 KB a commit keeps free:
    /// measured, a thin volume (thin LV, pool, its data and metadata LVs) takes about 1.6 KB
    /// and a linear one about 0.35 KB.
    pub fn text_bytes(self) -> u64 {
        match self {
            Mode::Linear => 2048,
            Mode::Thin => 4096,
        }
    }

    /// Reads the StorageClass spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "linear" => Some(Mode::Linear),
            "thin" => Some(Mode::Thin),
            _ => None,
        }
    }
}

/// One volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    /// The VG.
    pub vg: String,
    /// The volume's (and its LV's) name.
    pub name: String,
    /// Linear or thin.
    pub mode: Mode,
    /// Size in bytes (a whole number of extents).
    pub bytes: u64,
}

impl Volume {
    /// The name of the thin pool of a thin volume.
    pub fn pool_name(name: &str) -> String {
        format!("{name}-pool")
    }
}

/// A snapshot of a thin volume: a thin snapshot LV in the volume's pool, named as the
/// orchestrator named it, tagged with its source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The VG.
    pub vg: String,
    /// The snapshot's (and its LV's) name.
    pub name: String,
    /// The volume it was taken of.
    pub source: String,
    /// Size in bytes (the source's size when taken).
    pub bytes: u64,
    /// When it was taken (seconds since the epoch).
    pub created: Option<u64>,
}

/// What a new volume starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content<'a> {
    /// Nothing (zeroes).
    Empty,
    /// The data of this snapshot.
    Snapshot(&'a str),
    /// The data of this volume, now.
    Volume(&'a str),
}

/// A size request: at least `required` bytes, at most `limit` (0: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SizeRange {
    /// Smallest acceptable size in bytes (0: the default size).
    pub required: u64,
    /// Largest acceptable size in bytes (0: no limit).
    pub limit: u64,
}

/// Size of a volume created without a size request: 1 GiB, as KubeSAN.
pub const DEFAULT_BYTES: u64 = 1 << 30;

impl SizeRange {
    /// The size to make, in extents of `extent_bytes`: `required` (or the default) rounded up
    /// to whole extents, refused when that passes the limit.
    pub fn extents(self, extent_bytes: u64) -> Result<u32, VolumeError> {
        if self.limit != 0 && self.required > self.limit {
            return Err(VolumeError::OutOfRange(format!(
                "required {} bytes is more than the limit of {} bytes",
                self.required, self.limit
            )));
        }
        let want = match self.required {
            0 if self.limit != 0 => self.limit.min(DEFAULT_BYTES),
            0 => DEFAULT_BYTES,
            r => r,
        };
        let extents = want.div_ceil(extent_bytes).max(1);
        if self.limit != 0 && extents * extent_bytes > self.limit {
            return Err(VolumeError::OutOfRange(format!(
                "{want} bytes rounded up to whole extents of {extent_bytes} bytes is more than the limit of {} bytes",
                self.limit
            )));
        }
        u32::try_from(extents)
            .map_err(|_| VolumeError::OutOfRange(format!("{want} bytes is too large")))
    }

    /// True when `bytes` satisfies this range.
    pub fn accepts(self, bytes: u64) -> bool {
        bytes >= self.required && (self.limit == 0 || bytes <= self.limit)
    }
}

/// Why a volume call failed, in the terms an orchestrator distinguishes.
#[derive(Debug, thiserror::Error)]
pub enum VolumeError {
    /// The request itself is malformed (a name lvm2 refuses, ...).
    #[error("{0}")]
    Invalid(String),
    /// A volume of that name exists and differs from the request.
    #[error("{0}")]
    Exists(String),
    /// No such volume.
    #[error("volume {0} not found")]
    NotFound(String),
    /// The snapshot or volume a new volume is to be made from does not exist (the message
    /// says which).
    #[error("{0}")]
    SourceNotFound(String),
    /// The size asked for cannot be given.
    #[error("{0}")]
    OutOfRange(String),
    /// The VG has too little free space.
    #[error("{0}")]
    NoSpace(String),
    /// The state of the volume forbids the change.
    #[error("{0}")]
    Refused(String),
    /// The change was asked of the node where the volume's pool is active, which has not
    /// made it (yet): retry.
    #[error("{0}")]
    Pending(String),
    /// Reading or writing the VG failed.
    #[error(transparent)]
    Lvmeta(lvmeta::Error),
}

impl From<lvmeta::Error> for VolumeError {
    fn from(e: lvmeta::Error) -> Self {
        match e {
            lvmeta::Error::Edit(e) => e.into(),
            e => VolumeError::Lvmeta(e),
        }
    }
}

impl From<EditError> for VolumeError {
    fn from(e: EditError) -> Self {
        match e {
            EditError::Alloc(a) => VolumeError::NoSpace(a.to_string()),
            EditError::Name(n) => VolumeError::Invalid(n.to_string()),
            EditError::Exists { .. } => VolumeError::Exists(e.to_string()),
            EditError::NoLv { lv, .. } => VolumeError::NotFound(lv),
            e @ (EditError::Option { .. } | EditError::Refused { .. }) => {
                VolumeError::Refused(e.to_string())
            }
            e @ EditError::Invalid(_) => VolumeError::Lvmeta(lvmeta::Error::Edit(e)),
        }
    }
}

/// The volumes of one VG, changed through a [`Session`].
pub struct Volumes<'s> {
    session: &'s Session,
    vg: String,
    /// Thin pools whose leases the caller holds (see [`Volumes::holding`]).
    holding: Vec<String>,
    /// Deletions hold the extents they free for erasure (see [`Volumes::without_erasure`]).
    erase: bool,
    /// This host's activations: a volume a device here maps is not deleted.
    host: Option<&'s dyn Backend>,
}

impl<'s> Volumes<'s> {
    /// The volumes of `vg`.
    pub fn new(session: &'s Session, vg: &str) -> Self {
        Self {
            session,
            vg: vg.to_owned(),
            holding: Vec::new(),
            erase: true,
            host: None,
        }
    }

    /// The same volumes, whose deletions free extents at once instead of holding them in a
    /// wipe LV until erased (a deliberate choice of the driver's operator: the next volume
    /// there may read the deleted one's data).
    pub fn without_erasure(mut self) -> Self {
        self.erase = false;
        self
    }

    /// The same volumes, refusing to delete one that a device of `host` (this host's
    /// activations) maps: with no lease to tell, that is how a local VG knows a volume is
    /// in use here.
    pub fn on_host(mut self, host: &'s dyn Backend) -> Self {
        self.host = Some(host);
        self
    }

    /// Refuses when a device of this host maps `name` (or, for a thin LV, its pool).
    fn check_unmapped(&self, name: &str) -> Result<(), VolumeError> {
        match self.host {
            Some(h) => Ok(self.session.check_unmapped_lv(&self.vg, name, h)?),
            None => Ok(()),
        }
    }

    /// `removal` of `name`, then (unless erasure is off) the extents it freed held in a wipe
    /// LV, in one edit.
    fn remove_holding(
        &self,
        vg: Vg,
        ctx: &EditCtx,
        name: &str,
        removal: impl FnOnce(Vg) -> Result<Vg, EditError>,
    ) -> Result<Vg, EditError> {
        if !self.erase {
            return removal(vg);
        }
        let before = ctx.used(&vg);
        // Slots freed by this change are marked unused after its commit: not reused in it.
        let leases = match vg.is_shared() {
            true => edit::slots::leases_in_use(&vg),
            false => Vec::new(),
        };
        let vg = removal(vg)?;
        wipe::hold_freed(vg, ctx, &before, &leases, name, Stamp::now())
    }

    /// The same volumes, changed by the holder of the leases of thin pools `pools` (the node
    /// where they are active, serving a [`Request`]): changes to them need no lease of
    /// their own.
    pub fn holding(mut self, pools: Vec<String>) -> Self {
        self.holding = pools;
        self
    }

    /// One commit of `edit` (see [`Session::update`]), as the holder of `self.holding`.
    fn update<R: lvmeta::session::Edited>(
        &self,
        verb: &str,
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, lvmeta::Error> {
        self.update_clearing(verb, &[], edit)
    }

    /// [`Volumes::update`] that also clears the ends of the new LVs named in `clear` (see
    /// [`Session::update_clearing`]).
    fn update_clearing<R: lvmeta::session::Edited>(
        &self,
        verb: &str,
        clear: &[&str],
        edit: impl FnOnce(Vg, &EditCtx) -> Result<R, EditError>,
    ) -> Result<R::Value, lvmeta::Error> {
        let pools: Vec<&str> = self.holding.iter().map(String::as_str).collect();
        self.session
            .update_clearing(&self.vg, verb, &pools, clear, edit)
    }

    /// The VG as last read or written (a copy that shares its LVs).
    pub fn vg(&self) -> Result<Vg, VolumeError> {
        Ok(self.session.vg(&self.vg)?)
    }

    /// The VG as last read or written, shared with other readers: no copy.
    pub fn view(&self) -> Result<VgView, VolumeError> {
        Ok(self.session.view(&self.vg)?)
    }

    /// Every volume, by name.
    pub fn list(&self) -> Result<Vec<Volume>, VolumeError> {
        Ok(volumes_in(self.view()?.vg()))
    }

    /// Every volume as the VG was last found, reading no device (for fencing, which must
    /// work when the LUN no longer answers).
    pub fn list_seen(&self) -> Result<Vec<Volume>, VolumeError> {
        Ok(volumes_in(&self.session.seen_vg(&self.vg)?))
    }

    /// The volume `name`, if it exists.
    pub fn get(&self, name: &str) -> Result<Option<Volume>, VolumeError> {
        Ok(volume_of(self.view()?.vg(), name))
    }

    /// Bytes a new volume can take at most (the VG's free extents).
    pub fn free_bytes(&self) -> Result<u64, VolumeError> {
        let vg = self.view()?;
        Ok(vg.free_count() * vg.extent_bytes())
    }

    /// Bytes a new volume of `mode` can take at most: the VG's free extents less what
    /// `lvmlock` would grow by for its lease, or 0 when its metadata areas cannot take the
    /// text of one more such volume (see [`Mode::text_bytes`]).
    pub fn room(&self, mode: Mode) -> Result<u64, VolumeError> {
        let vg = self.view()?;
        if !vg.metadata().fits(mode.text_bytes()) {
            return Ok(0);
        }
        let lease = edit::slots::lease_growth(vg.vg(), edit::slots::LEASE_ALIGN);
        let free = vg.free_count().saturating_sub(u64::from(lease));
        Ok(free * vg.extent_bytes())
    }

    /// Creates `name`, or returns it when it exists in this mode with a size in `size`.
    pub fn create(&self, name: &str, mode: Mode, size: SizeRange) -> Result<Volume, VolumeError> {
        self.create_from(name, mode, size, Content::Empty, &PoolOptions::default())
    }

    /// Creates `name` holding `content`: a snapshot's or a thin volume's data become a thin
    /// snapshot of it in the same pool (which grows by the new volume's size, so that the
    /// pool is never overcommitted); a linear volume's data are copied into a new linear
    /// volume (a data copy under both LV leases, see `clone_linear`). A new thin volume's
    /// pool gets `options` (lvm2's defaults, zeroing and `passdown`, for what they leave
    /// out); a copy shares its source's pool, so its `options` must be the pool's. Returns
    /// the volume when it exists already.
    pub fn create_from(
        &self,
        name: &str,
        mode: Mode,
        size: SizeRange,
        content: Content<'_>,
        options: &PoolOptions,
    ) -> Result<Volume, VolumeError> {
        if mode == Mode::Linear && matches!(content, Content::Snapshot(_)) {
            return Err(VolumeError::Invalid(
                "volumes from a snapshot must be thin (mode thin): a snapshot is a thin LV in its volume's pool".into(),
            ));
        }
        if mode == Mode::Linear && !options.is_empty() {
            return Err(VolumeError::Invalid(
                "zeroing and discards are settings of a thin volume's pool; a linear volume has none".into(),
            ));
        }
        if let Content::Snapshot(src) | Content::Volume(src) = content {
            let vg = self.view()?;
            check_source(&vg, content, mode)?;
            check_shared_pool(&vg, src, options)?;
            let src_bytes = vg.lv(src).map_or(0, |l| l.extents()) * vg.extent_bytes();
            let asked = match size.required {
                0 => src_bytes,
                _ => u64::from(size.extents(vg.extent_bytes())?) * vg.extent_bytes(),
            };
            if asked < src_bytes || (size.limit != 0 && src_bytes > size.limit) {
                return Err(VolumeError::OutOfRange(format!(
                    "the source {src} has {src_bytes} bytes, more than the size asked for"
                )));
            }
        }
        lvmeta::names::check_new_lv_name(&self.vg, name)
            .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        if mode == Mode::Thin {
            lvmeta::names::check_new_lv_name(&self.vg, &Volume::pool_name(name))
                .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        }
        let vg = self.view()?;
        if let (Mode::Linear, Content::Volume(src)) = (mode, content) {
            return self.clone_linear(&vg, name, src, size);
        }
        if let Some(v) = existing(&vg, &EditCtx::standalone(), name, mode, size)? {
            return Ok(v);
        }
        let extents = size.extents(vg.extent_bytes())?;
        let tags = vec![format!("{MODE_TAG}{}", mode.as_str())];
        let stamp = Stamp::now();
        // A new linear volume starts with its first and last MiB zeroed.
        let clear: &[&str] = match (mode, content) {
            (Mode::Linear, Content::Empty) => &[name],
            _ => &[],
        };
        self.update_clearing("lvcreate", clear, |vg, ctx| {
            // Another writer may have made it since the check above (the lease is held now).
            if let Some(v) = existing(&vg, ctx, name, mode, size)? {
                return Ok((vg, v));
            }
            let vg = match (mode, content) {
                (_, Content::Snapshot(src) | Content::Volume(src)) => {
                    let source_ok = match content {
                        Content::Snapshot(_) => snapshot_of(&vg, src).is_some(),
                        _ => volume_of(&vg, src).is_some_and(|v| v.mode == Mode::Thin),
                    };
                    if !source_ok {
                        return Err(EditError::NoLv {
                            vg: vg.name.clone(),
                            lv: src.to_owned(),
                        });
                    }
                    thin_copy(vg, ctx, name, src, size, tags, stamp)?
                }
                (Mode::Linear, Content::Empty) => {
                    let mut spec = LvSpec::linear(name, extents, stamp);
                    spec.tags = tags;
                    edit::lv::create(vg, ctx, &spec)?.0
                }
                (Mode::Thin, Content::Empty) => {
                    let pool = PoolSpec {
                        data: LvSpec::linear(&Volume::pool_name(name), extents, stamp.clone()),
                        chunk_size: None,
                        metadata_extents: None,
                        discards: options
                            .discards
                            .clone()
                            .unwrap_or_else(|| "passdown".into()),
                        zero: options.zero.unwrap_or(true),
                    };
                    let (vg, pool_name) = edit::thin::create_pool(vg, ctx, &pool)?;
                    let thin = ThinSpec {
                        name: Some(name.to_owned()),
                        pool: pool_name,
                        extents,
                        origin: None,
                        tags,
                        activation_skip: Some(false),
                        stamp,
                    };
                    edit::thin::create_thin(vg, ctx, &thin)?.0
                }
            };
            let v = volume_of(&vg, name).ok_or_else(|| {
                edit::refused(name, "the new LV is not a volume (internal error)")
            })?;
            Ok((vg, v))
        })
        .map_err(VolumeError::from)
    }

    /// A linear clone: the new linear volume `name` is made tagged [`CLONE_PENDING_TAG`],
    /// the bytes of the linear volume `src` are copied into it through the session's
    /// devices ([`lvmeta::session::Session::copy_lv`], under both LV leases), and the tag is
    /// removed. A copy that fails removes the new volume again; a request that finds the
    /// volume still pending (an earlier attempt was cut short by a crash) copies again; one
    /// whose pending clone has another source is refused.
    fn clone_linear(
        &self,
        vg: &Vg,
        name: &str,
        src: &str,
        size: SizeRange,
    ) -> Result<Volume, VolumeError> {
        let pending = format!("{CLONE_PENDING_TAG}{src}");
        if let Some(v) = existing(vg, &EditCtx::standalone(), name, Mode::Linear, size)? {
            match clone_source(vg, name) {
                None => return Ok(v),
                Some(other) if other != src => {
                    return Err(VolumeError::Exists(format!(
                        "volume {name} is a pending clone of {other}, not of {src}"
                    )))
                }
                // Cut short earlier: copy again.
                Some(_) => {}
            }
        }
        let src_bytes = vg.lv(src).map_or(0, |l| l.extents()) * vg.extent_bytes();
        let want = SizeRange {
            required: size.required.max(src_bytes),
            limit: size.limit,
        };
        let extents = want.extents(vg.extent_bytes())?;
        let stamp = Stamp::now();
        let (v, copy) = self
            .update_clearing("lvcreate", &[name], |vg, ctx| {
                if let Some(v) = existing(&vg, ctx, name, Mode::Linear, want)? {
                    // Another request finished it meanwhile, or it is still to be copied.
                    let copy = clone_source(&vg, name) == Some(src);
                    return Ok((vg, (v, copy)));
                }
                let mut spec = LvSpec::linear(name, extents, stamp);
                spec.tags = vec![format!("{MODE_TAG}linear"), pending.clone()];
                let vg = edit::lv::create(vg, ctx, &spec)?.0;
                let v = volume_of(&vg, name).ok_or_else(|| {
                    edit::refused(name, "the new LV is not a volume (internal error)")
                })?;
                Ok((vg, (v, true)))
            })
            .map_err(VolumeError::from)?;
        if !copy {
            return Ok(v);
        }
        if let Err(e) = self.session.copy_lv(&self.vg, src, name) {
            // Nothing was handed out yet: take the half-made clone back (a crash instead
            // leaves it tagged, and the next request copies again).
            if let Err(d) = self.delete(name) {
                tracing::warn!(vg = %self.vg, name, error = %d, "removing a clone whose copy failed");
            }
            return Err(match e {
                lvmeta::Error::Lease(lvmeta::lease::LeaseError::Busy { .. }) => {
                    VolumeError::Refused(format!(
                        "the source volume {}/{src} is in use for writing on a node (or {name} is in use): a linear clone copies the source's data and needs it unstaged or staged read-only",
                        self.vg
                    ))
                }
                e => e.into(),
            });
        }
        let done = edit::lv::LvChange {
            del_tags: vec![pending.clone()],
            ..Default::default()
        };
        self.update("lvchange", |vg, ctx| {
            if clone_source(&vg, name) == Some(src) {
                edit::lv::change(vg, ctx, name, &done)
            } else {
                Ok(vg)
            }
        })
        .map_err(VolumeError::from)?;
        tracing::info!(vg = %self.vg, name, src, "linear clone made");
        Ok(v)
    }

    /// Every snapshot, by name.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>, VolumeError> {
        let vg = self.view()?;
        let index = vg.by_name();
        let mut out: Vec<Snapshot> = vg
            .lvs
            .iter()
            .filter_map(|l| snapshot_in(&vg, l, |n| index.get(n)))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The snapshot `name`, if it exists.
    pub fn get_snapshot(&self, name: &str) -> Result<Option<Snapshot>, VolumeError> {
        Ok(snapshot_of(self.view()?.vg(), name))
    }

    /// Takes snapshot `name` of thin volume `source` (a thin snapshot in its pool, which grows
    /// by the source's size); returns it when it exists already of the same source.
    pub fn snapshot(&self, name: &str, source: &str) -> Result<Snapshot, VolumeError> {
        lvmeta::names::check_new_lv_name(&self.vg, name)
            .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        let stamp = Stamp::now();
        self.update("lvcreate", |vg, ctx| {
            if let Some(s) = snapshot_of(&vg, name) {
                if s.source == source {
                    return Ok((vg, s));
                }
                return Err(EditError::Exists {
                    what: "Snapshot (of another volume)",
                    name: format!("{name} (of {})", s.source),
                    vg: vg.name.clone(),
                });
            }
            if vg.lv(name).is_some() {
                return Err(EditError::Exists {
                    what: "Logical Volume (not a snapshot)",
                    name: name.to_owned(),
                    vg: vg.name.clone(),
                });
            }
            let v = volume_of(&vg, source).ok_or_else(|| EditError::NoLv {
                vg: vg.name.clone(),
                lv: source.to_owned(),
            })?;
            if v.mode != Mode::Thin {
                return Err(edit::refused(
                    source,
                    "snapshots are taken of thin volumes only (mode thin)",
                ));
            }
            let more = vg.lv(source).map_or(0, |l| l.extents());
            let snap = ThinSpec {
                tags: vec![format!("{SNAPSHOT_TAG}{source}")],
                activation_skip: Some(true),
                ..snapshot_spec(&vg, name, source, stamp)?
            };
            let vg = snapshot_in_pool(vg, ctx, more, &snap)?;
            let s = snapshot_of(&vg, name).ok_or_else(|| {
                edit::refused(name, "the new LV is not a snapshot (internal error)")
            })?;
            Ok((vg, s))
        })
        .map_err(VolumeError::from)
    }

    /// Removes snapshot `name` (and its pool when nothing else is left in it, its extents
    /// held for erasure). Returns false when there was no such snapshot.
    pub fn delete_snapshot(&self, name: &str) -> Result<bool, VolumeError> {
        if snapshot_of(self.view()?.vg(), name).is_none() {
            return Ok(false);
        }
        self.check_unmapped(name)?;
        self.update("lvremove", |vg, ctx| match snapshot_of(&vg, name) {
            None => Ok((vg, false)),
            Some(_) => Ok((
                self.remove_holding(vg, ctx, name, |vg| remove_thin(vg, ctx, name))?,
                true,
            )),
        })
        .map_err(VolumeError::from)
    }

    /// Removes `name` (a thin volume with its pool when nothing else is left in it): the
    /// volume is gone at once, and the extents it frees are held in a wipe LV until erased
    /// (see [`Volumes::wipe`]). Returns false when there was no such volume. Refused while the volume
    /// is in use: its lease held by a host (shared VG), or a device of this host mapping it
    /// ([`Volumes::on_host`]).
    pub fn delete(&self, name: &str) -> Result<bool, VolumeError> {
        let vg = self.view()?;
        if volume_of(&vg, name).is_none() {
            return Ok(false);
        }
        self.check_unmapped(name)?;
        self.update("lvremove", |vg, ctx| match volume_of(&vg, name) {
            None => Ok((vg, false)),
            Some(v) => {
                let vg = self.remove_holding(vg, ctx, name, |vg| match v.mode {
                    Mode::Linear => edit::lv::remove(vg, ctx, name, false),
                    Mode::Thin => remove_thin(vg, ctx, name),
                })?;
                Ok((vg, true))
            }
        })
        .map_err(VolumeError::from)
    }

    /// Grows `name` to at least `size.required` bytes (a thin volume's pool grows with it).
    /// A volume already that large is returned unchanged; shrinking is refused.
    pub fn expand(&self, name: &str, size: SizeRange) -> Result<Volume, VolumeError> {
        let vg = self.view()?;
        let v = volume_of(&vg, name).ok_or_else(|| VolumeError::NotFound(name.to_owned()))?;
        let extents = size.extents(vg.extent_bytes())?;
        if u64::from(extents) * vg.extent_bytes() <= v.bytes {
            return Ok(v);
        }
        self.update("lvextend", |vg, ctx| {
            let v = volume_of(&vg, name).ok_or_else(|| EditError::NoLv {
                vg: vg.name.clone(),
                lv: name.to_owned(),
            })?;
            if u64::from(extents) * vg.extent_bytes() <= v.bytes {
                return Ok((vg, v));
            }
            let vg = match v.mode {
                Mode::Linear => edit::lv::resize(vg, ctx, name, extents, None, false)?,
                Mode::Thin => {
                    let pool = pool_of(&vg, name).unwrap_or_default();
                    let more =
                        u64::from(extents).saturating_sub(vg.lv(name).map_or(0, |l| l.extents()));
                    let vg = grow_by(vg, ctx, &pool, more)?;
                    edit::lv::resize(vg, ctx, name, extents, None, false)?
                }
            };
            let v = volume_of(&vg, name).ok_or_else(|| {
                edit::refused(name, "the resized LV is not a volume (internal error)")
            })?;
            Ok((vg, v))
        })
        .map_err(VolumeError::from)
    }
}

/// Grows the pool `pool` by `more` extents.
fn grow_by(vg: Vg, ctx: &EditCtx, pool: &str, more: u64) -> Result<Vg, EditError> {
    if more == 0 {
        return Ok(vg);
    }
    let current = vg.lv(pool).map_or(0, |l| l.extents());
    let to = u32::try_from(current + more)
        .map_err(|_| edit::refused(pool, "the pool would be too large"))?;
    edit::lv::resize(vg, ctx, pool, to, None, false)
}

/// The pool of thin LV `lv`.
fn pool_of(vg: &Vg, lv: &str) -> Option<String> {
    vg.lv(lv)?.thin_pool().map(str::to_owned)
}

/// Removes thin LV `name`, and its pool once no thin LV is left in it.
fn remove_thin(vg: Vg, ctx: &EditCtx, name: &str) -> Result<Vg, EditError> {
    let pool = pool_of(&vg, name);
    let vg = edit::lv::remove(vg, ctx, name, false)?;
    match pool {
        Some(p) if !vg.lvs.iter().any(|l| l.thin_pool() == Some(p.as_str())) => {
            edit::lv::remove(vg, ctx, &p, false)
        }
        _ => Ok(vg),
    }
}

/// A new thin volume `name` holding thin LV `src`'s data: a thin snapshot of it in its pool,
/// at least `size` (and at least `src`'s size), with the pool grown by that much.
/// The source of a new volume must be a snapshot or a thin volume of this VG.
fn check_source(vg: &Vg, content: Content<'_>, mode: Mode) -> Result<(), VolumeError> {
    let missing = |kind: &str, n: &str| {
        VolumeError::SourceNotFound(format!("{kind} {}/{n} not found", vg.name))
    };
    match content {
        Content::Empty => Ok(()),
        Content::Snapshot(n) => snapshot_of(vg, n)
            .map(drop)
            .ok_or_else(|| missing("snapshot", n)),
        Content::Volume(n) => match volume_of(vg, n) {
            None => Err(missing("volume", n)),
            Some(v) if v.mode != mode => Err(VolumeError::Invalid(format!(
                "the source volume {}/{n} is {}: a clone has its source's mode, not {}",
                vg.name,
                v.mode.as_str(),
                mode.as_str()
            ))),
            Some(_) if clone_source(vg, n).is_some() => Err(VolumeError::Invalid(format!(
                "the source volume {}/{n} is itself a clone whose data are not copied yet",
                vg.name
            ))),
            Some(_) => Ok(()),
        },
    }
}

/// A copy of thin LV `src` goes into its pool: refused when `options` asks for settings
/// that pool does not have.
fn check_shared_pool(vg: &Vg, src: &str, options: &PoolOptions) -> Result<(), VolumeError> {
    let pool = pool_of(vg, src);
    match pool.as_deref().and_then(|p| vg.lv(p)?.pool()) {
        Some(p) if !options.met_by(p) => {
            let now = PoolOptions::of(p);
            Err(VolumeError::Invalid(format!(
                "a copy of {}/{src} shares its pool, whose settings are zero={} discards={}; \
                 change them on the source volume, or ask for the same",
                vg.name,
                now.zero.unwrap_or_default(),
                now.discards.unwrap_or_default()
            )))
        }
        _ => Ok(()),
    }
}

fn thin_copy(
    vg: Vg,
    ctx: &EditCtx,
    name: &str,
    src: &str,
    size: SizeRange,
    tags: Vec<String>,
    stamp: Stamp,
) -> Result<Vg, EditError> {
    let src_extents = vg.lv(src).map_or(0, |l| l.extents());
    let ext = vg.extent_bytes();
    let want = if size.required == 0 {
        src_extents
    } else {
        u64::from(
            size.extents(ext)
                .map_err(|e| edit::refused(name, e.to_string()))?,
        )
    };
    if want < src_extents || (size.limit != 0 && src_extents * ext > size.limit) {
        return Err(edit::refused(
            name,
            format!(
                "the source {src} has {} bytes, more than the size asked for",
                src_extents * ext
            ),
        ));
    }
    let copy = ThinSpec {
        tags,
        activation_skip: Some(false),
        ..snapshot_spec(&vg, name, src, stamp)?
    };
    let vg = snapshot_in_pool(vg, ctx, want, &copy)?;
    if want > src_extents {
        let to = u32::try_from(want).map_err(|_| edit::refused(name, "too large"))?;
        return edit::lv::resize(vg, ctx, name, to, None, false);
    }
    Ok(vg)
}

/// A thin snapshot `name` of thin LV `src` of `vg`, in `src`'s pool (no tags).
fn snapshot_spec(vg: &Vg, name: &str, src: &str, stamp: Stamp) -> Result<ThinSpec, EditError> {
    Ok(ThinSpec {
        name: Some(name.to_owned()),
        pool: pool_of(vg, src).ok_or_else(|| edit::refused(src, "is not a thin LV"))?,
        extents: 0,
        origin: Some(src.to_owned()),
        tags: Vec::new(),
        activation_skip: None,
        stamp,
    })
}

/// The thin LV `thin` makes, its pool first grown by `grow` extents (what the new LV may
/// come to use: the pool is never overcommitted).
fn snapshot_in_pool(vg: Vg, ctx: &EditCtx, grow: u64, thin: &ThinSpec) -> Result<Vg, EditError> {
    let vg = grow_by(vg, ctx, &thin.pool, grow)?;
    Ok(edit::thin::create_thin(vg, ctx, thin)?.0)
}

/// The snapshot `name` of `vg`: a thin LV carrying the snapshot tag.
fn snapshot_of(vg: &Vg, name: &str) -> Option<Snapshot> {
    snapshot_in(vg, vg.lv(name)?, |n| vg.lv(n))
}

/// LV `lv` of `vg` as a snapshot, if it is one; `find` looks up other LVs of `vg` by name.
fn snapshot_in<'a>(vg: &Vg, lv: &Lv, find: impl Fn(&str) -> Option<&'a Lv>) -> Option<Snapshot> {
    let source = lv
        .tags
        .iter()
        .find_map(|t| t.strip_prefix(SNAPSHOT_TAG))?
        .to_owned();
    find(lv.thin_pool()?)?;
    Some(Snapshot {
        vg: vg.name.clone(),
        name: lv.name.clone(),
        source,
        bytes: lv.extents() * vg.extent_bytes(),
        created: lv.creation.as_ref().map(|c| c.0),
    })
}

/// The volumes of `vg`, by name (one index of the LVs, then one pass).
fn volumes_in(vg: &Vg) -> Vec<Volume> {
    let index = vg.by_name();
    let mut out: Vec<Volume> = vg
        .lvs
        .iter()
        .filter_map(|l| volume_in(vg, l, |n| index.get(n)))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The volume `name` of `vg`: an LV carrying the mode tag (a thin one in its own pool).
fn volume_of(vg: &Vg, name: &str) -> Option<Volume> {
    volume_in(vg, vg.lv(name)?, |n| vg.lv(n))
}

/// LV `lv` of `vg` as a volume, if it is one; `find` looks up other LVs of `vg` by name.
fn volume_in<'a>(vg: &Vg, lv: &Lv, find: impl Fn(&str) -> Option<&'a Lv>) -> Option<Volume> {
    let mode = lv
        .tags
        .iter()
        .find_map(|t| Mode::parse(t.strip_prefix(MODE_TAG)?))?;
    let shape_ok = match (mode, &lv.segments.first()?.kind) {
        (Mode::Linear, SegKind::Striped(_)) => true,
        (Mode::Thin, SegKind::Thin(t)) => find(&t.thin_pool).is_some(),
        _ => false,
    };
    shape_ok.then(|| Volume {
        vg: vg.name.clone(),
        name: lv.name.clone(),
        mode,
        bytes: lv.extents() * vg.extent_bytes(),
    })
}

/// The source named by the pending-clone tag of LV `name`, if it has one.
fn clone_source<'a>(vg: &'a Vg, name: &str) -> Option<&'a str> {
    clone_source_of(vg.lv(name)?)
}

/// The source named by the pending-clone tag of `lv`, if it has one.
fn clone_source_of(lv: &Lv) -> Option<&str> {
    lv.tags
        .iter()
        .find_map(|t| t.strip_prefix(CLONE_PENDING_TAG))
}

/// The volume `name` when it exists and matches the request; an error when something else
/// holds the name.
fn existing(
    vg: &Vg,
    ctx: &EditCtx,
    name: &str,
    mode: Mode,
    size: SizeRange,
) -> Result<Option<Volume>, EditError> {
    if ctx.lacks_lv(vg, name) {
        return Ok(None);
    }
    match volume_of(vg, name) {
        Some(v) if v.mode == mode && size.accepts(v.bytes) => Ok(Some(v)),
        Some(v) => Err(EditError::Exists {
            what: "Volume (of another mode or size)",
            name: format!("{name} ({}, {} bytes)", v.mode.as_str(), v.bytes),
            vg: vg.name.clone(),
        }),
        None if vg.lv(name).is_some() => Err(EditError::Exists {
            what: "Logical Volume (not a volume of this driver)",
            name: name.to_owned(),
            vg: vg.name.clone(),
        }),
        None => Ok(None),
    }
}
