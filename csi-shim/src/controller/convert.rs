//! CSI messages to and from the driver's volumes: sizes, volumes, snapshots, sources, pages.

use tonic::Status;

use crate::csi::{volume_content_source, CapacityRange, VolumeContentSource};
use crate::params::{self};
use crate::volume::{Condition, SizeRange, Snapshot, Volume};

pub(super) fn size_range(r: Option<&CapacityRange>) -> Result<SizeRange, Status> {
    let Some(r) = r else {
        return Ok(SizeRange::default());
    };
    let bytes = |v: i64, what: &str| {
        u64::try_from(v).map_err(|_| Status::invalid_argument(format!("{what} is negative")))
    };
    Ok(SizeRange {
        required: bytes(r.required_bytes, "required_bytes")?,
        limit: bytes(r.limit_bytes, "limit_bytes")?,
    })
}

pub(super) fn csi_condition(c: &Condition) -> crate::csi::VolumeCondition {
    crate::csi::VolumeCondition {
        abnormal: c.abnormal,
        message: c.message.clone(),
    }
}

pub(super) fn csi_volume(v: &Volume) -> crate::csi::Volume {
    crate::csi::Volume {
        capacity_bytes: i64::try_from(v.bytes).unwrap_or(i64::MAX),
        volume_id: params::volume_id(&v.vg, &v.name),
        volume_context: params::context(&v.vg, v.mode),
        accessible_topology: params::topology(&v.vg).into_iter().collect(),
        ..Default::default()
    }
}

/// A content source of a new volume, by name in its VG.
pub(super) enum Source {
    Snapshot(String),
    Volume(String),
}

/// The source of a CreateVolume: it must be in the VG the volume is made in.
pub(super) fn content_source(
    src: Option<&VolumeContentSource>,
    vg: &str,
) -> Result<Option<Source>, Status> {
    let Some(t) = src.and_then(|s| s.r#type.as_ref()) else {
        return Ok(None);
    };
    let (id, snapshot) = match t {
        volume_content_source::Type::Snapshot(s) => (&s.snapshot_id, true),
        volume_content_source::Type::Volume(v) => (&v.volume_id, false),
    };
    let (src_vg, name) = params::parse_volume_id(id)?;
    if src_vg != vg {
        return Err(Status::invalid_argument(format!(
            "the source {} is in VG {src_vg}, the new volume in VG {vg}: sources must be in the same VG",
            params::shown(id)
        )));
    }
    Ok(Some(if snapshot {
        Source::Snapshot(name)
    } else {
        Source::Volume(name)
    }))
}

pub(super) fn csi_snapshot(s: &Snapshot) -> crate::csi::Snapshot {
    crate::csi::Snapshot {
        size_bytes: i64::try_from(s.bytes).unwrap_or(i64::MAX),
        snapshot_id: params::volume_id(&s.vg, &s.name),
        source_volume_id: params::volume_id(&s.vg, &s.source),
        creation_time: s.created.map(|t| prost_types::Timestamp {
            seconds: i64::try_from(t).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        // Thin snapshots are complete the moment they are committed.
        ready_to_use: true,
        group_snapshot_id: String::new(),
    }
}

/// One page of `len` entries: the range to return and the next token (empty at the end).
/// A token that is not a position inside the list is ABORTED, as the spec asks.
pub(super) fn page(
    len: usize,
    max_entries: i32,
    token: &str,
) -> Result<(std::ops::Range<usize>, String), Status> {
    let max = usize::try_from(max_entries)
        .map_err(|_| Status::invalid_argument("max_entries is negative"))?;
    let start: usize = if token.is_empty() {
        0
    } else {
        token.parse().map_err(|_| {
            Status::aborted(format!(
                "starting_token {} is not valid",
                params::shown(token)
            ))
        })?
    };
    if start > len {
        return Err(Status::aborted(format!(
            "starting_token {start} is past the end ({len} entries)"
        )));
    }
    let end = if max == 0 {
        len
    } else {
        (start + max).min(len)
    };
    let next = if end < len {
        end.to_string()
    } else {
        String::new()
    };
    Ok((start..end, next))
}

pub(super) fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        Err(Status::invalid_argument(format!("{field} is required")))
    } else {
        Ok(())
    }
}
