//! NodeStage + NodeUnstage of block volumes with device-mapper, side by side with stock
//! lvm2's `lvchange -ay` + `lvchange -an` of LVs of the same shapes in the same VG (udev
//! off for both), on a loop-device LUN:
//! - `node-stage-unstage/linear` and `/thin`: through the gRPC socket of a `csi-shim`
//!   process (a local VG; activation, the node's checks, deactivation);
//! - `lvm2-lvchange/linear` and `/thin`: lvm2 activating and deactivating an LV it made.
//!
//! Needs root, lvm2, sanlock and a kernel with device-mapper and dm-thin-pool (prints SKIPPED
//! otherwise), so it runs in the VM of `tests/vm/run` (docs/benchmarks.md):
//! `cargo bench -p lvmeta-benches --bench node --no-run`, then the bench binary there.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, Criterion};
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::NodeUnstageVolumeRequest;
use lvmeta_tests::csi_hosts::{cap, create, lvmeta_as, node_host, paths, sanlock, MIB};
use lvmeta_tests::sandbox::{Sandbox, LVM2_ACTIVE as ACTIVE};

fn ready() -> bool {
    lvmeta_tests::privileged("node benchmark", &["losetup", "lvchange", "sanlock"])
        && lvmeta_tests::device_mapper("node benchmark")
}

fn node(c: &mut Criterion) {
    if !ready() {
        return;
    }
    let sb = Sandbox::new(&[1024 << 20], 512);
    let lun = sb.loops[0].clone();
    let dir = tempfile::tempdir().expect("dir");
    let run = dir.path().join("h1");
    let daemon = sanlock(&run, "node-bench");
    lvmeta_as(&lun, &run, 1, &["vgcreate", "-s", "4m", "vg", &lun]);
    // lvm2's own LVs of the same shapes, inactive.
    for args in [
        &["lvcreate", "-an", "-Zn", "-L", "64m", "-n", "lvm-lin", "vg"][..],
        &[
            "lvcreate",
            "-an",
            "-Zn",
            "--type",
            "thin-pool",
            "-L",
            "64m",
            "-n",
            "lvm-pool",
            "vg",
        ],
        &[
            "lvcreate",
            "-an",
            "-V",
            "64m",
            "--thinpool",
            "lvm-pool",
            "-n",
            "lvm-thin",
            "vg",
        ],
    ] {
        sb.lvm_ok(args, Some(ACTIVE));
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut h = rt.block_on(node_host(dir.path(), &lun, 1, daemon));
    let block = cap(Access::SingleNodeWriter, None);
    let vols: Vec<(&str, String)> = ["linear", "thin"]
        .into_iter()
        .map(|mode| {
            let id = rt.block_on(create(
                &mut h,
                &format!("pvc-{mode}"),
                mode,
                64 * MIB,
                &block,
            ));
            (mode, id)
        })
        .collect();

    let mut g = c.benchmark_group("node-stage-unstage");
    g.sample_size(20);
    for (mode, id) in &vols {
        let (staging, _) = paths(&h, id, "");
        g.bench_function(*mode, |b| {
            b.iter(|| {
                rt.block_on(async {
                    h.node
                        .node_stage_volume(csi_shim::testing::stage_request(
                            id,
                            &staging,
                            block.clone(),
                        ))
                        .await
                        .expect("NodeStageVolume");
                    h.node
                        .node_unstage_volume(NodeUnstageVolumeRequest {
                            volume_id: id.clone(),
                            staging_target_path: staging.clone(),
                        })
                        .await
                        .expect("NodeUnstageVolume");
                })
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("lvm2-lvchange");
    g.sample_size(20);
    for (mode, lv) in [("linear", "vg/lvm-lin"), ("thin", "vg/lvm-thin")] {
        g.bench_function(mode, |b| {
            b.iter(|| {
                sb.lvm_ok(&["lvchange", "-ay", "-K", lv], Some(ACTIVE));
                sb.lvm_ok(&["lvchange", "-an", lv], Some(ACTIVE));
            })
        });
    }
    g.finish();
    // The pool lvm2 left up with its thin LV's deactivation, then the shim.
    sb.lvm_ok(&["lvchange", "-an", "vg/lvm-pool"], Some(ACTIVE));
    rt.block_on(lvmeta_tests::csi_hosts::stop_shim(&mut h));
}

criterion_group!(benches, node);
criterion_main!(benches);
