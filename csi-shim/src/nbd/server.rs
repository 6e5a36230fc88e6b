//! One NBD connection served, blocking: the handshake, then requests in order until the
//! client disconnects. Exports are looked up by name through the caller, which decides
//! what a client may see; `LIST` is refused so that names are never disclosed.
//!
//! - Every length read from the wire is bounded before a buffer is allocated.
//! - A request the export cannot serve is answered with its errno; the connection ends only
//!   on a protocol error, a failed socket or `DISC`.
//! - Data are never cached here: a FLUSH or FUA asks the device to make replied writes
//!   stable.

use std::io::{self, Read, Write};
use std::sync::Arc;

use super::proto::{self, errno, opt, rep, Command, ProtoError, Request};
use super::Export;

/// Why a connection ended before the client disconnected.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The socket failed or closed.
    #[error("connection: {0}")]
    Io(#[from] io::Error),
    /// The client broke the protocol.
    #[error("protocol: {0}")]
    Proto(#[from] ProtoError),
}

/// What the handshake settled: the export, or nothing (the client aborted).
type Chosen = Option<Arc<Export>>;

/// Serves one connection on `stream`: `find` gives the export of a name, if the client may
/// have it. Returns when the client disconnects (or aborts the handshake).
pub fn serve<S: Read + Write>(
    stream: &mut S,
    find: &dyn Fn(&[u8]) -> Option<Arc<Export>>,
) -> Result<(), ServeError> {
    let Some(export) = handshake(stream, find)? else {
        return Ok(());
    };
    transmit(stream, &export)
}

/// The transmission flags of an export.
fn flags_of(export: &Export) -> u16 {
    use proto::transmission::*;
    let mut f = HAS_FLAGS | SEND_FLUSH | SEND_FUA | SEND_TRIM | SEND_WRITE_ZEROES | CAN_MULTI_CONN;
    if export.read_only {
        f |= READ_ONLY;
    }
    f
}

fn handshake<S: Read + Write>(
    stream: &mut S,
    find: &dyn Fn(&[u8]) -> Option<Arc<Export>>,
) -> Result<Chosen, ServeError> {
    stream.write_all(&proto::greeting())?;
    stream.flush()?;
    let no_zeroes = proto::client_flags(read_array(stream)?)?;
    loop {
        let (option, len) = proto::option_header(read_array(stream)?)?;
        // Bounded by option_header.
        let mut data = vec![0u8; len as usize];
        stream.read_exact(&mut data)?;
        match option {
            opt::EXPORT_NAME => {
                // No error path in this option: an unknown name ends the connection.
                let Some(s) = find(&data) else {
                    return Ok(None);
                };
                stream.write_all(&proto::export_name_reply(
                    s.dev.size(),
                    flags_of(&s),
                    no_zeroes,
                ))?;
                stream.flush()?;
                return Ok(Some(s));
            }
            opt::ABORT => {
                stream.write_all(&proto::option_reply(option, rep::ACK, &[]))?;
                stream.flush()?;
                return Ok(None);
            }
            opt::INFO | opt::GO => {
                let found = proto::info_name(&data).map(find);
                let reply = match found {
                    None => proto::option_reply(option, rep::ERR_INVALID, &[]),
                    Some(None) => proto::option_reply(option, rep::ERR_UNKNOWN, &[]),
                    Some(Some(s)) => {
                        let mut r = proto::option_reply(
                            option,
                            rep::INFO,
                            &proto::info_export(s.dev.size(), flags_of(&s)),
                        );
                        let b = s.dev.logical_sector_size();
                        r.extend(proto::option_reply(
                            option,
                            rep::INFO,
                            &proto::info_block_size(b, b.max(4096), proto::MAX_PAYLOAD),
                        ));
                        r.extend(proto::option_reply(option, rep::ACK, &[]));
                        stream.write_all(&r)?;
                        stream.flush()?;
                        if option == opt::GO {
                            return Ok(Some(s));
                        }
                        continue;
                    }
                };
                stream.write_all(&reply)?;
            }
            // Export names are not disclosed.
            opt::LIST => stream.write_all(&proto::option_reply(option, rep::ERR_POLICY, &[]))?,
            _ => stream.write_all(&proto::option_reply(option, rep::ERR_UNSUP, &[]))?,
        }
        stream.flush()?;
    }
}

fn transmit<S: Read + Write>(stream: &mut S, export: &Export) -> Result<(), ServeError> {
    let size = export.dev.size();
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let req = Request::parse(read_array(stream)?)?;
        let checked = req.check(size, export.read_only);
        if req.command == Command::Write {
            // The data follow whatever the answer; a payload too large to read is a
            // protocol error (the stream cannot be resynchronised).
            if req.len > proto::MAX_PAYLOAD {
                return Err(ServeError::Io(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a write of {} bytes", req.len),
                )));
            }
            // Read as it arrives: memory follows what the client sent, not what it claims.
            buf.clear();
            let got = Read::by_ref(stream)
                .take(u64::from(req.len))
                .read_to_end(&mut buf)?;
            if got < req.len as usize {
                return Err(ServeError::Io(io::ErrorKind::UnexpectedEof.into()));
            }
        }
        if req.command == Command::Disconnect {
            return Ok(());
        }
        let fua = req.flags & proto::CMD_FLAG_FUA != 0;
        let done = checked.and_then(|()| run(export, &req, fua, &mut buf));
        match done {
            Ok(()) if req.command == Command::Read => {
                stream.write_all(&proto::simple_reply(0, req.cookie))?;
                stream.write_all(&buf[..req.len as usize])?;
            }
            Ok(()) => stream.write_all(&proto::simple_reply(0, req.cookie))?,
            Err(e) => stream.write_all(&proto::simple_reply(e, req.cookie))?,
        }
        stream.flush()?;
    }
}

/// Runs a checked request on the store; the errno on failure.
fn run(export: &Export, req: &Request, fua: bool, buf: &mut Vec<u8>) -> Result<(), u32> {
    let dev = export.dev.as_ref();
    let eio = |e: io::Error| {
        tracing::warn!(offset = req.offset, len = req.len, error = %e, "NBD request failed");
        errno::EIO
    };
    let len = u64::from(req.len);
    match req.command {
        Command::Read => {
            // Bounded by Request::check.
            buf.resize(req.len as usize, 0);
            dev.read_at(req.offset, buf).map_err(eio)?;
        }
        Command::Write => dev.write_at(req.offset, buf).map_err(eio)?,
        // A hint: a device that cannot discard keeps the data.
        Command::Trim => drop(dev.discard(req.offset, len).map_err(eio)?),
        Command::WriteZeroes => dev.write_zeroes(req.offset, len).map_err(eio)?,
        Command::Flush => dev.flush().map_err(eio)?,
        Command::Disconnect | Command::Other(_) => return Err(errno::EINVAL),
    }
    if fua && req.command != Command::Read {
        dev.flush().map_err(eio)?;
    }
    Ok(())
}

fn read_array<const N: usize>(stream: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    stream.read_exact(&mut b)?;
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lvmeta::dev::MemDevice;
    use proto::{CMD_FLAG_FUA, CMD_FLAG_NO_HOLE};
    use std::os::unix::net::UnixStream;
    use std::thread::JoinHandle;

    const SIZE: u64 = 1 << 20;

    /// A server on one end of a socket pair, exporting `vol` (read-only with `ro`).
    fn start(ro: bool) -> (UnixStream, JoinHandle<Result<(), ServeError>>) {
        let (mut server, client) = UnixStream::pair().expect("socket pair");
        let export = Arc::new(Export {
            dev: Box::new(MemDevice::new("vol", SIZE, 512)),
            read_only: ro,
        });
        let handle = std::thread::spawn(move || {
            let find = move |name: &[u8]| (name == b"vol").then(|| export.clone());
            serve(&mut server, &find)
        });
        (client, handle)
    }

    fn read_n(s: &mut UnixStream, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        s.read_exact(&mut b).expect("read");
        b
    }

    /// The greeting read, the client flags sent.
    fn hello(s: &mut UnixStream, flags: u32) {
        assert_eq!(read_n(s, 18), proto::greeting());
        s.write_all(&flags.to_be_bytes()).expect("flags");
    }

    fn option(s: &mut UnixStream, option: u32, data: &[u8]) {
        let mut b = proto::IHAVEOPT.to_be_bytes().to_vec();
        b.extend_from_slice(&option.to_be_bytes());
        b.extend_from_slice(&(data.len() as u32).to_be_bytes());
        b.extend_from_slice(data);
        s.write_all(&b).expect("option");
    }

    /// One option reply: its type and data.
    fn reply(s: &mut UnixStream) -> (u32, Vec<u8>) {
        let h = read_n(s, 20);
        assert_eq!(h[..8], proto::REPLY_MAGIC.to_be_bytes());
        let kind = u32::from_be_bytes(h[12..16].try_into().expect("4"));
        let len = u32::from_be_bytes(h[16..].try_into().expect("4"));
        (kind, read_n(s, len as usize))
    }

    fn go_data(name: &[u8]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name);
        d.extend_from_slice(&0u16.to_be_bytes());
        d
    }

    /// Sends a request (and a write's data); returns the reply's errno and a read's data.
    fn request(s: &mut UnixStream, r: Request, data: &[u8]) -> (u32, Vec<u8>) {
        s.write_all(&r.encode()).expect("request");
        s.write_all(data).expect("data");
        let h = read_n(s, 16);
        assert_eq!(h[..4], proto::SIMPLE_REPLY_MAGIC.to_be_bytes());
        assert_eq!(h[8..], r.cookie.to_be_bytes());
        let err = u32::from_be_bytes(h[4..8].try_into().expect("4"));
        let body = match (r.command, err) {
            (Command::Read, 0) => read_n(s, r.len as usize),
            _ => Vec::new(),
        };
        (err, body)
    }

    fn req(command: Command, flags: u16, offset: u64, len: u32) -> Request {
        Request {
            flags,
            command,
            cookie: offset ^ u64::from(len),
            offset,
            len,
        }
    }

    #[test]
    fn a_client_goes_to_an_export_and_its_data_round_trip() {
        let (mut c, server) = start(false);
        hello(&mut c, 3);
        // Names are not disclosed; unknown options are refused; the handshake goes on.
        option(&mut c, opt::LIST, &[]);
        assert_eq!(reply(&mut c).0, rep::ERR_POLICY);
        option(&mut c, 99, b"junk");
        assert_eq!(reply(&mut c).0, rep::ERR_UNSUP);
        option(&mut c, opt::GO, &go_data(b"other"));
        assert_eq!(reply(&mut c).0, rep::ERR_UNKNOWN);
        option(&mut c, opt::GO, &[1, 2]);
        assert_eq!(reply(&mut c).0, rep::ERR_INVALID);
        option(&mut c, opt::GO, &go_data(b"vol"));
        let (kind, info) = reply(&mut c);
        assert_eq!(kind, rep::INFO);
        assert_eq!(info[2..10], SIZE.to_be_bytes());
        let flags = u16::from_be_bytes(info[10..].try_into().expect("2"));
        assert_ne!(flags & proto::transmission::CAN_MULTI_CONN, 0);
        assert_eq!(flags & proto::transmission::READ_ONLY, 0);
        assert_eq!(reply(&mut c).0, rep::INFO);
        assert_eq!(reply(&mut c).0, rep::ACK);
        // Transmission.
        let data = vec![0x5a; 4096];
        let w = req(Command::Write, CMD_FLAG_FUA, 8192, 4096);
        assert_eq!(request(&mut c, w, &data).0, 0);
        let (err, back) = request(&mut c, req(Command::Read, 0, 8192, 4096), &[]);
        assert_eq!((err, back), (0, data.clone()));
        assert_eq!(request(&mut c, req(Command::Flush, 0, 0, 0), &[]).0, 0);
        let z = req(Command::WriteZeroes, CMD_FLAG_NO_HOLE, 8192, 512);
        assert_eq!(request(&mut c, z, &[]).0, 0);
        let (_, back) = request(&mut c, req(Command::Read, 0, 8192, 1024), &[]);
        assert!(back[..512].iter().all(|&b| b == 0) && back[512..].iter().all(|&b| b == 0x5a));
        assert_eq!(request(&mut c, req(Command::Trim, 0, 0, 4096), &[]).0, 0);
        // Refusals keep the connection: past the end, unknown commands.
        let past = req(Command::Write, 0, SIZE - 512, 1024);
        assert_eq!(request(&mut c, past, &[1; 1024]).0, errno::ENOSPC);
        let other = req(Command::Other(42), 0, 0, 0);
        assert_eq!(request(&mut c, other, &[]).0, errno::EINVAL);
        let (err, _) = request(&mut c, req(Command::Read, 0, 8192 + 512, 512), &[]);
        assert_eq!(err, 0);
        c.write_all(&req(Command::Disconnect, 0, 0, 0).encode())
            .expect("disc");
        server.join().expect("server").expect("clean end");
    }

    #[test]
    fn a_read_only_export_refuses_writes_and_stays_in_step() {
        let (mut c, server) = start(true);
        hello(&mut c, 1);
        // EXPORT_NAME, without NO_ZEROES: size, flags and 124 zero bytes.
        option(&mut c, opt::EXPORT_NAME, b"vol");
        let r = read_n(&mut c, 134);
        assert_eq!(r[..8], SIZE.to_be_bytes());
        let flags = u16::from_be_bytes(r[8..10].try_into().expect("2"));
        assert_ne!(flags & proto::transmission::READ_ONLY, 0);
        let w = req(Command::Write, 0, 0, 512);
        assert_eq!(request(&mut c, w, &[7; 512]).0, errno::EPERM);
        let (err, back) = request(&mut c, req(Command::Read, 0, 0, 512), &[]);
        assert_eq!((err, back), (0, vec![0; 512]));
        drop(c);
        // The client went away without DISC: the connection ends with the socket.
        assert!(matches!(
            server.join().expect("server"),
            Err(ServeError::Io(_))
        ));
    }

    #[test]
    fn hostile_clients_end_their_connection_without_hurting_the_server() {
        // Unknown client flags.
        let (mut c, server) = start(false);
        hello(&mut c, 0x80);
        assert!(matches!(
            server.join().expect("server"),
            Err(ServeError::Proto(_))
        ));
        // An option claiming 4 GiB of data.
        let (mut c, server) = start(false);
        hello(&mut c, 3);
        let mut h = proto::IHAVEOPT.to_be_bytes().to_vec();
        h.extend_from_slice(&opt::GO.to_be_bytes());
        h.extend_from_slice(&u32::MAX.to_be_bytes());
        c.write_all(&h).expect("header");
        assert!(matches!(
            server.join().expect("server"),
            Err(ServeError::Proto(_))
        ));
        // A request with a bad magic, and a write larger than any payload.
        for bad in [
            {
                let mut r = req(Command::Read, 0, 0, 512).encode();
                r[0] ^= 0xff;
                r
            },
            req(Command::Write, 0, 0, u32::MAX).encode(),
        ] {
            let (mut c, server) = start(false);
            hello(&mut c, 3);
            option(&mut c, opt::GO, &go_data(b"vol"));
            for _ in 0..3 {
                reply(&mut c);
            }
            c.write_all(&bad).expect("request");
            assert!(server.join().expect("server").is_err());
        }
        // ABORT ends the handshake cleanly.
        let (mut c, server) = start(false);
        hello(&mut c, 3);
        option(&mut c, opt::ABORT, &[]);
        assert_eq!(reply(&mut c).0, rep::ACK);
        server.join().expect("server").expect("aborted");
    }
}
