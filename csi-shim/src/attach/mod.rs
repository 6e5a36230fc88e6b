//! Attaching a volume that another node serves: the kernel's NBD client, configured over
//! generic netlink (`netlink.rs`) with sockets this process connected and handshook
//! (`crate::nbd::go`).
//!
//! - No INDEX is ever asked for: the kernel picks a free device or makes one, so no race
//!   with udev holding a pre-made `/dev/nbdN`.
//! - Each device carries a backend identifier naming the volume, so it is found again after
//!   a restart (`/sys/block/nbdN/backend`) and a reconfiguration cannot reach another's.
//! - Dead sockets are replaced with RECONFIGURE, never by tearing the device down: I/O
//!   waits (up to the dead-connection timeout) instead of failing.
//! - RECONFIGURE fills dead slots only (the kernel drops a socket for which it finds none,
//!   and says nothing): before it, this process ends the device's old connections through
//!   its own handles on them ([`Sockets`]), so that the kernel counts them dead.

pub mod netlink;

use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, SocketAddrV6, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::nbd::{disconnect, go, ClientError, Negotiated};
use netlink::{Connect, NbdNetlink};

/// How a device is attached.
#[derive(Debug, Clone)]
pub struct AttachOptions {
    /// Connections to the server (the kernel spreads requests over them).
    pub connections: usize,
    /// Seconds before a late request kills its connection and is requeued.
    pub timeout: u64,
    /// Seconds I/O waits with no live connection before it fails.
    pub dead_timeout: u64,
    /// The device's backend identifier.
    pub identifier: String,
    /// The local address connections come from (the server checks it), when set; its
    /// port is not used, its scope is (an IPv6 link-local address).
    pub source: Option<SocketAddr>,
}

/// How long each step of a handshake (connect, each read or write) may take: a server that
/// accepts and then says nothing must not hold the caller (the node's watch thread).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `n` connections to `addr` (from `source` when given), each past the handshake for
/// export `name` (TCP_NODELAY; [`HANDSHAKE_TIMEOUT`] per step, no timeout left on the
/// socket for the kernel), and what the server said of the export.
pub fn handshake_sockets(
    addr: SocketAddr,
    source: Option<SocketAddr>,
    name: &[u8],
    n: usize,
) -> io::Result<(Vec<TcpStream>, Negotiated)> {
    let mut socks = Vec::with_capacity(n);
    let mut neg = None;
    for _ in 0..n.max(1) {
        let mut s = connect_with(source, addr, Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| io::Error::new(e.kind(), format!("NBD server {addr}: {e}")))?;
        s.set_nodelay(true)?;
        neg = Some(go(&mut s, name).map_err(|e| io::Error::other(format!("{addr}: {e}")))?);
        // The kernel's receive thread would take a socket timeout for a dead connection.
        s.set_read_timeout(None)?;
        s.set_write_timeout(None)?;
        socks.push(s);
    }
    let neg = neg.ok_or_else(|| io::Error::other("no connection"))?;
    Ok((socks, neg))
}

/// How long the kernel's receive threads get to see connections this process ended.
const KERNEL_SEES_END: Duration = Duration::from_millis(200);

/// This process's handles on the sockets it gave a kernel NBD device.
/// - The kernel holds its own reference; these only let this process end a connection the
///   kernel still thinks alive (its server gone or replaced). The kernel's receive thread
///   then fails, marks the socket dead and requeues its requests; RECONFIGURE can fill it.
/// - Empty after this process restarts (the kernel's sockets are not found again).
#[derive(Clone, Default)]
pub struct Sockets(Arc<Vec<TcpStream>>);

impl Sockets {
    /// Handles on `socks`, which a kernel NBD device was given.
    pub fn new(socks: Vec<TcpStream>) -> Self {
        Self(Arc::new(socks))
    }

    /// Ends every connection, both ways, and gives the kernel a moment to count them dead.
    pub fn end(&self) {
        if self.0.is_empty() {
            return;
        }
        for s in self.0.iter() {
            // Already ended (by the kernel or the peer): nothing more to do.
            let _ = s.shutdown(Shutdown::Both);
        }
        std::thread::sleep(KERNEL_SEES_END);
    }
}

/// A kernel NBD device made by [`attach`].
pub struct Attachment {
    /// The device's index (`/dev/nbdN`).
    pub index: u32,
    /// What the server said of the export.
    pub negotiated: Negotiated,
    /// This process's handles on the device's sockets.
    pub sockets: Sockets,
}

/// Attaches export `name` at `addr` as a new kernel NBD device.
pub fn attach(
    nl: &NbdNetlink,
    addr: SocketAddr,
    name: &[u8],
    o: &AttachOptions,
) -> io::Result<Attachment> {
    let (socks, neg) = handshake_sockets(addr, o.source, name, o.connections)?;
    let conf = Connect {
        size: neg.size,
        block_size: u64::from(neg.block.0),
        timeout: o.timeout,
        dead_timeout: o.dead_timeout,
        server_flags: neg.flags,
        identifier: o.identifier.clone(),
    };
    let fds: Vec<_> = socks.iter().map(|s| s.as_fd()).collect();
    let index = nl.connect(&conf, &fds)?;
    Ok(Attachment {
        index,
        negotiated: neg,
        sockets: Sockets::new(socks),
    })
}

/// A TCP connection to `to`, bound first to `from`'s address (any port) when given.
pub fn connect_from(from: Option<SocketAddr>, to: SocketAddr) -> io::Result<TcpStream> {
    connect_with(from, to, None)
}

/// [`connect_from`], given up after `timeout` when set (then also the socket's read and
/// write timeout).
fn connect_with(
    from: Option<SocketAddr>,
    to: SocketAddr,
    timeout: Option<Duration>,
) -> io::Result<TcpStream> {
    use nix::sys::socket::{
        bind, connect, setsockopt, socket, sockopt, AddressFamily, SockFlag, SockType,
        SockaddrStorage,
    };
    let Some(mut from) = from else {
        let s = match timeout {
            Some(t) => TcpStream::connect_timeout(&to, t)?,
            None => TcpStream::connect(to)?,
        };
        s.set_read_timeout(timeout)?;
        s.set_write_timeout(timeout)?;
        return Ok(s);
    };
    from.set_port(0);
    let family = match to {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let fd = socket(family, SockType::Stream, SockFlag::SOCK_CLOEXEC, None)?;
    if let Some(t) = timeout {
        // Linux bounds a blocking connect by the send timeout (socket(7)).
        let tv = nix::sys::time::TimeVal::new(
            i64::try_from(t.as_secs()).unwrap_or(i64::MAX),
            i64::from(t.subsec_micros()),
        );
        setsockopt(&fd, sockopt::SendTimeout, &tv)?;
        setsockopt(&fd, sockopt::ReceiveTimeout, &tv)?;
    }
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(from),
    )?;
    connect(
        std::os::fd::AsRawFd::as_raw_fd(&fd),
        &SockaddrStorage::from(to),
    )?;
    Ok(TcpStream::from(fd))
}

/// Does the server at `to` open export `name` to this node (connecting from `from`) within
/// `timeout` for each step? The connection is then closed with a DISC request.
pub fn probe(
    to: SocketAddr,
    from: Option<SocketAddr>,
    name: &[u8],
    timeout: Duration,
) -> Result<(), ProbeError> {
    let mut s = connect_with(from, to, Some(timeout))?;
    go(&mut s, name).map_err(|e| match e {
        ClientError::Refused(crate::nbd::proto::rep::ERR_POLICY) => ProbeError::TurnedAway(to),
        e => ProbeError::Gone(io::Error::other(format!("{to}: {e}"))),
    })?;
    // The answer was the handshake; a lost DISC only ends the connection less politely.
    let _ = disconnect(&mut s);
    let _ = s.shutdown(Shutdown::Both);
    Ok(())
}

/// Why a [`probe`] did not open the export.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The server is up and serves the export, but refuses it to this node for now
    /// (`ERR_POLICY`: no STAGED slot of this node from this address, or the export's
    /// connections all taken).
    #[error("{0}: the server serves the export but refuses it to this node for now")]
    TurnedAway(SocketAddr),
    /// No server answered, or it does not serve the export (any other refusal, a
    /// connection closed or timed out).
    #[error(transparent)]
    Gone(#[from] io::Error),
}

/// `IP`, or `IP%INTERFACE` for an IPv6 link-local address, with `port`, as a socket
/// address (the interface's index as its scope).
pub fn scoped_addr(ip: &str, port: u16) -> Result<SocketAddr, String> {
    let (bare, iface) = match ip.split_once('%') {
        Some((ip, iface)) => (ip, Some(iface)),
        None => (ip, None),
    };
    let parsed: IpAddr = bare
        .parse()
        .map_err(|e| format!("{ip:?} is not an IP address: {e}"))?;
    match (parsed, iface) {
        (IpAddr::V6(v6), Some(iface)) => {
            let scope = nix::net::if_::if_nametoindex(iface)
                .map_err(|e| format!("{ip:?}: interface {iface:?}: {e}"))?;
            Ok(SocketAddr::V6(SocketAddrV6::new(v6, port, 0, scope)))
        }
        (_, Some(_)) => Err(format!("{ip:?}: only IPv6 addresses take an %interface")),
        (ip, None) => Ok(SocketAddr::new(ip, port)),
    }
}

/// The kernel NBD devices whose backend identifier is `identifier`.
pub fn devices_of(identifier: &str) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir("/sys/block") {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        let Some(index) = name
            .to_str()
            .and_then(|n| n.strip_prefix("nbd"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let backend = std::fs::read_to_string(format!("/sys/block/nbd{index}/backend"));
        if backend.is_ok_and(|b| b.trim_end_matches('\n') == identifier) {
            found.push(index);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The device node of NBD device `index`.
pub fn device_path(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nbd{index}"))
}
