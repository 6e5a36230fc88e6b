//! A hostile client of a node's NBD listener, for the VM tests: what a tenant, or any
//! machine on the storage network, can try.
//!
//! ```text
//! nbd-hostile name LUN VG LV HOST [AS]   the export name host HOST would ask for thin LV
//!                                        LV, with the pool's secret read from the LUN (as
//!                                        root on any machine that sees the LUN can); with
//!                                        AS, that name with thin LV AS's id instead
//! nbd-hostile go [--write] ADDR SOURCE NAME
//!                                        one handshake from SOURCE: `admitted size=N`, a
//!                                        4 KiB read's outcome (and with --write a 4 KiB
//!                                        write's, of zeroes at offset 0), or `refused: ...`
//! nbd-hostile garbage ADDR SOURCE        bytes that are no NBD: `closed` once the server
//!                                        hangs up
//! nbd-hostile flood ADDR SOURCE N SECS   N connections that never finish their handshake,
//!                                        held SECS seconds: `opened=N closed_early=N`
//! nbd-hostile steal LUN VG LV HOST       writes another host's staging over HOST's slots
//!                                        of thin LV LV (as a host that counted HOST gone
//!                                        would claim them): the indexes taken
//! nbd-hostile slots LUN VG LV            the slots staging thin LV LV: `HOST@INDEX ...`
//! ```
//!
//! ADDR is `IP:PORT` (`[IPV6%IF]:PORT` for link-local), SOURCE an IP (or `IPV6%IF`) the
//! connections are bound to.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use csi_shim::attach::{connect_from, handshake_sockets, scoped_addr};
use csi_shim::serve::export_name;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::lease::board::Slot;
use lvmeta::session::{PoolBoard, Session};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Prints an export name with the pool's current secret.
    Name {
        lun: PathBuf,
        vg: String,
        lv: String,
        host: u64,
        /// Another thin LV whose id replaces LV's in the name.
        r#as: Option<String>,
    },
    /// Tries one handshake.
    Go {
        /// Also tries a write.
        #[arg(long)]
        write: bool,
        addr: String,
        source: String,
        name: String,
    },
    /// Sends bytes that are no NBD.
    Garbage { addr: String, source: String },
    /// Writes another host's staging over a host's slots of an LV.
    Steal {
        lun: PathBuf,
        vg: String,
        lv: String,
        host: u64,
    },
    /// Lists the slots staging an LV.
    Slots {
        lun: PathBuf,
        vg: String,
        lv: String,
    },
    /// Holds connections that never finish their handshake.
    Flood {
        addr: String,
        source: String,
        n: usize,
        secs: u64,
    },
}

fn main() {
    let out = match Args::parse().cmd {
        Cmd::Name {
            lun,
            vg,
            lv,
            host,
            r#as,
        } => name(&lun, &vg, &lv, host, r#as.as_deref()),
        Cmd::Go {
            write,
            addr,
            source,
            name,
        } => go(&server(&addr), &source, &name, write),
        Cmd::Garbage { addr, source } => garbage(&server(&addr), &source),
        Cmd::Flood {
            addr,
            source,
            n,
            secs,
        } => flood(&server(&addr), &source, n, secs),
        Cmd::Steal { lun, vg, lv, host } => steal(&lun, &vg, &lv, host),
        Cmd::Slots { lun, vg, lv } => slots(&lun, &vg, &lv),
    };
    println!("{out}");
}

fn server(addr: &str) -> SocketAddr {
    let (ip, port) = addr.rsplit_once(':').expect("ADDR is IP:PORT");
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    scoped_addr(ip, port.parse().expect("port")).expect("ADDR")
}

fn source(ip: &str) -> SocketAddr {
    scoped_addr(ip, 0).expect("SOURCE")
}

fn name(lun: &Path, vg: &str, lv: &str, host: u64, other: Option<&str>) -> String {
    let (s, b) = board_of(lun, vg, lv, false);
    let board = s.read_board(&b).expect("read the board");
    let record = board.record.expect("the pool is served");
    let lv_id = match other {
        None => b.lv_id,
        Some(o) => s.pool_board(vg, o).expect("read").expect("a thin LV").lv_id,
    };
    export_name(&lv_id, host, &record.secret)
}

/// A session on the LUN and the board of thin LV `lv`.
fn board_of(lun: &Path, vg: &str, lv: &str, write: bool) -> (Session, PoolBoard) {
    let dev = match write {
        true => FileDevice::open_rw(lun),
        false => FileDevice::open(lun),
    };
    let s = Session::new(vec![
        Box::new(dev.expect("open the LUN")) as Box<dyn BlockDevice>
    ]);
    let b = s
        .pool_board(vg, lv)
        .expect("read the VG")
        .expect("a thin LV of a shared VG");
    (s, b)
}

fn steal(lun: &Path, vg: &str, lv: &str, host: u64) -> String {
    let (s, b) = board_of(lun, vg, lv, true);
    let board = s.read_board(&b).expect("read the board");
    let mut taken = Vec::new();
    for (i, slot) in board.slots_of(&b.lv_id) {
        if slot.host != host {
            continue;
        }
        // A staging of another (made-up) LV by a host the lock manager never saw.
        let thief = Slot {
            lv_id: "hostile0hostile0hostile0hostile0".into(),
            host: 1999,
            generation: 0,
            ..slot.clone()
        };
        s.write_board_slot(&b, *i, &thief).expect("write the slot");
        taken.push(i.to_string());
    }
    taken.join(" ")
}

fn slots(lun: &Path, vg: &str, lv: &str) -> String {
    let (s, b) = board_of(lun, vg, lv, false);
    let board = s.read_board(&b).expect("read the board");
    let found: Vec<String> = board
        .slots_of(&b.lv_id)
        .map(|(i, slot)| format!("{}@{i}", slot.host))
        .collect();
    found.join(" ")
}

fn go(addr: &SocketAddr, from: &str, name: &str, write: bool) -> String {
    match handshake_sockets(*addr, Some(source(from)), name.as_bytes(), 1) {
        Err(e) => format!("refused: {e}"),
        Ok((mut socks, neg)) => {
            let read = transfer_4k(&mut socks[0], false);
            let mut out = format!("admitted size={} read={read}", neg.size);
            if write {
                out += &format!(" write={}", transfer_4k(&mut socks[0], true));
            }
            out
        }
    }
}

/// One 4 KiB READ (or WRITE of zeroes) at offset 0 in transmission: `ok`, `error ERRNO`
/// or what went wrong.
fn transfer_4k(s: &mut TcpStream, write: bool) -> String {
    let mut req = Vec::with_capacity(28 + 4096);
    req.extend_from_slice(&0x2560_9513u32.to_be_bytes());
    req.extend_from_slice(&0u16.to_be_bytes()); // flags
    req.extend_from_slice(&u16::from(write).to_be_bytes()); // READ 0, WRITE 1
    req.extend_from_slice(&7u64.to_be_bytes()); // cookie
    req.extend_from_slice(&0u64.to_be_bytes()); // offset
    req.extend_from_slice(&4096u32.to_be_bytes());
    if write {
        req.extend_from_slice(&[0u8; 4096]);
    }
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reply = [0u8; 16];
    let mut data = vec![0u8; 4096];
    let mut done = s.write_all(&req).and_then(|()| s.read_exact(&mut reply));
    let errno = u32::from_be_bytes([reply[4], reply[5], reply[6], reply[7]]);
    if done.is_ok() && errno == 0 && !write {
        done = s.read_exact(&mut data);
    }
    match done {
        Ok(()) if errno == 0 => "ok".into(),
        Ok(()) => format!("error {errno}"),
        Err(e) => format!("failed: {e}"),
    }
}

fn garbage(addr: &SocketAddr, from: &str) -> String {
    let mut s = connect_from(Some(source(from)), *addr).expect("connect");
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let junk: Vec<u8> = (0..65536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    // The greeting first, then junk where the client's flags and options belong.
    let mut greeting = [0u8; 18];
    if let Err(e) = s.read_exact(&mut greeting) {
        return format!("no greeting: {e}");
    }
    let _ = s.write_all(&junk);
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return "closed".into(),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return "closed".into(),
            Err(e) => return format!("still open: {e}"),
        }
    }
}

fn flood(addr: &SocketAddr, from: &str, n: usize, secs: u64) -> String {
    let mut held = Vec::new();
    for _ in 0..n {
        match connect_from(Some(source(from)), *addr) {
            Ok(s) => held.push(s),
            Err(e) => {
                eprintln!("flood: connect: {e}");
                break;
            }
        }
    }
    let opened = held.len();
    let until = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
    }
    // A connection the server closed reads EOF (after its greeting, if it sent one).
    let mut closed = 0;
    for s in &mut held {
        let _ = s.set_nonblocking(true);
        let mut buf = [0u8; 64];
        loop {
            match s.read(&mut buf) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    format!("opened={opened} closed_early={closed}")
}
