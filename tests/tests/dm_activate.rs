//! Needs root and a kernel with device-mapper and dm-thin-pool (CI's VM stage, `tests/vm/run`;
//! elsewhere it skips with a message): the device-mapper backend on loop devices, judged by
//! stock lvm2 with activation on. It checks what the unit tests cannot: that the kernel
//! takes lvmeta's tables, that lvm2 sees lvmeta's devices as its own (names and uuids),
//! that a thin pool's queued messages reach the kernel by lvm2's transaction rule, that
//! lvm2 activates the pool lvmeta left (the transaction ids agree) and reads its data, and
//! that lvmeta activates a pool lvm2 made and reads what lvm2 wrote.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lvmeta::activate::dm::DmBackend;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::session::Session;
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::sandbox::LVM2_ACTIVE as ACTIVE;
use lvmeta_tests::{privileged, read_at, write_at};

const MIB: u64 = 1 << 20;

/// `vg/pool`'s kernel transaction id.
fn pool_tid() -> Option<u64> {
    lvmeta_tests::kernel_pool_tid("vg-pool-tpool")
}

/// Whether device-mapper has a device named `name`.
fn dm_has(name: &str) -> bool {
    std::process::Command::new("dmsetup")
        .args(["info", name])
        .output()
        .expect("dmsetup")
        .status
        .success()
}

fn libc_major(rdev: u64) -> u64 {
    ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff)
}

fn libc_minor(rdev: u64) -> u64 {
    ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff)
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
    if !privileged(
        "device_mapper_tables_work_beside_lvm2",
        &["losetup", "lvs", "lvchange", "dmsetup"],
    ) || !lvmeta_tests::device_mapper("device_mapper_tables_work_beside_lvm2")
    {
        return;
    }
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
    // A device of the LV's name but another uuid (another VG called vg, another tool) is
    // never taken, changed or removed as the LV's.
    let dmsetup = |args: &[&str]| {
        let st = std::process::Command::new("dmsetup")
            .args(args)
            .status()
            .expect("dmsetup");
        assert!(st.success(), "dmsetup {args:?}");
    };
    dmsetup(&[
        "create",
        "vg-two",
        "--uuid",
        "OTHER-two",
        "--table",
        "0 8 error",
    ]);
    let e = s
        .activate("vg", "two", false, false, &backend)
        .expect_err("a foreign device of the same name");
    assert!(e.to_string().contains("OTHER-two"), "{e}");
    assert!(dm_has("vg-two"));
    dmsetup(&["remove", "vg-two"]);
    // A node that points at another device (here the whole first PV) is replaced at
    // activation, never trusted.
    let pv_rdev = std::fs::metadata(&a).expect("PV").rdev();
    std::fs::create_dir_all("/dev/mapper").expect("/dev/mapper");
    let stale = Path::new("/dev/mapper/vg-two");
    let _ = std::fs::remove_file(stale);
    let made = std::process::Command::new("mknod")
        .arg(stale)
        .arg("b")
        .arg(libc_major(pv_rdev).to_string())
        .arg(libc_minor(pv_rdev).to_string())
        .status()
        .expect("mknod");
    assert!(made.success());
    for (lv, at) in [("two", 4 * MIB - 4096), ("st", 60 * 1024)] {
        let act = s.activate("vg", lv, false, false, &backend).expect(lv);
        assert_ne!(
            std::fs::metadata(&act.device).expect("node").rdev(),
            pv_rdev,
            "{lv}: the stale node was trusted"
        );
        sb.reports_match(&format!("{lv} active"), Some(ACTIVE));
        write_at(&act.device, at, &pattern);
        assert_eq!(read_at(&act.device, at, pattern.len()), pattern, "{lv}");
        assert!(
            lvm2_active(&sb, &format!("vg/{lv}")),
            "lvm2 sees {lv} active"
        );
        act.deactivate(&backend).expect("deactivate");
        assert!(!lvm2_active(&sb, &format!("vg/{lv}")));
        assert!(!act.device.exists(), "{lv}: node left behind");
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
    // lvm2's stack for an active thin LV: no `vg-pool` device (the pool LV itself is not
    // active), and both report the same states and open counts.
    assert!(!Path::new("/dev/mapper/vg-pool").exists());
    assert!(!dm_has("vg-pool"), "a pool device lvm2 would not make");
    sb.reports_match("thin active", Some(ACTIVE));
    {
        let _open = std::fs::File::open(&act.device).expect("hold the thin LV open");
        sb.reports_match("thin held open", Some(ACTIVE));
    }
    // A status query makes no node.
    std::fs::remove_file(&act.device).expect("remove the node");
    assert!(lvmeta::activate::Backend::active(&backend, &act.placement).is_err());
    assert!(!act.device.exists(), "a status query made a node");
    let again = lvmeta::activate::Backend::activate(&backend, &act.placement, false)
        .expect("activate again: the node made");
    assert_eq!(again, act.device);
    assert!(act.device.exists());
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
    s.update_holding("vg", "lvcreate -s", &["pool"], |v, ctx| {
        lvmeta::edit::thin::create_thin(v, ctx, &snapshot).map(|x| x.0)
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
    for d in ["vg-pool-tpool", "vg-pool_tdata", "vg-pool_tmeta", "vg-t"] {
        assert!(!dm_has(d), "{d} left");
        assert!(
            !Path::new("/dev/mapper").join(d).exists(),
            "node of {d} left"
        );
    }
    // The pool LV itself: its own device over the tpool, gone at its deactivation.
    let pool = s
        .activate("vg", "pool", false, false, &backend)
        .expect("pool");
    assert!(dm_has("vg-pool") && lvm2_active(&sb, "vg/pool"));
    sb.reports_match("pool active", Some(ACTIVE));
    pool.deactivate(&backend).expect("deactivate pool");
    assert!(!dm_has("vg-pool") && !dm_has("vg-pool-tpool"));
    assert!(!Path::new("/dev/mapper/vg-pool").exists());
    let snap = s
        .activate("vg", "snap", false, true, &backend)
        .expect("snapshot");
    assert_eq!(
        read_at(&snap.device, MIB, pattern.len()),
        pattern,
        "the snapshot keeps the data"
    );
    snap.deactivate(&backend).expect("deactivate snapshot");

    // Stock lvm2 activates what lvmeta left: the pool's transaction ids agree, and it reads
    // the snapshot's data.
    sb.lvm_ok(&["lvchange", "-ay", "-K", "vg/snap"], Some(ACTIVE));
    dmsetup(&["mknodes"]);
    assert_eq!(
        read_at(Path::new("/dev/mapper/vg-snap"), MIB, pattern.len()),
        pattern,
        "lvm2 reads the snapshot lvmeta left"
    );
    sb.lvm_ok(&["lvchange", "-an", "vg/snap", "vg/pool"], Some(ACTIVE));
    sb.vgck_clean("vg", None);

    // And lvmeta activates a pool stock lvm2 made, with a thin LV lvm2 wrote.
    sb.lvm_ok(
        &[
            "lvcreate",
            "--type",
            "thin-pool",
            "-L",
            "16m",
            "-n",
            "lp",
            "vg",
        ],
        Some(ACTIVE),
    );
    sb.lvm_ok(
        &[
            "lvcreate",
            "-V",
            "32m",
            "--thinpool",
            "lp",
            "-n",
            "lt",
            "vg",
        ],
        Some(ACTIVE),
    );
    dmsetup(&["mknodes"]);
    write_at(Path::new("/dev/mapper/vg-lt"), 3 * MIB, &pattern);
    sb.lvm_ok(&["lvchange", "-an", "vg/lt", "vg/lp"], Some(ACTIVE));
    let lt = s
        .activate("vg", "lt", false, false, &backend)
        .expect("lvm2's thin LV");
    assert_eq!(
        read_at(&lt.device, 3 * MIB, pattern.len()),
        pattern,
        "lvmeta reads what lvm2 wrote"
    );
    sb.reports_match("lvm2's pool active through lvmeta", Some(ACTIVE));
    lt.deactivate(&backend).expect("deactivate lvm2's thin LV");
    sb.vgck_clean("vg", None);
}

/// `vgchange -ay` brings up every LV but those marked to skip activation, thin LVs with
/// their pool, as lvm2 sees it; `vgchange -an` takes them all down, thin LVs first.
#[test]
fn vgchange_activates_and_deactivates_a_vg() {
    let test = "vgchange_activates_and_deactivates_a_vg";
    if !privileged(test, &["losetup", "lvs", "dmsetup"]) || !lvmeta_tests::device_mapper(test) {
        return;
    }
    let sb = Sandbox::new(&[128 * MIB], 512);
    let a = sb.loops[0].clone();
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vgc", &a]);
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "lin", "-L", "8m", "vgc"]);
    sb.lvmeta_ok(
        "lvcreate",
        &["-an", "-n", "skip", "-k", "y", "-L", "4m", "vgc"],
    );
    sb.lvmeta_ok(
        "lvcreate",
        &["-an", "-T", "-L", "16m", "-V", "32m", "-n", "t", "vgc/pool"],
    );
    let said = |out: std::process::Output| String::from_utf8_lossy(&out.stdout).into_owned();
    let up = said(sb.lvmeta_ok("vgchange", &["-ay", "vgc"]));
    assert_eq!(
        up,
        "  3 logical volume(s) in volume group \"vgc\" now active\n"
    );
    for lv in ["vgc/lin", "vgc/pool", "vgc/t"] {
        assert!(lvm2_active(&sb, lv), "{lv} active as lvm2 sees it");
    }
    assert!(!lvm2_active(&sb, "vgc/skip"), "activation skip is kept");
    // Data% and Meta% of the active pool and thin LV, as lvm2 reads the kernel's status
    // (some data written first, so that neither is zero).
    let data: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8 + 1).collect();
    write_at(Path::new("/dev/mapper/vgc-t"), 0, &data);
    let usage = [
        "-o",
        "lv_name,data_percent,metadata_percent",
        "vgc/pool",
        "vgc/t",
    ];
    let theirs = sb.lvm_ok(&[&["lvs"][..], &usage[..]].concat(), Some(ACTIVE));
    let ours = sb.lvmeta_ok("lvs", &usage);
    assert_eq!(said(ours), said(theirs), "Data%/Meta% as lvm2's");
    // Again: nothing more to do, the same count.
    assert_eq!(said(sb.lvmeta_ok("vgchange", &["-ay", "vgc"])), up);
    let down = said(sb.lvmeta_ok("vgchange", &["-an", "vgc"]));
    assert_eq!(
        down,
        "  0 logical volume(s) in volume group \"vgc\" now active\n"
    );
    for lv in ["lin", "pool", "t", "pool-tpool", "pool_tdata", "pool_tmeta"] {
        assert!(!dm_has(&format!("vgc-{lv}")), "vgc-{lv} is gone");
    }
    assert_eq!(
        sb.lvmeta("vgchange", &["-a", "x", "vgc"]).status.code(),
        Some(3)
    );
}

/// The filesystem size of `dev` in bytes, as the filesystem's own tools report it.
fn fs_bytes(dev: &str, xfs: bool) -> u64 {
    let (tool, args): (&str, Vec<&str>) = match xfs {
        true => (
            "xfs_db",
            vec!["-r", "-c", "sb 0", "-c", "print blocksize dblocks", dev],
        ),
        false => ("dumpe2fs", vec!["-h", dev]),
    };
    let out = std::process::Command::new(tool)
        .args(&args)
        .output()
        .expect(tool);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let num = |key: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| {
                v.trim_start_matches([':', ' ', '='])
                    .trim()
                    .parse()
                    .expect("number")
            })
            .unwrap_or_else(|| panic!("{key} in {tool} output: {text}"))
    };
    match xfs {
        true => num("blocksize") * num("dblocks"),
        false => num("Block count") * num("Block size"),
    }
}

/// `lvextend -r` grows ext4 (unmounted) and xfs (mounted for it) with the LV; `lvreduce -r`
/// shrinks ext4 before the LV; xfs is never shrunk, and nothing changes then.
#[test]
fn resizefs_resizes_the_filesystem_with_the_lv() {
    let test = "resizefs_resizes_the_filesystem_with_the_lv";
    let tools = [
        "losetup",
        "dmsetup",
        "mkfs.ext4",
        "dumpe2fs",
        "mkfs.xfs",
        "xfs_db",
    ];
    if !privileged(test, &tools) || !lvmeta_tests::device_mapper(test) {
        return;
    }
    let sb = Sandbox::new(&[1024 * MIB], 512);
    let a = sb.loops[0].clone();
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vgr", &a]);
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "e", "-L", "32m", "vgr"]);
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "x", "-L", "320m", "vgr"]);
    sb.lvmeta_ok("lvchange", &["-ay", "vgr/e", "vgr/x"]);
    let mkfs = |tool: &str, dev: &str| {
        let st = std::process::Command::new(tool)
            .args(["-q", dev])
            .status()
            .expect(tool);
        assert!(st.success(), "{tool} {dev}");
    };
    let (e, x) = ("/dev/mapper/vgr-e", "/dev/mapper/vgr-x");
    mkfs("mkfs.ext4", e);
    mkfs("mkfs.xfs", x);
    sb.lvmeta_ok("lvextend", &["-r", "-L", "48m", "vgr/e"]);
    assert_eq!(fs_bytes(e, false), 48 * MIB);
    sb.lvmeta_ok("lvreduce", &["-r", "-L", "40m", "vgr/e"]);
    assert_eq!(fs_bytes(e, false), 40 * MIB);
    let size = |lv: &str| sb.report_words("lvs", "lv_size", &[lv]);
    assert_eq!(size("vgr/e"), [(40 * MIB).to_string()]);
    sb.lvmeta_ok("lvextend", &["-r", "-L", "+64m", "vgr/x"]);
    assert_eq!(fs_bytes(x, true), 384 * MIB);
    let refused = sb.lvmeta("lvreduce", &["-r", "-L", "-64m", "vgr/x"]);
    assert_eq!(refused.status.code(), Some(5), "xfs cannot shrink");
    assert_eq!(size("vgr/x"), [(384 * MIB).to_string()], "the LV stays");
    sb.lvmeta_ok("lvchange", &["-an", "vgr/e", "vgr/x"]);
    let inactive = sb.lvmeta("lvextend", &["-r", "-L", "+4m", "vgr/e"]);
    assert_eq!(inactive.status.code(), Some(5), "-r needs the LV active");
}
