//! Needs root and the kernel's NBD client (CI's VM stage, `tests/vm/run`, whose guest loads
//! `nbd`; elsewhere it skips with a message): the project's NBD server on 127.0.0.1 and the
//! real kernel client configured over generic netlink. It checks what the unit tests
//! cannot: that the kernel takes the handshook sockets and the attributes, that data
//! written through `/dev/nbdN` lands on the export, that a server whose export closes under
//! a running writer and comes back is reattached with RECONFIGURE with no I/O error seen by
//! the writer, that DISCONNECT removes the device, and that a volume's wrapper moves its
//! backing from the NBD device to the local device under a running writer (the pool coming
//! to this host) with a pause and no error; and that a wrapper left inside a switch by a
//! dead process is released whole.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use csi_shim::attach::netlink::NbdNetlink;
use csi_shim::attach::{self, device_path, devices_of, handshake_sockets, AttachOptions};
use csi_shim::nbd::limits::Limits;
use csi_shim::nbd::listener::{Finder, Listener};
use csi_shim::nbd::{Export, Refusal};
use lvmeta::activate::dm::DmBackend;
use lvmeta::activate::wrap::Wrap;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::units::Sectors;
use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 16 * MIB;
const BLOCK: usize = 64 << 10;

/// The kernel NBD client's netlink family, or a skip (a failure inside the VM).
fn nbd_netlink(test: &str) -> Option<NbdNetlink> {
    if !privileged(test, &[]) || !lvmeta_tests::device_mapper(test) {
        return None;
    }
    // The VM stage's kernel has device-mapper, so it has nbd too: required from here on.
    Some(NbdNetlink::open().expect("the VM's kernel loads nbd"))
}

/// Block `i` of pass `pass`: its number and pass, then a pattern, then a checksum.
fn block(i: u64, pass: u64) -> Vec<u8> {
    let mut b = vec![(i ^ pass) as u8; BLOCK];
    b[..8].copy_from_slice(&i.to_le_bytes());
    b[8..16].copy_from_slice(&pass.to_le_bytes());
    let sum = crc32fast::hash(&b[..BLOCK - 4]);
    b[BLOCK - 4..].copy_from_slice(&sum.to_le_bytes());
    b
}

/// A kernel NBD device over two sockets to `vol` at `addr`, named `id`, once it shows the
/// export's size; its index.
fn attach(nl: &NbdNetlink, addr: std::net::SocketAddr, id: &str, timeout: u64) -> u32 {
    let o = AttachOptions {
        connections: 2,
        timeout,
        dead_timeout: 120,
        identifier: id.to_owned(),
        source: None,
    };
    let made = attach::attach(nl, addr, b"vol", &o).expect("attach");
    assert_eq!(made.negotiated.size, SIZE);
    let index = made.index;
    let path = device_path(index);
    wait_for("the nbd device's size", Duration::from_secs(10), || {
        FileDevice::open(&path).is_ok_and(|d| d.size() == SIZE)
    });
    index
}

fn wait_for(what: &str, limit: Duration, mut ok: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !ok() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_kernel_client_attaches_reconnects_and_detaches() {
    let Some(nl) = nbd_netlink("the_kernel_client_attaches_reconnects_and_detaches") else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let img = dir.path().join("export.img");
    std::fs::write(&img, vec![0u8; SIZE as usize]).expect("image");
    let open =
        || Box::new(FileDevice::open_data(&img).expect("open export")) as Box<dyn BlockDevice>;
    let current = Arc::new(Mutex::new(Export::new(open(), false, 4)));
    let find: Arc<Finder> = {
        let current = current.clone();
        Arc::new(move |_, name: &[u8]| {
            (name == b"vol")
                .then(|| current.lock().expect("export").clone().into())
                .ok_or(Refusal::NotServed)
        })
    };
    let server = Listener::bind(
        "127.0.0.1:0".parse().expect("addr"),
        find,
        Limits::default(),
    )
    .expect("listen");
    let id = format!("lvmeta-test:{}", std::process::id());
    // Requests in flight on a connection that drops unanswered are requeued only when they
    // time out (the kernel's rule): a short timeout keeps this unplanned case short.
    let index = attach(&nl, server.local_addr(), &id, 5);
    assert_eq!(devices_of(&id).expect("sysfs"), vec![index]);
    let dev_path = device_path(index);
    let nbd = Arc::new(FileDevice::open_data(&dev_path).expect("open /dev/nbdN"));

    // Through the kernel, onto the export.
    nbd.write_at(0, &block(0, 1)).expect("write through nbd");
    nbd.flush().expect("flush through nbd");
    let back = FileDevice::open(&img).expect("image");
    let mut b = vec![0u8; BLOCK];
    back.read_at(0, &mut b).expect("read image");
    assert_eq!(b, block(0, 1), "the write landed on the export");

    // A writer runs while the export closes (as in a handover) and a new one is served.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = run_writer(nbd.clone(), stop.clone(), written.clone());
    wait_for(
        "writes before the handover",
        Duration::from_secs(30),
        || written.load(Ordering::SeqCst) > 100,
    );
    let old = current.lock().expect("export").clone();
    old.close();
    let before = written.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(500));
    let paused = written.load(Ordering::SeqCst);
    assert!(
        paused - before < 64,
        "the writer paused while nothing served ({before} -> {paused})"
    );
    *current.lock().expect("export") = Export::new(open(), false, 4);
    let (socks, _) = handshake_sockets(server.local_addr(), None, b"vol", 2).expect("handshake");
    let fds: Vec<_> = socks.iter().map(|s| s.as_fd()).collect();
    nl.reconfigure(index, &id, &fds, None).expect("RECONFIGURE");
    drop(socks);
    wait_for(
        "writes after the reconnection",
        Duration::from_secs(60),
        || written.load(Ordering::SeqCst) > paused + 300,
    );
    stop.store(true, Ordering::SeqCst);
    let (passes, worst) = writer
        .join()
        .expect("writer")
        .expect("no I/O error seen by the writer");
    // Straight to stderr: the harness would hide a passing test's eprintln!.
    let _ = writeln!(
        std::io::stderr(),
        "writer: {passes} passes, longest write {worst:?}"
    );

    // Every block holds a whole, checksummed write of one pass (none torn, none lost).
    assert!(
        check_blocks(&back) >= 2,
        "the writer's passes reached the export"
    );

    // Wrong identifier: RECONFIGURE refused. DISCONNECT: the device goes.
    assert!(nl.reconfigure(index, "someone-else", &[], None).is_err());
    drop(nbd);
    nl.disconnect(index).expect("DISCONNECT");
    wait_for("the device to go", Duration::from_secs(10), || {
        devices_of(&id).is_ok_and(|d| d.is_empty())
    });
}

/// A process that died inside a switch leaves the wrapper's lower device suspended with a new
/// table loaded but not live: the wrapper counts as held, and its release resumes the lower
/// device on its old table (the loaded one dropped), so that the writer goes on, no I/O
/// error, still to the old backing.
#[test]
fn a_wrapper_left_inside_a_switch_is_released_whole() {
    let test = "a_wrapper_left_inside_a_switch_is_released_whole";
    if !privileged(test, &["losetup", "dmsetup"]) || !lvmeta_tests::device_mapper(test) {
        return;
    }
    let dm = DmBackend::probe().expect("device-mapper");
    let sb = Sandbox::new(&[SIZE, SIZE], 512);
    let (old, new) = (sb.loops[0].clone(), sb.loops[1].clone());
    let w = Wrap::new(1, "vg-id", "lv-id-cut-short");
    let sectors = Sectors(SIZE / 512);
    let upper = dm.wrap(&w, &old, sectors, false).expect("wrap");
    let before = dm.wrapped_backing(&w).expect("table");
    let dev = Arc::new(FileDevice::open_data(&upper).expect("open the upper device"));
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = run_writer(dev.clone(), stop.clone(), written.clone());
    wait_for("writes", Duration::from_secs(30), || {
        written.load(Ordering::SeqCst) > 50
    });
    // What a switch had done when its process died: hold, load, suspend the lower device.
    dm.hold(&w).expect("hold");
    let dmsetup = |args: &[&str]| {
        let ok = std::process::Command::new("dmsetup")
            .args(args)
            .status()
            .expect("dmsetup");
        assert!(ok.success(), "dmsetup {args:?}");
    };
    let table = format!("0 {} linear {new} 0", sectors.0);
    dmsetup(&["load", &w.lower_name(), "--table", &table]);
    dmsetup(&["suspend", &w.lower_name()]);
    // The upper device alone released (what a release did before): I/O waits below it.
    dmsetup(&["resume", &w.upper_name()]);
    assert!(
        dm.is_held(&w).expect("held?"),
        "a suspended lower device holds the wrapper"
    );
    dm.release(&w).expect("release whole");
    assert!(!dm.is_held(&w).expect("held?"));
    assert_eq!(
        dm.wrapped_backing(&w).expect("table"),
        before,
        "the loaded table was dropped, not made live"
    );
    let after = written.load(Ordering::SeqCst);
    wait_for("writes after the release", Duration::from_secs(60), || {
        written.load(Ordering::SeqCst) > after + 50
    });
    stop.store(true, Ordering::SeqCst);
    writer
        .join()
        .expect("writer")
        .expect("no I/O error seen by the writer");
    drop(dev);
    dm.unwrap(&w).expect("unwrap");
}

/// A writer of checksummed blocks over `dev` until `stop`: (passes, longest write).
fn run_writer(
    dev: Arc<FileDevice>,
    stop: Arc<AtomicBool>,
    written: Arc<AtomicU64>,
) -> std::thread::JoinHandle<Result<(u64, Duration), String>> {
    std::thread::spawn(move || {
        let blocks = dev.size() / BLOCK as u64;
        let (mut pass, mut worst) = (2u64, Duration::ZERO);
        while !stop.load(Ordering::SeqCst) {
            for i in 0..blocks {
                let t0 = Instant::now();
                dev.write_at(i * BLOCK as u64, &block(i, pass))
                    .map_err(|e| format!("block {i} pass {pass}: {e}"))?;
                worst = worst.max(t0.elapsed());
                written.fetch_add(1, Ordering::SeqCst);
            }
            dev.flush().map_err(|e| format!("flush pass {pass}: {e}"))?;
            pass += 1;
        }
        Ok((pass - 1, worst))
    })
}

/// Every block of `dev` holds one whole checksummed write; the newest pass seen.
fn check_blocks(dev: &FileDevice) -> u64 {
    let mut b = vec![0u8; BLOCK];
    let mut newest = 0;
    for i in 0..dev.size() / BLOCK as u64 {
        dev.read_at(i * BLOCK as u64, &mut b).expect("read");
        let pass = u64::from_le_bytes(b[8..16].try_into().expect("8"));
        assert_eq!(b, block(i, pass), "block {i} is whole");
        newest = newest.max(pass);
    }
    newest
}

#[test]
fn a_wrapper_moves_from_nbd_to_the_local_device_under_a_writer() {
    let test = "a_wrapper_moves_from_nbd_to_the_local_device_under_a_writer";
    let Some(nl) = nbd_netlink(test) else {
        return;
    };
    let dm = DmBackend::probe().expect("device-mapper");
    // The loop device stands for the thin LV on the serving host.
    let sb = Sandbox::new(&[SIZE], 512);
    let local = sb.loops[0].clone();
    let export = Export::new(
        Box::new(FileDevice::open_data(Path::new(&local)).expect("open the local device")),
        false,
        4,
    );
    let find: Arc<Finder> = Arc::new(move |_, name: &[u8]| {
        (name == b"vol")
            .then(|| export.clone().into())
            .ok_or(Refusal::NotServed)
    });
    let server = Listener::bind(
        "127.0.0.1:0".parse().expect("addr"),
        find,
        Limits::default(),
    )
    .expect("listen");
    let id = format!("lvmeta-test-wrap:{}", std::process::id());
    let index = attach(&nl, server.local_addr(), &id, 30);
    let nbd_path = device_path(index);
    let nbd = nbd_path.to_str().expect("utf-8").to_owned();

    let w = Wrap::new(1, "vg-id", "lv-id-for-the-test");
    let sectors = Sectors(SIZE / 512);
    let upper = dm.wrap(&w, &nbd, sectors, false).expect("wrap over nbd");
    assert_eq!(upper, Path::new("/dev/mapper").join(w.upper_name()));
    let via_nbd = std::fs::metadata(&nbd_path).expect("nbd node");
    use std::os::unix::fs::MetadataExt;
    let devnum = |m: &std::fs::Metadata| {
        let r = m.rdev();
        (
            ((r >> 8) & 0xfff) as u32,
            ((r & 0xff) | ((r >> 12) & 0xfff00)) as u32,
        )
    };
    assert_eq!(
        dm.wrapped_backing(&w).expect("table"),
        Some(devnum(&via_nbd))
    );
    // Made again: kept as it is.
    assert_eq!(dm.wrap(&w, &nbd, sectors, false).expect("again"), upper);

    let dev = Arc::new(FileDevice::open_data(&upper).expect("open the upper device"));
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let writer = run_writer(dev.clone(), stop.clone(), written.clone());
    wait_for("writes through nbd", Duration::from_secs(30), || {
        written.load(Ordering::SeqCst) > 100
    });
    // The pool comes here: hold, point the lower device at the local one, release.
    let t0 = Instant::now();
    dm.hold(&w).expect("hold");
    dm.switch(&w, &local, sectors, false).expect("switch");
    dm.release(&w).expect("release");
    let swap = t0.elapsed();
    let local_num = devnum(&std::fs::metadata(&local).expect("loop node"));
    assert_eq!(dm.wrapped_backing(&w).expect("table"), Some(local_num));
    // No NBD hop left: the kernel client goes while the writer runs.
    nl.disconnect(index).expect("DISCONNECT");
    let after = written.load(Ordering::SeqCst);
    wait_for(
        "writes to the local device",
        Duration::from_secs(60),
        || written.load(Ordering::SeqCst) > after + 300,
    );
    assert!(dm.unwrap(&w).is_err(), "unwrap refused while open");
    stop.store(true, Ordering::SeqCst);
    let (passes, worst) = writer
        .join()
        .expect("writer")
        .expect("no I/O error seen by the writer");
    drop(dev);
    let _ = writeln!(
        std::io::stderr(),
        "wrapper: swap {swap:?}, {passes} passes, longest write {worst:?}"
    );
    let newest = check_blocks(&FileDevice::open(Path::new(&local)).expect("local"));
    assert!(newest >= 2, "the writer's passes reached the local device");
    dm.unwrap(&w).expect("unwrap");
    assert!(!upper.exists(), "the upper node went with its device");
    wait_for("the nbd device to go", Duration::from_secs(10), || {
        devices_of(&id).is_ok_and(|d| d.is_empty())
    });
}
