//! Privileged: the driver given only a LUN and a VG name, with real sanlock daemons
//! (simulated hosts on one machine, each its own daemon and host name) on loop devices:
//! - two controllers (`csi-shim --create-vg`, no host id) started at once on a blank LUN: one
//!   makes the shared VG, both join its lockspace under distinct ids, stock lvm2 finds it
//!   clean, and both create volumes under the VG lease;
//! - a restarted controller keeps its id;
//! - a blank LUN added to `--devices` is added to the VG;
//! - a LUN carrying a filesystem (real mkfs.ext4) is left byte for byte untouched, the
//!   reason logged;
//! - a LUN that fails every read (device-mapper's error target: on the VM's kernel only)
//!   does not keep the controller from serving.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta_tests::csi_hosts::{cap, connect, create_request, sanlock, Killed, LogOnPanic, MIB};
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::{privileged, read_at, workspace_bin, UnbindOver};

/// A controller of simulated host `run` on `devices`, given no host id; its log file.
fn controller(run: &Path, devices: &str, vg: &str) -> (Killed, PathBuf) {
    std::fs::create_dir_all(run).expect("run dir");
    let log_path = run.join(format!("csi-shim-{vg}.log"));
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .expect("log");
    let child = Command::new(workspace_bin("csi-shim", "csi-shim"))
        .arg("--endpoint")
        .arg(run.join("csi.sock"))
        .args(["--devices", devices, "--vg", vg, "--create-vg"])
        .args(["--io-timeout", "2", "--unsafe-without-fencing"])
        .arg("--locking-dir")
        .arg(run.join("lock"))
        .env("SANLOCK_RUN_DIR", run)
        .env("RUST_LOG", "info")
        .env_remove("LVMETA_HOST_ID")
        .stderr(log)
        .spawn()
        .expect("csi-shim");
    (Killed(child), log_path)
}

/// Waits until `log` holds `what`, at most `most`; the log.
fn wait_log(log: &Path, what: &str, most: Duration) -> String {
    let t = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains(what) {
            return text;
        }
        assert!(
            t.elapsed() < most,
            "no {what:?} in {}:\n{text}",
            log.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The host id a controller's log says it joined under.
fn joined_id(log: &str) -> u64 {
    log.lines()
        .rev()
        .filter(|l| l.contains("lockspaces joined"))
        .filter_map(|l| l.split("host_id=").nth(1))
        .filter_map(|r| r.split_whitespace().next())
        .filter_map(|n| n.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("no host id joined in:\n{log}"))
}

/// Probe says ready, then CreateVolume `name` succeeds.
async fn serves(run: &Path, name: &str) {
    let channel = connect(&run.join("csi.sock")).await;
    let ready = IdentityClient::new(channel.clone())
        .probe(ProbeRequest {})
        .await
        .expect("Probe")
        .into_inner()
        .ready;
    assert_eq!(ready, Some(true), "{} not ready", run.display());
    let c = cap(Access::SingleNodeWriter, None);
    ControllerClient::new(channel)
        .create_volume(create_request(name, "linear", 8 * MIB, &c, None))
        .await
        .expect("CreateVolume under the VG lease");
}

#[test]
fn controllers_given_only_the_lun_make_one_vg() {
    if !privileged(
        "controllers_given_only_the_lun_make_one_vg",
        &["losetup", "sanlock", "vgck", "mkfs.ext4"],
    ) {
        return;
    }
    let mut sb = Sandbox::new(&[1200 << 20, 600 << 20, 600 << 20], 512);
    let lun = sb.loops[0].clone();
    let lun_b = sb.another_path(0);
    let (extra, foreign) = (sb.loops[1].clone(), sb.loops[2].clone());
    let _unbind = (
        UnbindOver(lun.clone()),
        UnbindOver(lun_b.clone()),
        UnbindOver(extra.clone()),
    );
    let dir = tempfile::tempdir().expect("dir");
    let (ra, rb) = (dir.path().join("a"), dir.path().join("b"));
    let _sa = sanlock(&ra, "node-a");
    let _sb = sanlock(&rb, "node-b");

    // Both at once, on one blank LUN.
    let (a, log_a) = controller(&ra, &lun, "vg");
    let (b, log_b) = controller(&rb, &lun_b, "vg");
    let _logs = (LogOnPanic(log_a.clone()), LogOnPanic(log_b.clone()));
    let most = Duration::from_secs(120);
    let (text_a, text_b) = (
        wait_log(&log_a, "lockspaces joined", most),
        wait_log(&log_b, "lockspaces joined", most),
    );
    let made = [&text_a, &text_b]
        .iter()
        .filter(|t| t.contains("made the VG on blank devices"))
        .count();
    assert_eq!(made, 1, "one controller makes the VG");
    let (id_a, id_b) = (joined_id(&text_a), joined_id(&text_b));
    eprintln!("blank_lun: started at once: node-a {id_a}, node-b {id_b}");
    assert_ne!(id_a, id_b, "two hosts under one id");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        serves(&ra, "pvc-a").await;
        serves(&rb, "pvc-b").await;
    });

    // A restart keeps the id; a blank LUN added to the list joins the VG. The killed
    // process left its socket file: gone first, so the next connect waits for the new one.
    drop(a);
    std::fs::remove_file(ra.join("csi.sock")).expect("the old socket");
    let (a, log_a2) = controller(&ra, &format!("{lun},{extra}"), "vg");
    // The log is appended to: its second "lockspaces joined" comes before "LUNs added".
    let text = wait_log(&log_a2, "LUNs added to the VG", most);
    assert_eq!(text.matches("lockspaces joined").count(), 2);
    assert_eq!(joined_id(&text), id_a, "node-a's id after a restart");
    rt.block_on(serves(&ra, "pvc-a2"));
    drop((a, b));

    // A LUN with a filesystem: left untouched, the reason logged.
    let mkfs = Command::new("mkfs.ext4")
        .args(["-q", "-F", &foreign])
        .status()
        .expect("mkfs.ext4");
    assert!(mkfs.success());
    let before = read_at(Path::new(&foreign), 0, 4 << 20);
    let (f, log_f) = controller(&ra, &foreign, "vg2");
    let _log_f = LogOnPanic(log_f.clone());
    wait_log(
        &log_f,
        "carries a filesystem (ext2/3/4): it is left untouched",
        most,
    );
    drop(f);
    assert!(
        read_at(Path::new(&foreign), 0, 4 << 20) == before,
        "the ext4 LUN was written"
    );

    drop(_unbind);
    // Stock lvm2 finds the VG clean, on both LUNs.
    let lockd = "global/use_lvmlockd=1";
    sb.vgck_clean("vg", Some(lockd));
    let out = sb.lvm_ok(
        &["vgs", "--noheadings", "-o", "pv_count,lock_type", "vg"],
        Some(lockd),
    );
    let words = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        words.split_whitespace().collect::<Vec<_>>(),
        ["2", "sanlock"],
        "{words}"
    );
}

/// device-mapper device `0`, removed when dropped.
struct DmDevice(String);

impl Drop for DmDevice {
    fn drop(&mut self) {
        let _ = Command::new("dmsetup").args(["remove", &self.0]).status();
    }
}

/// A LUN that fails every read (device-mapper's `error` target: a SAN path gone bad) does
/// not hold the driver at start-up: the controller says so and serves (Probe answers that
/// the VG is not ready), where waiting for a VG that cannot be read would keep kubelet from
/// ever registering it.
#[test]
fn a_lun_that_does_not_read_is_served_without_waiting() {
    let test = "a_lun_that_does_not_read_is_served_without_waiting";
    if !privileged(test, &["dmsetup"]) || !lvmeta_tests::device_mapper(test) {
        return;
    }
    let name = format!("lvmeta-unreadable-{}", std::process::id());
    let made = Command::new("dmsetup")
        .args(["create", &name, "--table", "0 262144 error"])
        .status()
        .expect("dmsetup");
    assert!(made.success(), "dmsetup create {name}");
    let dm = DmDevice(name);
    let lun = format!("/dev/mapper/{}", dm.0);
    let made_node = !Path::new(&lun).exists();
    if made_node {
        // No udev in the VM: the node is made from the device numbers.
        let out = Command::new("dmsetup")
            .args(["info", "-c", "--noheadings", "-o", "major,minor", &dm.0])
            .output()
            .expect("dmsetup info");
        let nums = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let (major, minor) = nums.split_once(':').expect("major:minor");
        let made = Command::new("mknod")
            .args([&lun, "b", major, minor])
            .status()
            .expect("mknod");
        assert!(made.success(), "mknod {lun}");
    }
    let dir = tempfile::tempdir().expect("dir");
    // No sanlock daemon answers in this run directory: local VGs only.
    let run = dir.path().join("a");
    let (_c, log) = controller(&run, &lun, "vg");
    let _log = LogOnPanic(log.clone());
    wait_log(
        &log,
        "a LUN does not read: serving without waiting for the VG",
        Duration::from_secs(60),
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let channel = connect(&run.join("csi.sock")).await;
        // It answers, and says why it is not ready: no VG can be read.
        let probe = IdentityClient::new(channel).probe(ProbeRequest {}).await;
        let status = probe.expect_err("not ready without a VG");
        assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
        assert!(
            status.message().contains("VG vg is not ready"),
            "{status:?}"
        );
    });
    if made_node {
        let _ = std::fs::remove_file(&lun);
    }
}
