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
use lvmeta::edit::{self, EditError, LvSpec, Stamp, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::session::Session;
use lvmeta::Error;

/// Callers queued behind the first commit.
const LATE: usize = 7;

fn stamp() -> Stamp {
    Stamp {
        time: 1_800_000_000,
        host: "groups".into(),
    }
}

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

/// A PV image with VG `vg` and no LVs.
fn base() -> Vec<u8> {
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
    mem.to_bytes()
}

/// What a run left: the device's bytes, and each caller's result (`lv0` first, the
/// queued ones after).
struct Run {
    image: Vec<u8>,
    results: Vec<(String, Result<String, String>)>,
    writes: usize,
}

/// `lv0` is created, and while its commit waits at the gate, `LATE` more callers create
/// `lv1..`; caller `bad` (if any) asks for `lv0` again, which fails. The device stops as
/// `fault` says.
fn run(image: &[u8], fault: Fault, bad: Option<usize>) -> Run {
    let mem = Arc::new(MemDevice::from_bytes("pv0", image.to_vec(), 512));
    let clock = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new((Mutex::new(false), Condvar::new()));
    let dev = Gate {
        inner: FaultyDevice::sharing(mem.clone(), fault, clock.clone()),
        open: gate.clone(),
    };
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]);
    let create = |name: String| {
        let made = s.update("vg", "lvcreate", |v| {
            edit::lv::create(v, &LvSpec::linear(&name, 1, stamp()))
        });
        (name, made.map_err(|e| e.to_string()))
    };
    let results = std::thread::scope(|t| {
        let first = t.spawn(|| create("lv0".into()));
        // lv0's commit is at the gate (or about to be) before the others ask.
        std::thread::sleep(Duration::from_millis(50));
        let late: Vec<_> = (1..=LATE)
            .map(|i| {
                let name = match bad {
                    Some(b) if b == i => "lv0".to_owned(),
                    _ => format!("lv{i}"),
                };
                t.spawn(move || create(name))
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
        .update("vg", "lvcreate", |v| {
            edit::lv::create(v, &LvSpec::linear("lv0", 1, stamp()))
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
