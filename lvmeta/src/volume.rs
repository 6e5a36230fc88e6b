//! Volumes as a container orchestrator sees them: named, sized in bytes, made of one LV
//! (`linear`) or of one thin LV in a thin pool of its own (`thin`, as KubeSAN does), each
//! change one commit.
//!
//! The volume's name is its LV's name; its pool is `<name>-pool`. The tag
//! `lvmeta.csi/mode=<mode>` marks the LVs this layer made, so that other LVs in the VG are
//! neither listed nor touched. Every call is idempotent where the orchestrator needs it:
//! creating a volume that exists with a compatible size returns it, deleting one that is gone
//! succeeds.

use crate::edit::{self, EditError, LvSpec, PoolSpec, Stamp, ThinSpec};
use crate::model::{SegKind, Vg};
use crate::ops::Session;

/// The tag prefix marking a volume's LV and telling its mode.
pub const MODE_TAG: &str = "lvmeta.csi/mode=";

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
    /// The size asked for cannot be given.
    #[error("{0}")]
    OutOfRange(String),
    /// The VG has too little free space.
    #[error("{0}")]
    NoSpace(String),
    /// The state of the volume forbids the change.
    #[error("{0}")]
    Refused(String),
    /// Reading or writing the VG failed.
    #[error(transparent)]
    Lvmeta(crate::Error),
}

impl From<crate::Error> for VolumeError {
    fn from(e: crate::Error) -> Self {
        match e {
            crate::Error::Edit(e) => e.into(),
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
            e @ EditError::Invalid(_) => VolumeError::Lvmeta(crate::Error::Edit(e)),
        }
    }
}

/// The volumes of one VG, changed through a [`Session`].
pub struct Volumes<'s> {
    session: &'s Session,
    vg: String,
}

impl<'s> Volumes<'s> {
    /// The volumes of `vg`.
    pub fn new(session: &'s Session, vg: &str) -> Self {
        Self {
            session,
            vg: vg.to_owned(),
        }
    }

    /// The VG as last read or written.
    pub fn vg(&self) -> Result<Vg, VolumeError> {
        Ok(self.session.vg(&self.vg)?)
    }

    /// Every volume, by name.
    pub fn list(&self) -> Result<Vec<Volume>, VolumeError> {
        let vg = self.vg()?;
        let mut out: Vec<Volume> = vg
            .lvs
            .iter()
            .filter_map(|l| volume_of(&vg, &l.name))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The volume `name`, if it exists.
    pub fn get(&self, name: &str) -> Result<Option<Volume>, VolumeError> {
        Ok(volume_of(&self.vg()?, name))
    }

    /// Bytes a new volume can take at most (the VG's free extents).
    pub fn free_bytes(&self) -> Result<u64, VolumeError> {
        let vg = self.vg()?;
        Ok(vg.free_count() * extent_bytes(&vg))
    }

    /// Creates `name`, or returns it when it exists in this mode with a size in `size`.
    pub fn create(&self, name: &str, mode: Mode, size: SizeRange) -> Result<Volume, VolumeError> {
        crate::names::check_new_lv_name(&self.vg, name)
            .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        if mode == Mode::Thin {
            crate::names::check_new_lv_name(&self.vg, &Volume::pool_name(name))
                .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        }
        let vg = self.vg()?;
        if let Some(v) = existing(&vg, name, mode, size)? {
            return Ok(v);
        }
        let extents = size.extents(extent_bytes(&vg))?;
        let tags = vec![format!("{MODE_TAG}{}", mode.as_str())];
        let stamp = Stamp::now();
        let verb = "lvcreate";
        self.session
            .update(&self.vg, verb, |vg| {
                // Another writer may have made it since the check above (the lease is held now).
                if let Some(v) = existing(&vg, name, mode, size)? {
                    return Ok((vg, v));
                }
                let vg = match mode {
                    Mode::Linear => {
                        let mut spec = LvSpec::linear(name, extents, stamp);
                        spec.tags = tags;
                        edit::lv::create(vg, &spec)?.0
                    }
                    Mode::Thin => {
                        let pool = PoolSpec {
                            data: LvSpec::linear(&Volume::pool_name(name), extents, stamp.clone()),
                            chunk_size: None,
                            metadata_extents: None,
                            discards: "passdown".into(),
                            zero: true,
                        };
                        let (vg, pool_name) = edit::thin::create_pool(vg, &pool)?;
                        let thin = ThinSpec {
                            name: Some(name.to_owned()),
                            pool: pool_name,
                            extents,
                            origin: None,
                            tags,
                            activation_skip: Some(false),
                            stamp,
                        };
                        edit::thin::create_thin(vg, &thin)?.0
                    }
                };
                let v = volume_of(&vg, name).ok_or_else(|| {
                    edit::refused(name, "the new LV is not a volume (internal error)")
                })?;
                Ok((vg, v))
            })
            .map_err(VolumeError::from)
    }

    /// Removes `name` (a thin volume with its pool and any snapshots in it). Returns false
    /// when there was no such volume.
    pub fn delete(&self, name: &str) -> Result<bool, VolumeError> {
        let vg = self.vg()?;
        if volume_of(&vg, name).is_none() {
            return Ok(false);
        }
        self.session
            .update(&self.vg, "lvremove", |vg| match volume_of(&vg, name) {
                None => Ok((vg, false)),
                Some(v) => {
                    let vg = match v.mode {
                        Mode::Linear => edit::lv::remove(vg, name, false)?,
                        Mode::Thin => edit::lv::remove(vg, &Volume::pool_name(name), true)?,
                    };
                    Ok((vg, true))
                }
            })
            .map_err(VolumeError::from)
    }

    /// Grows `name` to at least `size.required` bytes (a thin volume's pool grows with it).
    /// A volume already that large is returned unchanged; shrinking is refused.
    pub fn expand(&self, name: &str, size: SizeRange) -> Result<Volume, VolumeError> {
        let vg = self.vg()?;
        let v = volume_of(&vg, name).ok_or_else(|| VolumeError::NotFound(name.to_owned()))?;
        let extents = size.extents(extent_bytes(&vg))?;
        if u64::from(extents) * extent_bytes(&vg) <= v.bytes {
            return Ok(v);
        }
        self.session
            .update(&self.vg, "lvextend", |vg| {
                let v = volume_of(&vg, name).ok_or_else(|| EditError::NoLv {
                    vg: vg.name.clone(),
                    lv: name.to_owned(),
                })?;
                if u64::from(extents) * extent_bytes(&vg) <= v.bytes {
                    return Ok((vg, v));
                }
                let vg = match v.mode {
                    Mode::Linear => edit::lv::resize(vg, name, extents, None, false)?,
                    Mode::Thin => {
                        let pool = Volume::pool_name(name);
                        let vg = grow_to(vg, &pool, extents)?;
                        edit::lv::resize(vg, name, extents, None, false)?
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

/// Grows `lv` to `extents` unless it is already at least that large.
fn grow_to(vg: Vg, lv: &str, extents: u32) -> Result<Vg, EditError> {
    let current = vg.lv(lv).map_or(0, |l| l.extents());
    if current >= u64::from(extents) {
        return Ok(vg);
    }
    edit::lv::resize(vg, lv, extents, None, false)
}

fn extent_bytes(vg: &Vg) -> u64 {
    u64::from(vg.extent_size) * 512
}

/// The volume `name` of `vg`: an LV carrying the mode tag (a thin one in its own pool).
fn volume_of(vg: &Vg, name: &str) -> Option<Volume> {
    let lv = vg.lv(name)?;
    let mode = lv
        .tags
        .iter()
        .find_map(|t| Mode::parse(t.strip_prefix(MODE_TAG)?))?;
    let shape_ok = match (mode, &lv.segments.first()?.kind) {
        (Mode::Linear, SegKind::Striped(_)) => true,
        (Mode::Thin, SegKind::Thin(t)) => t.thin_pool == Volume::pool_name(name),
        _ => false,
    };
    shape_ok.then(|| Volume {
        vg: vg.name.clone(),
        name: name.to_owned(),
        mode,
        bytes: lv.extents() * extent_bytes(vg),
    })
}

/// The volume `name` when it exists and matches the request; an error when something else
/// holds the name.
fn existing(vg: &Vg, name: &str, mode: Mode, size: SizeRange) -> Result<Option<Volume>, EditError> {
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
