//! The Controller service: volumes created, listed, grown and deleted through
//! [`crate::volume`], one VG commit per change.
//!
//! No ControllerPublish step: every node sees the LUN, so there is nothing to attach; a node
//! takes the LV's lease when it stages the volume (docs/csi.md, "Fencing and a dead node").

use std::sync::Arc;

use lvmeta::session::{Erase, Session};
use tonic::{Request, Response, Status};

use crate::bounds;
use crate::csi::controller_server::Controller;
use crate::csi::controller_service_capability::{rpc, Rpc, Type as CapType};
use crate::csi::volume_capability::AccessType;
use crate::csi::{
    controller_get_volume_response, list_snapshots_response, list_volumes_response,
    validate_volume_capabilities_response, volume_content_source, CapacityRange,
    ControllerExpandVolumeRequest, ControllerExpandVolumeResponse,
    ControllerGetCapabilitiesRequest, ControllerGetCapabilitiesResponse,
    ControllerGetVolumeRequest, ControllerGetVolumeResponse, ControllerModifyVolumeRequest,
    ControllerModifyVolumeResponse, ControllerPublishVolumeRequest,
    ControllerPublishVolumeResponse, ControllerServiceCapability, ControllerUnpublishVolumeRequest,
    ControllerUnpublishVolumeResponse, CreateSnapshotRequest, CreateSnapshotResponse,
    CreateVolumeRequest, CreateVolumeResponse, DeleteSnapshotRequest, DeleteSnapshotResponse,
    DeleteVolumeRequest, DeleteVolumeResponse, GetCapacityRequest, GetCapacityResponse,
    GetSnapshotRequest, GetSnapshotResponse, ListSnapshotsRequest, ListSnapshotsResponse,
    ListVolumesRequest, ListVolumesResponse, ValidateVolumeCapabilitiesRequest,
    ValidateVolumeCapabilitiesResponse, VolumeContentSource,
};
use crate::inflight::InFlight;
use crate::listing::{Listing, Listings};
use crate::params::{self, Class};
use crate::status::from_volume;
use crate::volume::{
    Condition, Content, Mode, Request as VolumeRequest, SizeRange, Snapshot, Volume, VolumeError,
    Volumes,
};

/// The storage side of the driver: one lvmeta session over the LUN and the VGs served.
pub struct Backend {
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
    warned_full: std::sync::Mutex<Option<std::time::Instant>>,
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

impl Backend {
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
            warned_full: std::sync::Mutex::new(None),
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
    fn volumes(&self, vg: &str) -> Result<Volumes<'_>, Status> {
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
    fn volumes_of_id(&self, vg: &str) -> Result<Volumes<'_>, Status> {
        self.volumes(vg)
            .map_err(|_| Status::not_found(format!("VG {} is not served", params::shown(vg))))
    }

    /// The volume `vg/name`, or NOT_FOUND.
    fn existing(&self, vg: &str, name: &str) -> Result<Volume, Status> {
        self.volumes_of_id(vg)?
            .get(name)?
            .ok_or_else(|| volume_not_found(vg, name))
    }

    /// The volume `vg/name` with its condition, or NOT_FOUND.
    fn existing_with_condition(&self, vg: &str, name: &str) -> Result<(Volume, Condition), Status> {
        self.volumes_of_id(vg)?
            .get_with_condition(name)?
            .ok_or_else(|| volume_not_found(vg, name))
    }

    /// The snapshot of every served volume for a new listing (see [`crate::listing`]).
    fn listing(&self) -> Result<Arc<Listing>, VolumeError> {
        let versions = self
            .vgs
            .iter()
            .map(|vg| Ok(Volumes::new(&self.session, vg).view()?.seqno))
            .collect::<Result<Vec<u32>, VolumeError>>()?;
        self.listings.current(versions, || self.all())
    }

    /// Logs a warning (once a minute at most) when the metadata areas of `vg` are more than
    /// [`METADATA_WARN_PERCENT`] full: a full area refuses new volumes.
    fn warn_if_filling(&self, vg: &str) {
        let Ok(view) = self.session.view(vg) else {
            return;
        };
        let m = view.metadata();
        if m.percent() <= METADATA_WARN_PERCENT {
            return;
        }
        let mut last = self.warned_full.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < METADATA_WARN_EVERY) {
            return;
        }
        *last = Some(std::time::Instant::now());
        tracing::warn!(
            vg,
            used = m.used,
            max = m.max,
            percent = format!("{:.1}", m.percent()),
            "metadata area filling: new volumes are refused once it is full (docs/csi.md, \"Sizing the metadata area\")"
        );
    }

    /// Every volume of every VG served with its condition, ordered by id.
    fn all(&self) -> Result<Vec<(Volume, Condition)>, VolumeError> {
        let mut out = Vec::new();
        for vg in &self.vgs {
            out.extend(Volumes::new(&self.session, vg).list_with_condition()?);
        }
        out.sort_by(|(a, _), (b, _)| (&a.vg, &a.name).cmp(&(&b.vg, &b.name)));
        Ok(out)
    }
}

/// The Controller service over a [`Backend`].
pub struct ControllerService {
    backend: Arc<Backend>,
}

impl ControllerService {
    /// The service for `backend`.
    pub fn new(backend: Arc<Backend>) -> Self {
        Self { backend }
    }

    /// Runs `f` on a blocking thread (lvmeta does synchronous disk I/O and waits on leases).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Backend) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        crate::status::blocking(&self.backend, f).await
    }
}

fn size_range(r: Option<&CapacityRange>) -> Result<SizeRange, Status> {
    let Some(r) = r else {
        return Ok(SizeRange::default());
    };
    let bytes = |v: i64, what: &str| {
        u64::try_from(v).map_err(|_| Status::invalid_argument(format!("{what} is negative")))
    };
    Ok(SizeRange {
        required: bytes(r.required_bytes, "required_bytes")?,
        limit: bytes(r.limit_bytes, "limit_bytes")?,
    })
}

fn volume_not_found(vg: &str, name: &str) -> Status {
    Status::not_found(format!("volume {vg}/{name} not found"))
}

fn csi_condition(c: &Condition) -> crate::csi::VolumeCondition {
    crate::csi::VolumeCondition {
        abnormal: c.abnormal,
        message: c.message.clone(),
    }
}

fn csi_volume(v: &Volume) -> crate::csi::Volume {
    crate::csi::Volume {
        capacity_bytes: i64::try_from(v.bytes).unwrap_or(i64::MAX),
        volume_id: params::volume_id(&v.vg, &v.name),
        volume_context: params::context(&v.vg, v.mode),
        accessible_topology: params::topology(&v.vg).into_iter().collect(),
        ..Default::default()
    }
}

/// A content source of a new volume, by name in its VG.
enum Source {
    Snapshot(String),
    Volume(String),
}

/// The source of a CreateVolume: it must be in the VG the volume is made in.
fn content_source(src: Option<&VolumeContentSource>, vg: &str) -> Result<Option<Source>, Status> {
    let Some(t) = src.and_then(|s| s.r#type.as_ref()) else {
        return Ok(None);
    };
    let (id, snapshot) = match t {
        volume_content_source::Type::Snapshot(s) => (&s.snapshot_id, true),
        volume_content_source::Type::Volume(v) => (&v.volume_id, false),
    };
    let (src_vg, name) = params::parse_volume_id(id)?;
    if src_vg != vg {
        return Err(Status::invalid_argument(format!(
            "the source {} is in VG {src_vg}, the new volume in VG {vg}: sources must be in the same VG",
            params::shown(id)
        )));
    }
    Ok(Some(if snapshot {
        Source::Snapshot(name)
    } else {
        Source::Volume(name)
    }))
}

fn csi_snapshot(s: &Snapshot) -> crate::csi::Snapshot {
    crate::csi::Snapshot {
        size_bytes: i64::try_from(s.bytes).unwrap_or(i64::MAX),
        snapshot_id: params::volume_id(&s.vg, &s.name),
        source_volume_id: params::volume_id(&s.vg, &s.source),
        creation_time: s.created.map(|t| prost_types::Timestamp {
            seconds: i64::try_from(t).unwrap_or(i64::MAX),
            nanos: 0,
        }),
        // Thin snapshots are complete the moment they are committed.
        ready_to_use: true,
        group_snapshot_id: String::new(),
    }
}

/// One page of `len` entries: the range to return and the next token (empty at the end).
/// A token that is not a position inside the list is ABORTED, as the spec asks.
fn page(
    len: usize,
    max_entries: i32,
    token: &str,
) -> Result<(std::ops::Range<usize>, String), Status> {
    let max = usize::try_from(max_entries)
        .map_err(|_| Status::invalid_argument("max_entries is negative"))?;
    let start: usize = if token.is_empty() {
        0
    } else {
        token.parse().map_err(|_| {
            Status::aborted(format!(
                "starting_token {} is not valid",
                params::shown(token)
            ))
        })?
    };
    if start > len {
        return Err(Status::aborted(format!(
            "starting_token {start} is past the end ({len} entries)"
        )));
    }
    let end = if max == 0 {
        len
    } else {
        (start + max).min(len)
    };
    let next = if end < len {
        end.to_string()
    } else {
        String::new()
    };
    Ok((start..end, next))
}

fn required(field: &str, value: &str) -> Result<(), Status> {
    if value.is_empty() {
        Err(Status::invalid_argument(format!("{field} is required")))
    } else {
        Ok(())
    }
}

#[tonic::async_trait]
impl Controller for ControllerService {
    async fn create_volume(
        &self,
        request: Request<CreateVolumeRequest>,
    ) -> Result<Response<CreateVolumeResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        params::check_name("name", &req.name)?;
        let class = Class::parse(&req.parameters, &req.mutable_parameters)?;
        params::check_capabilities(&req.volume_capabilities, class.mode)
            .map_err(Status::invalid_argument)?;
        let source = content_source(req.volume_content_source.as_ref(), &class.vg)?;
        let size = size_range(req.capacity_range.as_ref())?;
        if !params::topology_allows(req.accessibility_requirements.as_ref(), &class.vg) {
            return Err(Status::resource_exhausted(format!(
                "VG {} is not reachable in the topology asked for (segment {}={})",
                class.vg,
                params::topology_key(&class.vg)
                    .unwrap_or_else(|| "<none: VG name is not a label>".into()),
                params::TOPOLOGY_VALUE
            )));
        }
        tracing::info!(name = %params::shown(&req.name), vg = %class.vg, mode = class.mode.as_str(), required = size.required, "CreateVolume");
        let v = self
            .blocking(move |b| {
                let vols = b.volumes(&class.vg)?;
                let lv = params::lv_name(&class.vg, &req.name);
                let _g = b.inflight.enter(&params::volume_id(&class.vg, &lv))?;
                let content = match &source {
                    None => Content::Empty,
                    Some(Source::Snapshot(n)) => Content::Snapshot(n),
                    Some(Source::Volume(n)) => Content::Volume(n),
                };
                let create =
                    |v: &Volumes<'_>| v.create_from(&lv, class.mode, size, content, &class.options);
                let v = match (&source, class.mode) {
                    // A thin copy goes into the source's pool: its node makes it, if active.
                    (Some(Source::Snapshot(src) | Source::Volume(src)), Mode::Thin) => {
                        let r = VolumeRequest::Copy {
                            name: lv.clone(),
                            source: src.clone(),
                            from_snapshot: matches!(source, Some(Source::Snapshot(_))),
                            size,
                        };
                        vols.through_holder(&r, b.holder_wait, create)
                    }
                    _ => create(&vols),
                }?;
                b.warn_if_filling(&class.vg);
                Ok(v)
            })
            .await?;
        let mut volume = csi_volume(&v);
        volume.content_source = req.volume_content_source;
        Ok(Response::new(CreateVolumeResponse {
            volume: Some(volume),
        }))
    }

    async fn delete_volume(
        &self,
        request: Request<DeleteVolumeRequest>,
    ) -> Result<Response<DeleteVolumeResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let id = req.volume_id;
        let (vg, name) = match params::parse_volume_id(&id) {
            Ok(x) => x,
            // An id this driver cannot have made names no volume: deleting it succeeds.
            Err(s) if s.code() == tonic::Code::NotFound => {
                return Ok(Response::new(DeleteVolumeResponse {}))
            }
            Err(s) => return Err(s),
        };
        tracing::info!(volume_id = %params::shown(&id), "DeleteVolume");
        self.blocking(move |b| {
            if !b.vgs.contains(&vg) {
                return Ok(false);
            }
            let _g = b.inflight.enter(&id)?;
            // A thin volume in a pool live on a node (a restore or clone beside its staged
            // source) is deleted by that node, as the pool's holder.
            let deleted = b
                .volumes_of_id(&vg)?
                .delete_through_holder(&name, b.holder_wait)?;
            if deleted {
                b.wiper.kick();
            }
            Ok(deleted)
        })
        .await?;
        Ok(Response::new(DeleteVolumeResponse {}))
    }

    async fn controller_publish_volume(
        &self,
        _: Request<ControllerPublishVolumeRequest>,
    ) -> Result<Response<ControllerPublishVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "no attach step: every node sees the LUN (PUBLISH_UNPUBLISH_VOLUME is not offered)",
        ))
    }

    async fn controller_unpublish_volume(
        &self,
        _: Request<ControllerUnpublishVolumeRequest>,
    ) -> Result<Response<ControllerUnpublishVolumeResponse>, Status> {
        Err(Status::unimplemented(
            "no attach step: every node sees the LUN (PUBLISH_UNPUBLISH_VOLUME is not offered)",
        ))
    }

    async fn validate_volume_capabilities(
        &self,
        request: Request<ValidateVolumeCapabilitiesRequest>,
    ) -> Result<Response<ValidateVolumeCapabilitiesResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        required("volume_id", &req.volume_id)?;
        if req.volume_capabilities.is_empty() {
            return Err(Status::invalid_argument("volume_capabilities is required"));
        }
        let (vg, name) = params::parse_volume_id(&req.volume_id)?;
        let v = self.blocking(move |b| b.existing(&vg, &name)).await?;
        let asked = params::parse_mutable(&req.mutable_parameters)?;
        if !asked.is_empty() && v.mode == Mode::Linear {
            return Ok(Response::new(ValidateVolumeCapabilitiesResponse {
                confirmed: None,
                message: params::linear_has_no_options().message().to_owned(),
            }));
        }
        if !req.parameters.is_empty() {
            let class = Class::parse(&req.parameters, &req.mutable_parameters)?;
            if class.vg != v.vg || class.mode != v.mode {
                return Ok(Response::new(ValidateVolumeCapabilitiesResponse {
                    confirmed: None,
                    message: format!(
                        "the volume is {} in VG {}, the parameters ask for {} in VG {}",
                        v.mode.as_str(),
                        v.vg,
                        class.mode.as_str(),
                        class.vg
                    ),
                }));
            }
        }
        Ok(Response::new(
            match params::check_capabilities(&req.volume_capabilities, v.mode) {
                Ok(()) => ValidateVolumeCapabilitiesResponse {
                    confirmed: Some(validate_volume_capabilities_response::Confirmed {
                        volume_context: req.volume_context,
                        volume_capabilities: req.volume_capabilities,
                        parameters: req.parameters,
                        mutable_parameters: req.mutable_parameters,
                    }),
                    message: String::new(),
                },
                Err(why) => ValidateVolumeCapabilitiesResponse {
                    confirmed: None,
                    message: why,
                },
            },
        ))
    }

    async fn list_volumes(
        &self,
        request: Request<ListVolumesRequest>,
    ) -> Result<Response<ListVolumesResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let (listing, start) = match req.starting_token.is_empty() {
            true => (
                self.blocking(|b| b.listing().map_err(from_volume)).await?,
                0,
            ),
            false => self.backend.listings.resume(&req.starting_token)?,
        };
        let (range, next_token) = listing.page(start, req.max_entries)?;
        let entries = listing.entries[range]
            .iter()
            .map(|(v, c)| list_volumes_response::Entry {
                volume: Some(csi_volume(v)),
                status: Some(list_volumes_response::VolumeStatus {
                    published_node_ids: Vec::new(),
                    volume_condition: Some(csi_condition(c)),
                }),
            })
            .collect();
        Ok(Response::new(ListVolumesResponse {
            entries,
            next_token,
        }))
    }

    async fn get_capacity(
        &self,
        request: Request<GetCapacityRequest>,
    ) -> Result<Response<GetCapacityResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let class = if req.parameters.is_empty() {
            None
        } else {
            Some(Class::parse(&req.parameters, &Default::default())?)
        };
        if let Some(c) = &class {
            if params::check_capabilities(&req.volume_capabilities, c.mode).is_err()
                && !req.volume_capabilities.is_empty()
            {
                return Ok(Response::new(GetCapacityResponse::default()));
            }
        }
        let topology = req.accessible_topology;
        let (free, largest) = self
            .blocking(move |b| {
                let mut vgs: Vec<String> = match &class {
                    Some(c) => vec![c.vg.clone()],
                    None => b.vgs.clone(),
                };
                // Only the VGs whose segment is the one asked about.
                if let Some(t) = &topology {
                    vgs.retain(|vg| {
                        params::topology_key(vg).is_some_and(|k| {
                            t.segments.get(&k).map(String::as_str) == Some(params::TOPOLOGY_VALUE)
                        })
                    });
                }
                let (mut sum, mut largest) = (0u64, 0u64);
                // A VG whose metadata cannot take one more volume of the mode offers none.
                let mode = class.as_ref().map_or(Mode::Linear, |c| c.mode);
                for vg in vgs {
                    let f = b.volumes(&vg)?.room(mode)?;
                    sum += f;
                    largest = largest.max(f);
                }
                Ok((sum, largest))
            })
            .await?;
        let i = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        Ok(Response::new(GetCapacityResponse {
            available_capacity: i(free),
            maximum_volume_size: Some(i(largest)),
            ..Default::default()
        }))
    }

    async fn controller_get_capabilities(
        &self,
        _: Request<ControllerGetCapabilitiesRequest>,
    ) -> Result<Response<ControllerGetCapabilitiesResponse>, Status> {
        let caps = [
            rpc::Type::CreateDeleteVolume,
            rpc::Type::ListVolumes,
            rpc::Type::GetCapacity,
            rpc::Type::ExpandVolume,
            rpc::Type::GetVolume,
            rpc::Type::SingleNodeMultiWriter,
            rpc::Type::CreateDeleteSnapshot,
            rpc::Type::ListSnapshots,
            rpc::Type::GetSnapshot,
            rpc::Type::CloneVolume,
            rpc::Type::ModifyVolume,
            rpc::Type::VolumeCondition,
        ];
        Ok(Response::new(ControllerGetCapabilitiesResponse {
            capabilities: caps
                .iter()
                .map(|t| ControllerServiceCapability {
                    r#type: Some(CapType::Rpc(Rpc { r#type: *t as i32 })),
                })
                .collect(),
        }))
    }

    async fn create_snapshot(
        &self,
        request: Request<CreateSnapshotRequest>,
    ) -> Result<Response<CreateSnapshotResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        params::check_name("name", &req.name)?;
        required("source_volume_id", &req.source_volume_id)?;
        params::check_snapshot_parameters(&req.parameters)?;
        let (vg, source) = params::parse_volume_id(&req.source_volume_id)?;
        tracing::info!(name = %params::shown(&req.name), source = %params::shown(&req.source_volume_id), "CreateSnapshot");
        let snap = self
            .blocking(move |b| {
                b.existing(&vg, &source)?;
                let vols = b.volumes_of_id(&vg)?;
                let lv = params::lv_name(&vg, &req.name);
                let _g = b.inflight.enter(&params::volume_id(&vg, &lv))?;
                let r = VolumeRequest::Snapshot {
                    name: lv.clone(),
                    source: source.clone(),
                };
                vols.through_holder(&r, b.holder_wait, |v| v.snapshot(&lv, &source))
                    .map_err(from_volume)
            })
            .await?;
        Ok(Response::new(CreateSnapshotResponse {
            snapshot: Some(csi_snapshot(&snap)),
        }))
    }

    async fn delete_snapshot(
        &self,
        request: Request<DeleteSnapshotRequest>,
    ) -> Result<Response<DeleteSnapshotResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let id = req.snapshot_id;
        required("snapshot_id", &id)?;
        let Ok((vg, name)) = params::parse_volume_id(&id) else {
            // An id this driver cannot have made names no snapshot: deleting it succeeds.
            return Ok(Response::new(DeleteSnapshotResponse {}));
        };
        tracing::info!(snapshot_id = %params::shown(&id), "DeleteSnapshot");
        self.blocking(move |b| {
            if !b.vgs.contains(&vg) {
                return Ok(false);
            }
            let _g = b.inflight.enter(&id)?;
            let r = VolumeRequest::DeleteSnapshot { name: name.clone() };
            let deleted = b
                .volumes_of_id(&vg)?
                .through_holder(&r, b.holder_wait, |v| v.delete_snapshot(&name))?;
            b.wiper.kick();
            Ok(deleted)
        })
        .await?;
        Ok(Response::new(DeleteSnapshotResponse {}))
    }

    async fn list_snapshots(
        &self,
        request: Request<ListSnapshotsRequest>,
    ) -> Result<Response<ListSnapshotsResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let (snapshot_id, source_id) = (req.snapshot_id.clone(), req.source_volume_id.clone());
        let all = self
            .blocking(move |b| {
                let mut out = Vec::new();
                for vg in &b.vgs {
                    out.extend(Volumes::new(&b.session, vg).snapshots()?);
                }
                out.retain(|s| {
                    (snapshot_id.is_empty() || params::volume_id(&s.vg, &s.name) == snapshot_id)
                        && (source_id.is_empty()
                            || params::volume_id(&s.vg, &s.source) == source_id)
                });
                out.sort_by(|a, b| (&a.vg, &a.name).cmp(&(&b.vg, &b.name)));
                Ok(out)
            })
            .await?;
        let (range, next_token) = page(all.len(), req.max_entries, &req.starting_token)?;
        Ok(Response::new(ListSnapshotsResponse {
            entries: all[range]
                .iter()
                .map(|s| list_snapshots_response::Entry {
                    snapshot: Some(csi_snapshot(s)),
                })
                .collect(),
            next_token,
        }))
    }

    async fn get_snapshot(
        &self,
        request: Request<GetSnapshotRequest>,
    ) -> Result<Response<GetSnapshotResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let id = req.snapshot_id;
        required("snapshot_id", &id)?;
        let (vg, name) = params::parse_volume_id(&id)?;
        let snap = self
            .blocking(move |b| {
                b.volumes_of_id(&vg)?
                    .get_snapshot(&name)?
                    .ok_or_else(|| Status::not_found(format!("snapshot {vg}/{name} not found")))
            })
            .await?;
        Ok(Response::new(GetSnapshotResponse {
            snapshot: Some(csi_snapshot(&snap)),
        }))
    }

    async fn controller_expand_volume(
        &self,
        request: Request<ControllerExpandVolumeRequest>,
    ) -> Result<Response<ControllerExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        required("volume_id", &req.volume_id)?;
        let size = size_range(req.capacity_range.as_ref())?;
        if size.required == 0 {
            return Err(Status::invalid_argument(
                "capacity_range.required_bytes is required",
            ));
        }
        let (vg, name) = params::parse_volume_id(&req.volume_id)?;
        // A filesystem grows on the node afterwards; a block volume is done here.
        let node_expansion_required = matches!(
            req.volume_capability
                .as_ref()
                .and_then(|c| c.access_type.as_ref()),
            Some(AccessType::Mount(_))
        );
        tracing::info!(volume_id = %params::shown(&req.volume_id), required = size.required, "ControllerExpandVolume");
        let id = req.volume_id.clone();
        let v = self
            .blocking(move |b| {
                let vols = b.volumes_of_id(&vg)?;
                let _g = b.inflight.enter(&id)?;
                vols.expand(&name, size).map_err(from_volume)
            })
            .await?;
        Ok(Response::new(ControllerExpandVolumeResponse {
            capacity_bytes: i64::try_from(v.bytes).unwrap_or(i64::MAX),
            node_expansion_required,
        }))
    }

    async fn controller_get_volume(
        &self,
        request: Request<ControllerGetVolumeRequest>,
    ) -> Result<Response<ControllerGetVolumeResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        let id = req.volume_id;
        required("volume_id", &id)?;
        let (vg, name) = params::parse_volume_id(&id)?;
        let (v, c) = self
            .blocking(move |b| b.existing_with_condition(&vg, &name))
            .await?;
        Ok(Response::new(ControllerGetVolumeResponse {
            volume: Some(csi_volume(&v)),
            status: Some(controller_get_volume_response::VolumeStatus {
                published_node_ids: Vec::new(),
                volume_condition: Some(csi_condition(&c)),
            }),
        }))
    }

    async fn controller_modify_volume(
        &self,
        request: Request<ControllerModifyVolumeRequest>,
    ) -> Result<Response<ControllerModifyVolumeResponse>, Status> {
        let req = request.into_inner();
        bounds::check(&req)?;
        required("volume_id", &req.volume_id)?;
        let options = params::parse_mutable(&req.mutable_parameters)?;
        let (vg, name) = params::parse_volume_id(&req.volume_id)?;
        tracing::info!(volume_id = %params::shown(&req.volume_id), zero = ?options.zero, discards = ?options.discards, "ControllerModifyVolume");
        let id = req.volume_id.clone();
        self.blocking(move |b| {
            // Nothing to change is no error, on any volume: a class may have no parameters.
            if options.is_empty() {
                return b.existing(&vg, &name).map(drop);
            }
            let _g = b.inflight.enter(&id)?;
            b.volumes_of_id(&vg)?
                .retune(&name, &options, b.holder_wait)
                .map(drop)
                .map_err(from_volume)
        })
        .await?;
        Ok(Response::new(ControllerModifyVolumeResponse {}))
    }
}
