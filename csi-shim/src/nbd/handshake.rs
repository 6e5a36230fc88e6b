//! The fixed newstyle handshake, server side: greeting, options, then the chosen export.
//!
//! - Every length read from the wire is bounded before a buffer is allocated.
//! - `LIST` is refused so that export names are never disclosed; unknown options get
//!   `ERR_UNSUP` and the handshake goes on.

use std::io::{self, Read, Write};

use super::proto::{self, opt, rep, ProtoError};
use super::{Grant, Refusal};

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

/// Finds the export a client asked for by name, if that client may have it.
pub type Find<'a> = dyn Fn(&[u8]) -> Result<Grant, Refusal> + 'a;

/// The transmission flags of an export as granted.
pub(super) fn flags_of(g: &Grant) -> u16 {
    use proto::transmission::*;
    let mut f = HAS_FLAGS | SEND_FLUSH | SEND_FUA | SEND_TRIM | SEND_WRITE_ZEROES | CAN_MULTI_CONN;
    if g.read_only() {
        f |= READ_ONLY;
    }
    f
}

/// Runs the handshake on `stream`; the export chosen, or None when the client aborted or
/// named an export it cannot have through `EXPORT_NAME` (which has no error reply).
pub(super) fn handshake<S: Read + Write>(
    stream: &mut S,
    find: &Find<'_>,
) -> Result<Option<Grant>, ServeError> {
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
                let Ok(s) = find(&data) else {
                    return Ok(None);
                };
                let reply = proto::export_name_reply(s.export.size(), flags_of(&s), no_zeroes);
                stream.write_all(&reply)?;
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
                let refused = match &found {
                    None => Some(rep::ERR_INVALID),
                    Some(Err(Refusal::NotServed)) => Some(rep::ERR_UNKNOWN),
                    Some(Err(Refusal::NotAdmitted)) => Some(rep::ERR_POLICY),
                    Some(Ok(s)) if s.export.is_closed() => Some(rep::ERR_SHUTDOWN),
                    Some(Ok(s)) if s.export.connections() >= s.export.max_connections => {
                        Some(rep::ERR_POLICY)
                    }
                    Some(Ok(_)) => None,
                };
                let (None, Some(Ok(s))) = (refused, found) else {
                    let kind = refused.unwrap_or(rep::ERR_UNKNOWN);
                    stream.write_all(&proto::option_reply(option, kind, &[]))?;
                    stream.flush()?;
                    continue;
                };
                let info = proto::info_export(s.export.size(), flags_of(&s));
                let mut r = proto::option_reply(option, rep::INFO, &info);
                let b = s.export.block_size();
                let sizes = proto::info_block_size(b, b.max(4096), proto::MAX_PAYLOAD);
                r.extend(proto::option_reply(option, rep::INFO, &sizes));
                r.extend(proto::option_reply(option, rep::ACK, &[]));
                stream.write_all(&r)?;
                stream.flush()?;
                if option == opt::GO {
                    return Ok(Some(s));
                }
            }
            // Export names are not disclosed.
            opt::LIST => {
                stream.write_all(&proto::option_reply(option, rep::ERR_POLICY, &[]))?;
                stream.flush()?;
            }
            _ => {
                stream.write_all(&proto::option_reply(option, rep::ERR_UNSUP, &[]))?;
                stream.flush()?;
            }
        }
    }
}

/// Reads exactly `N` bytes.
pub(super) fn read_array<const N: usize>(stream: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0u8; N];
    stream.read_exact(&mut b)?;
    Ok(b)
}
