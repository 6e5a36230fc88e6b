//! Sizes with their unit, and the one place they convert.
//!
//! - lvm2's text and headers count in 512-byte sectors, whatever the device's logical sector
//!   size; I/O and CSI count in bytes; allocation counts in extents of the VG's extent size.
//! - A value crossing a module boundary carries its unit; raw integers stay inside a module,
//!   in the model's fields (they mirror the text format) and at the I/O edge
//!   ([`crate::dev::BlockDevice`] takes byte offsets).
//! - Conversions say how they round (`sectors_floor`, `sectors_ceil`, `extents_ceil`) and
//!   saturate rather than wrap: a hostile size read from disk becomes a huge size that a bound
//!   check refuses, never a small one.
//! - There is no `Mul` between sizes: a product of two sizes is never a size.

use std::fmt;

/// Bytes in one of lvm2's sectors (the unit of its text format, not the device's).
pub const SECTOR_BYTES: u64 = 512;

/// A size or offset in 512-byte sectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Sectors(pub u64);

/// A size or offset in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Bytes(pub u64);

/// A number of extents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(transparent)]
pub struct Extents(pub u64);

/// A VG's extent size: never zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(transparent)]
pub struct ExtentSize(Sectors);

impl Sectors {
    /// The same size in bytes.
    pub const fn bytes(self) -> Bytes {
        Bytes(self.0.saturating_mul(SECTOR_BYTES))
    }

    /// The sum, or `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }
}

impl Bytes {
    /// Whole sectors in this size (rounded down).
    pub const fn sectors_floor(self) -> Sectors {
        Sectors(self.0 / SECTOR_BYTES)
    }

    /// Sectors covering this size (rounded up).
    pub const fn sectors_ceil(self) -> Sectors {
        Sectors(self.0.div_ceil(SECTOR_BYTES))
    }

    /// Extents of `size` covering this size (rounded up).
    pub const fn extents_ceil(self, size: ExtentSize) -> Extents {
        Extents(self.0.div_ceil(size.bytes().0))
    }

    /// Whole extents of `size` in this size (rounded down).
    pub const fn extents_floor(self, size: ExtentSize) -> Extents {
        Extents(self.0 / size.bytes().0)
    }

    /// The sum, or `None` on overflow.
    pub fn checked_add(self, other: Self) -> Option<Self> {
        self.0.checked_add(other.0).map(Self)
    }

    /// The difference, or `None` below zero.
    pub fn checked_sub(self, other: Self) -> Option<Self> {
        self.0.checked_sub(other.0).map(Self)
    }

    /// The sum, or the largest size on overflow.
    pub const fn saturating_add(self, other: Self) -> Self {
        Self(self.0.saturating_add(other.0))
    }

    /// The difference, or zero below zero.
    pub const fn saturating_sub(self, other: Self) -> Self {
        Self(self.0.saturating_sub(other.0))
    }
}

impl Extents {
    /// These extents of `size`, in bytes.
    pub const fn bytes(self, size: ExtentSize) -> Bytes {
        Bytes(self.0.saturating_mul(size.bytes().0))
    }

    /// These extents of `size`, in sectors.
    pub const fn sectors(self, size: ExtentSize) -> Sectors {
        Sectors(self.0.saturating_mul(size.0 .0))
    }

    /// The count as the model stores it (`None`: too many for lvm2's 32-bit fields).
    pub fn to_u32(self) -> Option<u32> {
        u32::try_from(self.0).ok()
    }
}

impl From<u32> for Extents {
    fn from(n: u32) -> Self {
        Self(u64::from(n))
    }
}

impl ExtentSize {
    /// The smallest: one sector.
    pub const SECTOR: Self = Self(Sectors(1));

    /// An extent size of `sectors`, `None` for zero.
    pub const fn new(sectors: Sectors) -> Option<Self> {
        match sectors.0 {
            0 => None,
            _ => Some(Self(sectors)),
        }
    }

    /// The extent size in sectors.
    pub const fn sectors(self) -> Sectors {
        self.0
    }

    /// The extent size in bytes.
    pub const fn bytes(self) -> Bytes {
        self.0.bytes()
    }
}

impl fmt::Display for Sectors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} sectors", self.0)
    }
}

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes", self.0)
    }
}

impl fmt::Display for Extents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} extents", self.0)
    }
}

impl fmt::Display for ExtentSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "extents of {} bytes", self.bytes().0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn extent() -> impl Strategy<Value = ExtentSize> {
        (1u32..=24).prop_map(|p| ExtentSize::new(Sectors(1 << p)).expect("non-zero"))
    }

    proptest! {
        #[test]
        fn sectors_round_trip_through_bytes(s in 0u64..(u64::MAX / SECTOR_BYTES)) {
            let b = Sectors(s).bytes();
            prop_assert_eq!(b.sectors_floor(), Sectors(s));
            prop_assert_eq!(b.sectors_ceil(), Sectors(s));
        }

        #[test]
        fn rounding_brackets_the_size(b in 0u64..(u64::MAX / 2), size in extent()) {
            let b = Bytes(b);
            let (lo, hi) = (b.sectors_floor().bytes(), b.sectors_ceil().bytes());
            prop_assert!(lo <= b && b <= hi && hi.0 - lo.0 <= SECTOR_BYTES);
            let (lo, hi) = (b.extents_floor(size).bytes(size), b.extents_ceil(size).bytes(size));
            prop_assert!(lo <= b && b <= hi && hi.0 - lo.0 <= size.bytes().0);
            prop_assert_eq!(b.extents_ceil(size).sectors(size).bytes(), hi);
        }

        #[test]
        fn rounding_is_monotonic(a in 0u64..(1 << 50), d in 0u64..(1 << 20), size in extent()) {
            let (x, y) = (Bytes(a), Bytes(a + d));
            prop_assert!(x.sectors_ceil() <= y.sectors_ceil());
            prop_assert!(x.sectors_floor() <= y.sectors_floor());
            prop_assert!(x.extents_ceil(size) <= y.extents_ceil(size));
        }
    }

    #[test]
    fn hostile_sizes_saturate_and_zero_extents_are_refused() {
        assert_eq!(Sectors(u64::MAX).bytes(), Bytes(u64::MAX));
        assert_eq!(
            Extents(u64::MAX).bytes(ExtentSize::new(Sectors(8)).expect("size")),
            Bytes(u64::MAX)
        );
        assert!(ExtentSize::new(Sectors(0)).is_none());
        assert_eq!(Extents(1 << 32).to_u32(), None);
        assert_eq!(Extents(7).to_u32(), Some(7));
        assert_eq!(Bytes(5).checked_sub(Bytes(6)), None);
    }
}
