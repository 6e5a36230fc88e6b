//! Hosts of the CSI driver for the end-to-end tests: each a sanlock daemon and a `csi-shim`
//! process (Controller and Node on one socket) on a loop-device LUN, and the kubelet's side
//! of the calls (directories, stage, publish, unpublish, unstage).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::node_client::NodeClient;
use csi_shim::csi::*;
use tonic::transport::Channel;

use crate::{lvmeta_bin, workspace_bin};

/// One MiB, as the CSI sizes count it.
pub const MIB: i64 = 1 << 20;

/// A child process killed (and reaped) when dropped.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Prints the file at its path to stderr when dropped while the test panics (a host's
/// csi-shim log, for the failure's story).
pub struct LogOnPanic(pub PathBuf);

impl Drop for LogOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let text = std::fs::read_to_string(&self.0).unwrap_or_default();
            let _ = writeln!(std::io::stderr(), "--- {}:\n{text}", self.0.display());
        }
    }
}

/// A sanlock daemon for one simulated host.
pub fn sanlock(dir: &Path, name: &str) -> Killed {
    Killed(crate::lab::start_sanlock(dir, name).expect("start sanlock"))
}

/// One simulated node: its sanlock daemon, host id and csi-shim.
pub struct NodeHost {
    /// Controller service.
    pub controller: ControllerClient<Channel>,
    /// Node service.
    pub node: NodeClient<Channel>,
    /// Identity service.
    pub identity: IdentityClient<Channel>,
    /// Its kubelet directory.
    pub kubelet: PathBuf,
    /// Its csi-shim process.
    pub shim: Killed,
    /// Its sanlock daemon.
    pub _sanlock: Killed,
    /// Its csi-shim log, printed should the test fail.
    pub _log: LogOnPanic,
}

/// Runs the `lvmeta` CLI as host `host_id` (its sanlock run dir `run`) on `lun`.
pub fn lvmeta_as(lun: &str, run: &Path, host_id: u32, args: &[&str]) {
    lvmeta_run(lun, run, &host_id.to_string(), args);
}

/// As [`lvmeta_as`] with `--host-id HOST_ID` as given (a number or `auto`); its stdout.
pub fn lvmeta_run(lun: &str, run: &Path, host_id: &str, args: &[&str]) -> String {
    let out = Command::new(lvmeta_bin())
        .arg(args[0])
        .args(["--devices", lun, "--host-id", host_id, "--io-timeout", "2"])
        .args(["--lockingdir"])
        .arg(run.join("lock"))
        .args(["--rundir"])
        .arg(run.join("run"))
        .args(&args[1..])
        .env("SANLOCK_RUN_DIR", run)
        .output()
        .expect("lvmeta");
    assert!(
        out.status.success(),
        "lvmeta {args:?} as host {host_id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Connects to the CSI socket `socket`, waiting up to 20 s for it to appear.
pub async fn connect(socket: &Path) -> Channel {
    let t = Instant::now();
    while !socket.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no socket {}",
            socket.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    csi_shim::client::connect(socket).await.expect("connect")
}

/// Starts host `host_id`'s csi-shim and connects to it (told to run without fencing, which
/// these simulated hosts cannot have).
pub async fn start_shim(dir: &Path, lun: &str, host_id: u32) -> (Killed, Channel) {
    start_shim_with(dir, lun, host_id, &["--unsafe-without-fencing"]).await
}

/// [`start_shim`] with `extra` arguments instead of `--unsafe-without-fencing`.
pub async fn start_shim_with(
    dir: &Path,
    lun: &str,
    host_id: u32,
    extra: &[&str],
) -> (Killed, Channel) {
    let run = dir.join(format!("h{host_id}"));
    let socket = run.join("csi.sock");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(run.join("csi-shim.log"))
        .expect("log");
    let shim = Command::new(workspace_bin("csi-shim", "csi-shim"))
        .arg("--endpoint")
        .arg(&socket)
        .args([
            "--devices",
            lun,
            "--vg",
            "vg",
            "--host-id",
            &host_id.to_string(),
        ])
        .args(["--node-id", &format!("node-{host_id}"), "--lock-wait", "20"])
        // These simulated hosts share one kernel without device-mapper and run sanlock
        // without a watchdog: nothing can fence them (the VM tests fence for real).
        .args(extra)
        // Node A's process also runs the controller's wiper (deleted volumes erased under
        // their leases).
        .args(["--wiper", if host_id == 2 { "true" } else { "false" }])
        .arg("--kubelet-dir")
        .arg(dir.join(format!("kubelet{host_id}")))
        .arg("--locking-dir")
        .arg(run.join("lock"))
        .env("SANLOCK_RUN_DIR", &run)
        .env("RUST_LOG", "info")
        .stderr(log)
        .spawn()
        .expect("start csi-shim");
    let shim = Killed(shim);
    (shim, connect(&socket).await)
}

/// Host `host_id`: its kubelet dir, its csi-shim started and connected.
pub async fn node_host(dir: &Path, lun: &str, host_id: u32, sanlock: Killed) -> NodeHost {
    let kubelet = dir.join(format!("kubelet{host_id}"));
    std::fs::create_dir_all(&kubelet).expect("kubelet dir");
    let (shim, channel) = start_shim(dir, lun, host_id).await;
    NodeHost {
        controller: ControllerClient::new(channel.clone()),
        node: NodeClient::new(channel.clone()),
        identity: IdentityClient::new(channel),
        kubelet,
        shim,
        _sanlock: sanlock,
        _log: LogOnPanic(dir.join(format!("h{host_id}")).join("csi-shim.log")),
    }
}

/// Stops a node's csi-shim with SIGTERM (as Kubernetes does) and checks it exits cleanly.
pub async fn stop_shim(h: &mut NodeHost) {
    let pid = h.shim.0.id().to_string();
    let st = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(st.success());
    let t = Instant::now();
    let code = loop {
        if let Some(s) = h.shim.0.try_wait().expect("wait") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "csi-shim did not stop on SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(code.success(), "csi-shim exit {code:?}");
}

/// Restarts host `host_id`'s csi-shim (a DaemonSet update); its sanlock daemon stays.
pub async fn restart_shim(h: &mut NodeHost, dir: &Path, lun: &str, host_id: u32) {
    stop_shim(h).await;
    let (shim, channel) = start_shim(dir, lun, host_id).await;
    h.shim = shim;
    h.controller = ControllerClient::new(channel.clone());
    h.node = NodeClient::new(channel.clone());
    h.identity = IdentityClient::new(channel);
}

pub use csi_shim::testing::cap;

/// The CreateVolume request for `name` in VG `vg` with `mode` (linear or thin), `bytes`,
/// capability `c` and, when given, a snapshot or volume to copy.
pub fn create_request(
    name: &str,
    mode: &str,
    bytes: i64,
    c: &VolumeCapability,
    source: Option<volume_content_source::Type>,
) -> CreateVolumeRequest {
    CreateVolumeRequest {
        volume_content_source: source.map(|t| VolumeContentSource { r#type: Some(t) }),
        ..csi_shim::testing::create_request(name, mode, bytes, vec![c.clone()])
    }
}

/// CreateVolume `name` in VG `vg` with `mode` (linear or thin); returns its id.
pub async fn create(
    h: &mut NodeHost,
    name: &str,
    mode: &str,
    bytes: i64,
    c: &VolumeCapability,
) -> String {
    h.controller
        .create_volume(create_request(name, mode, bytes, c, None))
        .await
        .expect("CreateVolume")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

/// The staging and target paths of volume `id` for `pod`, with the directories kubelet
/// makes before it calls the driver (the staging directory, the target's parent).
pub fn paths(h: &NodeHost, id: &str, pod: &str) -> (String, String) {
    let key = id.replace('/', "-");
    let staging = h.kubelet.join("staging").join(&key);
    let pod_dir = h.kubelet.join("pods").join(pod);
    for d in [&staging, &pod_dir] {
        std::fs::create_dir_all(d).expect("kubelet's directories");
    }
    (
        staging.display().to_string(),
        pod_dir.join(&key).display().to_string(),
    )
}

/// NodeStageVolume of `id` at its staging path.
pub async fn stage(h: &mut NodeHost, id: &str, c: &VolumeCapability) -> Result<(), tonic::Status> {
    let (staging, _) = paths(h, id, "");
    h.node
        .node_stage_volume(csi_shim::testing::stage_request(id, &staging, c.clone()))
        .await
        .map(drop)
}

/// NodePublishVolume of `id` for `pod`; returns the target path.
pub async fn publish(h: &mut NodeHost, id: &str, pod: &str, c: &VolumeCapability) -> PathBuf {
    let (staging, target) = paths(h, id, pod);
    h.node
        .node_publish_volume(csi_shim::testing::publish_request(
            id,
            &staging,
            &target,
            c.clone(),
        ))
        .await
        .expect("NodePublishVolume");
    PathBuf::from(target)
}

/// NodeUnpublishVolume then NodeUnstageVolume of `id` for `pod`.
pub async fn unpublish_unstage(h: &mut NodeHost, id: &str, pod: &str) {
    let (staging, target) = paths(h, id, pod);
    h.node
        .node_unpublish_volume(NodeUnpublishVolumeRequest {
            volume_id: id.into(),
            target_path: target,
        })
        .await
        .expect("NodeUnpublishVolume");
    h.node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: id.into(),
            staging_target_path: staging,
        })
        .await
        .expect("NodeUnstageVolume");
}

/// The total bytes NodeGetVolumeStats reports for `id` at `path` (condition normal).
pub async fn fs_bytes(h: &mut NodeHost, id: &str, path: &Path) -> i64 {
    let stats = h
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: id.into(),
            volume_path: path.display().to_string(),
            ..Default::default()
        })
        .await
        .expect("NodeGetVolumeStats")
        .into_inner();
    assert_eq!(stats.volume_condition.map(|c| c.abnormal), Some(false));
    stats.usage[0].total
}
