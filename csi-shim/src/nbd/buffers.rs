//! Payload buffers reused within one connection.
//!
//! - A fresh buffer per request costs an allocation, page faults on every page and an
//!   unmap once sent; reused buffers cost none of these.
//! - A pool belongs to one connection, so a reused buffer only ever held data of the
//!   export that connection is attached to; and every byte a reply sends was written by
//!   the socket read or the device read of that request (a failed read sends no data).
//! - The pool keeps at most `keep` bytes idle; what is in flight is bounded by the
//!   connection's budget ([`super::limits`]), not here.

use std::sync::{Arc, Mutex};

use lvmeta::dev::AlignedBuf;

/// Idle bytes a connection keeps for its next requests: a few of the kernel client's
/// largest requests (its `max_sectors`, 1 MiB and more), little beside what flight takes.
pub const IDLE_PER_CONNECTION: usize = 4 << 20;

/// Idle buffers of one connection.
pub struct Buffers {
    idle: Mutex<Vec<AlignedBuf>>,
    keep: usize,
}

impl Buffers {
    /// A pool keeping at most `keep` idle bytes.
    pub fn new(keep: usize) -> Arc<Self> {
        Arc::new(Self {
            idle: Mutex::new(Vec::new()),
            keep,
        })
    }

    /// A buffer of `len` bytes: the smallest idle one large enough, or a new one.
    pub fn take(self: &Arc<Self>, len: usize) -> Pooled {
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
        if buf.capacity() > 0 && held + buf.capacity() <= self.keep {
            idle.push(buf);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<AlignedBuf>> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
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
        let pool = Buffers::new(1 << 20);
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
        let pool = Buffers::new(100 << 10);
        let (a, b) = (pool.take(64 << 10), pool.take(64 << 10));
        drop(a);
        drop(b);
        assert!(held(&pool.lock()) <= 100 << 10);
        assert!(held(&pool.lock()) >= 64 << 10);
    }

    #[test]
    fn a_larger_request_gets_a_new_buffer() {
        let pool = Buffers::new(1 << 20);
        drop(pool.take(4096));
        let big = pool.take(128 << 10);
        assert_eq!(big.as_slice().len(), 128 << 10);
        assert!(held(&pool.lock()) >= 4096, "the small one stays idle");
    }
}
