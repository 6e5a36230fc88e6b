//! lvm2's CRC-32: the IEEE polynomial, reflected, seeded with 0xf597a6cf, no final xor.
//!
//! It protects the label sector, every mda_header and every copy of the metadata text. The
//! relation to the usual zlib CRC lets `crc32fast` do the work:
//! `lvm(buf) = !zlib(buf, init = !seed)`.

/// The seed lvm2 uses for every checksum (`INITIAL_CRC`).
pub const INITIAL_CRC: u32 = 0xf597_a6cf;

/// lvm2's checksum of `buf`.
pub fn calc(buf: &[u8]) -> u32 {
    update(INITIAL_CRC, buf)
}

/// Continues a running lvm2 checksum `crc` over `buf` (used for text that wraps).
pub fn update(crc: u32, buf: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(!crc);
    h.update(buf);
    !h.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors_from_lvm2() {
        assert_eq!(calc(b""), 0xF597A6CF);
        assert_eq!(calc(&[0]), 0x0B2E4887);
        assert_eq!(calc(b"a"), 0x319B1949);
        assert_eq!(calc(b"abc"), 0xC6A054D0);
        assert_eq!(calc(b"123456789"), 0x4991CF02);
        assert_eq!(calc(b"LVM2 001"), 0x5B9BCF05);
        assert_eq!(calc(&[0u8; 512]), 0x6790AECB);
    }

    #[test]
    fn chaining_equals_whole() {
        let data = b"some metadata text that wraps around";
        let (a, b) = data.split_at(11);
        assert_eq!(update(calc(a), b), calc(data));
    }
}
