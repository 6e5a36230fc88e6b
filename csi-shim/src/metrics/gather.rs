//! A scrape: what the driver and this node say of their VGs, leases and pools, read into
//! the registry and encoded.

use super::*;
use crate::driver::Driver;
use crate::node::Node;
use crate::volume::Volumes;

/// What a scrape reports.
pub struct Scope<'a> {
    /// The served VGs' gauges (the controller's).
    pub vgs: bool,
    /// This node's thin pools (a node plugin's).
    pub node: Option<&'a Node>,
}

impl Metrics {
    /// The metrics of `scope` now, in the OpenMetrics text format.
    pub fn scrape(&self, backend: &Driver, scope: &Scope<'_>) -> String {
        let _one = self.scraping.lock().unwrap_or_else(|p| p.into_inner());
        macro_rules! clear {
            ($($f:ident),*) => { $(self.$f.clear();)* };
        }
        clear!(
            vg_size,
            vg_available,
            thin_data,
            thin_metadata,
            volumes,
            snapshots,
            text
        );
        clear!(area_size, area_limit, wipe_volumes, wipe_bytes, lockspace);
        clear!(fencing_ready, fencing_required);
        for vg in backend.vgs() {
            // Every host's own state: the node plugins report theirs too.
            self.lockspace(backend, vg);
            if scope.vgs {
                self.vg(backend, vg);
            }
        }
        if let Some(node) = scope.node {
            for p in node.thin_pools() {
                let labels = Pool {
                    device_class: p.vg,
                    thinpool: p.pool,
                    node: node.id().to_owned(),
                };
                self.thin_data
                    .get_or_create(&labels)
                    .set(percent(p.status.data));
                self.thin_metadata
                    .get_or_create(&labels)
                    .set(percent(p.status.metadata));
            }
        }
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }

    /// Whether this host has joined the lockspace of served VG `name`, and whether it can be
    /// fenced, if the VG is shared and reads.
    fn lockspace(&self, backend: &Driver, name: &str) {
        let Ok(view) = backend.session().view(name) else {
            return;
        };
        if view.is_shared() {
            drop(view);
            let joined = backend.session().ready(name).is_ok();
            let vg = Vg {
                vg: name.to_owned(),
            };
            self.lockspace.get_or_create(&vg).set(i64::from(joined));
            if let Some(f) = backend.fencing() {
                let ready = f.can_fence().is_ok();
                self.fencing_ready.get_or_create(&vg).set(i64::from(ready));
                let required = i64::from(f.required());
                self.fencing_required.get_or_create(&vg).set(required);
            }
        }
    }

    /// The gauges of served VG `name` (none when it does not read now: logged).
    fn vg(&self, backend: &Driver, name: &str) {
        let vols = Volumes::new(backend.session(), name);
        let gauges = || -> Result<(), crate::volume::VolumeError> {
            let view = vols.view()?;
            let dc = DeviceClass {
                device_class: name.to_owned(),
            };
            let vg = Vg {
                vg: name.to_owned(),
            };
            self.vg_size
                .get_or_create(&dc)
                .set(gauge(view.bytes_of(view.extent_count()).0));
            self.vg_available
                .get_or_create(&dc)
                .set(gauge(view.bytes_of(view.free_count()).0));
            self.text
                .get_or_create(&vg)
                .set(gauge(view.metadata().used));
            for a in view.metadata_areas() {
                let at = Area {
                    vg: name.to_owned(),
                    device: a.device,
                };
                self.area_size.get_or_create(&at).set(gauge(a.size));
                self.area_limit.get_or_create(&at).set(gauge(a.max_text));
            }
            drop(view);
            for mode in [crate::volume::Mode::Linear, crate::volume::Mode::Thin] {
                let labels = VgMode {
                    vg: name.to_owned(),
                    mode: mode.as_str().to_owned(),
                };
                self.volumes.get_or_create(&labels).set(0);
            }
            for v in vols.list()? {
                self.volumes
                    .get_or_create(&VgMode {
                        vg: name.to_owned(),
                        mode: v.mode.as_str().to_owned(),
                    })
                    .inc();
            }
            let snapshots = vols.snapshots()?.len() as u64;
            self.snapshots.get_or_create(&vg).set(gauge(snapshots));
            let (n, bytes) = vols.wipe_backlog()?;
            self.wipe_volumes.get_or_create(&vg).set(gauge(n as u64));
            self.wipe_bytes.get_or_create(&vg).set(gauge(bytes));
            Ok(())
        };
        if let Err(e) = gauges() {
            tracing::warn!(vg = name, error = %e, "metrics of a VG");
        }
    }
}
