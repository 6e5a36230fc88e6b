//! A bounded table of live connections, shared by the CSI socket and the metrics endpoint.
//!
//! Invariants:
//! - at most `max` connections hold a [`Slot`] at once;
//! - a new connection at the cap takes the place of the connection idle longest (no request
//!   or stream in progress), which is told to close ([`Slot::evicted`]); when every
//!   connection is busy, the new one gets no slot and is closed by the caller;
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
}

/// The shared state of one connection.
struct Ctl {
    activity: watch::Sender<Activity>,
    evict: Notify,
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

    /// A slot for a new connection: at the cap, the longest idle connection is evicted to
    /// make room; `None` when every connection is busy.
    pub fn admit(&self) -> Option<Slot> {
        let mut t = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if t.live.len() >= self.max {
            let idle = t
                .live
                .iter()
                .enumerate()
                .filter_map(|(i, e)| {
                    let a = *e.ctl.activity.borrow();
                    (a.open == 0).then_some((i, a.since))
                })
                .min_by_key(|&(_, since)| since)
                .map(|(i, _)| i)?;
            // Out of the table at once: its task closes it soon.
            let gone = t.live.swap_remove(idle);
            gone.ctl.evict.notify_one();
        }
        let id = t.next;
        t.next += 1;
        let (activity, _) = watch::channel(Activity {
            open: 0,
            since: Instant::now(),
        });
        let ctl = Arc::new(Ctl {
            activity,
            evict: Notify::new(),
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

    /// How many connections hold a slot.
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
        let _busy_b = b.busy();
        // At the cap: a (idle) goes, b (busy) stays.
        let c = t.admit().expect("a evicted");
        tokio::time::timeout(std::time::Duration::from_secs(1), a.evicted())
            .await
            .expect("a is told to close");
        assert_eq!(t.len(), 2);
        let busy_c = c.busy();
        assert!(t.admit().is_none(), "every connection busy: no room");
        drop(a);
        assert_eq!(t.len(), 2, "an evicted slot was already out of the table");
        drop(b);
        assert_eq!(t.len(), 1);
        let mut seen = c.activity();
        assert_eq!(seen.borrow_and_update().open, 1);
        drop(busy_c);
        assert_eq!(seen.borrow_and_update().open, 0);
    }
}
