//! Jobs handed back to the server's workers later: a request its device failed waits here
//! for its next try, not in a worker, so one failing export does not hold up the I/O of
//! the others.
//!
//! - One thread keeps the waiting jobs and hands each to `run` once its time has come.
//! - [`Later::stop`] drops the jobs still waiting (their requests end unanswered, which a
//!   client requeues) and ends the thread; a job given after that is handed back.

use std::io;
use std::sync::mpsc::{channel, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

/// A unit of work.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// The thread and the way to it.
pub(super) struct Later {
    tx: Mutex<Option<Sender<(Instant, Job)>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Later {
    /// Starts the thread; `run` takes each job when it is due.
    pub(super) fn start(run: impl Fn(Job) + Send + 'static) -> io::Result<Self> {
        let (tx, rx) = channel::<(Instant, Job)>();
        let thread = std::thread::Builder::new()
            .name("nbd-later".into())
            .spawn(move || {
                let mut waiting: Vec<(Instant, Job)> = Vec::new();
                loop {
                    let next = waiting.iter().map(|(at, _)| *at).min();
                    let got = match next {
                        Some(at) => rx.recv_timeout(at.saturating_duration_since(Instant::now())),
                        None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                    };
                    match got {
                        Ok(entry) => waiting.push(entry),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                    let now = Instant::now();
                    let (due, wait): (Vec<_>, Vec<_>) =
                        waiting.drain(..).partition(|(at, _)| *at <= now);
                    waiting = wait;
                    for (_, job) in due {
                        run(job);
                    }
                }
            })?;
        Ok(Self {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Hands `job` to `run` at `at`; `Err(job)` once stopped.
    pub(super) fn at(&self, at: Instant, job: Job) -> Result<(), Job> {
        let tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        match tx.as_ref() {
            Some(tx) => tx.send((at, job)).map_err(|e| e.0 .1),
            None => Err(job),
        }
    }

    /// Drops the waiting jobs and ends the thread.
    pub(super) fn stop(&self) {
        drop(self.tx.lock().unwrap_or_else(|p| p.into_inner()).take());
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = thread {
            if t.join().is_err() {
                tracing::error!("NBD retry thread panicked");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn jobs_run_in_time_order_and_stop_drops_the_rest() {
        let (tx, rx) = channel::<u32>();
        let tx = Mutex::new(tx);
        let later = Later::start(move |job| {
            job();
            let _ = tx.lock().map(|t| t.send(0));
        })
        .expect("start");
        let order = Arc::new(Mutex::new(Vec::new()));
        let now = Instant::now();
        for (n, ms) in [(2u32, 200u64), (1, 50), (3, 10_000)] {
            let order = order.clone();
            let job: Job = Box::new(move || order.lock().expect("order").push(n));
            assert!(later.at(now + Duration::from_millis(ms), job).is_ok());
        }
        for _ in 0..2 {
            rx.recv_timeout(Duration::from_secs(5)).expect("a job ran");
        }
        assert_eq!(*order.lock().expect("order"), vec![1, 2]);
        later.stop();
        assert_eq!(
            *order.lock().expect("order"),
            vec![1, 2],
            "the last one dropped"
        );
        assert!(later.at(now, Box::new(|| {})).is_err(), "stopped");
    }
}
