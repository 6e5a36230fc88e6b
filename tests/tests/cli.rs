//! The `lvmeta` command on fixture images (regular files, no root needed): `dump` prints the
//! committed text, `vgcfgbackup` writes what lvm2's does, errors exit as lvm2's do.

use std::process::{Command, Output};

use lvmeta_tests::{fixtures_dir, lvmeta_bin, normalise_backup, scan_all, Fixture};

fn lvmeta(args: &[&str]) -> Output {
    Command::new(lvmeta_bin())
        .args(args)
        .output()
        .expect("run lvmeta")
}

/// The fixture's images written out as files; returns the `--devices` argument.
fn images(dir: &std::path::Path, name: &str) -> (Fixture, String) {
    let fx = Fixture::open(&fixtures_dir().join(name));
    let paths: Vec<String> = fx
        .images()
        .iter()
        .zip(fx.mem_devices())
        .map(|(img, dev)| {
            let p = dir.join(format!("{name}-{img}"));
            std::fs::write(&p, dev.to_bytes()).expect("write image");
            p.display().to_string()
        })
        .collect();
    (fx, paths.join(","))
}

#[test]
fn dump_and_vgcfgbackup_match_lvm2() {
    let tmp = tempfile::tempdir().expect("temp dir");
    for (name, vg) in [("linear", "vgl"), ("wrapped", "vgw"), ("shared", "vgsh")] {
        let (fx, devices) = images(tmp.path(), name);
        let out = lvmeta(&["dump", "--devices", &devices, vg]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let scan = scan_all(&fx.mem_devices());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            scan.vgs[0].text.as_str(),
            "{name}: dump"
        );

        let file = tmp.path().join(format!("{name}.backup"));
        let file_arg = file.display().to_string();
        let out = lvmeta(&["vgcfgbackup", "--devices", &devices, "-f", &file_arg, vg]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ours = std::fs::read_to_string(&file).expect("backup written");
        let theirs = std::fs::read_to_string(fx.dir.join("vgcfgbackup")).expect("lvm2 backup");
        assert_eq!(
            normalise_backup(&ours),
            normalise_backup(&theirs),
            "{name}: vgcfgbackup"
        );
    }
}

#[test]
fn errors_exit_like_lvm2() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let (_, devices) = images(tmp.path(), "linear");
    let out = lvmeta(&["lvs", "--devices", &devices, "nosuchvg"]);
    assert_eq!(out.status.code(), Some(5));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Volume group \"nosuchvg\" not found"));
    let out = lvmeta(&["lvs", "--devices", &devices, "vgl/nosuchlv"]);
    assert_eq!(out.status.code(), Some(5));
    // lvm2: an unknown field lists the fields and fails (5); `-o help` lists them (0).
    let out = lvmeta(&["lvs", "--devices", &devices, "-o", "bogus_field"]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Unrecognised field: bogus_field"), "{err}");
    assert!(err.contains("Logical Volume Fields"), "{err}");
    let out = lvmeta(&["lvs", "--devices", &devices, "-o", "help"]);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("lv_name"));
    // lvm2's field-name rules: no underscores, no prefix, lvs -o help's own names.
    let out = lvmeta(&[
        "lvs",
        "--devices",
        &devices,
        "-o",
        "LVNAME,lv_lockargs",
        "vgl",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A bad command line is 3, as lvm2's; help is 0.
    assert_eq!(lvmeta(&["lvs", "--bogus"]).status.code(), Some(3));
    assert_eq!(lvmeta(&["lvs", "--help"]).status.code(), Some(0));
    let lock = tmp.path().join("lock");
    let lock = lock.display().to_string();
    let write = |args: &[&str]| {
        let mut all = vec![args[0], "--devices", &devices, "--lockingdir", &lock];
        all.extend(&args[1..]);
        lvmeta(&all)
    };
    assert_eq!(
        write(&["lvcreate", "-n", "bad/name", "-L", "4m", "vgl"])
            .status
            .code(),
        Some(3)
    );
    assert_eq!(
        write(&["lvextend", "-L", "1m", "vgl/logs"]).status.code(),
        Some(5)
    );
    assert_eq!(
        write(&["lvremove", "-f", "nosuchvg"]).status.code(),
        Some(5)
    );
    // Asked-for units carry no `<` rounding marker.
    let out = lvmeta(&[
        "vgs",
        "--devices",
        &devices,
        "--units",
        "g",
        "--nosuffix",
        "-o",
        "vg_free",
    ]);
    assert!(!String::from_utf8_lossy(&out.stdout).contains('<'));
    let out = lvmeta(&["vgs", "--devices", &devices, "--reportformat", "yaml"]);
    assert_eq!(out.status.code(), Some(3));
    // The shared VG is read without a lease, with a warning.
    let (_, shared) = images(tmp.path(), "shared");
    let out = lvmeta(&["lvs", "--devices", &shared]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("without a lock"));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        table
            .lines()
            .next()
            .is_some_and(|h| h.contains("LV") && h.contains("LSize")),
        "{table}"
    );
    assert!(
        table.contains("first") && !table.contains("lvmlock"),
        "{table}"
    );
    // The display verbs read as the reports do: the shared VG is named as read unlocked.
    for verb in ["pvdisplay", "vgdisplay", "lvdisplay"] {
        let out = lvmeta(&[verb, "--devices", &shared]);
        assert!(out.status.success(), "{verb}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("Reading VG") && err.contains("without a lock"),
            "{verb}: {err}"
        );
    }
}

/// The command is linked without PIE (README, "Why the `lvmeta` command is linked without
/// PIE"): its ELF type is an executable (2), not a shared object (3), unless the build asked
/// for PIE.
#[test]
fn the_command_is_linked_without_pie() {
    // Read as the build read it (lvmeta/cli/build.rs), not from the environment of the run.
    if option_env!("LVMETA_CLI_PIE").is_some() {
        eprintln!("LVMETA_CLI_PIE was set for the build: the command was built as PIE");
        return;
    }
    let elf = std::fs::read(lvmeta_bin()).expect("read the lvmeta binary");
    assert_eq!(&elf[..4], b"\x7fELF");
    let e_type = u16::from_le_bytes([elf[16], elf[17]]);
    assert_eq!(e_type, 2, "ET_EXEC expected");
}
