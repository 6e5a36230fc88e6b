//! The client side of the handshake: what a node that attaches a served volume does in
//! userspace before it hands the socket to the kernel's NBD client.
//!
//! - Fixed newstyle, `NO_ZEROES`, then `GO` asking for the block sizes.
//! - Every reply length is bounded before it is read; an error reply names its type.

use std::io::{self, Read, Write};

use super::proto::{self, info, opt, rep, ProtoError};

/// What the server said about the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    /// The export's size in bytes.
    pub size: u64,
    /// Its transmission flags.
    pub flags: u16,
    /// Minimum, preferred and maximum block sizes (512, 4096, 32 MiB when not told).
    pub block: (u32, u32, u32),
}

/// Why a handshake did not reach transmission.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket failed or closed.
    #[error("NBD handshake: {0}")]
    Io(#[from] io::Error),
    /// The server broke the protocol.
    #[error("NBD handshake: {0}")]
    Proto(#[from] ProtoError),
    /// The server refused the export (`ERR_UNKNOWN`, `ERR_SHUTDOWN`, `ERR_POLICY`, ...).
    #[error("NBD handshake: the server refused the export (reply type {0:#x})")]
    Refused(u32),
    /// The server acknowledged GO without saying the export's size.
    #[error("NBD handshake: no export information before the acknowledgement")]
    NoInfo,
}

/// Ends a connection in transmission as a client should: a DISC request (no reply comes).
pub fn disconnect<W: Write>(stream: &mut W) -> io::Result<()> {
    let disc = proto::Request {
        flags: 0,
        command: proto::Command::Disconnect,
        cookie: 0,
        offset: 0,
        len: 0,
    };
    stream.write_all(&disc.encode())
}

/// Goes to export `name` on `stream`; on success the stream is in transmission.
pub fn go<S: Read + Write>(stream: &mut S, name: &[u8]) -> Result<Negotiated, ClientError> {
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting)?;
    let offered = proto::parse_greeting(greeting)?;
    // NO_ZEROES only when offered (GO never sends the zeroes anyway).
    let flags = u32::from(proto::FLAG_FIXED_NEWSTYLE | (offered & proto::FLAG_NO_ZEROES));
    let mut msg = flags.to_be_bytes().to_vec();
    msg.extend_from_slice(&proto::IHAVEOPT.to_be_bytes());
    msg.extend_from_slice(&opt::GO.to_be_bytes());
    let name_len =
        u32::try_from(name.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    msg.extend_from_slice(&(4 + name_len + 2 + 2).to_be_bytes());
    msg.extend_from_slice(&name_len.to_be_bytes());
    msg.extend_from_slice(name);
    msg.extend_from_slice(&1u16.to_be_bytes());
    msg.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    stream.write_all(&msg)?;
    stream.flush()?;
    let mut export = None;
    let mut block = (512, 4096, proto::MAX_PAYLOAD);
    loop {
        let mut head = [0u8; 20];
        stream.read_exact(&mut head)?;
        let (_, kind, len) = proto::parse_option_reply(head)?;
        // Bounded by parse_option_reply.
        let mut data = vec![0u8; len as usize];
        stream.read_exact(&mut data)?;
        match kind {
            rep::ACK => break,
            rep::INFO => match (data.get(..2), data.len()) {
                (Some([0, 0]), 12) => {
                    let size = u64::from_be_bytes(data[2..10].try_into().unwrap_or_default());
                    let flags = u16::from_be_bytes([data[10], data[11]]);
                    export = Some((size, flags));
                }
                (Some([0, 3]), 14) => {
                    let at = |i: usize| {
                        u32::from_be_bytes([data[i], data[i + 1], data[i + 2], data[i + 3]])
                    };
                    block = (at(2), at(6), at(10));
                }
                // Other information is not needed.
                _ => {}
            },
            k if k & (1 << 31) != 0 => return Err(ClientError::Refused(k)),
            // Unknown non-error replies are skipped, as the protocol asks.
            _ => {}
        }
    }
    let (size, flags) = export.ok_or(ClientError::NoInfo)?;
    Ok(Negotiated { size, flags, block })
}
