//! The TCP listener: bound to the node's configured address only, accepting at most
//! [`Limits::max_connections`] connections at once, one thread per connection.
//!
//! - Accepted sockets get TCP_NODELAY and keepalive (a vanished peer is noticed within a
//!   minute even when idle).
//! - A connection over the limit is closed as it arrives, before any byte is sent. One from
//!   an address that has [`Limits::handshakes_per_peer`] connections in their handshake
//!   already ends the oldest of them.
//! - [`Listener::stop`] stops accepting; open connections end with their exports.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use nix::sys::socket::{setsockopt, shutdown, sockopt, Shutdown};

use super::conn::{Server, Wire};
use super::limits::Limits;
use super::{Export, Grant, Refusal};

/// Finds the export named by a client at an address, as that client may have it, or why
/// it may not.
pub type Finder = dyn Fn(Option<IpAddr>, &[u8]) -> Result<Grant, Refusal> + Send + Sync;

/// A running listener.
pub struct Listener {
    socket: Arc<TcpListener>,
    addr: SocketAddr,
    stopping: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    server: Arc<Server>,
    thread: Option<JoinHandle<()>>,
}

impl Listener {
    /// Binds `addr` (an unspecified address is refused: the server listens on one
    /// network only) and starts accepting.
    pub fn bind(addr: SocketAddr, find: Arc<Finder>, limits: Limits) -> io::Result<Self> {
        if addr.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("NBD listener {addr}: an unspecified address would listen everywhere"),
            ));
        }
        let socket = Arc::new(
            TcpListener::bind(addr)
                .map_err(|e| io::Error::new(e.kind(), format!("NBD listener {addr}: {e}")))?,
        );
        let addr = socket.local_addr()?;
        let server = Server::new(limits)?;
        let stopping = Arc::new(AtomicBool::new(false));
        let open = Arc::new(AtomicUsize::new(0));
        let accept = Accept {
            socket: socket.clone(),
            stopping: stopping.clone(),
            open: open.clone(),
            server: server.clone(),
            find,
            handshaking: Arc::default(),
            crowded: crate::every::Every::default(),
        };
        let thread = std::thread::Builder::new()
            .name("nbd-accept".into())
            .spawn(move || accept.run())?;
        tracing::info!(%addr, "NBD server listening");
        Ok(Self {
            socket,
            addr,
            stopping,
            open,
            server,
            thread: Some(thread),
        })
    }

    /// The address bound (with the port the system chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections open now.
    pub fn connections(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Payload bytes in flight now.
    pub fn bytes_in_flight(&self) -> u64 {
        self.server.bytes_in_flight()
    }

    /// A connection to `export` inside this process: one end of a unix socket pair past
    /// the handshake (for the kernel's NBD client), the other served by this listener's
    /// server on a thread of its own. Counts against the connection limit like any other.
    pub fn serve_local(&self, export: Arc<Export>) -> io::Result<UnixStream> {
        let (mut client, served) = UnixStream::pair()?;
        self.open.fetch_add(1, Ordering::SeqCst);
        let (open, server) = (self.open.clone(), self.server.clone());
        let spawned = std::thread::Builder::new()
            .name("nbd-local".into())
            .spawn(move || {
                let only = |_: &[u8]| Ok(export.clone().into());
                if let Err(e) = server.serve(served, &only, || {}) {
                    tracing::debug!(error = %e, "local NBD connection ended");
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            self.open.fetch_sub(1, Ordering::SeqCst);
            return Err(e);
        }
        super::go(&mut client, b"local")
            .map_err(|e| io::Error::other(format!("local NBD: {e}")))?;
        Ok(client)
    }

    /// Stops accepting (connections already open go on until their exports close).
    pub fn stop(&mut self) {
        self.stopping.store(true, Ordering::SeqCst);
        // Wakes the blocked accept(2) with an error; the socket may already be shut.
        let _ = shutdown(self.socket.as_raw_fd(), Shutdown::Read);
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!("NBD accept thread panicked");
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The accepting thread's state.
struct Accept {
    socket: Arc<TcpListener>,
    stopping: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
    server: Arc<Server>,
    find: Arc<Finder>,
    handshaking: Arc<Handshaking>,
    /// Rate limit of the warning for handshakes ended per peer.
    crowded: crate::every::Every,
}

/// Connections in their handshake, by peer address, oldest first, each with a handle to
/// end it.
#[derive(Default)]
struct Handshaking {
    next: AtomicU64,
    by_peer: Mutex<HashMap<Option<IpAddr>, Queue>>,
}

/// One address's connections in their handshake, oldest first: an id, and a handle.
type Queue = VecDeque<(u64, TcpStream)>;

/// One connection's place in [`Handshaking`], given back when dropped.
struct InHandshake {
    table: Arc<Handshaking>,
    peer: Option<IpAddr>,
    id: u64,
}

impl Handshaking {
    /// A place for `stream`'s handshake from `peer`; at `most` from that peer already, the
    /// oldest of them is ended to make room (a stalled flood from an address replaces its
    /// own connections, while a client there that completes its handshake gets through).
    /// Whether one was ended. None when no handle on `stream` could be made.
    fn enter(
        self: &Arc<Self>,
        peer: Option<IpAddr>,
        most: usize,
        stream: &TcpStream,
    ) -> Option<(InHandshake, bool)> {
        let handle = stream.try_clone().ok()?;
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut t = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        let q = t.entry(peer).or_default();
        let ended = q.len() >= most.max(1);
        if ended {
            if let Some((_, oldest)) = q.pop_front() {
                // Its thread sees the socket end, and gives its place back.
                let _ = oldest.shutdown(std::net::Shutdown::Both);
            }
        }
        q.push_back((id, handle));
        let place = InHandshake {
            table: self.clone(),
            peer,
            id,
        };
        Some((place, ended))
    }
}

impl Drop for InHandshake {
    fn drop(&mut self) {
        let mut t = self.table.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = t.get_mut(&self.peer) {
            q.retain(|(id, _)| *id != self.id);
            if q.is_empty() {
                t.remove(&self.peer);
            }
        }
    }
}

impl Accept {
    fn run(self) {
        for conn in self.socket.incoming() {
            if self.stopping.load(Ordering::SeqCst) {
                return;
            }
            let stream = match conn {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "NBD accept failed");
                    // Out of descriptors: let some connections end before trying again.
                    std::thread::sleep(std::time::Duration::from_millis(50));
                    continue;
                }
            };
            let peer = stream.peer_ip();
            if self.open.load(Ordering::SeqCst) >= self.server.limits().max_connections {
                tracing::warn!(?peer, "NBD connection refused: too many open");
                continue;
            }
            let most = self.server.limits().handshakes_per_peer;
            let Some((place, ended)) = self.handshaking.enter(peer, most, &stream) else {
                tracing::warn!(?peer, "NBD connection refused: no descriptor for it");
                continue;
            };
            if ended && self.crowded.due(std::time::Duration::from_secs(10)) {
                tracing::warn!(
                    ?peer,
                    most,
                    "NBD handshakes from one address over the limit: the oldest ended"
                );
            }
            if let Err(e) = tune(&stream) {
                tracing::debug!(?peer, error = %e, "NBD socket options not set");
            }
            self.open.fetch_add(1, Ordering::SeqCst);
            let (open, server, find) = (self.open.clone(), self.server.clone(), self.find.clone());
            let spawned = std::thread::Builder::new()
                .name("nbd-conn".into())
                .spawn(move || {
                    let by_name = |name: &[u8]| find(peer, name);
                    if let Err(e) = server.serve(stream, &by_name, move || drop(place)) {
                        tracing::debug!(?peer, error = %e, "NBD connection ended");
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            if let Err(e) = spawned {
                tracing::warn!(?peer, error = %e, "NBD connection dropped: no thread");
                self.open.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

/// TCP_NODELAY (replies are small and latency-bound) and keepalive: idle 10 s, then every
/// 5 s, dead after 3 unanswered.
fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let fd = stream.as_fd();
    setsockopt(&fd, sockopt::KeepAlive, &true)?;
    setsockopt(&fd, sockopt::TcpKeepIdle, &10)?;
    setsockopt(&fd, sockopt::TcpKeepInterval, &5)?;
    setsockopt(&fd, sockopt::TcpKeepCount, &3)?;
    Ok(())
}
