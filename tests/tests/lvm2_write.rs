//! Privileged: every writing verb done by the `lvmeta` binary on loop devices, judged by stock
//! lvm2 after each step (`vgck` clean, `pvs`/`vgs`/`lvs` JSON equal to lvmeta's own).

use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;

/// lvm2 reads shared VGs without lvmlockd only when told to use it (then it warns and reads).
const LOCKD: &str = "global/use_lvmlockd=1";

#[test]
fn lvm2_judges_every_verb() {
    if !privileged("lvm2_judges_every_verb", &["losetup", "lvs", "vgck"]) {
        return;
    }
    let sb = Sandbox::new(&[256 * MIB, 256 * MIB, 128 * MIB], 512);
    let [a, b, c] = [&sb.loops[0], &sb.loops[1], &sb.loops[2]];
    let step = |what: &str, verb: &str, args: &[&str]| {
        sb.lvmeta_ok(verb, args);
        sb.vgck_clean("vg", None);
        sb.reports_match(what, None);
    };
    sb.lvmeta_ok("pvcreate", &["--pvmetadatacopies", "2", a]);
    sb.lvmeta_ok("pvcreate", &[b]);
    sb.reports_match("pvcreate", None);
    step(
        "vgcreate",
        "vgcreate",
        &["-s", "4m", "--addtag", "k8s", "vg", a, b],
    );
    step(
        "linear",
        "lvcreate",
        &["-an", "-n", "lin", "-L", "20m", "vg", a],
    );
    step(
        "striped",
        "lvcreate",
        &[
            "-an", "-n", "str", "-L", "16m", "-i", "2", "-I", "128k", "vg",
        ],
    );
    step(
        "pool",
        "lvcreate",
        &[
            "--type",
            "thin-pool",
            "-n",
            "pool",
            "-L",
            "40m",
            "--chunksize",
            "128k",
            "vg",
        ],
    );
    step(
        "thin",
        "lvcreate",
        &[
            "-V",
            "1g",
            "--thinpool",
            "pool",
            "-n",
            "thin1",
            "--addtag",
            "pvc=1",
            "vg",
        ],
    );
    step(
        "thin2",
        "lvcreate",
        &["-T", "-V", "2g", "-n", "thin2", "vg/pool"],
    );
    step("snapshot", "lvcreate", &["-s", "vg/thin1", "-n", "snap1"]);
    step("lvextend", "lvextend", &["-L", "+8m", "vg/lin", b]);
    step("lvextend thin", "lvextend", &["-L", "3g", "vg/thin2"]);
    step("lvextend pool", "lvextend", &["-l", "+2", "vg/pool"]);
    step("lvreduce", "lvreduce", &["-f", "-L", "12m", "vg/lin"]);
    step("lvrename", "lvrename", &["vg/lin", "linear"]);
    step("lvrename pool", "lvrename", &["vg", "pool", "tpool"]);
    step(
        "lvchange",
        "lvchange",
        &[
            "--addtag",
            "a=b",
            "-p",
            "r",
            "--setactivationskip",
            "y",
            "vg/linear",
        ],
    );
    step(
        "lvchange pool",
        "lvchange",
        &["-Z", "n", "--discards", "nopassdown", "vg/tpool"],
    );
    step(
        "lvchange pool back",
        "lvchange",
        &["--zero", "y", "--discards", "ignore", "vg/tpool"],
    );
    step(
        "vgchange",
        "vgchange",
        &["--addtag", "zone/1", "--deltag", "k8s", "vg"],
    );
    step("lvremove thin", "lvremove", &["vg/thin2"]);
    step("lvremove snap", "lvremove", &["-y", "vg/snap1"]);
    step("vgextend", "vgextend", &["vg", c]);
    step(
        "on c",
        "lvcreate",
        &["-an", "-n", "onc", "-l", "3", "vg", c],
    );
    step("lvremove on c", "lvremove", &["vg/onc"]);
    step("vgreduce", "vgreduce", &["vg", c]);
    sb.reports_match("vgreduce left an orphan", None);
    step("lvremove pool", "lvremove", &["-f", "vg/tpool"]);
    // Backup and restore by lvmeta, and the older copy lvm2 can still see on disk.
    let backup = sb.path("vg.backup");
    let bpath = backup.display().to_string();
    sb.lvmeta_ok("vgcfgbackup", &["-f", &bpath, "vg"]);
    step(
        "after backup",
        "lvcreate",
        &["-an", "-n", "later", "-L", "4m", "vg"],
    );
    step("restore file", "vgcfgrestore", &["-f", &bpath, "vg"]);
    let list = String::from_utf8_lossy(&sb.lvmeta_ok("vgcfgrestore", &["--list", "vg"]).stdout)
        .into_owned();
    let later_seqno = list
        .lines()
        .find(|l| l.contains("lvcreate"))
        .and_then(|l| l.split_whitespace().nth(1))
        .expect("an lvcreate copy is listed")
        .to_owned();
    step(
        "restore seqno",
        "vgcfgrestore",
        &["--seqno", &later_seqno, "vg"],
    );
    // lvm2 reads lvmeta's backup as its own.
    sb.lvm_ok(&["vgcfgrestore", "-f", &bpath, "vg"], None);
    sb.vgck_clean("vg", None);
    sb.reports_match("lvm2 restored lvmeta's backup", None);
    sb.lvmeta_ok("vgremove", &["-f", "vg"]);
    sb.reports_match("vgremove", None);
    sb.lvmeta_ok("pvremove", &[a, b, c]);
    let pvs = sb.lvm_ok(&["pvs", "--noheadings"], None);
    assert!(
        String::from_utf8_lossy(&pvs.stdout).trim().is_empty(),
        "labels left behind"
    );
}

#[test]
fn lvm2_reads_lvmeta_shared_vgs() {
    if !privileged("lvm2_reads_lvmeta_shared_vgs", &["losetup", "lvs", "vgck"]) {
        return;
    }
    let sb = Sandbox::new(&[400 * MIB], 512);
    let a = &sb.loops[0];
    // Metadata only: no lockspace here (the leases are tested with sanlock in lvm2_lockd).
    let step = |what: &str, verb: &str, args: &[&str]| {
        let mut a = vec!["--nolocking"];
        a.extend_from_slice(args);
        sb.lvmeta_ok(verb, &a);
        sb.vgck_clean("vg", Some(LOCKD));
        sb.reports_match(what, Some(LOCKD));
    };
    step("vgcreate --shared", "vgcreate", &["--shared", "vg", a]);
    step(
        "first",
        "lvcreate",
        &["-an", "-n", "first", "-L", "8m", "vg"],
    );
    step(
        "second",
        "lvcreate",
        &["-an", "-n", "second", "-L", "8m", "vg"],
    );
    step("free first", "lvremove", &["vg/first"]);
    step(
        "reuse",
        "lvcreate",
        &["-an", "-n", "third", "-L", "4m", "vg"],
    );
    step(
        "pool",
        "lvcreate",
        &["--type", "thin-pool", "-n", "pool", "-L", "20m", "vg"],
    );
    step(
        "thin",
        "lvcreate",
        &["-V", "1g", "--thinpool", "pool", "-n", "t", "vg"],
    );
    let out = sb.lvmeta_ok("lvs", &["-o", "lv_name,lv_lock_args", "--noheadings", "vg"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    // lvmlockd's slots: 67 MiB, 68 MiB, ...; the freed first slot is reused.
    assert!(
        text.contains("third") && text.contains("1.0.0:70254592"),
        "{text}"
    );
    assert!(
        text.contains("second") && text.contains("1.0.0:71303168"),
        "{text}"
    );
    assert!(
        text.contains("pool") && text.contains("1.0.0:72351744"),
        "{text}"
    );
}

/// A thin pool's queued messages, delivered to a (simulated) kernel pool at activation and
/// cleared from the metadata as lvm2's `update_pool_lv` clears them: lvm2 reads the result
/// and keeps the transaction id.
#[test]
fn lvm2_reads_a_pool_whose_messages_were_delivered() {
    if !privileged(
        "lvm2_reads_a_pool_whose_messages_were_delivered",
        &["losetup", "lvs", "vgck"],
    ) {
        return;
    }
    use lvmeta::dev::{BlockDevice, FileDevice};
    let sb = Sandbox::new(&[128 * MIB], 512);
    let a = &sb.loops[0];
    sb.lvmeta_ok("pvcreate", &[a]);
    sb.lvmeta_ok("vgcreate", &["vg", a]);
    sb.lvmeta_ok(
        "lvcreate",
        &["--type", "thin-pool", "-n", "pool", "-L", "20m", "vg"],
    );
    for (name, extra) in [("t", None), ("s", Some("vg/t"))] {
        match extra {
            None => sb.lvmeta_ok(
                "lvcreate",
                &["-V", "1g", "--thinpool", "pool", "-n", name, "vg"],
            ),
            Some(origin) => sb.lvmeta_ok("lvcreate", &["-s", origin, "-n", name]),
        };
    }
    let tid = |sb: &Sandbox| sb.report_words("lvs", "transaction_id", &["vg/pool"]);
    assert_eq!(tid(&sb), ["1"]);
    let dev = FileDevice::open_rw(std::path::Path::new(a)).expect("open loop");
    let s = lvmeta::session::Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>])
        .with_lock_dir(sb.lock_dir());
    let backend = lvmeta::activate::FakeBackend::with_thin();
    let act = s
        .activate("vg", "t", false, false, &backend)
        .expect("activate");
    // While the pool is active here, a snapshot is asked of its holder: the request is a
    // tag on the pool LV, which lvm2 reads and keeps as any tag.
    let r = csi_shim::volume::Request::Snapshot {
        name: "s2".into(),
        source: "t".into(),
    };
    let snapshot = |_: &csi_shim::volume::Volumes<'_>| {
        let spec = lvmeta::edit::ThinSpec {
            name: Some("s2".into()),
            pool: "pool".into(),
            extents: 0,
            origin: Some("t".into()),
            tags: vec![],
            activation_skip: None,
            stamp: lvmeta::edit::Stamp::now(),
        };
        s.update("vg", "lvcreate -s", |v, ctx| {
            lvmeta::edit::thin::create_thin(v, ctx, &spec)
        })
        .map_err(csi_shim::volume::VolumeError::from)
    };
    let vols = csi_shim::volume::Volumes::new(&s, "vg");
    let err = vols
        .through_holder(&r, std::time::Duration::from_millis(100), snapshot)
        .expect_err("nobody serves it here");
    assert!(
        matches!(err, csi_shim::volume::VolumeError::Pending(_)),
        "{err}"
    );
    sb.vgck_clean("vg", None);
    sb.reports_match("request posted", None);
    let tags = sb.report_words("lvs", "lv_tags", &["vg/pool"]);
    assert!(
        tags.iter()
            .any(|t| t.starts_with("lvmeta.csi/request=snapshot:s2:t#")),
        "{tags:?}"
    );
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    // Inactive, the snapshot is made here and the request removed.
    vols.through_holder(&r, std::time::Duration::from_millis(100), snapshot)
        .expect("made here");
    assert!(vols.requests("pool").expect("requests").is_empty());
    let vg = s.vg("vg").expect("vg");
    let p = vg.lv("pool").and_then(|l| l.pool()).expect("a pool");
    // The first activation's queue was delivered and cleared; the snapshot queued again.
    assert_eq!(p.messages.len(), 1, "{:?}", p.messages);
    sb.vgck_clean("vg", None);
    sb.reports_match("delivered, then a snapshot queued", None);
    assert_eq!(tid(&sb), ["2"]);
}
