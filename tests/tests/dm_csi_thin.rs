//! Needs root, sanlock and a kernel with device-mapper and dm-thin-pool (CI's VM stage,
//! `tests/vm/run`; elsewhere it skips with a message): thin volumes end to end through the
//! gRPC socket of one `csi-shim` host, on a shared VG and on a local one. A staged ext4 thin volume is written,
//! snapshotted while staged (the node cuts it in its kernel pool), overwritten, and a volume
//! restored from the snapshot shows the data at the cut, not after; a clone shows the data
//! at its call; the volume grows online (pool and thin LV in the kernel, then the
//! filesystem), its pool settings change while staged, a restore is deleted while its
//! source stays staged (the node serves it); xfs and block thin volumes keep their data.
//! After every step the kernel pool's transaction id equals the metadata's, and stock lvm2
//! finds the VG clean with lvmeta's reports.

use std::collections::HashMap;
use std::process::Command;

use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta_tests::csi_hosts::*;
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::{privileged, read_at, write_at, UnbindOver};
use tonic::Code;

/// lvm2 reading the shared VG (no lvmlockd running: reads only).
const LOCKD: &str = "global/use_lvmlockd=1";

/// The kernel's transaction id of the pool of thin volume `lv`, `None` when it is not up.
fn kernel_tid(lv: &str) -> Option<u64> {
    lvmeta_tests::kernel_pool_tid(&format!("vg-{}--pool-tpool", lv.replace('-', "--")))
}

/// Checks the VG with stock lvm2 and, where the pool of `lv` is up, that the kernel's
/// transaction id is the metadata's.
fn judge(sb: &Sandbox, what: &str, lv: &str) {
    sb.vgck_clean("vg", Some(LOCKD));
    sb.reports_match(what, Some(LOCKD));
    if let Some(k) = kernel_tid(lv) {
        let pool = format!("vg/{lv}-pool");
        let out = sb.lvm_ok(
            &["lvs", "--noheadings", "-o", "transaction_id", &pool],
            Some(LOCKD),
        );
        let meta = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert_eq!(meta, k.to_string(), "{what}: transaction id of {pool}");
    }
}

/// A MiB of bytes no other call gives (`seed`).
fn pattern(seed: u8) -> Vec<u8> {
    (0..MIB as usize)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

async fn create_from(h: &mut NodeHost, name: &str, source: volume_content_source::Type) -> String {
    let c = cap(Access::SingleNodeWriter, Some("ext4"));
    h.controller
        .create_volume(create_request(name, "thin", 64 * MIB, &c, Some(source)))
        .await
        .unwrap_or_else(|e| panic!("CreateVolume {name}: {e}"))
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

async fn delete(h: &mut NodeHost, id: &str) -> Result<(), tonic::Status> {
    h.controller
        .delete_volume(DeleteVolumeRequest {
            volume_id: id.into(),
            ..Default::default()
        })
        .await
        .map(drop)
}

#[test]
fn thin_volumes_end_to_end_on_device_mapper_shared_vg() {
    scenario("thin_volumes_end_to_end_on_device_mapper_shared_vg", true);
}

#[test]
fn thin_volumes_end_to_end_on_device_mapper_local_vg() {
    scenario("thin_volumes_end_to_end_on_device_mapper_local_vg", false);
}

/// The steps of the module documentation, on a shared VG (sanlock leases) or a local one.
fn scenario(test: &str, shared: bool) {
    let tools = [
        "losetup",
        "sanlock",
        "mkfs.ext4",
        "mkfs.xfs",
        "dmsetup",
        "lvs",
        "vgck",
    ];
    if !privileged(test, &tools) || !lvmeta_tests::device_mapper(test) {
        return;
    }
    let sb = Sandbox::new(&[1200 << 20], 512);
    let lun = sb.loops[0].clone();
    let dir = tempfile::tempdir().expect("dir");
    let unbind = UnbindOver(lun.clone());
    let run = dir.path().join("h2");
    let s2 = sanlock(&run, "csi-thin-2");
    if shared {
        let vgcreate = ["vgcreate", "--shared", "-s", "4m", "vg", &lun];
        lvmeta_as(&lun, &run, 2, &vgcreate);
        lvmeta_as(&lun, &run, 2, &["vgchange", "--lockstart", "vg"]);
    } else {
        lvmeta_as(&lun, &run, 2, &["vgcreate", "-s", "4m", "vg", &lun]);
    }

    let _log = LogOnPanic(run.join("csi-shim.log"));
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut a = node_host(dir.path(), &lun, 2, s2).await;
        let rwo4 = cap(Access::SingleNodeWriter, Some("ext4"));
        let src = create(&mut a, "pvc-src", "thin", 64 * MIB, &rwo4).await;
        stage(&mut a, &src, &rwo4).await.expect("stage thin ext4");
        let t = publish(&mut a, &src, "pod-a", &rwo4).await;
        let file = t.join("data.bin");
        let (before, after) = (pattern(1), pattern(2));
        write_at(&file, 0, &before);
        judge(&sb, "staged thin ext4", "pvc-src");

        // A snapshot while staged, then 4 KiB of the file overwritten: the snapshot keeps
        // the bytes of the cut.
        a.controller
            .create_snapshot(CreateSnapshotRequest {
                source_volume_id: src.clone(),
                name: "snap-1".into(),
                ..Default::default()
            })
            .await
            .expect("CreateSnapshot of a staged thin volume");
        write_at(&file, 0, &after[..4096]);
        judge(&sb, "snapshot while staged", "pvc-src");
        let restored = create_from(
            &mut a,
            "pvc-restored",
            volume_content_source::Type::Snapshot(volume_content_source::SnapshotSource {
                snapshot_id: "vg/snap-1".into(),
            }),
        )
        .await;
        stage(&mut a, &restored, &rwo4)
            .await
            .expect("stage restore");
        let tr = publish(&mut a, &restored, "pod-r", &rwo4).await;
        assert!(
            read_at(&tr.join("data.bin"), 0, before.len()) == before,
            "the restored volume does not show the data at the snapshot's cut"
        );
        // A clone of the staged volume: its data at the call, overwrite included.
        let clone = create_from(
            &mut a,
            "pvc-clone",
            volume_content_source::Type::Volume(volume_content_source::VolumeSource {
                volume_id: src.clone(),
            }),
        )
        .await;
        stage(&mut a, &clone, &rwo4).await.expect("stage clone");
        let tc = publish(&mut a, &clone, "pod-c", &rwo4).await;
        assert!(read_at(&tc.join("data.bin"), 0, 4096) == after[..4096]);
        assert!(read_at(&tc.join("data.bin"), 4096, 4096) == before[4096..8192]);
        judge(&sb, "restore and clone staged", "pvc-src");

        // A staged restore is not deleted; unstaged, it is, while its source (same pool)
        // stays staged: the node deletes it as the pool's holder.
        let e = delete(&mut a, &restored).await.expect_err("staged restore");
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
        unpublish_unstage(&mut a, &restored, "pod-r").await;
        delete(&mut a, &restored)
            .await
            .expect("delete a restore while its source is staged");
        unpublish_unstage(&mut a, &clone, "pod-c").await;
        delete(&mut a, &clone).await.expect("delete the clone");
        judge(&sb, "restore and clone deleted", "pvc-src");

        // Online growth: pool and thin LV in the kernel, then ext4.
        let total = fs_bytes(&mut a, &src, &t).await;
        a.controller
            .controller_expand_volume(ControllerExpandVolumeRequest {
                volume_id: src.clone(),
                capacity_range: Some(CapacityRange {
                    required_bytes: 128 * MIB,
                    limit_bytes: 0,
                }),
                volume_capability: Some(rwo4.clone()),
                ..Default::default()
            })
            .await
            .expect("ControllerExpandVolume");
        let (staging, _) = paths(&a, &src, "");
        a.node
            .node_expand_volume(NodeExpandVolumeRequest {
                volume_id: src.clone(),
                volume_path: t.display().to_string(),
                staging_target_path: staging,
                capacity_range: Some(CapacityRange {
                    required_bytes: 128 * MIB,
                    limit_bytes: 0,
                }),
                volume_capability: Some(rwo4.clone()),
                ..Default::default()
            })
            .await
            .expect("NodeExpandVolume");
        let grown = fs_bytes(&mut a, &src, &t).await;
        assert!(grown > total + 48 * MIB, "{total} -> {grown}");
        judge(&sb, "grown online", "pvc-src");

        // New pool settings while staged: the node reloads its kernel pool.
        a.controller
            .controller_modify_volume(ControllerModifyVolumeRequest {
                volume_id: src.clone(),
                mutable_parameters: HashMap::from([
                    ("zero".to_owned(), "false".to_owned()),
                    ("discards".to_owned(), "nopassdown".to_owned()),
                ]),
                ..Default::default()
            })
            .await
            .expect("ControllerModifyVolume of a staged thin volume");
        let table = Command::new("dmsetup")
            .args(["table", "vg-pvc--src--pool-tpool"])
            .output()
            .expect("dmsetup table");
        let table = String::from_utf8_lossy(&table.stdout);
        assert!(
            table.contains("skip_block_zeroing") && table.contains("no_discard_passdown"),
            "{table}"
        );
        judge(&sb, "modified while staged", "pvc-src");
        assert!(read_at(&file, 4096, 4096) == before[4096..8192]);
        unpublish_unstage(&mut a, &src, "pod-a").await;

        // xfs and block thin volumes keep their data across unstage and stage.
        let rwo_xfs = cap(Access::SingleNodeWriter, Some("xfs"));
        let block = cap(Access::SingleNodeWriter, None);
        let xfs = create(&mut a, "pvc-xfs", "thin", 320 * MIB, &rwo_xfs).await;
        let blk = create(&mut a, "pvc-blk", "thin", 16 * MIB, &block).await;
        for (id, c, seed) in [(&xfs, &rwo_xfs, 3u8), (&blk, &block, 4u8)] {
            for round in 0..2 {
                stage(&mut a, id, c).await.expect("stage");
                let target = publish(&mut a, id, "pod-x", c).await;
                let at = if c == &block {
                    target.clone()
                } else {
                    target.join("data.bin")
                };
                if round == 0 {
                    write_at(&at, 8 * MIB as u64, &pattern(seed));
                } else {
                    assert!(read_at(&at, 8 * MIB as u64, MIB as usize) == pattern(seed));
                }
                unpublish_unstage(&mut a, id, "pod-x").await;
            }
        }
        judge(&sb, "xfs and block", "pvc-xfs");
        for id in [&src, &xfs, &blk] {
            delete(&mut a, id).await.expect("DeleteVolume");
        }
        a.controller
            .delete_snapshot(DeleteSnapshotRequest {
                snapshot_id: "vg/snap-1".into(),
                ..Default::default()
            })
            .await
            .expect("DeleteSnapshot");
        stop_shim(&mut a).await;
        lvmeta_tests::assert_nothing_mounted_under(&a.kubelet);
    });
    drop(unbind);
    // No device-mapper device of the VG is left, and stock lvm2 finds it clean.
    let out = Command::new("dmsetup")
        .args(["ls"])
        .output()
        .expect("dmsetup");
    let left = String::from_utf8_lossy(&out.stdout);
    assert!(!left.contains("vg-"), "devices left: {left}");
    sb.vgck_clean("vg", Some(LOCKD));
}
