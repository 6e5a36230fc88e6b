//! The gRPC face of the Node service: each call logged (request strings escaped and cut
//! short, see [`crate::params::shown`]) and run on a blocking thread.

use std::collections::HashMap;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::Node;
use crate::csi::node_server::Node as NodeRpc;
use crate::csi::node_service_capability::{rpc, Rpc, Type as CapType};
use crate::csi::{
    NodeExpandVolumeRequest, NodeExpandVolumeResponse, NodeGetCapabilitiesRequest,
    NodeGetCapabilitiesResponse, NodeGetInfoRequest, NodeGetInfoResponse,
    NodeGetVolumeStatsRequest, NodeGetVolumeStatsResponse, NodePublishVolumeRequest,
    NodePublishVolumeResponse, NodeServiceCapability, NodeStageVolumeRequest,
    NodeStageVolumeResponse, NodeUnpublishVolumeRequest, NodeUnpublishVolumeResponse,
    NodeUnstageVolumeRequest, NodeUnstageVolumeResponse,
};
use crate::params::{self, shown};

/// The gRPC face of [`Node`].
pub struct NodeService {
    node: Arc<Node>,
}

impl NodeService {
    /// The service over `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Self { node }
    }

    /// Runs `f` on a blocking thread.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Node) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        crate::status::blocking(&self.node, f).await
    }
}

#[tonic::async_trait]
impl NodeRpc for NodeService {
    async fn node_stage_volume(
        &self,
        request: Request<NodeStageVolumeRequest>,
    ) -> Result<Response<NodeStageVolumeResponse>, Status> {
        let req = request.into_inner();
        crate::bounds::check(&req)?;
        tracing::info!(volume_id = %shown(&req.volume_id), staging = %shown(&req.staging_target_path), "NodeStageVolume");
        self.blocking(move |n| n.stage(req)).await?;
        Ok(Response::new(NodeStageVolumeResponse {}))
    }

    async fn node_unstage_volume(
        &self,
        request: Request<NodeUnstageVolumeRequest>,
    ) -> Result<Response<NodeUnstageVolumeResponse>, Status> {
        let req = request.into_inner();
        crate::bounds::check(&req)?;
        tracing::info!(volume_id = %shown(&req.volume_id), staging = %shown(&req.staging_target_path), "NodeUnstageVolume");
        self.blocking(move |n| n.unstage(req)).await?;
        Ok(Response::new(NodeUnstageVolumeResponse {}))
    }

    async fn node_publish_volume(
        &self,
        request: Request<NodePublishVolumeRequest>,
    ) -> Result<Response<NodePublishVolumeResponse>, Status> {
        let req = request.into_inner();
        crate::bounds::check(&req)?;
        tracing::info!(volume_id = %shown(&req.volume_id), target = %shown(&req.target_path), "NodePublishVolume");
        self.blocking(move |n| n.publish(req)).await?;
        Ok(Response::new(NodePublishVolumeResponse {}))
    }

    async fn node_unpublish_volume(
        &self,
        request: Request<NodeUnpublishVolumeRequest>,
    ) -> Result<Response<NodeUnpublishVolumeResponse>, Status> {
        let req = request.into_inner();
        crate::bounds::check(&req)?;
        tracing::info!(volume_id = %shown(&req.volume_id), target = %shown(&req.target_path), "NodeUnpublishVolume");
        self.blocking(move |n| n.unpublish(req)).await?;
        Ok(Response::new(NodeUnpublishVolumeResponse {}))
    }

    async fn node_get_volume_stats(
        &self,
        request: Request<NodeGetVolumeStatsRequest>,
    ) -> Result<Response<NodeGetVolumeStatsResponse>, Status> {
        let req = request.into_inner();
        crate::bounds::check(&req)?;
        Ok(Response::new(self.blocking(move |n| n.stats(req)).await?))
    }

    async fn node_expand_volume(
        &self,
        request: Request<NodeExpandVolumeRequest>,
    ) -> Result<Response<NodeExpandVolumeResponse>, Status> {
        let req = request.into_inner();
        crate::bounds::check(&req)?;
        tracing::info!(volume_id = %shown(&req.volume_id), "NodeExpandVolume");
        let capacity_bytes = self.blocking(move |n| n.expand(req)).await?;
        Ok(Response::new(NodeExpandVolumeResponse { capacity_bytes }))
    }

    async fn node_get_capabilities(
        &self,
        _: Request<NodeGetCapabilitiesRequest>,
    ) -> Result<Response<NodeGetCapabilitiesResponse>, Status> {
        let caps = [
            rpc::Type::StageUnstageVolume,
            rpc::Type::GetVolumeStats,
            rpc::Type::ExpandVolume,
            rpc::Type::VolumeCondition,
            rpc::Type::SingleNodeMultiWriter,
            rpc::Type::VolumeMountGroup,
        ];
        Ok(Response::new(NodeGetCapabilitiesResponse {
            capabilities: caps
                .iter()
                .map(|t| NodeServiceCapability {
                    r#type: Some(CapType::Rpc(Rpc { r#type: *t as i32 })),
                })
                .collect(),
        }))
    }

    async fn node_get_info(
        &self,
        _: Request<NodeGetInfoRequest>,
    ) -> Result<Response<NodeGetInfoResponse>, Status> {
        let vgs = self.blocking(|n| Ok(n.backend.visible_vgs())).await?;
        let mut segments = HashMap::new();
        for vg in vgs {
            if let Some(k) = params::topology_key(&vg) {
                segments.insert(k, params::TOPOLOGY_VALUE.to_owned());
            }
        }
        Ok(Response::new(NodeGetInfoResponse {
            node_id: self.node.config.node_id.clone(),
            max_volumes_per_node: self.node.config.max_volumes,
            // One segment: every VG served whose PVs this node sees.
            accessible_topology: Some(crate::csi::Topology { segments }),
        }))
    }
}
