//! Privileged: host ids chosen by `lvmeta vgchange --lockstart --host-id auto` with real
//! sanlock daemons (simulated hosts on one machine, each its own daemon and stable host
//! name) on one loop-device LUN:
//! - two hosts started at once get distinct ids;
//! - an id another host held once (an lvmlockd host configured with `host_id = 1`, stopped
//!   now) is never chosen;
//! - each host's daemon tells a host's generation and state: live after its join, free in
//!   the same generation after it leaves, live in the next generation after it joins again;
//! - a host that leaves the lockspace and starts again gets its own id back;
//! - `csi-shim` given no host id takes the one its host's sanlock joined the VG under: Probe
//!   is ready and CreateVolume takes the VG lease.

use std::path::Path;

use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta_tests::csi_hosts::{
    cap, connect, create_request, lvmeta_as, lvmeta_run, sanlock, Killed, MIB,
};
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::{privileged, workspace_bin, UnbindOver};

/// Host `id` of lockspace `lvm_vg` as the sanlock daemon of `run` sees it (`generation`,
/// `state`), once `ready` says so (its view follows the delta leases it reads every
/// renewal), at most 90 s.
fn view(run: &Path, id: u64, ready: impl Fn(u64, &str) -> bool) -> (u64, String) {
    let asked = std::time::Instant::now();
    loop {
        let out = std::process::Command::new(workspace_bin("lvmeta-tests", "host-view"))
            .args(["lvm_vg", &id.to_string()])
            .env("SANLOCK_RUN_DIR", run)
            .output()
            .expect("host-view");
        let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            out.status.success(),
            "host-view: {text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = text
            .strip_prefix("generation=")
            .and_then(|r| r.split_once(" state="))
            .and_then(|(g, s)| Some((g.parse().ok()?, s.to_owned())));
        match seen {
            Some((g, s)) if ready(g, &s) => return (g, s),
            _ if asked.elapsed() < std::time::Duration::from_secs(90) => {
                std::thread::sleep(std::time::Duration::from_millis(200))
            }
            _ => panic!("host {id} as {} sees it: {text}", run.display()),
        }
    }
}

/// `vgchange --lockstart --host-id auto` as the host of `run`; the id it joined under.
fn start_auto(lun: &str, run: &Path) -> u64 {
    let out = lvmeta_run(lun, run, "auto", &["vgchange", "--lockstart", "vg"]);
    out.split("(host id ")
        .nth(1)
        .and_then(|r| r.split(')').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no host id in {out:?}"))
}

#[test]
fn hosts_given_no_id_get_distinct_stable_ones() {
    if !privileged(
        "hosts_given_no_id_get_distinct_stable_ones",
        &["losetup", "sanlock"],
    ) {
        return;
    }
    let sb = Sandbox::new(&[512 << 20], 512);
    let lun = sb.loops[0].clone();
    let _unbind = UnbindOver(lun.clone());
    let dir = tempfile::tempdir().expect("dir");
    let run = |n: &str| dir.path().join(n);
    // The VG made by an lvmlockd-like host with a configured id 1, which then stops.
    let _s1 = sanlock(&run("h1"), "lvmlockd-host");
    lvmeta_as(
        &lun,
        &run("h1"),
        1,
        &["vgcreate", "--shared", "-s", "4m", "vg", &lun],
    );
    lvmeta_as(&lun, &run("h1"), 1, &["vgchange", "--lockstart", "vg"]);
    lvmeta_as(&lun, &run("h1"), 1, &["vgchange", "--lockstop", "vg"]);

    let _s2 = sanlock(&run("h2"), "node-b");
    let _s3 = sanlock(&run("h3"), "node-c");
    let (b, c) = std::thread::scope(|s| {
        let b = s.spawn(|| start_auto(&lun, &run("h2")));
        let c = s.spawn(|| start_auto(&lun, &run("h3")));
        (b.join().expect("node-b"), c.join().expect("node-c"))
    });
    eprintln!("sanlock_host_ids: started at once: node-b {b}, node-c {c}");
    assert_ne!(b, c, "two hosts under one id");
    assert!(
        b != 1 && c != 1,
        "the lvmlockd host's id was taken: {b}, {c}"
    );

    // The lock manager's view, asked of each host's daemon: the generation board slots
    // are stamped with, and what a host that left looks like to the others.
    let (own, _) = view(&run("h2"), b, |_, s| s == "Live");
    assert!(own >= 1, "node-b's generation {own}");
    let other = view(&run("h2"), c, |g, _| g >= 1);
    eprintln!("sanlock_host_ids: node-b sees itself in generation {own}, node-c as {other:?}");

    // node-b leaves and starts again: its own id, though lower ones are free.
    lvmeta_as(
        &lun,
        &run("h2"),
        b as u32,
        &["vgchange", "--lockstop", "vg"],
    );
    let left = view(&run("h3"), b, |_, s| s == "Free");
    assert_eq!(left.0, own, "node-b left: {left:?}");
    let again = start_auto(&lun, &run("h2"));
    assert_eq!(again, b, "node-b's id after a restart");
    // A second start while joined names the joined id.
    assert_eq!(start_auto(&lun, &run("h2")), b);
    let back = view(&run("h3"), b, |g, s| g > own && s == "Live");
    assert_eq!(back.0, own + 1, "node-b's next life: {back:?}");

    // csi-shim on node-b without --host-id: the joined lockspace's id.
    let socket = run("h2").join("csi.sock");
    let _shim = Killed(
        std::process::Command::new(workspace_bin("csi-shim", "csi-shim"))
            .arg("--endpoint")
            .arg(&socket)
            .args(["--devices", &lun, "--vg", "vg", "--unsafe-without-fencing"])
            .arg("--locking-dir")
            .arg(run("h2").join("lock"))
            .env("SANLOCK_RUN_DIR", run("h2"))
            .env_remove("LVMETA_HOST_ID")
            .spawn()
            .expect("csi-shim"),
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let channel = connect(&socket).await;
        let mut identity = IdentityClient::new(channel.clone());
        let ready = identity
            .probe(ProbeRequest {})
            .await
            .expect("Probe")
            .into_inner()
            .ready;
        assert_eq!(ready, Some(true), "csi-shim with the joined host id");
        let mut controller = controller_client::ControllerClient::new(channel);
        let c = cap(Access::SingleNodeWriter, None);
        controller
            .create_volume(create_request("pvc-auto", "linear", 8 * MIB, &c, None))
            .await
            .expect("CreateVolume under the VG lease");
    });
    drop(_shim);

    for (h, id) in [("h2", b), ("h3", c)] {
        lvmeta_as(&lun, &run(h), id as u32, &["vgchange", "--lockstop", "vg"]);
    }
}
