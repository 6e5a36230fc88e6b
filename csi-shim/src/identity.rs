//! The Identity service: who the plugin is, what it offers, whether it is ready.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::csi::identity_server::Identity;
use crate::csi::plugin_capability::{service, volume_expansion, Service, Type, VolumeExpansion};
use crate::csi::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginInfoRequest,
    GetPluginInfoResponse, PluginCapability, ProbeRequest, ProbeResponse,
};
use crate::driver::Driver;

/// Identity over a backend (readiness comes from the VGs it serves).
pub struct IdentityService {
    backend: Arc<Driver>,
}

impl IdentityService {
    /// Identity for `backend`.
    pub fn new(backend: Arc<Driver>) -> Self {
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

    /// Ready when every VG served reads and, if shared, this host is in its lockspace and
    /// can be fenced (`ready: false` naming why in the log otherwise, see
    /// [`crate::fencing`]);
    /// `ready: false` while a lockspace is not joined yet (a join takes tens of seconds: a
    /// liveness check must not take it for a failure); FAILED_PRECONDITION naming the VG and
    /// why for anything else.
    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        let ready = crate::status::blocking(&self.backend, |b| match b.ready() {
            Ok(()) => match b.fenceable() {
                Ok(()) => Ok(true),
                Err((vg, why)) => {
                    tracing::warn!(vg, reason = %why, "not ready: this host cannot be fenced");
                    Ok(false)
                }
            },
            Err((vg, lvmeta::Error::Lease(e @ lvmeta::lease::LeaseError::NotJoined { .. }))) => {
                tracing::info!(vg, reason = %e, "not ready");
                Ok(false)
            }
            Err((vg, e)) => Err(Status::failed_precondition(format!(
                "VG {vg} is not ready: {e}"
            ))),
        })
        .await?;
        Ok(Response::new(ProbeResponse { ready: Some(ready) }))
    }
}
