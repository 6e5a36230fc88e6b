//! HTTP/2 written by hand: frames as a hostile client sends them, and a reader that sees
//! what the server answers and when it closes.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt};

/// The client connection preface.
pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const HEADERS: u8 = 0x1;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const CONTINUATION: u8 = 0x9;
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// One frame: its 9-byte header, then `payload`.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A frame header announcing `len` payload bytes (for frames larger than sent).
pub fn head(kind: u8, flags: u8, stream: u32, len: usize) -> Vec<u8> {
    let mut out = (len as u32).to_be_bytes()[1..].to_vec();
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out
}

/// The preface and an empty SETTINGS frame: what every client sends first.
pub fn hello() -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    out
}

/// The header block of a gRPC call of `path` (HPACK, as a client encodes it), with `extra`
/// headers after the usual ones.
pub fn call_block(path: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let mut headers = vec![
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ];
    headers.extend_from_slice(extra);
    loona_hpack::Encoder::new().encode(headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
}

/// A frame the server sent.
#[derive(Debug)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// The next frame from `r`; `None` at the end of the connection (or an error reading it).
pub async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> Option<Frame> {
    let mut h = [0u8; 9];
    r.read_exact(&mut h).await.ok()?;
    let len = usize::from(h[0]) << 16 | usize::from(h[1]) << 8 | usize::from(h[2]);
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: h[3],
        flags: h[4],
        stream: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// What a connection's reader saw until the server closed it.
#[derive(Debug, Default)]
pub struct Seen {
    /// When the server closed the connection (since the reader started); `None` if it did
    /// not within the reader's limit.
    pub closed_after: Option<Duration>,
    /// The GOAWAY frames' error codes.
    pub goaways: Vec<u32>,
    /// How many RST_STREAM frames came.
    pub resets: usize,
    /// How many frames came in all.
    pub frames: usize,
}

/// Reads and counts frames until the server closes the connection or `limit` passes.
pub async fn watch(mut r: impl AsyncRead + Unpin, limit: Duration) -> Seen {
    let start = Instant::now();
    let mut seen = Seen::default();
    loop {
        let left = limit.saturating_sub(start.elapsed());
        match tokio::time::timeout(left, read_frame(&mut r)).await {
            Err(_) => return seen,
            Ok(None) => {
                seen.closed_after = Some(start.elapsed());
                return seen;
            }
            Ok(Some(f)) => {
                seen.frames += 1;
                match f.kind {
                    GOAWAY if f.payload.len() >= 8 => seen.goaways.push(u32::from_be_bytes([
                        f.payload[4],
                        f.payload[5],
                        f.payload[6],
                        f.payload[7],
                    ])),
                    0x3 => seen.resets += 1,
                    _ => {}
                }
            }
        }
    }
}

/// Like [`watch`], but answering the server's SETTINGS and PINGs as a live client does:
/// when the server sent its first GOAWAY and when it closed (since the start).
pub async fn live(
    stream: tokio::net::UnixStream,
    limit: Duration,
) -> (Option<Duration>, Option<Duration>) {
    use tokio::io::AsyncWriteExt;
    let start = Instant::now();
    let (mut r, mut w) = stream.into_split();
    let mut goaway = None;
    loop {
        let left = limit.saturating_sub(start.elapsed());
        let f = match tokio::time::timeout(left, read_frame(&mut r)).await {
            Err(_) => return (goaway, None),
            Ok(None) => return (goaway, Some(start.elapsed())),
            Ok(Some(f)) => f,
        };
        let answer = match f.kind {
            SETTINGS if f.flags & ACK == 0 => Some(frame(SETTINGS, ACK, 0, &[])),
            PING if f.flags & ACK == 0 => Some(frame(PING, ACK, 0, &f.payload)),
            GOAWAY => {
                goaway.get_or_insert(start.elapsed());
                None
            }
            _ => None,
        };
        if let Some(a) = answer {
            let _ = w.write_all(&a).await;
        }
    }
}

/// The first response header block the server sends on `stream`, decoded; `None` if the
/// connection ends or `limit` passes first.
pub async fn response_headers(
    mut r: impl AsyncRead + Unpin,
    stream: u32,
    limit: Duration,
) -> Option<Vec<(String, String)>> {
    let read = async {
        loop {
            let f = read_frame(&mut r).await?;
            if f.kind == HEADERS && f.stream == stream {
                let decoded = loona_hpack::Decoder::new().decode(&f.payload).ok()?;
                return Some(
                    decoded
                        .into_iter()
                        .map(|(n, v)| {
                            (
                                String::from_utf8_lossy(&n).into_owned(),
                                String::from_utf8_lossy(&v).into_owned(),
                            )
                        })
                        .collect(),
                );
            }
        }
    };
    tokio::time::timeout(limit, read).await.ok().flatten()
}
