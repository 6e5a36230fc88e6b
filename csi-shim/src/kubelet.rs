//! Paths of node RPCs, resolved beneath the kubelet directory instead of compared as text.
//!
//! A staging or target path is split into its parent directory, opened component by
//! component strictly below the kubelet directory (`openat2` with `RESOLVE_BENEATH` and
//! `RESOLVE_NO_SYMLINKS`), and its last name. Everything the node then does there goes
//! through that open parent (`/proc/self/fd/<parent>/<name>`), so a path swapped for a
//! symlink after the check cannot send a mount or an unlink elsewhere.
//!
//! Invariants:
//! - a [`Place`] is strictly below the kubelet directory, and no component of it (its last
//!   name included, when opened) is a symlink;
//! - nothing here creates more than the last name (the kubelet makes the parents).

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use tonic::Status;

use crate::params::shown;

/// The kubelet directory, held open.
#[derive(Debug)]
pub struct KubeletDir {
    root: OwnedFd,
    /// As configured (what request paths start with).
    shown: PathBuf,
    /// Without symlinks (what mountinfo shows).
    real: PathBuf,
}

/// A path below the kubelet directory: its parent held open, and its last name.
#[derive(Debug)]
pub struct Place {
    parent: OwnedFd,
    name: OsString,
    path: PathBuf,
}

fn how(flags: OFlag) -> OpenHow {
    OpenHow::new().flags(flags | OFlag::O_CLOEXEC).resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    )
}

fn io_of(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

impl KubeletDir {
    /// Opens `dir` (made when missing).
    pub fn open(dir: &Path) -> io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let real = std::fs::canonicalize(dir)?;
        let root = nix::fcntl::open(
            &real,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(io_of)?;
        Ok(Self {
            root,
            shown: dir.to_path_buf(),
            real,
        })
    }

    /// The directory as configured.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// The path argument `field` of a node RPC: required, absolute, strictly below the
    /// kubelet directory, every component a plain name, within Linux's path limits and
    /// without a NUL byte ([`crate::bounds::path`]). `None` when its parent does not exist
    /// (so neither does it); INVALID_ARGUMENT naming what is wrong otherwise, a symlink
    /// anywhere included.
    pub fn place(&self, field: &str, p: &str) -> Result<Option<Place>, Status> {
        if p.is_empty() {
            return Err(Status::invalid_argument(format!("{field} is required")));
        }
        crate::bounds::path(field, p)?;
        let bad = |why: &str| Status::invalid_argument(format!("{field} {} {why}", shown(p)));
        let rel = Path::new(p).strip_prefix(&self.shown).map_err(|_| {
            bad(&format!(
                "is not under the kubelet directory {}",
                self.shown.display()
            ))
        })?;
        let mut names: Vec<&OsStr> = Vec::new();
        for c in rel.components() {
            match c {
                Component::Normal(n) => names.push(n),
                _ => return Err(bad("must be absolute, without '..'")),
            }
        }
        if !Path::new(p).is_absolute() {
            return Err(bad("must be absolute"));
        }
        let Some((name, dirs)) = names.split_last() else {
            return Err(bad(
                "must be below the kubelet directory, not the directory itself",
            ));
        };
        let parent = if dirs.is_empty() {
            self.root
                .try_clone()
                .map_err(|e| Status::internal(e.to_string()))?
        } else {
            let sub: PathBuf = dirs.iter().collect();
            match openat2(
                self.root.as_fd(),
                &sub,
                how(OFlag::O_PATH | OFlag::O_DIRECTORY),
            ) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Ok(None),
                Err(e) => return Err(resolve_error(field, p, e)),
            }
        };
        let path = names.iter().fold(self.real.clone(), |a, n| a.join(n));
        // The last name may not exist yet; if it does, it may not be a symlink either.
        match openat2(parent.as_fd(), *name, how(OFlag::O_PATH)) {
            Ok(_) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(resolve_error(field, p, e)),
        }
        Ok(Some(Place {
            parent,
            name: (*name).to_owned(),
            path,
        }))
    }
}

/// INVALID_ARGUMENT for a path that cannot be resolved safely (a symlink, an escape) or at
/// all (too long), the OS error otherwise.
fn resolve_error(field: &str, p: &str, e: Errno) -> Status {
    let p = shown(p);
    match e {
        Errno::ELOOP => Status::invalid_argument(format!(
            "{field} {p}: a component is a symbolic link (not followed)"
        )),
        Errno::EXDEV => {
            Status::invalid_argument(format!("{field} {p} leads out of the kubelet directory"))
        }
        Errno::ENOTDIR => {
            Status::invalid_argument(format!("{field} {p}: a component is not a directory"))
        }
        Errno::ENAMETOOLONG => Status::invalid_argument(format!("{field} {p}: {e}")),
        e => Status::internal(format!("{field} {p}: {e}")),
    }
}

impl Place {
    /// The full path, without symlinks (as mountinfo shows it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same place, with its own descriptor of the parent.
    pub fn duplicate(&self) -> io::Result<Place> {
        Ok(Place {
            parent: self.parent.try_clone()?,
            name: self.name.clone(),
            path: self.path.clone(),
        })
    }

    /// Opens the place itself (`O_PATH`, through a mount on it); `None` when it does not
    /// exist, an error when it is a symlink.
    pub fn open(&self) -> io::Result<Option<OwnedFd>> {
        self.open_with(OFlag::O_PATH)
    }

    /// Opens the place for reading (a block device bound there); `None` when absent.
    pub fn open_read(&self) -> io::Result<Option<OwnedFd>> {
        self.open_with(OFlag::O_RDONLY)
    }

    fn open_with(&self, flags: OFlag) -> io::Result<Option<OwnedFd>> {
        match openat2(self.parent.as_fd(), self.name.as_os_str(), how(flags)) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT) => Ok(None),
            Err(Errno::ELOOP) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a symbolic link (not followed)", self.path.display()),
            )),
            Err(e) => Err(io::Error::new(
                io_of(e).kind(),
                format!("{}: {e}", self.path.display()),
            )),
        }
    }

    /// The path of the place for this process's own system calls, through the open parent
    /// (mounts on the place are followed, nothing else is resolved again).
    pub fn via_parent(&self) -> PathBuf {
        Path::new(&format!("/proc/self/fd/{}", self.parent.as_raw_fd())).join(&self.name)
    }

    /// The same path for a child process (which has no copy of the parent's descriptor).
    pub fn for_child(&self) -> PathBuf {
        Path::new(&format!(
            "/proc/{}/fd/{}",
            std::process::id(),
            self.parent.as_raw_fd()
        ))
        .join(&self.name)
    }

    /// Makes the place a directory, unless it is one; false when it was there already.
    pub fn make_dir(&self) -> io::Result<bool> {
        match nix::sys::stat::mkdirat(
            self.parent.as_fd(),
            self.name.as_os_str(),
            Mode::from_bits_truncate(0o750),
        ) {
            Ok(()) => Ok(true),
            Err(Errno::EEXIST) => self.expect(true).map(|()| false),
            Err(e) => Err(self.err("mkdir", e)),
        }
    }

    /// Makes the place an empty regular file, unless it is one; false when it was there.
    pub fn make_file(&self) -> io::Result<bool> {
        let flags = OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW;
        let made = nix::fcntl::openat(
            self.parent.as_fd(),
            self.name.as_os_str(),
            flags | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o640),
        );
        match made {
            Ok(_) => Ok(true),
            Err(Errno::EEXIST) => self.expect(false).map(|()| false),
            Err(e) => Err(self.err("create", e)),
        }
    }

    /// Checks that the place is a directory (`dir`) or a regular file.
    fn expect(&self, dir: bool) -> io::Result<()> {
        let fd = self
            .open()?
            .ok_or_else(|| self.err("open", Errno::ENOENT))?;
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| self.err("stat", e))?;
        let kind = st.st_mode & nix::libc::S_IFMT;
        let want = if dir {
            nix::libc::S_IFDIR
        } else {
            nix::libc::S_IFREG
        };
        if kind == want {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and is not a {}",
                    self.path.display(),
                    if dir { "directory" } else { "regular file" }
                ),
            ))
        }
    }

    /// Removes the place: an empty directory or a file (`dir` says which); absent is fine,
    /// a directory that is not empty is left and is an error.
    pub fn remove(&self, dir: bool) -> io::Result<()> {
        let flag = if dir {
            nix::unistd::UnlinkatFlags::RemoveDir
        } else {
            nix::unistd::UnlinkatFlags::NoRemoveDir
        };
        match nix::unistd::unlinkat(self.parent.as_fd(), self.name.as_os_str(), flag) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(self.err("remove", e)),
        }
    }

    /// Removes the place, an empty directory or a file, whichever it is.
    pub fn remove_any(&self) -> io::Result<()> {
        use nix::unistd::{unlinkat, UnlinkatFlags};
        let name = self.name.as_os_str();
        match unlinkat(self.parent.as_fd(), name, UnlinkatFlags::RemoveDir) {
            Err(Errno::ENOTDIR) => self.remove(false),
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(self.err("remove", e)),
        }
    }

    fn err(&self, what: &str, e: Errno) -> io::Error {
        io::Error::new(
            io_of(e).kind(),
            format!("{what} {}: {e}", self.path.display()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_stay_strictly_below_and_never_follow_symlinks() {
        let tmp = tempfile::tempdir().expect("tmp");
        let k = tmp.path().join("kubelet");
        let dir = KubeletDir::open(&k).expect("open");
        std::fs::create_dir_all(k.join("pods/a")).expect("dirs");
        std::os::unix::fs::symlink("/etc", k.join("link")).expect("link");
        std::os::unix::fs::symlink("/etc", k.join("pods/a/link")).expect("link");
        let s = |p: &str| k.join(p).display().to_string();
        let code = |p: &str| {
            dir.place("target_path", p)
                .map(|_| ())
                .map_err(|e| e.code())
        };
        assert_eq!(code(&s("pods/a/t")), Ok(()));
        assert_eq!(code(""), Err(tonic::Code::InvalidArgument));
        assert_eq!(
            code(&k.display().to_string()),
            Err(tonic::Code::InvalidArgument)
        );
        assert_eq!(code("/etc/passwd"), Err(tonic::Code::InvalidArgument));
        assert_eq!(code(&s("pods/../../x")), Err(tonic::Code::InvalidArgument));
        // `.` changes nothing (the path is taken component by component).
        assert_eq!(code(&s("pods/./a/t")), Ok(()));
        // A symlink anywhere: refused.
        assert_eq!(code(&s("link/newdir")), Err(tonic::Code::InvalidArgument));
        assert_eq!(code(&s("link")), Err(tonic::Code::InvalidArgument));
        assert_eq!(code(&s("pods/a/link")), Err(tonic::Code::InvalidArgument));
        // Made a symlink after the check: still never followed.
        let later = dir
            .place("t", &s("pods/a/later"))
            .expect("ok")
            .expect("parent");
        std::os::unix::fs::symlink("/etc", k.join("pods/a/later")).expect("link");
        assert!(later.open().is_err(), "a symlink is never opened");
        assert!(later.make_dir().is_err(), "nor taken for a directory");
        assert!(later.make_file().is_err(), "nor for a file");
        std::fs::remove_file(k.join("pods/a/later")).expect("unlink");
        // Paths no system call takes: refused as arguments, not failed as calls.
        assert_eq!(code(&s("pods/a\0b")), Err(tonic::Code::InvalidArgument));
        assert_eq!(
            code(&s(&format!("pods/{}", "n".repeat(256)))),
            Err(tonic::Code::InvalidArgument)
        );
        assert_eq!(
            code(&s(&"p/".repeat(2100))),
            Err(tonic::Code::InvalidArgument)
        );
        // A missing parent: nothing there.
        assert!(dir
            .place("target_path", &s("pods/none/t"))
            .expect("text ok")
            .is_none());
        // Made and removed through the parent.
        let p = dir.place("t", &s("pods/a/t")).expect("ok").expect("parent");
        assert!(p.make_dir().expect("mkdir"));
        assert!(!p.make_dir().expect("there"));
        assert!(p.make_file().is_err(), "a directory is not a file");
        p.remove(true).expect("rmdir");
        assert!(p.open().expect("open").is_none());
        assert!(p.make_file().expect("create"));
        p.remove(false).expect("unlink");
    }
}
