//! Two real hosts on one LUN: two QEMU guests (`tests/vm/run`, Debian's kernel with
//! device-mapper), each with sanlock (io_timeout 2 s) and its watchdog (wdmd over softdog)
//! and `csi-shim`, sharing one raw image as their LUN with a shared VG on it. Driven from
//! this machine through each guest's forwarded CSI socket and its agent
//! ([`lvmeta_tests::guest`]):
//! - an RWX linear block volume written on A is read on B;
//! - an RWO ext4 volume staged on A is refused on B, then handed over with its data;
//! - a thin volume staged on A is snapshotted through B's controller (A's node cuts it),
//!   unstaged on A and staged on B with all its data (B's kernel reads the pool metadata A's
//!   kernel wrote), and its snapshot restored on B shows the data at the cut;
//! - an RWX thin block volume staged on A then B: A's node serves it over NBD across the
//!   guests' own QEMU link (IPv6 link-local, `--nbd-ip`) and B's node attaches it with the
//!   kernel NBD client; each side reads the other's writes; it grows while staged on both
//!   (the attached node waits for the serving one); hostile clients with the pool's
//!   secret (a wrong secret, a host with no slot, an LV not staged there, the wrong
//!   address), garbage and a flood are refused; it is retuned (ControllerModifyVolume)
//!   while staged on both; a reader-only (ROX) client may read and not write on the
//!   server; B's plugin restarted while its wrapper is held releases it; then
//!   KubeVirt's migration: A unstages while B writes, the pool moves to B, B's writer sees
//!   no error and B keeps no NBD device;
//! - A serving an RWX thin block volume loses its path to the LUN while B writes to it: A
//!   closes its export before it fences the LV, B's probe finds the export gone and B
//!   takes the pool once sanlock counts A's lease free; B's writer sees a pause, never an
//!   error; A's path comes back and A is ready again by itself;
//! - A serving an RWX thin block volume is powered off while B writes to it: B takes the
//!   pool once sanlock counts A dead, and B's writer sees a pause, never an error.
//!
//! Hosts that fail (a path cut or hung, a power-off): `vm_fencing.rs`. Runs on a machine
//! with QEMU (not inside a VM); needs qemu-system-x86, busybox-static, kmod and apt-get
//! (the kernel package), and prints SKIPPED without them.

use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use lvmeta_tests::csi_hosts::{cap, create_request, MIB};
use lvmeta_tests::guest::{self, Guest, LUN};
use lvmeta_tests::{privileged, workspace_bin};
use std::collections::HashMap;
use tonic::Code;

async fn create(h: &mut Guest, name: &str, mode: &str, c: &VolumeCapability) -> String {
    create_from(h, name, mode, c, None).await
}

async fn create_from(
    h: &mut Guest,
    name: &str,
    mode: &str,
    c: &VolumeCapability,
    source: Option<volume_content_source::Type>,
) -> String {
    h.controller
        .create_volume(create_request(name, mode, 64 * MIB, c, source))
        .await
        .unwrap_or_else(|e| panic!("CreateVolume {name}: {e}"))
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

/// Writes 1 MiB of random bytes to `file` in the guest, synced; returns their sha256.
fn write_file(h: &mut Guest, file: &str) -> String {
    h.vm.ok(&format!(
        "set -e\nhead -c 1048576 /dev/urandom >{file}\nsync {file}\nsha256sum <{file}"
    ))
}

fn sum_file(h: &mut Guest, file: &str) -> String {
    h.vm.ok(&format!("sha256sum <{file}"))
}

/// Planned handovers of one RWX thin volume, back and forth between the guests.
const HANDOVERS: usize = 4;

/// `to` (staged as a client, published at `target`) writes while `from` (serving) unstages
/// `vol`: the pool must come to `to` with no failed write, leaving nothing of `vol` on
/// `from`. Returns the writer's longest write in ms (the pause).
async fn migrate(from: &mut Guest, to: &mut Guest, vol: &str, target: &str, seqio: &str) -> u64 {
    to.vm.ok(&format!(
        "setsid {seqio} write {target} W 512 /run/t/seqio.status >/run/t/seqio.log 2>&1 \
         </dev/null &\necho $! >/run/t/seqio.pid\nsleep 1"
    ));
    from.release(vol).await;
    let dm = format!(
        "/dev/mapper/{}",
        vol.replace("vg/", "vg-").replace("pvc-", "pvc--")
    );
    let moved = to.vm.ok(&format!(
        "for i in $(seq 300); do \
           n=$(cat /sys/block/nbd*/backend 2>/dev/null | grep -c '^lvmeta:'); \
           [ \"$n\" = 0 ] && [ -e {dm} ] && echo moved && exit 0; \
           sleep 0.1; done; echo stuck"
    ));
    assert_eq!(moved.trim(), "moved", "the pool came to host {}", to.id);
    to.vm.ok("sleep 1");
    let status = to.vm.ok(
        "p=$(cat /run/t/seqio.pid); kill $p; while kill -0 $p 2>/dev/null; do sleep 0.1; done\n\
         cat /run/t/seqio.status",
    );
    assert!(
        status.contains("failed=0 "),
        "host {}'s writer: {status}",
        to.id
    );
    let scan = to.vm.ok(&format!("{seqio} scan {target} 512"));
    assert!(scan.contains("W count="), "host {}'s writes: {scan}", to.id);
    let wrapper = from.vm.ok(&format!(
        "cat /sys/block/dm-*/dm/name | grep -c '^lvmeta-h{}-' || true",
        from.id
    ));
    assert_eq!(wrapper.trim(), "0", "host {}'s wrapper gone", from.id);
    let gone = from
        .vm
        .ok(&format!("[ -e {dm} ] && echo active || echo gone"));
    assert_eq!(gone.trim(), "gone", "the thin LV left host {}", from.id);
    status
        .split_whitespace()
        .find_map(|w| w.strip_prefix("longest_ms="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no longest_ms in {status:?}"))
}

/// B runs a writer (`seqio write`, tag `tag`) on its device `tb` of a volume A serves while
/// `fail` happens to A; waits until B serves the pool itself (no NBD device left, the
/// thin LV `vg-<dm>` active on B) and checks that the writer went on with no failed write.
/// Returns how long B took and the writer's last status.
fn survives(
    b: &mut Guest,
    tb: &str,
    seqio: &str,
    tag: &str,
    dm: &str,
    fail: impl FnOnce(),
) -> (std::time::Duration, String) {
    let run = format!("/run/t/{tag}");
    b.vm.ok(&format!(
        "setsid {seqio} write {tb} {tag} 512 {run}.status >{run}.log 2>&1 </dev/null &\n\
         echo $! >{run}.pid\nsleep 2"
    ));
    let before = b.vm.ok(&format!("cat {run}.status"));
    fail();
    let t0 = std::time::Instant::now();
    let moved = b.vm.ok(&format!(
        "for i in $(seq 3000); do \
           n=$(cat /sys/block/nbd*/backend 2>/dev/null | grep -c '^lvmeta:'); \
           [ \"$n\" = 0 ] && [ -e /dev/mapper/vg-{dm} ] && echo moved && exit 0; \
           sleep 0.1; done; echo stuck"
    ));
    assert_eq!(moved.trim(), "moved", "B took the pool of {dm}");
    let took = t0.elapsed();
    b.vm.ok("sleep 2");
    let status = b.vm.ok(&format!(
        "p=$(cat {run}.pid); kill $p; while kill -0 $p 2>/dev/null; do sleep 0.1; done\n\
         cat {run}.status"
    ));
    assert!(
        status.contains("failed=0 "),
        "B's writer saw errors: {status}"
    );
    let acked = |st: &str| -> u64 {
        st.split_whitespace()
            .find_map(|w| w.strip_prefix("acked="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no acked= in {st:?}"))
    };
    assert!(
        acked(&status) > acked(&before) + 32,
        "B's writer went on after the takeover: {before} then {status}"
    );
    (took, status)
}

/// Hostile clients of A's NBD listener while A serves `vol` to B: from B (the storage
/// network's other end) and from A itself, holding the pool's real secret read from the
/// LUN. Only B's own name from B's address reaches the volume; garbage and a flood of
/// stalled handshakes are closed, and B's kernel client (`tb`) keeps writing meanwhile.
fn hostile_clients(a: &mut Guest, b: &mut Guest, vol: &str, tb: &str, seqio: &str) {
    let tool = workspace_bin("lvmeta-tests", "nbd-hostile")
        .display()
        .to_string();
    let (a_ip, b_ip) = (
        guest::link_addr(1, &a.vm.link_interface()),
        guest::link_addr(2, &b.vm.link_interface()),
    );
    let addr = format!("[{a_ip}]:10809");
    let lv = vol.trim_start_matches("vg/");
    let name = |h: &mut Guest, host: u64, other: &str| {
        h.vm.ok(&format!("{tool} name {LUN} vg {lv} {host} {other}"))
            .trim()
            .to_owned()
    };
    let b_name = name(b, 2, "");
    let go =
        |h: &mut Guest, from: &str, n: &str| h.vm.ok(&format!("{tool} go '{addr}' '{from}' '{n}'"));
    let ok = go(b, &b_ip, &b_name);
    assert!(
        ok.contains("admitted") && ok.contains("read=ok"),
        "B's own name: {ok}"
    );
    let mut wrong_secret = b_name.clone();
    let last = if wrong_secret.ends_with('0') {
        "1"
    } else {
        "0"
    };
    wrong_secret.replace_range(wrong_secret.len() - 1.., last);
    let no_slot = name(b, 7, "");
    let stolen = name(b, 2, "pvc-thin");
    for (what, on_a, n) in [
        ("a wrong secret", false, &wrong_secret),
        ("a host with no slot", false, &no_slot),
        ("an LV B did not stage", false, &stolen),
        ("B's name from A's address", true, &b_name),
    ] {
        let out = match on_a {
            true => go(a, &a_ip, n),
            false => go(b, &b_ip, n),
        };
        assert!(out.starts_with("refused"), "{what}: {out}");
        eprintln!("vm_two_hosts: hostile client, {what}: {}", out.trim());
    }
    let junk = b.vm.ok(&format!("{tool} garbage '{addr}' '{b_ip}'"));
    assert_eq!(junk.trim(), "closed", "garbage after the greeting");
    // More stalled handshakes than the listener takes, while B's kernel client writes.
    b.vm.ok(&format!(
        "setsid {tool} flood '{addr}' '{b_ip}' 300 8 >/run/t/flood.out 2>&1 </dev/null &
sleep 2"
    ));
    b.vm.ok(&format!("{seqio} mark {tb} F 64"));
    let flood = b.vm.ok(
        "for i in $(seq 300); do [ -s /run/t/flood.out ] && break; sleep 0.1; done
cat /run/t/flood.out",
    );
    eprintln!("vm_two_hosts: hostile flood: {}", flood.trim());
    let count = |k: &str| -> usize {
        flood
            .split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {flood:?}"))
    };
    assert!(count("opened=") >= 256, "{flood}");
    assert_eq!(
        count("closed_early="),
        count("opened="),
        "stalled handshakes closed: {flood}"
    );
    let on_b = b.vm.ok(&format!("{seqio} scan {tb} 64"));
    assert!(
        on_b.contains("F count=64"),
        "B's writes during the flood: {on_b}"
    );
    let again = go(b, &b_ip, &b_name);
    assert!(
        again.contains("read=ok"),
        "B's own name after the flood: {again}"
    );
    // Another host's claim lands on B's slot (as when a host counted B gone): B claims
    // another one within seconds, and A admits B's connections again.
    let taken = b.vm.ok(&format!("{tool} steal {LUN} vg {lv} 2"));
    assert!(!taken.trim().is_empty(), "B had a slot of {lv}");
    let back = b.vm.ok(&format!(
        "for i in $(seq 100); do s=$({tool} slots {LUN} vg {lv}); \
           case \" $s \" in *' 2@'*) break;; esac; sleep 0.2; done; echo \"$s\""
    ));
    assert!(back.contains("2@"), "B claimed no slot again: {back}");
    assert!(
        !taken
            .split_whitespace()
            .any(|i| back.contains(&format!("2@{i}"))),
        "B's slot again where it was taken ({taken}): {back}"
    );
    let readmitted = go(b, &b_ip, &b_name);
    assert!(
        readmitted.contains("read=ok"),
        "B's own name after its slot was taken: {readmitted}"
    );
    eprintln!(
        "vm_two_hosts: B's slot {} taken, B's slots now {}",
        taken.trim(),
        back.trim()
    );
}

#[test]
fn two_hosts_share_and_hand_over_volumes_on_one_lun() {
    let test = "two_hosts_share_and_hand_over_volumes_on_one_lun";
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
    let (vm_a, vm_b) = guest::two_hosts(dir.path(), 1536 * MIB as u64);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        // A short request timeout: a request in flight when a server process ends is
        // retried after it (the kernel requeues it only then).
        let nbd_a = format!(
            "--nbd-ip {} --nbd-timeout 10",
            guest::link_addr(1, &vm_a.link_interface())
        );
        let nbd_b = format!(
            "--nbd-ip {} --nbd-timeout 10",
            guest::link_addr(2, &vm_b.link_interface())
        );
        let mut a = guest::start_shim(vm_a, 1, &nbd_a).await;
        let mut b = guest::start_shim(vm_b, 2, &nbd_b).await;
        let rwx_block = cap(Access::MultiNodeMultiWriter, None);
        let rwo4 = cap(Access::SingleNodeWriter, Some("ext4"));

        // RWX block: A's writes, read on B.
        let rwx = create(&mut a, "pvc-rwx", "linear", &rwx_block).await;
        let ta = a.use_volume(&rwx, &rwx_block).await;
        let tb = b.use_volume(&rwx, &rwx_block).await;
        let wrote = a.vm.ok(&format!(
            "set -e\nhead -c 65536 /dev/urandom >/run/t/pattern\n\
             dd if=/run/t/pattern of={ta} bs=65536 seek=16 conv=notrunc,fsync oflag=direct 2>/dev/null\n\
             sha256sum </run/t/pattern"
        ));
        let read = b.vm.ok(&format!(
            "dd if={tb} bs=65536 skip=16 count=1 iflag=direct 2>/dev/null | sha256sum"
        ));
        assert_eq!(read, wrote, "B does not read A's block writes");
        a.release(&rwx).await;
        b.release(&rwx).await;

        // RWO ext4: refused on B while staged on A, then handed over with its data.
        let ext4 = create(&mut b, "pvc-ext4", "linear", &rwo4).await;
        let t = a.use_volume(&ext4, &rwo4).await;
        let sum = write_file(&mut a, &format!("{t}/data"));
        let e = b.stage(&ext4, &rwo4).await.expect_err("staged on A");
        assert!(
            matches!(e.code(), Code::FailedPrecondition | Code::Aborted),
            "{e}"
        );
        a.release(&ext4).await;
        let t = b.use_volume(&ext4, &rwo4).await;
        assert_eq!(sum_file(&mut b, &format!("{t}/data")), sum, "handed over");
        b.release(&ext4).await;

        // Thin: staged on A, snapshotted through B's controller (A's node cuts it),
        // overwritten, handed to B, restored on B from the snapshot.
        let thin = create(&mut b, "pvc-thin", "thin", &rwo4).await;
        let t = a.use_volume(&thin, &rwo4).await;
        let at_cut = write_file(&mut a, &format!("{t}/data"));
        b.controller
            .create_snapshot(CreateSnapshotRequest {
                source_volume_id: thin.clone(),
                name: "snap-thin".into(),
                ..Default::default()
            })
            .await
            .expect("CreateSnapshot through B of a volume staged on A");
        let later = write_file(&mut a, &format!("{t}/data"));
        a.release(&thin).await;
        let t = b.use_volume(&thin, &rwo4).await;
        assert_eq!(sum_file(&mut b, &format!("{t}/data")), later, "thin on B");
        let restored = create_from(
            &mut b,
            "pvc-restored",
            "thin",
            &rwo4,
            Some(volume_content_source::Type::Snapshot(
                volume_content_source::SnapshotSource {
                    snapshot_id: "vg/snap-thin".into(),
                },
            )),
        )
        .await;
        let tr = b.use_volume(&restored, &rwo4).await;
        assert_eq!(sum_file(&mut b, &format!("{tr}/data")), at_cut, "restore");
        b.release(&restored).await;
        b.release(&thin).await;

        // RWX thin block across the guests' own link: A stages first, takes the pool and
        // serves the volume over NBD on its link-local address; B's node attaches it with
        // its kernel NBD client. Each side reads the other's writes through the CSI
        // devices; A cannot unstage while B is attached.
        let nbd = create(&mut b, "pvc-nbd", "thin", &rwx_block).await;
        let ta = a.use_volume(&nbd, &rwx_block).await;
        let tb = b.use_volume(&nbd, &rwx_block).await;
        let seqio = workspace_bin("lvmeta-tests", "seqio").display().to_string();
        b.vm.ok(&format!("{seqio} mark {tb} B 256"));
        let on_a = a.vm.ok(&format!("{seqio} scan {ta} 256"));
        assert!(on_a.contains("B count=256 max=256"), "A reads B's writes: {on_a}");
        a.vm.ok(&format!("{seqio} mark {ta} A 128"));
        let on_b = b.vm.ok(&format!("{seqio} scan {tb} 256"));
        assert!(
            on_b.contains("A count=128 max=128") && on_b.contains("B count=128 max=256"),
            "B reads A's writes through NBD: {on_b}"
        );
        // Grown while staged on both: B's NodeExpandVolume waits (UNAVAILABLE) until A's
        // grew the export; then both devices show the new size and B writes past the old
        // end, read on A.
        b.controller
            .controller_expand_volume(ControllerExpandVolumeRequest {
                volume_id: nbd.clone(),
                capacity_range: Some(CapacityRange {
                    required_bytes: 128 * MIB,
                    limit_bytes: 0,
                }),
                volume_capability: Some(rwx_block.clone()),
                ..Default::default()
            })
            .await
            .expect("ControllerExpandVolume while staged on two nodes");
        let grow = |path: &str| NodeExpandVolumeRequest {
            volume_id: nbd.clone(),
            volume_path: path.to_owned(),
            capacity_range: Some(CapacityRange {
                required_bytes: 128 * MIB,
                limit_bytes: 0,
            }),
            volume_capability: Some(rwx_block.clone()),
            ..Default::default()
        };
        let e = b
            .node
            .node_expand_volume(grow(&tb))
            .await
            .expect_err("A has not grown its export yet");
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        a.node
            .node_expand_volume(grow(&ta))
            .await
            .expect("NodeExpandVolume on the serving node");
        b.node
            .node_expand_volume(grow(&tb))
            .await
            .expect("NodeExpandVolume on the attached node");
        for (h, t) in [(&mut a, &ta), (&mut b, &tb)] {
            let size = h.vm.ok(&format!("blockdev --getsize64 {t}"));
            assert_eq!(size.trim(), (128 * MIB).to_string(), "size on host {}", h.id);
        }
        let wrote = b.vm.ok(&format!(
            "set -e\nhead -c 65536 /dev/urandom >/run/t/grown\n\
             dd if=/run/t/grown of={tb} bs=65536 seek=1600 conv=notrunc,fsync oflag=direct 2>/dev/null\n\
             sha256sum </run/t/grown"
        ));
        let read = a.vm.ok(&format!(
            "dd if={ta} bs=65536 skip=1600 count=1 iflag=direct 2>/dev/null | sha256sum"
        ));
        assert_eq!(read, wrote, "A reads B's write past the old end");
        // A snapshot through B's controller while staged on both (A's node cuts it); the
        // volume itself cannot be deleted while staged.
        b.controller
            .create_snapshot(CreateSnapshotRequest {
                source_volume_id: nbd.clone(),
                name: "snap-nbd".into(),
                ..Default::default()
            })
            .await
            .expect("CreateSnapshot while staged on two nodes");
        let e = b
            .controller
            .delete_volume(DeleteVolumeRequest {
                volume_id: nbd.clone(),
                ..Default::default()
            })
            .await
            .expect_err("DeleteVolume of a volume staged on two nodes");
        eprintln!("vm_two_hosts: DeleteVolume while staged: {e}");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
        assert!(e.message().contains("host ids [2]"), "names B: {e}");
        let served = a.vm.ok("cat /sys/block/dm-*/dm/name | grep -c '^lvmeta-h1-'");
        assert_eq!(served.trim(), "2", "A's wrapper (upper and lower)");
        let attached = b.vm.ok("cat /sys/block/nbd*/backend 2>/dev/null | grep -c '^lvmeta:'");
        assert_eq!(attached.trim(), "1", "B's kernel NBD device");
        // A read-only stager is refused at once for a thin filesystem on several nodes.
        let rox_fs = cap(Access::MultiNodeReaderOnly, Some("ext4"));
        let e = b.stage(&nbd, &rox_fs).await.expect_err("thin fs on several nodes");
        assert_eq!(e.code(), Code::InvalidArgument, "{e}");
        hostile_clients(&mut a, &mut b, &nbd, &tb, &seqio);
        // New pool settings through B's controller while staged on both: A's node, which
        // holds the pool, reloads its kernel pool.
        b.controller
            .controller_modify_volume(ControllerModifyVolumeRequest {
                volume_id: nbd.clone(),
                mutable_parameters: HashMap::from([("zero".to_owned(), "false".to_owned())]),
                ..Default::default()
            })
            .await
            .expect("ControllerModifyVolume while staged on two nodes");
        let table = a.vm.ok("dmsetup table vg-pvc--nbd--pool-tpool");
        assert!(table.contains("skip_block_zeroing"), "A's pool: {table}");
        // A reader-only staging is read-only on the server too: B's own name, from B's
        // address, reads but cannot write.
        let rox = cap(Access::MultiNodeReaderOnly, None);
        let ro_vol = create(&mut b, "pvc-rox", "thin", &rox).await;
        a.use_volume(&ro_vol, &rox).await;
        b.use_volume(&ro_vol, &rox).await;
        let ro_try = b.vm.ok(&format!(
            "n=$({tool} name {LUN} vg pvc-rox 2)\n{tool} go --write '[{a_ip}]:10809' '{b_ip}' \"$n\"",
            tool = workspace_bin("lvmeta-tests", "nbd-hostile").display(),
            a_ip = guest::link_addr(1, &a.vm.link_interface()),
            b_ip = guest::link_addr(2, &b.vm.link_interface()),
        ));
        assert!(
            ro_try.contains("read=ok") && ro_try.contains("write=error 1"),
            "a reader-only client's write (EPERM): {ro_try}"
        );
        eprintln!("vm_two_hosts: reader-only client: {}", ro_try.trim());
        b.release(&ro_vol).await;
        a.release(&ro_vol).await;
        // A's node plugin restarts while B writes: A serves its volume again under a new
        // epoch, B reconnects, and B's writer sees a pause, no error.
        b.vm.ok(&format!(
            "setsid {seqio} write {tb} R 512 /run/t/restart.status >/run/t/restart.log 2>&1 \
             </dev/null &\necho $! >/run/t/restart.pid\nsleep 1"
        ));
        a.restart(&nbd_a).await;
        let before = b.vm.ok("sleep 1; cat /run/t/restart.status");
        let status = b.vm.ok(
            "b=$(sed 's/.*acked=\\([0-9]*\\).*/\\1/' /run/t/restart.status)\n\
             for i in $(seq 600); do \
               n=$(sed 's/.*acked=\\([0-9]*\\).*/\\1/' /run/t/restart.status); \
               [ $n -gt $((b + 64)) ] && break; sleep 0.1; done\n\
             p=$(cat /run/t/restart.pid); kill $p; while kill -0 $p 2>/dev/null; do sleep 0.1; done\n\
             cat /run/t/restart.status",
        );
        assert!(
            status.contains("failed=0 "),
            "B's writer across A's restart: {before} then {status}"
        );
        eprintln!("vm_two_hosts: B's writer across A's plugin restart: {status}");
        // B's plugin restarts with its wrapper held (as when it stops in the middle of a
        // handover): the new process reads the hold and releases it, A serving on.
        let upper = b
            .vm
            .ok("cd /dev/mapper && ls | grep '^lvmeta-h2-' | grep -v -- '-lower$'")
            .trim()
            .to_owned();
        b.vm.ok(&format!("dmsetup suspend --noflush {upper}"));
        b.restart(&nbd_b).await;
        let state = b.vm.ok(&format!(
            "for i in $(seq 300); do dmsetup info {upper} | grep -q 'State: *ACTIVE' && \
             echo released && exit 0; sleep 0.1; done; dmsetup info {upper}"
        ));
        assert_eq!(state.trim(), "released", "B's held wrapper after B's restart");
        b.vm.ok(&format!("timeout 60 {seqio} mark {tb} S 8"));

        // KubeVirt's migration, back and forth: the target stages (above, B), the source
        // unstages while the target writes. Each time the pool moves to the target with no
        // I/O error and no NBD hop left; the writer's longest write is the pause.
        let mut pauses = vec![migrate(&mut a, &mut b, &nbd, &tb, &seqio).await];
        for round in 0..HANDOVERS - 1 {
            let (from, to) = match round % 2 {
                0 => (&mut b, &mut a),
                _ => (&mut a, &mut b),
            };
            let t = to.use_volume(&nbd, &rwx_block).await;
            pauses.push(migrate(from, to, &nbd, &t, &seqio).await);
        }
        pauses.sort_unstable();
        eprintln!(
            "vm_two_hosts: planned handover pauses (longest write, ms): {pauses:?}, p50 {} max {}",
            pauses[pauses.len() / 2],
            pauses[pauses.len() - 1]
        );
        let last = if HANDOVERS.is_multiple_of(2) { &mut a } else { &mut b };
        last.release(&nbd).await;
        for h in [&mut a, &mut b] {
            let left = h.vm.ok(&format!(
                "cat /sys/block/dm-*/dm/name | grep -c '^lvmeta-h{}-' || true",
                h.id
            ));
            assert_eq!(left.trim(), "0", "host {}'s wrapper gone", h.id);
        }

        for h in [&mut a, &mut b] {
            h.assert_nothing_mounted();
        }
        // Stock lvm2 on B finds the VG clean.
        b.vm.ok(&format!(
            "lvm vgck --devices {LUN} --config global/use_lvmlockd=1 vg 2>&1"
        ));

        // A's path to the LUN cut under a writer on B: A fences its thin LV, closing its
        // export first (B's requests get no reply rather than A's I/O errors); B's probe
        // finds the export gone and B takes the pool once sanlock counts A's lease free
        // (its host-dead time). B's writer sees a pause, no error. A's path comes back and
        // A joins the lockspace again by itself.
        let cut = create(&mut b, "pvc-cut", "thin", &rwx_block).await;
        a.use_volume(&cut, &rwx_block).await;
        let tb = b.use_volume(&cut, &rwx_block).await;
        let (took, status) = survives(&mut b, &tb, &seqio, "C", "pvc--cut", || {
            guest::lun_path(&mut a.vm, guest::CUT);
        });
        eprintln!("vm_two_hosts: B served the pool {took:?} after A's path was cut; B's writer: {status}");
        let closed = a.vm.ok("grep -c 'NBD export closed' /run/lvmeta-vm/csi.log || true");
        assert_ne!(closed.trim(), "0", "A closed its export before fencing");
        guest::lun_path(&mut a.vm, guest::RESTORE);
        let t = std::time::Instant::now();
        while a.ready().await != Some(true) {
            assert!(t.elapsed() < std::time::Duration::from_secs(120), "A not ready again");
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        a.release(&cut).await;
        b.release(&cut).await;

        // The serving VM powered off under a writer on B: B's I/O waits in its NBD device
        // until sanlock counts A dead, then B takes the pool (its device's queued I/O
        // completes through its own export) and the writer goes on without an error.
        let dies = create(&mut b, "pvc-dies", "thin", &rwx_block).await;
        a.use_volume(&dies, &rwx_block).await;
        let tb = b.use_volume(&dies, &rwx_block).await;
        let (took, _) = survives(&mut b, &tb, &seqio, "B", "pvc--dies", || a.vm.power_off());
        eprintln!("vm_two_hosts: B served the pool {took:?} after A's power-off");
        let scan = b.vm.ok(&format!("{seqio} scan {tb} 512"));
        assert!(scan.contains("B count=512"), "B's writes on B: {scan}");
        b.release(&dies).await;
    });
}
