//! lvm2 identifiers: 32 characters from a 64-character alphabet, printed with dashes in
//! groups of 6-4-4-4-4-4-6.

use std::fmt;

/// The alphabet lvm2 accepts in ids, in its order.
const ALPHABET: &[u8; 64] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#";

/// Where the printed form has its dashes.
const DASHES: [usize; 6] = [6, 11, 16, 21, 26, 31];

/// `VALID[b]`: is byte `b` in [`ALPHABET`]?
const VALID: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        t[ALPHABET[i] as usize] = true;
        i += 1;
    }
    t
};

/// A PV, VG or LV id (stored undashed).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Uuid([u8; 32]);

/// Why a string is not an lvm2 id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    /// Not 32 characters once the dashes are removed.
    #[error("id {0:?} does not have 32 characters")]
    Length(String),
    /// A character outside lvm2's alphabet.
    #[error("id {0:?} has a character outside lvm2's alphabet")]
    Alphabet(String),
}

impl Uuid {
    /// Parses the dashed (or undashed) text form; every `-` is ignored, as lvm2 does.
    pub fn parse(s: &str) -> Result<Self, UuidError> {
        // Fast path: the canonical 6-4-4-4-4-4-6 form lvm2 writes.
        let b = s.as_bytes();
        if let Ok(b) = <&[u8; 38]>::try_from(b) {
            if DASHES.iter().all(|&i| b[i] == b'-') {
                // Constant-size copies of the seven groups.
                let mut out = [0u8; 32];
                out[..6].copy_from_slice(&b[..6]);
                for g in 0..5 {
                    out[6 + 4 * g..10 + 4 * g].copy_from_slice(&b[7 + 5 * g..11 + 5 * g]);
                }
                out[26..].copy_from_slice(&b[32..]);
                return Self::from_raw(out).map_err(|_| UuidError::Alphabet(s.to_owned()));
            }
        }
        let mut out = [0u8; 32];
        let mut n = 0;
        for b in s.bytes().filter(|&b| b != b'-') {
            if n == 32 {
                return Err(UuidError::Length(s.to_owned()));
            }
            out[n] = b;
            n += 1;
        }
        if n != 32 {
            return Err(UuidError::Length(s.to_owned()));
        }
        Self::from_raw(out).map_err(|_| UuidError::Alphabet(s.to_owned()))
    }

    /// Takes the 32 undashed bytes of a label.
    pub fn from_raw(raw: [u8; 32]) -> Result<Self, UuidError> {
        // No early exit: valid ids are the rule, and a branch-free pass is shorter for them.
        if raw.iter().fold(true, |ok, &b| ok & VALID[b as usize]) {
            Ok(Self(raw))
        } else {
            Err(UuidError::Alphabet(
                String::from_utf8_lossy(&raw).into_owned(),
            ))
        }
    }

    /// The 32 undashed bytes, as the label stores them.
    pub fn raw(&self) -> &[u8; 32] {
        &self.0
    }

    /// A new random id, generated as lvm2 does (only the 62 alphanumerics).
    pub fn random() -> Self {
        let mut bytes = [0u8; 32];
        let filled = std::fs::File::open("/dev/urandom")
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
        if filled.is_err() {
            // No /dev/urandom: fall back to the hasher's per-process random keys.
            use std::hash::{BuildHasher, Hasher};
            for chunk in bytes.chunks_mut(8) {
                let mut h = std::collections::hash_map::RandomState::new().build_hasher();
                h.write_usize(chunk.as_ptr() as usize);
                chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
            }
        }
        Self(bytes.map(|b| ALPHABET[(b % 62) as usize]))
    }
}

impl Uuid {
    /// The printed form, `xxxxxx-xxxx-xxxx-xxxx-xxxx-xxxx-xxxxxx`, as 38 ASCII bytes.
    pub fn dashed(&self) -> [u8; 38] {
        let mut out = [b'-'; 38];
        let (mut from, mut to) = (0, 0);
        for len in [6, 4, 4, 4, 4, 4, 6] {
            out[to..to + len].copy_from_slice(&self.0[from..from + len]);
            from += len;
            to += len + 1;
        }
        out
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The alphabet is ASCII, so the bytes are valid UTF-8.
        f.write_str(std::str::from_utf8(&self.dashed()).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Uuid({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let u = Uuid::parse("fW2yVk-Bn8X-UGii-8AKu-RZZg-ckDw-TCMbfA").expect("valid");
        assert_eq!(u.to_string(), "fW2yVk-Bn8X-UGii-8AKu-RZZg-ckDw-TCMbfA");
        assert_eq!(u.raw(), b"fW2yVkBn8XUGii8AKuRZZgckDwTCMbfA");
        assert_eq!(Uuid::parse("fW2yVkBn8X-UGii8AKuRZZgckDwTCMbfA"), Ok(u));
    }

    #[test]
    fn rejects() {
        assert!(matches!(Uuid::parse("abc"), Err(UuidError::Length(_))));
        assert!(matches!(
            Uuid::parse(&"a".repeat(33)),
            Err(UuidError::Length(_))
        ));
        assert!(matches!(
            Uuid::parse(&"a$".repeat(16)),
            Err(UuidError::Alphabet(_))
        ));
        let r = Uuid::random();
        assert!(r.raw().iter().all(|b| b.is_ascii_alphanumeric()));
    }
}
