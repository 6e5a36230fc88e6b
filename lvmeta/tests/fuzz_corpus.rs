//! Replays every file of `fuzz/corpus/<target>/` through the fuzz targets' entry points, plus
//! hostile inputs from lvm2's `metadata_security_t.c` list, so the parsers face them in every
//! `cargo test`.

use std::path::Path;

use lvmeta::fuzzing;

fn replay(target: &str, f: fn(&[u8])) -> usize {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("corpus dir") {
        let p = e.expect("entry").path();
        f(&std::fs::read(&p).expect("seed"));
        n += 1;
    }
    n
}

#[test]
fn corpora_replay() {
    assert!(replay("label", fuzzing::label) >= 6);
    assert!(replay("mda", fuzzing::mda) >= 6);
    assert!(replay("text", fuzzing::text) >= 6);
    assert!(replay("device", fuzzing::device) >= 1);
    assert!(replay("history", fuzzing::history) >= 1);
    assert!(replay("lease", fuzzing::lease) >= 3);
    assert!(replay("words", fuzzing::words) >= 3);
    assert!(replay("sanlock_status", fuzzing::sanlock_status) >= 1);
    assert!(replay("blank", fuzzing::blank) >= 3);
}

#[test]
fn seeds_truncated_and_flipped_never_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    for (target, f) in [
        ("label", fuzzing::label as fn(&[u8])),
        ("mda", fuzzing::mda),
        ("text", fuzzing::text),
        ("device", fuzzing::device),
        ("history", fuzzing::history),
        ("lease", fuzzing::lease),
        ("words", fuzzing::words),
        ("sanlock_status", fuzzing::sanlock_status),
        ("blank", fuzzing::blank),
    ] {
        for e in std::fs::read_dir(dir.join(target)).expect("corpus dir") {
            let seed = std::fs::read(e.expect("entry").path()).expect("seed");
            let step = (seed.len() / 97).max(1);
            for cut in (0..seed.len()).step_by(step) {
                f(&seed[..cut]);
                let mut flipped = seed.clone();
                flipped[cut] ^= 0xff;
                f(&flipped);
            }
        }
    }
}

#[test]
fn hostile_text() {
    let cases: &[&str] = &[
        "",
        "vg {",
        "vg { id = \"x\" }\ncontents = \"Text Format Volume Group\"\nversion = 1",
        "contents = \"Text Format Volume Group\"\nversion = 2\nvg {}",
        "vg { a = [1, 2, 3 }",
        "vg { a = \"\\",
        &"a { ".repeat(100_000),
        &"[".repeat(100_000),
        "vg { seqno = 99999999999999999999999999 }",
        "vg { extent_size = -1 }",
        "\u{0}vg {}",
    ];
    for c in cases {
        fuzzing::text(c.as_bytes());
    }
    // A valid VG whose LV points past the end of its PV, or overlaps another, is refused.
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/text/linear-pv0-mda0"),
    )
    .expect("seed");
    let past_end = base.replacen("\"pv0\", 5", "\"pv0\", 15", 1);
    assert!(lvmeta::model::Vg::from_text(&past_end).is_err());
    let overlap = base.replacen("\"pv0\", 5", "\"pv0\", 2", 1);
    let e = lvmeta::model::Vg::from_text(&overlap).expect_err("overlap refused");
    assert!(e.to_string().contains("used by both"), "{e}");
    let dup = base.replacen("segment_count = 1", "segment_count = 2", 1);
    assert!(lvmeta::model::Vg::from_text(&dup).is_err());
    let unknown_status = base.replacen("\"VISIBLE\"", "\"VISIBLE\", \"BOGUS\"", 1);
    let e = lvmeta::model::Vg::from_text(&unknown_status).expect_err("unknown status refused");
    assert!(e.to_string().contains("BOGUS"), "{e}");
    let unknown_flag = base.replacen("flags = []", "flags = [\"FUTURE_FLAG\"]", 1);
    let vg = lvmeta::model::Vg::from_text(&unknown_flag)
        .expect("unknown flags kept")
        .vg;
    assert_eq!(vg.flags, vec!["FUTURE_FLAG".to_owned()]);
    let text = vg.to_text(lvmeta::text::Style::Raw, "t");
    assert!(text.contains("flags = [\"FUTURE_FLAG\"]"));
}
