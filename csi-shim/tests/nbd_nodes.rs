//! Thin volumes on several nodes through the Node service, on a fake kernel: what is
//! refused before any NBD is involved. The data path itself (one node serving, another
//! attaching over a real link and kernel) is `tests/tests/vm_two_hosts.rs`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use lvmeta::activate::FakeBackend;
use tonic::Code;

#[tokio::test]
async fn a_shared_thin_block_volume_on_several_nodes_needs_the_nbd_address() {
    let fake = Arc::default();
    let mut d = shared_driver_with(fake, false, Arc::new(FakeBackend::with_thin())).await;
    let rwx = cap(Access::MultiNodeMultiWriter, None);
    d.controller
        .create_volume(create("t", "thin", 8 * MIB, vec![rwx.clone()]))
        .await
        .expect("thin RWX block");
    let e = d
        .node
        .node_stage_volume(stage(&d, "vg/t", "st/t", rwx))
        .await
        .expect_err("no --nbd-ip");
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("--nbd-ip"), "{e:?}");
    // Nothing was activated or held.
    assert_eq!(d.activation.state("vg", "t"), None);
    let fs = cap(Access::MultiNodeReaderOnly, Some("ext4"));
    let e = d
        .node
        .node_stage_volume(stage(&d, "vg/t", "st/t", fs))
        .await
        .expect_err("a thin filesystem on several nodes");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
}

#[tokio::test]
async fn a_thin_block_volume_of_a_local_vg_stages_as_for_one_node() {
    let mut d = driver_thin(Duration::from_secs(10)).await;
    let rwx = cap(Access::MultiNodeMultiWriter, None);
    d.controller
        .create_volume(create("t", "thin", 8 * MIB, vec![rwx.clone()]))
        .await
        .expect("thin RWX block");
    d.node
        .node_stage_volume(stage(&d, "vg/t", "st/t", rwx))
        .await
        .expect("a local VG has one node: no NBD");
    assert_eq!(d.activation.state("vg", "t"), Some(false));
}
