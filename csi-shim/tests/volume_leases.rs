//! The driver's volume policy in a shared VG (leases in memory): changes to a thin pool
//! that a node holds go through that node (the request mailbox), and a staged thin volume is
//! retuned there.

use std::sync::Arc;
use std::time::Duration;

use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::edit::{SharedVg, VgSpec};
use lvmeta::lease::{layout, FakeLeases, Host, VgPlaces};
use lvmeta::session::Session;

/// The size of the tests' volumes.
const SIZE: csi_shim::volume::SizeRange = csi_shim::volume::SizeRange {
    required: 8 << 20,
    limit: 0,
};

/// A session with shared VG `vg` on one in-memory PV `pv0`, host 7, leases in memory.
fn setup() -> (Session, Arc<FakeLeases>, Host) {
    let fake = Arc::new(FakeLeases::default());
    let host = Host::new(fake.clone(), 7, 10, Duration::from_millis(300));
    let s = Session::new(vec![
        Box::new(MemDevice::new("pv0", 512 << 20, 512)) as Box<dyn BlockDevice>
    ])
    .with_host(host.clone());
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: Some(SharedVg {
            lock_lv_size: lvmeta::units::Bytes(256 << 20),
        }),
    };
    s.vgcreate(&spec, &["pv0"]).expect("vgcreate --shared");
    (s, fake, host)
}

fn places() -> VgPlaces {
    VgPlaces {
        paths: vec![Some("pv0".into())],
        geometry: layout::Geometry::for_sector(512),
    }
}

/// The queue of pool `pool`: transaction id and messages.
fn queue(s: &Session, pool: &str) -> (u64, usize) {
    let vg = s.vg("vg").expect("vg");
    let p = vg.lv(pool).and_then(|l| l.pool()).expect("a pool");
    (p.transaction_id, p.messages.len())
}

#[test]
fn a_pool_held_by_a_node_is_changed_through_a_request() {
    use csi_shim::volume::{Mode, Request, Volumes};
    let (s, _fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vols = Volumes::new(&s, "vg");
    vols.create("src", Mode::Thin, SIZE).expect("thin volume");
    let backend = lvmeta::activate::FakeBackend::with_thin();
    let act = s
        .activate("vg", "src", false, false, &backend)
        .expect("staged");
    let r = Request::Snapshot {
        name: "snap".into(),
        source: "src".into(),
    };
    // Nobody serves: the request stays posted and the caller is told to retry.
    let err = vols
        .through_holder(&r, Duration::from_millis(200), |v| {
            v.snapshot("snap", "src")
        })
        .expect_err("nobody serves");
    assert!(
        matches!(err, csi_shim::volume::VolumeError::Pending(_)),
        "{err}"
    );
    assert_eq!(
        vols.fresh_requests("src-pool").expect("requests"),
        std::slice::from_ref(&r)
    );
    // The node serves it (as the pool's holder) while the controller waits.
    let snap = while_node_serves(&s, &backend, "src", || {
        vols.through_holder(&r, Duration::from_secs(10), |v| v.snapshot("snap", "src"))
    })
    .expect("snapshot through the node");
    assert_eq!(snap.source, "src");
    let uuid = lvmeta::activate::place(&s.vg("vg").expect("vg"), "src-pool", &places().paths)
        .expect("place")
        .dm_uuid;
    let received = backend.pool(&uuid, |_| {}).expect("pool").received;
    assert_eq!(received[2..], ["create_snap 2 1", "set_transaction_id 1 2"]);
    assert_eq!(queue(&s, "src-pool"), (2, 0));
    assert!(vols.requests("src-pool").expect("requests").is_empty());
    // A retry after the node served it (the caller had given up) posts nothing.
    let again = vols
        .through_holder(&r, Duration::from_millis(100), |v| {
            v.snapshot("snap", "src")
        })
        .expect("served already");
    assert_eq!(again, snap);
    assert!(vols.requests("src-pool").expect("requests").is_empty());
    // Posted, not served, and then the pool comes free: the caller makes it itself, and the
    // posted request goes, so that it is never served later.
    let r2 = Request::Snapshot {
        name: "snap2".into(),
        source: "src".into(),
    };
    let snap2 = |v: &Volumes<'_>| v.snapshot("snap2", "src");
    assert!(vols
        .through_holder(&r2, Duration::from_millis(100), snap2)
        .is_err());
    assert_eq!(vols.requests("src-pool").expect("requests").len(), 1);
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    vols.through_holder(&r2, Duration::from_millis(100), snap2)
        .expect("made by the caller");
    assert!(vols.requests("src-pool").expect("requests").is_empty());
    // A request posted long ago is dropped unserved.
    let old = Request::DeleteSnapshot {
        name: "snap2".into(),
    };
    s.update("vg", "lvchange --addtag", |mut v, _| {
        if let Some(l) = v.lv_mut("src-pool") {
            l.tags.push(old.tag_at(1_000_000_000));
        }
        Ok(v)
    })
    .expect("stale request");
    assert_eq!(vols.requests("src-pool").expect("requests").len(), 1);
    assert!(vols.fresh_requests("src-pool").expect("fresh").is_empty());
    assert!(vols.requests("src-pool").expect("requests").is_empty());
    assert!(vols.get_snapshot("snap2").expect("get").is_some());
}

/// Runs `call` while a node thread serves the requests posted on thin volume `lv`'s pool
/// as its holder (the change, its delivery, the tag's removal), as csi-shim's node does:
/// it keeps serving until `call` returns, so a request posted again is served too.
fn while_node_serves<T: Send>(
    s: &lvmeta::session::Session,
    backend: &lvmeta::activate::FakeBackend,
    lv: &str,
    call: impl FnOnce() -> T + Send,
) -> T {
    use csi_shim::volume::Volumes;
    use std::sync::atomic::{AtomicBool, Ordering};
    let pool = format!("{lv}-pool");
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let node = scope.spawn(|| {
            let mut served = 0;
            while !stop.load(Ordering::Acquire) {
                let holder = Volumes::new(s, "vg").holding(vec![pool.clone()]);
                for r in holder.fresh_requests(&pool).expect("requests") {
                    holder.serve(&r).expect("serve");
                    s.refresh("vg", lv, backend).expect("deliver");
                    holder.finish(&pool, &r).expect("finish");
                    served += 1;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            served
        });
        let out = call();
        stop.store(true, Ordering::Release);
        assert!(node.join().expect("node") > 0, "the node served nothing");
        out
    })
}

#[test]
fn a_thin_volume_is_retuned_by_the_node_where_its_pool_is_active() {
    use csi_shim::volume::{Content, Mode, PoolOptions, VolumeError, Volumes};
    let (s, _fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vols = Volumes::new(&s, "vg");
    let opts = |zero: Option<bool>, discards: Option<&str>| PoolOptions {
        zero,
        discards: discards.map(str::to_owned),
    };
    vols.create_from(
        "t",
        Mode::Thin,
        SIZE,
        Content::Empty,
        &opts(Some(false), None),
    )
    .expect("thin volume");
    assert_eq!(
        vols.tuning("t").expect("tuning"),
        opts(Some(false), Some("passdown"))
    );
    vols.create("lin", Mode::Linear, SIZE).expect("linear");
    let err = vols
        .tune("lin", &opts(Some(true), None))
        .expect_err("linear");
    assert!(matches!(err, VolumeError::Invalid(_)), "{err}");
    let err = vols
        .tune("nope", &opts(Some(true), None))
        .expect_err("missing");
    assert!(matches!(err, VolumeError::NotFound(_)), "{err}");
    let err = vols
        .create_from(
            "c",
            Mode::Thin,
            SIZE,
            Content::Volume("t"),
            &opts(Some(true), None),
        )
        .expect_err("a copy shares the pool");
    assert!(err.to_string().contains("zero=false"), "{err}");
    // Inactive: the change is made here, and only when it changes something.
    let seqno = s.vg("vg").expect("vg").seqno;
    vols.tune("t", &opts(Some(false), Some("passdown")))
        .expect("nothing to do");
    assert_eq!(s.vg("vg").expect("vg").seqno, seqno);
    let now = vols.tune("t", &opts(None, Some("ignore"))).expect("ignore");
    assert_eq!(now, opts(Some(false), Some("ignore")));
    vols.tune("t", &opts(None, Some("passdown")))
        .expect("passdown");
    // Staged on a node: the pool's lease is held there, so the node makes it.
    let backend = lvmeta::activate::FakeBackend::with_thin();
    let act = s
        .activate("vg", "t", false, false, &backend)
        .expect("staged");
    let wanted = opts(Some(true), Some("nopassdown"));
    let err = vols
        .retune("t", &wanted, Duration::from_millis(200))
        .expect_err("nobody serves");
    assert!(matches!(err, VolumeError::Pending(_)), "{err}");
    let now = while_node_serves(&s, &backend, "t", || {
        vols.retune("t", &wanted, Duration::from_secs(10))
    })
    .expect("retuned through the node");
    assert_eq!(now, wanted);
    assert_eq!(vols.tuning("t").expect("tuning"), wanted);
    // ... and its kernel pool's table was reloaded with them.
    let uuid = lvmeta::activate::place(&s.vg("vg").expect("vg"), "t-pool", &places().paths)
        .expect("place")
        .dm_uuid;
    let kernel = backend.pool(&uuid, |_| {}).expect("pool");
    assert_eq!(kernel.features, ["no_discard_passdown"]);
    assert!(vols.requests("t-pool").expect("requests").is_empty());
    // The kernel cannot switch a live pool's discard support: refused, nothing posted,
    // by the controller and by the node alike.
    let err = vols
        .retune("t", &opts(None, Some("ignore")), Duration::from_secs(10))
        .expect_err("live pool");
    assert!(
        matches!(&err, VolumeError::Refused(m) if m.contains("unstage")),
        "{err}"
    );
    let holder = Volumes::new(&s, "vg").holding(vec!["t-pool".into()]);
    let err = holder
        .tune("t", &opts(None, Some("ignore")))
        .expect_err("node");
    assert!(matches!(err, VolumeError::Refused(_)), "{err}");
    assert!(vols.requests("t-pool").expect("requests").is_empty());
    act.deactivate(&backend).expect("deactivate");
    drop(act);
    vols.retune("t", &opts(None, Some("ignore")), Duration::from_secs(1))
        .expect("inactive now");
    assert_eq!(
        vols.tuning("t").expect("tuning"),
        opts(Some(true), Some("ignore"))
    );
}

#[test]
fn create_checks_once_under_the_lease_and_a_retry_writes_nothing() {
    use csi_shim::volume::{Mode, SizeRange, VolumeError, Volumes};
    let (s, _fake, _host) = setup();
    s.lockstart("vg").expect("lockstart");
    let vols = Volumes::new(&s, "vg");
    let made = vols.create("t", Mode::Thin, SIZE).expect("thin volume");
    let seqno = s.vg("vg").expect("vg").seqno;
    // The same request again: the volume, found under the lease, nothing written.
    assert_eq!(vols.create("t", Mode::Thin, SIZE).expect("retry"), made);
    assert_eq!(
        s.vg("vg").expect("vg").seqno,
        seqno,
        "a retry writes nothing"
    );
    // Another size or mode: ALREADY_EXISTS, nothing written.
    let bigger = SizeRange {
        required: 64 << 20,
        limit: 0,
    };
    let err = vols.create("t", Mode::Thin, bigger).expect_err("bigger");
    assert!(matches!(err, VolumeError::Exists(_)), "{err}");
    let err = vols.create("t", Mode::Linear, SIZE).expect_err("linear");
    assert!(matches!(err, VolumeError::Exists(_)), "{err}");
    // A size whole extents cannot meet (4 MiB extents, at most 5 MiB, at least 4.5):
    // OUT_OF_RANGE, found on the read under the lease, nothing written.
    let odd = SizeRange {
        required: (9 << 20) / 2,
        limit: 5 << 20,
    };
    let err = vols.create("u", Mode::Thin, odd).expect_err("odd");
    assert!(matches!(err, VolumeError::OutOfRange(_)), "{err}");
    assert_eq!(
        s.vg("vg").expect("vg").seqno,
        seqno,
        "a refusal writes nothing"
    );
    assert!(vols.get("u").expect("get").is_none());
}
