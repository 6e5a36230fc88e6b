//! Every committed fixture (written by stock lvm2) reads exactly as lvm2 reported it.

use lvmeta_tests::{check_fixture, fixtures_dir, scan_all, Fixture, FIXTURES};

#[test]
fn committed_fixtures_match_lvm2_reports() {
    for name in FIXTURES {
        let fx = Fixture::open(&fixtures_dir().join(name));
        let devs = fx.mem_devices();
        let scan = scan_all(&devs);
        check_fixture(&fx, &scan);
    }
}

#[test]
fn wrapped_fixture_has_wrapping_text() {
    let fx = Fixture::open(&fixtures_dir().join("wrapped"));
    let scan = scan_all(&fx.mem_devices());
    let wrapped = scan
        .pvs
        .iter()
        .flat_map(|p| &p.mdas)
        .filter_map(|m| m.header.as_ref())
        .any(|h| h.committed.offset + h.committed.size > h.size);
    assert!(wrapped, "no metadata copy wraps the circular buffer");
    assert!(scan
        .pvs
        .iter()
        .all(|p| p.mdas.len() == 2 && p.mdas[0].locn.size == 61440));
}
