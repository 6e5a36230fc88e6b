//! Changes to a VG, as pure functions over the model: what `vgcreate`, `lvcreate`, `lvremove`
//! and the other verbs decide before anything is written. Each takes a [`Vg`] and returns it
//! changed (or an [`EditError`], the VG untouched); [`crate::session`] adds the I/O around them.
//!
//! Every edit takes an [`EditCtx`] (what its group commit tells it) and ends in [`check`]:
//! every check lvm2 makes on write. An edit never sets the seqno (but `vgcreate`'s first version, 1): the
//! commit does.

mod add;
mod ctx;
pub mod lv;
pub(crate) mod parts;
pub mod slots;
mod spec;
pub mod thin;
pub mod vg;

pub use ctx::{EditCtx, Reserved};
pub use spec::{LvChange, LvSpec, Permission};
pub use thin::{PoolSpec, ThinSpec};
pub use vg::{NewPv, SharedVg, VgSpec};

use crate::alloc::AllocError;
use crate::model::{validate, ModelError, Vg};
use crate::names::NameError;

/// When and where a change is made (an LV's `creation_time` and `creation_host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// Seconds since the epoch.
    pub time: u64,
    /// The host name.
    pub host: String,
}

impl Stamp {
    /// Now, on this host.
    pub fn now() -> Self {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        Self { time, host }
    }
}

/// Why a change was refused. Nothing has been changed or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// A name breaks lvm2's rules.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The name is taken.
    #[error("{what} \"{name}\" already exists in volume group \"{vg}\"")]
    Exists {
        /// "Logical Volume", "Physical volume".
        what: &'static str,
        /// The name.
        name: String,
        /// The VG.
        vg: String,
    },
    /// No such LV.
    #[error("Failed to find logical volume \"{vg}/{lv}\"")]
    NoLv {
        /// VG name.
        vg: String,
        /// LV name.
        lv: String,
    },
    /// Not enough room, or not in the shape asked for.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// An option value lvm2 would refuse.
    #[error("{option}: {why}")]
    Option {
        /// The option (`-I`, `--chunksize`, ...).
        option: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The change is not allowed on this object as it is.
    #[error("{object}: {why}")]
    Refused {
        /// The VG, LV or PV concerned.
        object: String,
        /// Why.
        why: String,
    },
    /// The result would break an invariant lvm2 checks (a bug if ever seen).
    #[error("the changed metadata fails validation: {0}")]
    Invalid(#[from] ModelError),
}

/// An edit refused: `object` cannot be changed so, for the reason `why`.
pub fn refused(object: impl Into<String>, why: impl Into<String>) -> EditError {
    EditError::Refused {
        object: object.into(),
        why: why.into(),
    }
}

/// Ends every edit: every invariant lvm2 checks on read and on write (unless `ctx` leaves
/// them to its caller: [`EditCtx::in_group`]). The seqno is the commit's to set.
pub fn check(vg: &Vg, ctx: &EditCtx) -> Result<(), EditError> {
    if ctx.checks_all() {
        validate::check_read(vg)?;
        validate::check_write(vg)?;
    }
    Ok(())
}
