//! A bounded table of live connections, shared by the CSI socket and the metrics endpoint.
//!
//! Invariants:
//! - at most `max` connections hold a [`Slot`] and are not closing;
//! - a new connection at the cap takes the place of an idle one (no request or stream in
//!   progress): one that never made a request first (a flood of connections then replaces
//!   its own, not the clients that use theirs), else the one idle longest; it is told to
//!   close ([`Slot::evicted`]) and counts until it has; when every connection is busy, or `max` are still closing, the new one gets no
//!   slot and is closed by the caller: at most `2 * max` connections are open at any time;
//! - a slot leaves the table when it is dropped, whatever ended its connection.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::{watch, Notify};

/// What a connection is doing: requests (or streams) in progress, and when that number last
/// changed (for an idle connection: since when it is idle).
#[derive(Debug, Clone, Copy)]
pub struct Activity {
    /// Requests or streams in progress.
    pub open: usize,
    /// When `open` last changed.
    pub since: Instant,
    /// Whether a request or stream was ever made.
    pub used: bool,
}

/// The shared state of one connection.
struct Ctl {
    activity: watch::Sender<Activity>,
    evict: Notify,
    /// Told to close (by eviction); not chosen again.
    closing: std::sync::atomic::AtomicBool,
}

struct Entry {
    id: u64,
    ctl: Arc<Ctl>,
}

#[derive(Default)]
struct Inner {
    next: u64,
    live: Vec<Entry>,
}

/// The connections of one listener.
#[derive(Clone)]
pub struct Table {
    inner: Arc<Mutex<Inner>>,
    max: usize,
}

impl Table {
    /// A table of at most `max` connections.
    pub fn new(max: usize) -> Self {
        Table {
            inner: Arc::default(),
            max,
        }
    }

    /// A slot for a new connection: at the cap, an idle connection is told to close to make
    /// room (one never used first, else the one idle longest); `None` when every
    /// connection is busy or too many are closing.
    pub fn admit(&self) -> Option<Slot> {
        use std::sync::atomic::Ordering::Relaxed;
        let mut t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let closing = t
            .live
            .iter()
            .filter(|e| e.ctl.closing.load(Relaxed))
            .count();
        if t.live.len() - closing >= self.max {
            if closing >= self.max {
                return None;
            }
            let idle = t
                .live
                .iter()
                .filter(|e| !e.ctl.closing.load(Relaxed))
                .filter_map(|e| {
                    let a = *e.ctl.activity.borrow();
                    (a.open == 0).then_some((e, (a.used, a.since)))
                })
                .min_by_key(|&(_, key)| key)
                .map(|(e, _)| e.ctl.clone())?;
            // It stays in the table (and counts) until its task has closed it.
            idle.closing.store(true, Relaxed);
            idle.evict.notify_one();
        }
        let id = t.next;
        t.next += 1;
        let (activity, _) = watch::channel(Activity {
            open: 0,
            since: Instant::now(),
            used: false,
        });
        let ctl = Arc::new(Ctl {
            activity,
            evict: Notify::new(),
            closing: Default::default(),
        });
        t.live.push(Entry {
            id,
            ctl: ctl.clone(),
        });
        Some(Slot {
            table: self.inner.clone(),
            id,
            ctl,
        })
    }

    /// How many connections hold a slot (closing ones included).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .live
            .len()
    }

    /// Whether no connection holds a slot.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One connection's place in a [`Table`].
pub struct Slot {
    table: Arc<Mutex<Inner>>,
    id: u64,
    ctl: Arc<Ctl>,
}

impl Slot {
    /// Marks a request or stream in progress until the guard is dropped.
    pub fn busy(&self) -> Busy {
        self.ctl.activity.send_modify(|a| {
            a.open += 1;
            a.since = Instant::now();
            a.used = true;
        });
        Busy {
            ctl: self.ctl.clone(),
        }
    }

    /// The connection's activity, updated as requests start and end.
    pub fn activity(&self) -> watch::Receiver<Activity> {
        self.ctl.activity.subscribe()
    }

    /// Resolves when a newer connection took this one's place: the connection should close.
    pub async fn evicted(&self) {
        self.ctl.evict.notified().await
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = t.live.iter().position(|e| e.id == self.id) {
            t.live.swap_remove(i);
        }
    }
}

/// A request or stream in progress on a connection ([`Slot::busy`]).
pub struct Busy {
    ctl: Arc<Ctl>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.ctl.activity.send_modify(|a| {
            a.open = a.open.saturating_sub(1);
            a.since = Instant::now();
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_longest_idle_connection_makes_room_and_busy_ones_are_kept() {
        let t = Table::new(2);
        let a = t.admit().expect("room");
        let b = t.admit().expect("room");
        let busy_b = b.busy();
        // At the cap: a (idle) is told to close, b (busy) stays.
        let c = t.admit().expect("a evicted");
        tokio::time::timeout(std::time::Duration::from_secs(1), a.evicted())
            .await
            .expect("a is told to close");
        assert_eq!(t.len(), 3, "a counts until it has closed");
        let busy_c = c.busy();
        assert!(t.admit().is_none(), "every connection busy: no room");
        drop(busy_c);
        // c is idle: it makes room, but then two are closing, as many as the cap.
        let d = t.admit().expect("c evicted");
        tokio::time::timeout(std::time::Duration::from_secs(1), c.evicted())
            .await
            .expect("c is told to close");
        assert!(t.admit().is_none(), "too many still closing");
        drop((a, c));
        assert_eq!(t.len(), 2);
        let mut seen = d.activity();
        assert_eq!(seen.borrow_and_update().open, 0);
        let busy_d = d.busy();
        assert_eq!(seen.borrow_and_update().open, 1);
        drop(busy_b);
        drop(busy_d);
        // Both used and idle: b, idle longer, makes room.
        let e = t.admit().expect("room again once idle");
        tokio::time::timeout(std::time::Duration::from_secs(1), b.evicted())
            .await
            .expect("b is told to close");
        drop((b, d));
        // A connection never used goes before one that was used, however long idle.
        let t = Table::new(2);
        let used = t.admit().expect("room");
        drop(used.busy());
        let unused = t.admit().expect("room");
        let _new = t.admit().expect("unused evicted");
        tokio::time::timeout(std::time::Duration::from_secs(1), unused.evicted())
            .await
            .expect("the unused connection is told to close");
        drop(e);
    }
}
