//! Leases around changes of a shared VG, with the in-memory lock manager: what `vgcreate
//! --shared` writes, that a host must join the lockspace first, that each change holds the VG
//! lease and leaves the new seqno in its value block, LV leases written and freed, and a lease
//! held elsewhere making a change wait and then fail clearly.

use std::sync::Arc;
use std::time::Duration;

use lvmeta::activate::Backend;
use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::edit::{self, LvSpec, SharedVg, VgSpec};
use lvmeta::lease::{layout, FakeLeases, Host, LeaseError, LeaseManager, Mode, VgPlaces};
use lvmeta::session::Session;
use lvmeta::testing::stamp;
use lvmeta::Error;

/// In-memory leases and host 7 using them.
fn fake_host() -> (Arc<FakeLeases>, Host) {
    let fake = Arc::new(FakeLeases::default());
    let host = Host::new(fake.clone(), 7, 10, Duration::from_millis(300));
    (fake, host)
}

fn setup() -> (Session, Arc<FakeLeases>, Host) {
    let (fake, host) = fake_host();
    let s = Session::new(vec![
        Box::new(MemDevice::new("pv0", 512 << 20, 512)) as Box<dyn BlockDevice>
    ])
    .with_host(host.clone());
    s.vgcreate(&shared_spec(), &["pv0"])
        .expect("vgcreate --shared");
    (s, fake, host)
}

fn shared_spec() -> VgSpec {
    VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: Some(SharedVg {
            lock_lv_size: lvmeta::units::Bytes(256 << 20),
        }),
    }
}

fn places() -> VgPlaces {
    VgPlaces {
        paths: vec![Some("pv0".into())],
        geometry: layout::Geometry::for_sector(512),
    }
}

/// Creates LV `name` and returns the VG as committed.
fn create(s: &Session, name: &str) -> Result<lvmeta::model::Vg, Error> {
    s.update("vg", "lvcreate", |v, ctx| {
        edit::lv::create(v, ctx, &LvSpec::linear(name, 1, stamp()))
    })?;
    s.vg("vg")
}

#[test]
fn shared_vg_changes_hold_the_vg_lease() {
    let (s, fake, host) = setup();
    let vg = s.scan().vg("vg").expect("vg").vg.clone();
    let at = places();
    let vgl = layout::vg_lease(&vg, &at.paths, at.geometry).expect("VG lease");
    assert_eq!(fake.resource_name(&vgl), Ok(Some("VGLK".into())));
    let slots = layout::lv_slots(&vg, &at.paths, at.geometry);
    assert_eq!(slots.len(), 189);
    assert_eq!(fake.resource_name(&slots[0]), Ok(Some("#unused".into())));
    // Not joined yet: refused, nothing written.
    assert!(matches!(
        create(&s, "a"),
        Err(Error::Lease(LeaseError::NotJoined { .. }))
    ));
    s.lockstart("vg").expect("lockstart");
    let after = create(&s, "a").expect("create");
    // The LV's lease carries its uuid; the value block the new seqno.
    let lv = layout::lv_lease(&after, &at.paths, "a", at.geometry).expect("LV lease");
    assert_eq!(
        fake.resource_name(&lv),
        Ok(Some(after.lv("a").expect("a").id.to_string()))
    );
    let lvb = fake
        .acquire(&vgl, Mode::Exclusive, true)
        .expect("free again");
    assert_eq!(lvb, Some(layout::Lvb::for_seqno(after.seqno)));
    // Held by someone else: the change waits, then says so.
    let err = create(&s, "b").expect_err("lease held");
    assert!(
        err.to_string().contains("still held by another host"),
        "{err}"
    );
    fake.release(&vgl, None).expect("release");
    s.update("vg", "lvremove", |v, ctx| {
        edit::lv::remove(v, ctx, "a", false)
    })
    .expect("remove");
    let after = s.vg("vg").expect("vg");
    assert!(after.lv("a").is_none());
    assert_eq!(fake.resource_name(&lv), Ok(Some("#unused".into())));
    host.stop(&after, &at).expect("lockstop");
    assert!(matches!(
        create(&s, "c"),
        Err(Error::Lease(LeaseError::NotJoined { .. }))
    ));
}

#[test]
fn only_the_first_shared_vg_enables_the_global_lease() {
    let (fake, host) = fake_host();
    // Two PVs, a shared VG on each, made by a session that sees both.
    let a = Arc::new(MemDevice::new("pv0", 512 << 20, 512));
    let b = Arc::new(MemDevice::new("pv1", 512 << 20, 512));
    let s = Session::new(vec![
        Box::new(a.clone()) as Box<dyn BlockDevice>,
        Box::new(b.clone()) as Box<dyn BlockDevice>,
    ])
    .with_host(host.clone());
    s.vgcreate(&shared_spec(), &["pv0"]).expect("first");
    let mut second = shared_spec();
    second.name = "vg2".into();
    s.vgcreate(&second, &["pv1"]).expect("second");
    let scan = s.scan();
    let gl_name = |name: &str, dev: &str| {
        let vg = &scan.vg(name).expect("vg").vg;
        let gl = layout::gl_lease(
            vg,
            &[Some(dev.into())],
            layout::GL_NAME,
            layout::Geometry::for_sector(512),
        )
        .expect("GL");
        fake.resource_name(&gl).expect("name")
    };
    assert_eq!(gl_name("vg", "pv0").as_deref(), Some("GLLK"));
    assert_eq!(gl_name("vg2", "pv1").as_deref(), Some("_GLLK_disabled"));
}

#[test]
fn vgremove_of_a_shared_vg_marks_the_vg_lease_removed() {
    let (s, fake, host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vg = s.scan().vg("vg").expect("vg").vg.clone();
    let at = places();
    let vgl = layout::vg_lease(&vg, &at.paths, at.geometry).expect("VG lease");
    s.vgremove("vg", false).expect("vgremove");
    assert!(s.scan().vgs.is_empty());
    let lockspace = host.lockspace(&vg, &at).expect("lockspace");
    assert_eq!(fake.joined(&lockspace), Ok(false));
    fake.join(&lockspace, 10).expect("join");
    let lvb = fake.acquire(&vgl, Mode::Exclusive, true).expect("free");
    assert_eq!(lvb.map(|l| l.flags), Some(layout::LVB_REMOVED));
}

#[test]
fn shared_vgs_need_a_lock_manager_or_nolocking() {
    let (s, _, _) = setup();
    drop(s);
    let dev = MemDevice::new("pv0", 512 << 20, 512);
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]);
    let spec = shared_spec();
    assert!(matches!(
        s.vgcreate(&spec, &["pv0"]),
        Err(Error::SharedWithoutLeases(_))
    ));
    let s = s.without_locking();
    s.vgcreate(&spec, &["pv0"]).expect("--nolocking");
    create(&s, "a").expect("--nolocking change");
}

#[test]
fn pv_and_vg_namespace_changes_hold_the_global_lease_and_vgextend_the_vg_lease() {
    let (fake, host) = fake_host();
    let s = Session::new(
        ["pv0", "pv1", "pv2"]
            .iter()
            .map(|n| Box::new(MemDevice::new(n, 512 << 20, 512)) as Box<dyn BlockDevice>)
            .collect(),
    )
    .with_host(host.clone());
    s.vgcreate(&shared_spec(), &["pv0"])
        .expect("vgcreate --shared");
    let vg = s.vg("vg").expect("vg");
    let at = places();
    let gl = layout::gl_lease(&vg, &at.paths, layout::GL_NAME, at.geometry).expect("GL");
    let vgl = layout::vg_lease(&vg, &at.paths, at.geometry).expect("VG lease");
    let opts = lvmeta::layout::PvOptions::default();
    s.pvcreate("pv2", &opts, false)
        .expect("lockspace not joined: no GL, as with lvmlockd");
    s.lockstart("vg").expect("lockstart");
    // Another host holds the GL: PV changes wait, then say so.
    fake.acquire(&gl, Mode::Exclusive, false).expect("GL");
    let err = s.pvcreate("pv1", &opts, false).expect_err("GL held");
    assert!(
        err.to_string().contains("still held by another host"),
        "{err}"
    );
    let err = s.pvremove("pv2").expect_err("GL held");
    assert!(
        err.to_string().contains("still held by another host"),
        "{err}"
    );
    fake.release(&gl, None).expect("release");
    s.pvcreate("pv1", &opts, false).expect("pvcreate");
    // Released again afterwards.
    fake.acquire(&gl, Mode::Exclusive, false)
        .expect("GL free after pvcreate");
    fake.release(&gl, None).expect("release");
    // vgextend and vgreduce change the VG under its lease and announce the new seqno.
    fake.acquire(&vgl, Mode::Exclusive, false)
        .expect("VG lease");
    let err = s.vgextend("vg", &["pv1"]).expect_err("VG lease held");
    assert!(
        err.to_string().contains("still held by another host"),
        "{err}"
    );
    assert_eq!(s.vg("vg").expect("vg").pvs.len(), 1, "nothing written");
    fake.release(&vgl, None).expect("release");
    let out = s.vgextend("vg", &["pv1"]).expect("vgextend");
    let lvb = fake.acquire(&vgl, Mode::Exclusive, true).expect("free");
    assert_eq!(lvb, Some(layout::Lvb::for_seqno(out.seqno)));
    fake.release(&vgl, None).expect("release");
    let out = s.vgreduce("vg", &["pv1"]).expect("vgreduce");
    let lvb = fake.acquire(&vgl, Mode::Exclusive, true).expect("free");
    assert_eq!(lvb, Some(layout::Lvb::for_seqno(out.seqno)));
    fake.release(&vgl, None).expect("release");
    // vgremove of the VG that holds the GL: the GL is released before the lockspace is left.
    s.vgremove("vg", false).expect("vgremove");
    let ls = host.lockspace(&vg, &at).expect("lockspace");
    assert_eq!(fake.joined(&ls), Ok(false));
}

#[test]
fn reports_read_under_shared_global_and_vg_leases() {
    let (s, fake, host) = setup();
    let at = places();
    // Lockspace not started: read without a lease, and named as such.
    let (_, locks) = s.read_locked(&[]).expect("read");
    assert_eq!(locks.unlocked, vec!["vg".to_owned()]);
    drop(locks);
    s.lockstart("vg").expect("lockstart");
    let vg = create(&s, "a").expect("create");
    let vgl = layout::vg_lease(&vg, &at.paths, at.geometry).expect("VG lease");
    let gl = layout::gl_lease(&vg, &at.paths, layout::GL_NAME, at.geometry).expect("GL");
    // Every VG: GL and VG lease shared while the report reads; writers wait, readers do not.
    let (scan, locks) = s.read_locked(&[]).expect("read");
    assert!(locks.unlocked.is_empty());
    assert!(scan.vg("vg").expect("vg").vg.lv("a").is_some());
    for r in [&vgl, &gl] {
        assert!(matches!(
            fake.acquire(r, Mode::Exclusive, false),
            Err(LeaseError::Busy { .. })
        ));
    }
    fake.acquire(&vgl, Mode::Shared, false)
        .expect("second reader");
    fake.release(&vgl, None).expect("release");
    drop(locks);
    for r in [&vgl, &gl] {
        fake.acquire(r, Mode::Exclusive, false)
            .expect("free after the report");
        fake.release(r, None).expect("release");
    }
    // A named VG: its lease only, not the GL.
    let (_, locks) = s.read_locked(&["vg"]).expect("read");
    fake.acquire(&gl, Mode::Exclusive, false)
        .expect("GL not taken");
    fake.release(&gl, None).expect("release");
    drop(locks);
    // A writer holding the VG lease makes the report wait, then fail clearly.
    fake.acquire(&vgl, Mode::Exclusive, false).expect("writer");
    let err = s.read_locked(&["vg"]).err().expect("held");
    assert!(err.to_string().contains("still held"), "{err}");
    fake.release(&vgl, None).expect("release");
    host.stop(&vg, &at).expect("lockstop");
    let (_, locks) = s.read_locked(&["vg"]).expect("read");
    assert_eq!(locks.unlocked, vec!["vg".to_owned()]);
}

#[test]
fn activation_holds_the_lv_lease_exclusive_or_shared() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vg = create(&s, "a").expect("create");
    let at = places();
    let lease = layout::lv_lease(&vg, &at.paths, "a", at.geometry).expect("LV lease");
    let backend = lvmeta::activate::FakeBackend::default();
    // Exclusive: another holder is refused at once, in both directions.
    let act = s
        .activate("vg", "a", false, false, &backend)
        .expect("activate");
    assert_eq!(act.mode, Some(Mode::Exclusive));
    assert!(matches!(
        fake.acquire(&lease, Mode::Shared, false),
        Err(LeaseError::Busy { .. })
    ));
    assert!(matches!(
        s.activate("vg", "a", true, false, &backend),
        Err(Error::Lease(LeaseError::Busy { .. }))
    ));
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    assert_eq!(backend.state("vg", "a"), None);
    // Shared: other shared holders are fine, an exclusive one is not.
    let sh = s
        .activate("vg", "a", true, false, &backend)
        .expect("shared");
    fake.acquire(&lease, Mode::Shared, false)
        .expect("second shared");
    fake.release(&lease, None).expect("release");
    assert!(matches!(
        fake.acquire(&lease, Mode::Exclusive, false),
        Err(LeaseError::Busy { .. })
    ));
    drop(sh);
    fake.acquire(&lease, Mode::Exclusive, false)
        .expect("released with the activation");
    // Held elsewhere: activation fails at once, nothing is activated.
    backend
        .deactivate(&lvmeta::activate::place(&vg, "a", &at.paths).expect("place"))
        .expect("off");
    assert!(matches!(
        s.activate("vg", "a", false, false, &backend),
        Err(Error::Lease(LeaseError::Busy { .. }))
    ));
    assert_eq!(backend.state("vg", "a"), None);
    fake.release(&lease, None).expect("release");
}

#[test]
fn a_failed_activation_releases_the_lease() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    make_pool(&s);
    add_thin(&s, "t", None).expect("thin LV");
    let vg = s.vg("vg").expect("vg");
    let at = places();
    let lease = layout::lv_lease(&vg, &at.paths, "pool", at.geometry).expect("pool lease");
    // The fake backend, as the loop one, cannot make thin LVs: the pool lease taken for the
    // attempt must be given back.
    let backend = lvmeta::activate::FakeBackend::default();
    assert!(matches!(
        s.activate("vg", "t", false, false, &backend),
        Err(Error::Activate(_))
    ));
    fake.acquire(&lease, Mode::Exclusive, false)
        .expect("the pool lease was released");
    fake.release(&lease, None).expect("release");
}

/// A lock manager that counts the acquires of the lease at `offset` and the leases written
/// from what `unheld` saw, and passes everything on.
struct Counting {
    inner: Arc<FakeLeases>,
    offset: u64,
    acquires: std::sync::atomic::AtomicU32,
    seen_writes: std::sync::atomic::AtomicU32,
}

impl Counting {
    fn count(&self) -> u32 {
        self.acquires.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl LeaseManager for Counting {
    fn init_lockspace(&self, ls: &lvmeta::lease::LockspaceSpec, t: u32) -> Result<(), LeaseError> {
        self.inner.init_lockspace(ls, t)
    }
    fn init_resource(&self, r: &lvmeta::lease::ResourceSpec) -> Result<(), LeaseError> {
        self.inner.init_resource(r)
    }
    fn resource_name(&self, r: &lvmeta::lease::ResourceSpec) -> Result<Option<String>, LeaseError> {
        self.inner.resource_name(r)
    }
    fn join(&self, ls: &lvmeta::lease::LockspaceSpec, t: u32) -> Result<(), LeaseError> {
        self.inner.join(ls, t)
    }
    fn leave(&self, ls: &lvmeta::lease::LockspaceSpec) -> Result<(), LeaseError> {
        self.inner.leave(ls)
    }
    fn joined(&self, ls: &lvmeta::lease::LockspaceSpec) -> Result<bool, LeaseError> {
        self.inner.joined(ls)
    }
    fn acquire(
        &self,
        r: &lvmeta::lease::ResourceSpec,
        mode: Mode,
        want_lvb: bool,
    ) -> Result<Option<layout::Lvb>, LeaseError> {
        let got = self.inner.acquire(r, mode, want_lvb);
        if got.is_ok() && r.offset == self.offset {
            self.acquires
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        got
    }
    fn release(
        &self,
        r: &lvmeta::lease::ResourceSpec,
        lvb: Option<layout::Lvb>,
    ) -> Result<(), LeaseError> {
        self.inner.release(r, lvb)
    }
    fn acquire_persistent(
        &self,
        r: &lvmeta::lease::ResourceSpec,
        mode: Mode,
    ) -> Result<(), LeaseError> {
        self.inner.acquire_persistent(r, mode)
    }
    fn release_orphans(&self, r: &lvmeta::lease::ResourceSpec) -> Result<u32, LeaseError> {
        self.inner.release_orphans(r)
    }
    fn drop_orphans(&self, r: &lvmeta::lease::ResourceSpec) -> Result<u32, LeaseError> {
        self.inner.drop_orphans(r)
    }
    fn standing(&self) -> Result<lvmeta::lease::Standing, LeaseError> {
        self.inner.standing()
    }
    fn let_go(&self, lockspace: &str, names: &[String]) -> Result<(), LeaseError> {
        self.inner.let_go(lockspace, names)
    }
    fn keep_for_orphans(&self, lockspace: &str) -> Result<(), LeaseError> {
        self.inner.keep_for_orphans(lockspace)
    }
    fn host(
        &self,
        lockspace: &str,
        host_id: u64,
    ) -> Result<Option<lvmeta::lease::HostView>, LeaseError> {
        self.inner.host(lockspace, host_id)
    }
    fn unheld(
        &self,
        r: &lvmeta::lease::ResourceSpec,
    ) -> Result<Option<lvmeta::lease::SeenFree>, LeaseError> {
        self.inner.unheld(r)
    }
    fn init_free_resource(
        &self,
        r: &lvmeta::lease::ResourceSpec,
        seen: &lvmeta::lease::SeenFree,
    ) -> Result<(), LeaseError> {
        self.seen_writes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.inner.init_free_resource(r, seen)
    }
}

/// A shared VG served by a host that keeps its VG lease for `idle`, reusing one acquire for
/// `max_hold`; the counter counts acquires of the VG lease.
fn lingering(
    idle: Duration,
    max_hold: Duration,
) -> (
    Session,
    Arc<FakeLeases>,
    Arc<Counting>,
    lvmeta::lease::ResourceSpec,
) {
    let fake = Arc::new(FakeLeases::default());
    let (s, _, _) = setup();
    let vg = s.scan().vg("vg").expect("vg").vg.clone();
    let at = places();
    let vgl = layout::vg_lease(&vg, &at.paths, at.geometry).expect("VG lease");
    let counting = Arc::new(Counting {
        inner: fake.clone(),
        offset: vgl.offset,
        acquires: 0.into(),
        seen_writes: 0.into(),
    });
    let host =
        Host::new(counting.clone(), 7, 10, Duration::from_millis(300)).with_linger(idle, max_hold);
    let dev = MemDevice::new("pv0", 512 << 20, 512);
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_host(host);
    s.vgcreate(&shared_spec(), &["pv0"])
        .expect("vgcreate --shared");
    s.lockstart("vg").expect("lockstart");
    (s, fake, counting, vgl)
}

/// Waits (up to 10 s) until another host can take the VG lease, and returns its value block.
fn taken_by_another_host(fake: &FakeLeases, vgl: &lvmeta::lease::ResourceSpec) -> layout::Lvb {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match fake.acquire(vgl, Mode::Exclusive, true) {
            Ok(lvb) => {
                fake.release(vgl, None).expect("release");
                return lvb.expect("value block");
            }
            Err(LeaseError::Busy { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("the kept VG lease was never released: {e}"),
        }
    }
}

#[test]
fn a_removal_frees_the_lease_slot_from_the_area_it_read_before_the_commit() {
    let (s, fake, counting, _) = lingering(Duration::from_secs(1), Duration::from_secs(60));
    let made = create(&s, "a").expect("a");
    let at = places();
    let lv = layout::lv_lease(&made, &at.paths, "a", at.geometry).expect("LV lease");
    s.update("vg", "lvremove", |v, ctx| {
        edit::lv::remove(v, ctx, "a", false)
    })
    .expect("remove");
    assert_eq!(fake.resource_name(&lv), Ok(Some("#unused".into())));
    assert_eq!(
        counting
            .seen_writes
            .load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one write from what unheld() read, no second read"
    );
}

#[test]
fn a_lingering_host_reuses_its_vg_lease_then_releases_it_with_the_last_seqno() {
    let (s, fake, counting, vgl) = lingering(Duration::from_secs(1), Duration::from_secs(60));
    create(&s, "a").expect("a");
    create(&s, "b").expect("b");
    // A read of this host (as activation does) reuses it too.
    drop(s.read_locked(&["vg"]).expect("read"));
    let seqno = create(&s, "c").expect("c").seqno;
    assert_eq!(
        counting.count(),
        1,
        "one acquire for three changes and a read"
    );
    // Still held: another host must wait; then it is released with the last seqno.
    assert!(matches!(
        fake.acquire(&vgl, Mode::Exclusive, false),
        Err(LeaseError::Busy { .. })
    ));
    assert_eq!(
        taken_by_another_host(&fake, &vgl),
        layout::Lvb::for_seqno(seqno)
    );
    // After it was released, the next change acquires it again.
    create(&s, "d").expect("d");
    assert_eq!(counting.count(), 2);
    // Leaving the lockspace releases it first (sanlock would kill a holder).
    s.lockstop("vg").expect("lockstop");
    let lockspace = lvmeta::lease::LockspaceSpec {
        host_id: 8,
        ..Host::new(fake.clone(), 8, 10, Duration::ZERO)
            .lockspace(&s.vg("vg").expect("vg"), &places())
            .expect("lockspace")
    };
    fake.join(&lockspace, 10).expect("join");
    fake.acquire(&vgl, Mode::Exclusive, false)
        .expect("released at lockstop");
    fake.release(&vgl, None).expect("release");
}

#[test]
fn a_lingering_host_acquires_again_after_max_hold_and_releases_when_dropped() {
    let (s, fake, counting, vgl) = lingering(Duration::from_secs(60), Duration::ZERO);
    create(&s, "a").expect("a");
    let seqno = create(&s, "b").expect("b").seqno;
    assert_eq!(counting.count(), 2, "max_hold 0: every change acquires");
    assert!(matches!(
        fake.acquire(&vgl, Mode::Exclusive, false),
        Err(LeaseError::Busy { .. })
    ));
    // The session (and its host) gone: released at once, with the last seqno.
    drop(s);
    let lvb = fake.acquire(&vgl, Mode::Exclusive, true).expect("released");
    assert_eq!(lvb, Some(layout::Lvb::for_seqno(seqno)));
}

#[test]
fn an_lv_lease_outlives_its_process_as_an_orphan_then_is_adopted_or_released() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vg = create(&s, "a").expect("a");
    let at = places();
    let lease = layout::lv_lease(&vg, &at.paths, "a", at.geometry).expect("LV lease");
    let backend = lvmeta::activate::FakeBackend::default();
    let busy = || {
        matches!(
            fake.acquire(&lease, Mode::Shared, false),
            Err(LeaseError::Busy { .. })
        )
    };
    // The process ends with the LV active (a node plugin restarting): the host keeps the
    // lease as an orphan, so other hosts are still kept out.
    s.activate("vg", "a", false, false, &backend)
        .expect("activate")
        .keep_lease();
    fake.end_process();
    assert!(busy(), "the orphan still holds the LV");
    // The next process, asking in the other mode, is told about the orphan.
    let err = s
        .activate("vg", "a", true, false, &backend)
        .expect_err("mode differs");
    assert!(err.to_string().contains("orphan"), "{err}");
    // In the same mode it adopts the orphan, and releases it like its own.
    let act = s
        .activate("vg", "a", false, false, &backend)
        .expect("adopted");
    assert!(busy());
    drop(act);
    assert!(!busy(), "released with the adopting activation");
    fake.release(&lease, None).expect("release");
    // Deactivation by a process that did not activate it releases the orphan too.
    s.activate("vg", "a", false, false, &backend)
        .expect("activate")
        .keep_lease();
    fake.end_process();
    assert!(busy());
    s.deactivate("vg", "a", &backend).expect("deactivate");
    assert_eq!(backend.state("vg", "a"), None);
    assert!(!busy(), "deactivation released the orphan");
    fake.release(&lease, None).expect("release");
}

#[test]
fn an_lv_active_anywhere_is_not_removed() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vg = create(&s, "a").expect("a");
    let at = places();
    let lease = layout::lv_lease(&vg, &at.paths, "a", at.geometry).expect("LV lease");
    let remove = || {
        s.update("vg", "lvremove", |v, ctx| {
            edit::lv::remove(v, ctx, "a", false)
        })
    };
    // Active on another host (its lease held there, shared or exclusive): refused, nothing
    // written.
    for mode in [Mode::Shared, Mode::Exclusive] {
        fake.acquire(&lease, mode, false).expect("held elsewhere");
        let err = remove().expect_err("in use");
        assert!(
            matches!(err, Error::Lease(LeaseError::InUse { ref lv }) if lv == "vg/a"),
            "{err}"
        );
        assert_eq!(s.vg("vg").expect("vg").seqno, vg.seqno);
        fake.release(&lease, None).expect("release");
    }
    // Active here, by this process: refused too.
    let backend = lvmeta::activate::FakeBackend::default();
    let act = s
        .activate("vg", "a", false, false, &backend)
        .expect("activate");
    assert!(matches!(
        remove(),
        Err(Error::Lease(LeaseError::InUse { .. }))
    ));
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    // Inactive everywhere: removed, and its lease is free (and `#unused`) afterwards.
    remove().expect("removed");
    assert_eq!(fake.resource_name(&lease), Ok(Some("#unused".into())));
    fake.acquire(&lease, Mode::Exclusive, false)
        .expect("released after the removal");
}

/// Thin pool `pool` of two extents.
fn make_pool(s: &Session) {
    s.update("vg", "lvcreate", |v, ctx| {
        let pool = edit::PoolSpec {
            data: LvSpec::linear("pool", 2, stamp()),
            chunk_size: None,
            metadata_extents: None,
            discards: "passdown".into(),
            zero: true,
        };
        edit::thin::create_pool(v, ctx, &pool).map(|x| x.0)
    })
    .expect("pool");
}

/// Thin LV `name` in pool `pool` (a snapshot of `origin`), activatable.
fn add_thin(s: &Session, name: &str, origin: Option<&str>) -> Result<String, Error> {
    let spec = edit::ThinSpec {
        name: Some(name.into()),
        pool: "pool".into(),
        extents: 1,
        origin: origin.map(Into::into),
        tags: vec![],
        activation_skip: Some(false),
        stamp: stamp(),
    };
    s.update("vg", "lvcreate", |v, ctx| {
        edit::thin::create_thin(v, ctx, &spec)
    })
}

#[test]
fn the_thin_lvs_of_a_pool_active_anywhere_do_not_change() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    make_pool(&s);
    add_thin(&s, "t", None).expect("thin LV");
    let vg = s.vg("vg").expect("vg");
    let at = places();
    let lease = layout::lv_lease(&vg, &at.paths, "pool", at.geometry).expect("pool lease");
    // The pool is active on another host: a snapshot or a removal there would only reach
    // the kernel at the pool's next activation, so both are refused, and nothing is written.
    fake.acquire(&lease, Mode::Exclusive, false)
        .expect("held elsewhere");
    let snap = || add_thin(&s, "snap", Some("t"));
    for err in [
        snap().expect_err("snapshot"),
        s.update("vg", "lvremove", |v, ctx| {
            edit::lv::remove(v, ctx, "t", false)
        })
        .expect_err("removal"),
    ] {
        assert!(
            matches!(err, Error::Lease(LeaseError::InUse { ref lv }) if lv == "vg/pool"),
            "{err}"
        );
    }
    assert_eq!(s.vg("vg").expect("vg").seqno, vg.seqno);
    // A change that leaves the pool's thin LVs alone goes through.
    create(&s, "linear").expect("another LV");
    fake.release(&lease, None).expect("release");
    // Inactive everywhere: the snapshot is made, and the pool's lease is free again.
    snap().expect("snapshot");
    fake.acquire(&lease, Mode::Exclusive, false)
        .expect("released after the change");
}

/// The queue of pool `pool`: transaction id and messages.
fn queue(s: &Session, pool: &str) -> (u64, usize) {
    let vg = s.vg("vg").expect("vg");
    let p = vg.lv(pool).and_then(|l| l.pool()).expect("a pool");
    (p.transaction_id, p.messages.len())
}

#[test]
fn thin_activation_delivers_the_queue_by_lvm2s_transaction_rule() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let add = |name: &str, origin: Option<&str>| add_thin(&s, name, origin);
    make_pool(&s);
    add("a", None).expect("a");
    assert_eq!(queue(&s, "pool"), (1, 1));
    let vg = s.vg("vg").expect("vg");
    let at = places();
    let pool_uuid = lvmeta::activate::place(&vg, "pool", &at.paths)
        .expect("place")
        .dm_uuid;
    let lease = layout::lv_lease(&vg, &at.paths, "pool", at.geometry).expect("pool lease");
    let busy = || {
        let taken = fake.acquire(&lease, Mode::Shared, false).is_ok();
        if taken {
            fake.release(&lease, None).expect("release");
        }
        !taken
    };
    let backend = lvmeta::activate::FakeBackend::with_thin();
    let kernel = |change: fn(&mut lvmeta::activate::FakePool)| {
        backend
            .pool(&pool_uuid, change)
            .expect("pool was activated")
    };
    // The first activation: the new pool (kernel transaction 0) gets the queue, then the
    // transaction id, and the queue is cleared in the metadata; the pool's lease is held.
    let act = s
        .activate("vg", "a", false, false, &backend)
        .expect("activate a");
    assert_eq!(
        kernel(|_| {}).received,
        ["create_thin 1", "set_transaction_id 0 1"]
    );
    assert_eq!(queue(&s, "pool"), (1, 0));
    assert!(busy());
    // While the pool is active here nothing of it changes (not even from this process).
    assert!(matches!(
        add("s", Some("a")),
        Err(Error::Lease(LeaseError::InUse { .. }))
    ));
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    assert!(!busy());
    // Inactive: a snapshot is queued, and cut at the next activation, from device 1.
    add("s", Some("a")).expect("snapshot");
    assert_eq!(queue(&s, "pool"), (2, 1));
    let act = s
        .activate("vg", "s", false, false, &backend)
        .expect("activate s");
    assert_eq!(
        kernel(|_| {}).received[2..],
        ["create_snap 2 1", "set_transaction_id 1 2"]
    );
    assert_eq!(kernel(|_| {}).devices.len(), 2);
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    // Delivered before a crash kept the queue from being cleared: nothing is sent again.
    add("c", None).expect("c");
    kernel(|k| {
        k.transaction_id = 3;
        k.devices.insert(3);
    });
    let act = s
        .activate("vg", "c", false, false, &backend)
        .expect("activate c");
    assert_eq!(kernel(|_| {}).received.len(), 4);
    assert_eq!(queue(&s, "pool"), (3, 0));
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    // Another tool moved the kernel pool on: refused, naming both ids, and nothing is held.
    kernel(|k| k.transaction_id = 7);
    let err = s
        .activate("vg", "a", false, false, &backend)
        .expect_err("mismatch");
    assert!(err.to_string().contains("transaction id 7"), "{err}");
    assert!(!busy());
}

#[test]
fn leases_on_a_4k_sector_lun_are_aligned_as_lvmlockd_aligns_them() {
    // lvmlockd puts the leases of a VG whose lease device has 4K sectors 8 MiB apart; every
    // caller of the session (CSI and the command alike) gets that alignment from the device.
    let (_fake, host) = fake_host();
    let s = Session::new(vec![
        Box::new(MemDevice::new("pv0", 2 << 30, 4096)) as Box<dyn BlockDevice>
    ])
    .with_host(host);
    let spec = VgSpec {
        shared: Some(SharedVg::for_sector(4096)),
        ..shared_spec()
    };
    s.vgcreate(&spec, &["pv0"]).expect("vgcreate --shared");
    assert_eq!(s.view("vg").expect("view").lease_align(), 8 << 20);
    s.lockstart("vg").expect("lockstart");
    let mut offsets = Vec::new();
    for name in ["a", "b", "c"] {
        let vg = create(&s, name).expect("create");
        let args = vg
            .lv(name)
            .and_then(|l| l.lock_args.clone())
            .expect("a lease");
        offsets.push(layout::lease_offset(&args).expect("an offset"));
    }
    assert!(offsets.iter().all(|o| o % (8 << 20) == 0), "{offsets:?}");
    let mut unique = offsets.clone();
    unique.dedup();
    assert_eq!(unique.len(), 3);
}

/// As lvmlockd: a thin LV or thin pool is never active on several hosts (both would write
/// the pool's metadata); shared activation is refused before any lease is taken.
#[test]
fn shared_activation_of_thin_lvs_is_refused() {
    let (s, fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    make_pool(&s);
    add_thin(&s, "t", None).expect("thin LV");
    let vg = s.vg("vg").expect("vg");
    let at = places();
    let lease = layout::lv_lease(&vg, &at.paths, "pool", at.geometry).expect("pool lease");
    let backend = lvmeta::activate::FakeBackend::with_thin();
    for lv in ["t", "pool"] {
        let e = s
            .activate("vg", lv, true, false, &backend)
            .expect_err("shared thin activation");
        assert!(
            e.to_string().contains("Shared activation not compatible"),
            "{e}"
        );
    }
    fake.acquire(&lease, Mode::Exclusive, false)
        .expect("no lease was taken");
    fake.release(&lease, None).expect("release");
}
