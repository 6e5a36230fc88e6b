//! A small NBD server: a thin volume of a pool active on this node served to the other
//! nodes that stage it (see docs/csi.md).
//!
//! - `proto.rs`: the messages, pure.
//! - `handshake.rs`: the fixed newstyle handshake, whole within a deadline.
//! - `conn.rs`: one connection's transmission, pipelined: requests are read in order, run on
//!   a shared worker pool, and answered as they complete (matched by cookie).
//! - `buffers.rs`: payload buffers reused within a connection.
//! - `limits.rs`: what any client may cost: bytes and requests in flight, connections.
//! - `listener.rs`: the TCP listener on the node's configured address.
//!
//! An [`Export`] that is closed (the pool handed over, this node fenced) drops its
//! connections without replying: the kernel client requeues unanswered requests on its next
//! connection instead of failing them, so a pod sees a pause, never an error.
//!
//! Every write is durable before it is answered (`durable.rs`): a node that dies or loses
//! its path loses nothing it answered, so the node that takes its pools over serves every
//! answered write.

mod buffers;
mod client;
mod conn;
mod durable;
mod handshake;
mod later;
pub mod limits;
pub mod listener;
pub mod proto;

pub use client::{disconnect, go, ClientError, Negotiated};
pub use conn::{Server, Wire};
pub use handshake::ServeError;

/// Why a client is not given the export it named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not served here, or named with a stale secret (`ERR_UNKNOWN`): a client that was
    /// attached takes this as its server gone.
    NotServed,
    /// Served here, but not to this client now (no staging of it from that address, or
    /// the export's connections all taken; `ERR_POLICY`): the server is alive.
    NotAdmitted,
}

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use lvmeta::dev::BlockDevice;

/// What a client is given: a device, and whether its writes are refused.
///
/// - The device is held behind a lock that every request holds across its I/O: when
///   [`Export::close`] returns, no request is doing I/O and none will, and the device
///   is closed (its descriptor with it, so the LV can be deactivated).
pub struct Export {
    /// The device (the thin LV's, on this node); None once closed.
    dev: RwLock<Option<Box<dyn BlockDevice>>>,
    /// Set first by [`Export::close`]: a request that gets the device after it does no I/O
    /// (the lock alone does not promise the closer a turn before later readers).
    closing: AtomicBool,
    /// The device's size; it grows with [`Export::replace_device`].
    size: AtomicU64,
    block: u32,
    /// Writes, trims and zeroes are refused (EPERM).
    pub read_only: bool,
    /// At most this many connections at once (a kernel client opens a few per device).
    pub max_connections: usize,
    next_id: AtomicU64,
    /// How to end each open connection, by connection id.
    open: Mutex<HashMap<u64, Box<dyn Fn() + Send>>>,
    /// How long a request the device fails with EIO is retried before EIO is answered, in
    /// milliseconds ([`Export::hold_io_errors`]).
    hold_ms: AtomicU64,
    /// The device flushes that make each write durable before it is answered.
    flushes: durable::Flushes,
}

/// An export as one client may have it.
#[derive(Clone)]
pub struct Grant {
    /// The export.
    pub export: Arc<Export>,
    /// This client may only read (a reader-only staging), whatever the export allows.
    pub read_only_client: bool,
}

impl Grant {
    /// Writes, trims and zeroes are refused to this client (EPERM).
    pub fn read_only(&self) -> bool {
        self.read_only_client || self.export.read_only
    }
}

impl From<Arc<Export>> for Grant {
    /// The export with everything it allows.
    fn from(export: Arc<Export>) -> Self {
        Self {
            export,
            read_only_client: false,
        }
    }
}

impl Export {
    /// An open export of `dev` accepting `max_connections` connections at once.
    pub fn new(dev: Box<dyn BlockDevice>, read_only: bool, max_connections: usize) -> Arc<Self> {
        Arc::new(Self {
            size: AtomicU64::new(dev.size()),
            block: dev.io_align(),
            dev: RwLock::new(Some(dev)),
            closing: AtomicBool::new(false),
            read_only,
            max_connections,
            next_id: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
            hold_ms: AtomicU64::new(0),
            flushes: durable::Flushes::default(),
        })
    }

    /// Retries a request the device fails with EIO for up to `hold` before answering EIO;
    /// a request still failing when the export closes is dropped unanswered (the client
    /// requeues it). A lost path to the LUN then reaches clients as a pause until another
    /// node serves, as multipath's queueing does, while a lasting device error still
    /// reaches them after `hold`. Zero (the default): EIO is answered at once.
    pub fn hold_io_errors(&self, hold: std::time::Duration) {
        let ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX);
        self.hold_ms.store(ms, Ordering::SeqCst);
    }

    /// See [`Export::hold_io_errors`].
    fn io_error_hold(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.hold_ms.load(Ordering::SeqCst))
    }

    /// The export's size in bytes.
    pub fn size(&self) -> u64 {
        self.size.load(Ordering::SeqCst)
    }

    /// Serves `dev` from now on (the same LV, opened again after it grew): waits for the
    /// I/O in flight, swaps, and takes the new size. Connections stay open; a closed
    /// export stays closed.
    pub fn replace_device(&self, dev: Box<dyn BlockDevice>) {
        let mut held = self.dev.write().unwrap_or_else(|p| p.into_inner());
        if held.is_none() || self.closing.load(Ordering::SeqCst) {
            return;
        }
        self.size.store(dev.size(), Ordering::SeqCst);
        *held = Some(dev);
    }

    /// The smallest block clients must use (the device's I/O alignment).
    pub fn block_size(&self) -> u32 {
        self.block
    }

    /// Closes the export: waits for requests doing I/O to finish, closes the device, and
    /// drops every connection with its unanswered requests unanswered (the client requeues
    /// them). No new connection is taken.
    pub fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        let dev = self.dev.write().unwrap_or_else(|p| p.into_inner()).take();
        drop(dev);
        for (_, end) in self.lock().drain() {
            end();
        }
    }

    /// Whether [`Export::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Runs `f` on the device, holding it open; None once closed.
    fn with_device<R>(&self, f: impl FnOnce(&dyn BlockDevice) -> R) -> Option<R> {
        // Closing: not even waiting for the lock (the closer holds it until the I/O in
        // flight is done).
        if self.is_closed() {
            return None;
        }
        let dev = self.dev.read().unwrap_or_else(|p| p.into_inner());
        if self.is_closed() {
            return None;
        }
        dev.as_deref().map(f)
    }

    /// How many connections are open.
    pub fn connections(&self) -> usize {
        self.lock().len()
    }

    /// Registers a connection ended by `end`; None when closed or full.
    fn attach(&self, end: Box<dyn Fn() + Send>) -> Option<u64> {
        let mut open = self.lock();
        // Checked under the lock: `close` drains after closing the device.
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
