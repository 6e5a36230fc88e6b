//! Raw FFI bindings to libsanlock_client (every function of `sanlock.h`, `sanlock_admin.h` and
//! `sanlock_resource.h`) and, with the `direct` feature, the `sanlock_direct_*` functions of
//! libsanlock. Nothing in the crate root is safe to call without reading sanlock's headers;
//! [`safe`] wraps the daemon calls lvmeta needs, and `lvmeta::lease` gives them lvmlockd's
//! meaning.
//!
//! The bindings are written by hand (bindgen needs libclang, which the build machines do not
//! have); `gen-consts.py` generates the constants from the installed headers, and the tests
//! compile a C program against those headers to check every constant, every struct's size and
//! field offsets, and that every function the headers declare is bound here.
#![allow(unsafe_code)] // an FFI crate: every item below is a foreign declaration
#![allow(non_camel_case_types)] // C names, kept so that sanlock's documentation applies

mod consts;
pub mod safe;

pub use consts::*;

use std::os::raw::{c_char, c_int, c_void};

/// `struct sanlk_disk`: a path and an offset on it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sanlk_disk {
    /// NUL-terminated path, `:` escaped as `\:`.
    pub path: [c_char; SANLK_PATH_LEN],
    /// Byte offset of the lease.
    pub offset: u64,
    /// Unused.
    pub pad1: u32,
    /// Unused.
    pub pad2: u32,
}

/// `struct sanlk_resource` header; `num_disks` [`sanlk_disk`]s follow it in memory
/// (a C flexible array member). Allocate the header and the disks together.
#[repr(C)]
pub struct sanlk_resource {
    /// Lockspace name (not necessarily NUL-terminated).
    pub lockspace_name: [c_char; SANLK_NAME_LEN],
    /// Resource name.
    pub name: [c_char; SANLK_NAME_LEN],
    /// Lease version.
    pub lver: u64,
    /// Caller data.
    pub data64: u64,
    /// Caller data (new num_hosts with `SANLK_RES_NUM_HOSTS`).
    pub data32: u32,
    /// Unused.
    pub unused: u32,
    /// `SANLK_RES_*`.
    pub flags: u32,
    /// Number of disks that follow.
    pub num_disks: u32,
    /// The disks (flexible array).
    pub disks: [sanlk_disk; 0],
}

/// `struct sanlk_rindex`: a resource index on disk.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sanlk_rindex {
    /// `SANLK_RIF_*`.
    pub flags: u32,
    /// Capacity.
    pub max_resources: u32,
    /// Unused.
    pub unused: u64,
    /// Lockspace name.
    pub lockspace_name: [c_char; SANLK_NAME_LEN],
    /// Where the index is.
    pub disk: sanlk_disk,
}

/// `struct sanlk_rentry`: one entry of a resource index.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sanlk_rentry {
    /// Resource name.
    pub name: [c_char; SANLK_NAME_LEN],
    /// Offset of the resource.
    pub offset: u64,
    /// Flags.
    pub flags: u32,
    /// Unused.
    pub unused: u32,
}

/// `struct sanlk_options` header; `len` bytes of `str` follow (flexible array).
#[repr(C)]
pub struct sanlk_options {
    /// Owner name shown by the daemon.
    pub owner_name: [c_char; SANLK_NAME_LEN],
    /// Flags.
    pub flags: u32,
    /// Length of `str` (ignored by the daemon).
    pub len: u32,
    /// Option string (flexible array).
    pub str_: [c_char; 0],
}

/// `struct sanlk_lockspace`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct sanlk_lockspace {
    /// Lockspace name.
    pub name: [c_char; SANLK_NAME_LEN],
    /// This host's id (1..=2000).
    pub host_id: u64,
    /// `SANLK_LSF_*`.
    pub flags: u32,
    /// The delta-lease area.
    pub host_id_disk: sanlk_disk,
}

/// `struct sanlk_host`: a host's delta lease as the daemon sees it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sanlk_host {
    /// Host id.
    pub host_id: u64,
    /// Generation.
    pub generation: u64,
    /// Last renewal.
    pub timestamp: u64,
    /// The host's io_timeout.
    pub io_timeout: u32,
    /// Low nibble: `SANLK_HOST_*`.
    pub flags: u32,
}

/// `struct sanlk_host_event`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct sanlk_host_event {
    /// Target host id.
    pub host_id: u64,
    /// Target generation.
    pub generation: u64,
    /// Event bits.
    pub event: u64,
    /// Event data.
    pub data: u64,
}

extern "C" {
    // sanlock.h
    /// `sanlock_path_export`.
    pub fn sanlock_path_export(dst: *mut c_char, src: *const c_char, dstlen: usize) -> usize;
    /// `sanlock_path_import`.
    pub fn sanlock_path_import(dst: *mut c_char, src: *const c_char, dstlen: usize) -> usize;
    /// `sanlock_strerror`: text of a `SANLK_*` code.
    pub fn sanlock_strerror(rv: c_int) -> *const c_char;

    // sanlock_admin.h
    /// `sanlock_add_lockspace`.
    pub fn sanlock_add_lockspace(ls: *mut sanlk_lockspace, flags: u32) -> c_int;
    /// `sanlock_add_lockspace_timeout`.
    pub fn sanlock_add_lockspace_timeout(
        ls: *mut sanlk_lockspace,
        flags: u32,
        io_timeout: u32,
    ) -> c_int;
    /// `sanlock_inq_lockspace`.
    pub fn sanlock_inq_lockspace(ls: *mut sanlk_lockspace, flags: u32) -> c_int;
    /// `sanlock_rem_lockspace`.
    pub fn sanlock_rem_lockspace(ls: *mut sanlk_lockspace, flags: u32) -> c_int;
    /// `sanlock_get_lockspaces` (the array is malloc'ed; free it).
    pub fn sanlock_get_lockspaces(
        lss: *mut *mut sanlk_lockspace,
        lss_count: *mut c_int,
        flags: u32,
    ) -> c_int;
    /// `sanlock_get_hosts` (the array is malloc'ed; free it).
    pub fn sanlock_get_hosts(
        ls_name: *const c_char,
        host_id: u64,
        hss: *mut *mut sanlk_host,
        hss_count: *mut c_int,
        flags: u32,
    ) -> c_int;
    /// `sanlock_set_config`.
    pub fn sanlock_set_config(
        ls_name: *const c_char,
        flags: u32,
        cmd: u32,
        data: *mut c_void,
    ) -> c_int;
    /// `sanlock_align`: lease alignment of a disk.
    pub fn sanlock_align(disk: *mut sanlk_disk) -> c_int;
    /// `sanlock_init` (old API).
    pub fn sanlock_init(
        ls: *mut sanlk_lockspace,
        res: *mut sanlk_resource,
        max_hosts: c_int,
        num_hosts: c_int,
    ) -> c_int;
    /// `sanlock_write_lockspace`.
    pub fn sanlock_write_lockspace(
        ls: *mut sanlk_lockspace,
        max_hosts: c_int,
        flags: u32,
        io_timeout: u32,
    ) -> c_int;
    /// `sanlock_read_lockspace`.
    pub fn sanlock_read_lockspace(
        ls: *mut sanlk_lockspace,
        flags: u32,
        io_timeout: *mut u32,
    ) -> c_int;
    /// `sanlock_write_resource`.
    pub fn sanlock_write_resource(
        res: *mut sanlk_resource,
        max_hosts: c_int,
        num_hosts: c_int,
        flags: u32,
    ) -> c_int;
    /// `sanlock_read_resource`.
    pub fn sanlock_read_resource(res: *mut sanlk_resource, flags: u32) -> c_int;
    /// `sanlock_read_resource_owners` (the array is malloc'ed; free it).
    pub fn sanlock_read_resource_owners(
        res: *mut sanlk_resource,
        flags: u32,
        hss: *mut *mut sanlk_host,
        hss_count: *mut c_int,
    ) -> c_int;
    /// `sanlock_test_resource_owners` (client side only).
    pub fn sanlock_test_resource_owners(
        res: *mut sanlk_resource,
        flags: u32,
        owners: *mut sanlk_host,
        owners_count: c_int,
        hosts: *mut sanlk_host,
        hosts_count: c_int,
        test_flags: *mut u32,
    ) -> c_int;
    /// `sanlock_format_rindex`.
    pub fn sanlock_format_rindex(rx: *mut sanlk_rindex, flags: u32) -> c_int;
    /// `sanlock_update_rindex`.
    pub fn sanlock_update_rindex(rx: *mut sanlk_rindex, flags: u32, re: *mut sanlk_rentry)
        -> c_int;
    /// `sanlock_lookup_rindex`.
    pub fn sanlock_lookup_rindex(rx: *mut sanlk_rindex, flags: u32, re: *mut sanlk_rentry)
        -> c_int;
    /// `sanlock_rebuild_rindex`.
    pub fn sanlock_rebuild_rindex(rx: *mut sanlk_rindex, flags: u32) -> c_int;
    /// `sanlock_create_resource`.
    pub fn sanlock_create_resource(
        rx: *mut sanlk_rindex,
        flags: u32,
        re: *mut sanlk_rentry,
        max_hosts: c_int,
        num_hosts: c_int,
    ) -> c_int;
    /// `sanlock_delete_resource`.
    pub fn sanlock_delete_resource(
        rx: *mut sanlk_rindex,
        flags: u32,
        re: *mut sanlk_rentry,
    ) -> c_int;
    /// `sanlock_version`.
    pub fn sanlock_version(flags: u32, version: *mut u32, proto: *mut u32) -> c_int;
    /// `sanlock_reg_event`: returns an fd for poll(2).
    pub fn sanlock_reg_event(
        ls_name: *const c_char,
        he: *mut sanlk_host_event,
        flags: u32,
    ) -> c_int;
    /// `sanlock_end_event`.
    pub fn sanlock_end_event(fd: c_int, ls_name: *const c_char, flags: u32) -> c_int;
    /// `sanlock_set_event`.
    pub fn sanlock_set_event(
        ls_name: *const c_char,
        he: *mut sanlk_host_event,
        flags: u32,
    ) -> c_int;
    /// `sanlock_get_event`.
    pub fn sanlock_get_event(
        fd: c_int,
        flags: u32,
        he: *mut sanlk_host_event,
        from_host_id: *mut u64,
        from_generation: *mut u64,
    ) -> c_int;

    // sanlock_resource.h
    /// `sanlock_register`: a socket whose leases belong to this process.
    pub fn sanlock_register() -> c_int;
    /// `sanlock_restrict`.
    pub fn sanlock_restrict(sock: c_int, flags: u32) -> c_int;
    /// `sanlock_killpath`.
    pub fn sanlock_killpath(
        sock: c_int,
        flags: u32,
        path: *const c_char,
        args: *mut c_char,
    ) -> c_int;
    /// `sanlock_acquire`.
    pub fn sanlock_acquire(
        sock: c_int,
        pid: c_int,
        flags: u32,
        res_count: c_int,
        res_args: *mut *mut sanlk_resource,
        opt_in: *mut sanlk_options,
    ) -> c_int;
    /// `sanlock_release`.
    pub fn sanlock_release(
        sock: c_int,
        pid: c_int,
        flags: u32,
        res_count: c_int,
        res_args: *mut *mut sanlk_resource,
    ) -> c_int;
    /// `sanlock_inquire` (the state string is malloc'ed; free it).
    pub fn sanlock_inquire(
        sock: c_int,
        pid: c_int,
        flags: u32,
        res_count: *mut c_int,
        res_state: *mut *mut c_char,
    ) -> c_int;
    /// `sanlock_convert`: EX <-> SH.
    pub fn sanlock_convert(sock: c_int, pid: c_int, flags: u32, res: *mut sanlk_resource) -> c_int;
    /// `sanlock_request`.
    pub fn sanlock_request(flags: u32, force_mode: u32, res: *mut sanlk_resource) -> c_int;
    /// `sanlock_examine`.
    pub fn sanlock_examine(flags: u32, ls: *mut sanlk_lockspace, res: *mut sanlk_resource)
        -> c_int;
    /// `sanlock_set_lvb`.
    pub fn sanlock_set_lvb(
        flags: u32,
        res: *mut sanlk_resource,
        lvb: *mut c_char,
        lvblen: c_int,
    ) -> c_int;
    /// `sanlock_get_lvb`.
    pub fn sanlock_get_lvb(
        flags: u32,
        res: *mut sanlk_resource,
        lvb: *mut c_char,
        lvblen: c_int,
    ) -> c_int;
    /// `sanlock_res_to_str` (the string is malloc'ed; free it).
    pub fn sanlock_res_to_str(res: *mut sanlk_resource, str_ret: *mut *mut c_char) -> c_int;
    /// `sanlock_str_to_res` (the resource is malloc'ed; free it).
    pub fn sanlock_str_to_res(str_: *mut c_char, res_ret: *mut *mut sanlk_resource) -> c_int;
    /// `sanlock_args_to_state` (the string is malloc'ed; free it).
    pub fn sanlock_args_to_state(
        res_count: c_int,
        res_args: *mut *mut sanlk_resource,
        res_state: *mut *mut c_char,
    ) -> c_int;
    /// `sanlock_state_to_args` (the array is malloc'ed; free it).
    pub fn sanlock_state_to_args(
        res_state: *mut c_char,
        res_count: *mut c_int,
        res_args: *mut *mut *mut sanlk_resource,
    ) -> c_int;
    /// `sanlock_str_to_lockspace`.
    pub fn sanlock_str_to_lockspace(str_: *mut c_char, ls: *mut sanlk_lockspace) -> c_int;
}

// libsanlock's daemon-less functions (`sanlock_direct.h`, GPLv2+); feature `direct`.
#[cfg(feature = "direct")]
extern "C" {
    /// `sanlock_direct_init`.
    pub fn sanlock_direct_init(
        ls: *mut sanlk_lockspace,
        res: *mut sanlk_resource,
        max_hosts_unused: c_int,
        num_hosts: c_int,
        use_aio: c_int,
    ) -> c_int;
    /// `sanlock_direct_write_lockspace`.
    pub fn sanlock_direct_write_lockspace(
        ls: *mut sanlk_lockspace,
        max_hosts_unused: c_int,
        flags: u32,
        io_timeout: u32,
    ) -> c_int;
    /// `sanlock_direct_write_resource`.
    pub fn sanlock_direct_write_resource(
        res: *mut sanlk_resource,
        max_hosts_unused: c_int,
        num_hosts: c_int,
        flags: u32,
    ) -> c_int;
    /// `sanlock_direct_align`.
    pub fn sanlock_direct_align(disk: *mut sanlk_disk) -> c_int;
}

#[cfg(test)]
mod tests;
