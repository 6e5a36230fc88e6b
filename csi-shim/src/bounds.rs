//! The sizes of a request's fields, checked before anything else reads them: a field too
//! long (or a map or list with too many entries) is INVALID_ARGUMENT naming the field, so
//! that no later message, log line or lvm2 name check has to carry an oversized string.
//!
//! CSI expects names and ids of at most 128 bytes; names are held to that
//! ([`crate::params::check_name`]), every other string to [`MAX_STRING_BYTES`] (room for
//! ids made elsewhere and Kubernetes' longest qualified keys, 316 bytes), node paths to
//! [`MAX_PATH_BYTES`] and [`MAX_PATH_COMPONENT_BYTES`] per component. Secrets are neither
//! read nor shown by the driver and are left to the request size limit
//! ([`crate::connections::MAX_REQUEST_BYTES`]).

use std::collections::HashMap;

use tonic::Status;

use crate::csi::volume_capability::AccessType;
use crate::csi::*;
use crate::params::shown;

/// The longest string field other than a name or a path: ids, tokens, parameter keys and
/// values, filesystem types, mount flags.
pub const MAX_STRING_BYTES: usize = 1024;
/// The longest node path (Linux's PATH_MAX, its terminating NUL included).
pub const MAX_PATH_BYTES: usize = 4095;
/// The longest component of a node path (Linux's NAME_MAX).
pub const MAX_PATH_COMPONENT_BYTES: usize = 255;
/// The most entries of a map (parameters, contexts) or list (capabilities, mount flags).
pub const MAX_ENTRIES: usize = 128;

/// A request whose fields' sizes can be checked.
pub trait Bounded {
    /// INVALID_ARGUMENT for the first field over its limit.
    fn check_bounds(&self) -> Result<(), Status>;
}

/// Checks the sizes of `req`'s fields ([`Bounded::check_bounds`]).
pub fn check(req: &impl Bounded) -> Result<(), Status> {
    req.check_bounds()
}

/// INVALID_ARGUMENT for `field` of `len` bytes over `max`.
fn too_long(field: &str, len: usize, max: usize) -> Status {
    Status::invalid_argument(format!(
        "{field} has {len} bytes; at most {max} are accepted"
    ))
}

/// A string field of at most [`MAX_STRING_BYTES`].
fn string(field: &str, s: &str) -> Result<(), Status> {
    match s.len() {
        n if n > MAX_STRING_BYTES => Err(too_long(field, n, MAX_STRING_BYTES)),
        _ => Ok(()),
    }
}

/// A node path: at most [`MAX_PATH_BYTES`], components of at most
/// [`MAX_PATH_COMPONENT_BYTES`], no NUL byte (no system call could take it).
pub fn path(field: &str, p: &str) -> Result<(), Status> {
    if p.len() > MAX_PATH_BYTES {
        return Err(too_long(field, p.len(), MAX_PATH_BYTES));
    }
    if p.contains('\0') {
        return Err(Status::invalid_argument(format!(
            "{field} {} contains a NUL byte",
            shown(p)
        )));
    }
    match p.split('/').find(|c| c.len() > MAX_PATH_COMPONENT_BYTES) {
        Some(c) => Err(Status::invalid_argument(format!(
            "{field} has a component of {} bytes ({}); at most {MAX_PATH_COMPONENT_BYTES} are accepted",
            c.len(),
            shown(c)
        ))),
        None => Ok(()),
    }
}

/// A list of at most [`MAX_ENTRIES`].
fn entries(field: &str, n: usize) -> Result<(), Status> {
    if n > MAX_ENTRIES {
        return Err(Status::invalid_argument(format!(
            "{field} has {n} entries; at most {MAX_ENTRIES} are accepted"
        )));
    }
    Ok(())
}

/// A map of at most [`MAX_ENTRIES`], its keys and values strings.
fn map(field: &str, m: &HashMap<String, String>) -> Result<(), Status> {
    entries(field, m.len())?;
    for (k, v) in m {
        if k.len() > MAX_STRING_BYTES {
            return Err(Status::invalid_argument(format!(
                "{field}: a key of {} bytes ({}); at most {MAX_STRING_BYTES} are accepted",
                k.len(),
                shown(k)
            )));
        }
        string(&format!("{field}[{}]", shown(k)), v)?;
    }
    Ok(())
}

/// A volume capability's strings.
fn capability(field: &str, c: &VolumeCapability) -> Result<(), Status> {
    if let Some(AccessType::Mount(m)) = &c.access_type {
        string(&format!("{field}.mount.fs_type"), &m.fs_type)?;
        string(
            &format!("{field}.mount.volume_mount_group"),
            &m.volume_mount_group,
        )?;
        entries(&format!("{field}.mount.mount_flags"), m.mount_flags.len())?;
        for f in &m.mount_flags {
            string(&format!("{field}.mount.mount_flags"), f)?;
        }
    }
    Ok(())
}

/// A list of volume capabilities.
fn capabilities(field: &str, caps: &[VolumeCapability]) -> Result<(), Status> {
    entries(field, caps.len())?;
    caps.iter().try_for_each(|c| capability(field, c))
}

/// A topology's segments.
fn topology(field: &str, t: &Topology) -> Result<(), Status> {
    map(field, &t.segments)
}

/// Checks each `(field, value)` as a string.
fn strings(fields: &[(&str, &str)]) -> Result<(), Status> {
    fields.iter().try_for_each(|(f, s)| string(f, s))
}

impl Bounded for CreateVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("name", &self.name)?;
        map("parameters", &self.parameters)?;
        map("mutable_parameters", &self.mutable_parameters)?;
        capabilities("volume_capabilities", &self.volume_capabilities)?;
        if let Some(t) = self
            .volume_content_source
            .as_ref()
            .and_then(|s| s.r#type.as_ref())
        {
            use volume_content_source::Type;
            match t {
                Type::Snapshot(s) => string("volume_content_source.snapshot_id", &s.snapshot_id)?,
                Type::Volume(v) => string("volume_content_source.volume_id", &v.volume_id)?,
            }
        }
        if let Some(r) = &self.accessibility_requirements {
            for t in r.requisite.iter().chain(&r.preferred) {
                topology("accessibility_requirements", t)?;
            }
        }
        Ok(())
    }
}

impl Bounded for DeleteVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)
    }
}

impl Bounded for ValidateVolumeCapabilitiesRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        map("volume_context", &self.volume_context)?;
        capabilities("volume_capabilities", &self.volume_capabilities)?;
        map("parameters", &self.parameters)?;
        map("mutable_parameters", &self.mutable_parameters)
    }
}

impl Bounded for ListVolumesRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("starting_token", &self.starting_token)
    }
}

impl Bounded for GetCapacityRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        capabilities("volume_capabilities", &self.volume_capabilities)?;
        map("parameters", &self.parameters)?;
        match &self.accessible_topology {
            Some(t) => topology("accessible_topology", t),
            None => Ok(()),
        }
    }
}

impl Bounded for CreateSnapshotRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        strings(&[
            ("source_volume_id", &self.source_volume_id),
            ("name", &self.name),
        ])?;
        map("parameters", &self.parameters)
    }
}

impl Bounded for DeleteSnapshotRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("snapshot_id", &self.snapshot_id)
    }
}

impl Bounded for ListSnapshotsRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        strings(&[
            ("starting_token", &self.starting_token),
            ("source_volume_id", &self.source_volume_id),
            ("snapshot_id", &self.snapshot_id),
        ])
    }
}

impl Bounded for GetSnapshotRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("snapshot_id", &self.snapshot_id)
    }
}

impl Bounded for ControllerExpandVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        match &self.volume_capability {
            Some(c) => capability("volume_capability", c),
            None => Ok(()),
        }
    }
}

impl Bounded for ControllerGetVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)
    }
}

impl Bounded for ControllerModifyVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        map("mutable_parameters", &self.mutable_parameters)
    }
}

impl Bounded for NodeStageVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        path("staging_target_path", &self.staging_target_path)?;
        map("publish_context", &self.publish_context)?;
        map("volume_context", &self.volume_context)?;
        match &self.volume_capability {
            Some(c) => capability("volume_capability", c),
            None => Ok(()),
        }
    }
}

impl Bounded for NodeUnstageVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        path("staging_target_path", &self.staging_target_path)
    }
}

impl Bounded for NodePublishVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        path("staging_target_path", &self.staging_target_path)?;
        path("target_path", &self.target_path)?;
        map("publish_context", &self.publish_context)?;
        map("volume_context", &self.volume_context)?;
        match &self.volume_capability {
            Some(c) => capability("volume_capability", c),
            None => Ok(()),
        }
    }
}

impl Bounded for NodeUnpublishVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        path("target_path", &self.target_path)
    }
}

impl Bounded for NodeGetVolumeStatsRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        path("volume_path", &self.volume_path)?;
        path("staging_target_path", &self.staging_target_path)
    }
}

impl Bounded for NodeExpandVolumeRequest {
    fn check_bounds(&self) -> Result<(), Status> {
        string("volume_id", &self.volume_id)?;
        path("volume_path", &self.volume_path)?;
        path("staging_target_path", &self.staging_target_path)?;
        match &self.volume_capability {
            Some(c) => capability("volume_capability", c),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oversized_fields_are_invalid_arguments_named_and_cut_short() {
        let big = "k".repeat(16 << 10);
        let req = CreateVolumeRequest {
            name: "pvc-1".into(),
            parameters: HashMap::from([(big.clone(), "v".into())]),
            ..Default::default()
        };
        let e = check(&req).expect_err("16 KiB key");
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().starts_with("parameters: a key of 16384 bytes"));
        assert!(e.message().len() < 300, "{}", e.message());
        let ok = CreateVolumeRequest {
            name: "x".repeat(MAX_STRING_BYTES),
            ..Default::default()
        };
        assert!(check(&ok).is_ok(), "the name's own limit is checked later");
        let id = DeleteVolumeRequest {
            volume_id: big.clone(),
            ..Default::default()
        };
        assert_eq!(
            check(&id).map_err(|e| e.code()),
            Err(tonic::Code::InvalidArgument)
        );
        for (p, ok) in [
            ("/var/lib/kubelet/pods/x".to_owned(), true),
            ("/var/lib/kubelet/a\0b".to_owned(), false),
            (format!("/var/lib/kubelet/{}", "c".repeat(256)), false),
            (format!("/var/lib/kubelet/{}", "c".repeat(255)), true),
            (format!("/{}", "d/".repeat(2100)), false),
        ] {
            let r = NodeUnpublishVolumeRequest {
                volume_id: "vg/v".into(),
                target_path: p.clone(),
            };
            assert_eq!(check(&r).is_ok(), ok, "{}", shown(&p));
        }
    }
}
