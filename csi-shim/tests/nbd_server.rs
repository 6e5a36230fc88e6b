//! The NBD server as a hostile client meets it, over TCP on 127.0.0.1: pipelined
//! requests, an export closed under load, stalled handshakes, connection floods and
//! payload floods; the probe a client node uses to check that its server still serves.
//! Nothing here needs privileges.

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use csi_shim::attach::ProbeError;
use csi_shim::nbd::limits::Limits;
use csi_shim::nbd::listener::{Finder, Listener};
use csi_shim::nbd::proto::{self, errno, rep, Command, Request};
use csi_shim::nbd::{go, ClientError, Export, Refusal};
use lvmeta::dev::{BlockDevice, MemDevice};

/// A device whose writes wait at a gate and are counted, and stay volatile (by offset)
/// until a flush that starts after they landed.
struct Gated {
    inner: MemDevice,
    open: Mutex<bool>,
    opened: Condvar,
    writes: AtomicUsize,
    delay: Duration,
    volatile: Mutex<HashSet<u64>>,
    durable: Mutex<HashSet<u64>>,
    flushes: AtomicUsize,
}

impl Gated {
    fn new(size: u64, open: bool, delay: Duration) -> Arc<Self> {
        Arc::new(Self {
            inner: MemDevice::new("gated", size, 512),
            open: Mutex::new(open),
            opened: Condvar::new(),
            writes: AtomicUsize::new(0),
            delay,
            volatile: Mutex::default(),
            durable: Mutex::default(),
            flushes: AtomicUsize::new(0),
        })
    }
    fn open_gate(&self) {
        *self.open.lock().expect("gate") = true;
        self.opened.notify_all();
    }
}

impl BlockDevice for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn logical_sector_size(&self) -> u32 {
        512
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        let mut open = self.open.lock().expect("gate");
        while !*open {
            open = self.opened.wait(open).expect("gate");
        }
        drop(open);
        std::thread::sleep(self.delay);
        self.writes.fetch_add(1, Ordering::SeqCst);
        self.inner.write_at(offset, buf)?;
        self.volatile.lock().expect("volatile").insert(offset);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        self.flushes.fetch_add(1, Ordering::SeqCst);
        let landed: Vec<u64> = self.volatile.lock().expect("volatile").drain().collect();
        std::thread::sleep(Duration::from_millis(2));
        self.durable.lock().expect("durable").extend(landed);
        Ok(())
    }
}

fn listen(export: Arc<Export>, limits: Limits) -> Listener {
    let find: Arc<Finder> = Arc::new(move |_, name: &[u8]| {
        (name == b"vol")
            .then(|| export.clone().into())
            .ok_or(Refusal::NotServed)
    });
    Listener::bind("127.0.0.1:0".parse().expect("addr"), find, limits).expect("bind")
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    s
}

fn request(command: Command, flags: u16, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    Request {
        flags,
        command,
        cookie,
        offset,
        len,
    }
    .encode()
}

/// Reads one simple reply: (errno, cookie).
fn reply(s: &mut TcpStream) -> io::Result<(u32, u64)> {
    let mut h = [0u8; 16];
    s.read_exact(&mut h)?;
    Ok(proto::parse_simple_reply(h).expect("reply magic"))
}

#[test]
fn pipelined_requests_are_all_answered_by_cookie_and_land_durably() {
    let dev = Gated::new(8 << 20, true, Duration::from_millis(1));
    let export = Export::new(Box::new(dev.clone()), false, 4);
    let server = listen(export, Limits::default());
    let mut c = connect(server.local_addr());
    let n = go(&mut c, b"vol").expect("go");
    assert_eq!(n.size, 8 << 20);
    assert_eq!(n.block.0, 512);
    // 128 writes sent before any reply is read.
    let mut out = Vec::new();
    for i in 0..128u64 {
        out.extend_from_slice(&request(Command::Write, 0, 1000 + i, i * 4096, 4096));
        out.extend_from_slice(&[i as u8; 4096]);
    }
    c.write_all(&out).expect("writes");
    let mut seen = HashSet::new();
    for _ in 0..128 {
        let (err, cookie) = reply(&mut c).expect("reply");
        assert_eq!(err, 0);
        assert!(seen.insert(cookie), "cookie {cookie} answered twice");
        // Answered only once durable: a takeover after the reply loses nothing.
        let offset = (cookie - 1000) * 4096;
        assert!(
            dev.durable.lock().expect("durable").contains(&offset),
            "write at {offset} answered before a flush covered it"
        );
    }
    assert_eq!(seen, (1000..1128).collect::<HashSet<u64>>());
    // The writes waiting together shared their flushes.
    let flushes = dev.flushes.load(Ordering::SeqCst);
    assert!(flushes < 128, "a flush per write: {flushes}");
    c.write_all(&request(Command::Flush, 0, 1, 0, 0))
        .expect("flush");
    assert_eq!(reply(&mut c).expect("flush reply"), (0, 1));
    // Read back through a second connection (multi-conn: one view).
    let mut d = connect(server.local_addr());
    go(&mut d, b"vol").expect("go");
    for i in [0u64, 77, 127] {
        d.write_all(&request(Command::Read, 0, i, i * 4096, 4096))
            .expect("read");
        assert_eq!(reply(&mut d).expect("read reply"), (0, i));
        let mut b = vec![0u8; 4096];
        d.read_exact(&mut b).expect("data");
        assert!(b.iter().all(|&x| x == i as u8), "block {i}");
    }
    // DISC after queued work: earlier requests answered first, then the connection ends.
    c.write_all(&request(Command::Write, 0, 9, 0, 512))
        .expect("write");
    c.write_all(&[1; 512]).expect("data");
    c.write_all(&request(Command::Disconnect, 0, 10, 0, 0))
        .expect("disc");
    assert_eq!(reply(&mut c).expect("answered before the end"), (0, 9));
    assert_eq!(c.read(&mut [0u8; 1]).expect("end"), 0);
}

#[test]
fn a_closed_export_drops_its_connections_unanswered_and_touches_the_device_no_more() {
    let dev = Gated::new(1 << 20, false, Duration::ZERO);
    let export = Export::new(Box::new(dev.clone()), false, 4);
    let limits = Limits {
        workers: 1,
        ..Limits::default()
    };
    let server = listen(export.clone(), limits);
    let mut c = connect(server.local_addr());
    go(&mut c, b"vol").expect("go");
    let mut out = Vec::new();
    for i in 0..8u64 {
        out.extend_from_slice(&request(Command::Write, 0, i, i * 512, 512));
        out.extend_from_slice(&[0xee; 512]);
    }
    c.write_all(&out).expect("writes");
    // The only worker now waits at the gate with the first write; the rest are queued.
    let t0 = Instant::now();
    while export.connections() != 1 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    // close() waits for the write at the device, then nothing more reaches it.
    let opener = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            dev.open_gate();
        })
    };
    let t0 = Instant::now();
    export.close();
    assert!(
        t0.elapsed() >= Duration::from_millis(250),
        "close waited for the I/O in flight"
    );
    opener.join().expect("opener");
    let landed = dev.writes.load(Ordering::SeqCst);
    assert_eq!(landed, 1, "only the write already at the device landed");
    // No reply at all: the connection just ends (the kernel would requeue).
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).expect("ended");
    assert!(
        rest.is_empty(),
        "no reply after close: {} bytes",
        rest.len()
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        dev.writes.load(Ordering::SeqCst),
        1,
        "nothing after close returned"
    );
    assert_eq!(
        Arc::strong_count(&dev),
        1,
        "the closed export let go of its device"
    );
    // New clients are told the export is going away.
    let mut d = connect(server.local_addr());
    match go(&mut d, b"vol") {
        Err(ClientError::Refused(k)) => assert_eq!(k, rep::ERR_SHUTDOWN),
        other => panic!("closed export offered: {other:?}"),
    }
}

#[test]
fn stalled_and_dribbling_handshakes_end_at_the_deadline() {
    let export = Export::new(Box::new(MemDevice::new("vol", 1 << 20, 512)), false, 4);
    let limits = Limits {
        handshake: Duration::from_millis(500),
        ..Limits::default()
    };
    let server = listen(export, limits);
    // Silent after connecting.
    let mut silent = connect(server.local_addr());
    let t0 = Instant::now();
    let mut all = Vec::new();
    silent.read_to_end(&mut all).expect("closed by the server");
    assert_eq!(all.len(), 18, "the greeting only");
    assert!(t0.elapsed() < Duration::from_secs(5));
    // One byte every 100 ms: each read is quick, the whole is not.
    let mut slow = connect(server.local_addr());
    let mut g = [0u8; 18];
    slow.read_exact(&mut g).expect("greeting");
    let t0 = Instant::now();
    let mut cut = false;
    for b in 3u32
        .to_be_bytes()
        .iter()
        .chain(proto::IHAVEOPT.to_be_bytes().iter())
        .cycle()
        .take(200)
    {
        if slow.write_all(&[*b]).is_err() {
            cut = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        if t0.elapsed() > Duration::from_secs(3) {
            break;
        }
    }
    let ended = cut || slow.read(&mut [0u8; 1]).map(|n| n == 0).unwrap_or(true);
    assert!(ended, "the dribbling client was cut off at the deadline");
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn a_connection_flood_is_bounded_and_the_server_recovers() {
    let export = Export::new(Box::new(MemDevice::new("vol", 1 << 20, 512)), false, 4);
    // From one address: its own limit out of the way (the next test has it).
    let limits = Limits {
        max_connections: 64,
        handshakes_per_peer: 1000,
        ..Limits::default()
    };
    let server = listen(export.clone(), limits);
    let addr = server.local_addr();
    let mut held: Vec<TcpStream> = (0..300).map(|_| connect(addr)).collect();
    let t0 = Instant::now();
    while server.connections() < 64 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(server.connections(), 64, "at most the limit open");
    // Those over the limit were closed before a byte was sent.
    let mut refused = 0;
    for s in &mut held[64..] {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        if let Ok(0) = s.read(&mut [0u8; 18]) {
            refused += 1;
        }
    }
    assert_eq!(refused, 236);
    // A fifth connection to one export is refused by policy (four allowed).
    let mut clients: Vec<TcpStream> = Vec::new();
    held.truncate(0);
    let t0 = Instant::now();
    while server.connections() > 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    for _ in 0..4 {
        let mut c = connect(addr);
        go(&mut c, b"vol").expect("go");
        clients.push(c);
    }
    let mut fifth = connect(addr);
    match go(&mut fifth, b"vol") {
        Err(ClientError::Refused(k)) => assert_eq!(k, rep::ERR_POLICY),
        other => panic!("a fifth connection: {other:?}"),
    }
    assert_eq!(export.connections(), 4);
}

#[test]
fn a_handshake_flood_from_one_address_leaves_the_listener_to_the_others() {
    let export = Export::new(Box::new(MemDevice::new("vol", 1 << 20, 512)), false, 4);
    let limits = Limits {
        max_connections: 32,
        handshakes_per_peer: 8,
        ..Limits::default()
    };
    let server = listen(export, limits);
    let addr = server.local_addr();
    let held: Vec<TcpStream> = (0..40).map(|_| connect(addr)).collect();
    let t0 = Instant::now();
    while server.connections() < 8 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.connections(), 8, "one address holds its share only");
    // Another address is served meanwhile.
    let other: SocketAddr = "127.0.0.2:0".parse().expect("addr");
    let mut c = csi_shim::attach::connect_from(Some(other), addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    assert_eq!(go(&mut c, b"vol").expect("another address").size, 1 << 20);
    // A client at the flooding address gets through too: it ends the oldest stalled one.
    let mut own = connect(addr);
    assert_eq!(
        go(&mut own, b"vol").expect("the same address").size,
        1 << 20
    );
    drop(held);
}

#[test]
fn a_payload_flood_stays_inside_the_bytes_budget() {
    let dev = Gated::new(64 << 20, true, Duration::from_millis(20));
    let export = Export::new(Box::new(dev.clone()), false, 4);
    let budget = 40u64 << 20;
    let limits = Limits {
        budget_bytes: budget,
        ..Limits::default()
    };
    let server = Arc::new(listen(export, limits));
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (server, stop, peak) = (server.clone(), stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                peak.fetch_max(server.bytes_in_flight() as usize, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
            }
        })
    };
    let floods: Vec<_> = (0..4u64)
        .map(|k| {
            let addr = server.local_addr();
            std::thread::spawn(move || {
                let mut c = connect(addr);
                go(&mut c, b"vol").expect("go");
                let payload = vec![k as u8; 8 << 20];
                let mut r = c.try_clone().expect("clone");
                let replies = std::thread::spawn(move || {
                    (0..8)
                        .map(|_| reply(&mut r).expect("reply").0)
                        .collect::<Vec<_>>()
                });
                for i in 0..8u64 {
                    let off = (k * 16 + (i % 2) * 8) << 20;
                    c.write_all(&request(Command::Write, 0, i, off, 8 << 20))
                        .expect("req");
                    c.write_all(&payload).expect("payload");
                }
                replies.join().expect("replies")
            })
        })
        .collect();
    for f in floods {
        assert!(f.join().expect("flood").iter().all(|&e| e == 0));
    }
    stop.store(true, Ordering::SeqCst);
    watcher.join().expect("watcher");
    let peak = peak.load(Ordering::SeqCst) as u64;
    assert!(peak >= 16 << 20, "the flood pressed on the budget: {peak}");
    assert!(peak <= budget, "{peak} bytes in flight, budget {budget}");
    assert_eq!(server.bytes_in_flight(), 0, "all given back");
    assert_eq!(dev.writes.load(Ordering::SeqCst), 32);
}

#[test]
fn requests_out_of_bounds_get_errnos_and_listening_everywhere_is_refused() {
    let export = Export::new(Box::new(MemDevice::new("vol", 1 << 20, 512)), true, 4);
    let server = listen(export, Limits::default());
    let mut c = connect(server.local_addr());
    let n = go(&mut c, b"vol").expect("go");
    assert_ne!(n.flags & proto::transmission::READ_ONLY, 0);
    c.write_all(&request(Command::Write, 0, 1, 0, 512))
        .expect("w");
    c.write_all(&[0; 512]).expect("data");
    assert_eq!(reply(&mut c).expect("reply"), (errno::EPERM, 1));
    c.write_all(&request(Command::Read, 0, 2, 1 << 20, 512))
        .expect("r");
    assert_eq!(reply(&mut c).expect("reply").0, errno::EINVAL);
    let mut d = connect(server.local_addr());
    assert!(matches!(
        go(&mut d, b"other"),
        Err(ClientError::Refused(rep::ERR_UNKNOWN))
    ));
    let find: Arc<Finder> = Arc::new(|_, _: &[u8]| Err(Refusal::NotServed));
    let everywhere = Listener::bind("0.0.0.0:0".parse().expect("addr"), find, Limits::default());
    assert!(everywhere.is_err());
}

#[test]
fn a_client_that_never_takes_its_replies_cannot_starve_the_others() {
    let export = Export::new(Box::new(MemDevice::new("vol", 64 << 20, 512)), false, 4);
    let limits = Limits {
        budget_bytes: 96 << 20,
        connection_bytes: 32 << 20,
        reply_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let server = listen(export, limits);
    // Sixteen 8 MiB READs, replies never read.
    let mut greedy = connect(server.local_addr());
    go(&mut greedy, b"vol").expect("go");
    for i in 0..16u64 {
        greedy
            .write_all(&request(Command::Read, 0, i, (i % 8) * (8 << 20), 8 << 20))
            .expect("read request");
    }
    // A WRITE whose payload stops half way.
    let mut stalled = connect(server.local_addr());
    go(&mut stalled, b"vol").expect("go");
    stalled
        .write_all(&request(Command::Write, 0, 1, 0, 8 << 20))
        .expect("header");
    stalled
        .write_all(&vec![1u8; 1 << 20])
        .expect("part of the payload");
    std::thread::sleep(Duration::from_millis(200));
    // Another client still gets its I/O done, at once.
    let mut good = connect(server.local_addr());
    go(&mut good, b"vol").expect("go");
    let t0 = Instant::now();
    for i in 0..32u64 {
        good.write_all(&request(Command::Write, 0, i, i << 20, 1 << 20))
            .expect("write");
        good.write_all(&vec![2u8; 1 << 20]).expect("payload");
        assert_eq!(reply(&mut good).expect("reply"), (0, i));
    }
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "the good client waited {:?}",
        t0.elapsed()
    );
    // Both hostile connections end within their timeouts and give their budget back.
    let t0 = Instant::now();
    while (server.connections() > 1 || server.bytes_in_flight() > 0)
        && t0.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.connections(), 1, "only the good client is left");
    assert_eq!(server.bytes_in_flight(), 0);
    drop((greedy, stalled));
}

#[test]
fn an_idle_connection_outlives_the_reply_and_payload_deadlines() {
    let export = Export::new(Box::new(MemDevice::new("vol", 1 << 20, 512)), false, 4);
    let limits = Limits {
        reply_timeout: Duration::from_millis(300),
        ..Limits::default()
    };
    let server = listen(export, limits);
    let mut c = connect(server.local_addr());
    go(&mut c, b"vol").expect("go");
    for round in 0..3u64 {
        c.write_all(&request(Command::Write, 0, round, 0, 4096))
            .expect("write");
        c.write_all(&[round as u8; 4096]).expect("payload");
        assert_eq!(reply(&mut c).expect("reply"), (0, round));
        // Idle for longer than any deadline: the kernel client's connections often are.
        std::thread::sleep(Duration::from_millis(800));
    }
    assert_eq!(server.connections(), 1, "the idle connection is still open");
}

#[test]
fn a_probe_opens_the_export_and_gives_up_on_a_silent_or_refusing_server() {
    let export = Export::new(Box::new(MemDevice::new("m", 1 << 20, 512)), false, 4);
    let find: Arc<Finder> = Arc::new(move |_, name: &[u8]| match name {
        b"vol" => Ok(export.clone().into()),
        b"not-now" => Err(Refusal::NotAdmitted),
        _ => Err(Refusal::NotServed),
    });
    let server = Listener::bind(
        "127.0.0.1:0".parse().expect("addr"),
        find,
        Limits::default(),
    )
    .expect("bind");
    let addr = server.local_addr();
    let from: Option<SocketAddr> = Some("127.0.0.1:0".parse().expect("addr"));
    let t = Duration::from_secs(5);
    csi_shim::attach::probe(addr, from, b"vol", t).expect("the export opens");
    csi_shim::attach::probe(addr, None, b"vol", t).expect("from any address");
    let refused = csi_shim::attach::probe(addr, from, b"other", t).expect_err("unknown export");
    assert!(refused.to_string().contains("refused"), "{refused}");
    assert!(matches!(refused, ProbeError::Gone(_)), "not served: gone");
    // Served, but not to this client now: the server is up (no takeover).
    let denied = csi_shim::attach::probe(addr, from, b"not-now", t).expect_err("not admitted");
    assert!(matches!(denied, ProbeError::TurnedAway(_)), "{denied}");
    // Accepts and says nothing: each probe ends at its timeout, not the kernel's.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let at = silent.local_addr().expect("addr");
    let t0 = Instant::now();
    for from in [None, from] {
        let e = csi_shim::attach::probe(at, from, b"vol", Duration::from_millis(300))
            .expect_err("a silent server");
        let ProbeError::Gone(e) = e else {
            panic!("a silent server is gone: {e}");
        };
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) || e.to_string().contains("timed out")
                || e.to_string().contains("temporarily unavailable"),
            "{e:?}"
        );
    }
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(silent);
}

/// A device whose every I/O fails with EIO while `failing` is set (a lost path), whose
/// flushes fail while `flush_failing` is, and wait while `flush_held` is.
struct Failing {
    inner: MemDevice,
    failing: AtomicBool,
    flush_failing: AtomicBool,
    flush_held: Mutex<bool>,
    flush_released: Condvar,
}

impl Failing {
    fn new(name: &str, failing: bool, flush_held: bool) -> Arc<Self> {
        Arc::new(Self {
            inner: MemDevice::new(name, 1 << 20, 512),
            failing: AtomicBool::new(failing),
            flush_failing: AtomicBool::new(false),
            flush_held: Mutex::new(flush_held),
            flush_released: Condvar::new(),
        })
    }
    fn release_flushes(&self) {
        *self.flush_held.lock().expect("gate") = false;
        self.flush_released.notify_all();
    }
}

impl BlockDevice for Failing {
    fn name(&self) -> &str {
        "failing"
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn logical_sector_size(&self) -> u32 {
        512
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(io::Error::from(nix::errno::Errno::EIO));
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(io::Error::from(nix::errno::Errno::EIO));
        }
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        let mut held = self.flush_held.lock().expect("gate");
        while *held {
            held = self.flush_released.wait(held).expect("gate");
        }
        drop(held);
        if self.failing.load(Ordering::SeqCst) || self.flush_failing.load(Ordering::SeqCst) {
            return Err(io::Error::from(nix::errno::Errno::EIO));
        }
        Ok(())
    }
}

#[test]
fn io_errors_are_held_then_answered_or_dropped_when_the_export_closes() {
    let dev = Failing::new("m", true, false);
    let read = |c: &mut TcpStream, cookie: u64| {
        c.write_all(&request(Command::Read, 0, cookie, 0, 4096))
            .expect("read");
    };
    // Not held: EIO at once.
    let export = Export::new(Box::new(dev.clone()), false, 4);
    let server = listen(export, Limits::default());
    let mut c = connect(server.local_addr());
    go(&mut c, b"vol").expect("go");
    read(&mut c, 1);
    assert_eq!(reply(&mut c).expect("reply"), (errno::EIO, 1));
    drop(server);

    // Held: the path comes back within the hold, and the request is answered with data.
    let export = Export::new(Box::new(dev.clone()), false, 4);
    export.hold_io_errors(Duration::from_secs(30));
    let server = listen(export.clone(), Limits::default());
    let mut c = connect(server.local_addr());
    go(&mut c, b"vol").expect("go");
    read(&mut c, 2);
    std::thread::sleep(Duration::from_millis(700));
    dev.failing.store(false, Ordering::SeqCst);
    assert_eq!(
        reply(&mut c).expect("reply"),
        (0, 2),
        "answered once it read"
    );
    c.read_exact(&mut [0u8; 4096]).expect("data");

    // A WRITE whose flush fails is held too (nothing answered rests on a failed flush),
    // and answered once the write and a flush after it succeed.
    let wrote = |c: &mut TcpStream, cookie: u64| {
        c.write_all(&request(Command::Write, 0, cookie, 512, 512))
            .expect("write");
        c.write_all(&[7; 512]).expect("data");
    };
    dev.failing.store(false, Ordering::SeqCst);
    dev.flush_failing.store(true, Ordering::SeqCst);
    let t0 = Instant::now();
    wrote(&mut c, 3);
    std::thread::sleep(Duration::from_millis(700));
    dev.flush_failing.store(false, Ordering::SeqCst);
    assert_eq!(reply(&mut c).expect("reply"), (0, 3), "held, then durable");
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "answered while its flush failed"
    );
    c.write_all(&request(Command::Flush, 0, 4, 0, 0))
        .expect("flush");
    assert_eq!(reply(&mut c).expect("reply"), (0, 4));

    // Held, and the export closes meanwhile (the node fenced the LV): no reply, the
    // connection ends (the client's kernel requeues the requests). A FLUSH is held like
    // a READ: every write answered is durable already.
    dev.failing.store(true, Ordering::SeqCst);
    read(&mut c, 6);
    c.write_all(&request(Command::Flush, 0, 7, 0, 0))
        .expect("flush");
    std::thread::sleep(Duration::from_millis(700));
    export.close();
    let mut b = [0u8; 16];
    match c.read(&mut b) {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("a reply to a request held when the export closed: {other:?}"),
    }
}

#[test]
fn requests_held_through_errors_leave_the_workers_to_other_exports() {
    let bad = Export::new(Box::new(Failing::new("bad", true, false)), false, 4);
    bad.hold_io_errors(Duration::from_secs(60));
    let good = Export::new(Box::new(MemDevice::new("good", 1 << 20, 512)), false, 4);
    let find: Arc<Finder> = Arc::new(move |_, n: &[u8]| match n {
        b"bad" => Ok(bad.clone().into()),
        b"good" => Ok(good.clone().into()),
        _ => Err(Refusal::NotServed),
    });
    // One worker: a held request waiting in it would stop every other export.
    let limits = Limits {
        workers: 1,
        ..Limits::default()
    };
    let server = Listener::bind("127.0.0.1:0".parse().expect("addr"), find, limits).expect("bind");
    let mut b = connect(server.local_addr());
    go(&mut b, b"bad").expect("go");
    for cookie in 0..8 {
        b.write_all(&request(Command::Read, 0, cookie, 0, 4096))
            .expect("read");
    }
    std::thread::sleep(Duration::from_millis(700));
    let mut g = connect(server.local_addr());
    go(&mut g, b"good").expect("go");
    let t0 = Instant::now();
    g.write_all(&request(Command::Read, 0, 9, 0, 4096))
        .expect("read");
    assert_eq!(reply(&mut g).expect("reply"), (0, 9));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the healthy export waited {:?} behind held requests",
        t0.elapsed()
    );
}

#[test]
fn writes_waiting_for_a_hung_flush_leave_the_workers_to_other_exports() {
    let hung = Failing::new("hung", false, true);
    let slow = Export::new(Box::new(hung.clone()), false, 4);
    let good = Export::new(Box::new(MemDevice::new("good", 1 << 20, 512)), false, 4);
    let find: Arc<Finder> = Arc::new(move |_, n: &[u8]| match n {
        b"slow" => Ok(slow.clone().into()),
        b"good" => Ok(good.clone().into()),
        _ => Err(Refusal::NotServed),
    });
    // Two workers: writes each waiting for the flush in a worker would stop every export.
    let limits = Limits {
        workers: 2,
        ..Limits::default()
    };
    let server = Listener::bind("127.0.0.1:0".parse().expect("addr"), find, limits).expect("bind");
    let mut s = connect(server.local_addr());
    go(&mut s, b"slow").expect("go");
    for cookie in 0..8 {
        s.write_all(&request(Command::Write, 0, cookie, cookie * 512, 512))
            .expect("write");
        s.write_all(&[3; 512]).expect("data");
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut g = connect(server.local_addr());
    go(&mut g, b"good").expect("go");
    let t0 = Instant::now();
    g.write_all(&request(Command::Write, 0, 9, 0, 512))
        .expect("write");
    g.write_all(&[4; 512]).expect("data");
    assert_eq!(reply(&mut g).expect("reply"), (0, 9));
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the healthy export waited {:?} behind a hung flush",
        t0.elapsed()
    );
    // None of the slow export's writes is answered before its flush.
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .expect("timeout");
    assert!(
        reply(&mut s).is_err(),
        "a write answered before it was durable"
    );
    hung.release_flushes();
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut seen = HashSet::new();
    for _ in 0..8 {
        let (err, cookie) = reply(&mut s).expect("reply");
        assert_eq!(err, 0);
        seen.insert(cookie);
    }
    assert_eq!(seen.len(), 8);
}
