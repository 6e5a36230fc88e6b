//! A small NBD server: a thin volume of a pool active on this node served to the other
//! nodes that stage it (see docs/csi.md).
//!
//! - `proto.rs`: the messages, pure.
//! - `handshake.rs`: the fixed newstyle handshake, whole within a deadline.
//! - `conn.rs`: one connection's transmission, pipelined: requests are read in order, run on
//!   a shared worker pool, and answered as they complete (matched by cookie).
//! - `limits.rs`: what any client may cost: bytes and requests in flight, connections.
//! - `listener.rs`: the TCP listener on the node's configured address.
//!
//! An [`Export`] that is closed (the pool handed over, this node fenced) drops its
//! connections without replying: the kernel client requeues unanswered requests on its next
//! connection instead of failing them, so a pod sees a pause, never an error.

mod client;
mod conn;
mod handshake;
pub mod limits;
pub mod listener;
pub mod proto;

pub use client::{go, ClientError, Negotiated};
pub use conn::{serve, Server, Wire};
pub use handshake::ServeError;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lvmeta::dev::BlockDevice;

/// What a client is given: a device, and whether its writes are refused.
pub struct Export {
    /// The device (the thin LV's, on this node).
    pub dev: Box<dyn BlockDevice>,
    /// Writes, trims and zeroes are refused (EPERM).
    pub read_only: bool,
    /// At most this many connections at once (a kernel client opens a few per device).
    pub max_connections: usize,
    closed: AtomicBool,
    next_id: AtomicU64,
    /// How to end each open connection, by connection id.
    open: Mutex<HashMap<u64, Box<dyn Fn() + Send>>>,
}

impl Export {
    /// An open export of `dev` accepting `max_connections` connections at once.
    pub fn new(dev: Box<dyn BlockDevice>, read_only: bool, max_connections: usize) -> Arc<Self> {
        Arc::new(Self {
            dev,
            read_only,
            max_connections,
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        })
    }

    /// Closes the export: no new connection, no further I/O on the device, and every open
    /// connection dropped with its unanswered requests unanswered (the client requeues them).
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (_, end) in self.lock().drain() {
            end();
        }
    }

    /// Whether [`Export::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// How many connections are open.
    pub fn connections(&self) -> usize {
        self.lock().len()
    }

    /// Registers a connection ended by `end`; None when closed or full.
    fn attach(&self, end: Box<dyn Fn() + Send>) -> Option<u64> {
        let mut open = self.lock();
        // Checked under the lock: `close` drains after setting the flag.
        if self.is_closed() || open.len() >= self.max_connections {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        open.insert(id, end);
        Some(id)
    }

    fn detach(&self, id: u64) {
        self.lock().remove(&id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Box<dyn Fn() + Send>>> {
        // The map stays consistent whatever a panicking holder did.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }
}
