//! lvmeta: a pure-Rust reader (and, later, writer) of lvm2's on-disk metadata.
//!
//! Layers, bottom to top: [`crc`], [`dev`] (the only I/O), [`label`] and [`mda`] (fixed
//! binary headers, pure), [`text`] (generic config tree), [`model`] (typed VG), [`scan`]
//! (devices to VGs) and [`report`] (lvm2-style `pvs`/`vgs`/`lvs`).

pub mod crc;
pub mod dev;
mod error;
pub mod fuzzing;
pub mod label;
pub mod mda;
pub mod model;
pub mod names;
pub mod report;
pub mod scan;
pub mod text;
pub mod uuid;

pub use error::{Error, Result};
