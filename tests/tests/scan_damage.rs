//! Several PVs and copies: the newest valid seqno wins, and stale, damaged or disagreeing
//! copies are reported as typed warnings naming the device and area, never silently used.

use lvmeta::crc;
use lvmeta::dev::{BlockDevice, Fault, FaultyDevice, MemDevice};
use lvmeta::mda::{self, RawLocn};
use lvmeta::scan::{self, Scan, ScanWarning};
use lvmeta_tests::{fixtures_dir, Fixture};

/// The wrapped fixture: two PVs, two metadata areas each (4096 and the end of the device).
fn wrapped() -> Vec<MemDevice> {
    Fixture::open(&fixtures_dir().join("wrapped")).mem_devices()
}

fn scan_of(devs: &[MemDevice]) -> Scan {
    let refs: Vec<&dyn BlockDevice> = devs.iter().map(|d| d as &dyn BlockDevice).collect();
    scan::scan(&refs)
}

/// Writes `text` as the committed copy of the area at `start` (size `size`) of `dev`.
fn write_copy(dev: &MemDevice, start: u64, size: u64, text: &str) {
    let mut hbuf = [0u8; 512];
    dev.read_at(start, &mut hbuf).expect("header");
    let mut h = mda::decode(&hbuf, start, size).expect("valid header");
    let mut bytes = text.as_bytes().to_vec();
    bytes.push(0);
    dev.write_at(start + 512, &bytes).expect("text");
    h.committed = RawLocn {
        offset: 512,
        size: bytes.len() as u64,
        checksum: crc::calc(&bytes),
        flags: 0,
    };
    dev.write_at(start, &mda::encode(&h)).expect("header");
}

fn committed_text(scan: &Scan) -> String {
    scan.vgs[0].text.to_string()
}

const MDA0: (u64, u64) = (4096, 61440);

/// The scan found the VG and warned exactly once, about the area at 4096 of `device`, with a
/// message containing `needle`.
fn assert_one_mda_warning(s: &Scan, device: &str, needle: &str) {
    assert_eq!(s.vgs.len(), 1);
    assert!(
        matches!(
            &s.warnings[..],
            [ScanWarning::Mda { device: d, offset: 4096, error }]
                if d == device && error.to_string().contains(needle)
        ),
        "{:?}",
        s.warnings
    );
}

#[test]
fn clean_fixture_has_no_warnings() {
    let s = scan_of(&wrapped());
    assert!(s.warnings.is_empty(), "{:?}", s.warnings);
    assert_eq!(s.vgs.len(), 1);
    assert_eq!(s.pvs.len(), 2);
}

#[test]
fn stale_copy_is_reported_and_not_used() {
    let devs = wrapped();
    let s = scan_of(&devs);
    let seqno = s.vgs[0].vg.seqno;
    let old = committed_text(&s).replacen(
        &format!("seqno = {seqno}"),
        &format!("seqno = {}", seqno - 1),
        1,
    );
    write_copy(&devs[1], MDA0.0, MDA0.1, &old);
    let s = scan_of(&devs);
    assert_eq!(s.vgs[0].vg.seqno, seqno);
    assert!(
        matches!(
            &s.warnings[..],
            [ScanWarning::Stale { device, offset: 4096, seqno: old, newest, .. }]
                if device == "pv1.img" && *old == seqno - 1 && *newest == seqno
        ),
        "{:?}",
        s.warnings
    );
}

#[test]
fn newest_copy_wins_even_on_one_area() {
    let devs = wrapped();
    let s = scan_of(&devs);
    let seqno = s.vgs[0].vg.seqno;
    let newer = committed_text(&s)
        .replacen(
            &format!("seqno = {seqno}"),
            &format!("seqno = {}", seqno + 1),
            1,
        )
        .replacen("\"final1\"", "\"final1\", \"newer\"", 1);
    write_copy(&devs[1], MDA0.0, MDA0.1, &newer);
    let s = scan_of(&devs);
    assert_eq!(s.vgs[0].vg.seqno, seqno + 1);
    assert!(s.vgs[0]
        .vg
        .lv("lv1")
        .expect("lv1")
        .tags
        .iter()
        .any(|t| t == "newer"));
    let stale = s
        .warnings
        .iter()
        .filter(|w| matches!(w, ScanWarning::Stale { .. }))
        .count();
    assert_eq!(stale, 3, "{:?}", s.warnings);
}

#[test]
fn same_seqno_different_text_is_a_mismatch() {
    let devs = wrapped();
    let s = scan_of(&devs);
    let other = committed_text(&s).replacen("\"final1\"", "\"final1\", \"other\"", 1);
    write_copy(&devs[1], MDA0.0, MDA0.1, &other);
    let s = scan_of(&devs);
    assert!(!s.vgs[0]
        .vg
        .lv("lv1")
        .expect("lv1")
        .tags
        .iter()
        .any(|t| t == "other"));
    assert!(
        matches!(
            &s.warnings[..],
            [ScanWarning::Mismatch { device, offset: 4096, .. }] if device == "pv1.img"
        ),
        "{:?}",
        s.warnings
    );
}

#[test]
fn damaged_header_and_text_are_reported() {
    let devs = wrapped();
    let mut b = [0u8; 1];
    devs[0].read_at(4096 + 30, &mut b).expect("read");
    devs[0]
        .write_at(4096 + 30, &[b[0] ^ 0x40])
        .expect("flip header byte");
    assert_one_mda_warning(&scan_of(&devs), "pv0.img", "checksum");

    // A flipped byte inside the committed text of pv1's first area.
    let devs = wrapped();
    let mut hbuf = [0u8; 512];
    devs[1].read_at(4096, &mut hbuf).expect("header");
    let h = mda::decode(&hbuf, MDA0.0, MDA0.1).expect("header");
    let at = 4096 + h.committed.offset + 100;
    devs[1].read_at(at, &mut b).expect("read");
    devs[1].write_at(at, &[b[0] ^ 1]).expect("flip text byte");
    assert_one_mda_warning(&scan_of(&devs), "pv1.img", "does not match raw_locn");
}

#[test]
fn damaged_label_makes_the_pv_missing() {
    let devs = wrapped();
    devs[1].write_at(600, &[0xff]).expect("flip label byte");
    let s = scan_of(&devs);
    assert_eq!(s.pvs.len(), 1);
    let labels = s
        .warnings
        .iter()
        .filter(|w| matches!(w, ScanWarning::Label { device, .. } if device == "pv1.img"))
        .count();
    let missing = s
        .warnings
        .iter()
        .filter(|w| matches!(w, ScanWarning::MissingPv { .. }))
        .count();
    assert_eq!((labels, missing), (1, 1), "{:?}", s.warnings);
    assert!(s.vgs[0].pv_devices[1].is_none());
}

#[test]
fn read_errors_are_warnings() {
    let mut devs = wrapped();
    let second = devs.pop().expect("pv1");
    let faulty = FaultyDevice::new(
        second,
        Fault::FailReads {
            start: 4096,
            end: 8192,
        },
    );
    let refs: Vec<&dyn BlockDevice> = vec![&devs[0], &faulty];
    let s = scan::scan(&refs);
    assert_eq!(s.vgs.len(), 1);
    assert!(
        s.warnings
            .iter()
            .any(|w| matches!(w, ScanWarning::Mda { device, error, .. }
        if device == "pv1.img" && error.to_string().contains("I/O error"))),
        "{:?}",
        s.warnings
    );
}

#[test]
fn areas_outside_the_device_are_refused_before_reading() {
    let devs = Fixture::open(&fixtures_dir().join("linear")).mem_devices();
    let mut sector = [0u8; 512];
    devs[0].read_at(512, &mut sector).expect("label");
    let mut l = lvmeta::label::decode(&sector, 1).expect("label");
    l.metadata_areas[0].size = u64::MAX - 4096;
    devs[0]
        .write_at(512, &lvmeta::label::encode(&l).expect("encode"))
        .expect("write");
    let s = scan_of(&devs);
    assert!(s.vgs.is_empty());
    assert!(
        matches!(
            &s.warnings[..],
            [ScanWarning::Mda { device, offset: 4096, error }]
                if device == "pv0.img" && error.to_string().contains("does not fit")
        ),
        "{:?}",
        s.warnings
    );
}
