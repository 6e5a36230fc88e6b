//! The sanlock daemon's own account of itself, asked over its socket as `sanlock client
//! status` asks (`SM_CMD_STATUS`): whether it uses the watchdog, each lockspace's health and
//! every lease held on this host, orphans included. libsanlock has no call for this.
//!
//! Wire format (sanlock 3.8, little-endian, x86_64 layout; sanlock's `src/sanlock_sock.h`, `src/cmd.c`):
//! - request: one 32-byte `sm_header` {magic 0x04282010, version 1, cmd 5, flags, length 32,
//!   seq, data, data2};
//! - reply: one `sm_header`, then records until the daemon closes the connection, each an
//!   80-byte `sanlk_state` {type, flags, data32 (pid), data64 (host id or lease version),
//!   `name[48]`, str_len}, `str_len` bytes of `key=value` text (NUL-terminated), then for a
//!   lockspace its 1104-byte `sanlk_lockspace`, for a lease its 128-byte `sanlk_resource`
//!   and `num_disks` 1040-byte disks.
//!
//! [`parse`] is pure (and fuzzed); [`query`] does the I/O. Every length is bounded before
//! anything is allocated.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

const MAGIC: u32 = 0x0428_2010;
const PROTO: u32 = 1;
const CMD_STATUS: u32 = 5;
const HEADER: usize = 32;
const STATE: usize = 80;
const LOCKSPACE: usize = 1104;
const RESOURCE: usize = 128;
const DISK: usize = 1040;
/// `SANLK_STATE_MAXSTR`: the daemon never sends a longer text.
const MAX_STR: usize = 4096;
/// `SANLK_MAX_DISKS`.
const MAX_DISKS: usize = 4;
/// Most bytes read from the daemon: 2,000 hosts' worth of clients, lockspaces and leases
/// fit many times over.
pub const MAX_REPLY: usize = 64 << 20;

const TYPE_DAEMON: u32 = 1;
const TYPE_CLIENT: u32 = 2;
const TYPE_LOCKSPACE: u32 = 3;
const TYPE_RESOURCE: u32 = 4;
/// `R_SHARED` in a lease's flags.
const R_SHARED: u64 = 0x1;

/// Why the daemon's status could not be had.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The socket could not be reached or read.
    #[error("sanlock daemon at {socket}: {source}")]
    Io {
        /// The socket path.
        socket: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The reply is not what sanlock sends.
    #[error("sanlock status reply at byte {offset}: {why}")]
    Malformed {
        /// Byte offset of the bad field in the reply.
        offset: usize,
        /// What is wrong there.
        why: String,
    },
}

/// What the daemon says of itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DaemonStatus {
    /// The daemon's host name (`-e`, sanlock.conf `our_host_name`, or `<uuid>.<nodename>`):
    /// what its delta leases carry.
    pub our_host_name: String,
    /// The daemon arms the watchdog (through wdmd): a host whose lease users cannot be
    /// stopped is reset. `false` with `-w 0`.
    pub use_watchdog: bool,
    /// Its default io_timeout (seconds), where it says (sanlock 3.8.5 does not).
    pub io_timeout: Option<u32>,
    /// Seconds from a watchdog's last keepalive to the reset, where it says (sanlock 3.8.5
    /// does not).
    pub watchdog_fire_timeout: Option<u32>,
    /// Seconds of SIGTERM (or killpath) before SIGKILL.
    pub kill_grace_seconds: u32,
    /// The daemon's monotonic clock (seconds) when it answered.
    pub monotime: u64,
    /// Registered processes.
    pub clients: Vec<ClientState>,
    /// Lockspaces this host is in, joining or leaving.
    pub lockspaces: Vec<LockspaceState>,
    /// Leases held on this host (one entry per holder), orphans included.
    pub resources: Vec<ResourceState>,
}

/// A registered process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientState {
    /// Its pid (as the daemon's pid namespace sees it).
    pub pid: i32,
    /// How many times the daemon has tried to stop it.
    pub kill_count: u32,
}

/// One lockspace on this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockspaceState {
    /// Its name (`lvm_<vg>`).
    pub name: String,
    /// This host's id in it.
    pub host_id: u64,
    /// Its io_timeout (seconds).
    pub io_timeout: u32,
    /// `spaces` (joined), `add` (joining) or `rem` (leaving).
    pub list: String,
    /// A renewal of this host's delta lease failed for too long.
    pub renew_fail: bool,
    /// The lockspace is lost: its leases are no longer valid.
    pub space_dead: bool,
    /// The daemon is stopping the processes that hold leases in it.
    pub killing_pids: bool,
    /// Orphans keep it (and so the watchdog) after it fails.
    pub used_by_orphans: bool,
    /// Daemon time of the last good renewal.
    pub renewal_last_success: u64,
}

impl LockspaceState {
    /// Joined and renewing: its leases hold.
    pub fn healthy(&self) -> bool {
        self.list == "spaces" && !self.renew_fail && !self.space_dead && !self.killing_pids
    }
}

/// One holder of one lease.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceState {
    /// The lockspace.
    pub lockspace: String,
    /// The lease name (an LV uuid, `VGLK`, ...).
    pub name: String,
    /// `held`, `add`, `rem` or `orphan`.
    pub list: String,
    /// The holding process (0 for an orphan).
    pub pid: i32,
    /// Held in shared mode.
    pub shared: bool,
}

/// The request for the whole status.
pub fn request() -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    for (i, v) in [MAGIC, PROTO, CMD_STATUS, 0, HEADER as u32, 0, 0, 0]
        .into_iter()
        .enumerate()
    {
        h[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
    }
    h
}

/// A cursor over the reply that names the offset of whatever it cannot read.
struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn bad(&self, offset: usize, why: impl Into<String>) -> StatusError {
        StatusError::Malformed {
            offset,
            why: why.into(),
        }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], StatusError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len());
        let Some(end) = end else {
            return Err(self.bad(self.at, format!("{what}: {n} bytes, {} left", self.left())));
        };
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn left(&self) -> usize {
        self.buf.len() - self.at
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// A fixed C name field: up to its first NUL.
fn name_of(b: &[u8]) -> String {
    let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// The value of `key` in a `key=value key=value` text.
fn field<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.split(' ').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == key)
            .map(|(_, v)| v)
    })
}

fn num<T: std::str::FromStr + Default>(text: &str, key: &str) -> T {
    field(text, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

fn flag(text: &str, key: &str) -> bool {
    num::<i64>(text, key) != 0
}

/// Parses a whole status reply (header included).
pub fn parse(reply: &[u8]) -> Result<DaemonStatus, StatusError> {
    if reply.len() > MAX_REPLY {
        return Err(StatusError::Malformed {
            offset: MAX_REPLY,
            why: format!("{} bytes, more than {MAX_REPLY}", reply.len()),
        });
    }
    let mut c = Cursor { buf: reply, at: 0 };
    let h = c.take(HEADER, "header")?;
    if u32_at(h, 0) != MAGIC {
        return Err(c.bad(0, format!("magic {:#x}, want {MAGIC:#x}", u32_at(h, 0))));
    }
    let mut st = DaemonStatus::default();
    while c.left() > 0 {
        let at = c.at;
        let rec = c.take(STATE, "state record")?;
        let kind = u32_at(rec, 0);
        let data32 = u32_at(rec, 8);
        let data64 = u64_at(rec, 16);
        let name = name_of(&rec[24..72]);
        let len = u32_at(rec, 72) as usize;
        if len > MAX_STR {
            return Err(c.bad(at + 72, format!("text of {len} bytes, more than {MAX_STR}")));
        }
        let raw = c.take(len, "state text")?;
        let text = name_of(raw);
        match kind {
            TYPE_DAEMON => {
                st.our_host_name = field(&text, "our_host_name").unwrap_or_default().to_owned();
                st.use_watchdog = flag(&text, "use_watchdog");
                st.io_timeout = field(&text, "io_timeout").and_then(|v| v.parse().ok());
                st.watchdog_fire_timeout =
                    field(&text, "watchdog_fire_timeout").and_then(|v| v.parse().ok());
                st.kill_grace_seconds = num(&text, "kill_grace_seconds");
                st.monotime = num(&text, "monotime");
            }
            TYPE_CLIENT => st.clients.push(ClientState {
                pid: data32 as i32,
                kill_count: num(&text, "kill_count"),
            }),
            TYPE_LOCKSPACE => {
                c.take(LOCKSPACE, "lockspace")?;
                st.lockspaces.push(LockspaceState {
                    name,
                    host_id: data64,
                    io_timeout: num(&text, "io_timeout"),
                    list: field(&text, "list").unwrap_or_default().to_owned(),
                    renew_fail: flag(&text, "renew_fail"),
                    space_dead: flag(&text, "space_dead"),
                    killing_pids: flag(&text, "killing_pids"),
                    used_by_orphans: flag(&text, "used_by_orphans"),
                    renewal_last_success: num(&text, "renewal_last_success"),
                });
            }
            TYPE_RESOURCE => {
                let res_at = c.at;
                let res = c.take(RESOURCE, "lease")?;
                let disks = u32_at(res, 124) as usize;
                if disks > MAX_DISKS {
                    return Err(c.bad(res_at + 124, format!("{disks} disks, at most {MAX_DISKS}")));
                }
                c.take(disks * DISK, "lease disks")?;
                let flags = u64::from_str_radix(field(&text, "flags").unwrap_or("0"), 16)
                    .unwrap_or_default();
                st.resources.push(ResourceState {
                    lockspace: name_of(&res[0..48]),
                    name,
                    list: field(&text, "list").unwrap_or_default().to_owned(),
                    pid: data32 as i32,
                    shared: flags & R_SHARED != 0,
                });
            }
            other => {
                return Err(c.bad(at, format!("record type {other}")));
            }
        }
    }
    Ok(st)
}

/// The daemon's socket: `$SANLOCK_RUN_DIR/sanlock.sock`, as libsanlock finds it (default
/// `/run/sanlock`).
pub fn socket_path() -> PathBuf {
    let dir = std::env::var_os("SANLOCK_RUN_DIR").unwrap_or_else(|| "/run/sanlock".into());
    Path::new(&dir).join("sanlock.sock")
}

/// Asks the daemon at `socket` for its status, waiting at most `timeout` for each read.
pub fn query(socket: &Path, timeout: Duration) -> Result<DaemonStatus, StatusError> {
    let io = |source| StatusError::Io {
        socket: socket.display().to_string(),
        source,
    };
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(io)?;
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    s.write_all(&request()).map_err(io)?;
    let mut reply = Vec::new();
    // One byte past the bound tells a reply that is too long.
    s.take(MAX_REPLY as u64 + 1)
        .read_to_end(&mut reply)
        .map_err(io)?;
    parse(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u32, data32: u32, data64: u64, name: &str, text: &str) -> Vec<u8> {
        let mut r = vec![0u8; STATE];
        r[0..4].copy_from_slice(&kind.to_le_bytes());
        r[8..12].copy_from_slice(&data32.to_le_bytes());
        r[16..24].copy_from_slice(&data64.to_le_bytes());
        r[24..24 + name.len()].copy_from_slice(name.as_bytes());
        let mut t = text.as_bytes().to_vec();
        t.push(0);
        r[72..76].copy_from_slice(&(t.len() as u32).to_le_bytes());
        r.extend(t);
        r
    }

    /// A reply as sanlock 3.8.5 sends it: daemon, one client, one lockspace, two leases.
    fn sample(watchdog: bool, dead: bool) -> Vec<u8> {
        let mut b = request().to_vec();
        b.extend(record(
            TYPE_DAEMON,
            0,
            0,
            "host",
            &format!(
                "our_host_name=x use_watchdog={} io_timeout=10 watchdog_fire_timeout=60 \
                 kill_grace_seconds=40 monotime=1234 version_str=3.8.5",
                u8::from(watchdog)
            ),
        ));
        b.extend(record(
            TYPE_CLIENT,
            77,
            0,
            "csi-shim",
            "ci=1 pid=77 kill_count=3",
        ));
        b.extend(record(
            TYPE_LOCKSPACE,
            0,
            5,
            "lvm_vg",
            &format!(
                "list=spaces space_id=1 io_timeout=2 renew_fail={d} space_dead={d} killing_pids={d} \
                 used_by_orphans=1 renewal_last_success=1200",
                d = u8::from(dead)
            ),
        ));
        b.extend(vec![0u8; LOCKSPACE]);
        for (name, list, pid, flags) in [("uuid1", "held", 77, "1"), ("uuid2", "orphan", 0, "0")] {
            b.extend(record(
                TYPE_RESOURCE,
                pid,
                1,
                name,
                &format!("list={list} flags={flags} sector_size=512"),
            ));
            let mut res = vec![0u8; RESOURCE];
            res[0..6].copy_from_slice(b"lvm_vg");
            res[124..128].copy_from_slice(&1u32.to_le_bytes());
            b.extend(res);
            b.extend(vec![0u8; DISK]);
        }
        b
    }

    #[test]
    fn a_reply_gives_the_watchdog_lockspaces_and_leases() {
        let st = parse(&sample(true, false)).expect("parse");
        assert_eq!(st.our_host_name, "x");
        assert!(st.use_watchdog);
        assert_eq!(
            (
                st.io_timeout,
                st.watchdog_fire_timeout,
                st.kill_grace_seconds,
                st.monotime
            ),
            (Some(10), Some(60), 40, 1234)
        );
        assert_eq!(
            st.clients,
            [ClientState {
                pid: 77,
                kill_count: 3
            }]
        );
        assert_eq!(st.lockspaces.len(), 1);
        let ls = &st.lockspaces[0];
        assert_eq!(
            (ls.name.as_str(), ls.host_id, ls.io_timeout),
            ("lvm_vg", 5, 2)
        );
        assert!(ls.healthy() && ls.used_by_orphans);
        assert_eq!(st.resources.len(), 2);
        assert_eq!(
            (
                st.resources[0].name.as_str(),
                st.resources[0].pid,
                st.resources[0].shared
            ),
            ("uuid1", 77, true)
        );
        assert_eq!(st.resources[1].list, "orphan");
        assert_eq!(st.resources[1].lockspace, "lvm_vg");
    }

    #[test]
    fn a_reply_of_sanlock_3_8_5_reads() {
        // `sanlock daemon -w 0`, lockspace ls1 joined as host 1, lease res1 held by
        // `sanlock client command` (fuzz/corpus/sanlock_status).
        let real =
            include_bytes!("../../../fuzz/corpus/sanlock_status/sanlock-3.8.5-lockspace-and-lease");
        let st = parse(real).expect("parse");
        assert!(!st.use_watchdog);
        // The real thing: 3.8.5 reports neither.
        assert_eq!((st.io_timeout, st.watchdog_fire_timeout), (None, None));
        assert_eq!(st.kill_grace_seconds, 40);
        let ls = &st.lockspaces[0];
        assert_eq!((ls.name.as_str(), ls.host_id, ls.io_timeout), ("ls1", 1, 1));
        assert!(ls.healthy());
        let r = &st.resources[0];
        assert_eq!(
            (r.lockspace.as_str(), r.name.as_str(), r.list.as_str()),
            ("ls1", "res1", "held")
        );
        assert!(r.pid > 0 && !r.shared);
        assert!(st.clients.iter().any(|c| c.pid == r.pid));
    }

    #[test]
    fn a_failed_lockspace_is_not_healthy() {
        let st = parse(&sample(false, true)).expect("parse");
        assert!(!st.use_watchdog);
        assert!(!st.lockspaces[0].healthy());
        assert!(st.lockspaces[0].space_dead && st.lockspaces[0].killing_pids);
    }

    #[test]
    fn every_cut_of_a_reply_is_an_error_naming_its_offset() {
        let full = sample(true, false);
        for n in 1..full.len() {
            match parse(&full[..n]) {
                Ok(_) => {
                    // Cut exactly between records: a shorter, valid reply.
                    continue;
                }
                Err(StatusError::Malformed { offset, .. }) => assert!(offset <= n, "{n}"),
                Err(e) => panic!("{e}"),
            }
        }
    }

    #[test]
    fn oversized_fields_are_refused_before_reading_them() {
        let mut b = request().to_vec();
        let mut r = record(TYPE_DAEMON, 0, 0, "h", "x");
        r[72..76].copy_from_slice(&u32::MAX.to_le_bytes());
        b.extend(r);
        let e = parse(&b).expect_err("huge text");
        assert!(e.to_string().contains("more than 4096"), "{e}");
        let mut bad = request().to_vec();
        bad[0] = 0;
        assert!(parse(&bad)
            .expect_err("magic")
            .to_string()
            .contains("magic"));
    }
}
