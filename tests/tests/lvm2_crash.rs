//! Privileged: crash points judged by stock lvm2. Each verb runs on in-memory PVs that stop
//! before their N-th write (every N); the images are then attached to loop devices and
//! stock lvm2 must read the VG at the old or the new seqno, with `vgck` clean.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lvmeta::dev::{BlockDevice, Fault, FaultyDevice, MemDevice};
use lvmeta::edit::{self, LvSpec, PoolSpec, ThinSpec, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::session::Session;
use lvmeta::testing::stamp;
use lvmeta::Error;
use lvmeta_tests::privileged;
use lvmeta_tests::sandbox::Sandbox;

const SIZE: u64 = 12 << 20;

fn session(mems: &[Arc<MemDevice>], fault: Fault) -> (Session, Arc<AtomicUsize>) {
    let clock = Arc::new(AtomicUsize::new(0));
    let devs = mems
        .iter()
        .map(|m| {
            Box::new(FaultyDevice::sharing(m.clone(), fault, clock.clone())) as Box<dyn BlockDevice>
        })
        .collect();
    (Session::new(devs), clock)
}

fn mems(images: &[Vec<u8>]) -> Vec<Arc<MemDevice>> {
    images
        .iter()
        .enumerate()
        .map(|(i, b)| Arc::new(MemDevice::from_bytes(&format!("pv{i}"), b.clone(), 512)))
        .collect()
}

/// A VG with a thin pool and a thin LV on `pvs` PVs made with `opts`.
fn base(pvs: usize, opts: &PvOptions) -> Vec<Vec<u8>> {
    let m: Vec<Arc<MemDevice>> = (0..pvs)
        .map(|i| Arc::new(MemDevice::new(&format!("pv{i}"), SIZE, 512)))
        .collect();
    let (s, _) = session(&m, Fault::StopBeforeWrite(usize::MAX));
    let names: Vec<String> = (0..pvs).map(|i| format!("pv{i}")).collect();
    for n in &names {
        s.pvcreate(n, opts, false).expect("pvcreate");
    }
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 1024,
        tags: vec![],
        shared: None,
    };
    s.vgcreate(&spec, &refs).expect("vgcreate");
    let pool = PoolSpec {
        data: LvSpec::linear("pool", 2, stamp()),
        chunk_size: None,
        metadata_extents: Some(1),
        discards: "passdown".into(),
        zero: true,
    };
    s.update("vg", "lvcreate", |v, ctx| {
        edit::thin::create_pool(v, ctx, &pool).map(|x| x.0)
    })
    .expect("pool");
    s.update("vg", "lvcreate", |v, ctx| {
        edit::thin::create_thin(v, ctx, &thin("t1")).map(|x| x.0)
    })
    .expect("thin");
    m.iter().map(|d| d.to_bytes()).collect()
}

fn thin(name: &str) -> ThinSpec {
    ThinSpec {
        name: Some(name.into()),
        pool: "pool".into(),
        extents: 64,
        origin: None,
        tags: vec![],
        activation_skip: None,
        stamp: stamp(),
    }
}

type Verb = fn(&Session) -> Result<(), Error>;

fn seqno(sb: &Sandbox) -> u32 {
    let out = sb.lvm_ok(&["vgs", "--noheadings", "-o", "vg_seqno", "vg"], None);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("seqno")
}

#[test]
fn lvm2_reads_every_crash_point() {
    if !privileged("lvm2_reads_every_crash_point", &["losetup", "vgck", "vgs"]) {
        return;
    }
    let small = PvOptions {
        metadata_copies: 2,
        metadata_size: Some(lvmeta::units::Bytes(32 << 10)),
        data_alignment: Some(lvmeta::units::Bytes(64 << 10)),
        ..PvOptions::default()
    };
    let verbs: [(&str, Verb); 3] = [
        ("lvcreate", |s| {
            s.update("vg", "t", |v, ctx| {
                edit::lv::create(v, ctx, &LvSpec::linear("new", 2, stamp())).map(|x| x.0)
            })
            .map(|_| ())
        }),
        ("lvcreate-thin", |s| {
            s.update("vg", "t", |v, ctx| {
                edit::thin::create_thin(v, ctx, &thin("t2")).map(|x| x.0)
            })
            .map(|_| ())
        }),
        ("lvremove-thin", |s| {
            s.update("vg", "t", |v, ctx| edit::lv::remove(v, ctx, "t1", false))
                .map(|_| ())
        }),
    ];
    let (mut checked, mut repaired) = (0, 0);
    for (config, pvs, opts) in [
        ("one-pv", 1, PvOptions::default()),
        ("two-pvs-two-copies", 2, small),
    ] {
        let before = base(pvs, &opts);
        let old = seqno(&Sandbox::with_images(&before, 512));
        for (name, verb) in verbs {
            let m = mems(&before);
            let (s, clock) = session(&m, Fault::StopBeforeWrite(usize::MAX));
            verb(&s).expect("fault-free run");
            let writes = clock.load(Ordering::SeqCst);
            for n in 0..=writes {
                let m = mems(&before);
                let (s, _) = session(&m, Fault::StopBeforeWrite(n));
                let _ = verb(&s);
                let images: Vec<Vec<u8>> = m.iter().map(|d| d.to_bytes()).collect();
                let sb = Sandbox::with_images(&images, 512);
                let got = seqno(&sb);
                assert!(
                    got == old || got == old + 1,
                    "{config}/{name}: stopped before write {n}: lvm2 reads seqno {got}, not {old} or {}",
                    old + 1
                );
                // A commit that reached some areas only leaves the others one version behind:
                // lvm2 reads the new one and asks for `vgck --updatemetadata`, as after its own
                // crashes. lvmeta's repair must leave the VG clean.
                let partial = n > 0 && n < writes && got == old + 1;
                if partial {
                    repaired += 1;
                    sb.lvmeta_ok("vgck", &["--updatemetadata", "vg"]);
                    assert_eq!(
                        seqno(&sb),
                        old + 2,
                        "{config}/{name}: repair is a new version"
                    );
                }
                sb.vgck_clean("vg", None);
                sb.lvmeta_ok("vgck", &["vg"]);
                checked += 1;
            }
        }
    }
    eprintln!("lvm2 read {checked} crash points; {repaired} partial commits repaired");
    assert!(repaired > 0, "no crash point fell between two area commits");
}
