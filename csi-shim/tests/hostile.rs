//! A hostile local client against the real `csi-shim` binary (a local VG on an image file, no
//! root needed): raw HTTP/2 written by hand over the unix socket (thousands of half-open
//! streams, CONTINUATION floods, oversized and garbage frames), floods of connections,
//! descriptor exhaustion (util-linux's `prlimit` on the running process), a flood of idle
//! and keep-alive metrics connections, and oversized fields through a real tonic client.
//! Throughout, a prober calls Probe and a sampler reads the process's resident memory.
//!
//! Bounds asserted (csi_shim::connections and docs/csi.md, "Limits and timeouts"):
//! - resident memory under [`RSS_BOUND`], during and after the floods: a debug build's own
//!   ~20 MB, at most 32 connections x (256 KiB of flow-control window, 64 streams of ~9 KB,
//!   ~100 KB of header-block rewriting) ~ 30 MB, and the 32 MiB request budget held once
//!   raw and once decoded ~ 64 MB;
//! - every Probe answered within [`PROBE_BOUND`];
//! - a CONTINUATION flood's connection closed within [`CLOSE_BOUND`], after a GOAWAY;
//! - a metrics scrape answered within [`SCRAPE_BOUND`] under 64 idle and 16 keep-alive
//!   connections;
//! - after descriptors ran out, the process is alive, its socket there, and it serves again.
//!
//! The timeouts (keepalive, idle, request) are checked in-process with short values.

mod common;
#[path = "hostile/raw.rs"]
mod raw;
#[path = "hostile/shim.rs"]
mod shim;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::*;
use raw::*;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tonic::Code;

const RSS_BOUND: u64 = 150 << 20;
const PROBE_BOUND: Duration = Duration::from_secs(1);
const CLOSE_BOUND: Duration = Duration::from_secs(2);
const SCRAPE_BOUND: Duration = Duration::from_secs(2);

/// One raw connection that sends `hello` and then `flood` (in chunks, until the server
/// stops reading or closes), and what it saw within `limit`.
async fn attack(socket: std::path::PathBuf, flood: Vec<u8>, limit: Duration) -> Seen {
    let stream = UnixStream::connect(socket).await.expect("connect");
    let (r, mut w) = stream.into_split();
    let watcher = tokio::spawn(watch(r, limit));
    let writer = tokio::spawn(async move {
        let mut wire = hello();
        wire.extend(flood);
        for chunk in wire.chunks(64 << 10) {
            let sent = tokio::time::timeout(limit, w.write_all(chunk)).await;
            if !matches!(sent, Ok(Ok(()))) {
                break;
            }
        }
        // Held open (never closed by the client) until the watcher is done.
        w
    });
    let seen = watcher.await.expect("watcher");
    writer.abort();
    seen
}

/// `n` HEADERS frames opening streams 1, 3, 5... that never send their body.
fn half_open_streams(n: u32) -> Vec<u8> {
    let block = call_block("/csi.v1.Identity/Probe", &[]);
    (0..n)
        .flat_map(|i| frame(HEADERS, END_HEADERS, 2 * i + 1, &block))
        .collect()
}

/// A header block that never ends: HEADERS, then `n` empty CONTINUATION frames.
fn continuation_flood(n: usize) -> Vec<u8> {
    let block = call_block("/csi.v1.Identity/Probe", &[]);
    let mut out = frame(HEADERS, 0, 1, &block);
    let empty = frame(CONTINUATION, 0, 1, &[]);
    for _ in 0..n {
        out.extend_from_slice(&empty);
    }
    out
}

/// A blocking HTTP/1.1 GET of /metrics on a new connection; the time to the whole answer.
fn scrape(addr: std::net::SocketAddr) -> Duration {
    let started = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).expect("connect metrics");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    assert!(out.starts_with("HTTP/1.1 200 "), "{out}");
    started.elapsed()
}

/// The summary line of a run, straight to stderr (the harness does not capture it).
fn report(line: &str) {
    let _ = writeln!(std::io::stderr(), "hostile: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_local_client_neither_stops_nor_bloats_the_driver() {
    let mut shim = shim::Shim::start();
    let pid = shim.pid();
    let rss = shim::RssPeak::start(pid);
    let prober = shim::Prober::start(&shim.socket).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        prober.failed(),
        0,
        "Probe fails at rest: {}",
        shim.log_text()
    );
    let at_rest = shim::rss(pid);

    // Half-open streams, held: 30 connections x 64 HEADERS without a body (as many as a
    // connection may open), for 2 s.
    let held = (0..30).map(|_| {
        attack(
            shim.socket.clone(),
            half_open_streams(64),
            Duration::from_secs(2),
        )
    });
    for s in futures_join(held).await {
        assert!(
            s.closed_after.is_none(),
            "a connection within the limits was closed: {s:?}"
        );
    }
    let with_streams = shim::rss(pid);
    // Half-open streams beyond the limit: 3 connections x 20,000 (each ~9 KB once accepted).
    // The streams over 64 are refused, and h2 ends a connection after 1,024 refusals.
    let floods = (0..3).map(|_| {
        attack(
            shim.socket.clone(),
            half_open_streams(20_000),
            Duration::from_secs(4),
        )
    });
    for s in futures_join(floods).await {
        assert!(
            s.resets >= 1000,
            "streams over the limit are refused: {s:?}"
        );
    }

    // CONTINUATION floods: closed after a GOAWAY within CLOSE_BOUND.
    let floods = (0..4).map(|_| {
        attack(
            shim.socket.clone(),
            continuation_flood(200_000),
            Duration::from_secs(10),
        )
    });
    for s in futures_join(floods).await {
        let closed = s
            .closed_after
            .expect("a CONTINUATION flood's connection is closed");
        assert!(closed < CLOSE_BOUND, "closed after {closed:?}");
        assert!(!s.goaways.is_empty(), "no GOAWAY before the close: {s:?}");
    }

    // Oversized and garbage frames: each connection closed, the server unmoved.
    let big_list = call_block("/csi.v1.Identity/Probe", &[("x-big", &"v".repeat(40_000))]);
    let mut too_many = frame(HEADERS, 0, 1, &big_list[..16_000]);
    for part in big_list[16_000..].chunks(16_000) {
        too_many.extend(frame(CONTINUATION, 0, 1, part));
    }
    too_many.extend(frame(CONTINUATION, END_HEADERS, 1, &[0u8; 16_000]));
    too_many.extend(frame(CONTINUATION, END_HEADERS, 1, &[0u8; 16_000]));
    let garbage: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let cases = vec![
        head(HEADERS, END_HEADERS, 1, 1 << 20),
        too_many,
        frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0xff; 100]),
        garbage.clone(),
    ];
    let attacks = cases
        .into_iter()
        .map(|c| attack(shim.socket.clone(), c, Duration::from_secs(5)));
    for (i, s) in futures_join(attacks).await.into_iter().enumerate() {
        assert!(
            s.closed_after.is_some() || !s.goaways.is_empty(),
            "case {i}: {s:?}"
        );
    }
    // Not HTTP/2 at all.
    let mut plain = UnixStream::connect(&shim.socket).await.expect("connect");
    let _ = plain.write_all(&garbage).await;
    let seen = watch(plain, Duration::from_secs(5)).await;
    assert!(
        seen.closed_after.is_some(),
        "garbage without a preface: {seen:?}"
    );

    // A flood of connections: 300 opened as fast as possible, each idle after its hello and
    // never answering. The server keeps 32 (those it made room with are gone at once).
    let fds = shim.open_fds();
    let mut held = Vec::new();
    for _ in 0..300 {
        if let Ok(mut s) = UnixStream::connect(&shim.socket).await {
            let _ = s.write_all(&hello()).await;
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let during = shim.open_fds();
    assert!(
        during <= fds + 32 + 2,
        "{during} descriptors open with 300 connections (from {fds})"
    );
    drop(held);

    // The metrics endpoint under 64 idle and 16 keep-alive connections.
    let addr = shim.metrics;
    let scraped = tokio::task::spawn_blocking(move || {
        let mut hostile = Vec::new();
        for _ in 0..64 {
            hostile.push(std::net::TcpStream::connect(addr).expect("idle connection"));
        }
        for _ in 0..16 {
            let mut s = std::net::TcpStream::connect(addr).expect("keep-alive connection");
            let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            let mut buf = [0u8; 4096];
            s.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            let _ = s.read(&mut buf);
            hostile.push(s);
        }
        let took = scrape(addr);
        drop(hostile);
        took
    })
    .await
    .expect("scrape");
    assert!(scraped < SCRAPE_BOUND, "a scrape took {scraped:?}");

    // Oversized fields through a real client: INVALID_ARGUMENT with a short message.
    let mut controller = ControllerClient::new(
        csi_shim::client::connect(&shim.socket)
            .await
            .expect("connect"),
    );
    let huge = "v".repeat(3_500 << 10);
    let key = "k".repeat(16 << 10);
    let mut req = common::create("pvc-1", "linear", common::MIB, common::rwo());
    req.parameters.insert(key, "x".into());
    let e = controller
        .create_volume(req)
        .await
        .expect_err("a 16 KiB key");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().len() < 512,
        "{} bytes of message",
        e.message().len()
    );
    let calls = (0..8).map(|i| {
        let mut c = controller.clone();
        let mut req = common::create(&format!("pvc-{i}"), "linear", common::MIB, common::rwo());
        req.parameters.insert("vg".into(), huge.clone());
        async move { c.create_volume(req).await }
    });
    for r in futures_join(calls).await {
        let e = r.expect_err("a 3.5 MiB value");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().len() < 512,
            "{} bytes of message",
            e.message().len()
        );
    }
    let e = controller
        .list_volumes(ListVolumesRequest {
            max_entries: 0,
            starting_token: huge[..5000].to_owned(),
        })
        .await
        .expect_err("a 5000-byte token");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    drop(controller);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after_floods = shim::rss(pid);

    // Descriptors run out: the server waits and serves again, alive, its socket there.
    if shim::has("prlimit") {
        let (base, limit) = (shim.open_fds(), shim::nofile(pid));
        shim::set_nofile(pid, base + 8);
        let mut held = Vec::new();
        for _ in 0..40 {
            if let Ok(mut s) = UnixStream::connect(&shim.socket).await {
                let _ = s.write_all(&hello()).await;
                held.push(s);
            }
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let log = shim.log_text();
        assert!(
            log.contains("accepting a CSI connection failed") && log.contains("errno=24"),
            "no EMFILE logged:\n{log}"
        );
        assert!(shim.alive(), "csi-shim exited: {log}");
        drop(held);
        shim::set_nofile(pid, limit);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let probe = async {
                let ch = csi_shim::client::connect(&shim.socket).await.ok()?;
                IdentityClient::new(ch).probe(ProbeRequest {}).await.ok()
            };
            if tokio::time::timeout(Duration::from_secs(2), probe)
                .await
                .ok()
                .flatten()
                .is_some()
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "not serving after descriptors came back: {}",
                shim.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    } else {
        common::skip_or_fail("hostile: descriptor exhaustion: prlimit (util-linux) is missing");
    }
    assert!(shim.alive(), "csi-shim exited: {}", shim.log_text());
    assert!(shim::is_socket(&shim.socket), "the socket is gone");

    let (worst, failed, calls) = prober.stop().await;
    let peak = rss.peak();
    report(&format!(
        "RSS at rest {} MB, with 1920 half-open streams {} MB, after floods {} MB, peak {} MB; Probe worst {worst:?} over {calls} calls ({failed} failed); scrape {scraped:?}",
        at_rest >> 20,
        with_streams >> 20,
        after_floods >> 20,
        peak >> 20
    ));
    assert!(peak < RSS_BOUND, "peak RSS {} MB", peak >> 20);
    assert!(worst < PROBE_BOUND, "a Probe took {worst:?}");
    assert_eq!(
        failed,
        0,
        "Probe failed {failed} times: {}",
        shim.log_text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_idle_and_half_sent_connections_are_closed() {
    use csi_shim::connections::Limits;
    let long = Duration::from_secs(60);
    let ms = Duration::from_millis;
    // Stalled: the client never answers a ping.
    let (socket, _dir, _stop, _task) = shim::in_process(Limits {
        keepalive: ms(300),
        keepalive_timeout: ms(300),
        idle: long,
        ..Limits::default()
    })
    .await;
    let mut s = UnixStream::connect(&socket).await.expect("connect");
    s.write_all(&hello()).await.expect("hello");
    let seen = watch(s, Duration::from_secs(10)).await;
    let closed = seen.closed_after.expect("a stalled connection is closed");
    assert!(closed < Duration::from_secs(3), "closed after {closed:?}");

    // Idle: the client answers pings but opens no stream; GOAWAY, then closed.
    let (socket, _dir, _stop, _task) = shim::in_process(Limits {
        keepalive: ms(200),
        keepalive_timeout: ms(500),
        idle: ms(1000),
        ..Limits::default()
    })
    .await;
    let mut s = UnixStream::connect(&socket).await.expect("connect");
    s.write_all(&hello()).await.expect("hello");
    let (goaway, closed) = live(s, Duration::from_secs(10)).await;
    let goaway = goaway.expect("an idle connection is told to go");
    assert!(
        goaway >= ms(900) && goaway < ms(3000),
        "GOAWAY after {goaway:?}"
    );
    assert!(closed.is_some(), "an idle connection is closed");

    // Half-sent: a call's headers without its message; answered DEADLINE_EXCEEDED.
    let (socket, _dir, _stop, _task) = shim::in_process(Limits {
        body_timeout: ms(500),
        idle: long,
        ..Limits::default()
    })
    .await;
    let mut s = UnixStream::connect(&socket).await.expect("connect");
    let started = Instant::now();
    s.write_all(&[hello(), half_open_streams(1)].concat())
        .await
        .expect("send");
    let headers = response_headers(s, 1, Duration::from_secs(10))
        .await
        .expect("a half-sent call is answered");
    assert!(
        started.elapsed() >= ms(500),
        "answered before the request timed out"
    );
    let status = headers.iter().find(|(n, _)| n == "grpc-status");
    assert_eq!(
        status.map(|(_, v)| v.as_str()),
        Some("4"),
        "DEADLINE_EXCEEDED: {headers:?}"
    );

    // Shutdown: a stalled connection with no call does not hold up the server's end.
    let (socket, _dir, stop, task) = shim::in_process(Limits::default()).await;
    let mut stalled = UnixStream::connect(&socket).await.expect("connect");
    stalled.write_all(&hello()).await.expect("hello");
    tokio::time::sleep(ms(200)).await;
    let _ = stop.send(());
    let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
    assert!(
        matches!(ended, Ok(Ok(Ok(())))),
        "shutdown held up: {ended:?}"
    );
    drop(stalled);
}

/// Runs futures concurrently and returns their outputs in order.
async fn futures_join<F: std::future::Future + Send + 'static>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task"));
    }
    out
}
