//! A shared VG's LV create + remove with leases, beside stock lvm2 + lvmlockd on the same VG:
//! lvmeta (VG lease acquire, LV lease init, commit, value block, release; then the same for the
//! removal) against `lvcreate -an -Zn` + `lvremove -f` through lvmlockd; the same with the VG
//! lease kept between changes (csi-shim's default); and CreateVolume + DeleteVolume round
//! trips through csi-shim's gRPC socket (issue #5), without and with erasure of the deleted
//! volume (csi-shim's default; its wiper works beside the calls).
//!
//! Needs the daemons `benches/lockd-bench.sh` starts (run that script as root; it passes the
//! places in LVMETA_BENCH_*); prints SKIPPED otherwise.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::lease::{sanlock::SanlockLeases, Host};
use lvmeta::session::Session;

fn bench(c: &mut Criterion) {
    let (Ok(lun), Ok(h1), Ok(h2)) = (
        std::env::var("LVMETA_BENCH_LUN"),
        std::env::var("LVMETA_BENCH_H1"),
        std::env::var("LVMETA_BENCH_H2"),
    ) else {
        eprintln!(
            "SKIPPED lease benchmark: run benches/lockd-bench.sh (root) to start the daemons"
        );
        return;
    };
    let manager = Arc::new(SanlockLeases::new());
    let session = |idle, max_hold| {
        let dev = FileDevice::open_rw(std::path::Path::new(&lun)).expect("open LUN");
        let host =
            Host::new(manager.clone(), 2, 2, Duration::from_secs(60)).with_linger(idle, max_hold);
        Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>])
            .with_lock_dir(format!("{h2}/lock").into())
            .with_host(host)
    };
    let s = session(Duration::ZERO, Duration::ZERO);
    let lvm = |args: &[&str]| {
        let out = Command::new("lvm")
            .args(args)
            .env("SANLOCK_RUN_DIR", &h1)
            .output()
            .expect("lvm");
        assert!(
            out.status.success(),
            "lvm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut g = c.benchmark_group("shared-lv-create-remove");
    g.sample_size(10);
    g.bench_function("lvmeta", |b| {
        b.iter(|| lvmeta_tests::create_remove_lv(&s, "vgbench", 1))
    });
    g.bench_function("lvm2-lvmlockd", |b| {
        b.iter(|| {
            lvm(&[
                "lvcreate", "-q", "-an", "-Zn", "-l", "1", "-n", "bench2", "vgbench",
            ]);
            lvm(&["lvremove", "-q", "-f", "vgbench/bench2"]);
        })
    });
    // Last, so the kept lease never makes lvmlockd wait: csi-shim's default linger.
    let kept = session(csi_shim::VG_LEASE_LINGER, csi_shim::VG_LEASE_MAX_HOLD);
    g.bench_function("lvmeta-kept-lease", |b| {
        b.iter(|| lvmeta_tests::create_remove_lv(&kept, "vgbench", 1))
    });
    drop(kept);
    // Erasure off: the same work as before deleted volumes were erased (issue #6).
    for erase in [None, Some(lvmeta::session::Erase::ZeroOut)] {
        csi_round_trips(
            &mut g,
            session(csi_shim::VG_LEASE_LINGER, csi_shim::VG_LEASE_MAX_HOLD),
            erase,
        );
    }
    g.finish();
}

/// Wipe LVs the wiper may fall behind by before an iteration waits (untimed) for none:
/// deletions back to back outrun it (an LV lease ballot per wipe LV), and the VG would fill.
const WIPE_BACKLOG: usize = 32;

/// CreateVolume (a linear 4 MiB volume, one extent as `lvcreate -l 1`) + DeleteVolume
/// through csi-shim's Controller on a unix socket, served in this process by `session`,
/// deleted volumes erased `erase` says (by the server's wiper, beside the calls).
fn csi_round_trips(
    g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    session: Session,
    erase: Option<lvmeta::session::Erase>,
) {
    use csi_shim::csi::controller_client::ControllerClient;
    use csi_shim::csi::volume_capability::{access_mode, AccessMode, AccessType, BlockVolume};
    use csi_shim::csi::{
        CapacityRange, CreateVolumeRequest, DeleteVolumeRequest, VolumeCapability,
    };

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let dir = tempfile::tempdir().expect("dir");
    let sock = dir.path().join("csi.sock");
    let backend =
        Arc::new(csi_shim::driver::Driver::new(session, vec!["vgbench".into()]).with_erase(erase));
    let backlog = || {
        let vols = csi_shim::volume::Volumes::new(backend.session(), "vgbench");
        vols.wipe_backlog().expect("wipe backlog").0
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The listener needs the runtime; the server runs on it until `stop`.
    let listener = {
        let _in = rt.enter();
        csi_shim::server::listen(&sock).expect("listen")
    };
    let server = rt.spawn(csi_shim::server::serve(
        backend.clone(),
        None,
        listener,
        async {
            let _ = stopped.await;
        },
    ));
    let mut client = rt.block_on(async {
        ControllerClient::new(csi_shim::client::connect(&sock).await.expect("connect"))
    });
    let request = CreateVolumeRequest {
        name: "pvc-bench".into(),
        capacity_range: Some(CapacityRange {
            required_bytes: 4 << 20,
            limit_bytes: 0,
        }),
        volume_capabilities: vec![VolumeCapability {
            access_mode: Some(AccessMode {
                mode: access_mode::Mode::SingleNodeWriter as i32,
            }),
            access_type: Some(AccessType::Block(BlockVolume {})),
        }],
        parameters: [("vg", "vgbench"), ("mode", "linear")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..Default::default()
    };
    let name = match erase {
        Some(_) => "csi-create-delete",
        None => "csi-create-delete-no-erase",
    };
    let mut round_trip = || {
        rt.block_on(async {
            let id = client
                .create_volume(request.clone())
                .await
                .expect("CreateVolume")
                .into_inner()
                .volume
                .expect("volume")
                .volume_id;
            client
                .delete_volume(DeleteVolumeRequest {
                    volume_id: id,
                    ..Default::default()
                })
                .await
                .expect("DeleteVolume");
        })
    };
    g.bench_function(name, |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                if erase.is_some() && backlog() > WIPE_BACKLOG {
                    while backlog() > 0 {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                let t = std::time::Instant::now();
                round_trip();
                spent += t.elapsed();
            }
            spent
        })
    });
    let _ = stop.send(());
    rt.block_on(server).expect("server task").expect("server");
}

criterion_group!(benches, bench);
criterion_main!(benches);
