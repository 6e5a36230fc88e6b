//! Request builders for the tests and benchmarks of the driver (feature `testing`): the one
//! place a test makes a capability or a CSI request, so that every test asks the same way.

use std::collections::HashMap;

use crate::csi::volume_capability::access_mode::Mode as Access;
use crate::csi::volume_capability::{AccessMode, AccessType, BlockVolume, MountVolume};
use crate::csi::{
    CapacityRange, ControllerModifyVolumeRequest, CreateVolumeRequest, NodePublishVolumeRequest,
    NodeStageVolumeRequest, VolumeCapability,
};

/// A capability with `access`: a block volume (`fs` None) or a filesystem of type `fs`.
pub fn cap(access: Access, fs: Option<&str>) -> VolumeCapability {
    VolumeCapability {
        access_mode: Some(AccessMode {
            mode: access as i32,
        }),
        access_type: Some(match fs {
            None => AccessType::Block(BlockVolume {}),
            Some(f) => AccessType::Mount(MountVolume {
                fs_type: f.into(),
                ..Default::default()
            }),
        }),
    }
}

/// CreateVolume of `name` in VG `vg`, mode `mode` (`linear`, `thin`), at least `bytes`, with
/// `caps`; a copy's source is set by the caller (`volume_content_source`).
pub fn create_request(
    name: &str,
    mode: &str,
    bytes: i64,
    caps: Vec<VolumeCapability>,
) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: bytes,
            limit_bytes: 0,
        }),
        volume_capabilities: caps,
        parameters: HashMap::from([
            ("vg".to_owned(), "vg".to_owned()),
            ("mode".to_owned(), mode.to_owned()),
        ]),
        ..Default::default()
    }
}

/// NodeStageVolume of `id` at `staging` as `cap`.
pub fn stage_request(id: &str, staging: &str, cap: VolumeCapability) -> NodeStageVolumeRequest {
    NodeStageVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.into(),
        volume_capability: Some(cap),
        ..Default::default()
    }
}

/// NodePublishVolume of `id`, staged at `staging`, at `target` as `cap`.
pub fn publish_request(
    id: &str,
    staging: &str,
    target: &str,
    cap: VolumeCapability,
) -> NodePublishVolumeRequest {
    NodePublishVolumeRequest {
        volume_id: id.into(),
        staging_target_path: staging.into(),
        target_path: target.into(),
        volume_capability: Some(cap),
        ..Default::default()
    }
}

/// ControllerModifyVolume of `id` with mutable parameters `params`.
pub fn modify_request(id: &str, params: &[(&str, &str)]) -> ControllerModifyVolumeRequest {
    ControllerModifyVolumeRequest {
        volume_id: id.into(),
        mutable_parameters: params
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    }
}
