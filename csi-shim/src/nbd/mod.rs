//! A small NBD server: a thin volume of a pool active on this node served to the other
//! nodes that stage it (see docs/csi.md). `proto.rs` the messages, pure; `server.rs` one
//! connection.

pub mod proto;
pub mod server;

use lvmeta::dev::BlockDevice;

/// What a client is given: a device, and whether its writes are refused.
pub struct Export {
    /// The device (the thin LV's, on this node).
    pub dev: Box<dyn BlockDevice>,
    /// Writes, trims and zeroes are refused (EPERM).
    pub read_only: bool,
}
