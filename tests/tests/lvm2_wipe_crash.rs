//! The wiper under crashes: a volume deleted and its extents erased, with the machine
//! stopped before every write (and every write torn) of the deletion, the erasure and the
//! removal of the wipe LV. After each crash a fresh session must find the VG readable, and
//! either the volume still there with its data, or its extents held by a wipe LV, or free
//! and zero: never free with data. The next wiper then finishes, and a new volume over the
//! same extents reads zeroes. `lvm2_judges_wipe_crash_points` has stock lvm2 read every
//! crash point too (`vgck` clean).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use csi_shim::volume::{Mode, SizeRange, Volumes};
use lvmeta::activate::{self, Piece};
use lvmeta::dev::{BlockDevice, Fault, FaultyDevice, MemDevice};
use lvmeta::edit::VgSpec;
use lvmeta::layout::PvOptions;
use lvmeta::session::{Erase, EraseWith, Session};
use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;
const SIZE: u64 = 64 * MIB;

fn session(mem: &Arc<MemDevice>, fault: Fault, clock: Arc<AtomicUsize>) -> Session {
    let d = FaultyDevice::sharing(mem.clone(), fault, clock);
    Session::new(vec![Box::new(d) as Box<dyn BlockDevice>])
}

fn clean(mem: &Arc<MemDevice>) -> Session {
    Session::new(vec![Box::new(mem.clone()) as Box<dyn BlockDevice>])
}

/// The runs of the device under LV `lv` (for a thin LV: its pool's data and metadata).
fn extents(s: &Session, lv: &str) -> Vec<Piece> {
    let vg = s.vg("vg").expect("vg");
    let p = activate::place(&vg, lv, &[Some("lun".to_owned())]).expect("place");
    p.pieces().into_iter().cloned().collect()
}

fn fill(mem: &MemDevice, runs: &[Piece], byte: u8) {
    for r in runs {
        mem.write_at(r.offset.0, &vec![byte; r.len.0 as usize])
            .expect("fill");
    }
}

fn all_zero(mem: &MemDevice, runs: &[Piece]) -> bool {
    let bytes = mem.to_bytes();
    runs.iter().all(|r| {
        bytes[r.offset.0 as usize..(r.offset.0 + r.len.0) as usize]
            .iter()
            .all(|&b| b == 0)
    })
}

/// A VG on one in-memory LUN with a 6 MiB linear volume `a` in two pieces (a spacer in
/// between) and a thin volume `t`, each volume's extents filled with its own byte; returns
/// the image and the runs of each.
fn base() -> (Vec<u8>, Vec<Piece>, Vec<Piece>) {
    let mem = Arc::new(MemDevice::new("lun", SIZE, 512));
    let s = clean(&mem);
    s.pvcreate("lun", &PvOptions::default(), false)
        .expect("pvcreate");
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 2048,
        tags: vec![],
        shared: None,
    };
    s.vgcreate(&spec, &["lun"]).expect("vgcreate");
    let v = Volumes::new(&s, "vg");
    let size = |mib| SizeRange {
        required: mib * MIB,
        limit: 0,
    };
    v.create("a", Mode::Linear, size(3)).expect("a");
    v.create("spacer", Mode::Linear, size(1)).expect("spacer");
    v.expand("a", size(6)).expect("a in two pieces");
    v.create("t", Mode::Thin, size(4)).expect("t");
    let (a, t) = (extents(&s, "a"), extents(&s, "t"));
    assert_eq!(a.len(), 2, "{a:?}");
    fill(&mem, &a, 0xAB);
    fill(&mem, &t, 0xCD);
    (mem.to_bytes(), a, t)
}

/// Deletes `volume` and wipes it with the machine stopped by `fault`; returns the image.
fn crashed(image: &[u8], volume: &str, fault: Fault) -> (Vec<u8>, usize) {
    let mem = Arc::new(MemDevice::from_bytes("lun", image.to_vec(), 512));
    let clock = Arc::new(AtomicUsize::new(0));
    let s = session(&mem, fault, clock.clone());
    let v = Volumes::new(&s, "vg");
    if v.delete(volume).is_ok() {
        for w in v.wipes().unwrap_or_default() {
            if v.wipe(&w, EraseWith::plain(Erase::ZeroOut)).is_err() {
                break;
            }
        }
    }
    (mem.to_bytes(), clock.load(Ordering::SeqCst))
}

/// What a fresh session finds after a crash; then the wiper finishes and a new volume over
/// the freed extents reads zeroes.
fn check_and_resume(image: Vec<u8>, volume: &str, runs: &[Piece], byte: u8, at: &str) {
    let mem = Arc::new(MemDevice::from_bytes("lun", image, 512));
    let s = clean(&mem);
    let vg = s
        .vg("vg")
        .unwrap_or_else(|e| panic!("{at}: VG unreadable: {e}"));
    let v = Volumes::new(&s, "vg");
    let still = v.get(volume).expect("get").is_some();
    let wipes = v.wipes().expect("wipes");
    let bytes = mem.to_bytes();
    let data_left = runs
        .iter()
        .any(|r| bytes[r.offset.0 as usize..(r.offset.0 + r.len.0) as usize].contains(&byte));
    if still {
        assert!(wipes.is_empty(), "{at}: volume and wipe LV at once");
        assert!(all_hold(&bytes, runs, byte), "{at}: the volume lost data");
    } else if wipes.is_empty() {
        // Freed: nothing of the volume may be left on those extents.
        assert!(
            !data_left,
            "{at}: extents freed with the deleted volume's data"
        );
    } else {
        // Held: none of those extents is free.
        let used = lvmeta::model::extents::UsedMap::of(&vg);
        let mut free = used.clone();
        for r in runs {
            let first = (r.offset.0 - pe_start(&vg)) / extent(&vg);
            let n = r.len.0 / extent(&vg);
            let e = lvmeta::model::extents::PeRun {
                pv: 0,
                pe: u32::try_from(first).expect("pe"),
                len: u32::try_from(n).expect("len"),
            };
            assert!(
                !free.take_free(e),
                "{at}: extents of a wiping volume are free"
            );
        }
    }
    // The next wiper finishes the job.
    for w in v.wipes().expect("wipes") {
        v.wipe(&w, EraseWith::plain(Erase::ZeroOut))
            .unwrap_or_else(|e| panic!("{at}: resuming {w}: {e}"));
    }
    assert!(v.wipes().expect("wipes").is_empty());
    if still {
        return;
    }
    assert!(all_zero(&mem, runs), "{at}: not erased");
    // Everything free is taken by new volumes: what they read there is zero.
    let size = SizeRange {
        required: runs.iter().map(|r| r.len.0).sum(),
        limit: 0,
    };
    v.create("next", Mode::Linear, size).expect("next volume");
    assert!(all_zero(&mem, &extents(&s, "next")), "{at}: next volume");
}

fn all_hold(bytes: &[u8], runs: &[Piece], byte: u8) -> bool {
    runs.iter().all(|r| {
        bytes[r.offset.0 as usize..(r.offset.0 + r.len.0) as usize]
            .iter()
            .all(|&b| b == byte)
    })
}

fn extent(vg: &lvmeta::model::Vg) -> u64 {
    vg.extent_bytes()
}

fn pe_start(vg: &lvmeta::model::Vg) -> u64 {
    vg.pvs[0].pe_start * 512
}

/// Every crash point of deleting and wiping `volume`: (name, image after the crash).
fn crash_points(image: &[u8], volume: &str) -> Vec<(String, Vec<u8>)> {
    let (_, total) = crashed(image, volume, Fault::StopBeforeWrite(usize::MAX));
    assert!(total >= 5, "{volume}: only {total} writes");
    let mut out = Vec::new();
    for n in 0..total {
        let (img, _) = crashed(image, volume, Fault::StopBeforeWrite(n));
        out.push((format!("{volume}: stop before write {n}"), img));
        for bytes in [512, 4096, 3 << 20] {
            let (img, _) = crashed(image, volume, Fault::TearWrite { n, bytes });
            out.push((format!("{volume}: write {n} torn after {bytes} bytes"), img));
        }
    }
    out
}

#[test]
fn wipe_crash_sweep() {
    let (image, a, t) = base();
    let mut points = 0;
    for (volume, runs, byte) in [("a", &a, 0xAB), ("t", &t, 0xCD)] {
        for (at, img) in crash_points(&image, volume) {
            check_and_resume(img, volume, runs, byte, &at);
            points += 1;
        }
    }
    assert!(points > 40, "{points} crash points");
}

#[test]
fn lvm2_judges_wipe_crash_points() {
    if !privileged("lvm2_judges_wipe_crash_points", &["losetup", "vgck", "lvs"]) {
        return;
    }
    let (image, _, _) = base();
    let sb = Sandbox::new(&[SIZE], 512);
    for volume in ["a", "t"] {
        for (at, img) in crash_points(&image, volume)
            .into_iter()
            .filter(|(at, _)| at.contains("stop before"))
        {
            let dev = lvmeta::dev::FileDevice::open_rw(std::path::Path::new(&sb.loops[0]))
                .expect("open loop");
            // The metadata areas are in the first MiB (data is not lvm2's business).
            dev.write_at(0, &img[..MIB as usize]).expect("write image");
            drop(dev);
            eprintln!("{at}");
            sb.vgck_clean("vg", None);
            sb.lvm_ok(&["lvs", "-a", "vg"], None);
        }
    }
}
