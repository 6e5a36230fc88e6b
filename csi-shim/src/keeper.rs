//! The lease keeper: the first process of a node plugin that uses sanlock. It registers with
//! the daemon and does nothing else; the serving process, its child, takes and releases the
//! staged volumes' LV leases on the keeper's behalf (`SanlockLeases::with_holder`).
//!
//! Why: sanlock frees the leases of a process that ends after its lockspace failed (they
//! become orphans only when it ends before), and then clears the lockspace and disarms the
//! watchdog with the volumes' tables still live. With the keeper, a serving process that
//! crashes or is killed at any moment leaves the leases held by a live, registered process,
//! so the lockspace (and the watchdog) stays until a new serving process fences.
//!
//! Invariants:
//! - the keeper holds its registration, restricted from SIGKILL, for its whole life, and is
//!   exempt from the OOM killer (`oom_score_adj` -1000, also from a container's group kill);
//!   the serving process is not;
//! - a serving process that ends while leases are held for the keeper is started again
//!   (after [`BACKOFF`], up to [`BACKOFF_MAX`]), also when it ended well but a lockspace of
//!   those leases failed meanwhile; one that fails with none held ends the keeper with its
//!   code (a bad command line is not retried for ever); one that ends well with no lease in
//!   a failed lockspace ends the keeper (the leases become the host's orphans);
//! - when the daemon cannot be asked, leases are taken to be held;
//! - SIGTERM and SIGINT are passed to the serving process, which decides (see
//!   [`crate::fencing`]); it blocks them until it can handle them ([`serving`]);
//! - a serving process whose keeper is gone gets SIGUSR1 from the kernel: it fences what a
//!   failed lockspace left and stops.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, SigmaskHow, Signal};

/// The environment variable that tells the serving process its keeper's pid.
pub const HOLDER_ENV: &str = "LVMETA_LEASE_HOLDER";

/// The first wait before a serving process is started again.
pub const BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait.
pub const BACKOFF_MAX: Duration = Duration::from_secs(10);

/// What the keeper's `oom_score_adj` is set to: never chosen by the OOM killer.
const OOM_NEVER: &str = "-1000";

/// Runs the keeper: this program again, with the same arguments and this host's id
/// `host_id` (as `LVMETA_HOST_ID`), as the serving process.
pub fn run(host_id: Option<u64>) -> ExitCode {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", OOM_NEVER) {
        tracing::warn!(error = %e, "lease keeper: cannot exempt itself from the OOM killer");
    }
    let holder = match lvmeta::lease::holder::Holder::register() {
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
    let code = rt.block_on(keep(host_id));
    drop(holder);
    code
}

/// Whether the keeper must start a serving process again after one ended with `ok`: leases
/// are held for it (or the daemon cannot say), and it did not end well or one of them is
/// in a failed lockspace.
fn again(me: u32, ok: bool) -> bool {
    let state = i32::try_from(me)
        .map_err(|e| e.to_string())
        .and_then(|pid| lvmeta::lease::holder::holder_state(pid).map_err(|e| e.to_string()));
    match state {
        Err(e) => {
            tracing::error!(error = %e, "lease keeper: the daemon cannot say which leases are held; taking them to be");
            true
        }
        Ok(s) => s.held > 0 && (!ok || s.in_failed),
    }
}

async fn keep(host_id: Option<u64>) -> ExitCode {
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
            // Resolved once (it may come from the sanlock daemon's account, which forgets
            // a failed lockspace): every serving process uses the same id.
            .envs(host_id.map(|id| ("LVMETA_HOST_ID", id.to_string())))
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
                _ = term.recv() => Signal::SIGTERM,
                _ = int.recv() => Signal::SIGINT,
            };
            if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig);
            }
        };
        let ok = status.as_ref().is_ok_and(|s| s.success());
        if !again(me, ok) {
            if ok {
                return ExitCode::SUCCESS;
            }
            tracing::error!(status = ?status, "lease keeper: the serving process failed with no lease held; ending");
            let code = status
                .ok()
                .and_then(|s| s.code())
                .and_then(|c| u8::try_from(c).ok())
                .filter(|c| *c != 0)
                .unwrap_or(1);
            return ExitCode::from(code);
        }
        tracing::error!(status = ?status, "lease keeper: the serving process ended while leases are held for it; starting it again");
        if started.elapsed() > Duration::from_secs(60) {
            backoff = BACKOFF;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// The signals a serving process blocks until it handles them: SIGTERM (sanlock's and
/// kubelet's, passed on by the keeper) and SIGUSR1 (its keeper gone).
fn held_signals() -> SigSet {
    let mut s = SigSet::empty();
    s.add(Signal::SIGTERM);
    s.add(Signal::SIGUSR1);
    s
}

/// In the serving process of keeper `holder`, first thing: blocks SIGTERM and SIGUSR1 until
/// [`handling`] (a SIGTERM before the handlers are up would end the process without a
/// fence), gives up the keeper's OOM exemption, and asks the kernel for SIGUSR1 when the
/// keeper is gone.
pub fn serving(holder: u32) -> std::io::Result<()> {
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&held_signals()), None)
        .map_err(std::io::Error::from)?;
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", "0") {
        tracing::warn!(error = %e, "cannot give up the keeper's OOM exemption");
    }
    nix::sys::prctl::set_pdeathsig(Signal::SIGUSR1).map_err(std::io::Error::from)?;
    // The keeper may have gone before the line above.
    if std::os::unix::process::parent_id() != holder {
        return Err(std::io::Error::other(format!(
            "the lease keeper {holder} is gone"
        )));
    }
    Ok(())
}

/// Unblocks SIGTERM and SIGUSR1 once their handlers are installed.
pub fn handling() -> std::io::Result<()> {
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_UNBLOCK, Some(&held_signals()), None)
        .map_err(std::io::Error::from)
}
