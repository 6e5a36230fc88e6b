//! The lease keeper: the first process of a node plugin that uses sanlock. It registers with
//! the daemon and does nothing else; the serving process, its child, takes and releases the
//! staged volumes' LV leases on the keeper's behalf (`SanlockLeases::with_holder`).
//!
//! Why: sanlock frees the leases of a process that ends after its lockspace failed (they
//! become orphans only when it ends before), and then clears the lockspace and disarms the
//! watchdog with the volumes' tables still live. With the keeper, a serving process that
//! crashes or is OOM-killed at any moment leaves the leases held by a live, registered
//! process, so the lockspace (and the watchdog) stays until a new serving process fences.
//!
//! Invariants:
//! - the keeper holds its registration, restricted from SIGKILL, for its whole life;
//! - a serving process that fails while leases are held for the keeper is started again
//!   (after [`BACKOFF`], up to [`BACKOFF_MAX`]); one that fails with none held ends the keeper
//!   with its code (a bad command line is not retried for ever);
//! - a serving process that exits 0 (kubelet's SIGTERM with every lockspace healthy) ends the
//!   keeper: its leases become the host's orphans;
//! - SIGTERM and SIGINT are passed to the serving process, which decides (see
//!   [`crate::fencing`]);
//! - a serving process whose keeper is gone is killed by the kernel ([`watch_keeper`]).

use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The environment variable that tells the serving process its keeper's pid.
pub const HOLDER_ENV: &str = "LVMETA_LEASE_HOLDER";

/// The first wait before a failed serving process is started again.
pub const BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// Runs the keeper: this program again, with the same arguments, as the serving process.
pub fn run() -> ExitCode {
    let holder = match lvmeta::lease::sanlock::Holder::register() {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "lease keeper: cannot register with the sanlock daemon");
            return ExitCode::FAILURE;
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "lease keeper: no runtime");
            return ExitCode::FAILURE;
        }
    };
    let code = rt.block_on(keep());
    drop(holder);
    code
}

async fn keep() -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    let me = std::process::id();
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("lease keeper: no signal handlers");
        return ExitCode::FAILURE;
    };
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, "lease keeper: which program am I?");
            return ExitCode::FAILURE;
        }
    };
    let mut backoff = BACKOFF;
    loop {
        let mut child = match tokio::process::Command::new(&exe)
            .args(&args)
            .env(HOLDER_ENV, me.to_string())
            .spawn()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "lease keeper: cannot start the serving process");
                return ExitCode::FAILURE;
            }
        };
        tracing::info!(keeper = me, pid = ?child.id(), "lease keeper: serving process started");
        let started = Instant::now();
        let status = loop {
            let sig = tokio::select! {
                st = child.wait() => break st,
                _ = term.recv() => nix::sys::signal::Signal::SIGTERM,
                _ = int.recv() => nix::sys::signal::Signal::SIGINT,
            };
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        };
        let held = i32::try_from(me)
            .ok()
            .map(lvmeta::lease::sanlock::held_by)
            .transpose();
        match (status, held) {
            (Ok(st), _) if st.success() => return ExitCode::SUCCESS,
            (st, Ok(Some(n))) if n > 0 => {
                tracing::error!(status = ?st, leases = n, "lease keeper: the serving process ended while leases are held for it; starting it again");
            }
            (st, held) => {
                tracing::error!(status = ?st, held = ?held, "lease keeper: the serving process failed with no lease held; ending");
                let code = st
                    .ok()
                    .and_then(|s| s.code())
                    .and_then(|c| u8::try_from(c).ok())
                    .filter(|c| *c != 0)
                    .unwrap_or(1);
                return ExitCode::from(code);
            }
        }
        if started.elapsed() > Duration::from_secs(60) {
            backoff = BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// In the serving process: ends it (SIGKILL, from the kernel) the moment its keeper `holder`
/// is gone: the leases went with the keeper, and nothing this process does can hold them.
pub fn watch_keeper(holder: u32) -> std::io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(std::io::Error::from)?;
    // The keeper may have gone before the line above.
    if std::os::unix::process::parent_id() != holder {
        tracing::error!(keeper = holder, "the lease keeper is gone: stopping");
        std::process::exit(1);
    }
    Ok(())
}
