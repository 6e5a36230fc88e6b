//! Privileged: the committed fixtures attached to real loop devices (512- and 4096-byte
//! sectors), read by the `lvmeta` binary through `--devices` and through its own scan of the
//! machine's block devices; its JSON must equal what lvm2 reported.

use std::collections::HashMap;
use std::process::Command;

use lvmeta_tests::{
    fixtures_dir, lvmeta_bin, privileged, rename_devices, rows, Fixture, FIXTURES, LVS_FIELDS,
    PVS_FIELDS, SEG_FIELDS, VGS_FIELDS,
};
use serde_json::Value;

/// Detaches its loop devices when dropped, also when the test fails.
struct Loops(Vec<String>);

impl Drop for Loops {
    fn drop(&mut self) {
        for l in &self.0 {
            let _ = Command::new("losetup").args(["-d", l]).status();
        }
    }
}

fn run(args: &[&str]) -> Value {
    let out = Command::new(lvmeta_bin())
        .args(args)
        .output()
        .expect("run lvmeta");
    assert!(
        out.status.success(),
        "lvmeta {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("lvmeta JSON")
}

#[test]
fn loop_cli_reports_match_lvm2() {
    if !privileged("loop_cli_reports_match_lvm2", &["losetup"]) {
        return;
    }
    let work = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    for name in FIXTURES {
        let fx = Fixture::open(&fixtures_dir().join(name));
        let mut loops = Loops(Vec::new());
        let mut ours = Vec::new();
        for (img, dev) in fx.images().iter().zip(fx.mem_devices()) {
            let path = work.path().join(format!("{name}-{img}"));
            std::fs::write(&path, dev.to_bytes()).expect("write image");
            let out = Command::new("losetup")
                .args(["-f", "--show", "--sector-size", &fx.sector_size.to_string()])
                .arg(&path)
                .output()
                .expect("losetup");
            assert!(
                out.status.success(),
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let l = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            loops.0.push(l.clone());
            ours.push((l, img.clone()));
        }
        let devices = loops.0.join(",");
        let ours: HashMap<&str, &str> =
            ours.iter().map(|(l, i)| (l.as_str(), i.as_str())).collect();
        for (file, verb, fields, extra) in [
            ("pvs.json", "pvs", PVS_FIELDS, None),
            ("vgs.json", "vgs", VGS_FIELDS, None),
            ("lvs.json", "lvs", LVS_FIELDS, None),
            ("lvs-seg.json", "lvs", SEG_FIELDS, Some("--segments")),
        ] {
            let mut args = vec![
                verb,
                "-a",
                "--devices",
                &devices,
                "--reportformat",
                "json",
                "--units",
                "b",
                "--nosuffix",
                "-o",
                fields,
            ];
            args.extend(extra);
            let mut got = run(&args);
            rename_devices(&mut got, &ours);
            // lvm2's report with its loop devices renamed to the image names.
            let want = fx.lvm_json(file);
            assert_eq!(
                rows(&got),
                rows(&want),
                "{name}/{file} through loop devices"
            );
        }
        // Without --devices lvmeta scans every block device and finds this VG too.
        let all = run(&["vgs", "--reportformat", "json", "-o", "vg_uuid"]);
        let uuid = fx.lvm_json("vgs.json")["report"][0]["vg"][0]["vg_uuid"].clone();
        assert!(
            all["report"][0]["vg"]
                .as_array()
                .is_some_and(|v| v.iter().any(|r| r["vg_uuid"] == uuid)),
            "{name}: machine-wide scan did not find VG {uuid}"
        );
        eprintln!("loop devices: fixture {name} matches lvm2");
    }
}

/// Creation times print in the host's time zone, as lvm2's do: `lvs -o lv_time` and
/// `lvdisplay`'s creation line under three `TZ`s (a half-hour offset, summer time, UTC).
#[test]
fn creation_times_print_in_the_hosts_zone_as_lvm2s() {
    let test = "creation_times_print_in_the_hosts_zone_as_lvm2s";
    if !privileged(test, &["losetup", "lvs"]) {
        return;
    }
    let sb = lvmeta_tests::sandbox::Sandbox::new(&[64 << 20], 512);
    sb.lvmeta_ok("vgcreate", &["vgt", &sb.loops[0]]);
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "when", "-L", "4m", "vgt"]);
    for tz in ["Asia/Kolkata", "America/New_York", "UTC"] {
        let lvm2 = |args: &[&str]| {
            let out = Command::new(args[0])
                .args(&args[1..])
                .env("LVM_SYSTEM_DIR", sb.path("sys"))
                .env("LVM_SUPPRESS_FD_WARNINGS", "1")
                .env("TZ", tz)
                .output()
                .expect("lvm2");
            assert!(out.status.success(), "lvm2 {args:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let ours = |args: &[&str]| {
            let out = Command::new(lvmeta_bin())
                .args(&args[..1])
                .args(["--devices", &sb.loops[0]])
                .args(&args[1..])
                .env("TZ", tz)
                .output()
                .expect("lvmeta");
            assert!(out.status.success(), "lvmeta {args:?}");
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        let time = ["lvs", "--noheadings", "-o", "lv_time", "vgt/when"];
        let theirs = lvm2(&time);
        assert_eq!(ours(&time), theirs, "lv_time under TZ={tz}");
        // The zone was read (zoneinfo present), so that the comparison is not of two UTCs.
        if tz == "Asia/Kolkata" {
            assert!(theirs.contains("+0530"), "TZ={tz}: {theirs}");
        }
        let created = |text: String| {
            text.lines()
                .find(|l| l.contains("LV Creation host, time"))
                .map(str::to_owned)
        };
        let display = ["lvdisplay", "vgt/when"];
        let theirs = created(lvm2(&display));
        assert!(theirs.is_some(), "lvm2's lvdisplay has a creation line");
        assert_eq!(created(ours(&display)), theirs, "lvdisplay under TZ={tz}");
    }
}

/// `pvchange --metadataignore y` (by stock lvm2) leaves one PV's area out of what the VG
/// reports as its metadata space, as lvm2 leaves it out; the PV still reports its own area.
#[test]
fn ignored_metadata_areas_report_as_lvm2s() {
    let test = "ignored_metadata_areas_report_as_lvm2s";
    if !privileged(test, &["losetup", "pvchange"]) {
        return;
    }
    let sb = lvmeta_tests::sandbox::Sandbox::new(&[64 << 20, 64 << 20], 512);
    // The second PV's area is the bigger one, so that leaving it out or not shows.
    sb.lvmeta_ok("pvcreate", &["--metadatasize", "2m", &sb.loops[1]]);
    sb.lvmeta_ok("vgcreate", &["vgm", &sb.loops[0], &sb.loops[1]]);
    sb.lvm_ok(&["pvchange", "--metadataignore", "y", &sb.loops[0]], None);
    sb.reports_match("one area ignored", None);
}
