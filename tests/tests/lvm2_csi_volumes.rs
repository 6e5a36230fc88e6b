//! Privileged: volumes made, grown and deleted through lvmeta's volume layer (what the CSI
//! controller calls) on a loop device, judged by stock lvm2 after each step (`vgck` clean,
//! reports equal to lvmeta's, the LVs and tags where the driver says).

use csi_shim::volume::{Content, Mode, PoolOptions, SizeRange, Volumes};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::session::Session;
use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;

#[test]
fn lvm2_judges_csi_volumes() {
    if !privileged("lvm2_judges_csi_volumes", &["losetup", "lvs", "vgck"]) {
        return;
    }
    let sb = Sandbox::new(&[256 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &sb.loops[0]]);
    let dev = FileDevice::open_rw(std::path::Path::new(&sb.loops[0])).expect("open loop");
    let session =
        Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_lock_dir(sb.lock_dir());
    let vols = Volumes::new(&session, "vg");
    let judge = |what: &str| {
        sb.vgck_clean("vg", None);
        sb.reports_match(what, None);
    };
    let size = |mib: u64| SizeRange {
        required: mib * MIB,
        limit: 0,
    };
    let lin = vols
        .create("pvc-lin", Mode::Linear, size(10))
        .expect("linear");
    assert_eq!(lin.bytes, 12 * MIB);
    judge("linear volume");
    vols.create("pvc-thin", Mode::Thin, size(20)).expect("thin");
    judge("thin volume");
    // lvm2 sees the thin LV in its own pool, tagged with the mode.
    let out = sb.lvm_ok(
        &[
            "lvs",
            "--noheadings",
            "-o",
            "lv_name,pool_lv,lv_tags",
            "vg/pvc-thin",
        ],
        None,
    );
    let row = String::from_utf8_lossy(&out.stdout);
    assert!(
        row.contains("pvc-thin-pool") && row.contains("lvmeta.csi/mode=thin"),
        "{row}"
    );
    vols.expand("pvc-thin", size(40)).expect("expand thin");
    vols.expand("pvc-lin", size(30)).expect("expand linear");
    judge("expanded");
    // A thin volume's pool settings (ControllerModifyVolume): lvm2 reads them back, and
    // lvmeta's lv_attr (its zero flag) matches lvm2's.
    let opts = |zero, discards: &str| PoolOptions {
        zero: Some(zero),
        discards: Some(discards.to_owned()),
    };
    vols.tune("pvc-thin", &opts(false, "nopassdown"))
        .expect("tune");
    judge("tuned");
    assert_eq!(
        sb.report_words("lvs", "discards,zero", &["vg/pvc-thin-pool"]),
        ["nopassdown"],
        "not zeroing: lvm2 leaves the zero column empty"
    );
    vols.tune("pvc-thin", &opts(true, "passdown"))
        .expect("tune back");
    judge("tuned back");
    assert_eq!(
        sb.report_words("lvs", "discards,zero", &["vg/pvc-thin-pool"]),
        ["passdown", "zero"]
    );
    assert_eq!(
        sb.report_words("lvs", "lv_size", &["vg/pvc-lin"]),
        [(32 * MIB).to_string()]
    );
    // Snapshots and clones of the thin volume: thin snapshots in its pool, which grows by
    // each one's size; lvm2 sees the origins.
    let pool_bytes = |sb: &Sandbox| -> u64 {
        sb.report_words("lvs", "lv_size", &["vg/pvc-thin-pool"])
            .concat()
            .parse()
            .expect("pool size")
    };
    let before = pool_bytes(&sb);
    let snap = vols.snapshot("snap-1", "pvc-thin").expect("snapshot");
    assert_eq!((snap.source.as_str(), snap.bytes), ("pvc-thin", 40 * MIB));
    assert_eq!(vols.snapshot("snap-1", "pvc-thin").expect("again"), snap);
    assert!(vols.snapshot("snap-1", "pvc-lin").is_err());
    assert!(
        vols.snapshot("snap-lin", "pvc-lin").is_err(),
        "linear volumes have no snapshots"
    );
    judge("snapshot");
    assert_eq!(pool_bytes(&sb), before + 40 * MIB);
    let from_snap = vols
        .create_from(
            "pvc-restored",
            Mode::Thin,
            size(48),
            Content::Snapshot("snap-1"),
            &PoolOptions::default(),
        )
        .expect("from snapshot");
    assert_eq!(from_snap.bytes, 48 * MIB);
    let clone = vols
        .create_from(
            "pvc-clone",
            Mode::Thin,
            size(0),
            Content::Volume("pvc-thin"),
            &PoolOptions::default(),
        )
        .expect("clone");
    assert_eq!(clone.bytes, 40 * MIB);
    assert!(vols
        .create_from(
            "pvc-small",
            Mode::Thin,
            size(8),
            Content::Volume("pvc-thin"),
            &PoolOptions::default(),
        )
        .is_err());
    // A linear clone is a copy: lvm2 sees an ordinary linear LV of the source's size.
    let copy = vols
        .create_from(
            "pvc-copy",
            Mode::Linear,
            size(0),
            Content::Volume("pvc-lin"),
            &PoolOptions::default(),
        )
        .expect("linear clone");
    assert_eq!(copy.bytes, 32 * MIB);
    assert_eq!(
        sb.report_words("lvs", "lv_size,lv_tags", &["vg/pvc-copy"]),
        [(32 * MIB).to_string(), "lvmeta.csi/mode=linear".to_owned()]
    );
    judge("restored and cloned");
    let out = sb.lvm_ok(
        &["lvs", "--noheadings", "-o", "lv_name,origin,pool_lv", "vg"],
        None,
    );
    let rows = String::from_utf8_lossy(&out.stdout).to_string();
    for want in [
        ["snap-1", "pvc-thin", "pvc-thin-pool"],
        ["pvc-restored", "snap-1", "pvc-thin-pool"],
        ["pvc-clone", "pvc-thin", "pvc-thin-pool"],
    ] {
        assert!(
            rows.lines()
                .any(|l| l.split_whitespace().eq(want.iter().copied())),
            "{want:?} not in {rows}"
        );
    }
    assert_eq!(vols.snapshots().expect("list").len(), 1);
    assert_eq!(vols.list().expect("list").len(), 5);
    // The source goes; its snapshot and clones stay (and keep the pool).
    assert!(vols.delete("pvc-thin").expect("delete thin"));
    judge("source deleted");
    assert!(vols.get_snapshot("snap-1").expect("get").is_some());
    assert!(vols.delete_snapshot("snap-1").expect("delete snapshot"));
    assert!(!vols.delete_snapshot("snap-1").expect("again"));
    assert!(vols.delete("pvc-restored").expect("delete restored"));
    assert!(vols.delete("pvc-clone").expect("delete clone"));
    judge("thin volumes deleted");
    assert!(vols.delete("pvc-copy").expect("delete the linear clone"));
    assert!(vols.delete("pvc-lin").expect("delete linear"));
    assert!(!vols.delete("pvc-lin").expect("delete again"));
    // The deleted volumes' extents wait in wipe LVs, which lvm2 reads as LVs like others.
    let wipes = vols.wipes().expect("wipes");
    assert_eq!(wipes.len(), 3, "{wipes:?}");
    judge("deleted, not erased yet");
    for w in &wipes {
        vols.wipe(
            w,
            lvmeta::session::EraseWith::plain(lvmeta::session::Erase::ZeroOut),
        )
        .expect("erase");
    }
    judge("deleted");
    let out = sb.lvm_ok(&["lvs", "--noheadings", "-a", "vg"], None);
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "LVs left: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A volume with data on a PV whose device is gone is abnormal (CSI's volume condition)
/// exactly where lvm2, seeing the same devices, reports its LV's health as `partial`.
#[test]
fn a_volume_on_a_missing_pv_is_abnormal_where_lvm2_says_partial() {
    if !privileged(
        "a_volume_on_a_missing_pv_is_abnormal_where_lvm2_says_partial",
        &["losetup", "lvs"],
    ) {
        return;
    }
    let sb = Sandbox::new(&[64 * MIB, 64 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &sb.loops[0], &sb.loops[1]]);
    let open = |i: usize| {
        let d = FileDevice::open_rw(std::path::Path::new(&sb.loops[i])).expect("open loop");
        Box::new(d) as Box<dyn BlockDevice>
    };
    let both = Session::new(vec![open(0), open(1)]).with_lock_dir(sb.lock_dir());
    let vols = Volumes::new(&both, "vg");
    let size = |mib: u64| SizeRange {
        required: mib * MIB,
        limit: 0,
    };
    for (name, mode) in [
        ("pvc-first", Mode::Linear),
        ("pvc-second", Mode::Linear),
        ("pvc-thin", Mode::Thin),
    ] {
        vols.create(name, mode, size(24)).expect("volume");
    }
    // lvmeta and lvm2 both see the first device only.
    let first = Session::new(vec![open(0)]).with_lock_dir(sb.lock_dir());
    let ours = Volumes::new(&first, "vg")
        .list_with_condition()
        .expect("conditions");
    let filter = format!("devices/global_filter=[\"a|^{}$|\",\"r|.*|\"]", sb.loops[0]);
    let out = sb.lvm(
        &[
            "lvs",
            "--noheadings",
            "-o",
            "lv_name,lv_health_status",
            "vg",
        ],
        Some(&filter),
    );
    let lvm2 = String::from_utf8_lossy(&out.stdout).into_owned();
    let partial = |lv: &str| {
        lvm2.lines()
            .any(|l| l.split_whitespace().eq([lv, "partial"]))
    };
    assert_eq!(ours.len(), 3, "{ours:?}");
    for (v, c) in &ours {
        assert_eq!(c.abnormal, partial(&v.name), "{v:?}: {c:?}\nlvm2:\n{lvm2}");
    }
    assert!(ours.iter().any(|(_, c)| c.abnormal), "{ours:?}");
    assert!(ours.iter().any(|(_, c)| !c.abnormal), "{ours:?}");
}
