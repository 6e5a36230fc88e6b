//! Where an LV's bytes lie, as data: pieces and stripes of the PVs' devices, and a thin
//! pool's plan (its sub-LVs' placements, settings, queued messages). Pure types: what
//! computes them ([`super::plan::place`], [`super::thin::plan_pool`], `runs.rs` for linear
//! and striped LVs) sits above.
//! - Sizes and offsets are [`Bytes`]; device-mapper tables convert them to sectors, the
//!   data plane uses them as they are.

use crate::units::{Bytes, Sectors};

/// One contiguous run of an LV's bytes on one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The device (as the scan named it).
    pub device: String,
    /// Offset on the device.
    pub offset: Bytes,
    /// Length.
    pub len: Bytes,
}

/// One segment of a striped LV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stripe {
    /// Length of the segment (all its areas together).
    pub len: Bytes,
    /// Stripe size (0 for a one-area segment).
    pub stripe_bytes: Bytes,
    /// One area per stripe, each `len / areas` bytes long.
    pub areas: Vec<Piece>,
}

/// How an LV's bytes are laid out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// Linear: pieces in LV order (adjacent pieces on one device merged).
    Linear(Vec<Piece>),
    /// Striped: each segment in LV order, one area per stripe (a linear segment has one).
    Striped(Vec<Stripe>),
    /// A thin LV: device `device_id` of its pool.
    Thin {
        /// The pool, with what its kernel target needs.
        pool: Box<PoolPlan>,
        /// The thin device's id in the pool.
        device_id: u32,
    },
    /// A thin pool activated by itself (`lvchange -ay vg/pool`).
    Pool(Box<PoolPlan>),
    /// Anything that needs a device-mapper target other than linear: the segment type.
    Other(String),
}

/// An LV to activate: which one, its size and its layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The VG.
    pub vg: String,
    /// The LV.
    pub lv: String,
    /// Its size.
    pub bytes: Bytes,
    /// Where its bytes are.
    pub layout: Layout,
    /// The device-mapper uuid lvm2 gives the LV's device: `LVM-`, then the VG's and the LV's
    /// ids without their dashes (so stock lvm2 on this host sees it active).
    pub dm_uuid: String,
}

impl Placement {
    /// The single piece of a one-piece linear LV.
    pub fn single(&self) -> Option<&Piece> {
        match &self.layout {
            Layout::Linear(p) if p.len() == 1 => p.first(),
            _ => None,
        }
    }

    /// Every run of the PVs' devices this LV's bytes live on: its pieces, its stripes'
    /// areas, or its pool's metadata and data (for a thin LV or pool).
    pub fn pieces(&self) -> Vec<&Piece> {
        match &self.layout {
            Layout::Linear(p) => p.iter().collect(),
            Layout::Striped(s) => s.iter().flat_map(|s| &s.areas).collect(),
            Layout::Thin { pool, .. } | Layout::Pool(pool) => {
                let mut out = pool.metadata.pieces();
                out.extend(pool.data.pieces());
                out
            }
            Layout::Other(_) => Vec::new(),
        }
    }
}

impl Piece {
    /// Do `self` and `other` share a byte of the same device?
    pub fn overlaps(&self, other: &Piece) -> bool {
        self.device == other.device
            && self.offset.0 < other.offset.0.saturating_add(other.len.0)
            && other.offset.0 < self.offset.0.saturating_add(self.len.0)
    }
}

/// A thin pool as the kernel gets it: the `thin-pool` target over its two sub-LVs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolPlan {
    /// The pool LV.
    pub name: String,
    /// lvm2's device uuid of the pool LV (`LVM-<vg id><lv id>`); the `-tpool` layer adds
    /// `-tpool`.
    pub dm_uuid: String,
    /// Size of the pool (its data).
    pub bytes: Bytes,
    /// The `_tmeta` LV (linear).
    pub metadata: Placement,
    /// The `_tdata` LV (linear or striped).
    pub data: Placement,
    /// Data block size.
    pub chunk_size: Sectors,
    /// Zero data blocks as they are provisioned (`zero = 1`).
    pub zero_new_blocks: bool,
    /// What discards do: `passdown`, `nopassdown` or `ignore`.
    pub discards: String,
    /// Fail writes when the pool is full instead of queueing them (`ERROR_WHEN_FULL`).
    pub error_if_no_space: bool,
    /// The metadata's transaction id T.
    pub transaction_id: u64,
    /// The queued messages, resolved to device ids, in queue order.
    pub messages: Vec<PoolMessage>,
    /// The pool's thin LVs: device id and LV name.
    pub thin_lvs: Vec<(u32, String)>,
}

impl PoolPlan {
    /// The feature words of the pool's table, as lvm2 sets them: `skip_block_zeroing`,
    /// `ignore_discard` or `no_discard_passdown`, `error_if_no_space`.
    pub fn features(&self) -> Vec<&'static str> {
        let mut features = Vec::new();
        if !self.zero_new_blocks {
            features.push("skip_block_zeroing");
        }
        match self.discards.as_str() {
            "ignore" => features.push("ignore_discard"),
            "nopassdown" => features.push("no_discard_passdown"),
            _ => {}
        }
        if self.error_if_no_space {
            features.push("error_if_no_space");
        }
        features
    }
}

/// A message for the kernel thin-pool target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMessage {
    /// `create_thin <id>`: a new, empty thin device.
    CreateThin(u32),
    /// `create_snap <id> <origin id>`: a snapshot of a thin device.
    CreateSnap {
        /// The new device.
        id: u32,
        /// Its origin.
        origin: u32,
    },
    /// `delete <id>`.
    Delete(u32),
    /// `set_transaction_id <from> <to>`, always last.
    SetTransactionId {
        /// The kernel's id now.
        from: u64,
        /// The metadata's.
        to: u64,
    },
}

impl std::fmt::Display for PoolMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CreateThin(id) => write!(f, "create_thin {id}"),
            Self::CreateSnap { id, origin } => write!(f, "create_snap {id} {origin}"),
            Self::Delete(id) => write!(f, "delete {id}"),
            Self::SetTransactionId { from, to } => write!(f, "set_transaction_id {from} {to}"),
        }
    }
}
