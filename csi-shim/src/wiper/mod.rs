//! The controller's wiper: erases the extents of deleted volumes, then frees them.
//!
//! DeleteVolume only hands a volume's extents to a wipe LV ([`crate::volume`], "wipe"), so
//! it answers at once whatever the volume's size. This thread finds every wipe LV of the
//! served VGs, erases it ([`lvmeta::session::Erase`]) and removes it: when kicked by a
//! deletion, at start (wipes a crash or a failover left behind) and every [`POLL`]
//! (another controller's leftovers). A wipe that fails (its LV mapped on this host, its
//! lease held) is logged and tried again at the next pass.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

mod pass;

pub use pass::{pass, spawn};

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
