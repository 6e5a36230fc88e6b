//! The controller's wiper: erases the extents of deleted volumes, then frees them.
//!
//! DeleteVolume only hands a volume's extents to a wipe LV ([`crate::volume`], "wipe"), so
//! it answers at once whatever the volume's size. This thread finds every wipe LV of the
//! served VGs, erases it ([`lvmeta::session::Erase`]) and removes it: when kicked by a
//! deletion, at start (wipes a crash or a failover left behind) and every [`POLL`]
//! (another controller's leftovers). A wipe that fails (its LV mapped on this host, its
//! lease held) is logged and tried again at the next pass.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::driver::Driver;

/// How often the wiper looks for wipe LVs without being kicked.
pub const POLL: Duration = Duration::from_secs(30);

/// How long a kicked wiper lets deletions gather before its pass: their wipe LVs are then
/// removed in one commit instead of one commit each.
pub const GATHER: Duration = Duration::from_secs(1);

/// Wakes the wiper and tells it when to stop.
#[derive(Debug, Default)]
pub struct Wiper {
    /// (kicked since the last pass, stop).
    state: Mutex<(bool, bool)>,
    wake: Condvar,
}

impl Wiper {
    fn lock(&self) -> std::sync::MutexGuard<'_, (bool, bool)> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for a pass now (a deletion made a wipe LV).
    pub fn kick(&self) {
        self.lock().0 = true;
        self.wake.notify_all();
    }

    /// Ends the thread after the wipe in progress.
    pub fn stop(&self) {
        self.lock().1 = true;
        self.wake.notify_all();
    }

    /// Waits until kicked, stopped or `POLL` passes; false when stopped.
    fn wait(&self) -> bool {
        let mut st = self.lock();
        if !st.0 && !st.1 {
            st = self
                .wake
                .wait_timeout(st, POLL)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        st.0 = false;
        !st.1
    }

    fn stopped(&self) -> bool {
        self.lock().1
    }
}

/// Erases and removes every wipe LV of the VGs `backend` serves; returns how many were
/// erased and how many failed (logged).
pub fn pass(backend: &Driver, stop: &dyn Fn() -> bool) -> (usize, usize) {
    let (Some(how), host) = (backend.erase(), backend.host_devices()) else {
        return (0, 0);
    };
    let (mut done, mut failed) = (0, 0);
    for vg in backend.vgs() {
        let vols = crate::volume::Volumes::new(backend.session(), vg);
        let names = match vols.wipes() {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(vg = %vg, error = %e, "listing wipe LVs");
                failed += 1;
                continue;
            }
        };
        // Erased one by one, removed in one commit.
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let with = lvmeta::session::EraseWith { how, host, stop };
        match vols.wipe_all(&names, with) {
            Ok(each) => {
                for (name, r) in names.iter().zip(each) {
                    match r {
                        Ok(_) => done += 1,
                        Err(e) => {
                            tracing::warn!(vg = %vg, wipe = %name, error = %e, "erasing a deleted volume's extents; trying again later");
                            failed += 1;
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(vg = %vg, error = %e, "removing erased wipe LVs; trying again later");
                failed += names.len();
            }
        }
        if stop() {
            return (done, failed);
        }
    }
    (done, failed)
}

/// Runs the wiper of `backend` on a thread of its own until [`Wiper::stop`] (which also
/// stops an erasure at its next chunk: the wipe LV stays for the next wiper).
pub fn spawn(backend: Arc<Driver>) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("wiper".into())
        .spawn(move || {
            let w = backend.wiper().clone();
            loop {
                // A lost lockspace stops an erasure too: its lease holds nothing any more.
                let lost = || backend.fencing().is_some_and(|f| f.any_lost());
                let (done, failed) = pass(&backend, &|| w.stopped() || lost());
                if done + failed > 0 {
                    tracing::info!(erased = done, failed, "wiper pass");
                }
                if !w.wait() {
                    return;
                }
                std::thread::sleep(GATHER);
            }
        })
}
