//! `lvextend|lvreduce|lvresize -r`: the filesystem on an active LV resized with it, as
//! lvm2's fsadm does it.
//! - ext2/3/4: `e2fsck -f -p` first when unmounted, then `resize2fs` (grown online when
//!   mounted; shrunk only unmounted, before the LV is).
//! - xfs: grown with `xfs_growfs` where it is mounted, or mounted for it on a private
//!   directory; xfs cannot shrink.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use lvmeta::dev::FileDevice;
use lvmeta::signature::{inspect_device, Found};

use crate::args::{device_numbers, failed};

/// A filesystem lvmeta resizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fs {
    /// ext2, ext3 or ext4.
    Ext,
    /// xfs.
    Xfs,
}

/// The filesystem on the LV's device `dev`; fails for anything else (lvm2's fsadm does too).
pub fn detect(dev: &Path) -> Result<Fs, (u8, String)> {
    let d = FileDevice::open(dev).map_err(failed)?;
    match inspect_device(&d, 0..0).map_err(failed)? {
        Some(Found::Filesystem("ext2/3/4")) => Ok(Fs::Ext),
        Some(Found::Filesystem("xfs")) => Ok(Fs::Xfs),
        Some(other) => Err(failed(format!(
            "{}: cannot resize {other}: lvmeta resizes ext2/3/4 and xfs",
            dev.display()
        ))),
        None => Err(failed(format!(
            "{}: no filesystem to resize",
            dev.display()
        ))),
    }
}

/// Where the filesystem on `dev` is mounted, from this process's mount table.
fn mountpoint(dev: &Path) -> Option<PathBuf> {
    let (major, minor) = device_numbers(dev)?;
    let want = format!("{major}:{minor}");
    let table = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    table.lines().find_map(|l| {
        let mut f = l.split(' ');
        let (_, _, numbers, _, point) = (f.next()?, f.next()?, f.next()?, f.next()?, f.next()?);
        (numbers == want).then(|| PathBuf::from(point.replace("\\040", " ")))
    })
}

/// Runs `tool args`; its failure is the command's.
fn run(tool: &str, args: &[&str]) -> Result<(), (u8, String)> {
    tracing::info!(tool, ?args, "resizing the filesystem");
    let st = Command::new(tool)
        .args(args)
        .status()
        .map_err(|e| failed(format!("{tool}: {e}")))?;
    // e2fsck -p: 1 means errors were corrected.
    match st.code() {
        Some(0) => Ok(()),
        Some(1) if tool == "e2fsck" => Ok(()),
        _ => Err(failed(format!("{tool} {} failed: {st}", args.join(" ")))),
    }
}

/// Shrinks the filesystem on `dev` to `bytes`, before the LV is reduced.
pub fn shrink(dev: &Path, fs: Fs, bytes: u64) -> Result<(), (u8, String)> {
    let path = dev.display().to_string();
    match fs {
        Fs::Xfs => Err(failed(format!("{path}: xfs cannot be reduced"))),
        Fs::Ext if mountpoint(dev).is_some() => Err(failed(format!(
            "{path}: a mounted ext filesystem is not reduced; unmount it first"
        ))),
        Fs::Ext => {
            run("e2fsck", &["-f", "-p", &path])?;
            run("resize2fs", &[&path, &format!("{}K", bytes / 1024)])
        }
    }
}

/// Grows the filesystem on `dev` to its device's size, after the LV's device was.
pub fn grow(dev: &Path, fs: Fs) -> Result<(), (u8, String)> {
    let path = dev.display().to_string();
    let mounted = mountpoint(dev);
    match (fs, mounted) {
        (Fs::Ext, Some(_)) => run("resize2fs", &[&path]),
        (Fs::Ext, None) => {
            run("e2fsck", &["-f", "-p", &path])?;
            run("resize2fs", &[&path])
        }
        (Fs::Xfs, Some(point)) => run("xfs_growfs", &[&point.display().to_string()]),
        (Fs::Xfs, None) => {
            // A new directory of its own, only root's: never one someone else put there.
            let dir = std::env::temp_dir().join(format!("lvmeta-growfs-{}", std::process::id()));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| failed(format!("{}: {e}", dir.display())))?;
            let point = dir.display().to_string();
            let grown = run("mount", &["-t", "xfs", &path, &point]).and_then(|()| {
                let g = run("xfs_growfs", &[&point]);
                run("umount", &[&point]).and(g)
            });
            let _ = std::fs::remove_dir(&dir);
            grown
        }
    }
}
