//! The NBD data path against the local thin path, in one VM run, as a pod sees each: a
//! thin LV of a pool active here, behind its two-layer wrapper (`local`), and the same thin
//! LV served by csi-shim's NBD server on 127.0.0.1 and attached with the kernel's NBD client
//! over four connections, behind its own wrapper (`nbd`); the bare thin LV is the floor
//! (`thin`). The sequential groups also time `tcp`: the same bytes moved over four
//! 127.0.0.1 TCP connections between two threads each, no device at all, the floor of any
//! NBD path in this guest (it copies into and out of the socket as the NBD path does).
//! Each path: sequential 1 MiB reads and writes at queue depth 8, random 4 KiB
//! reads and writes at queue depth 32 (O_DIRECT, one thread per queue slot). Then
//! `handover/swap`: a wrapper's backing switched between the NBD device and the thin LV
//! (hold, switch, release) while a writer runs on it; the writer's longest write is printed.
//!
//! Needs root and a kernel with device-mapper, dm-thin-pool and nbd (prints SKIPPED
//! otherwise), so it runs in the VM of `tests/vm/run` (docs/benchmarks.md).
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use csi_shim::attach::netlink::NbdNetlink;
use csi_shim::attach::{attach, device_path, AttachOptions};
use csi_shim::nbd::limits::Limits;
use csi_shim::nbd::listener::{Finder, Listener};
use csi_shim::nbd::{Export, Refusal};
use lvmeta::activate::dm::DmBackend;
use lvmeta::activate::wrap::Wrap;
use lvmeta::dev::{AlignedBuf, BlockDevice, FileDevice};
use lvmeta::session::Session;
use lvmeta::units::Sectors;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;
const THIN: u64 = 256 * MIB;
const SEQ_BYTES: u64 = 64 * MIB;
const RANDOM_OPS: u64 = 4096;

fn ready() -> bool {
    lvmeta_tests::privileged("nbd benchmark", &["losetup"])
        && lvmeta_tests::device_mapper("nbd benchmark")
}

/// `ops` transfers of `len` bytes over `dev` by `depth` threads, at offsets from `at(i)`.
fn run_io(
    dev: &Arc<FileDevice>,
    write: bool,
    len: usize,
    depth: usize,
    ops: u64,
    at: fn(u64, u64) -> u64,
) {
    let next = Arc::new(AtomicU64::new(0));
    let slots = dev.size() / len as u64;
    std::thread::scope(|s| {
        for _ in 0..depth {
            let (dev, next) = (dev.clone(), next.clone());
            s.spawn(move || {
                let mut buf = AlignedBuf::new(len);
                buf.as_mut_slice().fill(0x5a);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= ops {
                        return;
                    }
                    let off = at(i, slots) * len as u64;
                    if write {
                        dev.write_at(off, buf.as_slice()).expect("write");
                    } else {
                        dev.read_at(off, buf.as_mut_slice()).expect("read");
                    }
                }
            });
        }
    });
    if write {
        dev.flush().expect("flush");
    }
}

fn sequential(i: u64, slots: u64) -> u64 {
    i % slots
}

fn random(i: u64, slots: u64) -> u64 {
    // A multiplicative hash: every slot equally likely, no state shared between threads.
    i.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) % slots
}

/// `n` connected 127.0.0.1 TCP pairs (sender, receiver).
fn tcp_pairs(n: usize) -> Vec<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0").expect("listen");
    (0..n)
        .map(|_| {
            let tx = TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
            let (rx, _) = l.accept().expect("accept");
            (tx, rx)
        })
        .collect()
}

/// `ops` messages of `len` bytes spread over `pairs`, each sent and received by its own thread.
fn run_tcp(pairs: &[(TcpStream, TcpStream)], len: usize, ops: u64) {
    let per = ops / pairs.len() as u64;
    std::thread::scope(|s| {
        for (tx, rx) in pairs {
            s.spawn(move || {
                let buf = vec![0x5au8; len];
                for _ in 0..per {
                    (&*tx).write_all(&buf).expect("send");
                }
            });
            s.spawn(move || {
                let mut buf = vec![0u8; len];
                for _ in 0..per {
                    (&*rx).read_exact(&mut buf).expect("receive");
                }
            });
        }
    });
}

/// `vol` at `addr` attached as a kernel NBD device over four connections, once it shows.
fn attach_vol(nl: &NbdNetlink, addr: std::net::SocketAddr) -> (u32, PathBuf) {
    let o = AttachOptions {
        connections: 4,
        timeout: 30,
        dead_timeout: 120,
        identifier: format!("lvmeta-bench:{}", std::process::id()),
        source: None,
    };
    let index = attach(nl, addr, b"vol", &o).expect("attach").index;
    let path = device_path(index);
    let t0 = Instant::now();
    while !FileDevice::open(&path).is_ok_and(|d| d.size() == THIN) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no nbd device");
        std::thread::sleep(Duration::from_millis(20));
    }
    (index, path)
}

fn nbd(c: &mut Criterion) {
    if !ready() {
        return;
    }
    let Ok(nl) = NbdNetlink::open() else {
        panic!("the VM's kernel has device-mapper but no nbd module");
    };
    let sb = Sandbox::new(&[512 * MIB], 512);
    let lun = sb.loops[0].clone();
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &lun]);
    sb.lvmeta_ok(
        "lvcreate",
        &[
            "-an",
            "--type",
            "thin-pool",
            "-n",
            "pool",
            "-L",
            "320m",
            "vg",
        ],
    );
    sb.lvmeta_ok(
        "lvcreate",
        &[
            "-an",
            "-n",
            "thin",
            "-V",
            "256m",
            "--thinpool",
            "pool",
            "vg",
        ],
    );
    let dm = DmBackend::probe().expect("device-mapper");
    let s = Session::new(vec![
        Box::new(FileDevice::open_rw(Path::new(&lun)).expect("open")) as Box<dyn BlockDevice>,
    ])
    .with_lock_dir(sb.lock_dir());
    let held = s
        .activate("vg", "thin", false, false, &dm)
        .expect("activate");
    let thin_path = held.device.to_str().expect("utf-8").to_owned();
    let thin = Arc::new(FileDevice::open_data(&held.device).expect("open thin"));
    // Provisioned once, so that every path reads and overwrites mapped blocks.
    run_io(&thin, true, MIB as usize, 8, THIN / MIB, sequential);

    let export = Export::new(
        Box::new(FileDevice::open_data(&held.device).expect("thin")),
        false,
        4,
    );
    let find: Arc<Finder> = Arc::new(move |_, n: &[u8]| {
        (n == b"vol")
            .then(|| export.clone().into())
            .ok_or(Refusal::NotServed)
    });
    let server = Listener::bind(
        "127.0.0.1:0".parse().expect("addr"),
        find,
        Limits::default(),
    )
    .expect("listen");
    let (index, nbd_path) = attach_vol(&nl, server.local_addr());
    let nbd_name = nbd_path.to_str().expect("utf-8").to_owned();
    let sectors = Sectors(THIN / 512);
    let local_w = Wrap::new(1, "bench-vg", "bench-local");
    let nbd_w = Wrap::new(2, "bench-vg", "bench-nbd");
    let local_up = dm
        .wrap(&local_w, &thin_path, sectors, false)
        .expect("wrap local");
    let nbd_up = dm
        .wrap(&nbd_w, &nbd_name, sectors, false)
        .expect("wrap nbd");
    let paths = [
        (
            "thin",
            Arc::new(FileDevice::open_data(&held.device).expect("thin")),
        ),
        (
            "local",
            Arc::new(FileDevice::open_data(&local_up).expect("local")),
        ),
        (
            "nbd",
            Arc::new(FileDevice::open_data(&nbd_up).expect("nbd")),
        ),
    ];

    let tcp = tcp_pairs(4);
    for (name, len, depth, ops, at) in [
        (
            "seq-1m",
            MIB as usize,
            8,
            SEQ_BYTES / MIB,
            sequential as fn(u64, u64) -> u64,
        ),
        ("rand-4k", 4096, 32, RANDOM_OPS, random),
    ] {
        for write in [false, true] {
            let mut g = c.benchmark_group(format!(
                "nbd-io/{name}-{}",
                if write { "write" } else { "read" }
            ));
            g.sample_size(10);
            g.throughput(Throughput::Bytes(len as u64 * ops));
            for (path, dev) in &paths {
                g.bench_function(*path, |b| {
                    b.iter(|| run_io(dev, write, len, depth, ops, at))
                });
            }
            if name == "seq-1m" {
                g.bench_function("tcp", |b| b.iter(|| run_tcp(&tcp, len, ops)));
            }
            g.finish();
        }
    }

    // The handover primitive under a writer: NBD -> local -> NBD ...
    let dev = paths[2].1.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let writer = {
        let (dev, stop, worst) = (dev.clone(), stop.clone(), worst.clone());
        std::thread::spawn(move || {
            let mut buf = AlignedBuf::new(4096);
            buf.as_mut_slice().fill(7);
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let t0 = Instant::now();
                dev.write_at(random(i, THIN / 4096) * 4096, buf.as_slice())
                    .expect("write during swaps");
                worst.fetch_max(t0.elapsed().as_micros() as u64, Ordering::SeqCst);
                i += 1;
            }
        })
    };
    let mut on_nbd = true;
    let mut g = c.benchmark_group("handover");
    g.sample_size(20);
    g.bench_function("swap", |b| {
        b.iter(|| {
            let to = if on_nbd { &thin_path } else { &nbd_name };
            dm.hold(&nbd_w).expect("hold");
            dm.switch(&nbd_w, to, sectors, false).expect("switch");
            dm.release(&nbd_w).expect("release");
            on_nbd = !on_nbd;
        })
    });
    g.finish();
    stop.store(true, Ordering::SeqCst);
    writer.join().expect("writer");
    let _ = writeln!(
        std::io::stderr(),
        "handover/swap: the writer's longest 4 KiB write during the swaps: {} us",
        worst.load(Ordering::SeqCst)
    );

    drop(paths);
    drop(dev);
    dm.unwrap(&nbd_w).expect("unwrap nbd");
    dm.unwrap(&local_w).expect("unwrap local");
    nl.disconnect(index).expect("DISCONNECT");
    drop(thin);
    drop(held);
}

criterion_group!(benches, nbd);
criterion_main!(benches);
