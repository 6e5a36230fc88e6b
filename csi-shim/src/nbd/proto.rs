//! The NBD protocol as data (fixed newstyle handshake, simple replies): what each message
//! holds and how it is checked, with no I/O. All integers are big-endian on the wire.
//!
//! - Sizes read from the wire are bounded before anything is allocated
//!   ([`MAX_OPTION_DATA`], [`MAX_PAYLOAD`]).
//! - A request is checked against the export before it is served ([`Request::check`]): an
//!   error names the errno the client gets, never a panic.
//! - Structured replies, TLS and metadata contexts are not offered: the Linux client uses
//!   none of them.

/// `NBDMAGIC`: the first eight bytes a server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: after [`NBDMAGIC`], and before each option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// The magic of an option reply.
pub const REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// The magic of a transmission request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// The magic of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flags (server) and client flags: the fixed newstyle handshake.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flags (server) and client flags: no 124 zero bytes after `EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;

/// The largest option payload accepted (a name of at most 4 KiB and its info requests).
pub const MAX_OPTION_DATA: u32 = 8 << 10;
/// The largest READ or WRITE payload accepted (the kernel sends at most 32 MiB).
pub const MAX_PAYLOAD: u32 = 32 << 20;

/// Transmission flags: what the export offers.
pub mod transmission {
    /// Always set.
    pub const HAS_FLAGS: u16 = 1 << 0;
    /// Writes are refused.
    pub const READ_ONLY: u16 = 1 << 1;
    /// FLUSH is understood.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// The FUA command flag is understood.
    pub const SEND_FUA: u16 = 1 << 3;
    /// TRIM is understood.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// WRITE_ZEROES is understood.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// Several connections share one view: a FLUSH on one makes writes stable for all.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Options of the handshake (the ones served; others get `ERR_UNSUP`).
pub mod opt {
    /// Choose an export, old style: no error path.
    pub const EXPORT_NAME: u32 = 1;
    /// End the handshake.
    pub const ABORT: u32 = 2;
    /// List the exports.
    pub const LIST: u32 = 3;
    /// Describe an export.
    pub const INFO: u32 = 6;
    /// Describe an export and start transmission.
    pub const GO: u32 = 7;
}

/// Option reply types.
pub mod rep {
    /// Done.
    pub const ACK: u32 = 1;
    /// One export of a LIST.
    pub const SERVER: u32 = 2;
    /// One piece of information of INFO or GO.
    pub const INFO: u32 = 3;
    /// The option is not known.
    pub const ERR_UNSUP: u32 = (1 << 31) + 1;
    /// Refused by the server's policy.
    pub const ERR_POLICY: u32 = (1 << 31) + 2;
    /// The option's data is malformed.
    pub const ERR_INVALID: u32 = (1 << 31) + 3;
    /// No such export.
    pub const ERR_UNKNOWN: u32 = (1 << 31) + 6;
    /// The export is going away (handed over, fenced): try again later.
    pub const ERR_SHUTDOWN: u32 = (1 << 31) + 7;
}

/// Information types of `REP_INFO`.
pub mod info {
    /// Size and transmission flags.
    pub const EXPORT: u16 = 0;
    /// Block size constraints.
    pub const BLOCK_SIZE: u16 = 3;
}

/// Errno values a reply carries.
pub mod errno {
    /// Not permitted (a write to a read-only export).
    pub const EPERM: u32 = 1;
    /// I/O error.
    pub const EIO: u32 = 5;
    /// Invalid request (past the end of a read, unknown command or flag, too large).
    pub const EINVAL: u32 = 22;
    /// No space (a write past the end).
    pub const ENOSPC: u32 = 28;
    /// The server is going away: the client disconnects softly.
    pub const ESHUTDOWN: u32 = 108;
}

/// Why bytes from the wire are not a message of this protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    /// A magic number is wrong.
    #[error("{what}: magic {found:#x} is not {want:#x}")]
    Magic {
        /// Which message.
        what: &'static str,
        /// What was read.
        found: u64,
        /// What the protocol wants.
        want: u64,
    },
    /// The client set flags this server did not offer.
    #[error("client flags {0:#x}: unknown bits")]
    ClientFlags(u32),
    /// An option's payload is larger than [`MAX_OPTION_DATA`].
    #[error("option {option}: {len} bytes of data, more than {MAX_OPTION_DATA}")]
    OptionTooLarge {
        /// The option.
        option: u32,
        /// Its declared length.
        len: u32,
    },
}

/// The client's flags after the server's greeting: `no_zeroes` when it asked for
/// [`FLAG_NO_ZEROES`]; refused when it set bits that were not offered or left out the fixed
/// newstyle.
pub fn client_flags(raw: [u8; 4]) -> Result<bool, ProtoError> {
    let f = u32::from_be_bytes(raw);
    let known = u32::from(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES);
    if f & !known != 0 || f & u32::from(FLAG_FIXED_NEWSTYLE) == 0 {
        return Err(ProtoError::ClientFlags(f));
    }
    Ok(f & u32::from(FLAG_NO_ZEROES) != 0)
}

/// The handshake flags of a server's greeting; refused unless it speaks fixed newstyle.
pub fn parse_greeting(raw: [u8; 18]) -> Result<u16, ProtoError> {
    let magic = u64::from_be_bytes(be(&raw[..8]));
    let opt = u64::from_be_bytes(be(&raw[8..16]));
    if magic != NBDMAGIC || opt != IHAVEOPT {
        return Err(ProtoError::Magic {
            what: "greeting",
            found: if magic != NBDMAGIC { magic } else { opt },
            want: if magic != NBDMAGIC {
                NBDMAGIC
            } else {
                IHAVEOPT
            },
        });
    }
    let flags = u16::from_be_bytes(be(&raw[16..]));
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(ProtoError::ClientFlags(u32::from(flags)));
    }
    Ok(flags)
}

/// An option reply's header: the option, the reply type and the data length (bounded).
pub fn parse_option_reply(raw: [u8; 20]) -> Result<(u32, u32, u32), ProtoError> {
    let magic = u64::from_be_bytes(be(&raw[..8]));
    if magic != REPLY_MAGIC {
        return Err(ProtoError::Magic {
            what: "option reply",
            found: magic,
            want: REPLY_MAGIC,
        });
    }
    let option = u32::from_be_bytes(be(&raw[8..12]));
    let kind = u32::from_be_bytes(be(&raw[12..16]));
    let len = u32::from_be_bytes(be(&raw[16..]));
    if len > MAX_OPTION_DATA {
        return Err(ProtoError::OptionTooLarge { option, len });
    }
    Ok((option, kind, len))
}

/// A simple reply's errno and cookie.
pub fn parse_simple_reply(raw: [u8; 16]) -> Result<(u32, u64), ProtoError> {
    let magic = u32::from_be_bytes(be(&raw[..4]));
    if magic != SIMPLE_REPLY_MAGIC {
        return Err(ProtoError::Magic {
            what: "reply",
            found: u64::from(magic),
            want: u64::from(SIMPLE_REPLY_MAGIC),
        });
    }
    Ok((
        u32::from_be_bytes(be(&raw[4..8])),
        u64::from_be_bytes(be(&raw[8..])),
    ))
}

/// The server's greeting: magic, `IHAVEOPT`, handshake flags.
pub fn greeting() -> [u8; 18] {
    let mut b = [0u8; 18];
    b[..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
    b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
    b[16..].copy_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    b
}

/// An option's header: the option and the length of its data (bounded).
pub fn option_header(raw: [u8; 16]) -> Result<(u32, u32), ProtoError> {
    let magic = u64::from_be_bytes(be(&raw[..8]));
    if magic != IHAVEOPT {
        return Err(ProtoError::Magic {
            what: "option",
            found: magic,
            want: IHAVEOPT,
        });
    }
    let option = u32::from_be_bytes(be(&raw[8..12]));
    let len = u32::from_be_bytes(be(&raw[12..]));
    if len > MAX_OPTION_DATA {
        return Err(ProtoError::OptionTooLarge { option, len });
    }
    Ok((option, len))
}

/// The export name of an `INFO` or `GO` option's data (its info requests are ignored: the
/// export's size and flags are always sent); `None` when the data is malformed.
pub fn info_name(data: &[u8]) -> Option<&[u8]> {
    let len = usize::try_from(u32::from_be_bytes(be(data.get(..4)?))).ok()?;
    let name = data.get(4..4usize.checked_add(len)?)?;
    let rest = data.get(4 + len..)?;
    let n = usize::from(u16::from_be_bytes(be(rest.get(..2)?)));
    (rest.len() == 2 + 2 * n).then_some(name)
}

/// An option reply of `kind` to `option`, carrying `data`.
pub fn option_reply(option: u32, kind: u32, data: &[u8]) -> Vec<u8> {
    let mut b = Vec::with_capacity(20 + data.len());
    b.extend_from_slice(&REPLY_MAGIC.to_be_bytes());
    b.extend_from_slice(&option.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    // Replies are built by this server from bounded data: never near 4 GiB.
    b.extend_from_slice(&(data.len() as u32).to_be_bytes());
    b.extend_from_slice(data);
    b
}

/// The `INFO_EXPORT` data: size in bytes and transmission flags.
pub fn info_export(size: u64, flags: u16) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..2].copy_from_slice(&info::EXPORT.to_be_bytes());
    b[2..10].copy_from_slice(&size.to_be_bytes());
    b[10..].copy_from_slice(&flags.to_be_bytes());
    b
}

/// The `INFO_BLOCK_SIZE` data: minimum, preferred and largest payload.
pub fn info_block_size(min: u32, preferred: u32, max: u32) -> [u8; 14] {
    let mut b = [0u8; 14];
    b[..2].copy_from_slice(&info::BLOCK_SIZE.to_be_bytes());
    b[2..6].copy_from_slice(&min.to_be_bytes());
    b[6..10].copy_from_slice(&preferred.to_be_bytes());
    b[10..].copy_from_slice(&max.to_be_bytes());
    b
}

/// The answer to `EXPORT_NAME`: size, transmission flags and, unless the client asked for
/// none, 124 zero bytes.
pub fn export_name_reply(size: u64, flags: u16, no_zeroes: bool) -> Vec<u8> {
    let mut b = Vec::with_capacity(134);
    b.extend_from_slice(&size.to_be_bytes());
    b.extend_from_slice(&flags.to_be_bytes());
    if !no_zeroes {
        b.extend_from_slice(&[0u8; 124]);
    }
    b
}

/// A transmission command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Read `len` bytes.
    Read,
    /// Write the `len` bytes that follow.
    Write,
    /// End the connection (no reply).
    Disconnect,
    /// Make every replied-to write stable.
    Flush,
    /// The range is not needed any more (a hint).
    Trim,
    /// The range reads back as zeroes.
    WriteZeroes,
    /// Anything else: refused with `EINVAL`.
    Other(u16),
}

/// Command flag: the write is stable before the reply.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag: WRITE_ZEROES must not leave a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;

/// A transmission request's header (a WRITE's data follows it on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Command flags.
    pub flags: u16,
    /// The command.
    pub command: Command,
    /// The client's cookie, echoed in the reply.
    pub cookie: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Length in bytes.
    pub len: u32,
}

impl Request {
    /// Reads a request header.
    pub fn parse(raw: [u8; 28]) -> Result<Self, ProtoError> {
        let magic = u32::from_be_bytes(be(&raw[..4]));
        if magic != REQUEST_MAGIC {
            return Err(ProtoError::Magic {
                what: "request",
                found: u64::from(magic),
                want: u64::from(REQUEST_MAGIC),
            });
        }
        let command = match u16::from_be_bytes(be(&raw[6..8])) {
            0 => Command::Read,
            1 => Command::Write,
            2 => Command::Disconnect,
            3 => Command::Flush,
            4 => Command::Trim,
            6 => Command::WriteZeroes,
            other => Command::Other(other),
        };
        Ok(Self {
            flags: u16::from_be_bytes(be(&raw[4..6])),
            command,
            cookie: u64::from_be_bytes(be(&raw[8..16])),
            offset: u64::from_be_bytes(be(&raw[16..24])),
            len: u32::from_be_bytes(be(&raw[24..])),
        })
    }

    /// The request as a client sends it (tests and the client side).
    pub fn encode(&self) -> [u8; 28] {
        let kind: u16 = match self.command {
            Command::Read => 0,
            Command::Write => 1,
            Command::Disconnect => 2,
            Command::Flush => 3,
            Command::Trim => 4,
            Command::WriteZeroes => 6,
            Command::Other(k) => k,
        };
        let mut b = [0u8; 28];
        b[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        b[4..6].copy_from_slice(&self.flags.to_be_bytes());
        b[6..8].copy_from_slice(&kind.to_be_bytes());
        b[8..16].copy_from_slice(&self.cookie.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..].copy_from_slice(&self.len.to_be_bytes());
        b
    }

    /// Checks the request against an export of `size` bytes: the errno to answer with when
    /// it cannot be served. (A WRITE refused here still has its data read off the wire.)
    pub fn check(&self, size: u64, read_only: bool) -> Result<(), u32> {
        let allowed = match self.command {
            Command::Write => CMD_FLAG_FUA,
            Command::WriteZeroes => CMD_FLAG_FUA | CMD_FLAG_NO_HOLE,
            Command::Trim => CMD_FLAG_FUA,
            _ => 0,
        };
        if self.flags & !allowed != 0 {
            return Err(errno::EINVAL);
        }
        let writes = matches!(
            self.command,
            Command::Write | Command::WriteZeroes | Command::Trim
        );
        if writes && read_only {
            return Err(errno::EPERM);
        }
        let past_end = self
            .offset
            .checked_add(u64::from(self.len))
            .is_none_or(|end| end > size);
        match self.command {
            Command::Other(_) => Err(errno::EINVAL),
            Command::Read | Command::Write if self.len > MAX_PAYLOAD => Err(errno::EINVAL),
            Command::Write | Command::WriteZeroes if past_end => Err(errno::ENOSPC),
            Command::Read | Command::Trim if past_end => Err(errno::EINVAL),
            _ => Ok(()),
        }
    }
}

/// A simple reply: the errno (0: done) and the request's cookie; a successful READ's data
/// follows it.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    b[4..8].copy_from_slice(&error.to_be_bytes());
    b[8..].copy_from_slice(&cookie.to_be_bytes());
    b
}

/// `bytes` as an array of `N` (callers pass slices of exactly `N` bytes).
fn be<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = bytes.len().min(N);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(command: Command, flags: u16, offset: u64, len: u32) -> Request {
        Request {
            flags,
            command,
            cookie: 0x1122_3344_5566_7788,
            offset,
            len,
        }
    }

    #[test]
    fn the_greeting_and_replies_are_the_documented_bytes() {
        let g = greeting();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
        assert_eq!(g[16..], [0, 3]);
        let r = simple_reply(errno::EIO, 7);
        assert_eq!(r[..8], [0x67, 0x44, 0x66, 0x98, 0, 0, 0, 5]);
        assert_eq!(r[8..], 7u64.to_be_bytes());
        let o = option_reply(opt::GO, rep::ACK, &[]);
        assert_eq!(o.len(), 20);
        assert_eq!(o[..8], REPLY_MAGIC.to_be_bytes());
        assert_eq!(export_name_reply(1 << 20, 1, false).len(), 134);
        assert_eq!(export_name_reply(1 << 20, 1, true).len(), 10);
    }

    #[test]
    fn client_flags_need_fixed_newstyle_and_nothing_unknown() {
        assert_eq!(client_flags([0, 0, 0, 1]), Ok(false));
        assert_eq!(client_flags([0, 0, 0, 3]), Ok(true));
        assert!(client_flags([0, 0, 0, 0]).is_err());
        assert!(client_flags([0, 0, 0, 5]).is_err());
        assert!(client_flags([0x80, 0, 0, 1]).is_err());
    }

    #[test]
    fn option_headers_are_bounded_before_their_data_is_read() {
        let mut h = [0u8; 16];
        h[..8].copy_from_slice(&IHAVEOPT.to_be_bytes());
        h[8..12].copy_from_slice(&opt::GO.to_be_bytes());
        h[12..].copy_from_slice(&10u32.to_be_bytes());
        assert_eq!(option_header(h), Ok((opt::GO, 10)));
        h[12..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            option_header(h),
            Err(ProtoError::OptionTooLarge { .. })
        ));
        h[0] = 0;
        assert!(matches!(option_header(h), Err(ProtoError::Magic { .. })));
    }

    #[test]
    fn info_names_are_read_only_from_well_formed_data() {
        // nbd-client's GO: the name, no info requests.
        let mut d = 3u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"vol");
        d.extend_from_slice(&0u16.to_be_bytes());
        assert_eq!(info_name(&d), Some(&b"vol"[..]));
        // One info request.
        let mut one = d.clone();
        one.truncate(one.len() - 2);
        one.extend_from_slice(&1u16.to_be_bytes());
        one.extend_from_slice(&info::BLOCK_SIZE.to_be_bytes());
        assert_eq!(info_name(&one), Some(&b"vol"[..]));
        // Lengths that lie.
        assert_eq!(info_name(&d[..5]), None);
        let mut long = d.clone();
        long[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(info_name(&long), None);
        let mut extra = d.clone();
        extra.push(0);
        assert_eq!(info_name(&extra), None);
    }

    #[test]
    fn requests_round_trip_and_are_checked_against_the_export() {
        let r = req(Command::Write, CMD_FLAG_FUA, 4096, 512);
        assert_eq!(Request::parse(r.encode()), Ok(r));
        let size = 1 << 20;
        assert_eq!(r.check(size, false), Ok(()));
        assert_eq!(r.check(size, true), Err(errno::EPERM));
        // Past the end: a write has no space, a read is invalid; wrapping offsets too.
        assert_eq!(
            req(Command::Write, 0, size - 256, 512).check(size, false),
            Err(errno::ENOSPC)
        );
        assert_eq!(
            req(Command::Read, 0, u64::MAX, 512).check(size, false),
            Err(errno::EINVAL)
        );
        assert_eq!(req(Command::Read, 0, 0, 512).check(size, true), Ok(()));
        // Unknown flags and commands, oversized payloads.
        assert_eq!(
            req(Command::Read, CMD_FLAG_FUA, 0, 512).check(size, false),
            Err(errno::EINVAL)
        );
        assert_eq!(
            req(Command::Other(9), 0, 0, 0).check(size, false),
            Err(errno::EINVAL)
        );
        assert_eq!(
            req(Command::Read, 0, 0, MAX_PAYLOAD + 1).check(u64::MAX, false),
            Err(errno::EINVAL)
        );
        // Zeroes and trims may be large; flush and disconnect carry no range.
        assert_eq!(
            req(Command::WriteZeroes, CMD_FLAG_NO_HOLE, 0, 1 << 30).check(1 << 31, false),
            Ok(())
        );
        assert_eq!(req(Command::Flush, 0, 0, 0).check(size, false), Ok(()));
        let mut bad = r.encode();
        bad[0] = 0;
        assert!(Request::parse(bad).is_err());
    }
}
