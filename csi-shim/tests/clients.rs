//! Clients other than tonic: gRPC's C core (here through Python's grpcio) names the unix
//! socket's path, percent-encoded, as every call's `:authority` (grpcio 1.85 does; Debian's
//! 1.51 sends `localhost`). Such a client with default options must be served (see
//! `csi_shim::authority`). `GRPCIO_PYTHON` names the interpreter (CI: a venv with grpcio
//! 1.85.3), else `python3`.

mod common;

use std::process::Command;

use common::*;

/// The Python interpreter with grpcio.
fn python() -> String {
    std::env::var("GRPCIO_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Calls GetPluginInfo and Probe, then a volume that does not exist, over `socket` with a
/// default channel; prints the plugin name, then the failed call's code.
const CLIENT: &str = r#"
import sys, grpc
ch = grpc.insecure_channel("unix:" + sys.argv[1])
call = lambda m: ch.unary_unary(m, request_serializer=None, response_deserializer=None)
info = call("/csi.v1.Identity/GetPluginInfo")(b"", timeout=20)
call("/csi.v1.Identity/Probe")(b"", timeout=20)
print(info[2:2 + info[1]].decode())
# ControllerGetVolume of "vg/nope": field 1, string.
try:
    call("/csi.v1.Controller/ControllerGetVolume")(b"\x0a\x07vg/nope", timeout=20)
except grpc.RpcError as e:
    print(e.code().name)
"#;

/// Whether `PYTHON` can import grpc; a visible skip when not, a failure when CI requires it.
fn has_grpcio() -> bool {
    let ok = Command::new(python())
        .args(["-c", "import grpc"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        let msg = format!(
            "python grpcio client: {} cannot import grpc (set GRPCIO_PYTHON)",
            python()
        );
        skip_or_fail(&msg);
    }
    ok
}

#[tokio::test]
async fn a_python_grpcio_client_with_default_options_is_served() {
    if !has_grpcio() {
        return;
    }
    let d = driver().await;
    let socket = d.socket.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .arg("-c")
            .arg(CLIENT)
            .arg(&socket)
            .output()
            .expect("run python")
    })
    .await
    .expect("client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "grpcio client failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        [csi_shim::DRIVER_NAME, "NOT_FOUND"]
    );
}
