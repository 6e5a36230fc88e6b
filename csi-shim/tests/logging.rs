//! What the driver logs: every failed call at warn with its method, code and message, and
//! request strings escaped and cut short, so that no request forges a log line or fills
//! the log.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::*;
use tonic::Code;

/// A log sink the test reads back.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn failed_calls_are_logged_escaped_and_short() {
    let sink = Sink::default();
    let writer = sink.clone();
    tracing_subscriber::fmt()
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || writer.clone())
        .init();
    let mut d = driver().await;
    let evil = format!(
        "evil\nFORGED 2026 INFO all good \u{1b}[31m{}",
        "x".repeat(1 << 20)
    );
    let e = d
        .controller
        .create_volume(create(&evil, "linear", MIB, rwo()))
        .await
        .expect_err("too long");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = d
        .node
        .node_unstage_volume(csi_shim::csi::NodeUnstageVolumeRequest {
            volume_id: evil[..300].to_owned(),
            staging_target_path: format!("{}/st\nFORGED", d.kubelet.display()),
        })
        .await
        .expect_err("no such volume");
    assert_eq!(e.code(), Code::NotFound);
    let log = String::from_utf8_lossy(&sink.0.lock().expect("log")).into_owned();
    assert!(log.len() < 16 << 10, "{} bytes of log", log.len());
    assert!(
        !log.contains('\u{1b}'),
        "an escape sequence reached the log"
    );
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "a request forged a log line:\n{log}"
    );
    for want in [
        "call failed",
        "/csi.v1.Controller/CreateVolume",
        "InvalidArgument",
        "/csi.v1.Node/NodeUnstageVolume",
        "NotFound",
    ] {
        assert!(log.contains(want), "{want} not in:\n{log}");
    }
}
