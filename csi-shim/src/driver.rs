//! The driver's state: one lvmeta session over the LUN, the VGs served, what is in flight,
//! the wiper's wake-up, metrics and fencing; every service and task works through it.

use std::sync::Arc;

use lvmeta::session::{Erase, Session};
use tonic::Status;

use crate::inflight::InFlight;
use crate::listing::{Listing, Listings};
use crate::params::{self};
use crate::volume::{Condition, Volume, VolumeError, Volumes};

/// The storage side of the driver: one lvmeta session over the LUN and the VGs served.
pub struct Driver {
    session: Session,
    vgs: Vec<String>,
    inflight: InFlight,
    holder_wait: std::time::Duration,
    /// How deleted volumes' extents are erased; `None`: not at all (the operator's choice).
    erase: Option<Erase>,
    /// This host's activations: a volume one of them maps is not deleted.
    host: Option<Arc<dyn lvmeta::activate::Backend>>,
    /// The wiper's wake-up (see [`crate::wiper`]).
    wiper: Arc<crate::wiper::Wiper>,
    /// This process runs the wiper (the controller does; node plugins need not).
    runs_wiper: bool,
    /// ListVolumes' snapshots of the served volumes.
    listings: Listings,
    /// When the last warning about a filling metadata area was logged.
    warned_full: crate::every::Every,
    /// The process's metrics (see [`crate::metrics`]).
    metrics: Arc<crate::metrics::Metrics>,
    /// Whether this host can be fenced (see [`crate::fencing`]); `None`: not asked.
    fencing: Option<Arc<crate::fencing::Fencing>>,
}

/// A metadata area fuller than this (percent) is warned about.
pub const METADATA_WARN_PERCENT: f64 = 80.0;

/// How often, at most, the driver warns about a filling metadata area.
const METADATA_WARN_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a controller call waits for the node where a thin pool is active to make the
/// change asked of it (see [`crate::volume::Request`]) before answering UNAVAILABLE.
pub const HOLDER_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

impl Driver {
    /// Serves the volumes of `vgs` through `session`.
    pub fn new(session: Session, vgs: Vec<String>) -> Self {
        Self {
            session,
            vgs,
            inflight: InFlight::default(),
            holder_wait: HOLDER_WAIT,
            erase: Some(Erase::ZeroOut),
            host: None,
            wiper: Arc::default(),
            runs_wiper: true,
            listings: Listings::default(),
            warned_full: crate::every::Every::default(),
            metrics: Arc::default(),
            fencing: None,
        }
    }

    /// Whether this host can be fenced, when asked (see [`crate::fencing`]).
    pub fn fencing(&self) -> Option<&Arc<crate::fencing::Fencing>> {
        self.fencing.as_ref()
    }

    /// The same, ready only where `fencing` allows shared VGs.
    pub fn with_fencing(mut self, fencing: Arc<crate::fencing::Fencing>) -> Self {
        self.fencing = Some(fencing);
        self
    }

    /// The same, recording into `metrics` (shared with the session's lease observer).
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The process's metrics.
    pub fn metrics(&self) -> &Arc<crate::metrics::Metrics> {
        &self.metrics
    }

    /// The same, running the wiper thread in this process or not (one wiper per cluster
    /// suffices: the controller's).
    pub fn with_wiper(mut self, run: bool) -> Self {
        self.runs_wiper = run;
        self
    }

    /// Does this process run the wiper?
    pub fn runs_wiper(&self) -> bool {
        self.runs_wiper
    }

    /// The same, erasing deleted volumes' extents `how` says; `None` frees them at once
    /// (the next volume there may read the deleted one's data: a deliberate driver flag).
    pub fn with_erase(mut self, how: Option<Erase>) -> Self {
        self.erase = how;
        self
    }

    /// The same, refusing to delete volumes that a device of `host` (this host's
    /// activations) maps.
    pub fn with_host_devices(mut self, host: Arc<dyn lvmeta::activate::Backend>) -> Self {
        self.host = Some(host);
        self
    }

    /// How deleted volumes' extents are erased (`None`: they are not).
    pub fn erase(&self) -> Option<Erase> {
        self.erase
    }

    /// This host's activations, when known.
    pub fn host_devices(&self) -> Option<&dyn lvmeta::activate::Backend> {
        self.host.as_deref()
    }

    /// The wiper's wake-up.
    pub fn wiper(&self) -> &Arc<crate::wiper::Wiper> {
        &self.wiper
    }

    /// The same, waiting `wait` (instead of [`HOLDER_WAIT`]) for a node to serve a request.
    pub fn with_holder_wait(mut self, wait: std::time::Duration) -> Self {
        self.holder_wait = wait;
        self
    }

    /// How long a controller call waits for a thin pool's holder.
    pub(crate) fn holder_wait(&self) -> std::time::Duration {
        self.holder_wait
    }

    /// ListVolumes' snapshots of the served volumes.
    pub(crate) fn listings(&self) -> &Listings {
        &self.listings
    }

    /// The lvmeta session over the LUN.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The per-volume in-flight guard shared by every service.
    pub fn inflight(&self) -> &InFlight {
        &self.inflight
    }

    /// The volume `vg/name` of a served VG, or NOT_FOUND.
    pub fn volume(&self, vg: &str, name: &str) -> Result<Volume, Status> {
        self.existing(vg, name)
    }

    /// The VGs served whose every PV this host sees.
    pub fn visible_vgs(&self) -> Vec<String> {
        let scan = self.session.scan();
        self.vgs
            .iter()
            .filter(|vg| {
                scan.vg(vg)
                    .is_ok_and(|sv| sv.pv_devices.iter().all(Option::is_some))
            })
            .cloned()
            .collect()
    }

    /// The VGs served.
    pub fn vgs(&self) -> &[String] {
        &self.vgs
    }

    /// Ok when every VG served can be changed now; else the first VG that cannot and why.
    pub fn ready(&self) -> Result<(), (String, lvmeta::Error)> {
        for vg in &self.vgs {
            self.session.ready(vg).map_err(|e| (vg.clone(), e))?;
        }
        Ok(())
    }

    /// `Err((vg, why))` when a served VG is shared and this host may not use it because it
    /// cannot be fenced (see [`crate::fencing::Fencing::admit`]).
    pub fn fenceable(&self) -> Result<(), (String, String)> {
        let Some(f) = &self.fencing else {
            return Ok(());
        };
        for vg in &self.vgs {
            if self.session.is_shared(vg).unwrap_or(false) {
                f.admit().map_err(|why| (vg.clone(), why))?;
            }
        }
        Ok(())
    }

    /// The volumes of `vg`, which must be served: deletions checked against this host's
    /// devices and erased as the driver was told.
    pub(crate) fn volumes(&self, vg: &str) -> Result<Volumes<'_>, Status> {
        if !self.vgs.iter().any(|v| v == vg) {
            return Err(Status::invalid_argument(format!(
                "VG {} is not served by this driver (served: {})",
                params::shown(vg),
                self.vgs.join(", ")
            )));
        }
        let mut v = Volumes::new(&self.session, vg);
        if self.erase.is_none() {
            v = v.without_erasure();
        }
        if let Some(h) = &self.host {
            v = v.on_host(h.as_ref());
        }
        Ok(v)
    }

    /// The volumes of the VG of a volume id: NOT_FOUND when that VG is not served (no volume
    /// of this driver can have that id).
    pub(crate) fn volumes_of_id(&self, vg: &str) -> Result<Volumes<'_>, Status> {
        self.volumes(vg)
            .map_err(|_| Status::not_found(format!("VG {} is not served", params::shown(vg))))
    }

    /// NOT_FOUND unless `vg` is served (no volume of this driver can have an id in another).
    pub(crate) fn served(&self, vg: &str) -> Result<(), Status> {
        self.volumes_of_id(vg).map(drop)
    }

    /// The volume `vg/name`, or NOT_FOUND.
    pub(crate) fn existing(&self, vg: &str, name: &str) -> Result<Volume, Status> {
        self.volumes_of_id(vg)?
            .get(name)?
            .ok_or_else(|| volume_not_found(vg, name))
    }

    /// The volume `vg/name` with its condition, or NOT_FOUND.
    pub(crate) fn existing_with_condition(
        &self,
        vg: &str,
        name: &str,
    ) -> Result<(Volume, Condition), Status> {
        self.volumes_of_id(vg)?
            .get_with_condition(name)?
            .ok_or_else(|| volume_not_found(vg, name))
    }

    /// The snapshot of every served volume for a new listing (see [`crate::listing`]).
    pub(crate) fn listing(&self) -> Result<Arc<Listing>, VolumeError> {
        let versions = self
            .vgs
            .iter()
            .map(|vg| Ok(Volumes::new(&self.session, vg).view()?.seqno))
            .collect::<Result<Vec<u32>, VolumeError>>()?;
        self.listings.current(versions, || self.all())
    }

    /// Logs a warning (once a minute at most) when the metadata areas of `vg` are more than
    /// [`METADATA_WARN_PERCENT`] full: a full area refuses new volumes.
    pub(crate) fn warn_if_filling(&self, vg: &str) {
        let Ok(view) = self.session.view(vg) else {
            return;
        };
        let m = view.metadata();
        if m.percent() <= METADATA_WARN_PERCENT {
            return;
        }
        if !self.warned_full.due(METADATA_WARN_EVERY) {
            return;
        }
        tracing::warn!(
            vg,
            used = m.used,
            max = m.max,
            percent = format!("{:.1}", m.percent()),
            "metadata area filling: new volumes are refused once it is full (docs/csi.md, \"Sizing the metadata area\")"
        );
    }

    /// Every volume of every VG served with its condition, ordered by id.
    pub(crate) fn all(&self) -> Result<Vec<(Volume, Condition)>, VolumeError> {
        let mut out = Vec::new();
        for vg in &self.vgs {
            out.extend(Volumes::new(&self.session, vg).list_with_condition()?);
        }
        out.sort_by(|(a, _), (b, _)| (&a.vg, &a.name).cmp(&(&b.vg, &b.name)));
        Ok(out)
    }
}

fn volume_not_found(vg: &str, name: &str) -> Status {
    Status::not_found(format!("volume {vg}/{name} not found"))
}
