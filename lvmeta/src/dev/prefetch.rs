//! A device seen through the bytes already read from its start: the label (sectors 0-3) and
//! the first metadata area's header (at 4 KiB, where lvm2 puts it) come in one read, as
//! lvm2's label scan reads its first 128 KiB in one.
//! - Read-only: the view never writes, so the bytes it holds cannot go stale under it.

use std::io;

use super::BlockDevice;

/// How much of a device's start one scan read takes: the label and the first area's header.
pub const PREFETCH: usize = 8192;

/// `dev` with its first bytes held in memory (see the module).
pub struct Prefetched<'a> {
    dev: &'a dyn BlockDevice,
    head: Vec<u8>,
}

impl<'a> Prefetched<'a> {
    /// Reads the first `len` bytes of `dev` (fewer on a smaller device) in one read.
    pub fn read(dev: &'a dyn BlockDevice, len: usize) -> io::Result<Self> {
        let n = usize::try_from(dev.size()).map_or(len, |s| s.min(len));
        let mut head = vec![0u8; n];
        dev.read_at(0, &mut head)?;
        Ok(Self { dev, head })
    }

    /// The bytes held.
    pub fn head(&self) -> &[u8] {
        &self.head
    }
}

fn read_only(dev: &dyn BlockDevice) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{}: a read-only view for scanning", dev.name()),
    )
}

impl BlockDevice for Prefetched<'_> {
    fn name(&self) -> &str {
        self.dev.name()
    }
    fn size(&self) -> u64 {
        self.dev.size()
    }
    fn logical_sector_size(&self) -> u32 {
        self.dev.logical_sector_size()
    }
    fn io_align(&self) -> u32 {
        self.dev.io_align()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let held = usize::try_from(offset)
            .ok()
            .and_then(|o| self.head.get(o..o.checked_add(buf.len())?));
        match held {
            Some(bytes) => {
                buf.copy_from_slice(bytes);
                Ok(())
            }
            None => self.dev.read_at(offset, buf),
        }
    }
    fn write_at(&self, _offset: u64, _buf: &[u8]) -> io::Result<()> {
        Err(read_only(self.dev))
    }
    fn flush(&self) -> io::Result<()> {
        Err(read_only(self.dev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dev::MemDevice;

    #[test]
    fn reads_within_the_head_come_from_it_and_others_from_the_device() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let dev = MemDevice::from_bytes("m", data.clone(), 512);
        let v = Prefetched::read(&dev, PREFETCH).expect("read");
        assert_eq!(v.head(), &data[..PREFETCH]);
        // Changed under the view: the held part keeps what was read, the rest is read anew.
        dev.write_at(0, &[9; 16_000]).expect("write");
        let mut a = [0u8; 100];
        v.read_at(4096, &mut a).expect("held");
        assert_eq!(&a[..], &data[4096..4196]);
        let mut b = [0u8; 100];
        v.read_at(8150, &mut b).expect("across the end of the head");
        assert_eq!(&b[..], &[9; 100][..]);
        assert!(v.write_at(0, &[1]).is_err() && v.flush().is_err());
        let small = MemDevice::new("s", 1024, 512);
        assert_eq!(
            Prefetched::read(&small, PREFETCH)
                .expect("small")
                .head()
                .len(),
            1024
        );
    }
}
