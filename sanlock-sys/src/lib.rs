//! Raw FFI bindings to libsanlock_client / libsanlock.
//!
//! The crate exists so that the workspace has its final shape; the bindings themselves arrive
//! with the shared-VG locking work (lvmlockd-compatible leases). Nothing here is usable yet, and
//! nothing pretends to be.
