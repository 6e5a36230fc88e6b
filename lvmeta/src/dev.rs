//! Block devices: the only place lvmeta touches storage.
//!
//! Everything above this module works on byte slices; the scan and commit code reach a device
//! through [`BlockDevice`]. Three implementations: [`FileDevice`] (block devices and regular
//! image files, O_DIRECT with aligned bounce buffers), [`MemDevice`] (tests, fuzzing,
//! benchmarks) and [`FaultyDevice`] (crash and error injection).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A device addressed in bytes. Reads and writes may start and end anywhere; implementations
/// take care of sector alignment.
pub trait BlockDevice: Send + Sync {
    /// The name used in messages (a path for real devices).
    fn name(&self) -> &str;
    /// Size in bytes.
    fn size(&self) -> u64;
    /// Logical sector size in bytes (512 or 4096).
    fn logical_sector_size(&self) -> u32;
    /// Fills `buf` from byte `offset`; fails if the range is not inside the device.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `buf` at byte `offset`; fails if the range is not inside the device.
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()>;
    /// Makes every completed write durable.
    fn flush(&self) -> io::Result<()>;
    /// Makes `len` bytes at byte `offset` read back as zeroes, durably. This default writes
    /// zeroes; devices that can do better (`BLKZEROOUT`, a hole in an image file) override
    /// it.
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        write_zero_buffers(self, offset, len)
    }
    /// Discards `len` bytes at `offset` (`BLKDISCARD`), durably; returns false when the
    /// device cannot discard. What a discarded range reads back is up to the device, so a
    /// caller that needs zeroes checks, or uses [`BlockDevice::write_zeroes`].
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range_u64(self, offset, len)?;
        Ok(false)
    }
}

/// The largest zero buffer [`BlockDevice::write_zeroes`]'s default writes at once.
const ZERO_CHUNK: u64 = 1 << 20;

/// Writes zeroes over `len` bytes at `offset` of `dev`, one [`ZERO_CHUNK`] at a time.
fn write_zero_buffers<D: BlockDevice + ?Sized>(dev: &D, offset: u64, len: u64) -> io::Result<()> {
    check_range_u64(dev, offset, len)?;
    let zeros = vec![0u8; ZERO_CHUNK.min(len) as usize];
    let mut at = 0;
    while at < len {
        let n = (len - at).min(ZERO_CHUNK);
        dev.write_at(offset + at, &zeros[..n as usize])?;
        at += n;
    }
    dev.flush()
}

fn check_range_u64<D: BlockDevice + ?Sized>(dev: &D, offset: u64, len: u64) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= dev.size() => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!(
                "{}: range {}+{} is outside the device ({} bytes)",
                dev.name(),
                offset,
                len,
                dev.size()
            ),
        )),
    }
}

fn check_range(dev: &dyn BlockDevice, offset: u64, len: usize) -> io::Result<()> {
    check_range_u64(dev, offset, len as u64)
}

/// A block device or a regular image file.
///
/// Opened with O_DIRECT where the file system allows it (tmpfs does not: then buffered I/O),
/// and O_DSYNC when writable, so a write is durable when it returns. Transfers whose memory,
/// offset and length are aligned (to the logical sector of a block device, 4096 bytes for an
/// image file) go straight to the device; others through a bounce buffer aligned to 4096
/// bytes, which satisfies both 512- and 4096-byte logical sectors.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    name: String,
    size: u64,
    sector: u32,
    direct: bool,
    /// A block device (else a regular image file).
    block: bool,
    /// Alignment of transfer offsets and lengths: the logical sector size of a block device
    /// (what O_DIRECT requires of it), 4096 for image files (what any file system accepts).
    align: u64,
}

/// Alignment of bounce buffers in memory, and of transfers to image files.
const DIRECT_ALIGN: usize = 4096;

impl FileDevice {
    /// Opens `path` read-only.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_with(path, false)
    }

    /// Opens `path` for reading and writing.
    pub fn open_rw(path: &Path) -> io::Result<Self> {
        Self::open_with(path, true)
    }

    fn open_with(path: &Path, write: bool) -> io::Result<Self> {
        let name = path.display().to_string();
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{name}: {e}"));
        let mut opts = OpenOptions::new();
        opts.read(true).write(write);
        // Written devices are opened O_DSYNC: each write is durable when it returns (one FUA
        // write instead of a write and a cache flush), so `flush` has nothing left to do.
        let dsync = if write { libc::O_DSYNC } else { 0 };
        let (file, direct) = match opts.clone().custom_flags(libc::O_DIRECT | dsync).open(path) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(device = %name, "O_DIRECT refused, using buffered I/O");
                (opts.custom_flags(dsync).open(path).map_err(ctx)?, false)
            }
            Err(e) => return Err(ctx(e)),
        };
        let meta = file.metadata().map_err(ctx)?;
        let block = meta.file_type().is_block_device();
        let (size, sector) = if block {
            block_device_geometry(&file, meta.rdev()).map_err(ctx)?
        } else if meta.is_file() {
            (meta.len(), 512)
        } else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{name}: not a block device or regular file"),
            ));
        };
        let align = if block && sector.is_power_of_two() && sector >= 512 {
            u64::from(sector)
        } else {
            DIRECT_ALIGN as u64
        };
        Ok(Self {
            file,
            name,
            size,
            sector,
            direct,
            block,
            align,
        })
    }

    /// Whether a transfer of `buf` at `offset` needs no bounce buffer: memory, offset and
    /// length all aligned (O_DIRECT's rule for block devices: the logical sector).
    fn is_aligned(&self, offset: u64, buf: &[u8]) -> bool {
        let a = self.align;
        offset.is_multiple_of(a)
            && (buf.len() as u64).is_multiple_of(a)
            && buf.as_ptr().align_offset(a as usize) == 0
    }

    fn aligned_span(&self, offset: u64, len: usize) -> (u64, usize) {
        let a = self.align;
        let start = offset / a * a;
        let end = (offset + len as u64).div_ceil(a) * a;
        (start, (end - start) as usize)
    }
}

/// A zeroed buffer of `len` bytes whose start is aligned to [`DIRECT_ALIGN`].
struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize) -> Self {
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN);
        Self { raw, start, len }
    }
    fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
}

/// Size and logical sector size of a block device, from its end offset and sysfs.
fn block_device_geometry(file: &File, rdev: u64) -> io::Result<(u64, u32)> {
    use std::io::{Seek, SeekFrom};
    let size = (&*file).seek(SeekFrom::End(0))?;
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let sysfs = format!("/sys/dev/block/{major}:{minor}/queue/logical_block_size");
    let sector = std::fs::read_to_string(&sysfs)
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(512);
    Ok((size, sector))
}

impl BlockDevice for FileDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.size
    }
    fn logical_sector_size(&self) -> u32 {
        self.sector
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        if !self.direct {
            return self.file.read_exact_at(buf, offset);
        }
        if self.is_aligned(offset, buf) {
            let got = read_direct(&self.file, buf, offset)?;
            return match got == buf.len() {
                true => Ok(()),
                false => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("{}: short read at {}", self.name, offset),
                )),
            };
        }
        let (start, len) = self.aligned_span(offset, buf.len());
        let mut bounce = AlignedBuf::new(len);
        // The aligned span may run past the end of a file whose size is not a multiple of 4096:
        // the read then comes back short.
        let got = read_direct(&self.file, bounce.as_mut_slice(), start)?;
        let skip = (offset - start) as usize;
        if got < skip + buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: short read at {}", self.name, offset),
            ));
        }
        buf.copy_from_slice(&bounce.as_slice()[skip..skip + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        if !self.direct {
            return self.file.write_all_at(buf, offset);
        }
        // Already aligned in memory, offset and length (the commit lays its text out so): no
        // bounce copy.
        if self.is_aligned(offset, buf) {
            return self.file.write_all_at(buf, offset);
        }
        let (start, len) = self.aligned_span(offset, buf.len());
        let mut bounce = AlignedBuf::new(len);
        let skip = (offset - start) as usize;
        // Never extend a file whose size is not a multiple of the alignment.
        let avail = (self.size - start).min(len as u64) as usize;
        if skip != 0 || len != buf.len() {
            read_direct(&self.file, bounce.as_mut_slice(), start)?;
        }
        bounce.as_mut_slice()[skip..skip + buf.len()].copy_from_slice(buf);
        self.file.write_all_at(&bounce.as_slice()[..avail], start)
    }
    fn flush(&self) -> io::Result<()> {
        // O_DSYNC already made every write durable; a read-only device has nothing to flush.
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range_u64(self, offset, len)?;
        let aligned = offset.is_multiple_of(u64::from(self.sector))
            && len.is_multiple_of(u64::from(self.sector));
        let done = match (self.block, aligned) {
            (true, true) => crate::ioctl::zero_out(&self.file, offset, len),
            (false, _) => crate::ioctl::punch_hole(&self.file, offset, len)
                .and_then(|()| self.file.sync_data()),
            (true, false) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        match done {
            Ok(()) => Ok(()),
            // No offload here (a file system without holes, a device that refuses the
            // range): write the zeroes.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                tracing::debug!(device = %self.name, offset, len, error = %e, "no zeroing offload; writing zeroes");
                write_zero_buffers(self, offset, len)
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{}: zeroing {len} bytes at {offset}: {e}", self.name),
            )),
        }
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range_u64(self, offset, len)?;
        let done = if self.block {
            crate::ioctl::discard(&self.file, offset, len)
        } else {
            crate::ioctl::punch_hole(&self.file, offset, len).and_then(|()| self.file.sync_data())
        };
        match done {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                Ok(false)
            }
            Err(e) => Err(io::Error::new(
                e.kind(),
                format!("{}: discarding {len} bytes at {offset}: {e}", self.name),
            )),
        }
    }
}

/// Fills as much of `buf` as the file has at `offset`; returns how much that was.
fn read_direct(file: &File, buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// A device held in memory.
#[derive(Debug)]
pub struct MemDevice {
    name: String,
    sector: u32,
    data: Mutex<Vec<u8>>,
}

impl MemDevice {
    /// A zero-filled device of `size` bytes.
    pub fn new(name: &str, size: u64, sector: u32) -> Self {
        Self::from_bytes(name, vec![0; size as usize], sector)
    }

    /// A device holding `data`.
    pub fn from_bytes(name: &str, data: Vec<u8>, sector: u32) -> Self {
        Self {
            name: name.to_owned(),
            sector,
            data: Mutex::new(data),
        }
    }

    /// A copy of the whole content.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u8>> {
        // A poisoned lock only means another test thread panicked; the bytes are still valid.
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl BlockDevice for MemDevice {
    fn name(&self) -> &str {
        &self.name
    }
    fn size(&self) -> u64 {
        self.lock().len() as u64
    }
    fn logical_sector_size(&self) -> u32 {
        self.sector
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        let d = self.lock();
        buf.copy_from_slice(&d[offset as usize..offset as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        let mut d = self.lock();
        d[offset as usize..offset as usize + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range_u64(self, offset, len)?;
        self.lock()[offset as usize..(offset + len) as usize].fill(0);
        Ok(())
    }
}

/// A shared device is still a device (tests keep a handle to inspect it afterwards).
impl<D: BlockDevice + ?Sized> BlockDevice for Arc<D> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn size(&self) -> u64 {
        (**self).size()
    }
    fn logical_sector_size(&self) -> u32 {
        (**self).logical_sector_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        (**self).flush()
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        (**self).write_zeroes(offset, len)
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        (**self).discard(offset, len)
    }
}

/// What a [`FaultyDevice`] does wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Writes number `n` (0-based) and every later one fail without touching the device, as
    /// if the machine stopped just before it.
    StopBeforeWrite(usize),
    /// Write number `n` lands only its first `bytes` bytes, then the device stops.
    TearWrite {
        /// Index of the torn write.
        n: usize,
        /// How many of its bytes reach the device.
        bytes: usize,
    },
    /// Reads that touch `[start, end)` fail.
    FailReads {
        /// First failing byte.
        start: u64,
        /// End of the failing range.
        end: u64,
    },
}

/// Wraps a device and injects one [`Fault`]. Write numbers count on a clock that several
/// devices may share ([`FaultyDevice::sharing`]), so "the machine stops before its N-th write"
/// holds across all the PVs of a VG.
pub struct FaultyDevice<D> {
    inner: D,
    fault: Fault,
    writes: Arc<AtomicUsize>,
}

impl<D: BlockDevice> FaultyDevice<D> {
    /// Wraps `inner`, counting its writes alone.
    pub fn new(inner: D, fault: Fault) -> Self {
        Self::sharing(inner, fault, Arc::new(AtomicUsize::new(0)))
    }

    /// Wraps `inner`, counting writes on `clock` together with other devices.
    pub fn sharing(inner: D, fault: Fault, clock: Arc<AtomicUsize>) -> Self {
        Self {
            inner,
            fault,
            writes: clock,
        }
    }

    /// The wrapped device, as the fault left it.
    pub fn into_inner(self) -> D {
        self.inner
    }
}

fn injected(dev: &str, what: &str) -> io::Error {
    io::Error::other(format!("{dev}: injected fault: {what}"))
}

impl<D: BlockDevice> BlockDevice for FaultyDevice<D> {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn size(&self) -> u64 {
        self.inner.size()
    }
    fn logical_sector_size(&self) -> u32 {
        self.inner.logical_sector_size()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        if let Fault::FailReads { start, end } = self.fault {
            if offset < end && offset + buf.len() as u64 > start {
                return Err(injected(self.name(), "read error"));
            }
        }
        self.inner.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        match self.next_write() {
            Landing::Whole => self.inner.write_at(offset, buf),
            Landing::Part(bytes) => {
                self.inner.write_at(offset, &buf[..bytes.min(buf.len())])?;
                Err(injected(self.name(), "torn write"))
            }
            Landing::None => Err(injected(self.name(), "stopped")),
        }
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    /// One write on the fault's clock; a torn one zeroes only its first bytes.
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        match self.next_write() {
            Landing::Whole => self.inner.write_zeroes(offset, len),
            Landing::Part(bytes) => {
                self.inner.write_zeroes(offset, (bytes as u64).min(len))?;
                Err(injected(self.name(), "torn write"))
            }
            Landing::None => Err(injected(self.name(), "stopped")),
        }
    }
    /// One write on the fault's clock.
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        match self.next_write() {
            Landing::Whole => self.inner.discard(offset, len),
            Landing::Part(_) | Landing::None => Err(injected(self.name(), "stopped")),
        }
    }
}

/// How much of the next write of a [`FaultyDevice`] reaches the device.
enum Landing {
    Whole,
    /// Its first bytes, then the device stops.
    Part(usize),
    None,
}

impl<D: BlockDevice> FaultyDevice<D> {
    fn next_write(&self) -> Landing {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        match self.fault {
            Fault::StopBeforeWrite(stop) if n >= stop => Landing::None,
            Fault::TearWrite { n: t, bytes } if n == t => Landing::Part(bytes),
            Fault::TearWrite { n: t, .. } if n > t => Landing::None,
            _ => Landing::Whole,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_device_bounds() {
        let d = MemDevice::new("m", 1024, 512);
        let mut b = [0u8; 16];
        assert!(d.read_at(1016, &mut b).is_err());
        d.write_at(1000, &[7; 16]).expect("in range");
        d.read_at(1000, &mut b).expect("in range");
        assert_eq!(b, [7; 16]);
        assert!(d.read_at(u64::MAX, &mut b).is_err());
    }

    #[test]
    fn faulty_device_stops_and_tears() {
        let d = FaultyDevice::new(
            MemDevice::new("m", 4096, 512),
            Fault::TearWrite { n: 1, bytes: 3 },
        );
        d.write_at(0, &[1; 8]).expect("first write lands");
        assert!(d.write_at(8, &[2; 8]).is_err());
        assert!(d.write_at(16, &[3; 8]).is_err());
        let bytes = d.into_inner().to_bytes();
        assert_eq!(
            &bytes[..24],
            &[1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn zeroes_land_where_asked() {
        let d = MemDevice::from_bytes("m", vec![9; 8192], 512);
        d.write_zeroes(512, 1024).expect("in range");
        assert!(d.write_zeroes(8000, 512).is_err());
        let b = d.to_bytes();
        assert!(b[..512].iter().all(|&x| x == 9));
        assert!(b[512..1536].iter().all(|&x| x == 0));
        assert!(b[1536..].iter().all(|&x| x == 9));
        assert!(
            !d.discard(0, 512).expect("in range"),
            "memory does not discard"
        );
        let f = FaultyDevice::new(d, Fault::TearWrite { n: 1, bytes: 100 });
        f.write_zeroes(0, 10).expect("first lands");
        assert!(f.write_zeroes(2048, 1024).is_err());
        assert!(f.write_zeroes(4096, 10).is_err());
        let b = f.into_inner().to_bytes();
        assert!(b[2048..2148].iter().all(|&x| x == 0));
        assert!(
            b[2148..4096].iter().all(|&x| x == 9),
            "torn after 100 bytes"
        );
        assert!(b[4096..4106].iter().all(|&x| x == 9), "stopped");
    }

    #[test]
    fn file_device_zeroes_an_image_range() {
        let path = std::env::temp_dir().join(format!("lvmeta-zero-{}", std::process::id()));
        std::fs::write(&path, vec![5u8; 3 << 20]).expect("temp file");
        let d = FileDevice::open_rw(&path).expect("open");
        d.write_zeroes(1 << 20, 1 << 20).expect("zero");
        assert!(d.discard(0, 4096).expect("punch"));
        let b = std::fs::read(&path).expect("read back");
        assert_eq!(b.len(), 3 << 20, "size kept");
        assert!(b[..4096].iter().all(|&x| x == 0));
        assert!(b[4096..1 << 20].iter().all(|&x| x == 5));
        assert!(b[1 << 20..2 << 20].iter().all(|&x| x == 0));
        assert!(b[2 << 20..].iter().all(|&x| x == 5));
        std::fs::remove_file(&path).expect("cleanup");
    }

    #[test]
    fn file_device_unaligned_io() {
        let dir = std::env::temp_dir().join(format!("lvmeta-dev-{}", std::process::id()));
        std::fs::write(&dir, vec![0u8; 10000]).expect("temp file");
        let d = FileDevice::open_rw(&dir).expect("open");
        assert_eq!(d.size(), 10000);
        d.write_at(4090, b"hello world").expect("write");
        let mut b = [0u8; 11];
        d.read_at(4090, &mut b).expect("read");
        assert_eq!(&b, b"hello world");
        let mut tail = [1u8; 10];
        d.read_at(9990, &mut tail).expect("read tail");
        assert_eq!(tail, [0; 10]);
        std::fs::remove_file(&dir).expect("cleanup");
    }
}
