//! The write path's refusals and bookkeeping, on in-memory PVs: nothing is written when a
//! change cannot be made, lvmlockd's lease slots, thin ids and transaction ids.

use std::sync::Arc;

use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::edit::{self, EditError, LvSpec, NewPv, PoolSpec, SharedVg, ThinSpec, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::model::{SegKind, ThinMessage, Vg};
use lvmeta::session::Session;
use lvmeta::testing::stamp;
use lvmeta::Error;

fn spec(name: &str, shared: bool) -> VgSpec {
    VgSpec {
        name: name.into(),
        extent_size: 8192,
        tags: vec![],
        shared: shared.then_some(SharedVg {
            lock_lv_size: lvmeta::units::Bytes(256 << 20),
        }),
    }
}

/// A VG over one PV of `gib` GiB, built purely (no device).
fn vg(gib: u64, shared: bool) -> Vg {
    let pv = NewPv {
        id: lvmeta::uuid::Uuid::random(),
        device: "/dev/x".into(),
        dev_size: lvmeta::units::Bytes(gib << 30),
        pe_start: lvmeta::units::Bytes(1 << 20),
        tail: lvmeta::units::Bytes(0),
        bootloader: None,
    };
    edit::vg::create(&spec("vg", shared), &[pv], &stamp()).expect("vgcreate")
}

fn lease(vg: &Vg, lv: &str) -> u64 {
    vg.lv(lv)
        .and_then(|l| l.lock_args.as_deref())
        .and_then(|a| a.strip_prefix("1.0.0:"))
        .and_then(|o| o.parse().ok())
        .expect("lease")
}

#[test]
fn leases_take_the_first_free_slot_and_lvmlock_grows_when_full() {
    let ctx = &lvmeta::edit::EditCtx::default();
    let mut v = vg(2, true);
    assert_eq!(v.lv("lvmlock").map(|l| l.extents()), Some(64));
    assert!(v.lv("lvmlock").is_some_and(|l| !l.is_visible()));
    // 189 slots fit in 256 MiB (67..=255); a creation leaves eight of them spare.
    for i in 0..181 {
        v = edit::lv::create(
            v.clone(),
            ctx,
            &LvSpec::linear(&format!("l{i}"), 1, stamp()),
        )
        .expect("create")
        .0;
    }
    assert_eq!(edit::slots::SPARE_LEASE_SLOTS, 8);
    assert_eq!(lease(&v, "l0"), 67 << 20);
    assert_eq!(lease(&v, "l180"), 247 << 20);
    assert_eq!(v.lv("lvmlock").map(|l| l.extents()), Some(64));
    // Only eight left: lvmlock grows by 256 MiB, as lvm2 extends it when full.
    v = edit::lv::create(v.clone(), ctx, &LvSpec::linear("more", 1, stamp()))
        .expect("create")
        .0;
    assert_eq!(v.lv("lvmlock").map(|l| l.extents()), Some(128));
    assert_eq!(lease(&v, "more"), 248 << 20);
    // A freed slot is reused first.
    v = edit::lv::remove(v.clone(), ctx, "l5", false).expect("remove");
    v = edit::lv::create(v.clone(), ctx, &LvSpec::linear("again", 1, stamp()))
        .expect("create")
        .0;
    assert_eq!(lease(&v, "again"), (67 + 5) << 20);
}

#[test]
fn a_removal_holding_its_extents_takes_a_spare_slot_in_a_full_vg() {
    let ctx = &lvmeta::edit::EditCtx::default();
    // 1 GiB: 64 extents for lvmlock, too few left for it to grow after 181 LVs.
    let mut v = vg(1, true);
    for i in 0..181 {
        v = edit::lv::create(
            v.clone(),
            ctx,
            &LvSpec::linear(&format!("l{i}"), 1, stamp()),
        )
        .expect("create")
        .0;
    }
    let e = edit::lv::create(v.clone(), ctx, &LvSpec::linear("more", 1, stamp()))
        .expect_err("lvmlock cannot grow");
    assert!(e.to_string().contains("free space"), "{e}");
    // Each removal gives its extents to a holding LV: the freed slot is avoided (still the
    // removed LV's on disk), a spare one or one an earlier removal freed taken, lvmlock
    // unchanged.
    for i in 0..8 {
        let name = format!("l{i}");
        let before = ctx.used(&v);
        let freed_slot = lease(&v, &name);
        let out = edit::lv::remove(v.clone(), ctx, &name, false).expect("remove");
        let freed = before.freed_in(&ctx.used(&out));
        let spec = LvSpec::linear(&format!("w{i}"), 0, stamp());
        v = edit::lv::hold(out, ctx, &freed, &spec, &[freed_slot])
            .expect("hold")
            .0;
        let taken = lease(&v, &format!("w{i}"));
        assert_ne!(taken, freed_slot);
        assert_eq!(
            taken,
            if i == 0 {
                248 << 20
            } else {
                (67 + i - 1) << 20
            }
        );
    }
    assert_eq!(v.lv("lvmlock").map(|l| l.extents()), Some(64));
}

#[test]
fn thin_ids_and_transactions_follow_lvm2() {
    let ctx = &lvmeta::edit::EditCtx::default();
    let v = vg(1, false);
    let pool = PoolSpec {
        data: LvSpec::linear("pool", 10, stamp()),
        chunk_size: None,
        metadata_extents: None,
        discards: "passdown".into(),
        zero: true,
    };
    let (v, _) = edit::thin::create_pool(v.clone(), ctx, &pool).expect("pool");
    for sub in ["pool_tdata", "pool_tmeta", "lvol0_pmspare"] {
        assert!(v.lv(sub).is_some_and(|l| !l.is_visible()), "{sub}");
    }
    let thin = |name: &str, origin: Option<&str>| ThinSpec {
        name: Some(name.into()),
        pool: "pool".into(),
        extents: 100,
        origin: origin.map(str::to_owned),
        tags: vec![],
        activation_skip: None,
        stamp: stamp(),
    };
    let (v, _) = edit::thin::create_thin(v.clone(), ctx, &thin("a", None)).expect("a");
    let (v, _) = edit::thin::create_thin(v.clone(), ctx, &thin("b", None)).expect("b");
    let (v, _) = edit::thin::create_thin(v.clone(), ctx, &thin("snap", Some("a"))).expect("snap");
    let seg = |v: &Vg, n: &str| v.lv(n).expect(n).segments[0].kind.clone();
    let SegKind::ThinPool(p) = seg(&v, "pool") else {
        panic!("pool")
    };
    // One transaction for the whole queued batch.
    assert_eq!(p.transaction_id, 1);
    assert_eq!(p.messages.len(), 3);
    let SegKind::Thin(s) = seg(&v, "snap") else {
        panic!("thin")
    };
    assert_eq!((s.device_id, s.origin.as_deref()), (3, Some("a")));
    assert!(v.lv("snap").is_some_and(|l| l.has_flag("ACTIVATION_SKIP")));
    // Removing a thin LV whose create is still queued drops the message.
    let v = edit::lv::remove(v.clone(), ctx, "b", false).expect("remove b");
    let SegKind::ThinPool(p) = seg(&v, "pool") else {
        panic!("pool")
    };
    assert!(!p.messages.contains(&ThinMessage::Create("b".into())));
    // The pool goes with its thin LVs only when forced; the spare goes with the last pool.
    assert!(matches!(
        edit::lv::remove(v.clone(), ctx, "pool", false),
        Err(EditError::Refused { .. })
    ));
    let v = edit::lv::remove(v.clone(), ctx, "pool", true).expect("remove pool");
    assert!(
        v.lvs.is_empty(),
        "{:?}",
        v.lvs.iter().map(|l| &l.name).collect::<Vec<_>>()
    );
}

#[test]
fn refusals_name_the_problem() {
    let ctx = &lvmeta::edit::EditCtx::default();
    let v = vg(1, false);
    let e = edit::lv::create(v.clone(), ctx, &LvSpec::linear("big", 1000, stamp()))
        .expect_err("too big");
    assert_eq!(
        e.to_string(),
        "Volume group \"vg\" has insufficient free space (255 extents): 1000 required."
    );
    for bad in ["snapshot0", "x_tmeta", "a b", "lvmlock"] {
        assert!(
            matches!(
                edit::lv::create(v.clone(), ctx, &LvSpec::linear(bad, 1, stamp())),
                Err(EditError::Name(_))
            ),
            "{bad}"
        );
    }
    let (v, _) = edit::lv::create(v.clone(), ctx, &LvSpec::linear("one", 1, stamp())).expect("one");
    assert!(matches!(
        edit::lv::create(v.clone(), ctx, &LvSpec::linear("one", 1, stamp())),
        Err(EditError::Exists { .. })
    ));
    assert!(matches!(
        edit::lv::resize(v.clone(), ctx, "one", 0, None, true),
        Err(EditError::Option { .. })
    ));
    let grown = edit::lv::resize(v.clone(), ctx, "one", 3, None, false).expect("grow");
    // A size planned from an older read of the LV (another host resized it since) is refused.
    edit::lv::expect_size(&grown, "one", 3).expect("unchanged size");
    assert!(matches!(
        edit::lv::expect_size(&grown, "one", 1),
        Err(EditError::Refused { why, .. }) if why.contains("from 1 to 3 extents")
    ));
    assert!(matches!(
        edit::lv::resize(grown.clone(), ctx, "one", 2, None, false),
        Err(EditError::Refused { .. })
    ));
    assert_eq!(
        grown.lv("one").map(|l| (l.extents(), l.segments.len())),
        Some((3, 1))
    );
}

#[test]
fn metadata_that_does_not_fit_writes_nothing() {
    let mem = Arc::new(MemDevice::new("pv0", 64 << 20, 512));
    let s = Session::new(vec![Box::new(mem.clone()) as Box<dyn BlockDevice>]);
    let small = PvOptions {
        metadata_size: Some(lvmeta::units::Bytes(32 << 10)),
        data_alignment: Some(lvmeta::units::Bytes(64 << 10)),
        ..PvOptions::default()
    };
    s.pvcreate("pv0", &small, false).expect("pvcreate");
    let mut vs = spec("vg", false);
    vs.extent_size = 8;
    s.vgcreate(&vs, &["pv0"]).expect("vgcreate");
    let mut made = 0;
    let err = loop {
        let before = mem.to_bytes();
        let name = format!("a-rather-long-logical-volume-name-{made:05}");
        match s.update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear(&name, 1, stamp())).map(|x| x.0)
        }) {
            Ok(_) => made += 1,
            Err(e) => {
                assert!(
                    mem.to_bytes() == before,
                    "a refused commit changed the device"
                );
                break e;
            }
        }
        assert!(made < 1000, "the area never filled");
    };
    assert!(
        matches!(&err, Error::MetadataFull { max: 29952, size, .. } if *size > 29952),
        "{err}"
    );
    assert!(
        err.to_string().contains("is full") && err.to_string().contains("--metadatasize"),
        "{err}"
    );
    // The VG is still the last good version.
    let scan = s.scan();
    assert_eq!(scan.vg("vg").expect("vg").vg.lvs.len(), made);
}

/// A session over PV `pv0` holding `image`, with VG `vg` and thin pool `pool` made on it.
fn with_pool(image: Vec<u8>) -> Session {
    let s = Session::new(vec![
        Box::new(MemDevice::from_bytes("pv0", image, 512)) as Box<dyn BlockDevice>
    ]);
    s.vgcreate(&spec("vg", false), &["pv0"]).expect("vgcreate");
    s.update("vg", "lvcreate", |v, ctx| {
        let pool = PoolSpec {
            data: LvSpec::linear("pool", 2, stamp()),
            chunk_size: None,
            metadata_extents: None,
            discards: "passdown".into(),
            zero: true,
        };
        edit::thin::create_pool(v, ctx, &pool).map(|x| x.0)
    })
    .expect("pool");
    s
}

#[test]
fn a_new_pool_gets_zeroed_metadata_before_it_is_committed() {
    // A LUN full of old bytes: a deleted pool's metadata could be anywhere.
    let s = with_pool(vec![0xaa; 64 << 20]);
    let vg = s.vg("vg").expect("vg");
    let bytes = |lv: &str| {
        let p = lvmeta::activate::place(&vg, lv, &[Some("pv0".into())]).expect("place");
        let piece = p.single().expect("one piece").clone();
        let mut buf = vec![0u8; piece.len.0 as usize];
        let dev = &s.devices()[0];
        dev.read_at(piece.offset.0, &mut buf).expect("read");
        buf
    };
    // The kernel formats a pool whose metadata starts zeroed; lvm2 zeroes it all.
    assert!(bytes("pool_tmeta").iter().all(|&b| b == 0));
    // Data blocks are zeroed by the kernel as they are provisioned, not here.
    assert!(bytes("pool_tdata").iter().all(|&b| b == 0xaa));
}

#[test]
fn a_restored_pool_keeps_its_metadata() {
    let s = with_pool(vec![0; 64 << 20]);
    let with_pool = s.vg("vg").expect("vg");
    let tmeta = lvmeta::activate::place(&with_pool, "pool_tmeta", &[Some("pv0".into())])
        .expect("place")
        .single()
        .expect("one piece")
        .offset
        .0;
    // The kernel wrote the pool's metadata; then the pool was removed by mistake.
    let dev = &s.devices()[0];
    dev.write_at(tmeta, &[0x5a; 4096]).expect("kernel metadata");
    s.update("vg", "lvremove", |v, ctx| {
        edit::lv::remove(v, ctx, "pool", true)
    })
    .expect("removed");
    // vgcfgrestore brings it back with its thin devices: its metadata is not zeroed.
    s.restore("vg", &with_pool).expect("restore");
    assert!(s.vg("vg").expect("vg").lv("pool").is_some());
    let mut back = [0u8; 4096];
    dev.read_at(tmeta, &mut back).expect("read");
    assert!(
        back.iter().all(|&b| b == 0x5a),
        "restored pool metadata was wiped"
    );
}

/// Printing with the LV text cache gives exactly the text a full print gives, through
/// creates, changes, renames and removals, and when the VG becomes write-locked.
#[test]
fn cached_printing_is_full_printing() {
    let ctx = &lvmeta::edit::EditCtx::default();
    use lvmeta::model::TextCache;
    use lvmeta::text::Style;
    let mut cache = TextCache::aligned(4096, 1024);
    let mut check = |v: &Vg, what: &str| {
        let text = v.write_text_cached("t", &mut cache);
        assert_eq!(text, v.to_text(Style::Raw, "t"), "{what}");
        // Where a commit writes it from: aligned, zeroes after it.
        let at = cache.text_range();
        assert_eq!(cache.buffer()[at.start..].as_ptr().align_offset(4096), 0);
        assert!(cache.buffer()[at.end..].iter().all(|&b| b == 0));
        assert!(cache.buffer().len() >= at.end + 1024, "{what}");
    };
    let mut v = vg(8, false);
    for i in 0..5 {
        v = edit::lv::create(v, ctx, &LvSpec::linear(&format!("lv{i}"), 2, stamp()))
            .expect("create")
            .0;
    }
    check(&v, "created");
    let change = edit::lv::LvChange {
        add_tags: vec!["x".into()],
        ..Default::default()
    };
    v = edit::lv::change(v, ctx, "lv2", &change).expect("tag");
    check(&v, "tagged");
    v = edit::lv::rename(v, ctx, "lv3", "renamed").expect("rename");
    check(&v, "renamed");
    v = edit::lv::remove(v, ctx, "lv1", false).expect("remove");
    check(&v, "removed");
    let pool = PoolSpec {
        data: LvSpec::linear("pool", 4, stamp()),
        chunk_size: None,
        metadata_extents: None,
        discards: "passdown".into(),
        zero: true,
    };
    let (w, p) = edit::thin::create_pool(v, ctx, &pool).expect("pool");
    let thin = ThinSpec {
        name: Some("thin".into()),
        pool: p,
        extents: 1,
        origin: None,
        tags: vec![],
        activation_skip: None,
        stamp: stamp(),
    };
    v = edit::thin::create_thin(w, ctx, &thin).expect("thin").0;
    check(&v, "thin volume");
    // The same LVs in a write-locked VG print WRITE as a flag.
    v.system_id = Some("host".into());
    check(&v, "write-locked");
}
