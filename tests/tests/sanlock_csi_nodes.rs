//! Privileged, end to end: two simulated nodes (each its own sanlock daemon and host id, each
//! a `csi-shim` process serving Controller and Node on its own socket) on one loop-device LUN
//! holding a shared VG. Volumes are created, staged, published, written, read back (also by
//! the other node after a hand-over), expanded online and deleted through gRPC; an RWO volume
//! staged on one node is refused on the other (its LV lease), an RWX block volume is shared
//! by both (the lease shared), thin volumes are staged (with device-mapper) or refused naming
//! the missing kernel feature (without), a
//! volume staged on a node is not deleted, a linear clone copies its source (refused while
//! the source is staged for writing), a node plugin restarted with a volume staged keeps
//! it protected (its lease left to the host as a sanlock orphan, released by the new process
//! at unstage), and stock lvm2 finds the VG clean afterwards.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::time::{Duration, Instant};

use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta_tests::csi_hosts::*;
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::{privileged, UnbindOver};
use tonic::Code;

#[test]
fn sanlock_csi_nodes_share_exclude_and_hand_over_volumes() {
    let tools = [
        "losetup",
        "sanlock",
        "mkfs.ext4",
        "mkfs.xfs",
        "blkid",
        "mount",
        "lvs",
        "vgck",
    ];
    if !privileged(
        "sanlock_csi_nodes_share_exclude_and_hand_over_volumes",
        &tools,
    ) {
        return;
    }
    let mut sb = Sandbox::new(&[1200 << 20], 512);
    let lun = sb.loops[0].clone();
    // Node B's own path to the LUN: nodes on one kernel must not share device paths.
    let lun_b = sb.another_path(0);
    let dir = tempfile::tempdir().expect("dir");
    let unbind = (UnbindOver(lun.clone()), UnbindOver(lun_b.clone()));
    let s2 = sanlock(&dir.path().join("h2"), "csi-node-2");
    let s3 = sanlock(&dir.path().join("h3"), "csi-node-3");
    lvmeta_as(
        &lun,
        &dir.path().join("h2"),
        2,
        &["vgcreate", "--shared", "-s", "4m", "vg", &lun],
    );
    let start3 = {
        let (lun, run) = (lun_b.clone(), dir.path().join("h3"));
        std::thread::spawn(move || lvmeta_as(&lun, &run, 3, &["vgchange", "--lockstart", "vg"]))
    };
    lvmeta_as(
        &lun,
        &dir.path().join("h2"),
        2,
        &["vgchange", "--lockstart", "vg"],
    );
    start3.join().expect("lockstart host 3");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut a = node_host(dir.path(), &lun, 2, s2).await;
        let mut b = node_host(dir.path(), &lun_b, 3, s3).await;
        for h in [&mut a, &mut b] {
            let ready = h
                .identity
                .probe(ProbeRequest {})
                .await
                .expect("probe")
                .into_inner();
            assert_eq!(ready.ready, Some(true));
            let info = h
                .node
                .node_get_info(NodeGetInfoRequest {})
                .await
                .expect("info")
                .into_inner();
            let segments = info.accessible_topology.expect("topology").segments;
            assert_eq!(
                segments
                    .get("topology.lvmeta.csi/vg-vg")
                    .map(String::as_str),
                Some("yes")
            );
        }
        let rwo4 = cap(Access::SingleNodeWriter, Some("ext4"));
        let rwx_block = cap(Access::MultiNodeMultiWriter, None);
        let rwo_xfs = cap(Access::SingleNodeWriter, Some("xfs"));
        let ext4 = create(&mut a, "pvc-ext4", "linear", 64 * MIB, &rwo4).await;
        let blk = create(&mut b, "pvc-block", "linear", 16 * MIB, &rwx_block).await;
        let thin = create(&mut a, "pvc-thin", "thin", 64 * MIB, &rwo4).await;
        // Last, so it can grow in one piece (the loop backend needs that).
        let xfs = create(&mut b, "pvc-xfs", "linear", 320 * MIB, &rwo_xfs).await;

        // ext4 on node A: formatted, mounted, written.
        stage(&mut a, &ext4, &rwo4).await.expect("stage ext4 on A");
        let target = publish(&mut a, &ext4, "pod-a", &rwo4).await;
        std::fs::write(target.join("hello.txt"), b"written on node A\n").expect("write");
        assert_eq!(
            std::fs::read(target.join("hello.txt")).expect("read"),
            b"written on node A\n"
        );
        // RWO: node B is refused while A holds the LV lease.
        let e = stage(&mut b, &ext4, &rwo4)
            .await
            .expect_err("RWO on a second node");
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
        assert!(
            e.message().contains("held by another node"),
            "{}",
            e.message()
        );

        // RWX block: both nodes stage it (lease shared); A writes, B reads.
        stage(&mut a, &blk, &rwx_block)
            .await
            .expect("stage block on A");
        stage(&mut b, &blk, &rwx_block)
            .await
            .expect("stage block on B");
        let dev_a = publish(&mut a, &blk, "pod-a", &rwx_block).await;
        let dev_b = publish(&mut b, &blk, "pod-b", &rwx_block).await;
        let block: Vec<u8> = (0..65536u32).map(|i| (i % 251) as u8).collect();
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(&dev_a)
                .expect("dev A");
            f.seek(SeekFrom::Start(1 << 20)).expect("seek");
            f.write_all(&block).expect("write block");
            f.sync_all().expect("sync");
        }
        let mut back = vec![0u8; block.len()];
        {
            let mut f = std::fs::File::open(&dev_b).expect("dev B");
            f.seek(SeekFrom::Start(1 << 20)).expect("seek");
            f.read_exact(&mut back).expect("read block");
        }
        assert_eq!(back, block, "node B does not see node A's block writes");

        // Thin volumes need dm-thin-pool: staged where the kernel has it (the VM stage),
        // refused naming it elsewhere.
        match stage(&mut a, &thin, &rwo4).await {
            Ok(()) if lvmeta_tests::has_device_mapper() => {
                let (staging, _) = paths(&a, &thin, "");
                a.node
                    .node_unstage_volume(NodeUnstageVolumeRequest {
                        volume_id: thin.clone(),
                        staging_target_path: staging,
                    })
                    .await
                    .expect("unstage thin");
            }
            Err(e) if !lvmeta_tests::has_device_mapper() => {
                assert_eq!(e.code(), Code::FailedPrecondition);
                assert!(e.message().contains("dm-thin-pool"), "{}", e.message());
            }
            other => panic!("thin staging: {other:?}"),
        }

        // xfs on node B, grown online.
        stage(&mut b, &xfs, &rwo_xfs).await.expect("stage xfs on B");
        let xt = publish(&mut b, &xfs, "pod-b", &rwo_xfs).await;
        std::fs::write(xt.join("data"), vec![7u8; 1 << 20]).expect("write xfs");
        let before = fs_bytes(&mut b, &xfs, &xt).await;
        let grown = b
            .controller
            .controller_expand_volume(ControllerExpandVolumeRequest {
                volume_id: xfs.clone(),
                capacity_range: Some(CapacityRange {
                    required_bytes: 400 * MIB,
                    limit_bytes: 0,
                }),
                volume_capability: Some(rwo_xfs.clone()),
                ..Default::default()
            })
            .await
            .expect("ControllerExpandVolume")
            .into_inner();
        assert!(grown.node_expansion_required);
        b.node
            .node_expand_volume(NodeExpandVolumeRequest {
                volume_id: xfs.clone(),
                volume_path: xt.display().to_string(),
                ..Default::default()
            })
            .await
            .expect("NodeExpandVolume");
        let after = fs_bytes(&mut b, &xfs, &xt).await;
        assert!(
            after > before + 60 * MIB,
            "xfs did not grow: {before} -> {after}"
        );
        assert_eq!(
            std::fs::read(xt.join("data")).expect("read xfs").len(),
            1 << 20
        );

        // Node A's plugin restarts while the ext4 volume is staged and published: the mount
        // stays, and host 2 keeps the LV lease as a sanlock orphan, so B is still refused.
        restart_shim(&mut a, dir.path(), &lun, 2).await;
        assert_eq!(
            std::fs::read(target.join("hello.txt")).expect("read after restart"),
            b"written on node A\n"
        );
        let e = stage(&mut b, &ext4, &rwo4)
            .await
            .expect_err("RWO while A's orphan lease holds it");
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());

        // Hand-over: A (its new plugin process, which releases the orphan) lets go of the
        // ext4 volume; B stages it and reads A's file.
        unpublish_unstage(&mut a, &ext4, "pod-a").await;
        stage(&mut b, &ext4, &rwo4)
            .await
            .expect("stage ext4 on B after A");
        let tb = publish(&mut b, &ext4, "pod-b", &rwo4).await;
        assert_eq!(
            std::fs::read(tb.join("hello.txt")).expect("read on B"),
            b"written on node A\n"
        );

        // A linear clone copies its source: refused while the source is staged for writing.
        let mut clone_req = CreateVolumeRequest {
            name: "pvc-ext4-clone".into(),
            capacity_range: Some(CapacityRange {
                required_bytes: 64 * MIB,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![rwo4.clone()],
            parameters: HashMap::from([
                ("vg".to_owned(), "vg".to_owned()),
                ("mode".to_owned(), "linear".to_owned()),
            ]),
            volume_content_source: Some(VolumeContentSource {
                r#type: Some(volume_content_source::Type::Volume(
                    volume_content_source::VolumeSource {
                        volume_id: ext4.clone(),
                    },
                )),
            }),
            ..Default::default()
        };
        let e = a
            .controller
            .create_volume(clone_req.clone())
            .await
            .expect_err("clone of a volume staged for writing");
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());

        // A volume staged on a node is not deleted (its LV lease is held there).
        let e = a
            .controller
            .delete_volume(DeleteVolumeRequest {
                volume_id: ext4.clone(),
                ..Default::default()
            })
            .await
            .expect_err("delete while staged on B");
        assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
        // Its lease is held; the simulated nodes share one kernel, so node A also sees
        // node B's device over the volume's extents.
        let m = e.message();
        assert!(
            m.contains("is active") || m.contains("in use on this host"),
            "{m}"
        );

        // Undo everything (twice: idempotent), delete, shut down cleanly.
        for _ in 0..2 {
            unpublish_unstage(&mut b, &ext4, "pod-b").await;
            unpublish_unstage(&mut b, &xfs, "pod-b").await;
            unpublish_unstage(&mut b, &blk, "pod-b").await;
            unpublish_unstage(&mut a, &blk, "pod-a").await;
        }
        // Unstaged, the ext4 volume is cloned (on node A's controller); node A stages the
        // clone and finds node A's file in it.
        clone_req.name = "pvc-ext4-copy".into();
        let copy = a
            .controller
            .create_volume(clone_req)
            .await
            .expect("linear clone")
            .into_inner()
            .volume
            .expect("volume")
            .volume_id;
        stage(&mut a, &copy, &rwo4).await.expect("stage the clone");
        let tc = publish(&mut a, &copy, "pod-a", &rwo4).await;
        assert_eq!(
            std::fs::read(tc.join("hello.txt")).expect("read the clone"),
            b"written on node A\n"
        );
        unpublish_unstage(&mut a, &copy, "pod-a").await;
        for id in [&ext4, &blk, &thin, &xfs, &copy] {
            a.controller
                .delete_volume(DeleteVolumeRequest {
                    volume_id: id.clone(),
                    ..Default::default()
                })
                .await
                .expect("DeleteVolume");
        }
        // Node A's wiper erases the deleted volumes' extents and frees them.
        let t = Instant::now();
        loop {
            let out = sb.lvm_ok(
                &["lvs", "--noheadings", "-a", "-o", "lv_name", "vg"],
                Some("global/use_lvmlockd=1"),
            );
            let names = String::from_utf8_lossy(&out.stdout).into_owned();
            if !names.contains(csi_shim::volume::WIPE_PREFIX) {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(60), "not wiped: {names}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        for h in [&mut a, &mut b] {
            stop_shim(h).await;
            lvmeta_tests::assert_nothing_mounted_under(&h.kubelet);
        }
    });
    drop(unbind);
    // Stock lvm2 finds the VG clean, only its lvmlock LV left.
    let lockd = "global/use_lvmlockd=1";
    sb.vgck_clean("vg", Some(lockd));
    let out = sb.lvm_ok(
        &["lvs", "--noheadings", "-a", "-o", "lv_name", "vg"],
        Some(lockd),
    );
    let names = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        names.split_whitespace().collect::<Vec<_>>(),
        ["[lvmlock]"],
        "{names}"
    );
}
