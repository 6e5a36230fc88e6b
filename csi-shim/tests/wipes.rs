//! Deleted volumes' extents held for erasure, erased, then freed; and new linear volumes
//! that start with their first and last MiB zeroed. In memory (local and shared VGs, the
//! shared one with the in-memory lock manager).

use std::sync::Arc;
use std::time::Duration;

use csi_shim::volume::{Mode as VolMode, SizeRange, Volumes, WIPE_PREFIX, WIPE_TAG};
use lvmeta::activate::{self, FakeBackend, Piece};
use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::edit::{SharedVg, VgSpec};
use lvmeta::lease::{layout, FakeLeases, Host, LeaseError, LeaseManager, Mode};
use lvmeta::session::{Erase, EraseWith, Session, END_BYTES};
use lvmeta::Error;

const MIB: u64 = 1 << 20;

fn size(mib: u64) -> SizeRange {
    SizeRange {
        required: mib * MIB,
        limit: 0,
    }
}

/// A session over one LUN `lun` holding `image`, with VG `vg` (4 MiB extents; a 256 MiB
/// `lvmlock` when shared).
fn session(image: Vec<u8>, shared: Option<Host>) -> (Session, Arc<MemDevice>) {
    session_with_lock_lv(image, shared, lvmeta::units::Bytes(256 << 20))
}

/// The same with an `lvmlock` of `lock_lv_size` bytes.
fn session_with_lock_lv(
    image: Vec<u8>,
    shared: Option<Host>,
    lock_lv_size: lvmeta::units::Bytes,
) -> (Session, Arc<MemDevice>) {
    let mem = Arc::new(MemDevice::from_bytes("lun", image, 512));
    let mut s = Session::new(vec![Box::new(mem.clone()) as Box<dyn BlockDevice>]);
    if let Some(h) = &shared {
        s = s.with_host(h.clone());
    }
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: shared.map(|_| SharedVg { lock_lv_size }),
    };
    s.vgcreate(&spec, &["lun"]).expect("vgcreate");
    (s, mem)
}

fn runs(s: &Session, lv: &str) -> Vec<Piece> {
    let vg = s.vg("vg").expect("vg");
    let p = activate::place(&vg, lv, &[Some("lun".into())]).expect("place");
    p.pieces().into_iter().cloned().collect()
}

fn bytes(mem: &MemDevice, r: &Piece) -> Vec<u8> {
    mem.to_bytes()[r.offset.0 as usize..(r.offset.0 + r.len.0) as usize].to_vec()
}

#[test]
fn a_new_linear_volume_starts_with_zeroed_ends_and_an_old_one_is_never_touched() {
    // A LUN full of an old filesystem's bytes.
    let (s, mem) = session(vec![0xee; 128 << 20], None);
    let v = Volumes::new(&s, "vg");
    v.create("a", VolMode::Linear, size(12)).expect("create");
    let r = runs(&s, "a");
    assert_eq!(r.len(), 1);
    let b = bytes(&mem, &r[0]);
    let end = END_BYTES.0 as usize;
    assert!(b[..end].iter().all(|&x| x == 0), "first MiB");
    assert!(b[b.len() - end..].iter().all(|&x| x == 0), "last MiB");
    assert!(
        b[end..b.len() - end].iter().all(|&x| x == 0xee),
        "only the ends"
    );
    // The volume's own data: an idempotent create (or a clone's) never clears it again.
    mem.write_at(r[0].offset.0, &[7; 4096]).expect("data");
    v.create("a", VolMode::Linear, size(12)).expect("again");
    assert_eq!(bytes(&mem, &r[0])[..4096], [7; 4096]);
}

#[test]
fn a_deletion_holds_the_freed_extents_until_they_are_erased() {
    let (s, mem) = session(vec![0; 256 << 20], None);
    let v = Volumes::new(&s, "vg");
    v.create("a", VolMode::Linear, size(16)).expect("a");
    v.create("t", VolMode::Thin, size(16)).expect("t");
    v.snapshot("snap", "t").expect("snapshot");
    let (a, t) = (runs(&s, "a"), runs(&s, "t"));
    for r in a.iter().chain(&t) {
        mem.write_at(r.offset.0, &vec![0x5a; r.len.0 as usize])
            .expect("data");
    }
    let free = v.free_bytes().expect("free");
    // Gone at once (its name free again, a repeat a no-op); its extents are not free.
    assert!(v.delete("a").expect("delete"));
    assert!(!v.delete("a").expect("again"));
    assert!(v.get("a").expect("get").is_none());
    assert_eq!(v.free_bytes().expect("free"), free);
    let wipes = v.wipes().expect("wipes");
    assert_eq!(wipes.len(), 1);
    assert!(wipes[0].starts_with(WIPE_PREFIX), "{wipes:?}");
    let vg = s.vg("vg").expect("vg");
    let lv = vg.lv(&wipes[0]).expect("wipe LV");
    assert!(lv.tags.contains(&format!("{WIPE_TAG}a")), "{:?}", lv.tags);
    assert!(lv.flags.iter().any(|f| f == "ACTIVATION_SKIP"));
    assert_eq!(v.wiping_bytes().expect("wiping"), 16 * MIB);
    // A thin volume whose snapshot stays frees nothing; its pool goes with the last.
    assert!(v.delete("t").expect("delete t"));
    assert_eq!(v.wipes().expect("wipes").len(), 1);
    assert!(v.delete_snapshot("snap").expect("delete snapshot"));
    assert_eq!(v.wipes().expect("wipes").len(), 2);
    assert!(s
        .vg("vg")
        .expect("vg")
        .lvs
        .iter()
        .all(|l| l.pool().is_none()));
    // A new volume of the same name goes elsewhere meanwhile.
    v.create("a", VolMode::Linear, size(16)).expect("a again");
    let again = runs(&s, "a");
    assert!(!again.iter().any(|x| a.iter().any(|y| x.overlaps(y))));
    v.delete("a").expect("delete");
    // Erased and removed: every byte zero, the space free again.
    for w in v.wipes().expect("wipes") {
        assert!(v.wipe(&w, EraseWith::plain(Erase::Discard)).expect("erase") > 0);
    }
    assert!(v.wipes().expect("wipes").is_empty());
    for r in a.iter().chain(&t).chain(&again) {
        assert!(bytes(&mem, r).iter().all(|&x| x == 0), "{r:?}");
    }
    assert!(v.free_bytes().expect("free") > free);
}

#[test]
fn without_erasure_a_deletion_frees_at_once() {
    let (s, _) = session(vec![0; 64 << 20], None);
    let v = Volumes::new(&s, "vg").without_erasure();
    v.create("a", VolMode::Linear, size(8)).expect("a");
    let free = v.free_bytes().expect("free");
    v.delete("a").expect("delete");
    assert!(v.wipes().expect("wipes").is_empty());
    assert_eq!(v.free_bytes().expect("free"), free + 8 * MIB);
}

#[test]
fn a_volume_mapped_on_this_host_is_not_deleted_nor_erased() {
    let (s, _) = session(vec![0; 64 << 20], None);
    let host = FakeBackend::default();
    let v = Volumes::new(&s, "vg").on_host(&host);
    v.create("a", VolMode::Linear, size(8)).expect("a");
    let act = s.activate("vg", "a", false, false, &host).expect("active");
    let seqno = s.vg("vg").expect("vg").seqno;
    let e = v.delete("a").expect_err("in use");
    assert!(e.to_string().contains("in use on this host"), "{e}");
    assert_eq!(s.vg("vg").expect("vg").seqno, seqno, "nothing written");
    act.deactivate(&host).expect("deactivate");
    drop(act);
    v.delete("a").expect("delete");
    // A device made over the wipe LV's extents (an admin's): not erased while it is there.
    let w = v.wipes().expect("wipes").pop().expect("wipe LV");
    let act = s.activate("vg", &w, false, false, &host).expect("activate");
    let e = v
        .wipe(
            &w,
            EraseWith {
                host: Some(&host),
                ..EraseWith::plain(Erase::ZeroOut)
            },
        )
        .expect_err("mapped");
    assert!(e.to_string().contains("in use on this host"), "{e}");
    act.deactivate(&host).expect("deactivate");
    drop(act);
    v.wipe(
        &w,
        EraseWith {
            host: Some(&host),
            ..EraseWith::plain(Erase::ZeroOut)
        },
    )
    .expect("erased");
}

#[test]
fn an_erasure_that_does_not_read_back_zero_is_an_error() {
    /// A LUN that takes zeroing requests and ignores them.
    struct Deaf(MemDevice);
    impl BlockDevice for Deaf {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn size(&self) -> u64 {
            self.0.size()
        }
        fn logical_sector_size(&self) -> u32 {
            512
        }
        fn read_at(&self, o: u64, b: &mut [u8]) -> std::io::Result<()> {
            self.0.read_at(o, b)
        }
        fn write_at(&self, o: u64, b: &[u8]) -> std::io::Result<()> {
            self.0.write_at(o, b)
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn write_zeroes(&self, _o: u64, _l: u64) -> std::io::Result<()> {
            Ok(())
        }
    }
    let (s, mem) = session(vec![0; 64 << 20], None);
    Volumes::new(&s, "vg")
        .create("a", VolMode::Linear, size(8))
        .expect("a");
    let r = runs(&s, "a");
    mem.write_at(r[0].offset.0 + 4096, &[1; 512]).expect("data");
    let deaf = Session::new(vec![
        Box::new(Deaf(MemDevice::from_bytes("lun", mem.to_bytes(), 512))) as Box<dyn BlockDevice>,
    ]);
    let v = Volumes::new(&deaf, "vg");
    v.delete("a").expect("delete");
    let w = v.wipes().expect("wipes").pop().expect("wipe LV");
    let e = v
        .wipe(&w, EraseWith::plain(Erase::ZeroOut))
        .expect_err("not erased");
    assert!(e.to_string().contains("do not read back as zeroes"), "{e}");
    assert_eq!(v.wipes().expect("wipes"), [w], "kept for the next try");
}

#[test]
fn in_a_shared_vg_a_wipe_lv_has_a_lease_and_a_held_one_is_not_erased() {
    let fake = Arc::new(FakeLeases::default());
    let host = Host::new(fake.clone(), 7, 10, Duration::from_millis(300));
    let (s, _) = session(vec![0; 512 << 20], Some(host));
    s.lockstart("vg").expect("lockstart");
    let v = Volumes::new(&s, "vg");
    v.create("a", VolMode::Linear, size(8)).expect("a");
    let at = layout::Geometry::for_sector(512);
    let paths = [Some("lun".to_owned())];
    let vg = s.vg("vg").expect("vg");
    let lease_a = layout::lv_lease(&vg, &paths, "a", at).expect("a's lease");
    // Staged on another host: not deleted.
    fake.acquire(&lease_a, Mode::Exclusive, false)
        .expect("held elsewhere");
    assert!(matches!(
        v.delete("a"),
        Err(csi_shim::volume::VolumeError::Lvmeta(Error::Lease(
            LeaseError::InUse { .. }
        )))
    ));
    fake.release(&lease_a, None).expect("release");
    v.delete("a").expect("delete");
    let w = v.wipes().expect("wipes").pop().expect("wipe LV");
    let vg = s.vg("vg").expect("vg");
    let lease_w = layout::lv_lease(&vg, &paths, &w, at).expect("the wipe LV's lease");
    assert_eq!(
        fake.resource_name(&lease_w),
        Ok(Some(vg.lv(&w).expect("lv").id.to_string()))
    );
    // Its lease held elsewhere (another wiper at work): not erased here.
    fake.acquire(&lease_w, Mode::Exclusive, false)
        .expect("another wiper");
    assert!(v.wipe(&w, EraseWith::plain(Erase::ZeroOut)).is_err());
    fake.release(&lease_w, None).expect("release");
    v.wipe(&w, EraseWith::plain(Erase::ZeroOut))
        .expect("erased");
    assert_eq!(fake.resource_name(&lease_w), Ok(Some("#unused".into())));
}

#[test]
fn in_a_shared_vg_too_full_to_grow_lvmlock_every_deletion_still_goes_through() {
    // 13 lease slots (67..80 MiB) and about 43 free extents: lvmlock cannot grow (64).
    let fake = Arc::new(FakeLeases::default());
    let host = Host::new(fake, 7, 10, Duration::from_millis(300));
    let (s, _) = session_with_lock_lv(
        vec![0; 256 << 20],
        Some(host),
        lvmeta::units::Bytes(80 << 20),
    );
    s.lockstart("vg").expect("lockstart");
    let v = Volumes::new(&s, "vg");
    // Creations leave eight slots spare for the deletions' wipe LVs; GetCapacity's room
    // counts the lvmlock growth a creation would need, which does not fit.
    for i in 0..5 {
        assert_eq!(
            v.room(VolMode::Linear).expect("room"),
            v.free_bytes().expect("free")
        );
        v.create(&format!("v{i}"), VolMode::Linear, size(4))
            .expect("create");
    }
    assert!(v.free_bytes().expect("free") > 0);
    assert_eq!(v.room(VolMode::Thin).expect("room"), 0);
    let e = v
        .create("more", VolMode::Linear, size(4))
        .expect_err("no slot to spare");
    assert!(e.to_string().contains("free space"), "{e}");
    // Every deletion's wipe LV finds a slot; the wiper frees them; creations work again.
    for i in 0..5 {
        assert!(v.delete(&format!("v{i}")).expect("delete"));
    }
    for w in v.wipes().expect("wipes") {
        v.wipe(&w, EraseWith::plain(Erase::ZeroOut)).expect("erase");
    }
    v.create("more", VolMode::Linear, size(4))
        .expect("room again");
}
