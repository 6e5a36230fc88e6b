//! Privileged: stock lvm2 and lvmeta take turns changing one VG in random order (a proptest
//! state machine), on two PVs with two small metadata areas each, so the circular buffers
//! wrap several times. After every step stock `vgck` must be clean and lvm2's reports must
//! equal lvmeta's. Also: lvm2 and lvmeta serialise on lvm2's per-VG lock file.

use std::process::Command;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// One step: (operation, done by lvm2 rather than lvmeta, which LV).
type Step = (u8, bool, u8);

/// Visible LVs of `vg` and their segment types, from lvmeta's report.
fn lvs(sb: &Sandbox) -> Vec<(String, String)> {
    let out = sb.lvmeta_ok(
        "lvs",
        &["--reportformat", "json", "-o", "lv_name,segtype", "vg"],
    );
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    v["report"][0]["lv"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|r| {
            (
                r["lv_name"].as_str().unwrap_or_default().to_owned(),
                r["segtype"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

fn words(s: &str) -> Vec<String> {
    s.split_whitespace().map(str::to_owned).collect()
}

fn apply(sb: &Sandbox, n: usize, (op, by_lvm, pick): Step) {
    let all = lvs(sb);
    let plain: Vec<&String> = all
        .iter()
        .filter(|(_, t)| t == "linear" || t == "striped")
        .map(|(n, _)| n)
        .collect();
    let thin: Vec<&String> = all
        .iter()
        .filter(|(_, t)| t == "thin")
        .map(|(n, _)| n)
        .collect();
    let has_pool = all.iter().any(|(_, t)| t == "thin-pool");
    let pick_of = |v: &[&String]| {
        v.get(usize::from(pick) % v.len().max(1))
            .map(|s| s.to_string())
    };
    let name = format!("lv{n}");
    let target = |lv: &str| format!("vg/{lv}");
    // lvm2 cannot make thin LVs here (no device-mapper): those steps are always lvmeta's.
    let (verb, args): (&str, Vec<String>) = match op % 8 {
        0 | 1 => (
            "lvcreate",
            words(&format!("-an -Zn -n {name} -l {} vg", 1 + pick % 3)),
        ),
        2 => (
            "lvcreate",
            words(&format!("-an -Zn -n {name} -l 2 -i 2 vg")),
        ),
        3 => match pick_of(&plain) {
            Some(lv) => ("lvremove", vec!["-f".into(), target(&lv)]),
            None => return,
        },
        4 => match pick_of(&plain) {
            Some(lv) => ("lvextend", vec!["-l".into(), "+1".into(), target(&lv)]),
            None => return,
        },
        5 => match pick_of(&plain) {
            Some(lv) => (
                "lvchange",
                vec!["--addtag".into(), format!("t{n}"), target(&lv)],
            ),
            None => return,
        },
        6 if !has_pool => {
            sb.lvmeta_ok(
                "lvcreate",
                &["--type", "thin-pool", "-n", "pool", "-l", "2", "vg"],
            );
            return;
        }
        6 => {
            sb.lvmeta_ok(
                "lvcreate",
                &["-V", "64m", "--thinpool", "pool", "-n", &name, "vg"],
            );
            return;
        }
        _ => match pick_of(&thin) {
            Some(lv) if pick % 2 == 0 => {
                sb.lvmeta_ok("lvcreate", &["-s", &target(&lv), "-n", &name]);
                return;
            }
            Some(lv) => ("lvremove", vec![target(&lv)]),
            None => return,
        },
    };
    let thin_remove = verb == "lvremove" && thin.iter().any(|t| args.last() == Some(&target(t)));
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    if by_lvm && !thin_remove {
        let mut cmd = vec![verb];
        cmd.extend(refs);
        // lvm2 may refuse (no room, say); that must leave the VG as it was.
        let _ = sb.lvm(&cmd, None);
    } else {
        let out = sb.lvmeta(verb, &refs);
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("insufficient free space") || err.contains("Insufficient suitable"),
                "lvmeta {verb} {refs:?}: {err}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3, failure_persistence: None, .. ProptestConfig::default() })]

    #[test]
    fn lvm2_and_lvmeta_take_turns(steps in prop::collection::vec((0u8..8, any::<bool>(), 0u8..16), 24..32)) {
        if !privileged("lvm2_and_lvmeta_take_turns", &["losetup", "lvs", "vgck"]) {
            return Ok(());
        }
        let sb = Sandbox::new(&[64 * MIB, 64 * MIB], 512);
        let small = ["--pvmetadatacopies", "2", "--metadatasize", "32k", "--dataalignment", "64k"];
        for l in &sb.loops {
            let mut a = small.to_vec();
            a.push(l);
            sb.lvmeta_ok("pvcreate", &a);
        }
        sb.lvm_ok(&["vgcreate", "-s", "1m", "vg", &sb.loops[0], &sb.loops[1]], None);
        for (n, step) in steps.into_iter().enumerate() {
            apply(&sb, n, step);
            sb.vgck_clean("vg", None);
            sb.reports_match(&format!("step {n} {step:?}"), None);
        }
        let seqno = sb.lvmeta_ok("vgs", &["--noheadings", "-o", "vg_seqno", "vg"]);
        eprintln!("mixed run ended at seqno {}", String::from_utf8_lossy(&seqno.stdout).trim());
    }
}

#[test]
fn lvm2_and_lvmeta_share_the_vg_lock_file() {
    if !privileged(
        "lvm2_and_lvmeta_share_the_vg_lock_file",
        &["losetup", "lvcreate", "flock"],
    ) {
        return;
    }
    let sb = Sandbox::new(&[64 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["vg", &sb.loops[0]]);
    // lvmeta holds V_vg: stock lvcreate must wait for it.
    let held = lvmeta::lockfile::lock(
        &sb.lock_dir(),
        &lvmeta::lockfile::Resource::Vg("vg".into()),
        true,
    )
    .expect("lock");
    let start = Instant::now();
    let lvm = std::thread::scope(|s| {
        let t = s.spawn(|| {
            sb.lvm(
                &["lvcreate", "-an", "-Zn", "-n", "bylvm", "-l", "1", "vg"],
                None,
            )
        });
        std::thread::sleep(Duration::from_millis(1500));
        assert!(!t.is_finished(), "lvm2 ran while lvmeta held the VG lock");
        drop(held);
        t.join().expect("lvm2 thread")
    });
    assert!(
        lvm.status.success(),
        "{}",
        String::from_utf8_lossy(&lvm.stderr)
    );
    assert!(start.elapsed() >= Duration::from_millis(1500));
    // lvm2's flock on the same file holds lvmeta back the same way.
    let lock = sb.lock_dir().join("V_vg");
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args(["-c", "sleep 2"])
        .spawn()
        .expect("flock");
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    sb.lvmeta_ok("lvcreate", &["-an", "-n", "bylvmeta", "-l", "1", "vg"]);
    assert!(
        t0.elapsed() >= Duration::from_millis(1000),
        "lvmeta did not wait for the lock"
    );
    holder.wait().expect("flock exit");
    sb.vgck_clean("vg", None);
}
