//! The Identity and Controller services over a unix socket in a temp dir, backed by the real
//! lvmeta volume layer on an in-memory LUN: every RPC served and the error codes the CSI spec
//! prescribes.

mod common;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use common::*;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::volume_capability::{AccessMode, AccessType, MountVolume};
use csi_shim::csi::*;
use csi_shim::driver::Driver;
use lvmeta::dev::{BlockDevice, MemDevice};
use lvmeta::session::Session;
use tonic::Code;

#[tokio::test]
async fn identity_and_socket() {
    let mut d = driver().await;
    let mode = std::fs::metadata(&d.socket)
        .expect("socket")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "socket mode {mode:o}");
    let info = d
        .identity
        .get_plugin_info(GetPluginInfoRequest {})
        .await
        .expect("info")
        .into_inner();
    assert_eq!(info.name, csi_shim::DRIVER_NAME);
    assert!(!info.vendor_version.is_empty());
    let caps = d
        .identity
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner();
    // The controller service, topology and online expansion.
    assert_eq!(caps.capabilities.len(), 3);
    let probe = d.identity.probe(ProbeRequest {}).await.expect("probe");
    assert_eq!(probe.into_inner().ready, Some(true));
    // Graceful shutdown: the server ends when told to.
    d.stop.take().map(|s| s.send(()));
    (&mut d.server).await.expect("server ends");
}

/// A shared VG whose lockspace this host has not joined (yet): Probe says not ready, as
/// a value (a liveness check then does not restart the driver), and ready once joined.
#[tokio::test]
async fn probe_is_not_ready_until_the_lockspace_is_joined() {
    let (session, lun) = shared_vg(|h| h);
    session.lockstop("vg").expect("lockstop");
    let mut d = serve(Driver::new(session, vec!["vg".into()]), lun).await;
    let probe = d.identity.probe(ProbeRequest {}).await.expect("probe");
    assert_eq!(probe.into_inner().ready, Some(false));
    d.backend.session().lockstart("vg").expect("lockstart");
    let probe = d.identity.probe(ProbeRequest {}).await.expect("probe");
    assert_eq!(probe.into_inner().ready, Some(true));
}

#[tokio::test]
async fn probe_fails_while_a_vg_is_missing() {
    let lun = Arc::new(MemDevice::new("lun", 16 << 20, 512));
    let session = Session::new(vec![Box::new(lun.clone()) as Box<dyn BlockDevice>]);
    let mut d = serve(Driver::new(session, vec!["gone".into()]), lun).await;
    let e = d
        .identity
        .probe(ProbeRequest {})
        .await
        .expect_err("not ready");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("gone"), "{e:?}");
}

#[tokio::test]
async fn volume_lifecycle() {
    let mut d = driver().await;
    let c = &mut d.controller;
    // Linear, rounded up to whole 4 MiB extents; idempotent by name.
    let v = c
        .create_volume(create("pvc-a", "linear", 10 * MIB, rwo()))
        .await
        .expect("create")
        .into_inner()
        .volume
        .expect("volume");
    assert_eq!(v.volume_id, "vg/pvc-a");
    assert_eq!(v.capacity_bytes, 12 * MIB);
    assert_eq!(
        v.volume_context.get("mode").map(String::as_str),
        Some("linear")
    );
    let again = c
        .create_volume(create("pvc-a", "linear", 10 * MIB, rwo()))
        .await
        .expect("repeat")
        .into_inner()
        .volume
        .expect("volume");
    assert_eq!(again, v);
    let e = c
        .create_volume(create("pvc-a", "linear", 40 * MIB, rwo()))
        .await
        .expect_err("conflicting repeat");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let e = c
        .create_volume(create("pvc-a", "thin", 10 * MIB, rwo()))
        .await
        .expect_err("other mode");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");

    // Thin: its own pool; RWX on a thin volume is refused.
    let t = c
        .create_volume(create("pvc-t", "thin", 20 * MIB, rwo()))
        .await
        .expect("thin")
        .into_inner()
        .volume
        .expect("volume");
    assert_eq!(t.capacity_bytes, 20 * MIB);
    // RWX on a thin volume: a block device served over NBD, never a filesystem.
    let e = c
        .create_volume(create(
            "pvc-x",
            "thin",
            MIB,
            vec![cap(Access::MultiNodeMultiWriter, Some("ext4"))],
        ))
        .await
        .expect_err("thin RWX filesystem");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("volumeMode Block"), "{e:?}");
    c.create_volume(create(
        "pvc-thin-rwx",
        "thin",
        MIB,
        vec![cap(Access::MultiNodeMultiWriter, None)],
    ))
    .await
    .expect("thin RWX block");
    c.delete_volume(DeleteVolumeRequest {
        volume_id: "vg/pvc-thin-rwx".into(),
        ..Default::default()
    })
    .await
    .expect("delete thin RWX block");
    // RWX block on a linear volume is fine; RWX on a filesystem is not.
    c.create_volume(create(
        "pvc-rwx",
        "linear",
        MIB,
        vec![cap(Access::MultiNodeMultiWriter, None)],
    ))
    .await
    .expect("linear RWX block");
    let e = c
        .create_volume(create(
            "pvc-y",
            "linear",
            MIB,
            vec![cap(Access::MultiNodeMultiWriter, Some("ext4"))],
        ))
        .await
        .expect_err("RWX filesystem");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");

    // Listing, paginated, in id order.
    let page = c
        .list_volumes(ListVolumesRequest {
            max_entries: 2,
            starting_token: String::new(),
        })
        .await
        .expect("list")
        .into_inner();
    let ids: Vec<_> = page
        .entries
        .iter()
        .filter_map(|e| e.volume.as_ref().map(|v| v.volume_id.clone()))
        .collect();
    assert_eq!(ids, ["vg/pvc-a", "vg/pvc-rwx"]);
    assert!(page.next_token.ends_with(".2"), "{}", page.next_token);
    for e in &page.entries {
        let c = e.status.as_ref().and_then(|s| s.volume_condition.as_ref());
        assert!(c.is_some_and(|c| !c.abnormal), "{e:?}");
    }
    let rest = c
        .list_volumes(ListVolumesRequest {
            max_entries: 0,
            starting_token: page.next_token,
        })
        .await
        .expect("list rest")
        .into_inner();
    assert_eq!(rest.entries.len(), 1);
    assert!(rest.next_token.is_empty());
    let e = c
        .list_volumes(ListVolumesRequest {
            max_entries: 0,
            starting_token: "zzz".into(),
        })
        .await
        .expect_err("bad token");
    assert_eq!(e.code(), Code::Aborted, "{e:?}");

    // Get, validate, expand.
    let got = c
        .controller_get_volume(ControllerGetVolumeRequest {
            volume_id: "vg/pvc-t".into(),
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(got.volume.map(|v| v.capacity_bytes), Some(20 * MIB));
    let condition = got.status.and_then(|s| s.volume_condition);
    assert!(condition.is_some_and(|c| !c.abnormal));
    let ok = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: "vg/pvc-t".into(),
            volume_capabilities: rwo(),
            ..Default::default()
        })
        .await
        .expect("validate")
        .into_inner();
    assert!(ok.confirmed.is_some());
    let no = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: "vg/pvc-t".into(),
            volume_capabilities: vec![cap(Access::MultiNodeReaderOnly, Some("ext4"))],
            ..Default::default()
        })
        .await
        .expect("validate")
        .into_inner();
    assert!(no.confirmed.is_none() && !no.message.is_empty());
    // A thin block volume on several nodes is served over NBD.
    let rox = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: "vg/pvc-t".into(),
            volume_capabilities: vec![cap(Access::MultiNodeReaderOnly, None)],
            ..Default::default()
        })
        .await
        .expect("validate")
        .into_inner();
    assert!(rox.confirmed.is_some(), "{}", rox.message);
    let grown = c
        .controller_expand_volume(ControllerExpandVolumeRequest {
            volume_id: "vg/pvc-t".into(),
            capacity_range: Some(CapacityRange {
                required_bytes: 30 * MIB,
                limit_bytes: 0,
            }),
            volume_capability: Some(cap(Access::SingleNodeWriter, Some("ext4"))),
            ..Default::default()
        })
        .await
        .expect("expand")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 32 * MIB);
    assert!(grown.node_expansion_required);
    let e = c
        .controller_expand_volume(ControllerExpandVolumeRequest {
            volume_id: "vg/nope".into(),
            capacity_range: Some(CapacityRange {
                required_bytes: MIB,
                limit_bytes: 0,
            }),
            ..Default::default()
        })
        .await
        .expect_err("expand missing");
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // Capacity shrinks as volumes are made; too large a volume is RESOURCE_EXHAUSTED.
    let cap_req = || GetCapacityRequest {
        parameters: HashMap::from([("vg".to_owned(), "vg".to_owned())]),
        ..Default::default()
    };
    let free = c
        .get_capacity(cap_req())
        .await
        .expect("capacity")
        .into_inner()
        .available_capacity;
    assert!(free > 0 && free < 200 * MIB, "{free}");
    let e = c
        .create_volume(create("pvc-big", "linear", free + 4 * MIB, rwo()))
        .await
        .expect_err("too big");
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");

    // Delete is idempotent and frees the space; the thin pool goes with its volume.
    for id in [
        "vg/pvc-a",
        "vg/pvc-a",
        "vg/pvc-t",
        "vg/pvc-rwx",
        "vg/never",
        "junk",
    ] {
        c.delete_volume(DeleteVolumeRequest {
            volume_id: id.into(),
            secrets: HashMap::new(),
        })
        .await
        .unwrap_or_else(|e| panic!("delete {id}: {e:?}"));
    }
    // The space comes back once the wiper has erased the deleted volumes' extents.
    let mut after = 0;
    for _ in 0..200 {
        after = c
            .get_capacity(cap_req())
            .await
            .expect("capacity")
            .into_inner()
            .available_capacity;
        if after > free {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(after > free, "{after} <= {free}");
    let left = c
        .list_volumes(ListVolumesRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert!(left.entries.is_empty(), "{left:?}");
}

#[tokio::test]
async fn bad_requests() {
    let mut d = driver().await;
    let c = &mut d.controller;
    let mut unknown = create("pvc-u", "linear", MIB, rwo());
    unknown.parameters.insert("color".into(), "blue".into());
    let mut no_vg = create("pvc-u", "linear", MIB, rwo());
    no_vg.parameters.remove("vg");
    let mut other_vg = create("pvc-u", "linear", MIB, rwo());
    other_vg.parameters.insert("vg".into(), "elsewhere".into());
    let mut bad_fs = create("pvc-u", "linear", MIB, vec![]);
    bad_fs.volume_capabilities = vec![VolumeCapability {
        access_mode: Some(AccessMode {
            mode: Access::SingleNodeWriter as i32,
        }),
        access_type: Some(AccessType::Mount(MountVolume {
            fs_type: "zfs".into(),
            ..Default::default()
        })),
    }];
    let mut linear_zero = create("pvc-u", "linear", MIB, rwo());
    linear_zero.parameters.insert("zero".into(), "false".into());
    let mut bad_zero = create("pvc-u", "thin", MIB, rwo());
    bad_zero
        .mutable_parameters
        .insert("zero".into(), "no".into());
    let mut immutable = create("pvc-u", "thin", MIB, rwo());
    immutable
        .mutable_parameters
        .insert("mode".into(), "thin".into());
    let mut range = create("pvc-u", "linear", 10 * MIB, rwo());
    range.capacity_range = Some(CapacityRange {
        required_bytes: 10 * MIB,
        limit_bytes: 9 * MIB,
    });
    let cases = [
        (create("", "linear", MIB, rwo()), Code::InvalidArgument),
        (create("pvc-u", "mirror", MIB, rwo()), Code::InvalidArgument),
        (
            create("pvc-u", "linear", MIB, vec![]),
            Code::InvalidArgument,
        ),
        (unknown, Code::InvalidArgument),
        (no_vg, Code::InvalidArgument),
        (other_vg, Code::InvalidArgument),
        (bad_fs, Code::InvalidArgument),
        (range, Code::OutOfRange),
        (linear_zero, Code::InvalidArgument),
        (bad_zero, Code::InvalidArgument),
        (immutable, Code::InvalidArgument),
        // CSI names are at most 128 bytes; one over is refused, also a huge one.
        (
            create(&"n".repeat(129), "linear", MIB, rwo()),
            Code::InvalidArgument,
        ),
        (
            create(&"n".repeat(1 << 20), "linear", MIB, rwo()),
            Code::InvalidArgument,
        ),
        // The names of deleted volumes' extents are not a CSI name's as it is.
        (create("csi-wipe-x", "linear", MIB, rwo()), Code::Ok),
    ];
    for (req, code) in cases {
        let got = match c.create_volume(req.clone()).await {
            Ok(r) => {
                let id = r.into_inner().volume.expect("volume").volume_id;
                assert!(id.starts_with("vg/csi-h-"), "{id}");
                Code::Ok
            }
            Err(e) => e.code(),
        };
        assert_eq!(got, code, "{}", &format!("{req:?}")[..200]);
    }
    let e = c
        .create_snapshot(CreateSnapshotRequest {
            name: "s".repeat(129),
            source_volume_id: "vg/pvc-u".into(),
            ..Default::default()
        })
        .await
        .expect_err("long name");
    assert_eq!(e.code(), Code::InvalidArgument);
    // Any CSI name is accepted: one lvm2 cannot take as an LV name gets a hashed one, the
    // same every time.
    for name in ["bad name!", "x_tmeta"] {
        let id = |r: tonic::Response<CreateVolumeResponse>| {
            r.into_inner().volume.expect("volume").volume_id
        };
        let first = id(c
            .create_volume(create(name, "linear", MIB, rwo()))
            .await
            .expect("hashed name"));
        assert!(first.starts_with("vg/csi-h-"), "{first}");
        let again = id(c
            .create_volume(create(name, "linear", MIB, rwo()))
            .await
            .expect("idempotent"));
        assert_eq!(first, again);
    }
    let e = c
        .delete_volume(DeleteVolumeRequest::default())
        .await
        .expect_err("empty id");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .controller_get_volume(ControllerGetVolumeRequest {
            volume_id: "vg/none".into(),
        })
        .await
        .expect_err("missing");
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .validate_volume_capabilities(ValidateVolumeCapabilitiesRequest {
            volume_id: "vg/none".into(),
            volume_capabilities: rwo(),
            ..Default::default()
        })
        .await
        .expect_err("missing");
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .create_snapshot(CreateSnapshotRequest::default())
        .await
        .expect_err("no name");
    assert_eq!(e.code(), Code::InvalidArgument);
    let caps = c
        .controller_get_capabilities(ControllerGetCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner();
    assert_eq!(caps.capabilities.len(), 12);
}

/// The zeroing and discards of pool `pool` as the metadata on the LUN says.
fn pool_options(d: &Harness, pool: &str) -> (bool, Option<String>) {
    let s = lvmeta::session::Session::new(vec![
        Box::new(d.lun.clone()) as Box<dyn lvmeta::dev::BlockDevice>
    ]);
    let vg = s.vg("vg").expect("vg");
    let p = vg.lv(pool).and_then(|l| l.pool()).expect("a pool").clone();
    (p.zero_new_blocks, p.discards)
}

#[tokio::test]
async fn modify_volume_changes_a_thin_pools_zeroing_and_discards() {
    let mut d = driver().await;
    let mut req = create("pvc-t", "thin", 8 * MIB, rwo());
    req.parameters
        .insert("discards".into(), "nopassdown".into());
    req.mutable_parameters.insert("zero".into(), "false".into());
    d.controller.create_volume(req).await.expect("tuned thin");
    assert_eq!(
        pool_options(&d, "pvc-t-pool"),
        (false, Some("nopassdown".into()))
    );
    d.controller
        .create_volume(create("pvc-l", "linear", MIB, rwo()))
        .await
        .expect("linear");
    let c = &mut d.controller;
    let cases = [
        (modify("", &[("zero", "true")]), Code::InvalidArgument),
        (modify("vg/none", &[("zero", "true")]), Code::NotFound),
        (modify("vg/pvc-t", &[("zero", "1")]), Code::InvalidArgument),
        (
            modify("vg/pvc-t", &[("discards", "trim")]),
            Code::InvalidArgument,
        ),
        (modify("vg/pvc-t", &[("vg", "vg")]), Code::InvalidArgument),
        (
            modify("vg/pvc-t", &[("mode", "linear")]),
            Code::InvalidArgument,
        ),
        (
            modify("vg/pvc-l", &[("zero", "true")]),
            Code::InvalidArgument,
        ),
    ];
    for (req, code) in cases {
        let e = c
            .controller_modify_volume(req.clone())
            .await
            .expect_err("refused");
        assert_eq!(e.code(), code, "{req:?}: {e:?}");
    }
    // Nothing asked of a linear volume is no error (a class without parameters).
    c.controller_modify_volume(modify("vg/pvc-l", &[]))
        .await
        .expect("nothing to change");
    for _ in 0..2 {
        c.controller_modify_volume(modify(
            "vg/pvc-t",
            &[("zero", "true"), ("discards", "ignore")],
        ))
        .await
        .expect("modify (and the same again)");
    }
    assert_eq!(
        pool_options(&d, "pvc-t-pool"),
        (true, Some("ignore".into()))
    );
    let c = &mut d.controller;
    // A clone shares its source's pool, so it asks for the same settings or none.
    let mut clone = create("pvc-c", "thin", 8 * MIB, rwo());
    clone.volume_content_source = Some(VolumeContentSource {
        r#type: Some(of_volume("vg/pvc-t")),
    });
    clone.parameters.insert("zero".into(), "false".into());
    let e = c
        .create_volume(clone.clone())
        .await
        .expect_err("another pool setting");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    clone.parameters.insert("zero".into(), "true".into());
    c.create_volume(clone).await.expect("same settings");
    // ValidateVolumeCapabilities checks mutable parameters too.
    let validate = |id: &str, zero: &str| ValidateVolumeCapabilitiesRequest {
        volume_id: id.into(),
        volume_capabilities: rwo(),
        mutable_parameters: [("zero".to_owned(), zero.to_owned())].into(),
        ..Default::default()
    };
    let r = c
        .validate_volume_capabilities(validate("vg/pvc-t", "true"))
        .await
        .expect("validate")
        .into_inner();
    assert!(r
        .confirmed
        .is_some_and(|c| c.mutable_parameters["zero"] == "true"));
    let r = c
        .validate_volume_capabilities(validate("vg/pvc-l", "true"))
        .await
        .expect("validate")
        .into_inner();
    assert!(r.confirmed.is_none() && r.message.contains("thin"), "{r:?}");
    let e = c
        .validate_volume_capabilities(validate("vg/pvc-t", "maybe"))
        .await
        .expect_err("bad value");
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[tokio::test]
async fn volume_condition_shows_an_unfinished_copy() {
    let mut d = driver().await;
    d.controller
        .create_volume(create("pvc-src", "linear", MIB, rwo()))
        .await
        .expect("source");
    // What a controller that crashed in the middle of a linear clone leaves behind.
    let s = lvmeta::session::Session::new(vec![
        Box::new(d.lun.clone()) as Box<dyn lvmeta::dev::BlockDevice>
    ]);
    s.update("vg", "lvcreate", |vg, ctx| {
        let mut spec = lvmeta::edit::LvSpec::linear("pvc-half", 1, lvmeta::edit::Stamp::now());
        spec.tags = vec![
            "lvmeta.csi/mode=linear".into(),
            format!("{}pvc-src", csi_shim::volume::CLONE_PENDING_TAG),
        ];
        lvmeta::edit::lv::create(vg, ctx, &spec)
    })
    .expect("half-made clone");
    let c = &mut d.controller;
    let list = c
        .list_volumes(ListVolumesRequest::default())
        .await
        .expect("list")
        .into_inner();
    let conditions: Vec<(String, bool)> = list
        .entries
        .iter()
        .map(|e| {
            let id = e.volume.as_ref().map(|v| v.volume_id.clone());
            let c = e.status.as_ref().and_then(|s| s.volume_condition.as_ref());
            (id.unwrap_or_default(), c.is_some_and(|c| c.abnormal))
        })
        .collect();
    assert_eq!(
        conditions,
        [("vg/pvc-half".into(), true), ("vg/pvc-src".into(), false)]
    );
    let got = c
        .controller_get_volume(ControllerGetVolumeRequest {
            volume_id: "vg/pvc-half".into(),
        })
        .await
        .expect("get")
        .into_inner();
    let condition = got
        .status
        .and_then(|s| s.volume_condition)
        .expect("condition");
    assert!(
        condition.abnormal && condition.message.contains("copy of pvc-src"),
        "{condition:?}"
    );
}

fn snap_req(name: &str, source: &str) -> CreateSnapshotRequest {
    CreateSnapshotRequest {
        name: name.into(),
        source_volume_id: source.into(),
        ..Default::default()
    }
}

fn from(name: &str, bytes: i64, src: volume_content_source::Type) -> CreateVolumeRequest {
    let mut r = create(name, "thin", bytes, rwo());
    r.volume_content_source = Some(VolumeContentSource { r#type: Some(src) });
    r
}

fn of_snapshot(id: &str) -> volume_content_source::Type {
    volume_content_source::Type::Snapshot(volume_content_source::SnapshotSource {
        snapshot_id: id.into(),
    })
}

fn of_volume(id: &str) -> volume_content_source::Type {
    volume_content_source::Type::Volume(volume_content_source::VolumeSource {
        volume_id: id.into(),
    })
}

#[tokio::test]
async fn snapshots_restores_and_clones_of_thin_volumes() {
    let mut d = driver().await;
    let c = &mut d.controller;
    c.create_volume(create("src", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin");
    c.create_volume(create("lin", "linear", 8 * MIB, rwo()))
        .await
        .expect("linear");
    // Errors first: what the spec prescribes.
    let code = |r: Result<tonic::Response<CreateSnapshotResponse>, tonic::Status>| {
        r.expect_err("refused").code()
    };
    assert_eq!(
        code(c.create_snapshot(snap_req("", "vg/src")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_snapshot(snap_req("s1", "")).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(c.create_snapshot(snap_req("s1", "vg/none")).await),
        Code::NotFound
    );
    assert_eq!(
        code(c.create_snapshot(snap_req("s1", "vg/lin")).await),
        Code::FailedPrecondition
    );
    let mut bad = snap_req("s1", "vg/src");
    bad.parameters.insert("color".into(), "red".into());
    assert_eq!(code(c.create_snapshot(bad).await), Code::InvalidArgument);

    let s = c
        .create_snapshot(snap_req("s1", "vg/src"))
        .await
        .expect("snapshot")
        .into_inner();
    let s = s.snapshot.expect("snapshot");
    assert_eq!(
        (s.snapshot_id.as_str(), s.source_volume_id.as_str()),
        ("vg/s1", "vg/src")
    );
    assert_eq!(s.size_bytes, 8 * MIB);
    assert!(s.ready_to_use && s.creation_time.is_some());
    // Idempotent; the same name for another source is ALREADY_EXISTS.
    let again = c
        .create_snapshot(snap_req("s1", "vg/src"))
        .await
        .expect("again")
        .into_inner();
    assert_eq!(again.snapshot, Some(s.clone()));
    c.create_volume(create("src2", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin 2");
    assert_eq!(
        code(c.create_snapshot(snap_req("s1", "vg/src2")).await),
        Code::AlreadyExists
    );
    c.create_snapshot(snap_req("s2", "vg/src2"))
        .await
        .expect("s2");

    // Get and list (by id, by source, paginated).
    let got = c
        .get_snapshot(GetSnapshotRequest {
            snapshot_id: "vg/s1".into(),
            ..Default::default()
        })
        .await
        .expect("get")
        .into_inner();
    assert_eq!(got.snapshot, Some(s.clone()));
    let e = c
        .get_snapshot(GetSnapshotRequest {
            snapshot_id: "vg/none".into(),
            ..Default::default()
        })
        .await
        .expect_err("missing");
    assert_eq!(e.code(), Code::NotFound);
    let lister = c.clone();
    let list = |r: ListSnapshotsRequest| {
        let mut c = lister.clone();
        async move { c.list_snapshots(r).await.expect("list").into_inner() }
    };
    let all = list(ListSnapshotsRequest::default()).await;
    assert_eq!(all.entries.len(), 2);
    let one = list(ListSnapshotsRequest {
        max_entries: 1,
        ..Default::default()
    })
    .await;
    assert_eq!((one.entries.len(), one.next_token.as_str()), (1, "1"));
    let rest = list(ListSnapshotsRequest {
        starting_token: "1".into(),
        ..Default::default()
    })
    .await;
    assert_eq!((rest.entries.len(), rest.next_token.as_str()), (1, ""));
    let by_id = list(ListSnapshotsRequest {
        snapshot_id: "vg/s2".into(),
        ..Default::default()
    })
    .await;
    assert_eq!(by_id.entries.len(), 1);
    let by_src = list(ListSnapshotsRequest {
        source_volume_id: "vg/src".into(),
        ..Default::default()
    })
    .await;
    assert_eq!(
        by_src.entries[0]
            .snapshot
            .as_ref()
            .map(|s| s.snapshot_id.as_str()),
        Some("vg/s1")
    );
    let none = list(ListSnapshotsRequest {
        snapshot_id: "vg/nothing".into(),
        ..Default::default()
    })
    .await;
    assert!(none.entries.is_empty());
    let e = c
        .list_snapshots(ListSnapshotsRequest {
            starting_token: "x".into(),
            ..Default::default()
        })
        .await
        .expect_err("bad token");
    assert_eq!(e.code(), Code::Aborted);

    // New volumes from the snapshot and from the volume.
    let v = c
        .create_volume(from("restored", 16 * MIB, of_snapshot("vg/s1")))
        .await
        .expect("restore");
    let v = v.into_inner().volume.expect("volume");
    assert_eq!(v.capacity_bytes, 16 * MIB);
    assert!(v.content_source.is_some());
    c.create_volume(from("cloned", 0, of_volume("vg/src")))
        .await
        .expect("clone");
    let e = c
        .create_volume(from("small", 4 * MIB, of_volume("vg/src")))
        .await
        .expect_err("small");
    assert_eq!(e.code(), Code::OutOfRange);
    let e = c
        .create_volume(from("x", 0, of_snapshot("vg/none")))
        .await
        .expect_err("no snap");
    assert_eq!(e.code(), Code::NotFound);
    assert_eq!(e.message(), "snapshot vg/none not found");
    let e = c
        .create_volume(from("y", 0, of_volume("vg/none")))
        .await
        .expect_err("no vol");
    assert_eq!(e.code(), Code::NotFound);
    let e = c
        .create_volume(from("z", 0, of_volume("other/src")))
        .await
        .expect_err("other VG");
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .create_volume(from("t", 0, of_volume("vg/lin")))
        .await
        .expect_err("thin from a linear volume");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("is linear"), "{e:?}");
    // A linear clone of a linear volume: its bytes are copied.
    let place = |lv: &str| {
        let s = Session::new(vec![Box::new(d.lun.clone()) as Box<dyn BlockDevice>]);
        let vg = s.vg("vg").expect("vg");
        let p = lvmeta::activate::place(&vg, lv, &[Some("lun".into())]).expect("place");
        p.single().expect("one piece").clone()
    };
    let data: Vec<u8> = (0..8 * MIB).map(|i| (i % 253) as u8).collect();
    let src = place("lin");
    d.lun.write_at(src.offset.0, &data).expect("fill lin");
    let mut lin_clone = from("w", 0, of_volume("vg/lin"));
    lin_clone.parameters.insert("mode".into(), "linear".into());
    for _ in 0..2 {
        let v = c
            .create_volume(lin_clone.clone())
            .await
            .expect("linear clone (and again: idempotent)")
            .into_inner()
            .volume
            .expect("volume");
        assert_eq!((v.volume_id.as_str(), v.capacity_bytes), ("vg/w", 8 * MIB));
        assert!(v.content_source.is_some());
    }
    let dst = place("w");
    let mut back = vec![0u8; data.len()];
    d.lun.read_at(dst.offset.0, &mut back).expect("read w");
    assert!(back == data, "the clone's bytes differ from its source's");
    let mut small = from("w2", 4 * MIB, of_volume("vg/lin"));
    small.parameters.insert("mode".into(), "linear".into());
    small.capacity_range = Some(CapacityRange {
        required_bytes: 4 * MIB,
        limit_bytes: 4 * MIB,
    });
    let e = c
        .create_volume(small)
        .await
        .expect_err("smaller than its source");
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");

    // Deleting the source keeps its snapshot; deleting twice is fine.
    c.delete_volume(DeleteVolumeRequest {
        volume_id: "vg/src".into(),
        ..Default::default()
    })
    .await
    .expect("delete source");
    assert_eq!(list(ListSnapshotsRequest::default()).await.entries.len(), 2);
    for _ in 0..2 {
        for id in ["vg/s1", "vg/s2", "bad id"] {
            c.delete_snapshot(DeleteSnapshotRequest {
                snapshot_id: id.into(),
                ..Default::default()
            })
            .await
            .expect("delete snapshot");
        }
    }
    assert!(list(ListSnapshotsRequest::default())
        .await
        .entries
        .is_empty());
}

#[tokio::test]
async fn node_service_stages_publishes_and_refuses_what_it_cannot_do() {
    let mut d = driver().await;
    let info = d
        .node
        .node_get_info(NodeGetInfoRequest {})
        .await
        .expect("info")
        .into_inner();
    assert_eq!(
        (info.node_id.as_str(), info.max_volumes_per_node),
        ("node-1", 4)
    );
    // This node sees every PV of vg (and vg "gone" does not exist).
    let segment = info.accessible_topology.expect("topology").segments;
    assert_eq!(
        segment,
        HashMap::from([("topology.lvmeta.csi/vg-vg".to_owned(), "yes".to_owned())])
    );
    // CreateVolume honours the topology asked for, and says where its volume is reachable.
    let elsewhere = Topology {
        segments: HashMap::from([("topology.lvmeta.csi/vg-other".to_owned(), "yes".to_owned())]),
    };
    let mut req = create("topo", "linear", 4 * MIB, rwo());
    req.accessibility_requirements = Some(TopologyRequirement {
        requisite: vec![elsewhere.clone()],
        preferred: vec![],
    });
    let e = d
        .controller
        .create_volume(req.clone())
        .await
        .expect_err("other VG's segment");
    assert_eq!(e.code(), Code::ResourceExhausted);
    let here = Topology { segments: segment };
    req.accessibility_requirements = Some(TopologyRequirement {
        requisite: vec![elsewhere.clone(), here.clone()],
        preferred: vec![here.clone()],
    });
    let v = d
        .controller
        .create_volume(req)
        .await
        .expect("topology met")
        .into_inner();
    assert_eq!(
        v.volume.expect("volume").accessible_topology,
        vec![here.clone()]
    );
    let cap_at = |t: Topology| GetCapacityRequest {
        accessible_topology: Some(t),
        ..Default::default()
    };
    let none = d
        .controller
        .get_capacity(cap_at(elsewhere))
        .await
        .expect("capacity")
        .into_inner();
    assert_eq!(none.available_capacity, 0);
    let some = d
        .controller
        .get_capacity(cap_at(here))
        .await
        .expect("capacity")
        .into_inner();
    assert!(some.available_capacity > 0);
    let caps = d
        .node
        .node_get_capabilities(NodeGetCapabilitiesRequest {})
        .await
        .expect("caps")
        .into_inner();
    assert_eq!(caps.capabilities.len(), 6);
    d.controller
        .create_volume(create("thin", "thin", 8 * MIB, rwo()))
        .await
        .expect("thin");
    // Last, so that it can grow in one piece (as the loop backend needs).
    d.controller
        .create_volume(create("lin", "linear", 8 * MIB, rwo()))
        .await
        .expect("lin");
    let fs = cap(Access::SingleNodeWriter, Some("ext4"));

    // Arguments are checked before anything is done.
    let code = |r: Result<tonic::Response<NodeStageVolumeResponse>, tonic::Status>| {
        r.expect_err("refused").code()
    };
    let mut bad = stage(&d, "vg/lin", "st/lin", fs.clone());
    bad.volume_id.clear();
    assert_eq!(
        code(d.node.node_stage_volume(bad).await),
        Code::InvalidArgument
    );
    for path in ["", "relative/path", "/tmp/outside-kubelet"] {
        let mut bad = stage(&d, "vg/lin", "st/lin", fs.clone());
        bad.staging_target_path = path.into();
        assert_eq!(
            code(d.node.node_stage_volume(bad).await),
            Code::InvalidArgument,
            "{path:?}"
        );
    }
    let mut bad = stage(&d, "vg/lin", "st/lin", fs.clone());
    bad.staging_target_path = format!("{}/st/../../../etc", d.kubelet.display());
    assert_eq!(
        code(d.node.node_stage_volume(bad).await),
        Code::InvalidArgument
    );
    let mut bad = stage(&d, "vg/lin", "st/lin", fs.clone());
    bad.volume_capability = None;
    assert_eq!(
        code(d.node.node_stage_volume(bad).await),
        Code::InvalidArgument
    );
    // Mount flags are checked one by one: none may smuggle in another option.
    for flags in [
        vec!["noatime,exec".to_owned()],
        vec!["bind".into()],
        vec!["a\nb".into()],
    ] {
        let mut flagged = fs.clone();
        flagged.access_type = Some(AccessType::Mount(MountVolume {
            fs_type: "ext4".into(),
            mount_flags: flags.clone(),
            ..Default::default()
        }));
        assert_eq!(
            code(
                d.node
                    .node_stage_volume(stage(&d, "vg/lin", "st/lin", flagged))
                    .await
            ),
            Code::InvalidArgument,
            "{flags:?}"
        );
    }
    let mut btrfs = fs.clone();
    btrfs.access_type = Some(AccessType::Mount(MountVolume {
        fs_type: "btrfs".into(),
        ..Default::default()
    }));
    assert_eq!(
        code(
            d.node
                .node_stage_volume(stage(&d, "vg/lin", "st/lin", btrfs))
                .await
        ),
        Code::InvalidArgument
    );
    assert_eq!(
        code(
            d.node
                .node_stage_volume(stage(&d, "vg/nope", "st/nope", fs.clone()))
                .await
        ),
        Code::NotFound
    );
    // RWX on a filesystem is refused.
    assert_eq!(
        code(
            d.node
                .node_stage_volume(stage(
                    &d,
                    "vg/lin",
                    "st/lin",
                    cap(Access::MultiNodeMultiWriter, Some("ext4"))
                ))
                .await
        ),
        Code::InvalidArgument
    );

    // Stage: activated, formatted (blank), mounted; again: fine; elsewhere: ALREADY_EXISTS.
    d.node
        .node_stage_volume(stage(&d, "vg/lin", "st/lin", fs.clone()))
        .await
        .expect("stage");
    assert_eq!(d.activation.state("vg", "lin"), Some(false));
    assert_eq!(d.system.mounts(), vec![d.kubelet.join("st/lin")]);
    d.node
        .node_stage_volume(stage(&d, "vg/lin", "st/lin", fs.clone()))
        .await
        .expect("again");
    assert_eq!(
        code(
            d.node
                .node_stage_volume(stage(&d, "vg/lin", "st/other", fs.clone()))
                .await
        ),
        Code::AlreadyExists
    );
    // Thin volumes need dm-thin-pool, which the fake (like the loop backend) lacks.
    let e = d
        .node
        .node_stage_volume(stage(&d, "vg/thin", "st/thin", fs.clone()))
        .await
        .expect_err("thin");
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("dm-thin-pool"), "{}", e.message());

    // Publish: not staged is FAILED_PRECONDITION; published twice is fine.
    let e = d
        .node
        .node_publish_volume(publish(&d, "vg/thin", "st/thin", "pods/a/thin", fs.clone()))
        .await
        .expect_err("not staged");
    assert_eq!(e.code(), Code::FailedPrecondition);
    let mut outside = publish(&d, "vg/lin", "st/lin", "pods/a/lin", fs.clone());
    outside.target_path = "/var/tmp/elsewhere".into();
    assert_eq!(
        d.node
            .node_publish_volume(outside)
            .await
            .expect_err("outside")
            .code(),
        Code::InvalidArgument
    );
    for _ in 0..2 {
        d.node
            .node_publish_volume(publish(&d, "vg/lin", "st/lin", "pods/a/lin", fs.clone()))
            .await
            .expect("publish");
    }
    assert!(d.kubelet.join("pods/a/lin").is_dir());
    assert_eq!(d.system.mounts().len(), 2);

    // Stats: bytes and inodes of the mount; a path that is not there is NOT_FOUND.
    let stats = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "vg/lin".into(),
            volume_path: d.kubelet.join("pods/a/lin").display().to_string(),
            ..Default::default()
        })
        .await
        .expect("stats")
        .into_inner();
    assert_eq!(stats.usage.len(), 2);
    assert_eq!(stats.usage[0].total, 64 << 20);
    assert_eq!(stats.volume_condition.map(|c| c.abnormal), Some(false));
    let e = d
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: "vg/lin".into(),
            volume_path: d.kubelet.join("pods/none").display().to_string(),
            ..Default::default()
        })
        .await
        .expect_err("no path");
    assert_eq!(e.code(), Code::NotFound);

    // Expansion: the controller grows the LV, the node the filesystem.
    d.controller
        .controller_expand_volume(ControllerExpandVolumeRequest {
            volume_id: "vg/lin".into(),
            capacity_range: Some(CapacityRange {
                required_bytes: 16 * MIB,
                limit_bytes: 0,
            }),
            volume_capability: Some(fs.clone()),
            ..Default::default()
        })
        .await
        .expect("controller expand");
    let grown = d
        .node
        .node_expand_volume(NodeExpandVolumeRequest {
            volume_id: "vg/lin".into(),
            volume_path: d.kubelet.join("pods/a/lin").display().to_string(),
            ..Default::default()
        })
        .await
        .expect("node expand")
        .into_inner();
    assert_eq!(grown.capacity_bytes, 16 * MIB);
    assert_eq!(d.system.grown(), 1);

    // Block volumes: the device bind-mounted on a file.
    d.controller
        .create_volume(create(
            "blk",
            "linear",
            4 * MIB,
            vec![cap(Access::MultiNodeMultiWriter, None)],
        ))
        .await
        .expect("blk");
    let rwx = cap(Access::MultiNodeMultiWriter, None);
    d.node
        .node_stage_volume(stage(&d, "vg/blk", "st/blk", rwx.clone()))
        .await
        .expect("stage blk");
    d.node
        .node_publish_volume(publish(&d, "vg/blk", "st/blk", "pods/b/dev", rwx.clone()))
        .await
        .expect("publish blk");
    assert!(d.kubelet.join("pods/b/dev").is_file());

    // Undo everything, twice.
    for _ in 0..2 {
        for (id, target) in [("vg/lin", "pods/a/lin"), ("vg/blk", "pods/b/dev")] {
            d.node
                .node_unpublish_volume(NodeUnpublishVolumeRequest {
                    volume_id: id.into(),
                    target_path: d.kubelet.join(target).display().to_string(),
                })
                .await
                .expect("unpublish");
        }
        for (id, staging) in [("vg/lin", "st/lin"), ("vg/blk", "st/blk")] {
            d.node
                .node_unstage_volume(NodeUnstageVolumeRequest {
                    volume_id: id.into(),
                    staging_target_path: d.kubelet.join(staging).display().to_string(),
                })
                .await
                .expect("unstage");
        }
    }
    assert!(d.system.mounts().is_empty());
    assert!(!d.kubelet.join("pods/a/lin").exists());
    assert_eq!(d.activation.state("vg", "lin"), None);
    assert_eq!(d.activation.state("vg", "blk"), None);
}

/// A metadata area that fills up: GetCapacity offers nothing once the area cannot take one
/// more volume of the mode asked, and CreateVolume is RESOURCE_EXHAUSTED saying what to do,
/// with nothing written.
#[tokio::test]
async fn a_full_metadata_area_is_resource_exhausted() {
    let pv = lvmeta::layout::PvOptions {
        metadata_size: Some(lvmeta::units::Bytes(32 << 10)),
        // Else the area runs up to the first extent at 1 MiB.
        data_alignment: Some(lvmeta::units::Bytes(64 << 10)),
        ..Default::default()
    };
    let mut d = common::driver_with_pv(2 << 30, &pv).await;
    let capacity = |mode: &str| GetCapacityRequest {
        parameters: [("vg", "vg"), ("mode", mode)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ..Default::default()
    };
    let mut offered_none = false;
    let mut made = 0;
    let err = loop {
        let c = d
            .controller
            .get_capacity(capacity("linear"))
            .await
            .expect("GetCapacity")
            .into_inner();
        offered_none |= c.available_capacity == 0;
        match d
            .controller
            .create_volume(create(&format!("v{made:03}"), "linear", 4 * MIB, rwo()))
            .await
        {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(made < 500, "the area never filled");
    };
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(err.message().contains("--metadatasize"), "{err:?}");
    assert!(
        offered_none,
        "GetCapacity offered room until CreateVolume failed"
    );
    assert!(made > 10, "only {made} volumes fit");
    // The thin mode needs more text: it is offered nothing either.
    let thin = d
        .controller
        .get_capacity(capacity("thin"))
        .await
        .expect("GetCapacity")
        .into_inner();
    assert_eq!(thin.available_capacity, 0);
    // Nothing of the refused volume was written: deleting one frees room again.
    let list = d
        .controller
        .list_volumes(ListVolumesRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(list.entries.len(), made);
    d.controller
        .delete_volume(DeleteVolumeRequest {
            volume_id: "vg/v000".into(),
            ..Default::default()
        })
        .await
        .expect("delete");
}
