//! Prometheus metrics, served in the OpenMetrics text format at `/metrics` of
//! `--metrics-address` ([`http`]).
//!
//! - VG space under TopoLVM's names (`topolvm_volumegroup_size_bytes`,
//!   `topolvm_volumegroup_available_bytes`, label `device_class` = the VG), so dashboards and
//!   alerts made for TopoLVM and LVMS work; thin pools active on a node under TopoLVM's
//!   `topolvm_thinpool_data_percent` / `_metadata_percent`, from the kernel's status.
//! - The rest under `lvmeta_`: volumes and snapshots per VG, metadata text and areas, the
//!   wipe backlog, lockspace state, RPC latency by method and code, VG lease requests.
//!
//! Invariants:
//! - gauges are read from the session's cached model at scrape time (no disk I/O but what
//!   the scan cache does anyway) and every series that no longer exists disappears;
//! - VG gauges come from the controller only ([`Scope::vgs`]): node plugins would repeat them;
//!   the lockspace gauge is every host's own and comes from every process.

mod gather;
pub mod http;

pub use gather::Scope;

use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::Duration;

use lvmeta::lease::observe::{LeaseObserver, VgLeaseTaken};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeviceClass {
    device_class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Pool {
    device_class: String,
    thinpool: String,
    node: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Vg {
    vg: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VgMode {
    vg: String,
    mode: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Area {
    vg: String,
    device: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Rpc {
    method: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Lease {
    vg: String,
    outcome: String,
}

type Percent = Gauge<f64, AtomicU64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

/// 1 ms to about 33 s.
fn seconds() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Every metric of the process, and the registry that prints them.
pub struct Metrics {
    registry: Registry,
    vg_size: Family<DeviceClass, Gauge>,
    vg_available: Family<DeviceClass, Gauge>,
    thin_data: Family<Pool, Percent>,
    thin_metadata: Family<Pool, Percent>,
    volumes: Family<VgMode, Gauge>,
    snapshots: Family<Vg, Gauge>,
    text: Family<Vg, Gauge>,
    area_size: Family<Area, Gauge>,
    area_limit: Family<Area, Gauge>,
    wipe_volumes: Family<Vg, Gauge>,
    wipe_bytes: Family<Vg, Gauge>,
    lockspace: Family<Vg, Gauge>,
    rpc: Histograms<Rpc>,
    lease: Histograms<Lease>,
    lease_busy: Family<Vg, Counter>,
    fencing_ready: Family<Vg, Gauge>,
    fencing_required: Family<Vg, Gauge>,
    fenced: Counter,
    /// One scrape at a time: each clears and refills the gauges.
    scraping: Mutex<()>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut r = Registry::default();
        let m = Metrics {
            registry: Registry::default(),
            vg_size: Family::default(),
            vg_available: Family::default(),
            thin_data: Family::default(),
            thin_metadata: Family::default(),
            volumes: Family::default(),
            snapshots: Family::default(),
            text: Family::default(),
            area_size: Family::default(),
            area_limit: Family::default(),
            wipe_volumes: Family::default(),
            wipe_bytes: Family::default(),
            lockspace: Family::default(),
            rpc: Family::new_with_constructor(seconds),
            lease: Family::new_with_constructor(seconds),
            lease_busy: Family::default(),
            fencing_ready: Family::default(),
            fencing_required: Family::default(),
            fenced: Counter::default(),
            scraping: Mutex::new(()),
        };
        {
            let t = r.sub_registry_with_prefix("topolvm");
            t.register_with_unit(
                "volumegroup_size",
                "Size of the VG (device_class: the VG)",
                Unit::Bytes,
                m.vg_size.clone(),
            );
            t.register_with_unit(
                "volumegroup_available",
                "Free space of the VG",
                Unit::Bytes,
                m.vg_available.clone(),
            );
            t.register(
                "thinpool_data_percent",
                "Data space of a thin pool active on this node, in percent used",
                m.thin_data.clone(),
            );
            t.register(
                "thinpool_metadata_percent",
                "Metadata space of a thin pool active on this node, in percent used",
                m.thin_metadata.clone(),
            );
        }
        let l = r.sub_registry_with_prefix("lvmeta");
        l.register("volumes", "Volumes in the VG by mode", m.volumes.clone());
        l.register("snapshots", "Snapshots in the VG", m.snapshots.clone());
        l.register_with_unit(
            "metadata_text",
            "Size of the VG's committed metadata text",
            Unit::Bytes,
            m.text.clone(),
        );
        l.register_with_unit(
            "metadata_area_size",
            "Size of a metadata area of the VG, by PV device",
            Unit::Bytes,
            m.area_size.clone(),
        );
        l.register_with_unit(
            "metadata_area_text_limit",
            "Largest metadata text a metadata area takes; new volumes are refused beyond it",
            Unit::Bytes,
            m.area_limit.clone(),
        );
        l.register(
            "wipe_backlog_volumes",
            "Deleted volumes whose extents wait to be erased",
            m.wipe_volumes.clone(),
        );
        l.register_with_unit(
            "wipe_backlog",
            "Bytes of deleted volumes waiting to be erased",
            Unit::Bytes,
            m.wipe_bytes.clone(),
        );
        l.register(
            "lockspace_joined",
            "1 when this host has joined the shared VG's lockspace, else 0",
            m.lockspace.clone(),
        );
        l.register_with_unit(
            "csi_rpc_duration",
            "CSI calls by method and gRPC code",
            Unit::Seconds,
            m.rpc.clone(),
        );
        l.register_with_unit(
            "vg_lease_request_duration",
            "VG lease requests by outcome (acquired, kept, failed), waits included",
            Unit::Seconds,
            m.lease.clone(),
        );
        l.register(
            "vg_lease_busy",
            "Times the lock manager said another host held a VG lease (then retried)",
            m.lease_busy.clone(),
        );
        l.register(
            "fencing_ready",
            "1 when this host can be fenced (sanlock's watchdog armed; in a node plugin, volumes can fail their I/O in place), else 0; shared VGs only",
            m.fencing_ready.clone(),
        );
        l.register(
            "fencing_required",
            "0 when the driver was told to use shared VGs even where this host cannot be fenced (--unsafe-without-fencing), else 1; shared VGs only",
            m.fencing_required.clone(),
        );
        l.register(
            "fenced_volumes",
            "Volumes fenced on this host after it lost their leases (devices, where one was fenced without its VG's metadata)",
            m.fenced.clone(),
        );
        Metrics { registry: r, ..m }
    }
}

impl Metrics {
    /// Records a finished CSI call.
    ///
    /// The method label is the call's path only for the CSI services' methods (a method
    /// tonic does not serve answers UNIMPLEMENTED): any other path counts as `other`, so a
    /// client cannot make series without end.
    pub fn rpc(&self, method: &str, code: tonic::Code, took: Duration) {
        let csi = ["/csi.v1.Identity/", "/csi.v1.Controller/", "/csi.v1.Node/"];
        let known = code != tonic::Code::Unimplemented
            && csi.iter().any(|s| {
                method
                    .strip_prefix(s)
                    .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic()))
            });
        let labels = Rpc {
            method: if known { method } else { "other" }.to_owned(),
            code: code_name(code),
        };
        self.rpc.get_or_create(&labels).observe(took.as_secs_f64());
    }

    /// Counts `n` volumes fenced.
    pub fn fenced(&self, n: u64) {
        self.fenced.inc_by(n);
    }
}

impl LeaseObserver for Metrics {
    fn vg_lease(&self, t: &VgLeaseTaken<'_>) {
        let labels = Lease {
            vg: t.vg.to_owned(),
            outcome: t.outcome.as_str().to_owned(),
        };
        self.lease
            .get_or_create(&labels)
            .observe(t.waited.as_secs_f64());
        if t.busy > 0 {
            let vg = Vg {
                vg: t.vg.to_owned(),
            };
            self.lease_busy.get_or_create(&vg).inc_by(u64::from(t.busy));
        }
    }
}

/// A gRPC code as gRPC's own libraries name it (`OK`, `Canceled`, `InvalidArgument`, ...),
/// the values dashboards of gRPC servers expect.
fn code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".into(),
        tonic::Code::Cancelled => "Canceled".into(),
        c => format!("{c:?}"),
    }
}

/// A byte count as a gauge value.
fn gauge(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// `used` of `all` in percent (0 when `all` is 0).
fn percent((used, all): (u64, u64)) -> f64 {
    if all == 0 {
        0.0
    } else {
        used as f64 * 100.0 / all as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_csi_methods_name_a_series() {
        let m = Metrics::default();
        let ms = Duration::from_millis(1);
        m.rpc("/csi.v1.Node/NodeStageVolume", tonic::Code::Ok, ms);
        m.rpc("/csi.v1.Node/NoSuchCall", tonic::Code::Unimplemented, ms);
        m.rpc("/csi.v1.Node/../../x", tonic::Code::Ok, ms);
        m.rpc("/evil/\u{1b}[31m", tonic::Code::Unimplemented, ms);
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &m.registry).expect("encode");
        // A family's series come out in hash order.
        let mut series: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("lvmeta_csi_rpc_duration_seconds_count"))
            .collect();
        series.sort_unstable();
        assert_eq!(
            series,
            [
                "lvmeta_csi_rpc_duration_seconds_count{method=\"/csi.v1.Node/NodeStageVolume\",code=\"OK\"} 1",
                "lvmeta_csi_rpc_duration_seconds_count{method=\"other\",code=\"OK\"} 1",
                "lvmeta_csi_rpc_duration_seconds_count{method=\"other\",code=\"Unimplemented\"} 2",
            ]
        );
    }
}
