//! lvmeta: a pure-Rust reader and writer of lvm2's on-disk metadata.
//!
//! Layers, bottom to top: [`units`] (sectors, bytes, extents), [`crc`], [`dev`] (the only I/O), [`label`], [`mda`] and [`layout`]
//! (fixed binary headers and where they go, pure), [`text`] (generic config tree), [`model`]
//! (typed VG and its validation), [`alloc`] and [`edit`] (what each verb changes, pure),
//! [`scan`] (devices to VGs), [`history`] (older copies), [`commit`] (the write protocol),
//! [`lockfile`] (lvm2's host-local locks), [`session`] (the verbs with their I/O, and the commit pipeline) and [`report`]
//! (lvm2-style `pvs`/`vgs`/`lvs`).

pub mod activate;
pub mod alloc;
pub mod claim;
pub mod commit;
pub mod crc;
pub mod dev;
pub mod edit;
mod error;
pub mod fuzzing;
pub mod history;
mod ioctl;
pub mod label;
pub mod layout;
pub mod lease;
pub mod lockfile;
pub mod mda;
pub mod model;
pub mod names;
pub mod report;
pub mod scan;
pub mod session;
pub mod signature;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod text;
pub mod units;
pub mod uuid;

pub use error::{Error, Result};
