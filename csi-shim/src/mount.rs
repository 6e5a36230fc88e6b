//! What the node does to filesystems and mount points, behind a small trait: [`Real`] does it
//! (mount(8), mkfs, blkid, resize2fs / xfs_growfs, statvfs, fsfreeze), [`Fake`] keeps it in
//! memory for the gRPC tests.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

/// A failed system step: what, on which path, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {path}: {why}")]
pub struct SysError {
    /// The step (`mount`, `mkfs.ext4`, ...).
    pub what: String,
    /// The device or mount point.
    pub path: String,
    /// The tool's or the kernel's message.
    pub why: String,
}

fn sys_err(what: &str, path: &Path, why: impl std::fmt::Display) -> SysError {
    SysError {
        what: what.into(),
        path: path.display().to_string(),
        why: why.to_string(),
    }
}

/// Space and inodes of a mounted filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Usage {
    /// Bytes in all.
    pub bytes_total: u64,
    /// Bytes an unprivileged writer can still use.
    pub bytes_available: u64,
    /// Bytes used.
    pub bytes_used: u64,
    /// Inodes in all.
    pub inodes_total: u64,
    /// Inodes free.
    pub inodes_free: u64,
}

/// Filesystem and mount operations of the node.
pub trait System: Send + Sync {
    /// The source of the mount at `path`, when `path` is a mount point.
    fn mounted(&self, path: &Path) -> Result<Option<String>, SysError>;
    /// The filesystem on `dev` (`None`: blank).
    fn fs_type(&self, dev: &Path) -> Result<Option<String>, SysError>;
    /// Makes a filesystem `fs` on `dev`.
    fn mkfs(&self, dev: &Path, fs: &str) -> Result<(), SysError>;
    /// Mounts `dev` at `path` as `fs` with mount(8) `options`.
    fn mount(&self, dev: &Path, path: &Path, fs: &str, options: &[String]) -> Result<(), SysError>;
    /// Bind-mounts `src` onto `dst`, read-only when asked.
    fn bind(&self, src: &Path, dst: &Path, read_only: bool) -> Result<(), SysError>;
    /// Unmounts `path`.
    fn umount(&self, path: &Path) -> Result<(), SysError>;
    /// Grows the filesystem `fs` on `dev`, mounted at `path`, to the device's size.
    fn grow(&self, dev: &Path, path: &Path, fs: &str) -> Result<(), SysError>;
    /// Space and inodes of the filesystem mounted at `path`.
    fn usage(&self, path: &Path) -> Result<Usage, SysError>;
    /// Size in bytes of the block device (or device file) at `path`.
    fn device_bytes(&self, path: &Path) -> Result<u64, SysError>;
    /// Freezes the filesystem mounted at `path` (writes wait, everything is on disk), or
    /// thaws it.
    fn freeze(&self, path: &Path, frozen: bool) -> Result<(), SysError>;
}

/// Undoes mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every mount of a `/proc/self/mountinfo` text, oldest first: (mount point, source), octal
/// escapes undone; malformed lines are skipped.
pub fn mounts(mountinfo: &str) -> impl DoubleEndedIterator<Item = (String, String)> + '_ {
    mountinfo.lines().filter_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        Some((
            unescape(left.split(' ').nth(4)?),
            unescape(right.split(' ').nth(1)?),
        ))
    })
}

/// The source of the last mount at `path` in a `/proc/self/mountinfo` text.
pub fn mount_source(mountinfo: &str, path: &str) -> Option<String> {
    mounts(mountinfo)
        .rev()
        .find_map(|(point, source)| (point == path).then_some(source))
}

fn run(what: &str, path: &Path, cmd: &mut Command) -> Result<String, SysError> {
    let out = cmd.output().map_err(|e| sys_err(what, path, e))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(sys_err(
            what,
            path,
            String::from_utf8_lossy(&out.stderr).trim(),
        ))
    }
}

/// The real thing: util-linux, e2fsprogs and xfsprogs.
#[derive(Debug, Default)]
pub struct Real;

impl System for Real {
    fn mounted(&self, path: &Path) -> Result<Option<String>, SysError> {
        let info = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| sys_err("read", Path::new("/proc/self/mountinfo"), e))?;
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(mount_source(&info, &path.to_string_lossy()))
    }

    fn fs_type(&self, dev: &Path) -> Result<Option<String>, SysError> {
        let out = Command::new("blkid")
            .args(["-p", "-o", "value", "-s", "TYPE"])
            .arg(dev)
            .output()
            .map_err(|e| sys_err("blkid", dev, e))?;
        match out.status.code() {
            Some(0) => {
                let t = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                Ok((!t.is_empty()).then_some(t))
            }
            // blkid's "nothing found".
            Some(2) => Ok(None),
            _ => Err(sys_err(
                "blkid",
                dev,
                String::from_utf8_lossy(&out.stderr).trim(),
            )),
        }
    }

    fn mkfs(&self, dev: &Path, fs: &str) -> Result<(), SysError> {
        let tool = format!("mkfs.{fs}");
        let mut cmd = Command::new(&tool);
        cmd.arg("-q");
        if fs == "ext4" {
            // No lazy init: the volume is usable at full speed at once.
            cmd.args(["-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]);
        }
        run(&tool, dev, cmd.arg(dev)).map(drop)
    }

    fn mount(&self, dev: &Path, path: &Path, fs: &str, options: &[String]) -> Result<(), SysError> {
        let mut cmd = Command::new("mount");
        cmd.args(["-t", fs]);
        if !options.is_empty() {
            cmd.args(["-o", &options.join(",")]);
        }
        run("mount", path, cmd.arg(dev).arg(path)).map(drop)
    }

    fn bind(&self, src: &Path, dst: &Path, read_only: bool) -> Result<(), SysError> {
        run(
            "mount --bind",
            dst,
            Command::new("mount").arg("--bind").arg(src).arg(dst),
        )?;
        if read_only {
            let remount = run(
                "mount -o remount,bind,ro",
                dst,
                Command::new("mount")
                    .args(["-o", "remount,bind,ro"])
                    .arg(dst),
            );
            if let Err(e) = remount {
                let _ = self.umount(dst);
                return Err(e);
            }
        }
        Ok(())
    }

    fn umount(&self, path: &Path) -> Result<(), SysError> {
        run("umount", path, Command::new("umount").arg(path)).map(drop)
    }

    fn grow(&self, dev: &Path, path: &Path, fs: &str) -> Result<(), SysError> {
        match fs {
            "ext4" => run("resize2fs", dev, Command::new("resize2fs").arg(dev)).map(drop),
            "xfs" => run("xfs_growfs", path, Command::new("xfs_growfs").arg(path)).map(drop),
            other => Err(sys_err("grow", path, format!("cannot grow {other}"))),
        }
    }

    fn usage(&self, path: &Path) -> Result<Usage, SysError> {
        let s = nix::sys::statvfs::statvfs(path).map_err(|e| sys_err("statvfs", path, e))?;
        let frag = s.fragment_size();
        let total = s.blocks() * frag;
        Ok(Usage {
            bytes_total: total,
            bytes_available: s.blocks_available() * frag,
            bytes_used: total.saturating_sub(s.blocks_free() * frag),
            inodes_total: s.files(),
            inodes_free: s.files_free(),
        })
    }

    fn freeze(&self, path: &Path, frozen: bool) -> Result<(), SysError> {
        let flag = if frozen { "-f" } else { "-u" };
        run(
            &format!("fsfreeze {flag}"),
            path,
            Command::new("fsfreeze").arg(flag).arg(path),
        )
        .map(drop)
    }

    fn device_bytes(&self, path: &Path) -> Result<u64, SysError> {
        use std::io::Seek;
        let mut f = std::fs::File::open(path).map_err(|e| sys_err("open", path, e))?;
        f.seek(std::io::SeekFrom::End(0))
            .map_err(|e| sys_err("seek", path, e))
    }
}

/// Mounts and filesystems in memory (tests): devices are blank until `mkfs`, every device
/// is `device_size` bytes.
#[derive(Debug)]
pub struct Fake {
    state: Mutex<FakeState>,
    device_size: u64,
}

#[derive(Debug, Default)]
struct FakeState {
    mounts: HashMap<PathBuf, String>,
    filesystems: HashMap<PathBuf, String>,
    grown: Vec<PathBuf>,
    freezes: Vec<(PathBuf, bool)>,
}

impl Fake {
    /// A fake whose devices all have `device_size` bytes.
    pub fn new(device_size: u64) -> Self {
        Self {
            state: Mutex::new(FakeState::default()),
            device_size,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The mount points, sorted.
    pub fn mounts(&self) -> Vec<PathBuf> {
        let mut v: Vec<PathBuf> = self.lock().mounts.keys().cloned().collect();
        v.sort();
        v
    }

    /// How many times a filesystem was grown.
    pub fn grown(&self) -> usize {
        self.lock().grown.len()
    }

    /// Every freeze (true) and thaw (false), in order.
    pub fn freezes(&self) -> Vec<(PathBuf, bool)> {
        self.lock().freezes.clone()
    }
}

impl System for Fake {
    fn mounted(&self, path: &Path) -> Result<Option<String>, SysError> {
        Ok(self.lock().mounts.get(path).cloned())
    }
    fn fs_type(&self, dev: &Path) -> Result<Option<String>, SysError> {
        Ok(self.lock().filesystems.get(dev).cloned())
    }
    fn mkfs(&self, dev: &Path, fs: &str) -> Result<(), SysError> {
        self.lock().filesystems.insert(dev.into(), fs.into());
        Ok(())
    }
    fn mount(&self, dev: &Path, path: &Path, _fs: &str, _o: &[String]) -> Result<(), SysError> {
        self.lock()
            .mounts
            .insert(path.into(), dev.display().to_string());
        Ok(())
    }
    fn bind(&self, src: &Path, dst: &Path, _read_only: bool) -> Result<(), SysError> {
        self.lock()
            .mounts
            .insert(dst.into(), src.display().to_string());
        Ok(())
    }
    fn umount(&self, path: &Path) -> Result<(), SysError> {
        match self.lock().mounts.remove(path) {
            Some(_) => Ok(()),
            None => Err(sys_err("umount", path, "not mounted")),
        }
    }
    fn grow(&self, dev: &Path, _path: &Path, _fs: &str) -> Result<(), SysError> {
        self.lock().grown.push(dev.into());
        Ok(())
    }
    fn usage(&self, path: &Path) -> Result<Usage, SysError> {
        if !self.lock().mounts.contains_key(path) {
            return Err(sys_err("statvfs", path, "not mounted"));
        }
        Ok(Usage {
            bytes_total: self.device_size,
            bytes_available: self.device_size / 2,
            bytes_used: self.device_size / 2,
            inodes_total: 1024,
            inodes_free: 1000,
        })
    }
    fn device_bytes(&self, _path: &Path) -> Result<u64, SysError> {
        Ok(self.device_size)
    }
    fn freeze(&self, path: &Path, frozen: bool) -> Result<(), SysError> {
        let mut st = self.lock();
        if !st.mounts.contains_key(path) {
            return Err(sys_err("fsfreeze", path, "not mounted"));
        }
        st.freezes.push((path.into(), frozen));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_sources_come_from_mountinfo() {
        let info = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n\
                    40 22 7:3 / /var/lib/kubelet/a\\040b rw - ext4 /dev/loop3 rw\n\
                    41 22 7:3 / /mnt/x rw - ext4 /dev/loop3 rw\n\
                    42 22 7:4 / /mnt/x rw - xfs /dev/loop4 rw\n";
        assert_eq!(mount_source(info, "/"), Some("/dev/sda1".into()));
        assert_eq!(
            mount_source(info, "/var/lib/kubelet/a b"),
            Some("/dev/loop3".into())
        );
        // Stacked mounts: the last one is what the path shows.
        assert_eq!(mount_source(info, "/mnt/x"), Some("/dev/loop4".into()));
        assert_eq!(mount_source(info, "/mnt"), None);
        assert_eq!(mount_source("garbage\n - \n", "/"), None);
    }
}
