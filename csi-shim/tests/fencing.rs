//! Fencing as the driver decides it (leases in memory, simulated activations; the VM stage
//! proves it on a real kernel with sanlock, wdmd and softdog):
//! - a host the lock manager cannot fence uses no shared VG: Probe says not ready, changes
//!   and activations are refused, reads go on; told `--unsafe-without-fencing`, it warns and
//!   serves;
//! - a lost lockspace fences every volume live here and lets their leases go;
//! - a restarted node plugin fences what is live here without its lease, and only that.

mod common;

use std::sync::Arc;

use common::*;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use csi_shim::fencing;
use lvmeta::lease::FakeLeases;
use tonic::Code;

/// A driver over shared VG `vg` whose leases are `fake`'s, fencing `required` or not.
async fn shared_driver(fake: Arc<FakeLeases>, required: bool) -> Harness {
    shared_driver_with(fake, required, Arc::default()).await
}

async fn probe(d: &mut Harness) -> Option<bool> {
    d.identity
        .probe(ProbeRequest {})
        .await
        .expect("Probe")
        .into_inner()
        .ready
}

async fn create_id(d: &mut Harness, name: &str, caps: Vec<VolumeCapability>) -> String {
    d.controller
        .create_volume(create(name, "linear", 8 * MIB, caps))
        .await
        .expect("CreateVolume")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id
}

/// A driver requiring fencing with volumes `vg/a` and `vg/b` staged (block).
async fn two_staged(fake: &Arc<FakeLeases>) -> (Harness, String, String) {
    let mut d = shared_driver(fake.clone(), true).await;
    let a = create_id(&mut d, "a", vec![block()]).await;
    let b = create_id(&mut d, "b", vec![block()]).await;
    for id in [&a, &b] {
        d.node
            .node_stage_volume(stage(&d, id, &format!("staging/{id}"), block()))
            .await
            .expect("NodeStageVolume");
    }
    (d, a, b)
}

fn scrape(d: &Harness) -> String {
    let scope = csi_shim::metrics::Scope {
        vgs: true,
        node: None,
    };
    d.backend.metrics().scrape(&d.backend, &scope)
}

fn block() -> VolumeCapability {
    cap(Access::SingleNodeWriter, None)
}

#[tokio::test]
async fn a_host_without_a_watchdog_uses_no_shared_vg_unless_told() {
    let fake = Arc::new(FakeLeases::default());
    let mut d = shared_driver(fake.clone(), true).await;
    assert_eq!(probe(&mut d).await, Some(true));
    let id = create_id(&mut d, "before", vec![block()]).await;
    fake.without_watchdog();
    // The answer is cached for a moment: wait it out.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert_eq!(
        probe(&mut d).await,
        Some(false),
        "not ready without a watchdog"
    );
    let e = d
        .controller
        .create_volume(create("after", "linear", 8 * MIB, vec![block()]))
        .await
        .expect_err("a change without fencing");
    assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains("watchdog"), "{}", e.message());
    let e = d
        .node
        .node_stage_volume(stage(&d, &id, "staging/v", block()))
        .await
        .expect_err("an activation without fencing");
    assert_eq!(e.code(), Code::FailedPrecondition, "{}", e.message());
    assert!(e.message().contains("cannot be fenced"), "{}", e.message());
    // Reads go on.
    let listed = d
        .controller
        .list_volumes(ListVolumesRequest::default())
        .await
        .expect("ListVolumes")
        .into_inner();
    assert_eq!(listed.entries.len(), 1);
    assert!(
        d.activation.state("vg", "before").is_none(),
        "nothing activated"
    );

    // Told to run without fencing: ready, and it serves.
    let mut d2 = shared_driver(fake, false).await;
    assert_eq!(probe(&mut d2).await, Some(true));
    create_id(&mut d2, "unsafe", vec![block()]).await;
    assert!(scrape(&d2).contains("lvmeta_fencing_required{vg=\"vg\"} 0"));
}

#[tokio::test]
async fn a_lost_lockspace_fences_the_volumes_live_here_and_lets_their_leases_go() {
    let fake = Arc::new(FakeLeases::default());
    let (mut d, a, _) = two_staged(&fake).await;
    d.node
        .node_publish_volume(publish(
            &d,
            &a,
            &format!("staging/{a}"),
            "pods/p/a",
            block(),
        ))
        .await
        .expect("NodePublishVolume");
    let uuid = |lv: &str| {
        let vg = d.backend.session().vg("vg").expect("vg");
        vg.lv(lv).expect("lv").id.to_string()
    };
    let (ua, ub) = (uuid("a"), uuid("b"));
    assert!(fake.is_held("lvm_vg", &ua) && fake.is_held("lvm_vg", &ub));
    // Healthy: a sweep leaves everything alone.
    let s = fencing::sweep(&d.backend, Some(&d.node_service), true).expect("sweep");
    assert_eq!(s, fencing::Swept::default());

    fake.fail_lockspace("lvm_vg");
    let s = fencing::sweep(&d.backend, Some(&d.node_service), false).expect("sweep");
    assert_eq!(s.lost, ["vg"]);
    assert_eq!(s.fenced, ["vg/a", "vg/b"]);
    assert!(s.failed.is_empty(), "{:?}", s.failed);
    assert_eq!(d.activation.fenced(), ["vg-a", "vg-b"]);
    assert!(scrape(&d).contains("lvmeta_fenced_volumes_total 2"));
    assert!(!fake.is_held("lvm_vg", &ua) && !fake.is_held("lvm_vg", &ub));
    // Fenced once: the next sweep finds nothing more to do.
    let s = fencing::sweep(&d.backend, Some(&d.node_service), false).expect("sweep");
    assert!(s.fenced.is_empty(), "{s:?}");
    // Nothing had them open: their devices are gone already, and kubelet's unstage is done.
    assert!(d.activation.state("vg", "a").is_none());
    assert!(d.activation.state("vg", "b").is_none());
    // The pod's bind of a's device outlived it (a bind does not hold a device open): it
    // shows the deleted node, and kubelet's unpublish still takes it away. A deleted node
    // of another volume's name is never taken for a's.
    d.system.delete_node(std::path::Path::new("/dev/fake/vg-a"));
    let other = d.kubelet.join("pods/q/a");
    d.system
        .bind_foreign_node(std::path::Path::new("/dev/fake/vg-b"), &other);
    d.system.delete_node(std::path::Path::new("/dev/fake/vg-b"));
    for (target, gone) in [(d.kubelet.join("pods/p/a"), true), (other.clone(), false)] {
        kubelet_path(
            &d,
            target
                .strip_prefix(&d.kubelet)
                .expect("under kubelet")
                .to_str()
                .expect("utf-8"),
        );
        d.node
            .node_unpublish_volume(NodeUnpublishVolumeRequest {
                volume_id: a.clone(),
                target_path: target.display().to_string(),
            })
            .await
            .expect("NodeUnpublishVolume of a fenced volume");
        assert_eq!(
            !d.system.mounts().contains(&target),
            gone,
            "{}",
            target.display()
        );
    }
    d.node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: a.clone(),
            staging_target_path: d.kubelet.join(format!("staging/{a}")).display().to_string(),
        })
        .await
        .expect("NodeUnstageVolume of a fenced volume");
}

#[tokio::test]
async fn a_restarted_plugin_fences_only_what_is_live_here_without_its_lease() {
    let fake = Arc::new(FakeLeases::default());
    let (d, _, _) = two_staged(&fake).await;
    // The plugin ends with both staged: their leases stay as orphans.
    d.node_service.keep_all();
    fake.end_process();
    let s = fencing::sweep(&d.backend, Some(&d.node_service), true).expect("sweep");
    assert!(s.fenced.is_empty(), "orphans hold the leases: {s:?}");
    // b's orphan goes (as after a lockspace lost and joined again): b alone is fenced.
    let vg = d.backend.session().vg("vg").expect("vg");
    let ub = vg.lv("b").expect("b").id.to_string();
    d.backend
        .session()
        .let_go_covering("vg", "b")
        .expect("let go of b's orphan");
    assert!(!fake.is_held("lvm_vg", &ub));
    let s = fencing::sweep(&d.backend, Some(&d.node_service), true).expect("sweep");
    assert_eq!(s.fenced, ["vg/b"]);
    assert_eq!(d.activation.fenced(), ["vg-b"]);
}

#[tokio::test]
async fn two_thin_volumes_of_one_pool_are_fenced_together_and_the_pool_lease_goes() {
    let fake = Arc::new(FakeLeases::default());
    let thin = Arc::new(lvmeta::activate::FakeBackend::with_thin());
    let mut d = shared_driver_with(fake.clone(), true, thin).await;
    let rwo = vec![block()];
    let src = d
        .controller
        .create_volume(create("src", "thin", 8 * MIB, rwo.clone()))
        .await
        .expect("thin volume")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id;
    d.controller
        .create_snapshot(CreateSnapshotRequest {
            source_volume_id: src.clone(),
            name: "snap".into(),
            ..Default::default()
        })
        .await
        .expect("snapshot");
    let mut restore = create("restored", "thin", 8 * MIB, rwo);
    restore.volume_content_source = Some(VolumeContentSource {
        r#type: Some(volume_content_source::Type::Snapshot(
            volume_content_source::SnapshotSource {
                snapshot_id: "vg/snap".into(),
            },
        )),
    });
    let restored = d
        .controller
        .create_volume(restore)
        .await
        .expect("restore into the same pool")
        .into_inner()
        .volume
        .expect("volume")
        .volume_id;
    for id in [&src, &restored] {
        d.node
            .node_stage_volume(stage(&d, id, &format!("staging/{id}"), block()))
            .await
            .expect("NodeStageVolume");
    }
    let pool = d
        .backend
        .session()
        .vg("vg")
        .expect("vg")
        .lv("src-pool")
        .expect("pool")
        .id
        .to_string();
    assert!(fake.is_held("lvm_vg", &pool), "one pool lease for both");
    fake.fail_lockspace("lvm_vg");
    let s = fencing::sweep(&d.backend, Some(&d.node_service), false).expect("sweep");
    assert!(s.failed.is_empty(), "{:?}", s.failed);
    assert!(!s.fenced.is_empty());
    assert!(
        !fake.is_held("lvm_vg", &pool),
        "the pool lease is let go once both volumes are forgotten"
    );
    assert!(d.activation.state("vg", "src").is_none());
    assert!(d.activation.state("vg", "restored").is_none());
}
