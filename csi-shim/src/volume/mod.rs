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
mod create;
mod delete;
mod expand;
mod lookup;
mod request;
mod snapshot;
mod tune;
mod wipe;

pub use condition::{condition, Condition};
pub(crate) use lookup::volume_of;
use lookup::*;
pub use request::{Posted, Request, MAX_AGE as REQUEST_MAX_AGE, REQUEST_TAG};
pub use wipe::{is_wipe, WIPE_PREFIX, WIPE_TAG};

use lvmeta::activate::Backend;
pub use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, EditCtx, EditError, LvSpec, PoolSpec, Stamp, ThinSpec};
use lvmeta::model::{Lv, SegKind, Vg};
use lvmeta::session::{Session, VgView};
use lvmeta::units::{Bytes, ExtentSize, Extents};

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
    /// The size to make, in extents of `extent`: `required` (or the default) rounded up to
    /// whole extents, refused when that passes the limit. The one bytes-to-extents
    /// conversion of a volume's size.
    pub fn extents(self, extent: ExtentSize) -> Result<u32, VolumeError> {
        self.check()?;
        let want = match self.required {
            0 if self.limit != 0 => self.limit.min(DEFAULT_BYTES),
            0 => DEFAULT_BYTES,
            r => r,
        };
        let extents = Extents(Bytes(want).extents_ceil(extent).0.max(1));
        if self.limit != 0 && extents.bytes(extent).0 > self.limit {
            return Err(VolumeError::OutOfRange(format!(
                "{want} bytes rounded up to whole {extent} is more than the limit of {} bytes",
                self.limit
            )));
        }
        extents
            .to_u32()
            .ok_or_else(|| VolumeError::OutOfRange(format!("{want} bytes is too large")))
    }

    /// OUT_OF_RANGE when no size can meet the range (more required than the limit).
    pub fn check(self) -> Result<(), VolumeError> {
        if self.limit != 0 && self.required > self.limit {
            return Err(VolumeError::OutOfRange(format!(
                "required {} bytes is more than the limit of {} bytes",
                self.required, self.limit
            )));
        }
        Ok(())
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

    /// Refuses when thin LV `name` is served over NBD to other nodes now: its pool's
    /// record is live and slots of its epoch stage `name` (slots of older epochs, or of
    /// host lives that ended, do not count: the pool's lease still refuses a removal while
    /// the pool is served). The refusal names the serving host and the staging ones.
    fn check_not_shared(&self, name: &str) -> Result<(), VolumeError> {
        use lvmeta::lease::board::{ServeState, SlotState};
        let Some(b) = self.session.pool_board(&self.vg, name)? else {
            return Ok(());
        };
        let board = self.session.read_board_live(&b)?;
        let Some(record) = board
            .record
            .as_ref()
            .filter(|r| r.state != ServeState::Released)
        else {
            return Ok(());
        };
        let mut hosts: Vec<u64> = board
            .slots_of(&b.lv_id)
            .filter(|(_, s)| s.state == SlotState::Staged && s.epoch == record.epoch)
            .map(|(_, s)| s.host)
            .collect();
        if hosts.is_empty() {
            return Ok(());
        }
        hosts.sort_unstable();
        hosts.dedup();
        Err(VolumeError::Refused(format!(
            "volume {}/{name} is staged on several nodes: host id {} serves it over NBD to \
             host ids {hosts:?}; unstage it on every node first",
            self.vg, record.host
        )))
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
        Ok(vg.bytes_of(vg.free_count()).0)
    }

    /// Bytes a new volume of `mode` can take at most: the VG's free extents less what
    /// `lvmlock` would grow by for its lease, or 0 when its metadata areas cannot take the
    /// text of one more such volume (see [`Mode::text_bytes`]).
    pub fn room(&self, mode: Mode) -> Result<u64, VolumeError> {
        let vg = self.view()?;
        if !vg.metadata().fits(mode.text_bytes()) {
            return Ok(0);
        }
        let lease = edit::slots::lease_growth(vg.vg(), vg.lease_align());
        let free = vg.free_count().saturating_sub(u64::from(lease));
        Ok(vg.bytes_of(free).0)
    }
}
