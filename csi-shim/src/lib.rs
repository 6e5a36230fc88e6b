//! The CSI gRPC server that maps Kubernetes volume requests onto lvmeta.
//!
//! The crate exists so that the workspace has its final shape; the server arrives with the CSI
//! issue, once lvmeta can write metadata and take leases.
