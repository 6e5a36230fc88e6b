//! Takeover after every failure of a host, on real kernels: two QEMU guests (Debian's kernel)
//! share one LUN image, each with sanlock, wdmd over softdog and `csi-shim`; each sees the
//! LUN through a dm device the test can cut or hang (guest::lun_path). Host A holds a volume
//! with a writer on it (`seqio`: sequence-numbered O_DIRECT|O_DSYNC writes) while host B
//! keeps asking to stage it:
//! 1. A's path is cut and A stays up (watchdog on): A fences the volume (its writer, which
//!    retries failed writes, gets I/O errors from then on), lets the lease go and is not
//!    reset; B stages after the host-dead time; A's path comes back: none of A's writes
//!    lands after B's first write; A joins the lockspace again by itself. Then again with
//!    A's serving process killed just after the cut (its lease keeper holds the leases;
//!    the next serving process fences from the lost leases alone).
//! 2. the same without a watchdog (`sanlock -w 0`): a csi-shim without
//!    `--unsafe-without-fencing` refuses the shared VG first; with it, A still fences.
//! 3. A's path hangs (I/O queued for ever): A cannot fence, keeps the lease, and its
//!    watchdog resets it before B stages.
//! 4. A, the controller of a stream of creations and deletions and the holder of a thin
//!    volume, is powered off hard: B's controller replays the stream (as the external
//!    provisioner retries it), every volume exists exactly once, stock lvm2 finds the VG
//!    clean, and B stages the thin volume with what A synced.
//!
//! Every timeline is printed (docs/testing.md has them). Runs on a machine with QEMU (not
//! inside a VM); needs qemu-system-x86, busybox-static, kmod and apt-get, and prints SKIPPED
//! without them.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::{Duration, Instant};

use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta_tests::csi_hosts::{cap, create_request, MIB};
use lvmeta_tests::guest::{self, Guest, HOST_DEAD, LUN, RENEWAL};
use lvmeta_tests::{privileged, workspace_bin};
use tonic::Code;

/// Blocks the writer cycles through (8 MiB of a 16 MiB volume).
const BLOCKS: u64 = 2048;

fn say(line: &str) {
    // Straight to stderr: the harness would hide a passing test's eprintln!.
    let _ = writeln!(std::io::stderr(), "vm_fencing: {line}");
}

fn seqio() -> String {
    workspace_bin("lvmeta-tests", "seqio").display().to_string()
}

/// Starts writer `id` on `target` in the guest.
fn start_writer(g: &mut Guest, target: &str, id: char) {
    g.vm.ok(&format!(
        "rm -f /run/t/w.status\nsetsid {} write {target} {id} {BLOCKS} /run/t/w.status \
         >/run/t/w.out 2>&1 </dev/null &\nsleep 2\ngrep -q acked= /run/t/w.status",
        seqio()
    ));
}

/// The writer's status: writes acknowledged and writes failed so far.
fn writer(g: &mut Guest) -> (u64, u64) {
    let st = g.vm.ok("cat /run/t/w.status");
    let field = |k: &str| {
        st.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("writer status {st:?}: no {k}"))
    };
    (field("acked="), field("failed="))
}

/// The size of the guest's csi-shim log: where the lines of what comes next start.
fn log_mark(g: &mut Guest) -> u64 {
    g.vm.ok("stat -c %s /run/lvmeta-vm/csi.log")
        .trim()
        .parse()
        .expect("log size")
}

/// The guest's clock (s) at the first log line after `mark` that says `what`, waiting at
/// most `most` for it.
fn logged_at(g: &mut Guest, mark: u64, what: &str, most: Duration) -> f64 {
    let t = Instant::now();
    loop {
        let out = g.vm.ok(&format!(
            "ts=$(tail -c +{} /run/lvmeta-vm/csi.log | grep -m1 '{what}' | cut -d' ' -f1)\n\
             [ -z \"$ts\" ] || date -d \"$ts\" +%s.%N",
            mark + 1
        ));
        if let Ok(at) = out.trim().parse() {
            return at;
        }
        assert!(
            t.elapsed() < most,
            "host {}: no {what:?} in csi-shim's log after {most:?}",
            g.id
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `seqio scan` of `target`: (blocks of A, highest seq of A, blocks of B).
fn scan(g: &mut Guest, target: &str) -> (u64, u64, u64) {
    let out = g.vm.ok(&format!("{} scan {target} {BLOCKS}", seqio()));
    let get = |w: &str, k: &str| {
        out.lines()
            .find(|l| l.starts_with(&format!("{w} ")))
            .and_then(|l| l.split_whitespace().find_map(|f| f.strip_prefix(k)))
            .map_or(0, |v| v.parse().expect("number"))
    };
    (get("A", "count="), get("A", "max="), get("B", "count="))
}

async fn create(g: &mut Guest, name: &str, mode: &str, c: &VolumeCapability) -> String {
    g.controller
        .create_volume(create_request(name, mode, 16 * MIB, c, None))
        .await
        .unwrap_or_else(|e| panic!("CreateVolume {name}: {e}"))
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

/// A path loss on A while its writer runs on `vol` (and, with `kill`, A's serving process
/// killed just after): A fences it, B takes it over, A's path comes back and nothing of A's
/// lands.
async fn path_loss(a: &mut Guest, b: &mut Guest, vol: &str, label: &str, kill: bool) {
    let blk = cap(Access::SingleNodeWriter, None);
    let ta = a.use_volume(vol, &blk).await;
    start_writer(a, &ta, 'A');
    let mark = log_mark(a);
    let cut_at = guest::lun_path(&mut a.vm, guest::CUT);
    let cut = Instant::now();
    if kill {
        // As an OOM kill: the serving process goes, its keeper holds the leases on.
        a.vm.ok("pkill -KILL -P $(cat /run/t/csi.pid) csi-shim");
    }
    let fenced = logged_at(a, mark, "fenced:", Duration::from_secs(90)) - cut_at;
    let took = b
        .stage_when_free(vol, &blk, cut, Duration::from_secs(300))
        .await;
    let (acked, failed) = writer(a);
    say(&format!(
        "{label}: path cut; A fenced the volume after {fenced:.1} s; B staged after {:.1} s \
         (host-dead time {HOST_DEAD} s); A's writer: {acked} writes acknowledged, {failed} \
         failed",
        took.as_secs_f64()
    ));
    assert!(
        fenced < f64::from(8 * guest::IO_TIMEOUT) + 10.0,
        "{label}: A fenced {fenced:.1} s after the cut, past sanlock's kill window"
    );
    assert!(
        took >= Duration::from_secs(HOST_DEAD - RENEWAL - 1),
        "{label}: B staged {took:?} after the cut: before sanlock's host-dead time"
    );
    let tb = b.publish(vol, &blk).await;
    let (a_blocks, a_max, _) = scan(b, &tb);
    assert!(
        a_max >= acked && a_blocks == acked.min(BLOCKS),
        "{label}: A's acknowledged writes ({acked}) did not all land: A blocks {a_blocks}, \
         highest seq {a_max}"
    );
    b.vm.ok(&format!("{} mark {tb} B {BLOCKS}", seqio()));
    // A's path comes back while its writer still tries: nothing of A's may land any more.
    guest::lun_path(&mut a.vm, guest::RESTORE);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (acked_after, failed_after) = writer(a);
    assert_eq!(
        (acked_after, scan(b, &tb)),
        (acked, (0, 0, BLOCKS)),
        "{label}: a write of A landed after B took the volume over"
    );
    assert!(failed_after > failed, "{label}: A's writer stopped trying");
    if kill {
        a.reconnect().await;
    }
    // The pod on A ends; kubelet cleans up its view of the fenced volume.
    a.vm.ok("pkill -f 'seqio write'; sleep 0.5");
    a.release(vol).await;
    b.release(vol).await;
}

/// Waits for Probe on `g` to say ready (the lockspace joined again), at most `most`.
async fn until_ready(g: &mut Guest, most: Duration) -> Duration {
    let t = Instant::now();
    while g.ready().await != Some(true) {
        assert!(t.elapsed() < most, "host {} not ready after {most:?}", g.id);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    t.elapsed()
}

#[test]
fn every_failure_of_a_host_ends_with_a_safe_takeover() {
    let test = "every_failure_of_a_host_ends_with_a_safe_takeover";
    if std::env::var("LVMETA_VM").is_ok_and(|v| v == "1") {
        lvmeta_tests::skipped(&format!("{test}: boots VMs itself; runs on the host"));
        return;
    }
    if !privileged(
        test,
        &[
            "qemu-system-x86_64",
            "busybox",
            "depmod",
            "apt-get",
            "dpkg-deb",
            "wdmd",
        ],
    ) {
        return;
    }
    let dir = tempfile::tempdir().expect("dir");
    let (vm_a, vm_b) = guest::two_hosts(dir.path(), 1024 * MIB as u64);
    let lun = dir.path().join("lun.img");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let mut a = guest::start_shim(vm_a, 1, "").await;
        let mut b = guest::start_shim(vm_b, 2, "").await;
        assert_eq!(a.ready().await, Some(true), "A: watchdog armed, ready");

        // 1. Path lost and back, watchdog on.
        let v1 = create(
            &mut b,
            "pvc-cut",
            "linear",
            &cap(Access::SingleNodeWriter, None),
        )
        .await;
        path_loss(&mut a, &mut b, &v1, "1 (watchdog)", false).await;
        let back = until_ready(&mut a, Duration::from_secs(120)).await;
        say(&format!(
            "1: A ready again {:.1} s after its path came back",
            back.as_secs_f64()
        ));

        // 1b. The same with A's serving process killed right after the cut: its keeper holds
        // the leases, and the next serving process fences from the lost leases alone.
        let blk = cap(Access::SingleNodeWriter, None);
        let v1b = create(&mut b, "pvc-killed", "linear", &blk).await;
        path_loss(&mut a, &mut b, &v1b, "1b (serving process killed)", true).await;
        until_ready(&mut a, Duration::from_secs(120)).await;

        // 2. Without a watchdog: refused, then told to run unsafe, A still fences.
        guest::stop_shim(&mut a);
        guest::leave(&mut a.vm, 1);
        guest::stop_sanlock(&mut a.vm);
        guest::start_sanlock(&mut a.vm, false);
        guest::join(&mut a.vm, 1);
        a.restart("").await;
        assert_eq!(
            a.ready().await,
            Some(false),
            "A without a watchdog: not ready"
        );
        let e = a
            .controller
            .create_volume(create_request(
                "pvc-refused",
                "linear",
                16 * MIB,
                &cap(Access::SingleNodeWriter, None),
                None,
            ))
            .await
            .expect_err("a change on a host that cannot be fenced");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
        assert!(e.message().contains("watchdog"), "{e}");
        a.restart("--unsafe-without-fencing").await;
        assert_eq!(a.ready().await, Some(true), "A told to run unsafe");
        let v2 = create(
            &mut b,
            "pvc-cut-nowd",
            "linear",
            &cap(Access::SingleNodeWriter, None),
        )
        .await;
        path_loss(&mut a, &mut b, &v2, "2 (no watchdog)", false).await;
        until_ready(&mut a, Duration::from_secs(120)).await;

        // 3. Path hung: A cannot fence, its watchdog resets it before B may stage.
        guest::stop_shim(&mut a);
        guest::leave(&mut a.vm, 1);
        guest::stop_sanlock(&mut a.vm);
        guest::start_sanlock(&mut a.vm, true);
        guest::join(&mut a.vm, 1);
        a.restart("").await;
        let blk = cap(Access::SingleNodeWriter, None);
        let v3 = create(&mut b, "pvc-hang", "linear", &blk).await;
        let ta = a.use_volume(&v3, &blk).await;
        start_writer(&mut a, &ta, 'A');
        guest::lun_path(&mut a.vm, guest::HANG);
        let hung = Instant::now();
        let reset = {
            let t = Instant::now();
            while a.vm.alive() {
                assert!(t.elapsed() < Duration::from_secs(200), "A was never reset");
                std::thread::sleep(Duration::from_millis(200));
            }
            hung.elapsed()
        };
        let took = b
            .stage_when_free(&v3, &blk, hung, Duration::from_secs(300))
            .await;
        say(&format!(
            "3: path hung; A reset by its watchdog after {:.1} s; B staged after {:.1} s \
             (host-dead time {HOST_DEAD} s)",
            reset.as_secs_f64(),
            took.as_secs_f64()
        ));
        assert!(reset < took, "B staged before A's watchdog reset A");
        assert!(
            reset >= Duration::from_secs(8 * u64::from(guest::IO_TIMEOUT)),
            "A reset {reset:?} after the hang: before sanlock's kill window"
        );
        let tb = b.publish(&v3, &blk).await;
        b.vm.ok(&format!("{} mark {tb} B {BLOCKS}", seqio()));
        assert_eq!(scan(&mut b, &tb), (0, 0, BLOCKS));
        b.release(&v3).await;

        // 4. The controller's host lost in the middle of changes, with a thin volume staged.
        drop(a);
        let mut vm_a = guest::boot("a", &lun, dir.path());
        guest::join(&mut vm_a, 1);
        let mut a = guest::start_shim(vm_a, 1, "").await;
        let rwo4 = cap(Access::SingleNodeWriter, Some("ext4"));
        let thin = create(&mut a, "pvc-thin", "thin", &rwo4).await;
        let t = a.use_volume(&thin, &rwo4).await;
        let synced = a.vm.ok(&format!(
            "set -e\nhead -c 1048576 /dev/urandom >{t}/data\nsync {t}/data\nsha256sum <{t}/data"
        ));
        let ops = controller_stream();
        let mut done = 0;
        for (i, op) in ops.iter().enumerate() {
            if i == ops.len() / 2 {
                break;
            }
            apply(&mut a, op).await.expect("a change on A");
            done += 1;
        }
        // The next changes are in flight when A goes.
        let mut inflight = Vec::new();
        for op in &ops[done..done + 4] {
            let mut c = a.controller.clone();
            let op = op.clone();
            inflight.push(tokio::spawn(async move { apply_with(&mut c, &op).await }));
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        a.vm.power_off();
        let off = Instant::now();
        for h in inflight {
            let _ = h.await;
        }
        // B's controller replays the whole stream, each change until it is done.
        for op in &ops {
            loop {
                match apply(&mut b, op).await {
                    Ok(()) => break,
                    Err(e) if matches!(e.code(), Code::Unavailable | Code::Aborted) => {
                        assert!(off.elapsed() < Duration::from_secs(300), "{op:?}: {e}");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    Err(e) => panic!("{op:?} on B: {e}"),
                }
            }
        }
        let replayed = off.elapsed();
        let took = b
            .stage_when_free(&thin, &rwo4, off, Duration::from_secs(300))
            .await;
        say(&format!(
            "4: A powered off mid-changes; B replayed the stream in {:.1} s; B staged the thin \
             volume after {:.1} s (host-dead time {HOST_DEAD} s)",
            replayed.as_secs_f64(),
            took.as_secs_f64()
        ));
        assert!(took >= Duration::from_secs(HOST_DEAD - RENEWAL - 1));
        let tb = b.publish(&thin, &rwo4).await;
        assert_eq!(
            b.vm.ok(&format!("sha256sum <{tb}/data")),
            synced,
            "the thin volume after takeover"
        );
        b.release(&thin).await;
        let listed: BTreeSet<String> = b
            .controller
            .list_volumes(ListVolumesRequest::default())
            .await
            .expect("ListVolumes")
            .into_inner()
            .entries
            .into_iter()
            .filter_map(|e| e.volume.map(|v| v.volume_id))
            .collect();
        let mut want: BTreeSet<String> =
            [&v1, &v1b, &v2, &v3, &thin].into_iter().cloned().collect();
        for op in &ops {
            match op {
                Op::Create(n) => want.insert(format!("vg/{n}")),
                Op::Delete(n) => want.remove(&format!("vg/{n}")),
            };
        }
        assert_eq!(listed, want, "volumes after the controller's host was lost");
        b.vm.ok(&format!(
            "lvm vgck --devices {LUN} --config global/use_lvmlockd=1 vg 2>&1"
        ));
        let names = b.vm.ok(&format!(
            "lvm lvs --noheadings -a -o lv_name --devices {LUN} --config global/use_lvmlockd=1 vg"
        ));
        let mut seen = BTreeSet::new();
        for n in names.split_whitespace() {
            assert!(seen.insert(n.to_owned()), "LV {n} twice: {names}");
        }
        b.assert_nothing_mounted();
    });
}

/// One change of the controller stream.
#[derive(Debug, Clone)]
enum Op {
    Create(String),
    Delete(String),
}

/// Creations of 12 linear volumes, every third deleted again right after.
fn controller_stream() -> Vec<Op> {
    let mut ops = Vec::new();
    for i in 0..12 {
        let n = format!("pvc-c{i}");
        ops.push(Op::Create(n.clone()));
        if i % 3 == 0 {
            ops.push(Op::Delete(n));
        }
    }
    ops
}

async fn apply(g: &mut Guest, op: &Op) -> Result<(), tonic::Status> {
    apply_with(&mut g.controller, op).await
}

async fn apply_with(
    c: &mut csi_shim::csi::controller_client::ControllerClient<tonic::transport::Channel>,
    op: &Op,
) -> Result<(), tonic::Status> {
    match op {
        Op::Create(n) => c
            .create_volume(create_request(
                n,
                "linear",
                8 * MIB,
                &cap(Access::SingleNodeWriter, None),
                None,
            ))
            .await
            .map(drop),
        Op::Delete(n) => c
            .delete_volume(DeleteVolumeRequest {
                volume_id: format!("vg/{n}"),
                ..Default::default()
            })
            .await
            .map(drop),
    }
}
