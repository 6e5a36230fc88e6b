//! [`FileDevice`]: a block device or an image file, O_DIRECT, in one of two write modes.
//!
//! - Metadata mode ([`FileDevice::open_rw`]): O_DSYNC, each write durable when it returns
//!   (what the commit's ordering needs); `flush` has nothing to do.
//! - Data mode ([`FileDevice::open_data`]): plain O_DIRECT writes, durable at `flush`
//!   (`fdatasync`, a cache flush). A dm-thin LV commits its metadata on every FUA or flush
//!   bio, so a served volume must not make every write FUA: the NBD server makes writes
//!   durable with one flush per round of them.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

use super::{check_range, check_range_u64, write_zero_buffers, BlockDevice, Failed};

/// A block device or a regular image file.
///
/// Opened with O_DIRECT where the file system allows it (tmpfs does not: then buffered I/O);
/// writable in metadata or data mode (the module's doc). Transfers whose memory,
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
    /// Data mode: `flush` syncs (in metadata mode every write is already durable, and a
    /// read-only device has none).
    data: bool,
}

/// How a device is opened.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    ReadOnly,
    /// Every write durable when it returns.
    Metadata,
    /// Writes durable at `flush` or when written FUA.
    Data,
}

/// Alignment of bounce buffers in memory, and of transfers to image files.
const DIRECT_ALIGN: usize = 4096;

impl FileDevice {
    /// Opens `path` read-only.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::open_with(path, Mode::ReadOnly)
    }

    /// Opens `path` for reading and writing, each write durable when it returns (metadata
    /// mode: one FUA write instead of a write and a cache flush).
    pub fn open_rw(path: &Path) -> io::Result<Self> {
        Self::open_with(path, Mode::Metadata)
    }

    /// Opens `path` for a data path (data mode: writes durable at `flush`).
    pub fn open_data(path: &Path) -> io::Result<Self> {
        Self::open_with(path, Mode::Data)
    }

    fn open_with(path: &Path, mode: Mode) -> io::Result<Self> {
        let name = path.display().to_string();
        let ctx = |e: io::Error| io::Error::new(e.kind(), format!("{name}: {e}"));
        let mut opts = OpenOptions::new();
        opts.read(true).write(mode != Mode::ReadOnly);
        let dsync = if mode == Mode::Metadata {
            libc::O_DSYNC
        } else {
            0
        };
        let (file, direct) = match opts.clone().custom_flags(libc::O_DIRECT | dsync).open(path) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::debug!(device = %name, "O_DIRECT refused, using buffered I/O");
                (
                    opts.clone().custom_flags(dsync).open(path).map_err(ctx)?,
                    false,
                )
            }
            Err(e) => return Err(ctx(e)),
        };
        let meta = file.metadata().map_err(ctx)?;
        let block = meta.file_type().is_block_device();
        let (size, sector) = if block {
            block_device_geometry(&file).map_err(ctx)?
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
            data: mode == Mode::Data,
        })
    }

    /// Writes `buf` at `offset`, through an aligned bounce buffer when O_DIRECT needs one.
    fn write_through(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        check_range(self, offset, buf.len())?;
        // Unbuffered I/O, or already aligned in memory, offset and length (the commit lays
        // its text out so): no bounce copy.
        if !self.direct || self.is_aligned(offset, buf) {
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

/// A zeroed buffer of `len` bytes whose start is aligned to 4096 bytes, which O_DIRECT
/// accepts on 512- and 4096-byte sectors alike: data held in it reach [`FileDevice`]
/// without a bounce copy.
pub struct AlignedBuf {
    raw: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// A zeroed, aligned buffer of `len` bytes.
    pub fn new(len: usize) -> Self {
        if len == 0 {
            return Self {
                raw: Vec::new(),
                start: 0,
                len: 0,
            };
        }
        let raw = vec![0u8; len + DIRECT_ALIGN];
        let start = raw.as_ptr().align_offset(DIRECT_ALIGN);
        Self { raw, start, len }
    }
    /// The buffer's bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.raw[self.start..self.start + self.len]
    }
    /// The buffer's bytes, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.raw[self.start..self.start + self.len]
    }
    /// The most bytes the buffer can hold without a new allocation.
    pub fn capacity(&self) -> usize {
        self.raw.len().saturating_sub(self.start)
    }
    /// Makes the buffer `len` bytes long, at most its capacity (larger is clamped).
    /// - The bytes are whatever the buffer last held: a reused buffer is not zeroed again.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.capacity());
    }
}

/// Size and logical sector size of a block device, from its end offset and `BLKSSZGET`
/// (one call, where sysfs takes a path walk, an open and a read).
fn block_device_geometry(file: &File) -> io::Result<(u64, u32)> {
    use std::io::{Seek, SeekFrom};
    let size = (&*file).seek(SeekFrom::End(0))?;
    let sector = crate::ioctl::logical_sector_size(file)
        .ok()
        .filter(|s| s.is_power_of_two() && *s >= 512)
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
    fn io_align(&self) -> u32 {
        // Transfers not aligned to this go through a read-modify-write of whole blocks.
        u32::try_from(self.align).unwrap_or(4096)
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
        self.write_through(offset, buf)
    }
    fn flush(&self) -> io::Result<()> {
        match self.data {
            // Data mode: a cache flush (on a dm-thin LV, a metadata commit).
            true => self
                .file
                .sync_data()
                .map_err(|e| Failed::wrap(e, format_args!("{}: flushing", self.name))),
            // O_DSYNC already made every write durable; read-only has nothing to flush.
            false => Ok(()),
        }
    }
    fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        check_range_u64(self, offset, len)?;
        let aligned = offset.is_multiple_of(u64::from(self.sector))
            && len.is_multiple_of(u64::from(self.sector));
        let done = match (self.block, aligned) {
            // The ioctl writes through the device's cache; a flush makes it durable.
            (true, true) => {
                crate::ioctl::zero_out(&self.file, offset, len).and_then(|()| self.file.sync_data())
            }
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
            Err(e) => Err(Failed::wrap(
                e,
                format_args!("{}: zeroing {len} bytes at {offset}", self.name),
            )),
        }
    }
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range_u64(self, offset, len)?;
        let done = if self.block {
            crate::ioctl::discard(&self.file, offset, len).and_then(|()| self.file.sync_data())
        } else {
            crate::ioctl::punch_hole(&self.file, offset, len).and_then(|()| self.file.sync_data())
        };
        match done {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EINVAL)) => {
                Ok(false)
            }
            Err(e) => Err(Failed::wrap(
                e,
                format_args!("{}: discarding {len} bytes at {offset}", self.name),
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The open flags of a descriptor, as /proc reports them.
    fn open_flags(f: &File) -> i32 {
        use std::os::fd::AsRawFd;
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", f.as_raw_fd()))
            .expect("fdinfo");
        let line = info
            .lines()
            .find(|l| l.starts_with("flags:"))
            .expect("flags line");
        i32::from_str_radix(line["flags:".len()..].trim(), 8).expect("octal")
    }

    #[test]
    fn data_mode_writes_durable_at_flush() {
        let path = std::env::temp_dir().join(format!("lvmeta-data-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 1 << 20]).expect("temp file");
        let meta = FileDevice::open_rw(&path).expect("open metadata mode");
        assert_ne!(
            open_flags(&meta.file) & libc::O_DSYNC,
            0,
            "metadata mode: O_DSYNC"
        );
        assert!(!meta.data);
        let d = FileDevice::open_data(&path).expect("open data mode");
        assert_eq!(
            open_flags(&d.file) & libc::O_DSYNC,
            0,
            "data mode: no O_DSYNC"
        );
        assert!(d.data, "data mode: flush syncs");
        let mut aligned = AlignedBuf::new(8192);
        aligned.as_mut_slice().fill(3);
        d.write_at(4096, aligned.as_slice()).expect("aligned write");
        d.write_at(5, b"unaligned").expect("unaligned write");
        d.flush().expect("fdatasync");
        let b = std::fs::read(&path).expect("read back");
        assert_eq!(&b[5..14], b"unaligned");
        assert!(b[4096..12288].iter().all(|&x| x == 3));
        assert_eq!(b.len(), 1 << 20, "size kept");
        std::fs::remove_file(&path).expect("cleanup");
    }
}
