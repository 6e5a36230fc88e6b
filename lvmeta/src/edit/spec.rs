//! What the LV verbs are asked for: `lvcreate` (linear, striped) and `lvchange`.

use super::Stamp;

/// lvm2's default stripe size: 64 KiB, in sectors.
pub const DEFAULT_STRIPE_SIZE: u32 = 128;

/// `-p r|rw`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Permission {
    /// Read and write.
    #[default]
    ReadWrite,
    /// Read only.
    ReadOnly,
}

/// What `lvcreate` (linear or striped) was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LvSpec {
    /// `-n`; `lvol<N>` when absent.
    pub name: Option<String>,
    /// Size in extents (a multiple of `stripes`).
    pub extents: u32,
    /// `-i` (1: linear).
    pub stripes: u32,
    /// `-I` in sectors (default 64 KiB when striped).
    pub stripe_size: Option<u32>,
    /// PVs (indices in the VG) allocation may use; all when `None`.
    pub pvs: Option<Vec<usize>>,
    /// `--addtag`.
    pub tags: Vec<String>,
    /// `-p`.
    pub permission: Permission,
    /// `--setactivationskip y`.
    pub activation_skip: bool,
    /// Creation time and host.
    pub stamp: Stamp,
    /// An LV lvm2 makes itself (sub-LVs, `lvmlock`): reserved names allowed, no lease.
    pub internal: bool,
}

impl LvSpec {
    /// A linear LV of `extents` extents.
    pub fn linear(name: &str, extents: u32, stamp: Stamp) -> Self {
        Self {
            name: Some(name.to_owned()),
            extents,
            stripes: 1,
            stripe_size: None,
            pvs: None,
            tags: Vec::new(),
            permission: Permission::ReadWrite,
            activation_skip: false,
            stamp,
            internal: false,
        }
    }
}

/// What `lvchange` was asked for (each field: change it when set).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LvChange {
    /// `--addtag`.
    pub add_tags: Vec<String>,
    /// `--deltag`.
    pub del_tags: Vec<String>,
    /// `-p`.
    pub permission: Option<Permission>,
    /// `--setactivationskip`.
    pub activation_skip: Option<bool>,
}
