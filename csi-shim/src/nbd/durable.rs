//! Writes made durable before they are answered, the writes that wait together sharing
//! one device flush (a group commit).
//!
//! - Why: a thin pool commits its mappings at a flush (or once a second). A serving node
//!   that dies loses the writes it answered since the last commit, and its clients, which
//!   keep running, would never learn of it: the next server's FLUSH succeeds. So a write
//!   is answered only once it is durable, and a takeover loses nothing answered.
//! - A caller is covered by a flush that started after it called (its write completed
//!   before that). One that arrives while a flush runs waits for the next; one of the
//!   waiters runs it for all of them.
//! - A flush that fails fails every caller it would have covered (each caller holds or
//!   answers the error; nothing answered rests on a failed flush).

use std::io;
use std::sync::{Condvar, Mutex, MutexGuard};

/// The flushes of one export.
#[derive(Default)]
pub(super) struct Flushes {
    state: Mutex<State>,
    ended: Condvar,
}

/// Flushes are numbered from 1 in the order they start.
#[derive(Default)]
struct State {
    /// The number of the last flush started.
    started: u64,
    /// The number of the last flush that ended.
    ended: u64,
    /// The number of the last flush that failed (0: none), and how.
    failed: u64,
    error: Option<(io::ErrorKind, String)>,
    /// A flush is running.
    running: bool,
}

impl Flushes {
    /// Returns once a flush that started after this call succeeded; runs `flush` itself
    /// when none is running. The error of a flush that failed is returned to every caller
    /// it would have covered.
    pub(super) fn after(&self, flush: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let mut s = self.lock();
        let need = s.started + 1;
        loop {
            if s.failed >= need {
                let (kind, msg) = s
                    .error
                    .clone()
                    .unwrap_or((io::ErrorKind::Other, String::new()));
                return Err(io::Error::new(kind, msg));
            }
            if s.ended >= need {
                return Ok(());
            }
            if !s.running {
                break;
            }
            s = self.ended.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        s.started += 1;
        s.running = true;
        let n = s.started;
        drop(s);
        // Ends the flush even if `flush` panics, so that its waiters are not left waiting.
        let mut end = End {
            flushes: self,
            n,
            error: Some((io::ErrorKind::Other, "the flush panicked".into())),
        };
        let done = flush();
        end.error = done.as_ref().err().map(|e| (e.kind(), e.to_string()));
        drop(end);
        done
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Plain numbers: consistent whatever a panicking holder did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Records the end of flush `n` and wakes its waiters.
struct End<'a> {
    flushes: &'a Flushes,
    n: u64,
    error: Option<(io::ErrorKind, String)>,
}

impl Drop for End<'_> {
    fn drop(&mut self) {
        let mut s = self.flushes.lock();
        s.running = false;
        s.ended = self.n;
        if let Some(e) = self.error.take() {
            s.failed = self.n;
            s.error = Some(e);
        }
        drop(s);
        self.flushes.ended.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    #[test]
    fn waiters_share_flushes_and_each_is_covered_by_one_that_started_after_it() {
        let flushes = Arc::new(Flushes::default());
        // A "write" is the value of `written` when it called; a flush makes durable what
        // was written when it started.
        let written = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let count = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (f, w, d, c, b) = (
                    flushes.clone(),
                    written.clone(),
                    durable.clone(),
                    count.clone(),
                    start.clone(),
                );
                std::thread::spawn(move || {
                    b.wait();
                    for _ in 0..50 {
                        let mine = w.fetch_add(1, Ordering::SeqCst) + 1;
                        f.after(|| {
                            c.fetch_add(1, Ordering::SeqCst);
                            let upto = w.load(Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(1));
                            d.fetch_max(upto, Ordering::SeqCst);
                            Ok(())
                        })
                        .expect("flush");
                        assert!(d.load(Ordering::SeqCst) >= mine, "answered before durable");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let flushed = count.load(Ordering::SeqCst);
        assert!(flushed < 400, "every write flushed alone: {flushed}");
    }

    #[test]
    fn a_failed_flush_fails_every_waiter_it_covers_and_the_next_is_tried_anew() {
        let flushes = Arc::new(Flushes::default());
        let release = Arc::new(Barrier::new(2));
        let (f, r) = (flushes.clone(), release.clone());
        // Flush 1 runs until both waiters below wait behind it.
        let first = std::thread::spawn(move || {
            f.after(|| {
                r.wait();
                Ok(())
            })
        });
        std::thread::sleep(Duration::from_millis(100));
        let calls = Arc::new(AtomicU64::new(0));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let (f, c) = (flushes.clone(), calls.clone());
                std::thread::spawn(move || {
                    f.after(|| {
                        c.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(100));
                        Err(io::Error::other("EIO on /dev/x"))
                    })
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        release.wait();
        first.join().expect("first").expect("flush 1");
        for w in waiters {
            let e = w
                .join()
                .expect("waiter")
                .expect_err("covered by a failed flush");
            assert!(e.to_string().contains("/dev/x"), "{e}");
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "the waiters shared flush 2"
        );
        flushes.after(|| Ok(())).expect("a new flush succeeds");
        // A panicking flush ends, failing its waiters, and leaves none running.
        let f = flushes.clone();
        let panicked = std::thread::spawn(move || f.after(|| panic!("flush")));
        assert!(panicked.join().is_err());
        flushes.after(|| Ok(())).expect("not stuck after a panic");
    }
}
