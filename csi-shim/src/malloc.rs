//! The allocator settings csi-shim runs with: glibc's malloc, tuned so that a large VG's
//! transient buffers go back to the kernel when freed and concurrent requests do not each
//! grow an arena of their own (measured in docs/benchmarks.md, "Memory: one text, in
//! place; glibc's malloc tuned (2026-12-05, later)"):
//! - `arena_max=2`: two arenas for all threads (glibc's default is eight per core, and each
//!   request thread that allocates a few MB of model and index keeps them in its arena);
//! - `mmap_threshold=131072`: every allocation of 128 KiB or more (texts, parse trees, LV
//!   lists, indexes) is mapped on its own and unmapped when freed; a fixed threshold also
//!   stops glibc from raising it (and keeping such buffers in the heap) after the first frees.
//!
//! glibc reads `GLIBC_TUNABLES` only when a process starts, so csi-shim starts itself again
//! with it once ([`restart_tuned`]) unless the variable already tunes malloc.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;

/// The malloc tunables csi-shim adds to `GLIBC_TUNABLES`.
pub const TUNABLES: &str = "glibc.malloc.arena_max=2:glibc.malloc.mmap_threshold=131072";

/// The `GLIBC_TUNABLES` to run with, given the current one; `None` when it tunes malloc
/// already (an admin's choice, or this process was started tuned).
pub fn tuned(current: Option<&str>) -> Option<String> {
    match current {
        Some(c) if c.contains("glibc.malloc.") => None,
        Some(c) if !c.is_empty() => Some(format!("{c}:{TUNABLES}")),
        _ => Some(TUNABLES.to_owned()),
    }
}

/// Replaces this process with itself (same arguments, same pid) under a `GLIBC_TUNABLES` that
/// tunes malloc; returns only when that fails (or malloc is tuned already), saying why.
pub fn restart_tuned() -> Option<std::io::Error> {
    let current = std::env::var("GLIBC_TUNABLES").ok();
    let value = tuned(current.as_deref())?;
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return Some(e),
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| OsString::from("csi-shim"));
    Some(
        std::process::Command::new(exe)
            .arg0(arg0)
            .args(args)
            .env("GLIBC_TUNABLES", value)
            .exec(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunes_malloc_once_and_keeps_other_tunables() {
        assert_eq!(tuned(None).as_deref(), Some(TUNABLES));
        assert_eq!(tuned(Some("")).as_deref(), Some(TUNABLES));
        assert_eq!(
            tuned(Some("glibc.rtld.nns=2")),
            Some(format!("glibc.rtld.nns=2:{TUNABLES}"))
        );
        assert_eq!(tuned(Some(TUNABLES)), None);
        assert_eq!(tuned(Some("glibc.malloc.arena_max=8")), None);
    }
}
