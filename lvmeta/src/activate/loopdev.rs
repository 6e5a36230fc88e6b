//! Loop devices as LVs: a one-piece linear LV becomes `/dev/loopN` over its PV's device at
//! the LV's offset, limited to its size, bound in one `LOOP_CONFIGURE` (so the device never
//! shows more than the LV), with direct I/O (no second page cache over a LUN other hosts
//! write) and read-only when asked. This is how LVs are used on kernels without
//! device-mapper; an active LV is found again from sysfs (backing device and offset), so
//! nothing is kept in memory and a restarted process sees what is active.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::ioctl;
use crate::units::Bytes;

use super::{needs_device_mapper, ActivateError, Backend, Piece, Placement};

/// The loop backend (Linux loop driver; `/dev/loop-control` must exist).
#[derive(Debug, Default)]
pub struct LoopBackend;

impl LoopBackend {
    /// The backend, if this host has the loop driver.
    pub fn probe() -> Option<Self> {
        Path::new("/dev/loop-control")
            .exists()
            .then_some(LoopBackend)
    }
}

fn io(device: impl Into<String>, what: &str, e: std::io::Error) -> ActivateError {
    ActivateError::Io {
        device: device.into(),
        why: format!("{what}: {e}"),
    }
}

/// A bound loop device as sysfs shows it.
struct Bound {
    dev: PathBuf,
    backing: PathBuf,
    offset: u64,
    /// Bytes it shows (0: to the end of the backing device).
    limit: u64,
    read_only: bool,
}

fn read_sys(p: &Path) -> Option<String> {
    std::fs::read_to_string(p).ok().map(|s| s.trim().to_owned())
}

/// Every bound loop device.
fn bound() -> Vec<Bound> {
    let Ok(dir) = std::fs::read_dir("/sys/block") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            if !name.starts_with("loop") {
                return None;
            }
            let sys = e.path();
            let backing = read_sys(&sys.join("loop/backing_file"))?;
            Some(Bound {
                dev: Path::new("/dev").join(&name),
                backing: PathBuf::from(backing),
                offset: read_sys(&sys.join("loop/offset"))?.parse().ok()?,
                limit: read_sys(&sys.join("loop/sizelimit"))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(0),
                read_only: read_sys(&sys.join("ro")).as_deref() == Some("1"),
            })
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn find(piece: &Piece) -> Option<Bound> {
    let dev = Path::new(&piece.device);
    bound()
        .into_iter()
        .find(|b| b.offset == piece.offset.0 && same_file(&b.backing, dev))
}

fn piece(p: &Placement) -> Result<&Piece, ActivateError> {
    p.single().ok_or_else(|| needs_device_mapper(p))
}

/// Binds a free loop device to `len` bytes of `backing` at `offset`, named `name`.
fn bind_file(
    backing: &Path,
    offset: u64,
    len: u64,
    read_only: bool,
    name: &str,
) -> Result<PathBuf, ActivateError> {
    let shown = backing.display().to_string();
    let file = OpenOptions::new()
        .read(true)
        .write(!read_only)
        .open(backing)
        .map_err(|e| io(&shown, "open", e))?;
    let control =
        File::open("/dev/loop-control").map_err(|e| io("/dev/loop-control", "open", e))?;
    let mut flags = ioctl::DIRECT_IO;
    if read_only {
        flags |= ioctl::READ_ONLY;
    }
    // Another process may take the free device between asking and binding: ask again.
    let mut last = None;
    for _ in 0..8 {
        let n = ioctl::get_free(&control)
            .map_err(|e| io("/dev/loop-control", "LOOP_CTL_GET_FREE", e))?;
        let path = PathBuf::from(format!("/dev/loop{n}"));
        let dev = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(d) => d,
            Err(e) => {
                last = Some(io(path.display().to_string(), "open", e));
                continue;
            }
        };
        match ioctl::configure(&dev, &file, offset, len, flags, name) {
            Ok(()) => {
                tracing::info!(name, device = %path.display(), backing = %shown, offset, bytes = len, read_only, "loop device bound");
                return Ok(path);
            }
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                last = Some(io(path.display().to_string(), "LOOP_CONFIGURE", e));
            }
            Err(e) => return Err(io(path.display().to_string(), "LOOP_CONFIGURE", e)),
        }
    }
    Err(last.unwrap_or_else(|| ActivateError::Io {
        device: "/dev/loop-control".into(),
        why: "no free loop device".into(),
    }))
}

fn bind(p: &Placement, piece: &Piece, read_only: bool) -> Result<PathBuf, ActivateError> {
    let name = format!("lvmeta:{}/{}", p.vg, p.lv);
    bind_file(
        Path::new(&piece.device),
        piece.offset.0,
        piece.len.0,
        read_only,
        &name,
    )
}

/// Unbinds the loop device `dev`; refused while it is mounted or held open exclusively.
fn unbind(dev: &Path) -> Result<(), ActivateError> {
    let shown = dev.display().to_string();
    // O_EXCL on a block device fails while it is mounted or held open exclusively.
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL)
        .open(dev)
        .map_err(|e| io(&shown, "still in use (mounted?)", e))?;
    ioctl::clear(&f).map_err(|e| io(&shown, "LOOP_CLR_FD", e))
}

/// Exposes the whole file `image` as a loop device with direct I/O (a LUN made of a file,
/// as `losetup -f --show --direct-io` does).
pub fn attach(image: &Path) -> Result<PathBuf, ActivateError> {
    let name = format!("lvmeta:{}", image.display());
    bind_file(image, 0, 0, false, &name)
}

/// Unbinds a loop device made by [`attach`].
pub fn detach(dev: &Path) -> Result<(), ActivateError> {
    unbind(dev)?;
    tracing::info!(device = %dev.display(), "loop device unbound");
    Ok(())
}

impl Backend for LoopBackend {
    fn name(&self) -> &'static str {
        "loop"
    }

    fn can_fence(&self) -> bool {
        false
    }

    fn is_fenced(&self, _: &Placement) -> Result<bool, ActivateError> {
        Ok(false)
    }

    fn devices(&self) -> Result<Vec<(String, String)>, ActivateError> {
        Ok(Vec::new())
    }

    fn fence_device(&self, name: &str) -> Result<(), ActivateError> {
        Err(ActivateError::Unsupported {
            lv: name.to_owned(),
            why: "loop devices cannot fail their I/O in place".into(),
        })
    }

    /// A loop device's backing cannot be swapped for one that fails I/O while it is open.
    fn fence(&self, p: &Placement) -> Result<Vec<String>, ActivateError> {
        match self.active(p)? {
            None => Ok(Vec::new()),
            Some(dev) => Err(ActivateError::Unsupported {
                lv: format!("{}/{}", p.vg, p.lv),
                why: format!(
                    "{} cannot be fenced: loop devices cannot fail their I/O in place \
                     (device-mapper's error target can)",
                    dev.display()
                ),
            }),
        }
    }

    fn active(&self, p: &Placement) -> Result<Option<PathBuf>, ActivateError> {
        Ok(p.single().and_then(find).map(|b| b.dev))
    }

    fn activate(&self, p: &Placement, read_only: bool) -> Result<PathBuf, ActivateError> {
        let piece = piece(p)?;
        match find(piece) {
            Some(b) if b.read_only == read_only => Ok(b.dev),
            Some(b) => Err(ActivateError::Io {
                device: b.dev.display().to_string(),
                why: format!(
                    "{}/{} is already active {}",
                    p.vg,
                    p.lv,
                    if b.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    }
                ),
            }),
            None => bind(p, piece, read_only),
        }
    }

    fn deactivate(&self, p: &Placement) -> Result<(), ActivateError> {
        let Some(b) = p.single().and_then(find) else {
            return Ok(());
        };
        unbind(&b.dev)?;
        tracing::info!(lv = %format!("{}/{}", p.vg, p.lv), device = %b.dev.display(), "loop device unbound");
        Ok(())
    }

    fn refresh(&self, p: &Placement) -> Result<(), ActivateError> {
        let Some(b) = p.single().and_then(find) else {
            return match p.single() {
                // Not active: nothing to refresh.
                Some(_) => Ok(()),
                None => Err(needs_device_mapper(p)),
            };
        };
        let shown = b.dev.display().to_string();
        let dev = File::open(&b.dev).map_err(|e| io(&shown, "open", e))?;
        ioctl::resize(&dev, p.bytes.0).map_err(|e| io(&shown, "LOOP_SET_STATUS64", e))
    }

    fn pool_status(&self, _: &Placement) -> Result<Option<super::thin::PoolStatus>, ActivateError> {
        // Loop devices carry no thin pools.
        Ok(None)
    }

    fn users(&self, pieces: &[&Piece]) -> Result<Vec<PathBuf>, ActivateError> {
        let all = bound();
        Ok(all
            .into_iter()
            .filter(|b| {
                pieces.iter().any(|p| {
                    let shown = Piece {
                        device: p.device.clone(),
                        offset: Bytes(b.offset),
                        len: Bytes(if b.limit == 0 { u64::MAX } else { b.limit }),
                    };
                    shown.overlaps(p) && same_file(&b.backing, Path::new(&p.device))
                })
            })
            .map(|b| b.dev)
            .collect())
    }
}
