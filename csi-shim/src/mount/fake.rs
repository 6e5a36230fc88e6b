//! [`Fake`]: mounts and filesystems in memory, for the gRPC tests.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{mount_args, sys_err, Source, SysError, System, Usage};
use crate::kubelet::Place;

/// Mounts and filesystems in memory (tests): devices are blank until `mkfs`, every device
/// is `device_size` bytes; a device's id is its path.
#[derive(Debug)]
pub struct Fake {
    state: Mutex<FakeState>,
    device_size: u64,
}

#[derive(Debug, Default)]
struct FakeState {
    /// Mount point -> the device it shows.
    mounts: HashMap<PathBuf, String>,
    filesystems: HashMap<PathBuf, String>,
    grown: Vec<PathBuf>,
    freezes: Vec<(PathBuf, bool)>,
    /// Mount points bound to a device node (a block volume's publish, or a foreign one).
    node_binds: HashSet<PathBuf>,
    /// Those of them whose node was deleted since ([`Fake::delete_node`]).
    deleted: HashSet<PathBuf>,
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

    /// Mounts `dev` at `path` behind the driver's back (tests of foreign mounts).
    pub fn mount_foreign(&self, dev: &str, path: &Path) {
        self.lock().mounts.insert(path.into(), dev.into());
    }

    /// Binds device node `dev` at `path` behind the driver's back.
    pub fn bind_foreign_node(&self, dev: &Path, path: &Path) {
        let mut st = self.lock();
        st.mounts.insert(path.into(), dev.display().to_string());
        st.node_binds.insert(path.into());
    }

    /// Deletes device node `dev` as the kernel does when its device goes: the binds of it
    /// stay, showing a deleted node (a node made again later is a new one).
    pub fn delete_node(&self, dev: &Path) {
        let mut st = self.lock();
        let shown = dev.display().to_string();
        let hit: Vec<PathBuf> = st
            .node_binds
            .iter()
            .filter(|at| st.mounts.get(*at) == Some(&shown))
            .cloned()
            .collect();
        st.deleted.extend(hit);
    }

    /// How many times a filesystem was grown.
    pub fn grown(&self) -> usize {
        self.lock().grown.len()
    }

    /// Every freeze (true) and thaw (false), in order.
    pub fn freezes(&self) -> Vec<(PathBuf, bool)> {
        self.lock().freezes.clone()
    }

    fn mounted(&self, at: &Place) -> Result<(), SysError> {
        if self.lock().mounts.contains_key(at.path()) {
            Ok(())
        } else {
            Err(sys_err("fake", at.path(), "not mounted"))
        }
    }
}

impl System for Fake {
    fn mounted_device(&self, at: &Place) -> Result<Option<String>, SysError> {
        Ok(self.lock().mounts.get(at.path()).cloned())
    }
    fn deleted_node(&self, at: &Place) -> Result<Option<String>, SysError> {
        let st = self.lock();
        if !st.deleted.contains(at.path()) {
            return Ok(None);
        }
        Ok(st
            .mounts
            .get(at.path())
            .and_then(|d| Path::new(d).file_name())
            .map(|n| n.to_string_lossy().into_owned()))
    }
    fn device_id(&self, dev: &Path) -> Result<String, SysError> {
        Ok(dev.display().to_string())
    }
    fn fs_type(&self, dev: &Path) -> Result<Option<String>, SysError> {
        Ok(self.lock().filesystems.get(dev).cloned())
    }
    fn mkfs(&self, dev: &Path, fs: &str) -> Result<(), SysError> {
        self.lock().filesystems.insert(dev.into(), fs.into());
        Ok(())
    }
    fn mount(&self, dev: &Path, at: &Place, _fs: &str, flags: &[String]) -> Result<(), SysError> {
        mount_args(flags).map_err(|e| sys_err("mount", at.path(), e))?;
        self.lock()
            .mounts
            .insert(at.path().into(), dev.display().to_string());
        Ok(())
    }
    fn bind(&self, src: Source<'_>, at: &Place, _read_only: bool) -> Result<(), SysError> {
        let mut st = self.lock();
        let shows = match src {
            Source::Mount(p) => st
                .mounts
                .get(p.path())
                .cloned()
                .ok_or_else(|| sys_err("mount --bind", p.path(), "not mounted"))?,
            Source::Device(d) => d.display().to_string(),
        };
        if let Source::Device(_) = src {
            st.node_binds.insert(at.path().into());
        }
        st.deleted.remove(at.path());
        st.mounts.insert(at.path().into(), shows);
        Ok(())
    }
    fn umount(&self, at: &Place) -> Result<(), SysError> {
        let mut st = self.lock();
        st.node_binds.remove(at.path());
        st.deleted.remove(at.path());
        match st.mounts.remove(at.path()) {
            Some(_) => Ok(()),
            None => Err(sys_err("umount", at.path(), "not mounted")),
        }
    }
    fn grow(&self, dev: &Path, _at: &Place, _fs: &str) -> Result<(), SysError> {
        self.lock().grown.push(dev.into());
        Ok(())
    }
    fn usage(&self, at: &Place) -> Result<Usage, SysError> {
        self.mounted(at)?;
        Ok(Usage {
            bytes_total: self.device_size,
            bytes_available: self.device_size / 2,
            bytes_used: self.device_size / 2,
            inodes_total: 1024,
            inodes_free: 1000,
        })
    }
    fn device_bytes(&self, at: &Place) -> Result<u64, SysError> {
        self.mounted(at)?;
        Ok(self.device_size)
    }
    fn freeze(&self, at: &Place, frozen: bool) -> Result<(), SysError> {
        self.mounted(at)?;
        self.lock().freezes.push((at.path().into(), frozen));
        Ok(())
    }
}
