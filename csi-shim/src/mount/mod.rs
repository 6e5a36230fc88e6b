//! What the node does to filesystems and mount points, behind a small trait: [`Real`] does it
//! (mount(2) through the open parent of a [`Place`], mkfs, blkid, resize2fs / xfs_growfs,
//! fstatvfs, fsfreeze), [`Fake`] keeps it in memory for the gRPC tests.
//!
//! Invariants:
//! - a mount, bind or unmount lands exactly on the [`Place`] given, never on a path resolved
//!   again by name;
//! - mount options are checked one by one ([`check_mount_flag`]) before they reach mount(2).

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::process::Command;

use nix::mount::{MntFlags, MsFlags};

use crate::kubelet::Place;

mod fake;
pub use fake::Fake;

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

/// What a bind mount shows.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The filesystem mounted at a place (a staged volume).
    Mount(&'a Place),
    /// A block device node (a block volume).
    Device(&'a Path),
}

/// Filesystem and mount operations of the node.
pub trait System: Send + Sync {
    /// What the mount exactly at `at` shows: the device's `major:minor` (with the root of
    /// the mount appended when that is not the filesystem's root); `None` when `at` is not a
    /// mount point or does not exist.
    fn mounted_device(&self, at: &Place) -> Result<Option<String>, SysError>;
    /// The file name of the device-mapper node (`<dir>/mapper/<name>`, device-mapper's
    /// major) bound exactly at `at` when that node was unlinked since: its device was
    /// removed, or the node made anew; `None` for anything else (assumes nodes made by the
    /// driver, no udev symlinks).
    fn deleted_node(&self, at: &Place) -> Result<Option<String>, SysError>;
    /// The `major:minor` [`System::mounted_device`] gives for the block device node `dev`.
    fn device_id(&self, dev: &Path) -> Result<String, SysError>;
    /// The filesystem on `dev` (`None`: blank).
    fn fs_type(&self, dev: &Path) -> Result<Option<String>, SysError>;
    /// Makes a filesystem `fs` on `dev`.
    fn mkfs(&self, dev: &Path, fs: &str) -> Result<(), SysError>;
    /// Mounts `dev` at `at` as `fs` with mount `flags` (each checked by
    /// [`check_mount_flag`]).
    fn mount(&self, dev: &Path, at: &Place, fs: &str, flags: &[String]) -> Result<(), SysError>;
    /// Bind-mounts `src` onto `at`, read-only when asked.
    fn bind(&self, src: Source<'_>, at: &Place, read_only: bool) -> Result<(), SysError>;
    /// Unmounts the mount at `at`.
    fn umount(&self, at: &Place) -> Result<(), SysError>;
    /// Grows the filesystem `fs` on `dev`, mounted at `at`, to the device's size.
    fn grow(&self, dev: &Path, at: &Place, fs: &str) -> Result<(), SysError>;
    /// Space and inodes of the filesystem mounted at `at`.
    fn usage(&self, at: &Place) -> Result<Usage, SysError>;
    /// Size in bytes of the block device bound at `at`.
    fn device_bytes(&self, at: &Place) -> Result<u64, SysError>;
    /// Freezes the filesystem mounted at `at` (writes wait, everything is on disk), or
    /// thaws it.
    fn freeze(&self, at: &Place, frozen: bool) -> Result<(), SysError>;
}

/// How often an unmount refused as busy is tried again, and how long apart.
const UMOUNT_BUSY_TRIES: u32 = 20;
const UMOUNT_BUSY_WAIT: std::time::Duration = std::time::Duration::from_millis(25);

/// Checks one mount flag of a volume capability: a VFS flag mount(8) knows
/// (`ro`, `noatime`, ...) or a filesystem option `name` / `name=value` of plain characters (no `,`,
/// quote, space or control character: nothing that could smuggle another option in).
pub fn check_mount_flag(f: &str) -> Result<(), String> {
    if vfs_flag(f).is_some() {
        return Ok(());
    }
    let (name, value) = f.split_once('=').unwrap_or((f, ""));
    let name_ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    let value_ok = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"_.:/@+-".contains(&b));
    if !name_ok || !value_ok || f.len() > 256 {
        return Err(format!(
            "mount flag {} is not a plain option",
            crate::params::shown(f)
        ));
    }
    if ["bind", "rbind", "move", "remount", "loop", "x-mount.mkdir"].contains(&name) {
        return Err(format!(
            "mount flag {} is not allowed",
            crate::params::shown(f)
        ));
    }
    Ok(())
}

/// The mount(2) flag a mount(8) option word sets (`true`) or clears (`false`).
fn vfs_flag(word: &str) -> Option<(MsFlags, bool)> {
    Some(match word {
        "ro" => (MsFlags::MS_RDONLY, true),
        "rw" => (MsFlags::MS_RDONLY, false),
        "nosuid" => (MsFlags::MS_NOSUID, true),
        "suid" => (MsFlags::MS_NOSUID, false),
        "nodev" => (MsFlags::MS_NODEV, true),
        "dev" => (MsFlags::MS_NODEV, false),
        "noexec" => (MsFlags::MS_NOEXEC, true),
        "exec" => (MsFlags::MS_NOEXEC, false),
        "sync" => (MsFlags::MS_SYNCHRONOUS, true),
        "async" => (MsFlags::MS_SYNCHRONOUS, false),
        "dirsync" => (MsFlags::MS_DIRSYNC, true),
        "noatime" => (MsFlags::MS_NOATIME, true),
        "atime" => (MsFlags::MS_NOATIME, false),
        "nodiratime" => (MsFlags::MS_NODIRATIME, true),
        "diratime" => (MsFlags::MS_NODIRATIME, false),
        "relatime" => (MsFlags::MS_RELATIME, true),
        "norelatime" => (MsFlags::MS_RELATIME, false),
        "strictatime" => (MsFlags::MS_STRICTATIME, true),
        "lazytime" => (MsFlags::MS_LAZYTIME, true),
        "nolazytime" => (MsFlags::MS_LAZYTIME, false),
        "defaults" => (MsFlags::empty(), true),
        _ => return None,
    })
}

/// The mount(2) flags and data string of checked mount `flags`.
fn mount_args(flags: &[String]) -> Result<(MsFlags, String), String> {
    let mut ms = MsFlags::empty();
    let mut data: Vec<&str> = Vec::new();
    for f in flags {
        check_mount_flag(f)?;
        match vfs_flag(f) {
            Some((bit, true)) => ms |= bit,
            Some((bit, false)) => ms &= !bit,
            None => data.push(f),
        }
    }
    Ok((ms, data.join(",")))
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountLine {
    /// The mount's id.
    pub id: u64,
    /// `major:minor` of the device.
    pub device: String,
    /// The root of the mount within its filesystem (octal escapes undone).
    pub root: String,
    /// Where it is mounted (octal escapes undone).
    pub point: String,
    /// The mount source (octal escapes undone).
    pub source: String,
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

/// Every mount of a `/proc/self/mountinfo` text, oldest first; malformed lines are skipped.
pub fn mounts(mountinfo: &str) -> impl DoubleEndedIterator<Item = MountLine> + '_ {
    mountinfo.lines().filter_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut f = left.split(' ');
        let id = f.next()?.parse().ok()?;
        let device = f.nth(1)?.to_owned();
        let root = unescape(f.next()?);
        let point = unescape(f.next()?);
        Some(MountLine {
            id,
            device,
            root,
            point,
            source: unescape(right.split(' ').nth(1)?),
        })
    })
}

/// The mount id of the open file `fd` (`mnt_id` of `/proc/self/fdinfo`).
fn mount_id(fd: &impl AsRawFd) -> std::io::Result<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:")?.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("no mnt_id in fdinfo"))
}

/// The mount exactly at `at` (its mountinfo line) and what is mounted there; `None` when
/// `at` does not exist or is not a mount point.
fn mount_at(at: &Place) -> Result<Option<(MountLine, nix::sys::stat::FileStat)>, SysError> {
    let Some(fd) = at.open().map_err(|e| sys_err("open", at.path(), e))? else {
        return Ok(None);
    };
    let id = mount_id(&fd).map_err(|e| sys_err("fdinfo", at.path(), e))?;
    let info = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| sys_err("read", Path::new("/proc/self/mountinfo"), e))?;
    let Some(m) = mounts(&info).find(|m| m.id == id) else {
        return Ok(None);
    };
    if Path::new(&m.point) != at.path() {
        return Ok(None);
    }
    let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| sys_err("stat", at.path(), e))?;
    Ok(Some((m, st)))
}

/// Device-mapper's block major (its line in `/proc/devices`); `None` without it.
fn dm_major() -> Option<u32> {
    let devices = std::fs::read_to_string("/proc/devices").ok()?;
    let block = devices.split("Block devices:").nth(1)?;
    block.lines().find_map(|l| {
        let (major, name) = l.trim().split_once(' ')?;
        (name.trim() == "device-mapper").then(|| major.parse().ok())?
    })
}

fn major_minor(rdev: u64) -> String {
    format!("{}:{}", nix::libc::major(rdev), nix::libc::minor(rdev))
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

/// The real thing: mount(2), util-linux, e2fsprogs and xfsprogs.
#[derive(Debug, Default)]
pub struct Real;

impl Real {
    /// Opens `at` (through a mount on it), an error when it is absent.
    fn opened(&self, at: &Place, what: &str) -> Result<std::os::fd::OwnedFd, SysError> {
        at.open()
            .map_err(|e| sys_err(what, at.path(), e))?
            .ok_or_else(|| sys_err(what, at.path(), "does not exist"))
    }
}

impl System for Real {
    fn mounted_device(&self, at: &Place) -> Result<Option<String>, SysError> {
        let Some((m, st)) = mount_at(at)? else {
            return Ok(None);
        };
        if st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFBLK {
            return Ok(Some(major_minor(st.st_rdev)));
        }
        Ok(Some(if m.root == "/" {
            m.device
        } else {
            format!("{}{}", m.device, m.root)
        }))
    }

    fn deleted_node(&self, at: &Place) -> Result<Option<String>, SysError> {
        let Some((m, st)) = mount_at(at)? else {
            return Ok(None);
        };
        if st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFBLK
            || Some(nix::libc::major(st.st_rdev)) != dm_major()
        {
            return Ok(None);
        }
        // mountinfo's root of a bound file that was unlinked: its old path and `//deleted`
        // (the kernel's dentry_path).
        let Some(node) = m.root.strip_suffix("//deleted").map(Path::new) else {
            return Ok(None);
        };
        if node.parent().and_then(Path::file_name) != Some(std::ffi::OsStr::new("mapper")) {
            return Ok(None);
        }
        Ok(node.file_name().map(|n| n.to_string_lossy().into_owned()))
    }

    fn device_id(&self, dev: &Path) -> Result<String, SysError> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let m = std::fs::metadata(dev).map_err(|e| sys_err("stat", dev, e))?;
        if !m.file_type().is_block_device() {
            return Err(sys_err("stat", dev, "not a block device"));
        }
        Ok(major_minor(m.rdev()))
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

    fn mount(&self, dev: &Path, at: &Place, fs: &str, flags: &[String]) -> Result<(), SysError> {
        let (ms, data) = mount_args(flags).map_err(|e| sys_err("mount", at.path(), e))?;
        // Onto exactly the directory opened (no symlink), never a path looked up again.
        let target = self.opened(at, "mount")?;
        let on = format!("/proc/self/fd/{}", target.as_raw_fd());
        let data = (!data.is_empty()).then_some(data.as_str());
        nix::mount::mount(Some(dev), on.as_str(), Some(fs), ms, data)
            .map_err(|e| sys_err("mount", at.path(), e))
    }

    fn bind(&self, src: Source<'_>, at: &Place, read_only: bool) -> Result<(), SysError> {
        let target = self.opened(at, "mount --bind")?;
        let on = format!("/proc/self/fd/{}", target.as_raw_fd());
        let bound = match src {
            Source::Mount(p) => {
                let from = self.opened(p, "mount --bind")?;
                let from = format!("/proc/self/fd/{}", from.as_raw_fd());
                nix::mount::mount(
                    Some(from.as_str()),
                    on.as_str(),
                    None::<&str>,
                    MsFlags::MS_BIND,
                    None::<&str>,
                )
            }
            Source::Device(dev) => nix::mount::mount(
                Some(dev),
                on.as_str(),
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            ),
        };
        bound.map_err(|e| sys_err("mount --bind", at.path(), e))?;
        if read_only {
            // The new mount is on top of the place: reached through the parent.
            let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY;
            let remount = nix::mount::mount(
                None::<&str>,
                &at.via_parent(),
                None::<&str>,
                flags,
                None::<&str>,
            );
            if let Err(e) = remount {
                let _ = self.umount(at);
                return Err(sys_err("mount -o remount,bind,ro", at.path(), e));
            }
        }
        Ok(())
    }

    /// EBUSY is retried for a moment: a child process another thread is starting holds
    /// copies of this process's descriptors (close-on-exec or not) until its exec, and one of
    /// them may be on the mount. A mount in use for real stays busy and fails.
    fn umount(&self, at: &Place) -> Result<(), SysError> {
        let mut tries = 0;
        loop {
            match nix::mount::umount2(&at.via_parent(), MntFlags::UMOUNT_NOFOLLOW) {
                Err(nix::errno::Errno::EBUSY) if tries < UMOUNT_BUSY_TRIES => {
                    tries += 1;
                    std::thread::sleep(UMOUNT_BUSY_WAIT);
                }
                r => return r.map_err(|e| sys_err("umount", at.path(), e)),
            }
        }
    }

    fn grow(&self, dev: &Path, at: &Place, fs: &str) -> Result<(), SysError> {
        match fs {
            "ext4" => run("resize2fs", dev, Command::new("resize2fs").arg(dev)).map(drop),
            "xfs" => run(
                "xfs_growfs",
                at.path(),
                Command::new("xfs_growfs").arg(at.for_child()),
            )
            .map(drop),
            other => Err(sys_err("grow", at.path(), format!("cannot grow {other}"))),
        }
    }

    fn usage(&self, at: &Place) -> Result<Usage, SysError> {
        let fd = self.opened(at, "statvfs")?;
        let s = nix::sys::statvfs::fstatvfs(fd.as_fd())
            .map_err(|e| sys_err("statvfs", at.path(), e))?;
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

    fn freeze(&self, at: &Place, frozen: bool) -> Result<(), SysError> {
        let flag = if frozen { "-f" } else { "-u" };
        run(
            &format!("fsfreeze {flag}"),
            at.path(),
            Command::new("fsfreeze").arg(flag).arg(at.for_child()),
        )
        .map(drop)
    }

    fn device_bytes(&self, at: &Place) -> Result<u64, SysError> {
        use std::io::Seek;
        let fd = at
            .open_read()
            .map_err(|e| sys_err("open", at.path(), e))?
            .ok_or_else(|| sys_err("open", at.path(), "does not exist"))?;
        let mut f = std::fs::File::from(fd);
        f.seek(std::io::SeekFrom::End(0))
            .map_err(|e| sys_err("seek", at.path(), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_read_whole() {
        let info = "22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n\
                    40 22 7:3 / /var/lib/kubelet/a\\040b rw - ext4 /dev/loop3 rw\n\
                    41 22 0:5 /loop3 /mnt/x rw - devtmpfs udev rw\n\
                    garbage\n";
        let all: Vec<MountLine> = mounts(info).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all[1].point, "/var/lib/kubelet/a b");
        assert_eq!(all[1].device, "7:3");
        assert_eq!(all[1].source, "/dev/loop3");
        assert_eq!(all[2].root, "/loop3");
        assert_eq!(all[2].id, 41);
    }

    #[test]
    fn mount_flags_are_checked_one_by_one() {
        for ok in [
            "noatime",
            "ro",
            "discard",
            "data=ordered",
            "errors=remount-ro",
            "commit=30",
        ] {
            assert_eq!(check_mount_flag(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "a,b", "ro,exec", "x=\"y\"", "bind", "remount", "A", "x y", "o=\n",
        ] {
            assert!(check_mount_flag(bad).is_err(), "{bad:?}");
        }
        let (ms, data) =
            mount_args(&["ro".into(), "noatime".into(), "discard".into()]).expect("plain");
        assert!(ms.contains(MsFlags::MS_RDONLY | MsFlags::MS_NOATIME));
        assert_eq!(data, "discard");
    }
}
