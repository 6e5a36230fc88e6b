//! The TCP listener: bound to the node's configured address only, accepting at most
//! [`Limits::max_connections`] connections at once, one thread per connection.
//!
//! - Accepted sockets get TCP_NODELAY and keepalive (a vanished peer is noticed within a
//!   minute even when idle).
//! - A connection over the limit is closed as it arrives, before any byte is sent.
//! - [`Listener::stop`] stops accepting; open connections end with their exports.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
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
                if let Err(e) = server.serve(served, &only) {
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
            if let Err(e) = tune(&stream) {
                tracing::debug!(?peer, error = %e, "NBD socket options not set");
            }
            self.open.fetch_add(1, Ordering::SeqCst);
            let (open, server, find) = (self.open.clone(), self.server.clone(), self.find.clone());
            let spawned = std::thread::Builder::new()
                .name("nbd-conn".into())
                .spawn(move || {
                    let by_name = |name: &[u8]| find(peer, name);
                    if let Err(e) = server.serve(stream, &by_name) {
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
