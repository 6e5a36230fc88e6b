//! The Controller service: volumes created, listed, grown and deleted through
//! [`crate::volume`], one VG commit per change.
//!
//! No ControllerPublish step: every node sees the LUN, so there is nothing to attach; a node
//! takes the LV's lease when it stages the volume (docs/csi.md, "Fencing and a dead node").

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::bounds;
use crate::csi::controller_server::Controller;
use crate::csi::controller_service_capability::{rpc, Rpc, Type as CapType};
use crate::csi::volume_capability::AccessType;
use crate::csi::{
    controller_get_volume_response, list_snapshots_response, list_volumes_response,
    validate_volume_capabilities_response, ControllerExpandVolumeRequest,
    ControllerExpandVolumeResponse, ControllerGetCapabilitiesRequest,
    ControllerGetCapabilitiesResponse, ControllerGetVolumeRequest, ControllerGetVolumeResponse,
    ControllerModifyVolumeRequest, ControllerModifyVolumeResponse, ControllerPublishVolumeRequest,
    ControllerPublishVolumeResponse, ControllerServiceCapability, ControllerUnpublishVolumeRequest,
    ControllerUnpublishVolumeResponse, CreateSnapshotRequest, CreateSnapshotResponse,
    CreateVolumeRequest, CreateVolumeResponse, DeleteSnapshotRequest, DeleteSnapshotResponse,
    DeleteVolumeRequest, DeleteVolumeResponse, GetCapacityRequest, GetCapacityResponse,
    GetSnapshotRequest, GetSnapshotResponse, ListSnapshotsRequest, ListSnapshotsResponse,
    ListVolumesRequest, ListVolumesResponse, ValidateVolumeCapabilitiesRequest,
    ValidateVolumeCapabilitiesResponse,
};
use crate::params::{self, Class};
use crate::status::from_volume;
use crate::volume::{Content, Mode, Request as VolumeRequest, Volumes};

mod convert;

use convert::*;

use crate::driver::Driver;

/// The Controller service over a [`Driver`].
pub struct ControllerService {
    backend: Arc<Driver>,
}

impl ControllerService {
    /// The service for `backend`.
    pub fn new(backend: Arc<Driver>) -> Self {
        Self { backend }
    }

    /// Runs `f` on a blocking thread (lvmeta does synchronous disk I/O and waits on leases).
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Driver) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        crate::status::blocking(&self.backend, f).await
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
                let _g = b.inflight().enter(&params::volume_id(&class.vg, &lv))?;
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
                        vols.through_holder(&r, b.holder_wait(), create)
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
            if !b.vgs().contains(&vg) {
                return Ok(false);
            }
            let _g = b.inflight().enter(&id)?;
            // A thin volume in a pool live on a node (a restore or clone beside its staged
            // source) is deleted by that node, as the pool's holder.
            let deleted = b
                .volumes_of_id(&vg)?
                .delete_through_holder(&name, b.holder_wait())?;
            if deleted {
                b.wiper().kick();
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
            false => self.backend.listings().resume(&req.starting_token)?,
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
                    None => b.vgs().to_vec(),
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
                let _g = b.inflight().enter(&params::volume_id(&vg, &lv))?;
                let r = VolumeRequest::Snapshot {
                    name: lv.clone(),
                    source: source.clone(),
                };
                vols.through_holder(&r, b.holder_wait(), |v| v.snapshot(&lv, &source))
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
            if !b.vgs().contains(&vg) {
                return Ok(false);
            }
            let _g = b.inflight().enter(&id)?;
            let r = VolumeRequest::DeleteSnapshot { name: name.clone() };
            let deleted = b
                .volumes_of_id(&vg)?
                .through_holder(&r, b.holder_wait(), |v| v.delete_snapshot(&name))?;
            b.wiper().kick();
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
                for vg in b.vgs() {
                    out.extend(Volumes::new(b.session(), vg).snapshots()?);
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
                let _g = b.inflight().enter(&id)?;
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
            let _g = b.inflight().enter(&id)?;
            b.volumes_of_id(&vg)?
                .retune(&name, &options, b.holder_wait())
                .map(drop)
                .map_err(from_volume)
        })
        .await?;
        Ok(Response::new(ControllerModifyVolumeResponse {}))
    }
}
