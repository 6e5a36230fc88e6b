//! Replays every file of `fuzz/corpus/request/` through its fuzz target's entry point, whole,
//! truncated and with a byte flipped, so the parser faces them in every `cargo test`.

#[test]
fn request_corpus_replays() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/request");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("corpus dir") {
        let seed = std::fs::read(e.expect("entry").path()).expect("seed");
        csi_shim::fuzzing::request(&seed);
        for cut in 0..seed.len() {
            csi_shim::fuzzing::request(&seed[..cut]);
            let mut flipped = seed.clone();
            flipped[cut] ^= 0xff;
            csi_shim::fuzzing::request(&flipped);
        }
        n += 1;
    }
    assert!(n >= 5, "{n} seeds");
}
