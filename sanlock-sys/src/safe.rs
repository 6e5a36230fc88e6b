//! Safe calls of the daemon API: owned lockspace and resource descriptions, every foreign call
//! in one place with its SAFETY note, errors as sanlock's negative return codes. The lease
//! semantics (lvmlockd's layout, retries, value blocks) live in `lvmeta::lease`.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int};

use super::*;

/// A sanlock return code below zero: `-errno` or one of the `SANLK_*` codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rv(pub i32);

impl std::fmt::Display for Rv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 <= -200 {
            // SAFETY: sanlock_strerror returns NULL or a pointer to a static NUL-terminated
            // string for any code.
            let p = unsafe { sanlock_strerror(self.0) };
            if !p.is_null() {
                // SAFETY: checked non-null above; the string is static.
                let s = unsafe { CStr::from_ptr(p) }.to_string_lossy();
                return write!(f, "sanlock error {}: {s}", self.0);
            }
        }
        let os = std::io::Error::from_raw_os_error(-self.0);
        write!(f, "sanlock error {}: {os}", self.0)
    }
}

impl std::error::Error for Rv {}

fn check(rv: c_int) -> Result<i32, Rv> {
    if rv < 0 {
        Err(Rv(rv))
    } else {
        Ok(rv)
    }
}

/// Copies `s` into a fixed C name or path field (truncated, as sanlock truncates).
fn put(dst: &mut [c_char], s: &str) {
    dst.fill(0);
    for (d, b) in dst.iter_mut().zip(s.bytes()) {
        *d = b as c_char;
    }
}

fn disk(path: &str, offset: u64) -> sanlk_disk {
    let mut d = sanlk_disk {
        path: [0; SANLK_PATH_LEN],
        offset,
        pad1: 0,
        pad2: 0,
    };
    // Leave room for the NUL sanlock needs.
    put(&mut d.path[..SANLK_PATH_LEN - 1], path);
    d
}

/// A lockspace: name, this host's id, where its delta leases are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lockspace {
    /// Lockspace name (at most 48 bytes are used).
    pub name: String,
    /// This host's id (1..=2000).
    pub host_id: u64,
    /// Device path.
    pub path: String,
    /// Byte offset of the delta-lease area.
    pub offset: u64,
    /// `SANLK_LSF_ALIGN*` | `SANLK_LSF_SECTOR*` flags (0: sanlock's default for the device).
    pub flags: u32,
}

impl Lockspace {
    fn raw(&self) -> sanlk_lockspace {
        let mut ls = sanlk_lockspace {
            name: [0; SANLK_NAME_LEN],
            host_id: self.host_id,
            flags: self.flags,
            host_id_disk: disk(&self.path, self.offset),
        };
        put(&mut ls.name, &self.name);
        ls
    }
}

/// A single-disk resource (paxos lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Lockspace name.
    pub lockspace: String,
    /// Resource name (at most 48 bytes).
    pub name: String,
    /// Device path.
    pub path: String,
    /// Byte offset of the lease area.
    pub offset: u64,
    /// `SANLK_RES_*` flags (`SANLK_RES_SHARED` for a shared lease; geometry flags).
    pub flags: u32,
}

/// `struct sanlk_resource` with its one disk, laid out as C expects.
#[repr(C)]
struct RawResource {
    res: sanlk_resource,
    disk: sanlk_disk,
}

impl Resource {
    fn raw(&self) -> Box<RawResource> {
        let mut r = Box::new(RawResource {
            res: sanlk_resource {
                lockspace_name: [0; SANLK_NAME_LEN],
                name: [0; SANLK_NAME_LEN],
                lver: 0,
                data64: 0,
                data32: 0,
                unused: 0,
                flags: self.flags,
                num_disks: 1,
                disks: [],
            },
            disk: disk(&self.path, self.offset),
        });
        put(&mut r.res.lockspace_name, &self.lockspace);
        put(&mut r.res.name, &self.name);
        r
    }
}

/// The daemon's version and protocol.
pub fn version() -> Result<(u32, u32), Rv> {
    let (mut v, mut p) = (0u32, 0u32);
    // SAFETY: both pointers are to live u32s for the duration of the call.
    check(unsafe { sanlock_version(0, &mut v, &mut p) })?;
    Ok((v, p))
}

/// Writes a fresh lockspace (delta-lease area) on disk.
pub fn write_lockspace(ls: &Lockspace, io_timeout: u32) -> Result<(), Rv> {
    let mut raw = ls.raw();
    // SAFETY: `raw` is a fully initialised sanlk_lockspace living across the call.
    check(unsafe { sanlock_write_lockspace(&mut raw, 0, 0, io_timeout) }).map(drop)
}

/// Writes a fresh resource (paxos lease area) on disk.
pub fn write_resource(r: &Resource) -> Result<(), Rv> {
    let mut raw = r.raw();
    // SAFETY: `raw` holds the resource header followed by its one disk, as num_disks says.
    check(unsafe { sanlock_write_resource(&mut raw.res, 0, 0, 0) }).map(drop)
}

/// Reads the resource at `path`/`offset`: its lockspace and resource names and lease version.
pub fn read_resource(path: &str, offset: u64) -> Result<(String, String, u64), Rv> {
    let r = Resource {
        lockspace: String::new(),
        name: String::new(),
        path: path.to_owned(),
        offset,
        flags: 0,
    };
    let mut raw = r.raw();
    // SAFETY: as in write_resource; sanlock fills the names and lver in place.
    check(unsafe { sanlock_read_resource(&mut raw.res, 0) })?;
    let name = |f: &[c_char]| {
        let b: Vec<u8> = f
            .iter()
            .take_while(|c| **c != 0)
            .map(|c| *c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    Ok((
        name(&raw.res.lockspace_name),
        name(&raw.res.name),
        raw.res.lver,
    ))
}

/// Joins a lockspace (blocks until the delta lease is held).
pub fn add_lockspace(ls: &Lockspace, io_timeout: u32) -> Result<(), Rv> {
    let mut raw = ls.raw();
    // SAFETY: `raw` is a fully initialised sanlk_lockspace living across the call.
    check(unsafe { sanlock_add_lockspace_timeout(&mut raw, 0, io_timeout) }).map(drop)
}

/// Is this host joined to the lockspace? `Ok(false)` when not (or being removed).
pub fn inq_lockspace(ls: &Lockspace) -> Result<bool, Rv> {
    let mut raw = ls.raw();
    // SAFETY: as in add_lockspace.
    match unsafe { sanlock_inq_lockspace(&mut raw, 0) } {
        0 => Ok(true),
        rv if rv == -libc::ENOENT || rv == -libc::EINPROGRESS => Ok(false),
        rv => Err(Rv(rv)),
    }
}

/// Leaves a lockspace, unless a lease (held, or an orphan) is still in it: then `-EBUSY`
/// and nothing changes (`SANLK_REM_UNUSED`; without it the daemon kills the holders).
pub fn rem_lockspace(ls: &Lockspace) -> Result<(), Rv> {
    let mut raw = ls.raw();
    // SAFETY: as in add_lockspace.
    check(unsafe { sanlock_rem_lockspace(&mut raw, SANLK_REM_UNUSED) }).map(drop)
}

/// Sets a lockspace option of this host (`SANLK_CONFIG_*`): `SANLK_CONFIG_USED_BY_ORPHANS`
/// keeps a failed lockspace (and so the watchdog armed) while orphans of it remain.
pub fn set_config(lockspace: &str, cmd: u32) -> Result<(), Rv> {
    let mut name = [0 as c_char; SANLK_NAME_LEN + 1];
    put(&mut name[..SANLK_NAME_LEN], lockspace);
    // SAFETY: `name` is NUL-terminated and lives across the call; no data argument is read
    // for the USED/UNUSED commands.
    check(unsafe { sanlock_set_config(name.as_ptr(), 0, cmd, std::ptr::null_mut()) }).map(drop)
}

/// Hosts of `lockspace` as this host's daemon sees them: with `host_id` 0 those whose
/// delta lease is held now, else that one host in any state. The lockspace must be joined
/// here (`-ENOENT` otherwise; `-EAGAIN` until the daemon has read its delta leases once).
pub fn get_hosts(lockspace: &str, host_id: u64) -> Result<Vec<sanlk_host>, Rv> {
    let mut name = [0 as c_char; SANLK_NAME_LEN + 1];
    put(&mut name[..SANLK_NAME_LEN], lockspace);
    let mut hss: *mut sanlk_host = std::ptr::null_mut();
    let mut count: c_int = 0;
    // SAFETY: `name` is NUL-terminated and the out pointers live across the call;
    // libsanlock leaves `hss` NULL or sets it to a malloc'ed array of `count` hosts (also
    // with some errors, so it is freed whatever `rv` says).
    let rv = unsafe { sanlock_get_hosts(name.as_ptr(), host_id, &mut hss, &mut count, 0) };
    let hosts = match usize::try_from(count) {
        Ok(n) if rv >= 0 && n > 0 && !hss.is_null() => {
            // SAFETY: the array holds `count` initialised hosts (checked non-null above).
            unsafe { std::slice::from_raw_parts(hss, n) }.to_vec()
        }
        _ => Vec::new(),
    };
    if !hss.is_null() {
        // SAFETY: allocated by libsanlock with malloc, freed once, not used after.
        unsafe { libc::free(hss.cast()) };
    }
    check(rv)?;
    Ok(hosts)
}

/// A registered connection to the daemon; leases acquired on it are released when it closes
/// (or when the process dies).
#[derive(Debug)]
pub struct Client {
    sock: c_int,
}

impl Client {
    /// Registers this process with the daemon.
    pub fn register() -> Result<Self, Rv> {
        // SAFETY: no arguments; returns a new socket fd or a negative code.
        let sock = check(unsafe { sanlock_register() })?;
        Ok(Self { sock })
    }

    /// Acquires `r` (exclusive unless `r.flags` has `SANLK_RES_SHARED`; kept by the host as an
    /// orphan after this process ends when it has `SANLK_RES_PERSISTENT`) with the
    /// `SANLK_ACQUIRE_*` `flags` (`SANLK_ACQUIRE_LVB` for the value block, `SANLK_ACQUIRE_ORPHAN`
    /// to adopt this host's orphan of it).
    pub fn acquire(&self, r: &Resource, flags: u32) -> Result<(), Rv> {
        let mut raw = r.raw();
        let mut ptrs = [&mut raw.res as *mut sanlk_resource];
        // SAFETY: one valid resource pointer in a live array; no options.
        check(unsafe {
            sanlock_acquire(
                self.sock,
                -1,
                flags,
                1,
                ptrs.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
        .map(drop)
    }

    /// Releases `r`.
    pub fn release(&self, r: &Resource) -> Result<(), Rv> {
        self.release_flags(r, 0).map(drop)
    }

    /// Drops this host's orphans of `r` (every orphan of `r.lockspace` when `r.name` is
    /// empty) without touching the disk first: the daemon releases them in the background.
    /// Works in a failed lockspace, where nothing can be acquired. Returns how many.
    pub fn release_orphans(&self, r: &Resource) -> Result<u32, Rv> {
        self.release_flags(r, SANLK_REL_ORPHAN)
            .map(|n| u32::try_from(n).unwrap_or(0))
    }

    fn release_flags(&self, r: &Resource, flags: u32) -> Result<i32, Rv> {
        let mut raw = r.raw();
        let mut ptrs = [&mut raw.res as *mut sanlk_resource];
        // SAFETY: as in acquire.
        check(unsafe { sanlock_release(self.sock, -1, flags, 1, ptrs.as_mut_ptr()) })
    }

    /// Tells the daemon how it may stop this process when a lockspace it uses fails
    /// (`SANLK_RESTRICT_SIGKILL`: SIGTERM only, repeated, so the process can finish
    /// fencing; if it never releases, the watchdog resets the host).
    pub fn restrict(&self, flags: u32) -> Result<(), Rv> {
        // SAFETY: `sock` is this client's registered socket.
        check(unsafe { sanlock_restrict(self.sock, flags) }).map(drop)
    }

    /// Converts a held lease between exclusive and shared (`r.flags` gives the new mode).
    pub fn convert(&self, r: &Resource) -> Result<(), Rv> {
        let mut raw = r.raw();
        // SAFETY: a valid resource for the duration of the call.
        check(unsafe { sanlock_convert(self.sock, -1, 0, &mut raw.res) }).map(drop)
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        // Closing the registered socket releases whatever is still held on it.
        // SAFETY: `sock` is the fd sanlock_register returned and is closed once, here.
        unsafe {
            libc::close(self.sock);
        }
    }
}

/// Acquires `r` for the registered process `pid` (another process of this host, which holds
/// the lease as if it had acquired it: released when it ends, or kept as an orphan with
/// `SANLK_RES_PERSISTENT`), with the `SANLK_ACQUIRE_*` `flags`.
pub fn acquire_for(pid: i32, r: &Resource, flags: u32) -> Result<(), Rv> {
    let mut raw = r.raw();
    let mut ptrs = [&mut raw.res as *mut sanlk_resource];
    // SAFETY: one valid resource pointer in a live array; no options; sock -1 makes the
    // library connect anew and act for `pid`.
    check(unsafe { sanlock_acquire(-1, pid, flags, 1, ptrs.as_mut_ptr(), std::ptr::null_mut()) })
        .map(drop)
}

/// Releases `r` held by the registered process `pid` (`SANLK_REL_*` `flags`); returns what
/// the daemon returns (the count, for `SANLK_REL_ORPHAN`).
pub fn release_for(pid: i32, r: &Resource, flags: u32) -> Result<i32, Rv> {
    let mut raw = r.raw();
    let mut ptrs = [&mut raw.res as *mut sanlk_resource];
    // SAFETY: as in acquire_for.
    check(unsafe { sanlock_release(-1, pid, flags, 1, ptrs.as_mut_ptr()) })
}

/// Reads a held resource's value block into `buf`.
pub fn get_lvb(r: &Resource, buf: &mut [u8]) -> Result<(), Rv> {
    let mut raw = r.raw();
    let len = c_int::try_from(buf.len()).map_err(|_| Rv(-22))?;
    // SAFETY: `buf` is valid for `len` bytes; the resource is valid for the call.
    check(unsafe { sanlock_get_lvb(0, &mut raw.res, buf.as_mut_ptr().cast(), len) }).map(drop)
}

/// Sets a held resource's value block (written to disk when the lease is released).
pub fn set_lvb(r: &Resource, buf: &[u8]) -> Result<(), Rv> {
    let mut raw = r.raw();
    let mut copy = buf.to_vec();
    let len = c_int::try_from(copy.len()).map_err(|_| Rv(-22))?;
    // SAFETY: `copy` is valid for `len` bytes (sanlock takes a non-const pointer but only
    // reads it); the resource is valid for the call.
    check(unsafe { sanlock_set_lvb(0, &mut raw.res, copy.as_mut_ptr().cast(), len) }).map(drop)
}
