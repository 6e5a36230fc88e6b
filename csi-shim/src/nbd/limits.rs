//! What any client may cost the node, whatever it sends.
//!
//! - Bytes in flight (WRITE payloads read, READ data not yet sent) are counted against one
//!   node-wide [`Budget`]: a reader waits for room before it reads more, so a flood only
//!   fills its own TCP window.
//! - Each connection also has its own smaller bytes budget, so one client (say, one that
//!   asks for large READs and never reads the replies) cannot take the node's; and a reply
//!   the client does not take in time ends its connection.
//! - Requests in flight per connection are bounded too, so tiny requests cannot queue
//!   without end either.
//! - The handshake has a deadline; connections per node and per export are bounded, and
//!   so are the connections one address has in their handshake.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::proto::MAX_PAYLOAD;

/// The server's limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The whole handshake, greeting to GO, must finish within this.
    pub handshake: Duration,
    /// Connections open at once on the node; more are closed as they arrive.
    pub max_connections: usize,
    /// Connections one peer address may have in their handshake at once; a new one from
    /// it ends the oldest (a flood of stalled handshakes from one machine leaves the
    /// listener to the others, and a client at that address still gets through).
    pub handshakes_per_peer: usize,
    /// Payload bytes in flight on the node (at least [`MAX_PAYLOAD`]).
    pub budget_bytes: u64,
    /// Requests in flight per connection.
    pub max_in_flight: u64,
    /// Payload bytes in flight per connection (at least [`MAX_PAYLOAD`]): one client cannot
    /// take the node's whole budget.
    pub connection_bytes: u64,
    /// A reply not taken by the client within this ends its connection (and frees what
    /// its requests hold).
    pub reply_timeout: Duration,
    /// Threads running device I/O, shared by every connection.
    pub workers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            handshake: Duration::from_secs(5),
            max_connections: 256,
            handshakes_per_peer: 16,
            budget_bytes: 256 << 20,
            max_in_flight: 256,
            connection_bytes: 64 << 20,
            reply_timeout: Duration::from_secs(30),
            workers: 16,
        }
    }
}

/// A counting semaphore of units (bytes, requests): [`Budget::take`] waits for room.
pub struct Budget {
    cap: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

impl Budget {
    /// A budget of `cap` units.
    pub fn new(cap: u64) -> Arc<Self> {
        Arc::new(Self {
            cap,
            used: Mutex::new(0),
            freed: Condvar::new(),
        })
    }

    /// Takes `n` units (at most the cap), waiting until they are free.
    pub fn take(self: &Arc<Self>, n: u64) -> Permit {
        let n = n.min(self.cap);
        let mut used = self.lock();
        while *used + n > self.cap {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += n;
        Permit {
            budget: self.clone(),
            n,
        }
    }

    /// Units in use now.
    pub fn used(&self) -> u64 {
        *self.lock()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        // A plain counter: consistent whatever a panicking holder did.
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Units of a [`Budget`], given back when dropped.
pub struct Permit {
    budget: Arc<Budget>,
    n: u64,
}

impl Drop for Permit {
    fn drop(&mut self) {
        *self.budget.lock() -= self.n;
        self.budget.freed.notify_all();
    }
}

/// A bytes budget of `cap` (the node's or a connection's), never below one largest
/// payload: a request of any allowed size can always be taken.
pub fn payload_budget(cap: u64) -> Arc<Budget> {
    Budget::new(cap.max(u64::from(MAX_PAYLOAD)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_waits_for_room_and_frees_on_drop() {
        let b = Budget::new(10);
        let big = b.take(100);
        assert_eq!(big.n, 10, "capped");
        drop(big);
        let a = b.take(6);
        assert_eq!(b.used(), 6);
        let b2 = b.clone();
        let waiter = std::thread::spawn(move || {
            let _p = b2.take(8);
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "8 more do not fit beside 6");
        drop(a);
        waiter.join().expect("woken");
        assert_eq!(b.used(), 0);
    }
}
