//! Opt-in (`LVMETA_DM_TESTS=1`, root, a kernel with device-mapper and dm-thin-pool): the
//! device-mapper backend on loop devices, judged by stock lvm2 with activation on. The test
//! machines of this project have no device-mapper, so CI cannot run this; on a machine that
//! has it, it checks what the unit tests cannot: that the kernel takes lvmeta's tables, that
//! lvm2 sees lvmeta's devices as its own (names and uuids), that a thin pool's queued
//! messages reach the kernel by lvm2's transaction rule, and that lvm2 activates the pool
//! lvmeta left (the transaction ids agree).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;

use lvmeta::activate::dm::DmBackend;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::ops::Session;
use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;

/// lvm2 with activation on, without udev (as lvmeta makes its nodes itself).
const ACTIVE: &str = "global/activation=1 activation/udev_sync=0 activation/udev_rules=0";

fn write_at(dev: &Path, at: u64, data: &[u8]) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dev)
        .expect("open for writing");
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(data).expect("write");
    f.sync_all().expect("sync");
}

fn read_at(dev: &Path, at: u64, n: usize) -> Vec<u8> {
    let mut f = std::fs::File::open(dev).expect("open");
    f.seek(SeekFrom::Start(at)).expect("seek");
    let mut buf = vec![0u8; n];
    f.read_exact(&mut buf).expect("read");
    buf
}

/// The kernel's transaction id of pool `vg/pool` (`dmsetup status`).
fn pool_tid() -> Option<u64> {
    let out = std::process::Command::new("dmsetup")
        .args(["status", "vg-pool-tpool"])
        .output()
        .expect("dmsetup");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(3)
        .and_then(|w| w.parse().ok())
}

/// lvm2's `lv_active` word for `vg/lv` ("active" or empty).
fn lvm2_active(sb: &Sandbox, lv: &str) -> bool {
    let out = sb.lvm_ok(
        &["lvs", "--noheadings", "-o", "lv_active", lv],
        Some(ACTIVE),
    );
    String::from_utf8_lossy(&out.stdout).trim() == "active"
}

#[test]
fn device_mapper_tables_work_beside_lvm2() {
    if std::env::var("LVMETA_DM_TESTS").as_deref() != Ok("1") {
        lvmeta_tests::skipped(
            "dm_activate: opt-in, not run (set LVMETA_DM_TESTS=1 as root on a kernel with \
             device-mapper and dm-thin-pool)",
        );
        return;
    }
    assert!(
        privileged(
            "device_mapper_tables_work_beside_lvm2",
            &["losetup", "lvs", "lvchange", "dmsetup"],
        ),
        "LVMETA_DM_TESTS=1 needs root, loop devices and lvm2"
    );
    let sb = Sandbox::new(&[128 * MIB, 128 * MIB], 512);
    let (a, b) = (sb.loops[0].clone(), sb.loops[1].clone());
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &a, &b]);
    // `two` in two pieces, `st` striped over both PVs, a thin pool with one thin LV.
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "two", "-L", "4m", "vg", &a]);
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "gap", "-L", "4m", "vg", &a]);
    sb.lvmeta_ok("lvextend", &["-L", "8m", "vg/two", &a]);
    sb.lvmeta_ok(
        "lvcreate",
        &["-an", "-n", "st", "-L", "16m", "-i", "2", "vg"],
    );
    sb.lvmeta_ok(
        "lvcreate",
        &[
            "-an",
            "--type",
            "thin-pool",
            "-n",
            "pool",
            "-L",
            "32m",
            "vg",
        ],
    );
    sb.lvmeta_ok(
        "lvcreate",
        &["-an", "-n", "t", "-V", "64m", "--thinpool", "pool", "vg"],
    );
    let devs: Vec<Box<dyn BlockDevice>> = [&a, &b]
        .iter()
        .map(|p| Box::new(FileDevice::open_rw(Path::new(p)).expect("open")) as Box<dyn BlockDevice>)
        .collect();
    let s = Session::new(devs).with_lock_dir(sb.lock_dir());
    let backend = DmBackend::probe().expect("/dev/mapper/control opens");
    let pattern: Vec<u8> = (0..8192u32).map(|i| (i * 13 + 5) as u8).collect();

    // Linear in two pieces and striped: data written across the piece boundary and across
    // stripes read back, and lvm2 sees the LVs active.
    for (lv, at) in [("two", 4 * MIB - 4096), ("st", 60 * 1024)] {
        let act = s.activate("vg", lv, false, false, &backend).expect(lv);
        write_at(&act.device, at, &pattern);
        assert_eq!(read_at(&act.device, at, pattern.len()), pattern, "{lv}");
        assert!(
            lvm2_active(&sb, &format!("vg/{lv}")),
            "lvm2 sees {lv} active"
        );
        act.deactivate(&backend).expect("deactivate");
        assert!(!lvm2_active(&sb, &format!("vg/{lv}")));
    }

    // Thin: the first activation delivers create_thin and the transaction id.
    let act = s.activate("vg", "t", false, false, &backend).expect("thin");
    assert!(lvm2_active(&sb, "vg/t"), "lvm2 sees the thin LV active");
    assert_eq!(pool_tid(), Some(1));
    // The backend reads the same status line (the node's volume condition).
    let status = lvmeta::activate::Backend::pool_status(&backend, &act.placement)
        .expect("pool status")
        .expect("active pool");
    assert_eq!((status.transaction_id, status.problem()), (1, None));
    write_at(&act.device, MIB, &pattern);
    // A snapshot while active, made as the pool's holder and delivered at once.
    let snapshot = lvmeta::edit::ThinSpec {
        name: Some("snap".into()),
        pool: "pool".into(),
        extents: 0,
        origin: Some("t".into()),
        tags: vec![],
        activation_skip: Some(false),
        stamp: lvmeta::edit::Stamp::now(),
    };
    s.update_holding("vg", "lvcreate -s", &["pool"], |v| {
        lvmeta::edit::thin::create_thin(v, &snapshot).map(|x| x.0)
    })
    .expect("snapshot queued");
    s.refresh("vg", "t", &backend).expect("deliver create_snap");
    assert_eq!(pool_tid(), Some(2));
    // The CLI delivers to a pool active on this host at once, as lvm2 does.
    sb.lvmeta_ok("lvcreate", &["-s", "vg/t", "-n", "s2"]);
    assert_eq!(pool_tid(), Some(3), "lvmeta lvcreate -s sent create_snap");
    write_at(&act.device, MIB, &[0u8; 8192]);
    act.deactivate(&backend).expect("deactivate thin");
    assert!(
        !lvm2_active(&sb, "vg/pool"),
        "the pool went down with its last thin LV"
    );
    let snap = s
        .activate("vg", "snap", false, true, &backend)
        .expect("snapshot");
    assert_eq!(
        read_at(&snap.device, MIB, pattern.len()),
        pattern,
        "the snapshot keeps the data"
    );
    snap.deactivate(&backend).expect("deactivate snapshot");

    // Stock lvm2 activates what lvmeta left: the pool's transaction ids agree.
    sb.lvm_ok(&["lvchange", "-ay", "-K", "vg/snap"], Some(ACTIVE));
    sb.lvm_ok(&["lvchange", "-an", "vg/snap", "vg/pool"], Some(ACTIVE));
    sb.vgck_clean("vg", None);
}
