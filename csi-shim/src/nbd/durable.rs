//! Writes made durable before they are answered, the writes that wait together sharing
//! one device flush (a group commit).
//!
//! - Why: a thin pool commits its mappings at a flush (or once a second). A serving node
//!   that dies loses the writes it answered since the last commit, and its clients, which
//!   keep running, would never learn of it: the next server's FLUSH succeeds. So a write
//!   is answered only once it is durable, and a takeover loses nothing answered.
//! - Flushes run in rounds, one at a time per export. A request joins the round that
//!   starts after it joined (its data landed before that): its `done` is called with that
//!   round's outcome, and with no other.
//! - No request waits in a worker: the one that finds no round running runs the rounds
//!   (its own, then each one joined meanwhile) and calls the others' `done`. One slow
//!   device ties up one worker, not the server's.
//! - A flush that fails fails every request of its round (each is held or answered EIO;
//!   nothing answered rests on a failed flush). A flush that panics failed too: the run
//!   goes on, and no request is left joined to a round nobody runs.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::{Mutex, MutexGuard};

/// How a round ended.
pub(super) enum Outcome {
    /// The device flushed: every write of the round is durable.
    Flushed,
    /// The flush failed on the named device.
    Failed(String, io::Error),
    /// The export closed first: the requests end unanswered (their clients requeue them).
    Closed,
}

/// What a request does with its round's outcome.
pub(super) type Done = Box<dyn FnOnce(&Outcome) + Send>;

/// What a flush returns: the device's name and error when it failed, None when the export
/// closed first.
pub(super) type Flushed = Option<Result<(), (String, io::Error)>>;

/// The flushes of one export.
#[derive(Default)]
pub(super) struct Flushes {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// A request is running rounds.
    running: bool,
    /// The requests of the round that starts next.
    next: Vec<Done>,
}

impl Flushes {
    /// Calls `done` with the outcome of a round of `flush` that starts after this call:
    /// at once here when no round is running (then the rounds joined meanwhile too, until
    /// none is left), else from the request running them.
    pub(super) fn then(&self, flush: &dyn Fn() -> Flushed, done: Done) {
        let mut s = self.lock();
        s.next.push(done);
        if s.running {
            return;
        }
        s.running = true;
        loop {
            let round = std::mem::take(&mut s.next);
            if round.is_empty() {
                s.running = false;
                return;
            }
            drop(s);
            // A panic is caught here, not left to end the run with requests joined to it
            // (nobody would run their round): a flush that panics failed.
            let flushed = std::panic::catch_unwind(AssertUnwindSafe(flush)).unwrap_or_else(|_| {
                Some(Err((
                    "(flush)".into(),
                    io::Error::other("the flush panicked"),
                )))
            });
            let outcome = match flushed {
                Some(Ok(())) => Outcome::Flushed,
                Some(Err((device, e))) => Outcome::Failed(device, e),
                None => Outcome::Closed,
            };
            for done in round {
                if std::panic::catch_unwind(AssertUnwindSafe(|| done(&outcome))).is_err() {
                    tracing::error!("an NBD request's completion panicked");
                }
            }
            s = self.lock();
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A flag and a list: consistent whatever a panicking holder did.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    type SharedFlush = Arc<dyn Fn() -> Flushed + Send + Sync>;

    /// Joins a round from a thread; the outcome comes back through the channel.
    fn join(
        flushes: &Arc<Flushes>,
        flush: SharedFlush,
        tx: std::sync::mpsc::Sender<Result<(), String>>,
    ) -> std::thread::JoinHandle<()> {
        let f = flushes.clone();
        std::thread::spawn(move || {
            f.then(
                &*flush,
                Box::new(move |o| {
                    let r = match o {
                        Outcome::Flushed => Ok(()),
                        Outcome::Failed(d, e) => Err(format!("{d}: {e}")),
                        Outcome::Closed => Err("closed".into()),
                    };
                    let _ = tx.send(r);
                }),
            )
        })
    }

    #[test]
    fn each_request_gets_a_round_that_started_after_it_and_rounds_are_shared() {
        let flushes = Arc::new(Flushes::default());
        // A "write" is the value of `written` when it joins; a round makes durable what was
        // written when it started.
        let written = Arc::new(AtomicU64::new(0));
        let durable = Arc::new(AtomicU64::new(0));
        let rounds = Arc::new(AtomicU64::new(0));
        let start = Arc::new(Barrier::new(8));
        let (w, d, c) = (written.clone(), durable.clone(), rounds.clone());
        let flush: SharedFlush = Arc::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
            let upto = w.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(1));
            d.fetch_max(upto, Ordering::SeqCst);
            Some(Ok(()))
        });
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let (f, w, d, b, flush) = (
                    flushes.clone(),
                    written.clone(),
                    durable.clone(),
                    start.clone(),
                    flush.clone(),
                );
                std::thread::spawn(move || {
                    b.wait();
                    for _ in 0..50 {
                        let mine = w.fetch_add(1, Ordering::SeqCst) + 1;
                        let (tx, rx) = std::sync::mpsc::channel();
                        let d2 = d.clone();
                        f.then(
                            &*flush,
                            Box::new(move |o| {
                                assert!(matches!(o, Outcome::Flushed));
                                let _ = tx.send(d2.load(Ordering::SeqCst) >= mine);
                            }),
                        );
                        let covered = rx.recv_timeout(Duration::from_secs(30)).expect("done");
                        assert!(covered, "answered before durable");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        let n = rounds.load(Ordering::SeqCst);
        assert!(n < 400, "a round per write: {n}");
    }

    #[test]
    fn a_failed_round_fails_its_requests_only_and_the_next_is_tried_anew() {
        let flushes = Arc::new(Flushes::default());
        let release = Arc::new(Barrier::new(2));
        let failing = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicU64::new(0));
        let (r, fl, c) = (release.clone(), failing.clone(), calls.clone());
        // Round 1 waits for the test; round 2 fails.
        let flush: SharedFlush = Arc::new(move || {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                r.wait();
                return Some(Ok(()));
            }
            match fl.load(Ordering::SeqCst) {
                true => Some(Err(("/dev/x".into(), io::Error::from_raw_os_error(5)))),
                false => Some(Ok(())),
            }
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let first = join(&flushes, flush.clone(), tx.clone());
        std::thread::sleep(Duration::from_millis(100));
        failing.store(true, Ordering::SeqCst);
        // Two requests join while round 1 runs: they share round 2, which fails, and
        // neither waits in its own thread.
        for _ in 0..2 {
            join(&flushes, flush.clone(), tx.clone())
                .join()
                .expect("returns at once");
        }
        release.wait();
        first.join().expect("first");
        let mut got: Vec<_> = (0..3).map(|_| rx.recv().expect("outcome")).collect();
        got.sort();
        assert_eq!(got[0], Ok(()), "round 1");
        for e in &got[1..] {
            assert!(e.as_ref().is_err_and(|e| e.contains("/dev/x")), "{e:?}");
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one flush per round");
        failing.store(false, Ordering::SeqCst);
        join(&flushes, flush.clone(), tx.clone())
            .join()
            .expect("join");
        assert_eq!(rx.recv().expect("outcome"), Ok(()), "a new round succeeds");
        // A flush that panics fails its round; rounds go on.
        let boom: SharedFlush = Arc::new(|| panic!("flush"));
        join(&flushes, boom, tx.clone()).join().expect("caught");
        let e = rx
            .recv()
            .expect("outcome")
            .expect_err("a panicked flush failed");
        assert!(e.contains("panicked"), "{e}");
        join(&flushes, flush, tx).join().expect("join");
        assert_eq!(
            rx.recv().expect("outcome"),
            Ok(()),
            "not stuck after a panic"
        );
    }
}
