//! The Identity service: who the plugin is, what it offers, whether it is ready.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::controller::Backend;
use crate::csi::identity_server::Identity;
use crate::csi::plugin_capability::{service, volume_expansion, Service, Type, VolumeExpansion};
use crate::csi::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, PluginCapability, ProbeRequest, ProbeResponse,
};

/// Identity over a backend (readiness comes from the VGs it serves).
pub struct IdentityService {
    backend: Arc<Backend>,
}

impl IdentityService {
    /// Identity for `backend`.
    pub fn new(backend: Arc<Backend>) -> Self {
        Self { backend }
    }
}

#[tonic::async_trait]
impl Identity for IdentityService {
    async fn get_plugin_info(
        &self,
        _: Request<GetPluginInfoRequest>,
    ) -> Result<Response<GetPluginInfoResponse>, Status> {
        Ok(Response::new(GetPluginInfoResponse {
            name: crate::DRIVER_NAME.to_owned(),
            vendor_version: env!("CARGO_PKG_VERSION").to_owned(),
            manifest: Default::default(),
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        let cap = |t| PluginCapability {
            r#type: Some(Type::Service(Service { r#type: t as i32 })),
        };
        let online = PluginCapability {
            r#type: Some(Type::VolumeExpansion(VolumeExpansion {
                r#type: volume_expansion::Type::Online as i32,
            })),
        };
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: vec![
                cap(service::Type::ControllerService),
                cap(service::Type::VolumeAccessibilityConstraints),
                online,
            ],
        }))
    }

    /// Ready when every VG served reads and, if shared, this host is in its lockspace;
    /// otherwise FAILED_PRECONDITION naming the VG and why.
    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        crate::status::blocking(&self.backend, |b| {
            b.ready().map_err(|(vg, e)| {
                Status::failed_precondition(format!("VG {vg} is not ready: {e}"))
            })
        })
        .await?;
        Ok(Response::new(ProbeResponse { ready: Some(true) }))
    }
}
