//! 10,000 KubeSAN-shaped volumes in one VG (issue #20), through a `csi-shim` process's gRPC
//! socket, for each mode (`thin`: a pool per volume, four LVs each; `linear`: one LV):
//! - `<mode>-10000/create-volume`, `/delete-volume`: one call at a time, 4 MiB block volumes
//!   named `pvc-<uuid>` (criterion's median is the p50);
//! - `/create-8-clients`: eight clients creating volumes at once (throughput: volumes/s);
//! - `/list-volumes`: every page of 500 of all volumes; `/get-volume`, `/get-capacity`;
//! - after the run: the driver's resident memory (peak included, from /proc), and stock lvm2's
//!   `vgck` and `lvs` (timed once: lvm2 at this size takes tens of seconds a command).
//!
//! The VG is filled through the library, 500 volumes a commit, exactly as CreateVolume makes
//! them, before the driver starts. A sparse 2 TiB loop LUN, a PV with a 64 MiB metadata area,
//! a local VG. Needs root, loop devices and lvm2 (prints SKIPPED otherwise).
//!
//! Run: `cargo bench -p lvmeta-benches --bench scale` (`LVMETA_SCALE_VOLUMES=1000` for a
//! quicker look; `LVMETA_SCALE_MODES=thin` for one mode).
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkGroup, Criterion, Throughput};
use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::{
    CreateVolumeRequest, DeleteVolumeRequest, GetCapacityRequest, ListVolumesRequest,
};
use csi_shim::volume::{Mode, MODE_TAG};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::{self, LvSpec, PoolSpec, ThinSpec};
use lvmeta::session::Session;
use lvmeta_tests::csi_hosts::{cap, create_request, Killed, MIB};
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::workspace_bin;
use tonic::transport::Channel;

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Volumes a commit while filling.
const FILL_BATCH: usize = 500;

fn wanted() -> usize {
    std::env::var("LVMETA_SCALE_VOLUMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn modes() -> Vec<Mode> {
    let list = std::env::var("LVMETA_SCALE_MODES").unwrap_or_else(|_| "thin,linear".into());
    list.split(',').filter_map(Mode::parse).collect()
}

/// A `pvc-<uuid>`-shaped name, unique for `(tag, i)`.
fn pvc(tag: u32, i: usize) -> String {
    format!("pvc-{tag:08x}-{:04x}-4000-8000-{i:012x}", i >> 16)
}

/// Adds `count` volumes of `mode` to `vg`, `FILL_BATCH` a commit, as CreateVolume makes them.
fn fill(s: &Session, vg: &str, mode: Mode, count: usize) {
    let stamp = lvmeta::testing::stamp();
    let tags = vec![format!("{MODE_TAG}{}", mode.as_str())];
    let mut done = 0;
    while done < count {
        let batch: Vec<String> = (done..count.min(done + FILL_BATCH))
            .map(|i| pvc(0xf111, i))
            .collect();
        s.update(vg, "lvcreate", |mut v, ctx| {
            for name in &batch {
                v = match mode {
                    Mode::Linear => {
                        let mut spec = LvSpec::linear(name, 1, stamp.clone());
                        spec.tags = tags.clone();
                        edit::lv::create(v, ctx, &spec)?.0
                    }
                    Mode::Thin => {
                        let pool = PoolSpec {
                            data: LvSpec::linear(&format!("{name}-pool"), 1, stamp.clone()),
                            chunk_size: None,
                            metadata_extents: None,
                            discards: "passdown".into(),
                            zero: true,
                        };
                        let (v, pool) = edit::thin::create_pool(v, ctx, &pool)?;
                        let thin = ThinSpec {
                            name: Some(name.clone()),
                            pool,
                            extents: 1,
                            origin: None,
                            tags: tags.clone(),
                            activation_skip: Some(false),
                            stamp: stamp.clone(),
                        };
                        edit::thin::create_thin(v, ctx, &thin)?.0
                    }
                };
            }
            Ok(v)
        })
        .expect("fill");
        done += batch.len();
    }
}

/// The driver serving `vg` on `lun` (a local VG), and a channel to it.
struct Driver {
    shim: Killed,
    rt: tokio::runtime::Runtime,
    channel: Channel,
    /// The free bytes after the fill.
    filled: i64,
    _dir: tempfile::TempDir,
}

impl Driver {
    fn start(sb: &Sandbox, vg: &str) -> Self {
        let dir = tempfile::tempdir().expect("dir");
        let socket = dir.path().join("csi.sock");
        let log = std::fs::File::create(dir.path().join("csi-shim.log")).expect("log");
        // `LVMETA_SCALE_WRAP` runs the driver under a profiler (e.g. `heaptrack -o F`).
        let wrap = std::env::var("LVMETA_SCALE_WRAP").unwrap_or_default();
        let mut words = wrap.split_whitespace();
        let bin = workspace_bin("csi-shim", "csi-shim");
        let mut cmd = match words.next() {
            Some(w) => {
                let mut c = Command::new(w);
                c.args(words).arg(&bin);
                c
            }
            None => Command::new(&bin),
        };
        let shim = cmd
            .arg("--endpoint")
            .arg(&socket)
            .args(["--devices", &sb.loops[0], "--vg", vg, "--wiper", "true"])
            .arg("--locking-dir")
            .arg(sb.lock_dir())
            .env("RUST_LOG", "warn")
            .stderr(log)
            .spawn()
            .expect("start csi-shim");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let channel = rt.block_on(lvmeta_tests::csi_hosts::connect(&socket));
        let mut d = Self {
            shim: Killed(shim),
            rt,
            channel,
            filled: 0,
            _dir: dir,
        };
        d.filled = d.capacity();
        d
    }

    fn client(&self) -> ControllerClient<Channel> {
        ControllerClient::new(self.channel.clone())
    }

    /// The VG's free bytes as the driver reports them.
    fn capacity(&self) -> i64 {
        self.rt
            .block_on(self.client().get_capacity(GetCapacityRequest::default()))
            .expect("GetCapacity")
            .into_inner()
            .available_capacity
    }

    /// Waits (30 s at most) until the wiper has freed every deleted volume: the free bytes
    /// are back to what they were after the fill.
    fn settle(&self) {
        let t = Instant::now();
        while self.capacity() < self.filled && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The driver's resident memory now and at its peak, in MB.
    fn memory(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.shim.0.id()))
            .unwrap_or_default();
        let kb = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (kb("VmRSS:") / 1000.0, kb("VmHWM:") / 1000.0)
    }
}

fn request(vg: &str, mode: Mode, name: &str) -> CreateVolumeRequest {
    let mut r = create_request(
        name,
        mode.as_str(),
        4 * MIB,
        &cap(Access::SingleNodeWriter, None),
        None,
    );
    r.parameters.insert("vg".into(), vg.into());
    r
}

async fn create(c: &mut ControllerClient<Channel>, vg: &str, mode: Mode, name: &str) -> String {
    c.create_volume(request(vg, mode, name))
        .await
        .expect("CreateVolume")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

async fn delete(c: &mut ControllerClient<Channel>, id: String) {
    c.delete_volume(DeleteVolumeRequest {
        volume_id: id,
        ..Default::default()
    })
    .await
    .expect("DeleteVolume");
}

fn scale(c: &mut Criterion) {
    if !lvmeta_tests::privileged("scale benchmark", &["losetup", "lvs"]) {
        eprintln!("SKIPPED scale benchmark: needs root, loop devices and lvm2");
        return;
    }
    for mode in modes() {
        one_mode(c, mode, wanted());
    }
}

fn one_mode(c: &mut Criterion, mode: Mode, count: usize) {
    let sb = Sandbox::new(&[2 << 40], 512);
    sb.lvmeta_ok("pvcreate", &["--metadatasize", "64m", &sb.loops[0]]);
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &sb.loops[0]]);
    let t = Instant::now();
    {
        let dev = FileDevice::open_rw(std::path::Path::new(&sb.loops[0])).expect("open loop");
        let s =
            Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_lock_dir(sb.lock_dir());
        fill(&s, "vg", mode, count);
    }
    eprintln!(
        "filled vg with {count} {} volumes in {:.1} s",
        mode.as_str(),
        t.elapsed().as_secs_f64()
    );
    let d = Driver::start(&sb, "vg");
    let mut g = c.benchmark_group(format!("{}-{count}", mode.as_str()));
    g.sample_size(20).warm_up_time(Duration::from_secs(1));
    let phase = |what: &str| {
        let (now, peak) = d.memory();
        eprintln!("csi-shim after {what}: resident {now:.1} MB, peak {peak:.1} MB");
    };
    phase("its first read");
    one_at_a_time(&mut g, &d, mode);
    phase("one at a time");
    eight_clients(&mut g, &d, mode);
    phase("eight clients");
    reads(&mut g, &d, count);
    g.finish();
    let (now, peak) = d.memory();
    eprintln!(
        "{} at {count}: csi-shim resident {now:.1} MB, peak {peak:.1} MB",
        mode.as_str()
    );
    drop(d);
    for args in [
        &["vgck", "vg"][..],
        &["lvs", "-a", "--reportformat", "json", "vg"],
    ] {
        let t = Instant::now();
        // lvm2 reads the whole text into its I/O memory: 8 MiB by default, twice the text
        // needed (its own warning says so at 10,000 thin volumes).
        let out = sb.lvm(args, Some("global/io_memory_size=65536"));
        eprintln!(
            "stock lvm2 `{}` at {count} {} volumes: {:.1} s, {}",
            args.join(" "),
            mode.as_str(),
            t.elapsed().as_secs_f64(),
            if out.status.success() { "ok" } else { "FAILED" }
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        let warnings: Vec<&str> = stderr.lines().filter(|l| warned(l)).collect();
        assert!(
            out.status.success() && warnings.is_empty(),
            "lvm2 {args:?}: {warnings:?}\n{stderr}"
        );
    }
}

/// Whether a line of lvm2's is a warning of anything but its activation being off (the
/// sandbox's setting).
fn warned(line: &str) -> bool {
    line.contains("WARNING") && !line.contains("Activation disabled")
}

/// CreateVolume, then DeleteVolume of the volumes it made, one call at a time.
fn one_at_a_time(g: &mut Group<'_>, d: &Driver, mode: Mode) {
    let made = std::sync::Mutex::new(Vec::new());
    let n = AtomicUsize::new(0);
    let mut cl = d.client();
    g.bench_function("create-volume", |b| {
        b.iter(|| {
            let name = pvc(0x1, n.fetch_add(1, Ordering::Relaxed));
            let id = d.rt.block_on(create(&mut cl, "vg", mode, &name));
            made.lock().expect("made").push(id);
        })
    });
    g.bench_function("delete-volume", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let id = match made.lock().expect("made").pop() {
                    Some(id) => id,
                    None => {
                        let name = pvc(0x2, n.fetch_add(1, Ordering::Relaxed));
                        d.rt.block_on(create(&mut cl, "vg", mode, &name))
                    }
                };
                let t = Instant::now();
                d.rt.block_on(delete(&mut cl, id));
                total += t.elapsed();
            }
            total
        })
    });
    // Back to the filled size.
    for id in made.lock().expect("made").drain(..) {
        d.rt.block_on(delete(&mut cl, id));
    }
    d.settle();
}

/// Eight clients creating 8 volumes each at once; the volumes are deleted afterwards,
/// outside the timing.
fn eight_clients(g: &mut Group<'_>, d: &Driver, mode: Mode) {
    const CLIENTS: usize = 8;
    const EACH: usize = 8;
    let n = AtomicUsize::new(0);
    g.throughput(Throughput::Elements((CLIENTS * EACH) as u64));
    g.sample_size(10);
    g.bench_function("create-8-clients", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let first = n.fetch_add(CLIENTS * EACH, Ordering::Relaxed);
                let t = Instant::now();
                let ids: Vec<String> = d.rt.block_on(async {
                    let tasks: Vec<_> = (0..CLIENTS)
                        .map(|k| {
                            let mut cl = d.client();
                            tokio::spawn(async move {
                                let mut ids = Vec::new();
                                for i in 0..EACH {
                                    let name = pvc(0x3, first + k * EACH + i);
                                    ids.push(create(&mut cl, "vg", mode, &name).await);
                                }
                                ids
                            })
                        })
                        .collect();
                    let mut all = Vec::new();
                    for t in tasks {
                        all.extend(t.await.expect("client"));
                    }
                    all
                });
                total += t.elapsed();
                let mut cl = d.client();
                for id in ids {
                    d.rt.block_on(delete(&mut cl, id));
                }
                // The next round starts once the wiper has freed these (it would compete).
                d.settle();
            }
            total
        })
    });
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
}

/// ListVolumes (every page of 500), ControllerGetVolume and GetCapacity.
fn reads(g: &mut Group<'_>, d: &Driver, count: usize) {
    let mut cl = d.client();
    g.bench_function("list-volumes", |b| {
        b.iter(|| {
            d.rt.block_on(async {
                let (mut token, mut seen) = (String::new(), 0);
                loop {
                    let r = cl
                        .list_volumes(ListVolumesRequest {
                            max_entries: 500,
                            starting_token: token,
                        })
                        .await
                        .expect("ListVolumes")
                        .into_inner();
                    seen += r.entries.len();
                    if r.next_token.is_empty() {
                        break;
                    }
                    token = r.next_token;
                }
                assert!(seen >= count, "listed {seen} of {count} volumes");
            })
        })
    });
    let id = format!("vg/{}", pvc(0xf111, count / 2));
    g.bench_function("get-volume", |b| {
        b.iter(|| {
            d.rt.block_on(
                cl.controller_get_volume(csi_shim::csi::ControllerGetVolumeRequest {
                    volume_id: id.clone(),
                }),
            )
            .expect("ControllerGetVolume")
        })
    });
    g.bench_function("get-capacity", |b| {
        b.iter(|| {
            d.rt.block_on(cl.get_capacity(GetCapacityRequest {
                parameters: [("vg".to_owned(), "vg".to_owned())].into(),
                ..Default::default()
            }))
            .expect("GetCapacity")
        })
    });
}

criterion_group!(benches, scale);
criterion_main!(benches);
