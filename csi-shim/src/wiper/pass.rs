//! A wiper pass over the driver's VGs, and the thread that runs one whenever kicked.

use std::sync::Arc;

use super::*;
use crate::driver::Driver;

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
