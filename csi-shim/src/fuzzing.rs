//! Entry points of the driver's fuzz targets (`fuzz/`), also replayed over their corpora by
//! `csi-shim/tests/fuzz_corpus.rs`. Each must return without panicking for any input.

/// A request tag on a pool LV (the node's mailbox, [`crate::volume::Request`]): one that
/// parses must give back the tag it came from.
pub fn request(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some((r, at)) = crate::volume::Request::parse(&text) {
        assert_eq!(
            crate::volume::Request::parse(&r.tag_at(at)),
            Some((r, at)),
            "a request's tag reads back to it"
        );
    }
}
