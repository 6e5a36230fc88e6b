//! Privileged: volumes made, grown and deleted through lvmeta's volume layer (what the CSI
//! controller calls) on a loop device, judged by stock lvm2 after each step (`vgck` clean,
//! reports equal to lvmeta's, the LVs and tags where the driver says).

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::ops::Session;
use lvmeta::volume::{Mode, SizeRange, Volumes};
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
    let out = sb.lvm_ok(
        &[
            "lvs",
            "--noheadings",
            "--units",
            "b",
            "--nosuffix",
            "-o",
            "lv_size",
            "vg/pvc-lin",
        ],
        None,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        (32 * MIB).to_string()
    );
    assert!(vols.delete("pvc-thin").expect("delete thin"));
    assert!(vols.delete("pvc-lin").expect("delete linear"));
    assert!(!vols.delete("pvc-lin").expect("delete again"));
    judge("deleted");
    let out = sb.lvm_ok(&["lvs", "--noheadings", "-a", "vg"], None);
    assert!(
        String::from_utf8_lossy(&out.stdout).trim().is_empty(),
        "LVs left: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
