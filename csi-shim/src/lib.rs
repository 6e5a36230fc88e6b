//! The CSI gRPC server that maps Kubernetes volume requests onto lvmeta.
//!
//! It checks and translates requests, runs the storage work of [`volume`] (the driver's
//! volume policy over lvmeta's lvm2 model: CSI tags, the node request mailbox, conditions,
//! erasure) on blocking threads, and maps its errors to the gRPC codes the CSI spec
//! prescribes. See docs/csi.md for the StorageClass parameters and what is served.

// tonic::Status is the error of every RPC; boxing it in helpers would only add conversions.
#![allow(clippy::result_large_err)]

pub mod attach;
pub mod authority;
pub mod bounds;
pub mod client;
pub mod connections;
pub mod controller;
pub mod driver;
pub mod every;
pub mod fencing;
pub mod fuzzing;
pub mod identity;
pub mod inflight;
pub mod keeper;
pub mod kubelet;
pub mod listing;
pub mod lun_path;
pub mod malloc;
pub mod metrics;
pub mod mount;
pub mod nbd;
pub mod node;
pub mod params;
pub mod prepare;
pub mod serve;
pub mod server;
pub mod slots;
pub mod status;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod volume;
pub mod wiper;

/// The CSI v1 messages and services, generated from the pinned `proto/csi.proto` (spec
/// v1.12.0) by protox and tonic-build; `tests/codegen.rs` keeps them in step.
#[allow(missing_docs, clippy::all, clippy::pedantic, clippy::unwrap_used)]
pub mod csi {
    include!("gen/csi.v1.rs");
}

/// How long the driver keeps an unused exclusive VG lease after a change, so that the next
/// change of this host reuses it (see `lvmeta::lease::Host::with_linger`).
pub const VG_LEASE_LINGER: std::time::Duration = std::time::Duration::from_millis(20);

/// How long one acquire of a VG lease is reused at most, so that other hosts get a turn.
pub const VG_LEASE_MAX_HOLD: std::time::Duration = std::time::Duration::from_millis(500);

/// The plugin name Kubernetes addresses the driver by.
pub const DRIVER_NAME: &str = "lvmeta.csi.k8s.io";
