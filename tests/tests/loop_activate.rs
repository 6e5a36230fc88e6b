//! Privileged: LVs activated as loop devices over their PV (the backend for kernels without
//! device-mapper): the bytes written through the device land at the LV's extents as stock
//! lvm2 reports them, activation is idempotent, read-only is enforced, a mounted LV is not
//! deactivated, a grown LV's device grows on refresh, and thin LVs are refused naming the
//! missing kernel feature.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::process::Command;

use lvmeta::activate::loopdev::LoopBackend;
use lvmeta::activate::{ActivateError, Backend};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::session::Session;
use lvmeta::Error;
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::{privileged, UnbindOver};

const MIB: u64 = 1 << 20;

fn dev_bytes(dev: &Path) -> u64 {
    let name = dev.file_name().and_then(|n| n.to_str()).expect("name");
    let sectors: u64 = std::fs::read_to_string(format!("/sys/block/{name}/size"))
        .expect("sysfs size")
        .trim()
        .parse()
        .expect("size");
    sectors * 512
}

/// First byte of `vg/lv` on its PV, from stock lvm2's reports.
fn lvm2_offset(sb: &Sandbox, lv: &str) -> u64 {
    let row = sb.report_words("lvs", "seg_pe_ranges,vg_extent_size", &[lv]);
    let mut words = row.iter();
    let range = words.next().expect("pe range");
    let ext: u64 = words.next().expect("extent size").parse().expect("extent");
    let first_pe: u64 = range
        .rsplit(':')
        .next()
        .and_then(|r| r.split('-').next())
        .expect("first pe")
        .parse()
        .expect("pe");
    let pe_start: u64 = sb
        .report_words("pvs", "pe_start", &[])
        .concat()
        .parse()
        .expect("pe_start");
    pe_start + first_pe * ext
}

#[test]
fn loop_activation_maps_lvs_onto_their_extents() {
    if !privileged(
        "loop_activation_maps_lvs_onto_their_extents",
        &["losetup", "lvs", "mkfs.ext4", "mount", "umount", "fsfreeze"],
    ) {
        return;
    }
    let Some(backend) = LoopBackend::probe() else {
        panic!("no /dev/loop-control");
    };
    let sb = Sandbox::new(&[128 * MIB], 512);
    let lun = sb.loops[0].clone();
    let _unbind = UnbindOver(lun.clone());
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &lun]);
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "first", "-L", "4m", "vg"]);
    sb.lvmeta_ok(
        "lvcreate",
        &["-an", "--type", "thin-pool", "-n", "pool", "-L", "8m", "vg"],
    );
    sb.lvmeta_ok(
        "lvcreate",
        &["-an", "-n", "t", "-V", "16m", "--thinpool", "pool", "vg"],
    );
    // Last, so that free extents follow it and it can grow in one piece.
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "a", "-L", "8m", "vg"]);
    let dev = FileDevice::open_rw(Path::new(&lun)).expect("open lun");
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_lock_dir(sb.lock_dir());

    let act = s
        .activate("vg", "a", false, false, &backend)
        .expect("activate");
    assert_eq!(dev_bytes(&act.device), 8 * MIB);
    // Written through the LV's device, found where lvm2 says the LV is.
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&act.device)
            .expect("open lv");
        f.seek(SeekFrom::Start(4096)).expect("seek");
        f.write_all(&pattern).expect("write");
        f.sync_all().expect("sync");
    }
    let at = lvm2_offset(&sb, "vg/a");
    let raw = FileDevice::open(Path::new(&lun)).expect("lun");
    let mut back = vec![0u8; 4096];
    raw.read_at(at + 4096, &mut back).expect("read lun");
    assert_eq!(
        back, pattern,
        "LV bytes not at lvm2's extents (offset {at})"
    );
    // Again: the same device; read-only while read-write: refused.
    let again = s
        .activate("vg", "a", false, false, &backend)
        .expect("again");
    assert_eq!(again.device, act.device);
    drop(again);
    assert!(matches!(
        s.activate("vg", "a", false, true, &backend),
        Err(Error::Activate(ActivateError::Io { .. }))
    ));
    // Mounted: deactivation refused, the activation handed back.
    let st = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&act.device)
        .status()
        .expect("mkfs");
    assert!(st.success());
    let mnt = tempfile::tempdir().expect("dir");
    let st = Command::new("mount")
        .arg(&act.device)
        .arg(mnt.path())
        .status()
        .expect("mount");
    assert!(st.success());
    let e = act.deactivate(&backend).expect_err("mounted");
    assert!(e.to_string().contains("in use"), "{e}");
    // Frozen (as the node freezes a filesystem around a snapshot): a write waits for the
    // thaw.
    frozen_writes_wait(mnt.path());
    // Grown while active (and mounted): the device follows on refresh.
    s.update("vg", "lvextend", |v, ctx| {
        lvmeta::edit::lv::resize(v, ctx, "a", 3, None, false)
    })
    .expect("lvextend");
    let p = s.refresh("vg", "a", &backend).expect("refresh");
    assert_eq!(p.bytes.0, 12 * MIB);
    assert_eq!(dev_bytes(&act.device), 12 * MIB);
    let st = Command::new("umount")
        .arg(mnt.path())
        .status()
        .expect("umount");
    assert!(st.success());
    let device = act.device.clone();
    act.deactivate(&backend).expect("deactivate");
    assert!(backend.active(&p).expect("active").is_none());
    assert!(!Path::new(&format!(
        "/sys/block/{}/loop",
        device.file_name().and_then(|n| n.to_str()).expect("n")
    ))
    .exists());

    // Read-only: writes fail, reads see the data.
    let ro = s
        .activate("vg", "a", false, true, &backend)
        .expect("read-only");
    let mut f = std::fs::File::open(&ro.device).expect("open ro");
    let mut buf = vec![0u8; 4096];
    f.seek(SeekFrom::Start(0)).expect("seek");
    f.read_exact(&mut buf).expect("read");
    let name = ro.device.file_name().and_then(|n| n.to_str()).expect("n");
    let flag = std::fs::read_to_string(format!("/sys/block/{name}/ro")).expect("ro flag");
    assert_eq!(flag.trim(), "1");
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(&ro.device)
        .and_then(|mut w| w.write_all(&pattern).and_then(|()| w.sync_all()));
    assert!(written.is_err(), "a read-only LV took a write");
    ro.deactivate(&backend).expect("deactivate ro");

    // Thin LVs need dm-thin-pool.
    let e = s
        .activate("vg", "t", false, false, &backend)
        .expect_err("thin");
    assert!(e.to_string().contains("dm-thin-pool"), "{e}");
}

/// Freezes the filesystem at `mnt` with the node's [`csi_shim::mount::Real`] and checks that
/// a write (with fsync) does not finish until it is thawed.
fn frozen_writes_wait(mnt: &Path) {
    use csi_shim::kubelet::{KubeletDir, Place};
    use csi_shim::mount::{Real, System};
    use std::sync::atomic::{AtomicBool, Ordering};
    struct Thaw<'a>(&'a Place);
    impl Drop for Thaw<'_> {
        fn drop(&mut self) {
            let _ = Real.freeze(self.0, false);
        }
    }
    // The node reaches a mount through a place below its kubelet directory.
    let parent = mnt.parent().expect("parent");
    let place = KubeletDir::open(parent)
        .expect("open")
        .place("mount", &mnt.display().to_string())
        .expect("below")
        .expect("exists");
    Real.freeze(&place, true).expect("fsfreeze -f");
    let thaw = Thaw(&place);
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            std::fs::write(mnt.join("during-freeze"), b"x")
                .and_then(|()| std::fs::File::open(mnt.join("during-freeze"))?.sync_all())
                .expect("write");
            done.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            !done.load(Ordering::SeqCst),
            "a write finished on a frozen filesystem"
        );
        Real.freeze(&place, false).expect("fsfreeze -u");
        writer.join().expect("writer");
    });
    drop(thaw);
    assert!(done.load(Ordering::SeqCst));
}
