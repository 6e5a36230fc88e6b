//! The NBD listener when the process runs out of descriptors: accept fails (EMFILE), the
//! listener lives on, and it serves again once descriptors come back. A binary of its own:
//! the test lowers the whole process's descriptor limit.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use csi_shim::nbd::limits::Limits;
use csi_shim::nbd::listener::{Finder, Listener};
use csi_shim::nbd::{go, Export, Refusal};
use lvmeta::dev::MemDevice;
use nix::sys::resource::{getrlimit, setrlimit, Resource};

const SIZE: u64 = 1 << 20;

fn open_descriptors() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64)
}

/// One READ of 4 KiB at offset 0 on a connection in transmission: the errno.
fn read_4k(s: &mut TcpStream) -> u32 {
    let mut req = 0x2560_9513u32.to_be_bytes().to_vec();
    req.extend_from_slice(&[0, 0, 0, 0]); // flags, READ
    req.extend_from_slice(&9u64.to_be_bytes());
    req.extend_from_slice(&0u64.to_be_bytes());
    req.extend_from_slice(&4096u32.to_be_bytes());
    s.write_all(&req).expect("request");
    let mut reply = [0u8; 16];
    s.read_exact(&mut reply).expect("reply");
    let mut data = vec![0u8; 4096];
    s.read_exact(&mut data).expect("data");
    u32::from_be_bytes([reply[4], reply[5], reply[6], reply[7]])
}

#[test]
fn the_listener_outlives_descriptor_exhaustion() {
    let export = Export::new(Box::new(MemDevice::new("vol", SIZE, 512)), false, 512);
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
    let addr = server.local_addr();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).expect("getrlimit");
    setrlimit(Resource::RLIMIT_NOFILE, open_descriptors() + 64, hard).expect("setrlimit");
    // Clients take descriptors of this process too: connect until the process has none left
    // (the listener's accepts have failed with EMFILE by then).
    let mut idle = Vec::new();
    let until = Instant::now() + Duration::from_secs(20);
    while Instant::now() < until {
        match TcpStream::connect(addr) {
            Ok(s) => idle.push(s),
            Err(e) if e.raw_os_error() == Some(libc_emfile()) => break,
            Err(e) => panic!("connect: {e}"),
        }
    }
    assert!(!idle.is_empty(), "no connection at all");
    std::thread::sleep(Duration::from_millis(300));
    // The listener could not take them all: some clients got no greeting.
    let mut ungreeted = 0;
    for s in &mut idle {
        let _ = s.set_read_timeout(Some(Duration::from_millis(100)));
        let mut greeting = [0u8; 18];
        if s.read_exact(&mut greeting).is_err() {
            ungreeted += 1;
        }
    }
    assert!(
        ungreeted > 0,
        "every client was accepted: no descriptor ran out"
    );
    // Descriptors come back: the listener serves a new client to the end.
    drop(idle);
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).expect("restore the limit");
    let mut served = None;
    let until = Instant::now() + Duration::from_secs(20);
    while served.is_none() && Instant::now() < until {
        let Ok(mut s) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        if let Ok(neg) = go(&mut s, b"vol") {
            served = Some((neg.size, read_4k(&mut s)));
        }
    }
    assert_eq!(served, Some((SIZE, 0)), "served again after EMFILE");
}

/// EMFILE's number on Linux.
fn libc_emfile() -> i32 {
    nix::errno::Errno::EMFILE as i32
}
