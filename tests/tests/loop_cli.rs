//! Privileged: the committed fixtures attached to real loop devices (512- and 4096-byte
//! sectors), read by the `lvmeta` binary through `--devices` and through its own scan of the
//! machine's block devices; its JSON must equal what lvm2 reported.

use std::path::PathBuf;
use std::process::Command;

use lvmeta_tests::{
    fixtures_dir, privileged, rows, Fixture, FIXTURES, LVS_FIELDS, PVS_FIELDS, SEG_FIELDS,
    VGS_FIELDS,
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

fn lvmeta_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("lvmeta");
    assert!(
        bin.exists(),
        "{} not built (run through cargo test --workspace)",
        bin.display()
    );
    bin
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

fn rename(v: &Value, from: &[(String, String)]) -> Value {
    let mut text = v.to_string();
    // Longest names first so /dev/loop1 does not eat /dev/loop10.
    let mut pairs = from.to_vec();
    pairs.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
    for (a, b) in pairs {
        text = text
            .replace(&format!("\"{a}\""), &format!("\"{b}\""))
            .replace(&format!("{a}("), &format!("{b}("));
    }
    serde_json::from_str(&text).expect("json")
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
        let theirs_map: Vec<(String, String)> = fx
            .loops
            .iter()
            .map(|(i, l)| (l.clone(), i.clone()))
            .collect();
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
            let got = rename(&run(&args), &ours);
            let raw: Value =
                serde_json::from_str(&std::fs::read_to_string(fx.dir.join(file)).expect("report"))
                    .expect("json");
            let want = rename(&raw, &theirs_map);
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
