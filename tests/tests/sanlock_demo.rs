//! Privileged: the demo (README, "The demo"), `csi-demo` (a binary of this crate), runs its whole scenario on this
//! machine (private sanlock daemon, loop-device LUN, CSI server, stock `lvs` judging) and
//! leaves nothing behind: no loop device, mount or file, also when interrupted with Ctrl-C.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use lvmeta_tests::{privileged, workspace_bin};

const TOOLS: &[&str] = &["sanlock", "lvs", "mkfs.xfs"];

/// Loop devices whose backing file is under `dir`, and mounts under it.
fn leftovers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/sys/block")
        .expect("/sys/block")
        .flatten()
    {
        let backing = e.path().join("loop/backing_file");
        if let Ok(b) = std::fs::read_to_string(&backing) {
            if Path::new(b.trim()).starts_with(dir) {
                found.push(format!("{:?} over {}", e.file_name(), b.trim()));
            }
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    found.extend(
        mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4))
            .filter(|m| Path::new(m).starts_with(dir))
            .map(|m| format!("mount {m}")),
    );
    found.extend(
        std::fs::read_dir(dir)
            .expect("parent dir")
            .flatten()
            .map(|e| format!("file {}", e.path().display())),
    );
    found
}

fn demo(parent: &Path) -> Command {
    let mut c = Command::new(workspace_bin("lvmeta-tests", "csi-demo"));
    c.arg("--dir").arg(parent);
    c
}

#[test]
fn demo_runs_the_whole_job_and_leaves_nothing() {
    if !privileged("demo_runs_the_whole_job_and_leaves_nothing", TOOLS) {
        return;
    }
    let parent = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let out = demo(parent.path()).output().expect("run the demo");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "vgcreate --shared demo",
        "Probe: ready: true",
        "CreateSnapshot demo-snap of demo-thin: demo/demo-snap",
        "NodeStageVolume demo-fs (activate, mkfs.xfs, mount): ok",
        "NodeExpandVolume demo-fs (xfs_growfs online): filesystem",
        "read the file back: ok",
        "stock lvm2: lvs: sees every volume",
        "DeleteVolume demo-thin (and its pool): ok",
        "clean up (VG, lockspace, sanlock, loop devices, files): ok",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
    // The table repeats every step with its time.
    let table = text.split("\nstep ").nth(1).expect("a table");
    assert!(table.contains("read the file back"), "{table}");
    assert!(table.contains("total"), "{table}");
    assert_eq!(leftovers(parent.path()), Vec::<String>::new());
}

#[test]
fn demo_cleans_up_after_ctrl_c() {
    if !privileged("demo_cleans_up_after_ctrl_c", TOOLS) {
        return;
    }
    let parent = tempfile::tempdir_in("/var/tmp").expect("temp dir");
    let mut child = demo(parent.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut seen = String::new();
    // The lockspace join that follows vgcreate takes seconds: interrupt it.
    for l in lines.by_ref() {
        let l = l.expect("read the demo's output");
        seen.push_str(&l);
        seen.push('\n');
        if l.contains("vgcreate --shared demo") {
            break;
        }
    }
    let kill = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(kill.success());
    for l in lines {
        seen.push_str(&l.expect("read"));
        seen.push('\n');
    }
    let status = child.wait().expect("wait");
    assert!(!status.success(), "an interrupted demo must fail:\n{seen}");
    assert!(
        seen.contains("interrupted: finishing the step running"),
        "{seen}"
    );
    assert!(
        seen.contains("clean up (VG, lockspace, sanlock, loop devices, files): ok"),
        "{seen}"
    );
    assert!(
        !seen.contains("CreateVolume"),
        "went on after Ctrl-C:\n{seen}"
    );
    assert_eq!(leftovers(parent.path()), Vec::<String>::new());
}
