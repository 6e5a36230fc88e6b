//! An I/O error's account that keeps its OS error code.
//!
//! `io::Error::new(kind, message)` drops the code of the error it describes, so a caller
//! that acts on the code (an NBD server holds EIO, a lost path, rather than answering it)
//! could no longer see it. [`Failed::wrap`] keeps it, and [`os_error`] finds it.

use std::fmt;
use std::io;

/// What failed (device, offset, operation, and the cause's text), and the cause's OS
/// error code.
#[derive(Debug)]
pub struct Failed {
    what: String,
    errno: Option<i32>,
}

impl Failed {
    /// `e` described as `what: e`, of `e`'s kind and code.
    pub fn wrap(e: io::Error, what: impl fmt::Display) -> io::Error {
        let errno = os_error(&e);
        Self::error(e.kind(), format!("{what}: {e}"), errno)
    }

    /// An error of `kind` described by `what`, with OS error code `errno`.
    pub fn error(kind: io::ErrorKind, what: String, errno: Option<i32>) -> io::Error {
        io::Error::new(kind, Failed { what, errno })
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for Failed {}

/// The OS error code of `e`, also when a [`Failed`] describes it.
pub fn os_error(e: &io::Error) -> Option<i32> {
    e.raw_os_error()
        .or_else(|| e.get_ref()?.downcast_ref::<Failed>()?.errno)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_survives_the_account() {
        let eio = io::Error::from_raw_os_error(libc::EIO);
        let wrapped = Failed::wrap(eio, "/dev/x: flushing");
        assert_eq!(os_error(&wrapped), Some(libc::EIO));
        assert!(
            wrapped.to_string().starts_with("/dev/x: flushing: "),
            "{wrapped}"
        );
        let twice = Failed::wrap(wrapped, "again");
        assert_eq!(os_error(&twice), Some(libc::EIO));
        assert_eq!(os_error(&io::Error::other("text only")), None);
    }
}
