//! A conformance suite after kubernetes-csi's csi-sanity (`pkg/sanity` of csi-test): one test
//! per `Describe` block of its identity, controller and node specs, each of its `It` cases
//! checked in order and named in the assertion messages. Cases for capabilities this driver
//! does not advertise (ControllerPublish, volume attribute classes on the node) are left out,
//! as csi-sanity skips them. It runs against the in-memory driver of `common`.

mod common;

use common::*;
use csi_shim::csi::controller_service_capability::{rpc::Type as CtrlCap, Type as CtrlCapType};
use csi_shim::csi::node_service_capability::{rpc::Type as NodeCap, Type as NodeCapType};
use csi_shim::csi::plugin_capability::{service::Type as PluginService, Type as PluginCapType};
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use tonic::Code;

/// The code of a refused call.
fn code<T: std::fmt::Debug>(it: &str, r: Result<tonic::Response<T>, tonic::Status>) -> Code {
    match r {
        Ok(v) => panic!("{it}: expected an error, got {v:?}"),
        Err(e) => e.code(),
    }
}

/// The reply of a call that must succeed.
fn ok<T>(it: &str, r: Result<tonic::Response<T>, tonic::Status>) -> T {
    match r {
        Ok(v) => v.into_inner(),
        Err(e) => panic!("{it}: {e:?}"),
    }
}

#[tokio::test]
async fn identity() {
    let mut d = driver_of(2 << 30).await;
    let it = "GetPluginCapabilities should return appropriate capabilities";
    let caps = ok(
        it,
        d.identity
            .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
            .await,
    );
    let services: Vec<i32> = caps
        .capabilities
        .iter()
        .filter_map(|c| match &c.r#type {
            Some(PluginCapType::Service(s)) => Some(s.r#type),
            _ => None,
        })
        .collect();
    assert!(
        services.contains(&(PluginService::ControllerService as i32)),
        "{it}: {services:?}"
    );
    assert!(
        services.contains(&(PluginService::VolumeAccessibilityConstraints as i32)),
        "{it}"
    );

    let it = "Probe should return appropriate information";
    let probe = ok(it, d.identity.probe(ProbeRequest {}).await);
    assert_ne!(probe.ready, Some(false), "{it}");

    let it = "GetPluginInfo should return appropriate information";
    let info = ok(
        it,
        d.identity.get_plugin_info(GetPluginInfoRequest {}).await,
    );
    assert!(!info.name.is_empty() && info.name.len() <= 63, "{it}");
    assert!(
        info.name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'),
        "{it}: {}",
        info.name
    );
    assert!(!info.vendor_version.is_empty(), "{it}");
}

/// The controller capabilities this driver advertises.
async fn controller_caps(d: &mut Harness) -> Vec<i32> {
    let caps = ok(
        "ControllerGetCapabilities",
        d.controller
            .controller_get_capabilities(ControllerGetCapabilitiesRequest {})
            .await,
    );
    caps.capabilities
        .iter()
        .filter_map(|c| match &c.r#type {
            Some(CtrlCapType::Rpc(r)) => Some(r.r#type),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn controller_get_capabilities_and_get_capacity() {
    let mut d = driver_of(2 << 30).await;
    let it = "ControllerGetCapabilities should return appropriate capabilities";
    let caps = controller_caps(&mut d).await;
    for c in &caps {
        assert!(
            CtrlCap::try_from(*c).is_ok_and(|t| t != CtrlCap::Unknown),
            "{it}: {c}"
        );
    }
    assert!(caps.contains(&(CtrlCap::GetCapacity as i32)), "{it}");

    let it = "GetCapacity should return capacity (no optional values added)";
    let cap = ok(
        it,
        d.controller
            .get_capacity(GetCapacityRequest::default())
            .await,
    );
    assert!(cap.available_capacity > 0, "{it}: {cap:?}");
}

/// A CreateVolume request as csi-sanity makes it: a name, a mount capability, no parameters
/// but the StorageClass's (here `vg`).
fn sanity_create(name: &str, bytes: i64) -> CreateVolumeRequest {
    let mut r = create(name, "linear", bytes, rwo());
    r.parameters.remove("mode");
    if bytes == 0 {
        r.capacity_range = None;
    }
    r
}

async fn delete(d: &mut Harness, id: &str) {
    ok(
        "DeleteVolume",
        d.controller
            .delete_volume(DeleteVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            })
            .await,
    );
}

#[tokio::test]
async fn list_volumes() {
    let mut d = driver_of(2 << 30).await;
    let it = "ListVolumes should return appropriate values (no optional values added)";
    let l = ok(
        it,
        d.controller
            .list_volumes(ListVolumesRequest::default())
            .await,
    );
    assert!(l.entries.is_empty() && l.next_token.is_empty(), "{it}");

    let it = "ListVolumes should fail when an invalid starting_token is passed";
    let r = d
        .controller
        .list_volumes(ListVolumesRequest {
            starting_token: "invalid-token".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::Aborted, "{it}");

    let it = "ListVolumes check the presence of new volumes and absence of deleted ones in the volume list";
    let mut ids = Vec::new();
    for n in ["sanity-a", "sanity-b", "sanity-c"] {
        let v = ok(
            it,
            d.controller.create_volume(sanity_create(n, 4 << 20)).await,
        );
        ids.push(v.volume.expect("volume").volume_id);
    }
    // Two pages of two, then one.
    let first = ok(
        it,
        d.controller
            .list_volumes(ListVolumesRequest {
                max_entries: 2,
                ..Default::default()
            })
            .await,
    );
    assert_eq!(first.entries.len(), 2, "{it}");
    assert!(!first.next_token.is_empty(), "{it}");
    let second = ok(
        it,
        d.controller
            .list_volumes(ListVolumesRequest {
                max_entries: 2,
                starting_token: first.next_token.clone(),
            })
            .await,
    );
    assert_eq!(second.entries.len(), 1, "{it}");
    assert!(second.next_token.is_empty(), "{it}");
    delete(&mut d, &ids[1]).await;
    let after = ok(
        it,
        d.controller
            .list_volumes(ListVolumesRequest::default())
            .await,
    );
    let listed: Vec<String> = after
        .entries
        .iter()
        .filter_map(|e| e.volume.as_ref().map(|v| v.volume_id.clone()))
        .collect();
    assert_eq!(listed, [ids[0].clone(), ids[2].clone()], "{it}");
}

#[tokio::test]
async fn create_volume() {
    let mut d = driver_of(2 << 30).await;
    let c = &mut d.controller;
    let it = "CreateVolume should fail when no name is provided";
    assert_eq!(
        code(it, c.create_volume(sanity_create("", 4 << 20)).await),
        Code::InvalidArgument,
        "{it}"
    );

    let it = "CreateVolume should fail when no volume capabilities are provided";
    let mut r = sanity_create("sanity", 4 << 20);
    r.volume_capabilities.clear();
    assert_eq!(
        code(it, c.create_volume(r).await),
        Code::InvalidArgument,
        "{it}"
    );

    let it = "CreateVolume should return appropriate values SingleNodeWriter NoCapacity";
    let v = ok(it, c.create_volume(sanity_create("sanity-nocap", 0)).await)
        .volume
        .expect("volume");
    assert!(
        v.capacity_bytes > 0 && !v.volume_id.is_empty(),
        "{it}: {v:?}"
    );

    let it = "CreateVolume should return appropriate values SingleNodeWriter WithCapacity";
    let v = ok(
        it,
        c.create_volume(sanity_create("sanity-cap", 8 << 20)).await,
    )
    .volume
    .expect("volume");
    assert!(v.capacity_bytes >= 8 << 20, "{it}: {v:?}");

    let it = "CreateVolume should not fail when requesting to create a volume with already existing name and same capacity";
    let again = ok(
        it,
        c.create_volume(sanity_create("sanity-cap", 8 << 20)).await,
    )
    .volume
    .expect("volume");
    assert_eq!(again.volume_id, v.volume_id, "{it}");

    let it = "CreateVolume should fail when requesting to create a volume with already existing name and different capacity";
    let mut bigger = sanity_create("sanity-cap", 16 << 20);
    bigger.capacity_range = Some(CapacityRange {
        required_bytes: 16 << 20,
        limit_bytes: 16 << 20,
    });
    assert_eq!(
        code(it, c.create_volume(bigger).await),
        Code::AlreadyExists,
        "{it}"
    );

    let it = "CreateVolume should not fail when creating volume with maximum-length name";
    // CSI allows 128 bytes, more than lvm2 takes for an LV name: it gets a hashed one.
    let longest = "x".repeat(128);
    let v = ok(it, c.create_volume(sanity_create(&longest, 4 << 20)).await)
        .volume
        .expect("volume");
    let again = ok(it, c.create_volume(sanity_create(&longest, 4 << 20)).await)
        .volume
        .expect("volume");
    assert_eq!(v.volume_id, again.volume_id, "{it}: idempotent");

    let source = |t: volume_content_source::Type| {
        let mut r = sanity_create("sanity-from", 0);
        r.parameters.insert("mode".into(), "thin".into());
        r.volume_content_source = Some(VolumeContentSource { r#type: Some(t) });
        r
    };
    let mut thin = sanity_create("sanity-thin", 8 << 20);
    thin.parameters.insert("mode".into(), "thin".into());
    ok("thin source", c.create_volume(thin).await);

    let it = "CreateVolume should create volume from an existing source snapshot";
    let snap = ok(
        it,
        c.create_snapshot(CreateSnapshotRequest {
            name: "sanity-snap".into(),
            source_volume_id: "vg/sanity-thin".into(),
            ..Default::default()
        })
        .await,
    )
    .snapshot
    .expect("snapshot");
    let v = ok(
        it,
        c.create_volume(source(volume_content_source::Type::Snapshot(
            volume_content_source::SnapshotSource {
                snapshot_id: snap.snapshot_id.clone(),
            },
        )))
        .await,
    )
    .volume
    .expect("volume");
    assert!(v.content_source.is_some(), "{it}");

    let it = "CreateVolume should fail when the volume source snapshot is not found";
    let mut r = source(volume_content_source::Type::Snapshot(
        volume_content_source::SnapshotSource {
            snapshot_id: "vg/no-such-snapshot".into(),
        },
    ));
    r.name = "sanity-from-2".into();
    assert_eq!(code(it, c.create_volume(r).await), Code::NotFound, "{it}");

    let it = "CreateVolume should create volume from an existing source volume";
    let mut r = source(volume_content_source::Type::Volume(
        volume_content_source::VolumeSource {
            volume_id: "vg/sanity-thin".into(),
        },
    ));
    r.name = "sanity-clone".into();
    let v = ok(it, c.create_volume(r).await).volume.expect("volume");
    assert!(v.content_source.is_some(), "{it}");

    let it = "CreateVolume should fail when the volume source volume is not found";
    let mut r = source(volume_content_source::Type::Volume(
        volume_content_source::VolumeSource {
            volume_id: "vg/no-such-volume".into(),
        },
    ));
    r.name = "sanity-clone-2".into();
    assert_eq!(code(it, c.create_volume(r).await), Code::NotFound, "{it}");
}

#[tokio::test]
async fn delete_volume_and_validate_volume_capabilities() {
    let mut d = driver_of(2 << 30).await;
    let it = "DeleteVolume should fail when no volume id is provided";
    let r = d
        .controller
        .delete_volume(DeleteVolumeRequest::default())
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");

    let it = "DeleteVolume should succeed when an invalid volume id is used";
    for id in ["reallyfakevolumeid", "vg/reallyfakevolumeid"] {
        ok(
            it,
            d.controller
                .delete_volume(DeleteVolumeRequest {
                    volume_id: id.into(),
                    ..Default::default()
                })
                .await,
        );
    }

    let it = "DeleteVolume should return appropriate values (no optional values added)";
    let v = ok(
        it,
        d.controller
            .create_volume(sanity_create("sanity-del", 4 << 20))
            .await,
    )
    .volume
    .expect("volume");
    delete(&mut d, &v.volume_id).await;

    let c = &mut d.controller;
    let it = "ValidateVolumeCapabilities should fail when no volume id is provided";
    let r = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_capabilities: rwo(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");

    let v = ok(
        "create",
        c.create_volume(sanity_create("sanity-vvc", 4 << 20)).await,
    )
    .volume
    .expect("volume");
    let it = "ValidateVolumeCapabilities should fail when no volume capabilities are provided";
    let r = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: v.volume_id.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");

    let it =
        "ValidateVolumeCapabilities should return appropriate values (no optional values added)";
    let r = ok(
        it,
        c.validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: v.volume_id.clone(),
            volume_capabilities: rwo(),
            ..Default::default()
        })
        .await,
    );
    let confirmed = r.confirmed.expect("confirmed");
    assert_eq!(confirmed.volume_capabilities, rwo(), "{it}");

    let it = "ValidateVolumeCapabilities should fail when the requested volume does not exist";
    let r = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: "vg/some-vol-id".into(),
            volume_capabilities: rwo(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
}

#[tokio::test]
async fn snapshots() {
    let mut d = driver_of(2 << 30).await;
    let c = &mut d.controller;
    let mut thin = sanity_create("sanity-src", 8 << 20);
    thin.parameters.insert("mode".into(), "thin".into());
    ok("source volume", c.create_volume(thin.clone()).await);
    thin.name = "sanity-src-2".into();
    ok("second source volume", c.create_volume(thin).await);
    let snap = |name: &str, src: &str| CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: src.into(),
        ..Default::default()
    };

    let it = "CreateSnapshot should fail when no name is provided";
    assert_eq!(
        code(it, c.create_snapshot(snap("", "vg/sanity-src")).await),
        Code::InvalidArgument,
        "{it}"
    );
    let it = "CreateSnapshot should fail when no source volume id is provided";
    assert_eq!(
        code(it, c.create_snapshot(snap("sanity-snap", "")).await),
        Code::InvalidArgument,
        "{it}"
    );
    let it = "CreateSnapshot should succeed when requesting to create a snapshot with already existing name and same source volume ID";
    let first = ok(
        it,
        c.create_snapshot(snap("sanity-snap", "vg/sanity-src"))
            .await,
    );
    let again = ok(
        it,
        c.create_snapshot(snap("sanity-snap", "vg/sanity-src"))
            .await,
    );
    assert_eq!(first.snapshot, again.snapshot, "{it}");
    let it = "CreateSnapshot should fail when requesting to create a snapshot with already existing name and different source volume ID";
    assert_eq!(
        code(
            it,
            c.create_snapshot(snap("sanity-snap", "vg/sanity-src-2"))
                .await
        ),
        Code::AlreadyExists,
        "{it}"
    );
    let it = "CreateSnapshot should succeed when creating snapshot with maximum-length name";
    let longest = "s".repeat(128);
    ok(it, c.create_snapshot(snap(&longest, "vg/sanity-src")).await);

    let it = "ListSnapshots should return appropriate values (no optional values added)";
    let all = ok(it, c.list_snapshots(ListSnapshotsRequest::default()).await);
    assert_eq!(all.entries.len(), 2, "{it}");
    let it = "ListSnapshots should return snapshots that match the specified snapshot id";
    let one = ok(
        it,
        c.list_snapshots(ListSnapshotsRequest {
            snapshot_id: "vg/sanity-snap".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(one.entries.len(), 1, "{it}");
    let it = "ListSnapshots should return empty when the specified snapshot id does not exist";
    let none = ok(
        it,
        c.list_snapshots(ListSnapshotsRequest {
            snapshot_id: "vg/none-such".into(),
            ..Default::default()
        })
        .await,
    );
    assert!(none.entries.is_empty(), "{it}");
    let it = "ListSnapshots should return snapshots that match the specified source volume id";
    let of_src = ok(
        it,
        c.list_snapshots(ListSnapshotsRequest {
            source_volume_id: "vg/sanity-src".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(of_src.entries.len(), 2, "{it}");
    let it = "ListSnapshots should return empty when the specified source volume id does not exist";
    let none = ok(
        it,
        c.list_snapshots(ListSnapshotsRequest {
            source_volume_id: "vg/none-such".into(),
            ..Default::default()
        })
        .await,
    );
    assert!(none.entries.is_empty(), "{it}");
    let it =
        "ListSnapshots should return next token when a limited number of entries are requested";
    let page = ok(
        it,
        c.list_snapshots(ListSnapshotsRequest {
            max_entries: 1,
            ..Default::default()
        })
        .await,
    );
    assert_eq!(page.entries.len(), 1, "{it}");
    assert!(!page.next_token.is_empty(), "{it}");
    let it = "ListSnapshots with an invalid starting token should return an error";
    let r = c
        .list_snapshots(ListSnapshotsRequest {
            starting_token: "invalid-token".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::Aborted, "{it}");

    let it = "GetSnapshot should return snapshot that match the specified snapshot id";
    let got = ok(
        it,
        c.get_snapshot(GetSnapshotRequest {
            snapshot_id: "vg/sanity-snap".into(),
            ..Default::default()
        })
        .await,
    );
    assert_eq!(
        got.snapshot.map(|s| s.snapshot_id),
        Some("vg/sanity-snap".into()),
        "{it}"
    );
    let it = "GetSnapshot should return an error when the specified snapshot id does not exist";
    let r = c
        .get_snapshot(GetSnapshotRequest {
            snapshot_id: "vg/none-such".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");

    let it = "DeleteSnapshot should fail when no snapshot id is provided";
    let r = c.delete_snapshot(DeleteSnapshotRequest::default()).await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "DeleteSnapshot should succeed when an invalid snapshot id is used";
    ok(
        it,
        c.delete_snapshot(DeleteSnapshotRequest {
            snapshot_id: "reallyfakesnapshotid".into(),
            ..Default::default()
        })
        .await,
    );
    let it = "DeleteSnapshot should return appropriate values (no optional values added)";
    ok(
        it,
        c.delete_snapshot(DeleteSnapshotRequest {
            snapshot_id: "vg/sanity-snap".into(),
            ..Default::default()
        })
        .await,
    );
}

#[tokio::test]
async fn expand_volume() {
    let mut d = driver_of(2 << 30).await;
    let c = &mut d.controller;
    let it = "ExpandVolume should fail if no volume id is given";
    let r = c
        .controller_expand_volume(ControllerExpandVolumeRequest {
            capacity_range: Some(CapacityRange {
                required_bytes: 8 << 20,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let v = ok(
        "create",
        c.create_volume(sanity_create("sanity-grow", 4 << 20)).await,
    )
    .volume
    .expect("volume");
    let it = "ExpandVolume should fail if no capacity range is given";
    let r = c
        .controller_expand_volume(ControllerExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "ExpandVolume should work";
    let grown = ok(
        it,
        c.controller_expand_volume(ControllerExpandVolumeRequest {
            volume_id: v.volume_id.clone(),
            capacity_range: Some(CapacityRange {
                required_bytes: 8 << 20,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await,
    );
    assert!(grown.capacity_bytes >= 8 << 20, "{it}");
}

#[tokio::test]
async fn modify_volume() {
    let mut d = driver_of(2 << 30).await;
    assert!(controller_caps(&mut d)
        .await
        .contains(&(CtrlCap::ModifyVolume as i32)));
    let c = &mut d.controller;
    let mutable = || {
        std::collections::HashMap::from([
            ("zero".to_owned(), "false".to_owned()),
            ("discards".to_owned(), "nopassdown".to_owned()),
        ])
    };
    let it = "ModifyVolume should fail when no volume id is provided";
    let r = c
        .controller_modify_volume(ControllerModifyVolumeRequest {
            mutable_parameters: mutable(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "ModifyVolume should fail when the requested volume does not exist";
    let r = c
        .controller_modify_volume(ControllerModifyVolumeRequest {
            volume_id: "vg/sanity-missing".into(),
            mutable_parameters: mutable(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
    let it = "ModifyVolume should modify volume when a valid mutable parameter is specified";
    let mut req = create("sanity-modify", "thin", 8 << 20, rwo());
    req.mutable_parameters = mutable();
    let v = ok(it, c.create_volume(req).await).volume.expect("volume");
    ok(
        it,
        c.controller_modify_volume(ControllerModifyVolumeRequest {
            volume_id: v.volume_id.clone(),
            mutable_parameters: mutable(),
            ..Default::default()
        })
        .await,
    );
    delete(&mut d, &v.volume_id).await;
}

#[tokio::test]
async fn node_get_capabilities_and_info() {
    let mut d = driver_of(2 << 30).await;
    let it = "NodeGetCapabilities should return appropriate capabilities";
    let caps = ok(
        it,
        d.node
            .node_get_capabilities(NodeGetCapabilitiesRequest {})
            .await,
    );
    for c in &caps.capabilities {
        match &c.r#type {
            Some(NodeCapType::Rpc(r)) => assert!(
                NodeCap::try_from(r.r#type).is_ok_and(|t| t != NodeCap::Unknown),
                "{it}: {r:?}"
            ),
            other => panic!("{it}: {other:?}"),
        }
    }
    let it = "NodeGetInfo should return appropriate values";
    let info = ok(it, d.node.node_get_info(NodeGetInfoRequest {}).await);
    assert!(!info.node_id.is_empty(), "{it}");
    assert!(info.max_volumes_per_node >= 0, "{it}");
}

#[tokio::test]
async fn node_stage_publish_and_their_undoing() {
    let mut d = driver_of(2 << 30).await;
    let v = ok(
        "create",
        d.controller
            .create_volume(sanity_create("sanity-node", 8 << 20))
            .await,
    )
    .volume
    .expect("volume");
    let id = v.volume_id.clone();
    let mount = cap(Access::SingleNodeWriter, Some("ext4"));

    let it = "NodeStageVolume should fail when no volume id is provided";
    let r = d
        .node
        .node_stage_volume(stage(&d, "", "st", mount.clone()))
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeStageVolume should fail when no staging target path is provided";
    let mut req = stage(&d, &id, "st", mount.clone());
    req.staging_target_path.clear();
    assert_eq!(
        code(it, d.node.node_stage_volume(req).await),
        Code::InvalidArgument,
        "{it}"
    );
    let it = "NodeStageVolume should fail when no volume capability is provided";
    let mut req = stage(&d, &id, "st", mount.clone());
    req.volume_capability = None;
    assert_eq!(
        code(it, d.node.node_stage_volume(req).await),
        Code::InvalidArgument,
        "{it}"
    );

    let it = "NodePublishVolume should fail when no volume id is provided";
    let r = d
        .node
        .node_publish_volume(publish(&d, "", "st", "pod/t", mount.clone()))
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodePublishVolume should fail when no target path is provided";
    let mut req = publish(&d, &id, "st", "pod/t", mount.clone());
    req.target_path.clear();
    assert_eq!(
        code(it, d.node.node_publish_volume(req).await),
        Code::InvalidArgument,
        "{it}"
    );
    let it = "NodePublishVolume should fail when no volume capability is provided";
    let mut req = publish(&d, &id, "st", "pod/t", mount.clone());
    req.volume_capability = None;
    assert_eq!(
        code(it, d.node.node_publish_volume(req).await),
        Code::InvalidArgument,
        "{it}"
    );

    let it = "NodeUnstageVolume should fail when no volume id is provided";
    let r = d
        .node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            staging_target_path: d.kubelet.join("st").display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeUnstageVolume should fail when no staging target path is provided";
    let r = d
        .node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");

    let it = "NodeUnpublishVolume should fail when no volume id is provided";
    let r = d
        .node
        .node_unpublish_volume(NodeUnpublishVolumeRequest {
            target_path: d.kubelet.join("pod/t").display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeUnpublishVolume should fail when no target path is provided";
    let r = d
        .node
        .node_unpublish_volume(NodeUnpublishVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");

    let it = "volume lifecycle should work (and be idempotent)";
    for _ in 0..2 {
        ok(
            it,
            d.node
                .node_stage_volume(stage(&d, &id, "st", mount.clone()))
                .await,
        );
    }
    for _ in 0..2 {
        ok(
            it,
            d.node
                .node_publish_volume(publish(&d, &id, "st", "pod/t", mount.clone()))
                .await,
        );
    }
    let target = d.kubelet.join("pod/t");

    let it = "NodePublishVolume with single node multi writer capability should fail when volume with single node single writer access mode is already mounted at a different target path";
    let single = cap(Access::SingleNodeSingleWriter, Some("ext4"));
    let r = d
        .node
        .node_publish_volume(publish(&d, &id, "st", "pod/other", single.clone()))
        .await;
    assert_eq!(code(it, r), Code::FailedPrecondition, "{it}");
    // At the one target it is published at, it is fine (idempotent).
    ok(
        it,
        d.node
            .node_publish_volume(publish(&d, &id, "st", "pod/t", single))
            .await,
    );

    let it = "NodeGetVolumeStats should fail when no volume id is provided";
    let r = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeGetVolumeStats should fail when no volume path is provided";
    let r = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeGetVolumeStats should fail when volume is not found";
    let r = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "vg/some-vol-id".into(),
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
    let it = "NodeGetVolumeStats should fail when volume does not exist on the specified path";
    let r = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: id.clone(),
            volume_path: d.kubelet.join("pod/elsewhere").display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
    // A hostile tenant's symlink to the volume's own target: not followed, not the volume.
    let it = "NodeGetVolumeStats through a symlink to the target";
    let link = d.kubelet.join("pod/link");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let r = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: id.clone(),
            volume_path: link.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
    std::fs::remove_file(&link).expect("remove the symlink");

    let it = "NodeExpandVolume should fail when no volume id is provided";
    let r = d
        .node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeExpandVolume should fail when no volume path is provided";
    let r = d
        .node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_id: id.clone(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::InvalidArgument, "{it}");
    let it = "NodeExpandVolume should fail when volume is not found";
    let r = d
        .node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_id: "vg/some-vol-id".into(),
            volume_path: target.display().to_string(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
    let it = "NodeExpandVolume should work if node-expand is called after node-publish";
    ok(
        it,
        d.controller
            .controller_expand_volume(ControllerExpandVolumeRequest {
                volume_id: id.clone(),
                capacity_range: Some(CapacityRange {
                    required_bytes: 12 << 20,
                    limit_bytes: 0,
                }),
                volume_capability: Some(mount.clone()),
                ..Default::default()
            })
            .await,
    );
    ok(
        it,
        d.node
            .node_expand_volume(NodeExpandVolumeRequest {
                volume_id: id.clone(),
                volume_path: target.display().to_string(),
                volume_capability: Some(mount.clone()),
                ..Default::default()
            })
            .await,
    );

    let it = "NodeUnpublishVolume should remove target path";
    for _ in 0..2 {
        ok(
            it,
            d.node
                .node_unpublish_volume(NodeUnpublishVolumeRequest {
                    volume_id: id.clone(),
                    target_path: target.display().to_string(),
                })
                .await,
        );
    }
    assert!(!target.exists(), "{it}");
    for _ in 0..2 {
        ok(
            "volume lifecycle should be idempotent",
            d.node
                .node_unstage_volume(NodeUnstageVolumeRequest {
                    volume_id: id.clone(),
                    staging_target_path: d.kubelet.join("st").display().to_string(),
                })
                .await,
        );
    }
    delete(&mut d, &id).await;
}

/// csi-sanity's node cases with the ids it makes up (`IDGen`): each request that lacks a
/// required field is INVALID_ARGUMENT whatever its volume id names (arguments are checked
/// before the id is looked up), and a volume path that is not even a kubelet path is
/// NOT_FOUND for NodeGetVolumeStats.
#[tokio::test]
async fn node_arguments_are_checked_before_the_volume_id() {
    let mut d = driver_of(2 << 30).await;
    let v = ok(
        "create",
        d.controller
            .create_volume(sanity_create("sanity-args", 8 << 20))
            .await,
    )
    .volume
    .expect("volume");
    let mount = cap(Access::SingleNodeWriter, Some("ext4"));
    for id in ["fake-vol-id-1", "vg/fake-vol-id-2", v.volume_id.as_str()] {
        let it = format!("NodeStageVolume without a staging path ({id})");
        let mut req = stage(&d, id, "st", mount.clone());
        req.staging_target_path.clear();
        let r = d.node.node_stage_volume(req).await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
        let it = format!("NodeStageVolume without a capability ({id})");
        let mut req = stage(&d, id, "st", mount.clone());
        req.volume_capability = None;
        let r = d.node.node_stage_volume(req).await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");

        let it = format!("NodePublishVolume without a target path ({id})");
        let mut req = publish(&d, id, "st", "pod/t", mount.clone());
        req.target_path.clear();
        let r = d.node.node_publish_volume(req).await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
        let it = format!("NodePublishVolume without a staging path ({id})");
        let mut req = publish(&d, id, "st", "pod/t", mount.clone());
        req.staging_target_path.clear();
        let r = d.node.node_publish_volume(req).await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
        let it = format!("NodePublishVolume without a capability ({id})");
        let mut req = publish(&d, id, "st", "pod/t", mount.clone());
        req.volume_capability = None;
        let r = d.node.node_publish_volume(req).await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");

        let it = format!("NodeUnstageVolume without a staging path ({id})");
        let r = d
            .node
            .node_unstage_volume(NodeUnstageVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            })
            .await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
        let it = format!("NodeUnpublishVolume without a target path ({id})");
        let r = d
            .node
            .node_unpublish_volume(NodeUnpublishVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            })
            .await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
        let it = format!("NodeGetVolumeStats without a volume path ({id})");
        let r = d
            .node
            .node_get_volume_stats(NodeGetVolumeStatsRequest {
                volume_id: id.into(),
                ..Default::default()
            })
            .await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
        let it = format!("NodeExpandVolume without a volume path ({id})");
        let r = d
            .node
            .node_expand_volume(NodeExpandVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            })
            .await;
        assert_eq!(code(&it, r), Code::InvalidArgument, "{it}");
    }
    let it = "NodeGetVolumeStats should fail when volume does not exist on the specified path (some/path)";
    let r = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: v.volume_id.clone(),
            volume_path: "some/path".into(),
            ..Default::default()
        })
        .await;
    assert_eq!(code(it, r), Code::NotFound, "{it}");
    delete(&mut d, &v.volume_id).await;
}
