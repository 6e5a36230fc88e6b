//! A CSI host in a QEMU guest ([`crate::vm::Vm`]) for the multi-host tests: the shared LUN
//! seen through `/dev/mapper/lun` (a dm-linear device over the guest's `/dev/vda`, so the
//! test can cut, hang and restore the host's path to it), sanlock (io_timeout
//! [`IO_TIMEOUT`]) with wdmd and softdog or without a watchdog, `csi-shim` serving
//! Controller and Node, and gRPC clients reaching it through a forwarded port.
//!
//! sanlock's timings at io_timeout 2 s and the fixed 60 s watchdog fire timeout of sanlock
//! 3.8.5: renewals every 4 s, a host FAILs (its lease holders are asked to stop) 16 s after
//! its last renewal, its watchdog resets it between 66 and 76 s, other hosts count it DEAD
//! (and may take its leases) at 76 s.

use std::time::{Duration, Instant};

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::node_client::NodeClient;
use csi_shim::csi::*;
use tonic::transport::{Channel, Endpoint};

use crate::vm::Vm;
use crate::{lvmeta_bin, workspace_bin};

/// sanlock's io_timeout in the guests.
pub const IO_TIMEOUT: u32 = 2;
/// Seconds after a host's last renewal when other hosts may take its leases.
pub const HOST_DEAD: u64 = 8 * IO_TIMEOUT as u64 + 60;
/// Seconds between renewals.
pub const RENEWAL: u64 = 2 * IO_TIMEOUT as u64;
/// The LUN as csi-shim, sanlock and lvmeta see it in a guest.
pub const LUN: &str = "/dev/mapper/lun";

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A guest host: its VM, sanlock host id and CSI clients.
pub struct Guest {
    /// The VM.
    pub vm: Vm,
    /// Its sanlock host id.
    pub id: u32,
    /// Controller service.
    pub controller: ControllerClient<Channel>,
    /// Node service.
    pub node: NodeClient<Channel>,
    /// Identity service.
    pub identity: IdentityClient<Channel>,
    /// Its csi-shim is given no host id (it chooses one; `id` is what it chose).
    pub auto: bool,
}

/// `lvmeta VERB` as host `id` in its guest (its sanlock run dir, the LUN).
pub fn lvmeta(id: u32, verb: &str, args: &str) -> String {
    format!(
        "SANLOCK_RUN_DIR=/run/t/san {} {verb} --devices {LUN} --host-id {id} --io-timeout \
         {IO_TIMEOUT} --lockingdir /run/t/lock --rundir /run/t/run {args}",
        lvmeta_bin().display()
    )
}

/// The IPv6 link-local address of guest `n` (1: a, 2: b) on the link [`two_hosts`] makes,
/// scoped to `interface` (the guest's own end of the link).
pub fn link_addr(n: u32, interface: &str) -> String {
    format!("fe80::5054:ff:fe12:340{n}%{interface}")
}

/// Makes `/dev/mapper/lun` over the guest's `/dev/vda` and the directories the tests use.
pub fn make_lun(vm: &mut Vm) {
    vm.ok(&format!(
        "set -e\nmkdir -p /run/t/san /run/t/lock /run/t/run /run/t/kubelet\n\
         dmsetup create lun --table \"0 $(blockdev --getsz /dev/vda) linear /dev/vda 0\"\n\
         dmsetup mknodes lun\ntest -b {LUN}"
    ));
}

/// Boots guest `name` on `lun` (scratch and console under `dir`) with its LUN device, wdmd
/// and sanlock (watchdog on).
pub fn boot(name: &str, lun: &std::path::Path, dir: &std::path::Path) -> Vm {
    boot_linked(name, lun, dir, None)
}

/// [`boot`] with a link to another guest (`tests/vm/run --link`).
fn boot_linked(name: &str, lun: &std::path::Path, dir: &std::path::Path, link: Option<&str>) -> Vm {
    let mut vm = Vm::boot(name, lun, dir, free_port(), link);
    make_lun(&mut vm);
    start_wdmd(&mut vm);
    start_sanlock(&mut vm, true);
    vm
}

/// Two guests, `a` (host id 1) and `b` (host id 2), booted at once on a new LUN image of
/// `bytes` in `dir`, with shared VG `vg` made by `a` and both in its lockspace, linked by a
/// network of their own ([`link_addr`]).
pub fn two_hosts(dir: &std::path::Path, bytes: u64) -> (Vm, Vm) {
    let (mut vm_a, mut vm_b) = two_guests(dir, bytes);
    vm_a.ok(&lvmeta(1, "vgcreate", &format!("--shared -s 4m vg {LUN}")));
    let (na, nb) = (
        vm_a.post(&lvmeta(1, "vgchange", "--lockstart vg")),
        vm_b.post(&lvmeta(2, "vgchange", "--lockstart vg")),
    );
    for (vm, n) in [(&mut vm_a, na), (&mut vm_b, nb)] {
        let (code, out) = vm.wait(n);
        assert_eq!(code, 0, "lockstart on {}: {out}", vm.name);
    }
    (vm_a, vm_b)
}

/// Two guests `a` and `b` booted at once on a new blank LUN image of `bytes` in `dir`,
/// linked as [`two_hosts`] links them.
pub fn two_guests(dir: &std::path::Path, bytes: u64) -> (Vm, Vm) {
    let lun = dir.join("lun.img");
    std::fs::File::create(&lun)
        .and_then(|f| f.set_len(bytes))
        .expect("LUN image");
    // Boot both at once (each boot takes 15-30 s of TCG), linked: a's QEMU listens on the
    // link's socket, so b's starts once it is there.
    let sock = dir.join("link.sock");
    let _ = std::fs::remove_file(&sock);
    let (lun_a, dir_a, link_a) = (
        lun.clone(),
        dir.to_owned(),
        format!("server:{}:1", sock.display()),
    );
    let boot_a = std::thread::spawn(move || boot_linked("a", &lun_a, &dir_a, Some(&link_a)));
    let t = std::time::Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(60),
            "a's link socket never appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let vm_b = boot_linked(
        "b",
        &lun,
        dir,
        Some(&format!("client:{}:2", sock.display())),
    );
    let vm_a = boot_a.join().expect("boot a");
    (vm_a, vm_b)
}

/// Cuts the guest's path to the LUN (every I/O fails at once), as a lost SAN path does.
pub const CUT: &str = "error";
/// Hangs the guest's path to the LUN (I/O queued, never done), as a stuck path does.
pub const HANG: &str = "hang";
/// Gives the guest its path to the LUN back.
pub const RESTORE: &str = "linear";

/// Changes the guest's path to the LUN (`how`: [`CUT`], [`HANG`] or [`RESTORE`]); returns
/// the guest's clock (seconds) when the change took effect.
pub fn lun_path(vm: &mut Vm, how: &str) -> f64 {
    let table = match how {
        CUT => "0 $sz error".to_owned(),
        _ => "0 $sz linear /dev/vda 0".to_owned(),
    };
    let script = if how == HANG {
        "set -e\ndmsetup suspend --noflush --nolockfs lun\ndate +%s.%N".to_owned()
    } else {
        format!(
            "set -e\nsz=$(blockdev --getsz /dev/vda)\ndmsetup load lun --table \"{table}\"\n\
             dmsetup suspend --noflush --nolockfs lun\ndmsetup resume lun\ndate +%s.%N"
        )
    };
    vm.ok(&script).trim().parse().expect("guest clock")
}

/// Starts wdmd over softdog (fire timeout 60 s) in the guest, with the options of
/// `/etc/default/wdmd` as Debian's unit does.
pub fn start_wdmd(vm: &mut Vm) {
    vm.ok(
        "set -e\n. /etc/default/wdmd\nsetsid wdmd -D $wdmd_opts >/run/lvmeta-vm/wdmd.log 2>&1 \
         </dev/null &\n\
         i=0; while [ ! -S /run/wdmd/wdmd.sock ]; do i=$((i+1)); [ $i -lt 300 ]; sleep 0.1; done",
    );
}

/// Starts the guest's sanlock daemon with the options of `/etc/default/sanlock` as Debian's
/// unit does, after setting them as deploy/README.md says (`-w 1`, the watchdog through
/// wdmd, which must run) or leaving Debian's default (`-w 0`), under a stable host name (a
/// restart joins again fast).
pub fn start_sanlock(vm: &mut Vm, watchdog: bool) {
    vm.ok(&format!(
        "set -e\nsed -i 's/^sanlock_opts=.*/sanlock_opts=\"-w {w}\"/' /etc/default/sanlock\n\
         . /etc/default/sanlock\nexport SANLOCK_RUN_DIR=/run/t/san\n\
         rm -f /run/t/san/sanlock.sock\n\
         SANLOCK_PRIVILEGED=0 setsid sanlock daemon -D $sanlock_opts \
         -U root -G root -L -1 -S -1 -e vm-{name} >>/run/lvmeta-vm/sanlock.log 2>&1 </dev/null &\n\
         i=0; until sanlock client status >/dev/null 2>&1; do i=$((i+1)); [ $i -lt 300 ]; sleep 0.1; done\n\
         sanlock client status -D | grep -q 'use_watchdog={w}'",
        w = u8::from(watchdog),
        name = vm.name
    ));
}

/// Stops the guest's sanlock daemon, which must hold no lockspace (see [`leave`]).
pub fn stop_sanlock(vm: &mut Vm) {
    vm.ok("SANLOCK_RUN_DIR=/run/t/san sanlock shutdown\n\
         i=0; while pidof sanlock >/dev/null; do i=$((i+1)); [ $i -lt 300 ] || exit 1; \
         sleep 0.1; done");
}

/// Joins the VG's lockspace as host `id`.
pub fn join(vm: &mut Vm, id: u32) {
    vm.ok(&lvmeta(id, "vgchange", "--lockstart vg"));
}

/// Leaves the VG's lockspace (no lease may be held in it).
pub fn leave(vm: &mut Vm, id: u32) {
    vm.ok(&lvmeta(id, "vgchange", "--lockstop vg"));
}

/// Starts the guest's csi-shim (Controller and Node, `extra` arguments) and the forwarder
/// of its socket to port 7000, and connects to it.
pub async fn start_shim(mut vm: Vm, id: u32, extra: &str) -> Guest {
    launch(&mut vm, Some(id), extra);
    let (controller, node, identity) = connect(&vm).await;
    Guest {
        vm,
        id,
        controller,
        node,
        identity,
        auto: false,
    }
}

/// [`start_shim`] given no host id, in both guests at once (each waits for the VG); each
/// guest's id is the one its csi-shim joined the VG's lockspace under.
pub async fn start_shims_auto(mut a: Vm, mut b: Vm, extra: [&str; 2]) -> (Guest, Guest) {
    std::thread::scope(|s| {
        let started = s.spawn(|| launch(&mut a, None, extra[0]));
        launch(&mut b, None, extra[1]);
        started.join().expect("launch in a");
    });
    let mut out = Vec::new();
    for mut vm in [a, b] {
        let (controller, node, identity) = connect(&vm).await;
        let id = joined_id(&mut vm);
        out.push(Guest {
            vm,
            id,
            controller,
            node,
            identity,
            auto: true,
        });
    }
    let b = out.pop().expect("b");
    (out.pop().expect("a"), b)
}

/// The host id the guest's sanlock daemon is in the VG's lockspace under.
pub fn joined_id(vm: &mut Vm) -> u32 {
    let out = vm.ok("SANLOCK_RUN_DIR=/run/t/san sanlock client status");
    out.lines()
        .filter_map(|l| l.strip_prefix("s lvm_vg:"))
        .filter_map(|r| r.split(':').next())
        .filter_map(|n| n.parse().ok())
        .next()
        .unwrap_or_else(|| panic!("{} is in no lockspace of vg: {out}", vm.name))
}

/// Starts csi-shim in `vm` as host `id` (none: it chooses), and the forwarder of its
/// socket; modprobe finds the guest kernel's modules (`tests/vm/init`).
fn launch(vm: &mut Vm, id: Option<u32>, extra: &str) {
    let (host_id, node) = match id {
        Some(id) => (format!("--host-id {id}"), format!("node-{id}")),
        None => (String::new(), format!("node-{}", vm.name)),
    };
    vm.ok(&format!(
        "set -e\nexport SANLOCK_RUN_DIR=/run/t/san RUST_LOG=info MODPROBE_OPTIONS='-d /run/kmod'\n\
         rm -f /run/t/csi.sock\n\
         setsid {csi} --endpoint /run/t/csi.sock --devices {LUN} --vg vg {host_id} \
         --io-timeout {IO_TIMEOUT} --node-id {node} --lock-wait 150 --wiper false \
         --kubelet-dir /run/t/kubelet --locking-dir /run/t/lock {extra} \
         >>/run/lvmeta-vm/csi.log 2>&1 </dev/null &\necho $! >/run/t/csi.pid\n\
         i=0; while [ ! -S /run/t/csi.sock ]; do i=$((i+1)); [ $i -lt 3000 ]; sleep 0.1; done\n\
         pidof unix-forward >/dev/null || \
         setsid {fwd} 7000 /run/t/csi.sock >/run/lvmeta-vm/fwd.log 2>&1 </dev/null &",
        csi = workspace_bin("csi-shim", "csi-shim").display(),
        fwd = workspace_bin("lvmeta-tests", "unix-forward").display(),
    ));
}

type Clients = (
    ControllerClient<Channel>,
    NodeClient<Channel>,
    IdentityClient<Channel>,
);

/// Clients of the csi-shim in `vm`, through its forwarded port.
async fn connect(vm: &Vm) -> Clients {
    let endpoint = Endpoint::from_shared(format!("http://127.0.0.1:{}", vm.port))
        .expect("endpoint")
        .timeout(Duration::from_secs(200));
    let t = Instant::now();
    let channel = loop {
        match endpoint.connect().await {
            Ok(c) => break c,
            Err(e) => {
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "connect to {}: {e}",
                    vm.name
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // QEMU accepts on the forwarded port before the guest's forwarder listens: the first
    // calls may fail until it does.
    let mut identity = IdentityClient::new(channel.clone());
    while let Err(e) = identity.probe(ProbeRequest {}).await {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "Probe of {}: {e}",
            vm.name
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    (
        ControllerClient::new(channel.clone()),
        NodeClient::new(channel),
        identity,
    )
}

/// Stops the guest's csi-shim (SIGTERM; it exits once it finds no lockspace lost).
pub fn stop_shim(g: &mut Guest) {
    g.vm.ok("kill -TERM $(cat /run/t/csi.pid)\n\
         i=0; while kill -0 $(cat /run/t/csi.pid) 2>/dev/null; do i=$((i+1)); \
         [ $i -lt 600 ] || exit 1; sleep 0.1; done");
}

impl Drop for Guest {
    /// A failing test shows the ends of the guest's logs (kept on its scratch share).
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        // The daemon's own account and its whole debug log, while the guest runs.
        if self.vm.alive() {
            let (_, out) = self.vm.sh(
                "export SANLOCK_RUN_DIR=/run/t/san\nsanlock client status -D\nsanlock client log_dump | tail -n 200",
            );
            let mut err = std::io::stderr();
            let _ = std::io::Write::write_fmt(
                &mut err,
                format_args!("--- {} sanlock status and log_dump\n{out}\n", self.vm.name),
            );
        }
        for log in ["csi.log", "sanlock.log", "wdmd.log"] {
            let text = std::fs::read_to_string(self.vm.scratch().join(log)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(60).collect();
            let mut err = std::io::stderr();
            let _ = std::io::Write::write_fmt(
                &mut err,
                format_args!("--- {} {log} (last 60 lines)\n", self.vm.name),
            );
            for l in tail.into_iter().rev() {
                let _ = std::io::Write::write_fmt(&mut err, format_args!("{l}\n"));
            }
        }
    }
}

impl Guest {
    /// Connects anew (after the serving process was killed, the old connection is gone).
    pub async fn reconnect(&mut self) {
        (self.controller, self.node, self.identity) = connect(&self.vm).await;
    }

    /// Restarts the guest's csi-shim with `extra` arguments (SIGTERM, then a new process).
    pub async fn restart(&mut self, extra: &str) {
        stop_shim(self);
        launch(&mut self.vm, (!self.auto).then_some(self.id), extra);
        (self.controller, self.node, self.identity) = connect(&self.vm).await;
    }

    /// Asserts that nothing is mounted below the guest's kubelet directory.
    pub fn assert_nothing_mounted(&mut self) {
        let left = self.vm.ok("grep ' /run/t/kubelet' /proc/mounts || true");
        assert!(
            left.trim().is_empty(),
            "left mounted on {}: {left}",
            self.vm.name
        );
    }

    /// Probe's answer.
    pub async fn ready(&mut self) -> Option<bool> {
        self.identity
            .probe(ProbeRequest {})
            .await
            .expect("Probe")
            .into_inner()
            .ready
    }

    /// The staging path of `vol` and the target path for `pod`, with the directories
    /// kubelet makes first.
    pub fn paths(&mut self, vol: &str, pod: &str) -> (String, String) {
        let key = vol.replace('/', "-");
        let staging = format!("/run/t/kubelet/staging/{key}");
        let pod_dir = format!("/run/t/kubelet/pods/{pod}");
        self.vm.ok(&format!("mkdir -p {staging} {pod_dir}"));
        (staging, format!("{pod_dir}/{key}"))
    }

    /// NodeStageVolume of `vol`.
    pub async fn stage(&mut self, vol: &str, c: &VolumeCapability) -> Result<(), tonic::Status> {
        let (staging, _) = self.paths(vol, "p");
        self.node
            .node_stage_volume(csi_shim::testing::stage_request(vol, &staging, c.clone()))
            .await
            .map(drop)
    }

    /// NodePublishVolume of `vol` for pod `p`; returns the target path.
    pub async fn publish(&mut self, vol: &str, c: &VolumeCapability) -> String {
        let (staging, target) = self.paths(vol, "p");
        self.node
            .node_publish_volume(csi_shim::testing::publish_request(
                vol,
                &staging,
                &target,
                c.clone(),
            ))
            .await
            .unwrap_or_else(|e| panic!("publish {vol} on host {}: {e}", self.id));
        target
    }

    /// Stages and publishes `vol`; returns the target path.
    pub async fn use_volume(&mut self, vol: &str, c: &VolumeCapability) -> String {
        self.stage(vol, c)
            .await
            .unwrap_or_else(|e| panic!("stage {vol} on host {}: {e}", self.id));
        self.publish(vol, c).await
    }

    /// NodeUnstageVolume of `vol`.
    pub async fn unstage(&mut self, vol: &str) -> Result<(), tonic::Status> {
        let (staging, _) = self.paths(vol, "p");
        self.node
            .node_unstage_volume(NodeUnstageVolumeRequest {
                volume_id: vol.into(),
                staging_target_path: staging,
            })
            .await
            .map(drop)
    }

    /// NodeUnpublishVolume and NodeUnstageVolume of `vol`.
    pub async fn release(&mut self, vol: &str) {
        let (staging, target) = self.paths(vol, "p");
        self.node
            .node_unpublish_volume(NodeUnpublishVolumeRequest {
                volume_id: vol.into(),
                target_path: target,
            })
            .await
            .expect("NodeUnpublishVolume");
        self.node
            .node_unstage_volume(NodeUnstageVolumeRequest {
                volume_id: vol.into(),
                staging_target_path: staging,
            })
            .await
            .expect("NodeUnstageVolume");
    }

    /// Stages `vol` again and again until it succeeds (another host's lease is in the way
    /// until it is free or its holder is DEAD); returns when it did, from `since`.
    pub async fn stage_when_free(
        &mut self,
        vol: &str,
        c: &VolumeCapability,
        since: Instant,
        most: Duration,
    ) -> Duration {
        loop {
            match self.stage(vol, c).await {
                Ok(()) => return since.elapsed(),
                Err(e) => {
                    assert!(
                        matches!(
                            e.code(),
                            tonic::Code::FailedPrecondition
                                | tonic::Code::Aborted
                                | tonic::Code::Unavailable
                        ),
                        "stage {vol} on host {}: {e}",
                        self.id
                    );
                    assert!(
                        since.elapsed() < most,
                        "host {} never took {vol} over: {e}",
                        self.id
                    );
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}
