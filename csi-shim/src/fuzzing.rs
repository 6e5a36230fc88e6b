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
    use std::os::unix::net::UnixStream;

    let export = crate::nbd::Export::new(
        Box::new(lvmeta::dev::MemDevice::new("vol", 1 << 20, 512)),
        data.first().is_some_and(|b| b & 1 == 1),
        4,
    );
    let find = move |name: &[u8]| {
        (name == b"vol")
            .then(|| export.clone().into())
            .ok_or(crate::nbd::Refusal::NotServed)
    };
    let (server, mut client) = UnixStream::pair().expect("socket pair");
    let input = data.get(1..).unwrap_or_default().to_vec();
    // The client's bytes in, then its half closed; the server's bytes out until it ends.
    let peer = std::thread::spawn(move || {
        let mut reader = client.try_clone().expect("clone");
        let drain = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = reader.read_to_end(&mut out);
            out
        });
        let _ = client.write_all(&input);
        let _ = client.shutdown(std::net::Shutdown::Write);
        drain.join().expect("drain")
    });
    // One server for every input: its workers live as long as the fuzzer.
    static SERVER: std::sync::OnceLock<std::sync::Arc<crate::nbd::Server>> =
        std::sync::OnceLock::new();
    let limits = crate::nbd::limits::Limits {
        workers: 2,
        ..Default::default()
    };
    let shared = SERVER.get_or_init(|| crate::nbd::Server::new(limits).expect("NBD workers"));
    let _ = shared.serve(server, &find, || {});
    let output = peer.join().expect("peer");
    assert!(
        output.starts_with(b"NBDMAGICIHAVEOPT"),
        "the greeting comes first"
    );
}
