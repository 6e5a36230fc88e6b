//! Thin volumes staged on a node whose kernel has dm-thin (simulated: the fake activation
//! backend with its kernel thin pools): the queued pool messages reach the kernel at
//! NodeStage; while the volume is staged, snapshots, restores and snapshot deletions are
//! asked of the node through the LUN and made there, the filesystem frozen around a cut.

mod common;

use std::time::Duration;

use common::*;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta::dev::BlockDevice;
use lvmeta::session::Session;

/// What the metadata on the LUN says: the pool's transaction id, queue length and tags.
fn pool_state(d: &Harness, pool: &str) -> (u64, usize, Vec<String>, String) {
    let s = Session::new(vec![Box::new(d.lun.clone()) as Box<dyn BlockDevice>]);
    let vg = s.vg("vg").expect("vg");
    let lv = vg.lv(pool).expect("pool");
    let uuid = lvmeta::activate::place(&vg, pool, &[Some("lun".into())])
        .expect("place")
        .dm_uuid;
    let p = lv.pool().expect("a pool");
    (p.transaction_id, p.messages.len(), lv.tags.clone(), uuid)
}

fn snapshot(name: &str, source: &str) -> CreateSnapshotRequest {
    CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: source.into(),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_staged_thin_volume_is_changed_by_its_node() {
    let mut d = driver_thin(Duration::from_secs(10)).await;
    let fs = cap(Access::SingleNodeWriter, Some("ext4"));
    d.controller
        .create_volume(create("src", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin volume");
    assert_eq!(pool_state(&d, "src-pool").1, 1, "create_thin queued");
    // NodeStage brings the pool up: the kernel gets the queue, the metadata drops it.
    d.node
        .node_stage_volume(stage(&d, "vg/src", "st/src", fs.clone()))
        .await
        .expect("stage thin");
    let (tid, queued, _, uuid) = pool_state(&d, "src-pool");
    assert_eq!((tid, queued), (1, 0));
    let kernel = |d: &Harness| d.activation.pool(&uuid, |_| {}).expect("kernel pool");
    assert_eq!(
        kernel(&d).received,
        ["create_thin 1", "set_transaction_id 0 1"]
    );
    // A snapshot while staged: cut by the node, with the filesystem frozen around it.
    let snap = d
        .controller
        .create_snapshot(snapshot("snap1", "vg/src"))
        .await
        .expect("snapshot of a staged volume")
        .into_inner()
        .snapshot
        .expect("snapshot");
    assert!(snap.ready_to_use);
    let staging = d.kubelet.join("st/src");
    assert_eq!(
        d.system.freezes(),
        [(staging.clone(), true), (staging.clone(), false)]
    );
    assert_eq!(
        kernel(&d).received[2..],
        ["create_snap 2 1", "set_transaction_id 1 2"]
    );
    let (tid, queued, tags, _) = pool_state(&d, "src-pool");
    assert_eq!((tid, queued), (2, 0));
    assert!(
        !tags
            .iter()
            .any(|t| t.starts_with(csi_shim::volume::REQUEST_TAG)),
        "{tags:?}"
    );
    // The same call again finds it made (idempotent), and asks nothing more of the node.
    d.controller
        .create_snapshot(snapshot("snap1", "vg/src"))
        .await
        .expect("again");
    assert_eq!(kernel(&d).received.len(), 4);
    // A volume restored from the snapshot goes into the same pool: made by the node too,
    // with nothing frozen (a snapshot does not change).
    let mut restore = create("restored", "thin", 8 * MIB, rwo());
    restore.volume_content_source = Some(VolumeContentSource {
        r#type: Some(volume_content_source::Type::Snapshot(
            volume_content_source::SnapshotSource {
                snapshot_id: "vg/snap1".into(),
            },
        )),
    });
    d.controller
        .create_volume(restore)
        .await
        .expect("restore while the source is staged");
    assert_eq!(kernel(&d).received[4], "create_snap 3 2");
    assert_eq!(d.system.freezes().len(), 2);
    // Deleting the snapshot while staged: the node deletes the thin device.
    d.controller
        .delete_snapshot(DeleteSnapshotRequest {
            snapshot_id: "vg/snap1".into(),
            ..Default::default()
        })
        .await
        .expect("delete a snapshot of a staged volume");
    assert_eq!(kernel(&d).received[6], "delete 2");
    // Unstaged, the controller changes the pool itself and the queue waits for the next
    // activation.
    d.node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: "vg/src".into(),
            staging_target_path: staging.display().to_string(),
        })
        .await
        .expect("unstage");
    d.controller
        .create_snapshot(snapshot("snap2", "vg/src"))
        .await
        .expect("snapshot of an unstaged volume");
    let before = kernel(&d).received.len();
    assert_eq!(pool_state(&d, "src-pool").1, 1);
    d.node
        .node_stage_volume(stage(&d, "vg/src", "st/src", fs))
        .await
        .expect("stage again");
    let received = kernel(&d).received;
    assert_eq!(received.len(), before + 2);
    assert!(received[before].starts_with("create_snap "), "{received:?}");
    assert_eq!(pool_state(&d, "src-pool").1, 0);
    if let Some(stop) = d.stop.take() {
        let _ = stop.send(());
    }
}

#[tokio::test]
async fn a_staged_thin_volume_is_modified_by_its_node() {
    let mut d = driver_thin(Duration::from_secs(10)).await;
    d.controller
        .create_volume(create("tv", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin volume");
    let staging = stage(&d, "vg/tv", "st/tv", cap(Access::SingleNodeWriter, None));
    d.node
        .node_stage_volume(staging.clone())
        .await
        .expect("stage");
    let uuid = pool_state(&d, "tv-pool").3;
    let features = |d: &Harness| d.activation.pool(&uuid, |_| {}).expect("pool").features;
    assert!(
        features(&d).is_empty(),
        "lvm2's defaults: zeroing, passdown"
    );
    // Staged: the node changes the metadata and reloads its kernel pool's table.
    d.controller
        .controller_modify_volume(modify(
            "vg/tv",
            &[("zero", "false"), ("discards", "nopassdown")],
        ))
        .await
        .expect("modify a staged volume");
    assert_eq!(features(&d), ["skip_block_zeroing", "no_discard_passdown"]);
    let (_, _, tags, _) = pool_state(&d, "tv-pool");
    assert!(
        !tags
            .iter()
            .any(|t| t.starts_with(csi_shim::volume::REQUEST_TAG)),
        "{tags:?}"
    );
    // The kernel cannot switch a live pool's discard support.
    let e = d
        .controller
        .controller_modify_volume(modify("vg/tv", &[("discards", "ignore")]))
        .await
        .expect_err("live pool");
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("unstage"), "{e:?}");
    d.node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: "vg/tv".into(),
            staging_target_path: d.kubelet.join("st/tv").display().to_string(),
        })
        .await
        .expect("unstage");
    d.controller
        .controller_modify_volume(modify("vg/tv", &[("discards", "ignore")]))
        .await
        .expect("unstaged");
    d.node
        .node_stage_volume(staging)
        .await
        .expect("stage again");
    assert_eq!(features(&d), ["skip_block_zeroing", "ignore_discard"]);
    if let Some(stop) = d.stop.take() {
        let _ = stop.send(());
    }
}

#[tokio::test]
async fn a_staged_thin_volume_reports_its_pools_health() {
    let mut d = driver_thin(Duration::from_secs(10)).await;
    d.controller
        .create_volume(create("hv", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin volume");
    d.node
        .node_stage_volume(stage(
            &d,
            "vg/hv",
            "st/hv",
            cap(Access::SingleNodeWriter, Some("ext4")),
        ))
        .await
        .expect("stage");
    let uuid = pool_state(&d, "hv-pool").3;
    let request = NodeGetVolumeStatsRequest {
        volume_id: "vg/hv".into(),
        volume_path: d.kubelet.join("st/hv").display().to_string(),
        ..Default::default()
    };
    let mut conditions = Vec::new();
    for status in [
        None,
        Some("1 10/1024 1024/1024 - out_of_data_space - - - 1024"),
        Some("1 10/1024 5/1024 - ro discard_passdown - needs_check 1024"),
        Some("Fail"),
    ] {
        d.activation
            .pool(&uuid, |p| p.status = status.map(str::to_owned))
            .expect("kernel pool");
        let c = d
            .node
            .node_get_volume_stats(request.clone())
            .await
            .expect("stats")
            .into_inner()
            .volume_condition
            .expect("condition");
        conditions.push((c.abnormal, c.message));
    }
    let [healthy, full, read_only, failed] = &conditions[..] else {
        panic!("{conditions:?}");
    };
    assert!(
        !healthy.0 && healthy.1 == "mounted; thin pool vg/hv-pool: data 0% used, metadata 0% used",
        "{healthy:?}"
    );
    assert!(full.0 && full.1.contains("out of data space") && full.1.contains("100% used"));
    assert!(
        read_only.0 && read_only.1.contains("read-only"),
        "{read_only:?}"
    );
    assert!(failed.0 && failed.1.contains("failed"), "{failed:?}");
    if let Some(stop) = d.stop.take() {
        let _ = stop.send(());
    }
}
