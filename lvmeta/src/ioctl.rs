//! The kernel calls lvmeta makes itself, its only `unsafe`: the loop driver's ioctls
//! (linux/loop.h), the block layer's erase ioctls (`BLKZEROOUT`, `BLKDISCARD`) and sector
//! size (`BLKSSZGET`), `fallocate`
//! for image files and `mknod` for device-mapper nodes. Each call passes a file descriptor
//! this module's caller owns and, where the kernel reads or writes a structure, a pointer to
//! a live, correctly laid out `repr(C)` value. (device-mapper's own ioctls are the
//! devicemapper crate's.)
#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

const LOOP_CLR_FD: libc::c_ulong = 0x4C01;
const LOOP_SET_STATUS64: libc::c_ulong = 0x4C04;
const LOOP_GET_STATUS64: libc::c_ulong = 0x4C05;
const LOOP_SET_CAPACITY: libc::c_ulong = 0x4C07;
const LOOP_CONFIGURE: libc::c_ulong = 0x4C0A;
const LOOP_CTL_GET_FREE: libc::c_ulong = 0x4C82;
/// `_IO(0x12, 119)`: discard a byte range of a block device.
const BLKDISCARD: libc::c_ulong = 0x1277;
/// `_IO(0x12, 104)`: a block device's logical sector size.
const BLKSSZGET: libc::c_ulong = 0x1268;
/// `_IO(0x12, 127)`: make a byte range of a block device read back as zeroes (the kernel
/// offloads it: WRITE SAME / WRITE ZEROES / UNMAP on a SAN, a hole punch under a loop device).
const BLKZEROOUT: libc::c_ulong = 0x127F;

/// `LO_FLAGS_READ_ONLY`.
pub const READ_ONLY: u32 = 1;
/// `LO_FLAGS_DIRECT_IO`.
pub const DIRECT_IO: u32 = 16;

/// `struct loop_info64`.
#[repr(C)]
#[derive(Clone, Copy)]
struct LoopInfo64 {
    lo_device: u64,
    lo_inode: u64,
    lo_rdevice: u64,
    lo_offset: u64,
    lo_sizelimit: u64,
    lo_number: u32,
    lo_encrypt_type: u32,
    lo_encrypt_key_size: u32,
    lo_flags: u32,
    lo_file_name: [u8; 64],
    lo_crypt_name: [u8; 64],
    lo_encrypt_key: [u8; 32],
    lo_init: [u64; 2],
}

/// `struct loop_config`.
#[repr(C)]
struct LoopConfig {
    fd: u32,
    block_size: u32,
    info: LoopInfo64,
    reserved: [u64; 8],
}

const _: () = assert!(std::mem::size_of::<LoopInfo64>() == 232);
const _: () = assert!(std::mem::size_of::<LoopConfig>() == 304);

fn zero_info() -> LoopInfo64 {
    LoopInfo64 {
        lo_device: 0,
        lo_inode: 0,
        lo_rdevice: 0,
        lo_offset: 0,
        lo_sizelimit: 0,
        lo_number: 0,
        lo_encrypt_type: 0,
        lo_encrypt_key_size: 0,
        lo_flags: 0,
        lo_file_name: [0; 64],
        lo_crypt_name: [0; 64],
        lo_encrypt_key: [0; 32],
        lo_init: [0; 2],
    }
}

fn check(rv: libc::c_int) -> io::Result<libc::c_int> {
    if rv < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rv)
    }
}

/// The number of a free loop device (`/dev/loop-control`, `LOOP_CTL_GET_FREE`).
pub fn get_free(control: &File) -> io::Result<u32> {
    // SAFETY: LOOP_CTL_GET_FREE takes no argument; the descriptor is open for the call.
    let n = check(unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE) })?;
    u32::try_from(n).map_err(|_| io::Error::other("negative loop number"))
}

/// Binds `dev` to `len` bytes of `backing` at `offset` in one step (`LOOP_CONFIGURE`), with
/// `flags` and `name` as the device's file name (what `losetup -l` shows).
pub fn configure(
    dev: &File,
    backing: &File,
    offset: u64,
    len: u64,
    flags: u32,
    name: &str,
) -> io::Result<()> {
    let mut info = zero_info();
    info.lo_offset = offset;
    info.lo_sizelimit = len;
    info.lo_flags = flags;
    let n = name.len().min(63);
    info.lo_file_name[..n].copy_from_slice(&name.as_bytes()[..n]);
    let fd = u32::try_from(backing.as_raw_fd()).map_err(|_| io::Error::other("bad fd"))?;
    let config = LoopConfig {
        fd,
        block_size: 0,
        info,
        reserved: [0; 8],
    };
    // SAFETY: `config` is a live `struct loop_config` the kernel only reads; both
    // descriptors are open for the call.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CONFIGURE, &config) })?;
    Ok(())
}

/// Unbinds `dev` (`LOOP_CLR_FD`).
pub fn clear(dev: &File) -> io::Result<()> {
    // SAFETY: LOOP_CLR_FD takes no argument; the descriptor is open for the call.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_CLR_FD) })?;
    Ok(())
}

/// Sets the size limit of a bound `dev` and makes the kernel take the new size.
pub fn resize(dev: &File, len: u64) -> io::Result<()> {
    let mut info = zero_info();
    // SAFETY: the kernel writes a `struct loop_info64` into `info`, which is live and
    // correctly laid out; the descriptor is open for the call.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_GET_STATUS64, &mut info) })?;
    info.lo_sizelimit = len;
    // SAFETY: as above; the kernel only reads `info`.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_SET_STATUS64, &info) })?;
    // SAFETY: LOOP_SET_CAPACITY takes no argument; the descriptor is open for the call.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), LOOP_SET_CAPACITY) })?;
    Ok(())
}

/// `BLKZEROOUT` over `len` bytes at `offset` of block device `dev` (both multiples of its
/// logical sector size): afterwards the range reads back as zeroes.
pub fn zero_out(dev: &File, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: the kernel reads two u64 (start, length) from `range`, which lives across the
    // call; the descriptor is open for the call.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), BLKZEROOUT, &range) })?;
    Ok(())
}

/// The logical sector size of block device `dev` (`BLKSSZGET`).
pub fn logical_sector_size(dev: &File) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: the kernel writes one int to `size`, which lives across the call; the
    // descriptor is open for the call.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), BLKSSZGET, &mut size) })?;
    u32::try_from(size).map_err(|_| io::Error::other(format!("BLKSSZGET gave {size}")))
}

/// `BLKDISCARD` over `len` bytes at `offset` of block device `dev`; what the range reads back
/// afterwards is up to the device.
pub fn discard(dev: &File, offset: u64, len: u64) -> io::Result<()> {
    let range: [u64; 2] = [offset, len];
    // SAFETY: as in `zero_out`.
    check(unsafe { libc::ioctl(dev.as_raw_fd(), BLKDISCARD, &range) })?;
    Ok(())
}

/// Punches a hole of `len` bytes at `offset` into regular file `file`, keeping its size: the
/// range reads back as zeroes and gives its blocks back to the file system.
pub fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    let (o, l) = (
        libc::off_t::try_from(offset).map_err(|_| io::Error::other("offset too large"))?,
        libc::off_t::try_from(len).map_err(|_| io::Error::other("length too large"))?,
    );
    let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    // SAFETY: fallocate takes only integers; the descriptor is open for the call.
    check(unsafe { libc::fallocate(file.as_raw_fd(), mode, o, l) })?;
    Ok(())
}

/// Makes the block device node `path` for device `major:minor`, mode 0600 (what udev would
/// make for a device-mapper device; there is no udev here).
#[cfg(feature = "dm")]
pub fn mknod_block(path: &std::path::Path, major: u32, minor: u32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in a device path"))?;
    let dev = libc::makedev(major, minor);
    // SAFETY: `c` is a NUL-terminated path that lives across the call; mknod reads it only.
    check(unsafe { libc::mknod(c.as_ptr(), libc::S_IFBLK | 0o600, dev) })?;
    Ok(())
}
