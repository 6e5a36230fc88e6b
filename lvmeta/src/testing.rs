//! Helpers of the library's unit tests, and (feature `testing`) of the tests of crates built
//! on it: in-memory sessions, fixed stamps.

use crate::dev::{BlockDevice, MemDevice};
use crate::edit::{Stamp, VgSpec};
use crate::session::Session;

/// A fixed creation stamp.
pub fn stamp() -> Stamp {
    Stamp {
        time: 1_800_000_000,
        host: "t".into(),
    }
}

/// Whether privileged tests must run rather than skip: in CI (`CI=true`), or when
/// `LVMETA_REQUIRE_PRIVILEGED=1`.
pub fn privileged_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("LVMETA_REQUIRE_PRIVILEGED").is_ok_and(|v| v == "1")
}

/// VG `vg` with 4 MiB extents, no tags and no leases.
pub fn vg_spec() -> VgSpec {
    VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: None,
    }
}

/// VG `vg` on one 64 GiB PV `/dev/x` (4 MiB extents, no leases, no LVs), made by the pure
/// edit: no device behind it.
pub fn vg_in_memory() -> crate::model::Vg {
    let pv = crate::edit::NewPv {
        id: crate::uuid::Uuid::random(),
        device: "/dev/x".into(),
        dev_size: crate::units::Bytes(64 << 30),
        pe_start: crate::units::Bytes(1 << 20),
        tail: crate::units::Bytes(0),
        bootloader: None,
    };
    let spec = vg_spec();
    crate::edit::vg::create(&spec, &[pv], &stamp()).expect("vg")
}

/// A session over in-memory PVs `pv0`, `pv1`, ... of 64 MiB each, holding VG `vg` (4 MiB
/// extents, no leases) over all of them.
pub fn session_with_vg(pvs: usize) -> Session {
    let names: Vec<String> = (0..pvs).map(|i| format!("pv{i}")).collect();
    let s = Session::new(
        names
            .iter()
            .map(|n| Box::new(MemDevice::new(n, 64 << 20, 512)) as Box<dyn BlockDevice>)
            .collect(),
    );
    let spec = vg_spec();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    s.vgcreate(&spec, &refs).expect("vgcreate");
    s
}
