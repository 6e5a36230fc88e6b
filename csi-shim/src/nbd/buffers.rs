//! Payload buffers reused within one connection.
//!
//! - A fresh buffer per request costs an allocation, page faults on every page and an
//!   unmap once sent; reused buffers cost none of these.
//! - A pool belongs to one connection, so a reused buffer only ever held data of the
//!   export that connection is attached to; and every byte a reply sends was written by
//!   the socket read or the device read of that request (a failed read sends no data).
//! - A pool keeps at most `keep` bytes idle, and all pools of a node together at most
//!   their shared [`Idle`] cap; what is in flight is bounded by the budgets of
//!   [`super::limits`], not here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lvmeta::dev::AlignedBuf;

/// Idle bytes a connection keeps for its next requests: four of the kernel client's
/// largest requests (its `max_sectors`, 1 MiB), each with its alignment slack.
pub const IDLE_PER_CONNECTION: usize = 4 * ((1 << 20) + 4096);

/// Idle bytes all connections of a node keep together.
pub const IDLE_PER_NODE: usize = 64 << 20;

/// Idle bytes of every pool of a node, against one cap.
pub struct Idle {
    held: AtomicUsize,
    cap: usize,
}

impl Idle {
    /// A node-wide count capped at `cap` bytes.
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(Self {
            held: AtomicUsize::new(0),
            cap,
        })
    }

    /// Counts `n` more idle bytes if the cap allows.
    fn reserve(&self, n: usize) -> bool {
        self.held
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |h| {
                (h + n <= self.cap).then_some(h + n)
            })
            .is_ok()
    }

    fn free(&self, n: usize) {
        self.held.fetch_sub(n, Ordering::SeqCst);
    }
}

/// Idle buffers of one connection.
pub struct Buffers {
    idle: Mutex<Vec<AlignedBuf>>,
    keep: usize,
    node: Arc<Idle>,
}

impl Buffers {
    /// A pool keeping at most `keep` idle bytes, counted in `node` too.
    pub fn new(keep: usize, node: Arc<Idle>) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(Vec::new()),
            keep,
            node,
        })
    }

    /// A buffer of `len` bytes: the smallest idle one large enough, or a new one (an
    /// empty one for no payload, which takes nothing from the pool).
    pub fn take(self: &Arc<Self>, len: usize) -> Pooled {
        if len == 0 {
            return Pooled {
                buf: Some(AlignedBuf::new(0)),
                pool: self.clone(),
            };
        }
        let reused = {
            let mut idle = self.lock();
            let best = idle
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= len)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            best.map(|i| idle.swap_remove(i))
        };
        if let Some(b) = &reused {
            self.node.free(b.capacity());
        }
        let mut buf = reused.unwrap_or_else(|| AlignedBuf::new(len));
        buf.set_len(len);
        Pooled {
            buf: Some(buf),
            pool: self.clone(),
        }
    }

    fn give_back(&self, buf: AlignedBuf) {
        let mut idle = self.lock();
        let held = held(&idle);
        // Zero-length buffers hold nothing worth keeping.
        let n = buf.capacity();
        if n > 0 && held + n <= self.keep && self.node.reserve(n) {
            idle.push(buf);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AlignedBuf>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Buffers {
    fn drop(&mut self) {
        self.node.free(held(&self.lock()));
    }
}

/// Bytes held by `bufs`.
fn held(bufs: &[AlignedBuf]) -> usize {
    bufs.iter().map(AlignedBuf::capacity).sum()
}

/// A buffer taken from a pool, given back when dropped.
pub struct Pooled {
    /// Always `Some` until dropped.
    buf: Option<AlignedBuf>,
    pool: Arc<Buffers>,
}

impl Pooled {
    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], AlignedBuf::as_slice)
    }
    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut().map_or(&mut [], AlignedBuf::as_mut_slice)
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give_back(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_comes_back_and_serves_a_smaller_request() {
        let pool = Buffers::new(1 << 20, Idle::new(1 << 30));
        let first = pool.take(64 << 10);
        let at = first.as_slice().as_ptr();
        drop(first);
        assert!(held(&pool.lock()) >= 64 << 10);
        let again = pool.take(4096);
        assert_eq!(again.as_slice().len(), 4096);
        assert_eq!(again.as_slice().as_ptr(), at, "the idle buffer was reused");
        assert_eq!(
            again.as_slice().as_ptr() as usize % 4096,
            0,
            "still aligned"
        );
    }

    #[test]
    fn the_pool_keeps_no_more_than_its_bound() {
        let pool = Buffers::new(100 << 10, Idle::new(1 << 30));
        let (a, b) = (pool.take(64 << 10), pool.take(64 << 10));
        drop(a);
        drop(b);
        assert!(held(&pool.lock()) <= 100 << 10);
        assert!(held(&pool.lock()) >= 64 << 10);
    }

    #[test]
    fn the_node_cap_bounds_every_pool_and_frees_with_them() {
        let node = Idle::new(100 << 10);
        let (a, b) = (
            Buffers::new(1 << 20, node.clone()),
            Buffers::new(1 << 20, node.clone()),
        );
        let (x, y) = (a.take(64 << 10), b.take(64 << 10));
        drop(x);
        drop(y);
        assert!(
            held(&a.lock()) + held(&b.lock()) <= 100 << 10,
            "one kept, one freed"
        );
        drop(a);
        drop(b);
        assert_eq!(node.held.load(Ordering::SeqCst), 0);
        // No payload takes nothing from a pool.
        let c = Buffers::new(1 << 20, node.clone());
        drop(c.take(4096));
        let empty = c.take(0);
        assert!(empty.as_slice().is_empty());
        assert!(held(&c.lock()) >= 4096, "the idle buffer stays");
    }

    #[test]
    fn a_larger_request_gets_a_new_buffer() {
        let pool = Buffers::new(1 << 20, Idle::new(1 << 30));
        drop(pool.take(4096));
        let big = pool.take(128 << 10);
        assert_eq!(big.as_slice().len(), 128 << 10);
        assert!(held(&pool.lock()) >= 4096, "the small one stays idle");
    }
}
