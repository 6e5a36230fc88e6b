//! Group commit on in-memory PVs: changes that arrive while a commit is being written go
//! into the next one together; each caller gets its own result; a failing edit fails alone;
//! a crash at any write of a group loses exactly the changes whose callers were not told OK.
//!
//! A gate in front of the device holds the first commit's first write until the other
//! callers are queued, so the second group holds all of them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use lvmeta::dev::{BlockDevice, Fault, FaultyDevice, MemDevice};
use lvmeta::edit::{self, EditError, LvSpec, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::session::Session;
use lvmeta::testing::stamp;
use lvmeta::Error;

/// Callers queued behind the first commit.
const LATE: usize = 7;

/// A device whose first write waits until [`Gate::open`].
struct Gate<D> {
    inner: D,
    open: Arc<(Mutex<bool>, Condvar)>,
}

impl<D: BlockDevice> BlockDevice for Gate<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn logical_sector_size(&self) -> u32 {
        self.inner.logical_sector_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        let (lock, cv) = &*self.open;
        let mut open = lock.lock().expect("gate");
        while !*open {
            open = cv.wait(open).expect("gate");
        }
        drop(open);
        self.inner.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Spawned threads queue in spawn order when each is given a moment to.
trait TapSleep: Sized {
    fn tap_sleep(self) -> Self {
        std::thread::sleep(Duration::from_millis(20));
        self
    }
}

impl<T> TapSleep for T {}

/// A PV image with VG `vg` and no LVs.
fn base() -> Vec<u8> {
    base_with(false)
}

/// A PV image with VG `vg`; when `old` is set, LV `old` (one extent) and LV `filler`,
/// which leaves one extent free.
fn base_with(old: bool) -> Vec<u8> {
    let mem = Arc::new(MemDevice::new("pv0", 64 << 20, 512));
    let s = Session::new(vec![Box::new(mem.clone()) as Box<dyn BlockDevice>]);
    s.pvcreate("pv0", &PvOptions::default(), false)
        .expect("pvcreate");
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: None,
    };
    s.vgcreate(&spec, &["pv0"]).expect("vgcreate");
    if old {
        s.update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear("old", 1, stamp()))
        })
        .expect("old");
        let rest = u32::try_from(s.vg("vg").expect("vg").free_count() - 1).expect("extents");
        s.update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear("filler", rest, stamp()))
        })
        .expect("filler");
    }
    mem.to_bytes()
}

/// What a run left: the device's bytes, and each caller's result (`lv0` first, the
/// queued ones after).
struct Run {
    image: Vec<u8>,
    results: Vec<(String, Result<String, String>)>,
    writes: usize,
}

/// What a queued caller does.
#[derive(Clone, Copy, PartialEq)]
enum Late {
    /// Creates `lv<i>`.
    Create,
    /// Asks for `lv0` again, which fails.
    Duplicate,
    /// Removes LV `old` (made by [`base`] when asked).
    RemoveOld,
    /// Makes `lv<n>` unless it exists, as an idempotent retry does: a no-op when an
    /// earlier caller made it, in an earlier commit or earlier in the same group.
    Ensure(usize),
}

/// `lv0` is created, and while its commit waits at the gate, `LATE` more callers do what
/// `late` says for them (caller `i` is `late(i)`). The device stops as `fault` says.
fn run(image: &[u8], fault: Fault, bad: Option<usize>) -> Run {
    run_with(image, fault, |i| match bad {
        Some(b) if b == i => Late::Duplicate,
        _ => Late::Create,
    })
}

fn run_with(image: &[u8], fault: Fault, late: impl Fn(usize) -> Late + Sync) -> Run {
    let mem = Arc::new(MemDevice::from_bytes("pv0", image.to_vec(), 512));
    let clock = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let dev = Gate {
        inner: FaultyDevice::sharing(mem.clone(), fault, clock.clone()),
        open: gate.clone(),
    };
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]);
    let create = |name: String| {
        let made = s.update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear(&name, 1, stamp()))
        });
        (name, made.map_err(|e| e.to_string()))
    };
    let results = std::thread::scope(|t| {
        let first = t.spawn(|| create("lv0".into()));
        // lv0's commit is at the gate (or about to be) before the others ask.
        std::thread::sleep(Duration::from_millis(50));
        let create = &create;
        let late: Vec<_> = (1..=LATE)
            .map(|i| {
                let what = late(i);
                let s = &s;
                t.spawn(move || match what {
                    Late::Create => create(format!("lv{i}")),
                    Late::Duplicate => create("lv0".to_owned()),
                    Late::Ensure(n) => {
                        let name = format!("lv{n}");
                        let r = s.update("vg", "lvcreate", |v, ctx| match v.lv(&name) {
                            Some(_) => Ok((v, name.clone())),
                            None => edit::lv::create(v, ctx, &LvSpec::linear(&name, 1, stamp())),
                        });
                        (name, r.map_err(|e| e.to_string()))
                    }
                    Late::RemoveOld => {
                        let r = s.update("vg", "lvremove", |v, ctx| {
                            edit::lv::remove(v, ctx, "old", false)
                        });
                        (
                            "-old".to_owned(),
                            r.map(|()| "-old".to_owned()).map_err(|e| e.to_string()),
                        )
                    }
                })
                // Queued in this order.
                .tap_sleep()
            })
            .collect();
        // Generous: each thread only has to reach the queue.
        std::thread::sleep(Duration::from_millis(300));
        *gate.0.lock().expect("gate") = true;
        gate.1.notify_all();
        let mut out = vec![first.join().expect("lv0")];
        out.extend(late.into_iter().map(|h| h.join().expect("late")));
        out
    });
    Run {
        image: mem.to_bytes(),
        results,
        writes: clock.load(Ordering::SeqCst),
    }
}

/// The LVs and seqno of VG `vg` as a fresh scan of `image` finds them.
fn on_disk(image: &[u8]) -> (BTreeSet<String>, u32) {
    let mem = MemDevice::from_bytes("pv0", image.to_vec(), 512);
    let s = Session::new(vec![Box::new(mem) as Box<dyn BlockDevice>]);
    let vg = s.vg("vg").expect("VG readable after the run");
    let lvs = vg.lvs.iter().map(|l| l.name.clone()).collect();
    (lvs, vg.seqno)
}

fn succeeded(r: &Run) -> BTreeSet<String> {
    r.results
        .iter()
        .filter(|(_, res)| res.is_ok())
        .map(|(n, _)| n.clone())
        .collect()
}

#[test]
fn changes_queued_behind_a_commit_share_the_next_one() {
    let image = base();
    let (_, start) = on_disk(&image);
    let r = run(&image, Fault::StopBeforeWrite(usize::MAX), None);
    for (name, res) in &r.results {
        // Each caller got its own value: the name of the LV it made.
        assert_eq!(res.as_deref(), Ok(name.as_str()), "{name}");
    }
    let (lvs, seqno) = on_disk(&r.image);
    assert_eq!(lvs, succeeded(&r));
    assert_eq!(lvs.len(), LATE + 1);
    // lv0's commit, then ONE commit of the seven queued behind it.
    assert_eq!(
        seqno,
        start + 2,
        "{} commits for {} changes",
        seqno - start,
        LATE + 1
    );
}

#[test]
fn a_failing_edit_fails_alone() {
    let image = base();
    let r = run(&image, Fault::StopBeforeWrite(usize::MAX), Some(3));
    let (_, bad) = &r.results[3];
    assert!(
        bad.as_ref().is_err_and(|e| e.contains("already exists")),
        "{bad:?}"
    );
    let (lvs, _) = on_disk(&r.image);
    assert_eq!(lvs, succeeded(&r));
    assert_eq!(lvs.len(), LATE, "everything but the duplicate");
    // The duplicate's error is the edit's own, typed.
    let mem = MemDevice::from_bytes("pv0", r.image.clone(), 512);
    let s = Session::new(vec![Box::new(mem) as Box<dyn BlockDevice>]);
    let e = s
        .update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear("lv0", 1, stamp()))
        })
        .expect_err("duplicate");
    assert!(matches!(e, Error::Edit(EditError::Exists { .. })), "{e}");
}

#[test]
fn a_crash_at_any_write_of_a_group_loses_exactly_the_unacknowledged_changes() {
    let image = base();
    let total = run(&image, Fault::StopBeforeWrite(usize::MAX), None).writes;
    assert!(
        total >= 4,
        "two commits of two writes each at least: {total}"
    );
    for n in 0..=total {
        let r = run(&image, Fault::StopBeforeWrite(n), None);
        let (lvs, _) = on_disk(&r.image);
        // Old or new, never a mix: what is on disk is what the callers were told.
        assert_eq!(lvs, succeeded(&r), "stopped before write {n}");
        let late_ok = r.results[1..].iter().filter(|(_, x)| x.is_ok()).count();
        assert!(
            late_ok == 0 || late_ok == LATE,
            "stopped before write {n}: a group is all or nothing ({late_ok} of {LATE})"
        );
    }
}

/// A change in a group does not get the extents an earlier change of the same group freed:
/// they are still the removed LV's on disk until the commit (a new linear LV's ends are
/// zeroed before it). `lv0` takes the VG's last free extent; then, in one group, `old` is
/// removed and six more LVs are asked for: none may land on `old`'s extent.
#[test]
fn extents_freed_in_a_group_are_not_handed_out_in_it() {
    let image = base_with(true);
    let r = run_with(&image, Fault::StopBeforeWrite(usize::MAX), |i| match i {
        1 => Late::RemoveOld,
        _ => Late::Create,
    });
    let results: std::collections::HashMap<_, _> = r.results.iter().cloned().collect();
    assert!(
        results["lv0"].is_ok() && results["-old"].is_ok(),
        "{results:?}"
    );
    for i in 2..=LATE {
        let res = &results[&format!("lv{i}")];
        assert!(
            res.as_ref()
                .is_err_and(|e| e.contains("insufficient free space")),
            "lv{i} got the extent removed in its own group: {res:?}"
        );
    }
    let (lvs, _) = on_disk(&r.image);
    assert!(!lvs.contains("old") && lvs.contains("lv0"), "{lvs:?}");
    // Committed, the extent is free again.
    let mem = MemDevice::from_bytes("pv0", r.image.clone(), 512);
    assert_eq!(
        Session::new(vec![Box::new(mem) as Box<dyn BlockDevice>])
            .vg("vg")
            .expect("vg")
            .free_count(),
        1
    );
}

/// A group whose changes do not all fit the metadata area: the ones that fit go in, the
/// others fail alone (MetadataFull), not the whole group.
#[test]
fn a_group_too_large_for_the_area_fails_only_the_changes_that_do_not_fit() {
    let mem = Arc::new(MemDevice::new("pv0", 64 << 20, 512));
    let s = Session::new(vec![Box::new(mem.clone()) as Box<dyn BlockDevice>]);
    let small = PvOptions {
        metadata_size: Some(lvmeta::units::Bytes(32 << 10)),
        // Else the area runs up to the first extent at 1 MiB.
        data_alignment: Some(lvmeta::units::Bytes(64 << 10)),
        ..PvOptions::default()
    };
    s.pvcreate("pv0", &small, false).expect("pvcreate");
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 128,
        tags: vec![],
        shared: None,
    };
    s.vgcreate(&spec, &["pv0"]).expect("vgcreate");
    // Full, then room for a few more made again.
    let mut n = 0;
    while s
        .update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear(&format!("fill{n:03}"), 1, stamp()))
        })
        .is_ok()
    {
        n += 1;
    }
    for i in 0..4 {
        s.update("vg", "lvremove", |v, ctx| {
            edit::lv::remove(v, ctx, &format!("fill{i:03}"), false)
        })
        .expect("remove");
    }
    let image = mem.to_bytes();
    let r = run(&image, Fault::StopBeforeWrite(usize::MAX), None);
    let ok = succeeded(&r);
    let full = r
        .results
        .iter()
        .filter(|(_, x)| x.as_ref().is_err_and(|e| e.contains("is full")))
        .count();
    assert!(ok.len() >= 2 && full >= 1, "{:?}", r.results);
    assert_eq!(ok.len() + full, LATE + 1, "{:?}", r.results);
    let (lvs, _) = on_disk(&r.image);
    assert_eq!(lvs.iter().filter(|l| l.starts_with("lv")).count(), ok.len());
}

/// The seqno is the commit's: one edit of several steps (a pool and its thin LV, as
/// CreateVolume makes them) is one new version, and a restored backup's version is above
/// both the backup's and the VG's.
#[test]
fn every_commit_is_one_version() {
    let mem = MemDevice::from_bytes("pv0", base(), 512);
    let s = Session::new(vec![Box::new(mem) as Box<dyn BlockDevice>]);
    let start = s.vg("vg").expect("vg").seqno;
    s.update("vg", "lvcreate", |v, ctx| {
        let pool = edit::PoolSpec {
            data: LvSpec::linear("pool", 4, stamp()),
            chunk_size: None,
            metadata_extents: None,
            discards: "passdown".into(),
            zero: true,
        };
        let (v, pool) = edit::thin::create_pool(v, ctx, &pool)?;
        let thin = edit::ThinSpec {
            name: Some("thin".into()),
            pool,
            extents: 8,
            origin: None,
            tags: vec![],
            activation_skip: None,
            stamp: stamp(),
        };
        edit::thin::create_thin(v, ctx, &thin)
    })
    .expect("pool and thin");
    let after = s.vg("vg").expect("vg");
    assert_eq!(after.seqno, start + 1, "a pool and a thin LV in one edit");
    // A backup from the future: the restored version is above it.
    let mut backup = after.clone();
    backup.seqno = start + 10;
    assert_eq!(s.restore("vg", &backup).expect("restore").seqno, start + 11);
    // An older backup: above the VG's version.
    backup.seqno = start;
    assert_eq!(s.restore("vg", &backup).expect("restore").seqno, start + 12);
    assert_eq!(s.repair("vg").expect("repair").seqno, start + 13);
}

/// Callers whose edits change nothing (retries of a change already made, in an earlier
/// commit or earlier in their own group) write nothing, yet are told OK only when what
/// they answer is on disk: at every write of a run the machine may stop, and what is on
/// disk is exactly what the callers were told.
#[test]
fn changes_that_change_nothing_write_nothing() {
    // Caller 1 retries lv0 (committed); callers 2 and 3 both ensure lv2 in the same group
    // (so do 4 and 5, 6 and 7): whichever comes second changes nothing, in any order the
    // threads reach the queue.
    let late = |i: usize| match i % 2 {
        1 => Late::Ensure(i - 1),
        _ => Late::Ensure(i),
    };
    let image = base();
    let (_, start) = on_disk(&image);
    let r = run_with(&image, Fault::StopBeforeWrite(usize::MAX), late);
    assert!(r.results.iter().all(|(_, x)| x.is_ok()), "{:?}", r.results);
    let (lvs, seqno) = on_disk(&r.image);
    assert_eq!(lvs, succeeded(&r));
    assert_eq!(lvs.len(), 4, "lv0, lv2, lv4, lv6");
    assert_eq!(seqno, start + 2, "lv0's commit, then one group");
    // A retry alone: not a byte written.
    let mem = Arc::new(MemDevice::from_bytes("pv0", r.image.clone(), 512));
    let s = Session::new(vec![Box::new(mem.clone()) as Box<dyn BlockDevice>]);
    let again = s.update("vg", "lvcreate", |v, _| match v.lv("lv2") {
        Some(_) => Ok((v, true)),
        None => Ok((v, false)),
    });
    assert!(again.expect("retry"));
    assert!(mem.to_bytes() == r.image, "a change of nothing wrote");
    for n in 0..=r.writes {
        let r = run_with(&image, Fault::StopBeforeWrite(n), late);
        let (lvs, _) = on_disk(&r.image);
        assert_eq!(lvs, succeeded(&r), "stopped before write {n}");
    }
}

/// A commit torn between two PVs' areas leaves them on different versions; a retry that
/// changes nothing is written all the same and mends them: no copy lags behind.
#[test]
fn a_retry_after_a_torn_commit_mends_the_areas_left_behind() {
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: None,
    };
    let made: Vec<Arc<MemDevice>> = (0..2)
        .map(|i| Arc::new(MemDevice::new(&format!("pv{i}"), 64 << 20, 512)))
        .collect();
    let boxed = |devs: &[Arc<MemDevice>]| -> Vec<Box<dyn BlockDevice>> {
        devs.iter()
            .map(|d| Box::new(d.clone()) as Box<dyn BlockDevice>)
            .collect()
    };
    let s = Session::new(boxed(&made));
    for pv in ["pv0", "pv1"] {
        s.pvcreate(pv, &PvOptions::default(), false)
            .expect("pvcreate");
    }
    s.vgcreate(&spec, &["pv0", "pv1"]).expect("vgcreate");
    let images: Vec<Vec<u8>> = made.iter().map(|d| d.to_bytes()).collect();
    let ensure = |v: lvmeta::model::Vg, ctx: &edit::EditCtx| match v.lv("x") {
        Some(_) => Ok(v),
        None => edit::lv::create(v, ctx, &LvSpec::linear("x", 1, stamp())).map(|x| x.0),
    };
    let mut torn = 0;
    for n in 0.. {
        let mems: Vec<Arc<MemDevice>> = images
            .iter()
            .enumerate()
            .map(|(i, im)| Arc::new(MemDevice::from_bytes(&format!("pv{i}"), im.clone(), 512)))
            .collect();
        let clock = Arc::new(AtomicUsize::new(0));
        let faulty: Vec<Box<dyn BlockDevice>> = mems
            .iter()
            .map(|m| {
                let f = FaultyDevice::sharing(m.clone(), Fault::StopBeforeWrite(n), clock.clone());
                Box::new(f) as Box<dyn BlockDevice>
            })
            .collect();
        if Session::new(faulty)
            .update("vg", "lvcreate", ensure)
            .is_ok()
        {
            break;
        }
        let fresh = Session::new(boxed(&mems));
        let vg = fresh.vg("vg").expect("readable after a torn commit");
        if vg.lv("x").is_none() || fresh.check("vg").expect("vgck").is_empty() {
            continue;
        }
        torn += 1;
        fresh.update("vg", "lvcreate", ensure).expect("retry");
        let after = Session::new(boxed(&mems));
        let warnings = after.check("vg").expect("vgck");
        assert!(
            warnings.is_empty(),
            "stopped before write {n}: {warnings:?}"
        );
        assert_eq!(after.vg("vg").expect("vg").seqno, vg.seqno + 1);
    }
    assert!(torn > 0, "no stop left the areas on different versions");
}
