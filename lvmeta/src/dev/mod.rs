//! Block devices: the only place lvmeta touches storage.
//!
//! Everything above this module works on byte slices; the scan and commit code reach a device
//! through [`BlockDevice`]. Three implementations: [`FileDevice`] (block devices and regular
//! image files, O_DIRECT with aligned bounce buffers), [`MemDevice`] (tests, fuzzing,
//! benchmarks) and [`FaultyDevice`] (crash and error injection).

mod failed;
mod file;
mod prefetch;

pub use failed::{os_error, Failed};
pub use file::{AlignedBuf, FileDevice};
pub use prefetch::{Prefetched, PREFETCH};

use std::io;
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
    /// The smallest transfer that needs no read-modify-write here: concurrent writers of
    /// smaller or unaligned pieces may overwrite each other's bytes. The logical sector
    /// unless the device says otherwise.
    fn io_align(&self) -> u32 {
        self.logical_sector_size()
    }
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
    fn io_align(&self) -> u32 {
        (**self).io_align()
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
}
