//! What the `csi-shim` binary refuses before it serves anything.

use std::process::Command;

/// A LUN named by a kernel name (`/dev/sdX`, probe order) is refused at start, saying
/// where stable names are; nothing is opened.
#[test]
fn a_kernel_name_for_the_lun_is_refused_at_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_csi-shim"))
        .args(["--devices", "/dev/sdzz", "--vg", "vg0"])
        .args(["--endpoint", "/nonexistent/csi.sock"])
        .output()
        .expect("run csi-shim");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("--devices /dev/sdzz: a kernel name") && err.contains("/dev/disk/by-id"),
        "{err}"
    );
}
