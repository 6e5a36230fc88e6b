//! The library's error type: every variant names the device (or VG) and, where there is one,
//! the byte offset and the field.

use std::io;

use crate::edit::EditError;
use crate::label::LabelError;
use crate::layout::LayoutError;
use crate::mda::MdaError;
use crate::model::ModelError;
use crate::text::TextError;

/// Anything lvmeta can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A read or write failed.
    #[error("{device}: I/O error at offset {offset}: {source}")]
    Io {
        /// Device path.
        device: String,
        /// Byte offset of the transfer.
        offset: u64,
        /// The OS error.
        source: io::Error,
    },
    /// A label sector was rejected.
    #[error("{device}: {source}")]
    Label {
        /// Device path.
        device: String,
        /// Why.
        source: LabelError,
    },
    /// A metadata area header or text was rejected.
    #[error("{device}: {source}")]
    Mda {
        /// Device path.
        device: String,
        /// Why.
        source: MdaError,
    },
    /// Metadata text did not parse.
    #[error("{device}: metadata text at offset {offset}: {source}")]
    Text {
        /// Device path (empty for text not read from a device).
        device: String,
        /// Absolute offset of the text on the device.
        offset: u64,
        /// Why.
        source: TextError,
    },
    /// Metadata text parsed but does not describe a valid VG.
    #[error("invalid metadata: {0}")]
    Model(#[from] ModelError),
    /// No VG of that name was found on the scanned devices.
    #[error("Volume group \"{0}\" not found")]
    VgNotFound(String),
    /// No LV of that name in the VG.
    #[error("Failed to find logical volume \"{vg}/{lv}\"")]
    LvNotFound {
        /// VG name.
        vg: String,
        /// LV name.
        lv: String,
    },
    /// A change was refused before anything was written.
    #[error("{0}")]
    Edit(#[from] EditError),
    /// A lease could not be taken, given back or written.
    #[error("{0}")]
    Lease(#[from] crate::lease::LeaseError),
    /// A thin pool's serve board could not be read or written.
    #[error(transparent)]
    Board(#[from] crate::lease::board_io::BoardIoError),
    /// Activating or deactivating an LV on this host failed.
    #[error(transparent)]
    Activate(#[from] crate::activate::ActivateError),
    /// A change to a shared VG without a lock manager.
    #[error("VG {0} is shared: start its lockspace with a host id (--host-id N, vgchange --lockstart) or pass --nolocking")]
    SharedWithoutLeases(String),
    /// A PV layout cannot be made on this device.
    #[error("{device}: {source}")]
    Layout {
        /// Device path.
        device: String,
        /// Why.
        source: LayoutError,
    },
    /// An lvm2 lock file could not be taken.
    #[error("lock file {path}: {source} (lvm2's locking_dir; LVMETA_LOCKING_DIR names another)")]
    Lock {
        /// The lock file.
        path: String,
        /// The OS error.
        source: io::Error,
    },
    /// A device is not usable for what was asked (not a PV, in another VG, not scanned).
    #[error("{device}: {why}")]
    Device {
        /// Device path.
        device: String,
        /// What is wrong.
        why: String,
    },
    /// A VG cannot be changed while some of its PVs are missing.
    #[error("Cannot change VG {vg} while PVs are missing ({missing}).")]
    MissingPvs {
        /// VG name.
        vg: String,
        /// Ids of the missing PVs.
        missing: String,
    },
    /// Several VGs carry the requested name.
    #[error("Multiple VGs found with the same name \"{0}\"; rename one of them")]
    VgAmbiguous(String),
    /// The VG's new text does not fit its metadata areas (lvm2 keeps the committed copy and
    /// the new one both in an area, so a text may use about half of it).
    #[error("VG {vg}: metadata area on {device} is full: the new text needs {size} bytes, the area takes at most {max} ({} bytes short); make the VG's PVs with a larger --metadatasize (about 1.6 KB per thin volume, 0.35 KB per linear one, twice over), or remove LVs", size.saturating_sub(*max))]
    MetadataFull {
        /// VG name.
        vg: String,
        /// The device of the area.
        device: String,
        /// Bytes the new text needs, NUL included.
        size: u64,
        /// The largest text the area takes.
        max: u64,
    },
    /// The group commit this change was part of failed (every change of the group shares
    /// the error).
    #[error("{0}")]
    Group(std::sync::Arc<Error>),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
