//! Needs root and a kernel with device-mapper (CI's VM stage, `tests/vm/run`; elsewhere it
//! skips with a message): LVs of every segment type stock lvm2 makes, active, reported by
//! lvmeta as lvm2 reports them from the kernel's status: `lv_attr` (a suspended LV's `s`, a
//! raid image out of sync's `I`), `Cpy%Sync` of raid LVs (one of them still syncing),
//! `Data%`/`Meta%`/`Cpy%Sync` of a writeback cache and of its cache pool, `Data%` of a
//! writecache holding writes, nothing for raid0.

use std::path::Path;
use std::process::Command;

use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::sandbox::LVM2_ACTIVE as ACTIVE;
use lvmeta_tests::{privileged, write_at};

const MIB: u64 = 1 << 20;

fn dmsetup(args: &[&str]) {
    let ok = Command::new("dmsetup")
        .args(args)
        .status()
        .expect("dmsetup");
    assert!(ok.success(), "dmsetup {args:?}");
}

#[test]
fn active_segment_types_report_as_lvm2s() {
    let test = "active_segment_types_report_as_lvm2s";
    if !privileged(test, &["losetup", "lvs", "dmsetup"]) || !lvmeta_tests::device_mapper(test) {
        return;
    }
    let sb = Sandbox::new(&[400 * MIB, 400 * MIB], 512);
    let (a, b) = (sb.loops[0].clone(), sb.loops[1].clone());
    let lvm = |args: &[&str]| sb.lvm_ok(args, Some(ACTIVE));
    lvm(&["vgcreate", "-q", "vg", &a, &b]);
    lvm(&[
        "lvcreate", "-q", "-Zn", "--type", "raid1", "-m1", "-L", "8m", "-n", "r1", "vg",
    ]);
    // raid0 has nothing to sync: lvm2 leaves its Cpy%Sync blank.
    lvm(&[
        "lvcreate", "-q", "-Zn", "--type", "raid0", "-i", "2", "-L", "8m", "-n", "r0", "vg",
    ]);
    // Slow to sync: still syncing while the reports are taken.
    lvm(&[
        "lvcreate",
        "-q",
        "-Zn",
        "--type",
        "raid1",
        "-m1",
        "-L",
        "120m",
        "--maxrecoveryrate",
        "256k",
        "-n",
        "rslow",
        "vg",
    ]);
    lvm(&[
        "lvcreate", "-q", "-Zn", "-L", "40m", "-n", "corig", "vg", &a,
    ]);
    lvm(&[
        "lvcreate",
        "-q",
        "--type",
        "cache-pool",
        "-L",
        "16m",
        "-n",
        "cpool",
        "vg",
        &b,
    ]);
    lvm(&[
        "lvconvert",
        "-q",
        "-y",
        "--type",
        "cache",
        "--cachemode",
        "writeback",
        "--cachepool",
        "vg/cpool",
        "vg/corig",
    ]);
    lvm(&[
        "lvcreate", "-q", "-Zn", "-L", "40m", "-n", "worig", "vg", &a,
    ]);
    lvm(&[
        "lvcreate", "-q", "-Zn", "-an", "-L", "16m", "-n", "wfast", "vg", &b,
    ]);
    lvm(&[
        "lvconvert",
        "-q",
        "-y",
        "--type",
        "writecache",
        "--cachevol",
        "vg/wfast",
        "vg/worig",
    ]);
    // Writes through the cache and the writecache, so that their use is not zero.
    let data: Vec<u8> = (0..(2 * MIB as u32)).map(|i| (i % 251) as u8 + 1).collect();
    for _ in 0..3 {
        write_at(Path::new("/dev/mapper/vg-corig"), 0, &data);
        lvmeta_tests::read_at(Path::new("/dev/mapper/vg-corig"), 0, data.len());
    }
    write_at(Path::new("/dev/mapper/vg-worig"), 0, &data);
    // Suspended while both report: its state column shows it, its sync stands still.
    dmsetup(&["suspend", "vg-rslow"]);
    let fields = "lv_name,lv_attr,copy_percent,sync_percent,data_percent,metadata_percent";
    let args = ["-a", "-o", fields, "vg"];
    let theirs = sb.lvm_ok(&[&["lvs"][..], &args[..]].concat(), Some(ACTIVE));
    let ours = sb.lvmeta_ok("lvs", &args);
    dmsetup(&["resume", "vg-rslow"]);
    let text = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    let (theirs, ours) = (text(&theirs), text(&ours));
    assert_eq!(ours, theirs, "lvs as lvm2's");
    eprintln!("{ours}");
    // What the comparison covered, so that it cannot pass on blank columns.
    let row = |lv: &str| {
        ours.lines()
            .find(|l| l.split_whitespace().next() == Some(lv))
            .unwrap_or_else(|| panic!("no {lv} in {ours}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(row("r1")[2..4], ["100.00", "100.00"]);
    assert_eq!(row("r0").len(), 2, "no percentages for raid0");
    assert!(row("rslow")[1].starts_with("rwi-s"), "suspended");
    let cache = row("corig");
    assert_eq!(
        cache.len(),
        6,
        "Cpy%Sync, Data% and Meta% of the cache: {cache:?}"
    );
    assert_ne!(row("worig").get(2), None, "Data% of the writecache");
    lvm(&["vgchange", "-an", "vg"]);
}
