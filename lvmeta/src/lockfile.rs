//! lvm2's per-host file locks, so that stock lvm commands on the same host serialise with
//! lvmeta: `flock(2)` on `<locking_dir>/V_<vg>` for a VG and `P_global` / `P_orphans` for the
//! global and orphan-PV locks (lvm2 `lib/locking/file_locking.c`, `lvm-flock.c`).
//!
//! lvm2 unlinks a lock file when it releases it and nobody else holds it, so a lock is only
//! held once the file that was locked is still the one at the path (same inode); otherwise
//! the attempt is repeated on the new file.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// lvm2's default `global/locking_dir`.
pub const DEFAULT_LOCK_DIR: &str = "/run/lock/lvm";

/// A lock lvm2 knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resource {
    /// `P_global`: PV and VG name space changes (pvcreate, vgcreate, vgremove, ...).
    Global,
    /// `P_orphans`: PVs that belong to no VG.
    Orphans,
    /// `V_<name>`: one VG.
    Vg(String),
}

impl Resource {
    fn file_name(&self) -> String {
        match self {
            Resource::Global => "P_global".into(),
            Resource::Orphans => "P_orphans".into(),
            Resource::Vg(name) => format!("V_{name}"),
        }
    }
}

/// A held lock; released (and its file removed when unused, as lvm2 does) on drop.
#[derive(Debug)]
pub struct FileLock {
    file: File,
    path: PathBuf,
}

/// Takes `res` in `dir`, exclusive or shared, waiting for other holders.
pub fn lock(dir: &Path, res: &Resource, exclusive: bool) -> io::Result<FileLock> {
    std::fs::create_dir_all(dir)?;
    let path = dir.join(res.file_name());
    loop {
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(&path)?;
        if exclusive {
            file.lock()?;
        } else {
            file.lock_shared()?;
        }
        // The holder before us may have removed the file: then lock the new one.
        match std::fs::metadata(&path) {
            Ok(m) if m.ino() == file.metadata()?.ino() => {
                tracing::debug!(path = %path.display(), exclusive, "file lock taken");
                return Ok(FileLock { file, path });
            }
            Ok(_) => continue,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        }
    }
}

impl Drop for FileLock {
    fn drop(&mut self) {
        // Remove the file only if nobody else holds or waits on it (lvm2's `_undo_flock`).
        if self.file.try_lock().is_ok() {
            let same = std::fs::metadata(&self.path)
                .ok()
                .zip(self.file.metadata().ok())
                .is_some_and(|(a, b)| a.ino() == b.ino());
            if same {
                let _ = std::fs::remove_file(&self.path);
            }
        }
        let _ = self.file.unlock();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn exclusive_waits_and_files_are_named_like_lvm2() {
        let dir = tempdir();
        let held = lock(&dir, &Resource::Vg("vg0".into()), true).expect("lock");
        assert!(dir.join("V_vg0").exists());
        let (tx, rx) = mpsc::channel();
        let d = dir.clone();
        let t = std::thread::spawn(move || {
            let _l = lock(&d, &Resource::Vg("vg0".into()), true).expect("lock");
            tx.send(()).expect("send");
        });
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
        drop(held);
        rx.recv_timeout(Duration::from_secs(5))
            .expect("second holder ran");
        t.join().expect("thread");
        assert!(!dir.join("V_vg0").exists());
        let g = lock(&dir, &Resource::Global, false).expect("lock");
        let o = lock(&dir, &Resource::Orphans, false).expect("lock");
        assert!(dir.join("P_global").exists() && dir.join("P_orphans").exists());
        drop((g, o));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempdir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "lvmeta-lock-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&d).expect("mkdir");
        d
    }
}
