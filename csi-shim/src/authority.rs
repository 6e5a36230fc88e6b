//! Client `:authority` values that h2 refuses, mended on the way in.
//!
//! gRPC's C core (the Python, Ruby and C++ clients) sends the unix socket's path,
//! percent-encoded, as the `:authority` of every call (`tmp%2Fcsi.sock`). The `http` crate
//! under tonic allows percent-encoding only in userinfo, so h2 resets every such stream. The
//! authority of a node-local socket means nothing to the server, so each client header block
//! is decoded (HPACK, the client's dynamic table mirrored), an authority that does not parse
//! has every byte outside `[A-Za-z0-9.-]` turned into `-`, and the block is encoded again
//! with literals only, so the server's own dynamic table stays empty.
//!
//! Invariants:
//! - every byte other than a header block passes through unchanged and in order;
//! - a header block is held until END_HEADERS, at most [`MAX_BLOCK`] bytes encoded in at most
//!   [`MAX_BLOCK_FRAMES`] frames of at most [`MAX_FRAME`] each (empty CONTINUATION frames
//!   count too: h2 never sees the frames of a held block, so its own CONTINUATION flood guard
//!   cannot), and decodes to at most [`MAX_LIST`] (HPACK's indexed entries would otherwise
//!   let a few bytes expand to gigabytes before h2 could refuse them);
//! - input that is not HTTP/2 (no client preface) passes through untouched;
//! - malformed framing or HPACK, or a limit exceeded, is an error: what was rewritten before
//!   it is still handed on, then a CONTINUATION frame that opens no block (h2 answers it with
//!   GOAWAY and closes the connection, as its own guards do), then the connection fails.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The bytes every HTTP/2 client sends first (RFC 9113 section 3.4).
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The longest header block held for rewriting, as the client encoded it.
pub const MAX_BLOCK: usize = 64 << 10;
/// The largest header list a block may decode to (HPACK's size: name + value + 32 per
/// header); h2 refuses lists over 16 KiB by default anyway.
pub const MAX_LIST: usize = 64 << 10;
/// The most frames (HEADERS and CONTINUATION) one header block may take: a block of
/// [`MAX_BLOCK`] bytes needs 4 full frames; the rest is room for clients that split smaller.
pub const MAX_BLOCK_FRAMES: usize = 16;
/// The dynamic table a client may use: the 4096 bytes h2 advertises (its default), so size
/// updates beyond it are errors here as there.
const MAX_TABLE: usize = 4096;
/// The largest frame payload read or written: h2's SETTINGS_MAX_FRAME_SIZE (its default).
pub const MAX_FRAME: usize = 16_384;

const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// Why a client's byte stream could not be rewritten.
#[derive(Debug, thiserror::Error)]
pub enum MendError {
    /// A HEADERS frame's padding or priority does not fit in the frame.
    #[error("HEADERS frame of {len} bytes on stream {stream}: {what}")]
    Frame {
        /// The stream the frame is on.
        stream: u32,
        /// The frame's payload length.
        len: usize,
        /// What does not fit.
        what: &'static str,
    },
    /// A frame other than CONTINUATION of the same stream inside a header block.
    #[error("frame type {kind:#x} on stream {stream} inside the header block of stream {open}")]
    Interleaved {
        /// The frame's type.
        kind: u8,
        /// The frame's stream.
        stream: u32,
        /// The stream whose header block is open.
        open: u32,
    },
    /// A header block in more than [`MAX_BLOCK_FRAMES`] frames.
    #[error("header block on stream {stream} exceeds {MAX_BLOCK_FRAMES} frames")]
    TooManyFrames {
        /// The stream of the block.
        stream: u32,
    },
    /// A header block larger than [`MAX_BLOCK`].
    #[error("header block on stream {stream} exceeds {MAX_BLOCK} bytes")]
    TooLarge {
        /// The stream of the block.
        stream: u32,
    },
    /// A HEADERS or CONTINUATION frame larger than [`MAX_FRAME`].
    #[error("header frame of {len} bytes on stream {stream} exceeds {MAX_FRAME}")]
    FrameTooLarge {
        /// The stream of the frame.
        stream: u32,
        /// Its payload length.
        len: usize,
    },
    /// A header block that decodes to a list larger than [`MAX_LIST`].
    #[error("header block on stream {stream} decodes to more than {MAX_LIST} bytes")]
    ListTooLarge {
        /// The stream of the block.
        stream: u32,
    },
    /// The block is not valid HPACK.
    #[error("header block on stream {stream}: {source}")]
    Hpack {
        /// The stream of the block.
        stream: u32,
        /// The decoder's complaint.
        source: loona_hpack::decoder::DecoderError,
    },
}

/// Where the rewriter is in the client's byte stream.
enum Stage {
    /// Matching the client preface; holds how many bytes matched.
    Preface(usize),
    /// Not HTTP/2: everything passes through.
    Raw,
    /// Reading a frame header (9 bytes).
    Head,
    /// Passing through this many more payload bytes of a frame that is not a header block.
    Skip(usize),
    /// Reading the payload of a HEADERS or CONTINUATION frame.
    Block {
        /// The frame's 9-byte header.
        head: [u8; 9],
        /// How many payload bytes are still to come.
        left: usize,
    },
}

/// A header block being gathered across HEADERS and CONTINUATION frames.
struct Open {
    stream: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    fragment: Vec<u8>,
    /// The frames the block has taken so far.
    frames: usize,
}

/// The pure part: client bytes in, the same bytes with header blocks re-encoded out.
pub struct Rewriter {
    stage: Stage,
    head: Vec<u8>,
    payload: Vec<u8>,
    open: Option<Open>,
    decoder: loona_hpack::Decoder<'static>,
}

impl Default for Rewriter {
    fn default() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(MAX_TABLE);
        Rewriter {
            stage: Stage::Preface(0),
            head: Vec::with_capacity(9),
            payload: Vec::new(),
            open: None,
            decoder,
        }
    }
}

impl Rewriter {
    /// Consumes `input`, appending what the server should read to `out`.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<(), MendError> {
        while !input.is_empty() {
            match &mut self.stage {
                Stage::Preface(n) => {
                    let take = (PREFACE.len() - *n).min(input.len());
                    // Held until whole: a mismatch hands on what matched, then everything.
                    if input[..take] != PREFACE[*n..*n + take] {
                        out.extend_from_slice(&PREFACE[..*n]);
                        self.stage = Stage::Raw;
                        continue;
                    }
                    *n += take;
                    input = &input[take..];
                    if *n == PREFACE.len() {
                        out.extend_from_slice(PREFACE);
                        self.stage = Stage::Head;
                    }
                }
                Stage::Raw => {
                    out.extend_from_slice(input);
                    input = &[];
                }
                Stage::Head => {
                    let take = (9 - self.head.len()).min(input.len());
                    self.head.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    if self.head.len() == 9 {
                        self.frame_head(out)?;
                    }
                }
                Stage::Skip(left) => {
                    let take = (*left).min(input.len());
                    out.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    *left -= take;
                    if *left == 0 {
                        self.stage = Stage::Head;
                    }
                }
                Stage::Block { head, left } => {
                    let take = (*left).min(input.len());
                    self.payload.extend_from_slice(&input[..take]);
                    input = &input[take..];
                    *left -= take;
                    if *left == 0 {
                        let head = *head;
                        self.stage = Stage::Head;
                        self.block_frame(head, out)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// A whole frame header has arrived: pass the frame on or start gathering its payload.
    fn frame_head(&mut self, out: &mut Vec<u8>) -> Result<(), MendError> {
        let mut head = [0u8; 9];
        head.copy_from_slice(&self.head);
        self.head.clear();
        let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let kind = head[3];
        let stream = stream_of(&head);
        if let Some(open) = &mut self.open {
            if kind != CONTINUATION || stream != open.stream {
                return Err(MendError::Interleaved {
                    kind,
                    stream,
                    open: open.stream,
                });
            }
            open.frames += 1;
            if open.frames > MAX_BLOCK_FRAMES {
                return Err(MendError::TooManyFrames { stream });
            }
        }
        if kind == HEADERS || kind == CONTINUATION {
            if len > MAX_FRAME {
                return Err(MendError::FrameTooLarge { stream, len });
            }
            if self.open.as_ref().map_or(0, |o| o.fragment.len()) + len > MAX_BLOCK {
                return Err(MendError::TooLarge { stream });
            }
            self.payload.clear();
            self.stage = Stage::Block { head, left: len };
            if len == 0 {
                self.stage = Stage::Head;
                self.block_frame(head, out)?;
            }
        } else {
            out.extend_from_slice(&head);
            if len > 0 {
                self.stage = Stage::Skip(len);
            }
        }
        Ok(())
    }

    /// A HEADERS or CONTINUATION frame's payload is in `self.payload`.
    fn block_frame(&mut self, head: [u8; 9], out: &mut Vec<u8>) -> Result<(), MendError> {
        let flags = head[4];
        let stream = stream_of(&head);
        let mut fragment = &self.payload[..];
        if head[3] == HEADERS {
            let bad = |what| MendError::Frame {
                stream,
                len: self.payload.len(),
                what,
            };
            if flags & PADDED != 0 {
                let (&pad, rest) = fragment.split_first().ok_or_else(|| bad("no pad length"))?;
                let keep = rest
                    .len()
                    .checked_sub(usize::from(pad))
                    .ok_or_else(|| bad("padding longer than the frame"))?;
                fragment = &rest[..keep];
            }
            let priority = if flags & PRIORITY != 0 {
                let (p, rest) = fragment
                    .split_first_chunk::<5>()
                    .ok_or_else(|| bad("no room for the priority"))?;
                fragment = rest;
                Some(*p)
            } else {
                None
            };
            self.open = Some(Open {
                stream,
                end_stream: flags & END_STREAM != 0,
                priority,
                fragment: Vec::new(),
                frames: 1,
            });
        }
        let Some(open) = self.open.as_mut() else {
            // A CONTINUATION with no open block: h2 answers it with a protocol error.
            out.extend_from_slice(&head);
            out.extend_from_slice(fragment);
            return Ok(());
        };
        open.fragment.extend_from_slice(fragment);
        if flags & END_HEADERS != 0 {
            if let Some(open) = self.open.take() {
                let block = self.reencode(&open)?;
                write_block(&open, &block, out);
            }
        }
        Ok(())
    }

    /// Decodes a whole header block and encodes it again, authority mended, literals only.
    fn reencode(&mut self, open: &Open) -> Result<Vec<u8>, MendError> {
        let mut block = Vec::with_capacity(open.fragment.len() + 64);
        let mut list = 0usize;
        self.decoder
            .decode_with_cb(&open.fragment, |name, value| {
                // Counted before anything is copied; past the limit nothing more is.
                list = list.saturating_add(name.len() + value.len() + 32);
                if list > MAX_LIST {
                    return;
                }
                let value = if &*name == b":authority" {
                    mend(&value)
                } else {
                    value
                };
                literal(&name, &value, &mut block);
            })
            .map_err(|source| MendError::Hpack {
                stream: open.stream,
                source,
            })?;
        if list > MAX_LIST {
            return Err(MendError::ListTooLarge {
                stream: open.stream,
            });
        }
        Ok(block)
    }
}

/// The stream id of a frame header (the reserved bit dropped).
fn stream_of(head: &[u8; 9]) -> u32 {
    u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff
}

/// `value` if it parses as an authority, else the same length with every byte outside
/// `[A-Za-z0-9.-]` turned into `-`.
fn mend(value: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if value.is_empty() || tonic::codegen::http::uri::Authority::try_from(value).is_ok() {
        return value.into();
    }
    value
        .iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-' => b,
            _ => b'-',
        })
        .collect::<Vec<u8>>()
        .into()
}

/// One header as an HPACK literal without indexing, with a literal name (RFC 7541 6.2.2).
fn literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    for s in [name, value] {
        string_length(s.len(), out);
        out.extend_from_slice(s);
    }
}

/// An HPACK string length: a 7-bit prefix integer with the Huffman bit clear (RFC 7541 5.1).
fn string_length(mut n: usize, out: &mut Vec<u8>) {
    if n < 127 {
        out.push(n as u8);
        return;
    }
    out.push(127);
    n -= 127;
    while n >= 128 {
        out.push((n % 128) as u8 | 0x80);
        n /= 128;
    }
    out.push(n as u8);
}

/// The re-encoded block as a HEADERS frame and as many CONTINUATION frames as it needs.
fn write_block(open: &Open, block: &[u8], out: &mut Vec<u8>) {
    let prio = open.priority.as_ref().map_or(&[][..], |p| &p[..]);
    let first = block.len().min(MAX_FRAME - prio.len());
    let mut flags = if open.end_stream { END_STREAM } else { 0 };
    if open.priority.is_some() {
        flags |= PRIORITY;
    }
    let mut rest = &block[first..];
    if rest.is_empty() {
        flags |= END_HEADERS;
    }
    frame_head(prio.len() + first, HEADERS, flags, open.stream, out);
    out.extend_from_slice(prio);
    out.extend_from_slice(&block[..first]);
    while !rest.is_empty() {
        let n = rest.len().min(MAX_FRAME);
        let flags = if n == rest.len() { END_HEADERS } else { 0 };
        frame_head(n, CONTINUATION, flags, open.stream, out);
        out.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
    }
}

/// What follows the last good bytes of a connection the rewriter gave up on: a CONTINUATION
/// frame on stream 1 while h2 has no header block open (the rewriter hands on whole blocks
/// only), which h2 must answer with GOAWAY (PROTOCOL_ERROR) before it closes.
const REFUSED: [u8; 9] = [0, 0, 0, CONTINUATION, END_HEADERS, 0, 0, 0, 1];

/// A 9-byte frame header; `len` is at most [`MAX_FRAME`].
fn frame_head(len: usize, kind: u8, flags: u8, stream: u32, out: &mut Vec<u8>) {
    out.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
}

/// A server-side connection whose client header blocks pass through a [`Rewriter`].
pub struct Mended<S> {
    inner: S,
    rewriter: Rewriter,
    out: Vec<u8>,
    pos: usize,
    raw: Box<[u8; 8192]>,
    /// Why the rewriter gave up: every read after the rewritten bytes fails with it.
    failed: Option<String>,
}

impl<S> Mended<S> {
    /// Wraps an accepted connection.
    pub fn new(inner: S) -> Self {
        Mended {
            inner,
            rewriter: Rewriter::default(),
            out: Vec::new(),
            pos: 0,
            raw: Box::new([0; 8192]),
            failed: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Mended<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.pos < me.out.len() {
                let n = (me.out.len() - me.pos).min(buf.remaining());
                buf.put_slice(&me.out[me.pos..me.pos + n]);
                me.pos += n;
                if me.pos == me.out.len() {
                    me.out.clear();
                    me.pos = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if let Some(why) = &me.failed {
                let e = std::io::Error::new(std::io::ErrorKind::InvalidData, why.clone());
                return Poll::Ready(Err(e));
            }
            let mut raw = ReadBuf::new(&mut me.raw[..]);
            ready!(Pin::new(&mut me.inner).poll_read(cx, &mut raw))?;
            if raw.filled().is_empty() {
                return Poll::Ready(Ok(()));
            }
            // What was rewritten before an error is still handed on (h2 may answer it), then
            // a frame that makes h2 send GOAWAY and close.
            if let Err(e) = me.rewriter.feed(raw.filled(), &mut me.out) {
                tracing::warn!(error = %e, "closing a client connection");
                me.out.extend_from_slice(&REFUSED);
                me.failed = Some(e.to_string());
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Mended<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A client's HEADERS frame with `block`, padded and with a priority.
    fn headers_frame(stream: u32, block: &[u8], flags: u8) -> Vec<u8> {
        let mut out = Vec::new();
        let mut payload = vec![2u8];
        payload.extend_from_slice(&[0, 0, 0, 0, 15]);
        payload.extend_from_slice(block);
        payload.extend_from_slice(&[0, 0]);
        frame_head(
            payload.len(),
            HEADERS,
            flags | PADDED | PRIORITY,
            stream,
            &mut out,
        );
        out.extend_from_slice(&payload);
        out
    }

    type Headers = Vec<(Vec<u8>, Vec<u8>)>;
    /// A header block as the server sees it: stream, HEADERS flags, headers.
    type Block = (u32, u8, Headers);

    /// What a server decoding `wire` (preface included) sees: (stream, HEADERS flags but
    /// END_HEADERS, headers) per header block, and the other frames' bytes.
    fn server_view(wire: &[u8]) -> (Vec<Block>, Vec<u8>) {
        assert_eq!(&wire[..24], PREFACE);
        let mut rest = &wire[24..];
        let mut decoder = loona_hpack::Decoder::new();
        let (mut blocks, mut other) = (Vec::new(), Vec::new());
        let mut pending: Option<(u32, u8, Vec<u8>)> = None;
        while !rest.is_empty() {
            let len = usize::from(rest[0]) << 16 | usize::from(rest[1]) << 8 | usize::from(rest[2]);
            let (kind, flags) = (rest[3], rest[4]);
            let stream = stream_of(rest[..9].try_into().expect("head"));
            let payload = &rest[9..9 + len];
            assert!(len <= MAX_FRAME);
            match kind {
                HEADERS => {
                    assert_eq!(flags & PADDED, 0, "padding is dropped");
                    let skip = if flags & PRIORITY != 0 { 5 } else { 0 };
                    pending = Some((stream, flags, payload[skip..].to_vec()));
                }
                CONTINUATION => pending.as_mut().expect("open").2.extend_from_slice(payload),
                _ => other.extend_from_slice(&rest[..9 + len]),
            }
            if matches!(kind, HEADERS | CONTINUATION) && flags & END_HEADERS != 0 {
                let (s, f, b) = pending.take().expect("block");
                let f = f & !END_HEADERS;
                blocks.push((s, f, decoder.decode(&b).expect("valid HPACK")));
            }
            rest = &rest[9 + len..];
        }
        (blocks, other)
    }

    fn grpc_headers(authority: &str) -> Headers {
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", "/csi.v1.Identity/Probe"),
            (":authority", authority),
            ("te", "trailers"),
            ("content-type", "application/grpc"),
        ]
        .iter()
        .map(|(n, v)| (n.as_bytes().to_vec(), v.as_bytes().to_vec()))
        .collect()
    }

    #[test]
    fn a_percent_encoded_authority_is_mended_and_the_rest_kept() {
        // As gRPC's C core does: the authority is a literal added to the client's dynamic
        // table (name index 1), and the second request refers to that entry (index 63: `te`,
        // added after it by the encoder of the other headers, is 62).
        let authority = b"tmp%2Fcsock%2Fcsi.sock";
        let rest = grpc_headers("")
            .into_iter()
            .filter(|(n, _)| n != b":authority")
            .collect::<Vec<_>>();
        let others = loona_hpack::Encoder::new().encode(rest.iter().map(|(n, v)| (&n[..], &v[..])));
        let mut first = vec![0x41, authority.len() as u8];
        first.extend_from_slice(authority);
        first.extend_from_slice(&others);
        let mut second = vec![0xbf];
        second.extend_from_slice(&others);

        let mut wire = PREFACE.to_vec();
        let settings = [0u8, 0, 6, 4, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 100];
        wire.extend_from_slice(&settings);
        wire.extend_from_slice(&headers_frame(1, &first, END_HEADERS));
        let data = [0u8, 0, 5, 0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0];
        wire.extend_from_slice(&data);
        // The second block split across a CONTINUATION frame.
        frame_head(2, HEADERS, 0, 3, &mut wire);
        wire.extend_from_slice(&second[..2]);
        frame_head(second.len() - 2, CONTINUATION, END_HEADERS, 3, &mut wire);
        wire.extend_from_slice(&second[2..]);

        let mut mended = Vec::new();
        let mut r = Rewriter::default();
        for chunk in wire.chunks(7) {
            r.feed(chunk, &mut mended).expect("rewrite");
        }
        let (blocks, other) = server_view(&mended);
        let mut other_in = settings.to_vec();
        other_in.extend_from_slice(&data);
        assert_eq!(other, other_in);
        let mut want = vec![(b":authority".to_vec(), b"tmp-2Fcsock-2Fcsi.sock".to_vec())];
        want.extend(rest);
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0], (1, PRIORITY, want.clone()));
        assert_eq!(blocks[1], (3, 0, want));
    }

    #[test]
    fn valid_authorities_and_empty_values_are_kept() {
        for a in ["localhost", "localhost:50051", "[::1]:80", ""] {
            assert_eq!(&*mend(a.as_bytes()), a.as_bytes());
        }
        assert_eq!(&*mend(b"unix:/x y"), b"unix--x-y");
    }

    #[test]
    fn large_blocks_leave_in_continuation_frames() {
        let mut h = grpc_headers("a%b");
        h.push((b"x-big".to_vec(), vec![b'v'; 40_000]));
        let block = loona_hpack::Encoder::new().encode(h.iter().map(|(n, v)| (&n[..], &v[..])));
        // The client splits it too: a HEADERS frame, then CONTINUATION frames.
        let mut wire = PREFACE.to_vec();
        let (first, rest) = block.split_at(10_000);
        wire.extend_from_slice(&headers_frame(5, first, END_STREAM));
        for (i, part) in rest.chunks(MAX_FRAME).enumerate() {
            let last = (i + 1) * MAX_FRAME >= rest.len();
            let flags = if last { END_HEADERS } else { 0 };
            frame_head(part.len(), CONTINUATION, flags, 5, &mut wire);
            wire.extend_from_slice(part);
        }
        let mut out = Vec::new();
        Rewriter::default().feed(&wire, &mut out).expect("rewrite");
        let (blocks, _) = server_view(&out);
        h[3].1 = b"a-b".to_vec();
        assert!(
            blocks == vec![(5, END_STREAM | PRIORITY, h)],
            "blocks differ"
        );
    }

    #[test]
    fn not_http2_passes_through() {
        let mut out = Vec::new();
        let mut r = Rewriter::default();
        r.feed(b"PRI * HTTP/1.1\r\n", &mut out).expect("raw");
        r.feed(b"more", &mut out).expect("raw");
        assert_eq!(out, b"PRI * HTTP/1.1\r\nmore");
        // A preface that stops matching after a read: every byte once.
        let mut out = Vec::new();
        let mut r = Rewriter::default();
        r.feed(b"PRI * HTTP/", &mut out).expect("partial");
        assert!(out.is_empty(), "held until it matches or not");
        r.feed(b"1.1\r\n", &mut out).expect("raw");
        assert_eq!(out, b"PRI * HTTP/1.1\r\n");
    }

    #[test]
    fn an_hpack_bomb_is_refused_before_it_expands() {
        // One 4000-byte entry in the client's table, then 16,000 one-byte references to it:
        // 16 KiB on the wire, 64 MB as literals.
        let mut block = vec![0x40, 0x01, b'x', 0x7f];
        let mut n = 4000 - 127;
        while n >= 128 {
            block.push((n % 128) as u8 | 0x80);
            n /= 128;
        }
        block.push(n as u8);
        block.extend(std::iter::repeat_n(b'v', 4000));
        block.extend(std::iter::repeat_n(0xbe, MAX_FRAME - block.len()));
        let mut wire = PREFACE.to_vec();
        frame_head(block.len(), HEADERS, END_HEADERS, 1, &mut wire);
        wire.extend_from_slice(&block);
        let mut out = Vec::new();
        let err = Rewriter::default().feed(&wire, &mut out);
        assert!(
            matches!(err, Err(MendError::ListTooLarge { stream: 1 })),
            "{err:?}"
        );
        assert!(
            out.len() <= PREFACE.len(),
            "nothing of the block was handed on"
        );
        // A frame larger than h2 takes is refused as h2 refuses it.
        let mut wire = PREFACE.to_vec();
        frame_head(MAX_FRAME + 1, HEADERS, END_HEADERS, 3, &mut wire);
        let err = Rewriter::default().feed(&wire, &mut Vec::new());
        assert!(
            matches!(err, Err(MendError::FrameTooLarge { stream: 3, .. })),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn what_came_before_an_error_is_handed_on() {
        use tokio::io::AsyncReadExt;
        let mut wire = PREFACE.to_vec();
        let settings = [0u8, 0, 0, 4, 0, 0, 0, 0, 0];
        wire.extend_from_slice(&settings);
        frame_head(1, HEADERS, END_HEADERS, 1, &mut wire);
        wire.push(0xff);
        let mut m = Mended::new(&wire[..]);
        let mut got = Vec::new();
        let r = m.read_to_end(&mut got).await;
        assert_eq!(
            r.expect_err("bad HPACK").kind(),
            std::io::ErrorKind::InvalidData
        );
        let mut want = PREFACE.to_vec();
        want.extend_from_slice(&settings);
        want.extend_from_slice(&REFUSED);
        assert_eq!(got, want);
    }

    #[test]
    fn an_empty_continuation_flood_is_refused() {
        let mut wire = PREFACE.to_vec();
        frame_head(1, HEADERS, 0, 1, &mut wire);
        wire.push(0x82);
        for _ in 0..MAX_BLOCK_FRAMES - 1 {
            frame_head(0, CONTINUATION, 0, 1, &mut wire);
        }
        let mut r = Rewriter::default();
        let mut out = Vec::new();
        r.feed(&wire, &mut out)
            .expect("as many frames as a block may take");
        let mut more = Vec::new();
        frame_head(0, CONTINUATION, 0, 1, &mut more);
        let err = r.feed(&more, &mut out);
        assert!(
            matches!(err, Err(MendError::TooManyFrames { stream: 1 })),
            "{err:?}"
        );
        assert_eq!(out, PREFACE, "nothing of the block was handed on");
    }

    #[test]
    fn malformed_framing_is_an_error() {
        let mut wire = PREFACE.to_vec();
        frame_head(3, HEADERS, PADDED | END_HEADERS, 1, &mut wire);
        wire.extend_from_slice(&[9, 0, 0]);
        let err = Rewriter::default().feed(&wire, &mut Vec::new());
        assert!(
            matches!(err, Err(MendError::Frame { stream: 1, .. })),
            "{err:?}"
        );
        let mut wire = PREFACE.to_vec();
        frame_head(1, HEADERS, 0, 1, &mut wire);
        wire.push(0x82);
        frame_head(0, 0x4, 0, 0, &mut wire);
        let err = Rewriter::default().feed(&wire, &mut Vec::new());
        assert!(
            matches!(err, Err(MendError::Interleaved { open: 1, .. })),
            "{err:?}"
        );
        let mut wire = PREFACE.to_vec();
        frame_head(1, HEADERS, END_HEADERS, 1, &mut wire);
        wire.push(0xff);
        let err = Rewriter::default().feed(&wire, &mut Vec::new());
        assert!(
            matches!(err, Err(MendError::Hpack { stream: 1, .. })),
            "{err:?}"
        );
    }

    proptest! {
        /// Any bytes after the preface: no panic, and the output never depends on how the
        /// input was split.
        #[test]
        fn hostile_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..600),
                                     cut in 0usize..600) {
            let mut wire = PREFACE.to_vec();
            wire.extend_from_slice(&body);
            let (mut whole, mut split) = (Vec::new(), Vec::new());
            let a = Rewriter::default().feed(&wire, &mut whole);
            let mut r = Rewriter::default();
            let cut = cut.min(wire.len());
            let b = r.feed(&wire[..cut], &mut split).and_then(|()| r.feed(&wire[cut..], &mut split));
            prop_assert_eq!(a.is_ok(), b.is_ok());
            if a.is_ok() {
                prop_assert_eq!(whole, split);
            }
        }
    }
}
