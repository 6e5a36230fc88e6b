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

/// One NBD connection whose client sends `data` (then closes), served from a 1 MiB export
/// `vol`: it must end (an error is fine) without a panic, and answer only whole messages.
pub fn nbd(data: &[u8]) {
    use std::io::{Read, Write};
    use std::sync::Arc;

    /// The client's bytes in, the server's out.
    struct Wire<'a> {
        input: &'a [u8],
        output: Vec<u8>,
    }
    impl Read for Wire<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Wire<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    let export = Arc::new(crate::nbd::Export {
        dev: Box::new(lvmeta::dev::MemDevice::new("vol", 1 << 20, 512)),
        read_only: data.first().is_some_and(|b| b & 1 == 1),
    });
    let find = move |name: &[u8]| (name == b"vol").then(|| export.clone());
    let mut wire = Wire {
        input: data.get(1..).unwrap_or_default(),
        output: Vec::new(),
    };
    let _ = crate::nbd::server::serve(&mut wire, &find);
    assert!(
        wire.output.starts_with(b"NBDMAGICIHAVEOPT"),
        "the greeting comes first"
    );
}
