//! Privileged: a mixed cluster on one machine (tests/lockd/mixed.sh). Simulated host 1 runs
//! stock lvm2 + lvmlockd + sanlock, simulated host 2 runs lvmeta with its own sanlock daemon.
//! A shared VG made by lvm2 is joined and changed by lvmeta (VG lease, LV leases on disk where
//! lvmlockd looks for them), and a shared VG made by lvmeta (lockspace, GL/VG leases, free LV
//! slots) is started and changed by lvmlockd; each side sees the other's changes, reports
//! agree and `vgck` stays clean. Then lvm2 and three lvmeta hosts change one VG concurrently
//! without losing an update (568 changes), a writer killed while holding the VG lease does not
//! block the next one, and the VG lease of a host whose sanlock daemon died is taken over only
//! after sanlock's host-dead time (76 s at io_timeout 2).

use std::path::Path;
use std::process::Command;

use lvmeta_tests::{lvmeta_bin, privileged, workspace_bin};

#[test]
fn lvm2_lockd_and_lvmeta_share_vgs() {
    let tools = [
        "losetup", "sanlock", "lvmlockd", "unshare", "python3", "lvm",
    ];
    if !privileged("lvm2_lockd_and_lvmeta_share_vgs", &tools) {
        return;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lockd/mixed.sh");
    let hold = workspace_bin("lvmeta-tests", "hold-vg-lease");
    let out = Command::new("bash")
        .arg(&script)
        .arg(lvmeta_bin())
        .arg(&hold)
        .output()
        .expect("run mixed.sh");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mixed cluster failed:\n{}\n{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    for line in err.lines().filter(|l| l.starts_with("mixed:")) {
        eprintln!("{line}");
    }
}
