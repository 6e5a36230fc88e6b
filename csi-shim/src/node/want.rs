//! What a volume capability asks of the node.

use tonic::Status;

use crate::csi::volume_capability::access_mode::Mode as Access;
use crate::csi::volume_capability::{AccessType, MountVolume};
use crate::csi::VolumeCapability;
use crate::params;

/// Filesystem made on a blank volume when the capability names none.
pub const DEFAULT_FS: &str = "ext4";

/// What a volume capability asks of the node.
pub(super) struct Want {
    /// Filesystem (`None`: block).
    pub fs: Option<String>,
    /// Mount options, each checked ([`crate::mount::check_mount_flag`]).
    pub flags: Vec<String>,
    /// Group to own the filesystem root (VOLUME_MOUNT_GROUP).
    pub group: Option<u32>,
    /// A reader-only access mode.
    pub read_only: bool,
    /// A multi-node access mode.
    pub multi_node: bool,
    /// SINGLE_NODE_SINGLE_WRITER: published at one target path at most.
    pub single_writer: bool,
}

impl Want {
    /// What `cap` asks for; INVALID_ARGUMENT for what the node cannot do.
    pub fn of(cap: &VolumeCapability) -> Result<Self, Status> {
        let access = cap
            .access_mode
            .as_ref()
            .and_then(|a| Access::try_from(a.mode).ok())
            .unwrap_or(Access::Unknown);
        let read_only = matches!(
            access,
            Access::SingleNodeReaderOnly | Access::MultiNodeReaderOnly
        );
        let multi_node = matches!(
            access,
            Access::MultiNodeReaderOnly
                | Access::MultiNodeSingleWriter
                | Access::MultiNodeMultiWriter
        );
        let single_writer = access == Access::SingleNodeSingleWriter;
        let (fs, flags, group) = match &cap.access_type {
            Some(AccessType::Block(_)) => (None, Vec::new(), None),
            Some(AccessType::Mount(MountVolume {
                fs_type,
                mount_flags,
                volume_mount_group,
            })) => {
                let fs = if fs_type.is_empty() {
                    DEFAULT_FS.to_owned()
                } else {
                    fs_type.clone()
                };
                if !params::FILESYSTEMS.contains(&fs.as_str()) {
                    return Err(Status::invalid_argument(format!(
                        "filesystem {} is not supported (ext4 or xfs)",
                        crate::params::shown(&fs)
                    )));
                }
                for f in mount_flags {
                    crate::mount::check_mount_flag(f).map_err(Status::invalid_argument)?;
                }
                let group = if volume_mount_group.is_empty() {
                    None
                } else {
                    Some(volume_mount_group.parse().map_err(|_| {
                        Status::invalid_argument(format!(
                            "volume_mount_group {} is not a numeric group id",
                            crate::params::shown(volume_mount_group)
                        ))
                    })?)
                };
                (Some(fs), mount_flags.clone(), group)
            }
            None => {
                return Err(Status::invalid_argument(
                    "access type (block or mount) is missing",
                ))
            }
        };
        Ok(Self {
            fs,
            flags,
            group,
            read_only,
            multi_node,
            single_writer,
        })
    }
}
