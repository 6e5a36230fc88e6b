//! A shared VG made and grown on blank devices by racing hosts (in-memory devices and lock
//! manager): one host makes it, a device that carries anything is left byte for byte as it
//! was, a creator that died under its claim is finished by the next.

use std::sync::Arc;
use std::time::Duration;

use lvmeta::claim::{self, Timing};
use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::edit::{SharedVg, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::lease::{FakeLeases, Host};
use lvmeta::session::{Provision, Session};
use lvmeta::units::Bytes;

const SIZE: u64 = 512 << 20;

fn provision(host: &str) -> Provision {
    Provision {
        spec: VgSpec {
            name: "vg".into(),
            extent_size: 8192,
            tags: vec![],
            shared: Some(SharedVg::for_sector(512)),
        },
        pv: PvOptions {
            metadata_size: Some(Bytes(8 << 20)),
            ..PvOptions::default()
        },
        timing: Timing {
            settle: Duration::from_millis(50),
            stale: Duration::from_millis(600),
            poll: Duration::from_millis(10),
        },
        host_name: host.into(),
    }
}

/// A session of its own over `devs` (shared with other sessions), with in-memory leases.
fn session(devs: &[Arc<MemDevice>], leases: &Arc<FakeLeases>, id: u64) -> Session {
    let boxed = devs
        .iter()
        .map(|d| Box::new(d.clone()) as Box<dyn BlockDevice>)
        .collect();
    Session::new(boxed).with_host(Host::new(
        leases.clone(),
        id,
        10,
        Duration::from_millis(300),
    ))
}

fn lun(name: &str) -> Arc<MemDevice> {
    Arc::new(MemDevice::new(name, SIZE, 512))
}

#[test]
fn one_of_racing_hosts_makes_the_vg() {
    let devs = [lun("lun")];
    let leases = Arc::new(FakeLeases::default());
    let made: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (1..=3)
            .map(|id| {
                let (devs, leases) = (&devs, &leases);
                s.spawn(move || {
                    let p = provision(&format!("host{id}"));
                    session(devs, leases, id)
                        .create_vg_once(&p, &["lun"])
                        .expect("create_vg_once")
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    assert_eq!(made.iter().filter(|m| m.created).count(), 1, "{made:?}");
    assert!(made.iter().all(|m| m.refused.is_empty()));
    let s = session(&devs, &leases, 1);
    let scan = s.scan();
    assert!(scan.warnings.is_empty(), "{:?}", scan.warnings);
    let vg = s.vg("vg").expect("the VG");
    assert_eq!(vg.lock_type.as_deref(), Some("sanlock"));
    let mda = &scan.pvs[0].mdas[0];
    assert!(mda.locn.size >= 8 << 20, "the metadata area asked for");
    // The claim sector is clear again, as stock pvcreate leaves it.
    assert_eq!(
        claim::read(devs[0].as_ref()).expect("read"),
        claim::Sector::Empty
    );
}

#[test]
fn a_device_carrying_anything_is_left_untouched() {
    let foreign: [(u64, &[u8], &str); 4] = [
        (1080, &[0x53, 0xef], "filesystem (ext2/3/4)"),
        (510, &[0x55, 0xaa], "partition table (DOS/MBR)"),
        (4096, &[0xfc, 0x4e, 0x2b, 0xa9], "md RAID"),
        (300_000, b"x", "non-zero data at byte 300000"),
    ];
    for (at, bytes, why) in foreign {
        let devs = [lun("a"), lun("b")];
        devs[1].write_at(at, bytes).expect("write");
        let before: Vec<Vec<u8>> = devs.iter().map(|d| d.to_bytes()).collect();
        let leases = Arc::new(FakeLeases::default());
        let s = session(&devs, &leases, 1);
        let out = s
            .create_vg_once(&provision("h"), &["a", "b"])
            .expect("judged");
        assert!(!out.created);
        assert_eq!(out.refused.len(), 1, "{out:?}");
        assert_eq!(out.refused[0].0, "b");
        assert!(out.refused[0].1.contains(why), "{out:?}");
        let after: Vec<Vec<u8>> = devs.iter().map(|d| d.to_bytes()).collect();
        assert!(before == after, "a device was written ({why})");
    }
}

#[test]
fn another_vgs_pv_and_an_orphan_pv_are_refused() {
    let devs = [lun("a")];
    let leases = Arc::new(FakeLeases::default());
    let s = session(&devs, &leases, 1);
    let mut other = provision("h");
    other.spec.name = "other".into();
    assert!(s.create_vg_once(&other, &["a"]).expect("other").created);
    let out = s.create_vg_once(&provision("h"), &["a"]).expect("judged");
    assert_eq!(out.refused, [("a".into(), "a PV of VG other".into())]);

    let devs = [lun("a")];
    let s = session(&devs, &leases, 1);
    s.pvcreate("a", &PvOptions::default(), false)
        .expect("pvcreate");
    let out = s.create_vg_once(&provision("h"), &["a"]).expect("judged");
    assert!(out.refused[0].1.contains("orphan PV"), "{out:?}");
}

#[test]
fn a_creator_that_died_after_its_labels_is_finished_by_the_next() {
    let devs = [lun("a"), lun("b")];
    let leases = Arc::new(FakeLeases::default());
    let s = session(&devs, &leases, 1);
    let p = provision("dead");
    let dead = claim::Claim::acquire(devs[0].as_ref(), "vg", "dead", p.timing, Duration::ZERO)
        .expect("claim");
    std::mem::forget(dead);
    for d in ["a", "b"] {
        s.pvcreate(d, &p.pv, false).expect("labels, then death");
    }
    let out = s
        .create_vg_once(&provision("next"), &["a", "b"])
        .expect("finished");
    assert!(out.created, "{out:?}");
    assert_eq!(s.vg("vg").expect("the VG").pvs.len(), 2);
}

#[test]
fn a_claim_that_runs_out_before_the_first_write_writes_nothing() {
    let devs = [lun("lun")];
    let leases = Arc::new(FakeLeases::default());
    let s = session(&devs, &leases, 1);
    let mut p = provision("slow");
    // No time left once the claim settles: as a maker stuck on a lock would find it.
    p.timing.stale = p.timing.settle / 2;
    let e = s.create_vg_once(&p, &["lun"]).expect_err("ran out");
    assert!(e.to_string().contains("ran out of time"), "{e}");
    assert!(
        devs[0].to_bytes().iter().all(|&b| b == 0),
        "a byte was left written"
    );
}

#[test]
fn blank_devices_added_later_extend_the_vg() {
    let devs = [lun("a"), lun("b"), lun("c")];
    devs[2].write_at(0, b"XFSB").expect("write");
    let leases = Arc::new(FakeLeases::default());
    let s = session(&devs, &leases, 1);
    let p = provision("h");
    assert!(s.create_vg_once(&p, &["a"]).expect("create").created);
    s.lockstart("vg").expect("lockstart");
    let out = s.extend_blank(&p, &["a", "b", "c"]).expect("extend");
    assert_eq!(out.extended, ["b"]);
    assert_eq!(out.refused, [("c".into(), "a filesystem (xfs)".into())]);
    assert_eq!(s.vg("vg").expect("vg").pvs.len(), 2);
    let again = s.extend_blank(&p, &["a", "b"]).expect("again");
    assert_eq!(again, Default::default());
}
