//! Attaching a volume that another node serves: the kernel's NBD client, configured over
//! generic netlink (`netlink.rs`) with sockets this process connected and handshook
//! (`crate::nbd::go`).
//!
//! - No INDEX is ever asked for: the kernel picks a free device or makes one, so no race
//!   with udev holding a pre-made `/dev/nbdN`.
//! - Each device carries a backend identifier naming the volume, so it is found again after
//!   a restart (`/sys/block/nbdN/backend`) and a reconfiguration cannot reach another's.
//! - Dead sockets are replaced with RECONFIGURE, never by tearing the device down: I/O
//!   waits (up to the dead-connection timeout) instead of failing.

pub mod netlink;

use std::io;
use std::path::PathBuf;

/// The kernel NBD devices whose backend identifier is `identifier`.
pub fn devices_of(identifier: &str) -> io::Result<Vec<u32>> {
    let mut found = Vec::new();
    let entries = match std::fs::read_dir("/sys/block") {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let name = entry?.file_name();
        let Some(index) = name
            .to_str()
            .and_then(|n| n.strip_prefix("nbd"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let backend = std::fs::read_to_string(format!("/sys/block/nbd{index}/backend"));
        if backend.is_ok_and(|b| b.trim_end_matches('\n') == identifier) {
            found.push(index);
        }
    }
    found.sort_unstable();
    Ok(found)
}

/// The device node of NBD device `index`.
pub fn device_path(index: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nbd{index}"))
}
