//! A lab on one machine, for the tests and the demo: a private sanlock daemon (one simulated
//! host), and an lvm.conf that lets stock lvm2 run beside lvmeta in a directory of its own.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private sanlock daemon with its socket in `run`, known by the stable `host_name` (one
/// simulated host; on machines without a watchdog or RLIMIT_MEMLOCK it needs `-w 0` and
/// SANLOCK_PRIVILEGED=0, which a demo or a test may use). Returns once the socket is there.
pub fn start_sanlock(run: &Path, host_name: &str) -> Result<Child, String> {
    std::fs::create_dir_all(run).map_err(|e| format!("{}: {e}", run.display()))?;
    let mut child = Command::new("sanlock")
        .args(["daemon", "-D", "-w", "0", "-U", "root", "-G", "root"])
        .args(["-L", "-1", "-S", "-1", "-e", host_name])
        .env("SANLOCK_RUN_DIR", run)
        .env("SANLOCK_PRIVILEGED", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("sanlock daemon: {e}"))?;
    let sock = run.join("sanlock.sock");
    let t = Instant::now();
    while !sock.exists() {
        if let Ok(Some(st)) = child.try_wait() {
            return Err(format!("sanlock daemon exited: {st}"));
        }
        if t.elapsed() > Duration::from_secs(10) {
            stop_daemon(&mut child);
            return Err("sanlock daemon: no socket after 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// An lvm.conf for running stock lvm2 privately beside lvmeta (in its own LVM_SYSTEM_DIR):
/// no activation, lvm2's file locks in `locking_dir`, only `devices` scanned, no device
/// cache, hints, backups or archives.
pub fn private_lvm_conf(locking_dir: &Path, devices: &[&Path]) -> String {
    let accept: Vec<String> = devices
        .iter()
        .map(|d| format!("\"a|^{}$|\"", d.display()))
        .collect();
    format!(
        "global {{ activation = 0 locking_dir = \"{}\" }}\n\
         devices {{ obtain_device_list_from_udev = 0 use_devicesfile = 0 scan_lvs = 0 hints = \"none\" \
         global_filter = [ {}, \"r|.*|\" ] }}\n\
         backup {{ backup = 0 archive = 0 }}\n",
        locking_dir.display(),
        accept.join(", ")
    )
}

/// SIGTERM, then SIGKILL when the daemon is still there after 5 s.
pub fn stop_daemon(d: &mut Child) {
    if let Ok(pid) = i32::try_from(d.id()) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if let Ok(Some(_)) = d.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = d.kill();
    let _ = d.wait();
}
