//! This node's side of the NBD plane: the listener on `--nbd-ip`, the thin volumes it
//! serves to other nodes, and who may reach them.
//!
//! A client is given an export only when all of these hold:
//! - the name is `lvmeta1/<lv id>/<host id>/<secret>` and this node serves that LV;
//! - the secret is the one in the pool's serve record (compared in constant time; only
//!   hosts that see the LUN can read it);
//! - the pool's board has a STAGED slot of that host for that LV, and the connection comes
//!   from the address that slot names.
//!
//! A client failing the first two is told ERR_UNKNOWN (not served here: an attached node
//! takes it as its server gone); one failing only the last is told ERR_POLICY (the server
//! is alive and serves the LV, just not to that host now).
//!
//! A host whose slot is a reader-only staging (ROX) gets the export read-only: told so in
//! the handshake, its writes, trims and zeroes refused (EPERM).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use lvmeta::lease::board::{Board, SlotState};
use lvmeta::session::PoolBoard;

use crate::driver::Driver;
use crate::nbd::limits::Limits;
use crate::nbd::listener::{Finder, Listener};
use crate::nbd::{Export, Grant, Refusal};

/// How this node takes part in NBD (node options `--nbd-*`).
#[derive(Debug, Clone)]
pub struct NbdSetup {
    /// Where this node's server listens, and the address its connections come from.
    pub addr: SocketAddr,
    /// This host's sanlock host id (it names slots and wrappers).
    pub host_id: u64,
    /// Connections per attached volume.
    pub connections: usize,
    /// Seconds before a late request kills its connection and is requeued.
    pub timeout: u64,
    /// Seconds I/O waits with no live connection before it fails.
    pub dead_timeout: u64,
    /// How long a served request the thin LV fails with EIO is retried before EIO is
    /// answered ([`crate::nbd::Export::hold_io_errors`]): longer than the fencing sweep
    /// takes to see a lost path in the lockspace and close the export.
    pub io_error_hold: std::time::Duration,
}

/// A volume this node serves.
#[derive(Clone)]
pub struct Served {
    /// The export (the thin LV's device).
    pub export: Arc<Export>,
    /// The pool record's secret.
    pub secret: [u8; 16],
    /// The pool record's epoch: a client's slot must be staged for it.
    pub epoch: u64,
    /// The pool's board.
    pub board: PoolBoard,
}

type Table = Arc<Mutex<HashMap<String, Served>>>;

/// The listener and the served volumes, by thin LV id.
pub struct Serving {
    setup: NbdSetup,
    exports: Table,
    listener: Mutex<Listener>,
    /// Held from reading a pool's secret to registering its export, and while its record
    /// is rewritten: one secret and one epoch per pool.
    records: Mutex<()>,
    /// When this node's slots were last checked against its generation.
    stamped: crate::every::Every,
}

impl Serving {
    /// Starts the listener on `setup.addr`; `driver` reads the boards clients are checked
    /// against.
    pub fn start(setup: NbdSetup, driver: Arc<Driver>) -> std::io::Result<Self> {
        let exports: Table = Arc::default();
        let table = exports.clone();
        let find: Arc<Finder> = Arc::new(move |peer: Option<IpAddr>, name: &[u8]| {
            admit_by_name(&table, &driver, peer, name)
        });
        let listener = Listener::bind(setup.addr, find, Limits::default())?;
        Ok(Self {
            setup,
            exports,
            listener: Mutex::new(listener),
            records: Mutex::new(()),
            stamped: crate::every::Every::default(),
        })
    }

    /// A new export of `dev` that every client node may open its connections to, holding
    /// I/O errors for the setup's `io_error_hold`.
    pub fn new_export(&self, dev: Box<dyn lvmeta::dev::BlockDevice>) -> Arc<Export> {
        let most = self.setup.connections.max(1) * lvmeta::lease::board::SLOTS;
        let export = Export::new(dev, false, most);
        export.hold_io_errors(self.setup.io_error_hold);
        export
    }

    /// Is a check of this node's slots against its generation due (one every `every`)?
    /// Marks it done.
    pub fn stamp_due(&self, every: std::time::Duration) -> bool {
        self.stamped.due(every)
    }

    /// Serialises the pools' record writes (see the field).
    pub fn records(&self) -> std::sync::MutexGuard<'_, ()> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The node's NBD options.
    pub fn setup(&self) -> &NbdSetup {
        &self.setup
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .local_addr()
    }

    /// A connection to the export of `lv_id` inside this process (see
    /// [`Listener::serve_local`]): how this node's own NBD device reaches a volume it has
    /// just taken over.
    pub fn local_stream(&self, lv_id: &str) -> std::io::Result<std::os::unix::net::UnixStream> {
        let export = self.get(lv_id).map(|s| s.export).ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("LV {lv_id} is not served here"),
            )
        })?;
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .serve_local(export)
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Served>> {
        self.exports.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Serves thin LV `lv_id`.
    pub fn add(&self, lv_id: &str, served: Served) {
        self.table().insert(lv_id.to_owned(), served);
    }

    /// What is served for `lv_id`.
    pub fn get(&self, lv_id: &str) -> Option<Served> {
        self.table().get(lv_id).cloned()
    }

    /// The record's secret and epoch of pool `pool_lv_id` while this node serves any LV of
    /// it.
    pub fn pool_secret(&self, pool_lv_id: &str) -> Option<([u8; 16], u64)> {
        self.table()
            .values()
            .find(|s| s.board.pool_lv_id == pool_lv_id)
            .map(|s| (s.secret, s.epoch))
    }

    /// Stops serving `lv_id`: its connections end without replies and its device is
    /// closed when this returns.
    pub fn remove(&self, lv_id: &str) -> Option<Served> {
        let served = self.table().remove(lv_id)?;
        served.export.close();
        Some(served)
    }

    /// Stops accepting and closes every export (the process is ending).
    pub fn stop(&self) {
        self.listener
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .stop();
        let all: Vec<Served> = self.table().drain().map(|(_, s)| s).collect();
        for s in all {
            s.export.close();
        }
    }
}

/// The export name a client of host `host` asks for thin LV `lv_id`.
pub fn export_name(lv_id: &str, host: u64, secret: &[u8; 16]) -> String {
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    format!("lvmeta1/{lv_id}/{host}/{hex}")
}

/// `(lv id, host, secret)` of an export name, `None` for anything else.
pub fn parse_export_name(name: &[u8]) -> Option<(String, u64, [u8; 16])> {
    let name = std::str::from_utf8(name).ok()?;
    let mut parts = name.split('/');
    let (tag, lv, host, hex) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if tag != "lvmeta1" || parts.next().is_some() || hex.len() != 32 || lv.len() > 64 {
        return None;
    }
    if host.is_empty() || !host.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let host: u64 = host.parse().ok()?;
    let mut secret = [0u8; 16];
    for (i, b) in secret.iter_mut().enumerate() {
        *b = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some((lv.to_owned(), host, secret))
}

/// Does `board` let host `host`, connecting from `peer`, reach thin LV `lv_id`: a STAGED
/// slot of that host for that LV, for record epoch `epoch`, naming that address? When it
/// does, whether that host may only read (every such slot is a reader-only staging).
pub fn admits(
    board: &Board,
    lv_id: &str,
    epoch: u64,
    host: u64,
    peer: Option<IpAddr>,
) -> Option<bool> {
    let peer = peer.map(canonical)?;
    let mut matching = board.slots_of(lv_id).filter(|(_, s)| {
        s.host == host
            && s.epoch == epoch
            && s.state == SlotState::Staged
            && canonical(s.addr) == peer
    });
    let first = matching.next()?;
    Some(first.1.read_only && matching.all(|(_, s)| s.read_only))
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Equal without a timing difference on where they differ.
fn same_secret(a: &[u8; 16], b: &[u8; 16]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn admit_by_name(
    table: &Table,
    driver: &Driver,
    peer: Option<IpAddr>,
    name: &[u8],
) -> Result<Grant, Refusal> {
    let Some((lv_id, host, secret)) = parse_export_name(name) else {
        // Not a name this node gives, so no secret of ours is in it.
        let shown = crate::params::shown(&String::from_utf8_lossy(name)).to_string();
        tracing::debug!(?peer, name = %shown, "NBD export refused: not a name this node gives");
        return Err(Refusal::NotServed);
    };
    let served = table
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&lv_id)
        .cloned();
    let Some(served) = served.filter(|s| same_secret(&s.secret, &secret)) else {
        tracing::warn!(?peer, host, lv_id = %crate::params::shown(&lv_id), "NBD export refused: not served here, or a stale secret");
        return Err(Refusal::NotServed);
    };
    match driver.session().read_board(&served.board) {
        Ok(board) => match admits(&board, &lv_id, served.epoch, host, peer) {
            Some(read_only_client) => Ok(Grant {
                export: served.export,
                read_only_client,
            }),
            None => {
                tracing::warn!(
                    ?peer,
                    host,
                    lv_id,
                    "NBD export refused: that host has no slot staging it from this address"
                );
                Err(Refusal::NotAdmitted)
            }
        },
        // This node may have lost its path to the LUN: a client may take the pool once
        // sanlock says so.
        Err(e) => {
            tracing::warn!(?peer, host, lv_id, error = %e, "NBD export refused: the board cannot be read");
            Err(Refusal::NotServed)
        }
    }
}

/// 16 random bytes for a serve record's secret.
pub fn new_secret() -> std::io::Result<[u8; 16]> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lvmeta::lease::board::Slot;

    const LV: &str = "abcdefAB-1234-xxxx-yyyy-zzzz-wwww-vvvvvv";

    #[test]
    fn export_names_round_trip_and_nothing_else_parses() {
        let secret = [0xa5; 16];
        let name = export_name(LV, 7, &secret);
        assert_eq!(
            parse_export_name(name.as_bytes()),
            Some((LV.to_owned(), 7, secret))
        );
        for bad in [
            "",
            "lvmeta1",
            "lvmeta2/x/7/a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5",
            "lvmeta1/x/seven/a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5",
            "lvmeta1/x/7/a5a5",
            "lvmeta1/x/7/zza5a5a5a5a5a5a5a5a5a5a5a5a5a5a5",
            "lvmeta1/x/7/a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5/more",
            "lvmeta1/x/+7/a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5",
            "lvmeta1/x/7/+5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5",
            "lvmeta1/x/7/a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5é",
        ] {
            assert_eq!(parse_export_name(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(parse_export_name(&[0xff, 0xfe]), None);
    }

    fn board(state: SlotState, addr: IpAddr) -> Board {
        Board {
            record: None,
            slots: vec![(
                3,
                Slot {
                    lv_id: LV.replace('-', ""),
                    host: 2,
                    generation: 0,
                    state,
                    read_only: false,
                    epoch: 1,
                    written_ms: 0,
                    addr,
                },
            )],
        }
    }

    #[test]
    fn only_a_staged_slot_of_that_host_lv_and_address_admits() {
        let ip: IpAddr = "192.0.2.7".parse().expect("ip");
        let b = board(SlotState::Staged, ip);
        assert_eq!(admits(&b, LV, 1, 2, Some(ip)), Some(false));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().expect("ip");
        assert!(
            admits(&b, LV, 1, 2, Some(mapped)).is_some(),
            "v4-mapped peer"
        );
        assert!(
            admits(&b, LV, 2, 2, Some(ip)).is_none(),
            "a slot of another epoch"
        );
        assert!(admits(&b, LV, 1, 3, Some(ip)).is_none(), "another host");
        assert!(admits(&b, "other", 1, 2, Some(ip)).is_none(), "another LV");
        let elsewhere = Some("192.0.2.8".parse().expect("ip"));
        assert!(admits(&b, LV, 1, 2, elsewhere).is_none(), "another address");
        assert!(admits(&b, LV, 1, 2, None).is_none(), "no peer address");
        let leaving = board(SlotState::Leaving, ip);
        assert!(admits(&leaving, LV, 1, 2, Some(ip)).is_none());
        // A reader-only staging may only read.
        let mut ro = board(SlotState::Staged, ip);
        ro.slots[0].1.read_only = true;
        assert_eq!(admits(&ro, LV, 1, 2, Some(ip)), Some(true));
    }

    #[test]
    fn secrets_compare_whole() {
        let a = [1u8; 16];
        let mut b = a;
        assert!(same_secret(&a, &b));
        b[15] ^= 1;
        assert!(!same_secret(&a, &b));
    }
}
