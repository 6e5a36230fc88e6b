//! Privileged: regenerate every fixture with this machine's stock lvm2 (and lvmlockd + sanlock
//! for the shared VG) and check that lvmeta reads each exactly as lvm2 reports it, through
//! real files opened with O_DIRECT.

use std::process::Command;

use lvmeta_tests::{
    check_fixture, make_fixtures_script, privileged, scan_all, Fixture, DM_FIXTURES, FIXTURES,
};

#[test]
fn lvm2_fixtures_regenerated_match() {
    if !privileged(
        "lvm2_fixtures_regenerated_match",
        &["lvm", "losetup", "unshare", "sanlock", "lvmlockd"],
    ) {
        return;
    }
    let out = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let status = Command::new("bash")
        .arg(make_fixtures_script())
        .arg(out.path())
        .status()
        .expect("run make-fixtures.sh");
    assert!(status.success(), "make-fixtures.sh failed");
    // The device-mapper fixtures are made in the VM only (make-fixtures.sh's header).
    for name in FIXTURES.iter().filter(|n| !DM_FIXTURES.contains(n)) {
        let fx = Fixture::open(&out.path().join(name));
        let devs = fx.file_devices();
        let scan = scan_all(&devs);
        check_fixture(&fx, &scan);
        eprintln!(
            "lvm2 {}: fixture {name} matches",
            std::fs::read_to_string(fx.dir.join("lvm2-version"))
                .unwrap_or_default()
                .trim()
        );
    }
}
