//! Replays every file of the corpora of csi-shim's fuzz targets (`fuzz/corpus/<target>/`)
//! through the target's entry point, whole, truncated and with a byte flipped, so the parsers
//! face them in every `cargo test`.

/// Replays `fuzz/corpus/<target>/` through `entry`; at least five seeds.
fn replay(target: &str, entry: fn(&[u8])) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("corpus dir") {
        let seed = std::fs::read(e.expect("entry").path()).expect("seed");
        entry(&seed);
        for cut in 0..seed.len() {
            entry(&seed[..cut]);
            let mut flipped = seed.clone();
            flipped[cut] ^= 0xff;
            entry(&flipped);
        }
        n += 1;
    }
    assert!(n >= 5, "{target}: {n} seeds");
}

#[test]
fn request_corpus_replays() {
    replay("request", csi_shim::fuzzing::request);
}

#[test]
fn nbd_corpus_replays() {
    replay("nbd", csi_shim::fuzzing::nbd);
}
