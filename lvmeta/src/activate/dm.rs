//! The device-mapper backend: an LV becomes `/dev/mapper/<vg>-<lv>`, lvm2's name for it, with
//! lvm2's device uuid (`LVM-<vg id><lv id>`), so that stock lvm2 on the same host sees it
//! active. Its table is built here from the LV's [`Placement`] (pure: [`dm_name`],
//! [`linear_table`]) and loaded with the devicemapper crate through `/dev/mapper/control`.
//! There is no udev: the device node is made here, as libdevmapper does without udev.
//!
//! Linear LVs of any number of pieces are built. Other layouts (striped, thin pools and thin
//! LVs) are refused with [`ActivateError::Unsupported`] naming the target they need.

use std::path::{Path, PathBuf};

use devicemapper::{DevId, DmFlags, DmName, DmOptions, DmUuid, DM};

use super::{ActivateError, Backend, Layout, Piece, Placement};

/// Where device nodes go.
const MAPPER_DIR: &str = "/dev/mapper";

/// lvm2's device-mapper name of LV `lv` of VG `vg`: both names with every `-` doubled,
/// joined by one `-` (so the name splits back unambiguously).
pub fn dm_name(vg: &str, lv: &str) -> String {
    format!("{}-{}", vg.replace('-', "--"), lv.replace('-', "--"))
}

/// The table of a linear LV laid out as `pieces`: one `linear` target per piece, in sectors,
/// the device named by its `major:minor` (`devnum` finds it for a device path).
pub fn linear_table(
    pieces: &[Piece],
    mut devnum: impl FnMut(&str) -> Result<(u32, u32), ActivateError>,
) -> Result<Vec<(u64, u64, String, String)>, ActivateError> {
    let mut start = 0;
    let mut table = Vec::with_capacity(pieces.len());
    for p in pieces {
        let (major, minor) = devnum(&p.device)?;
        let len = p.len / 512;
        table.push((
            start,
            len,
            "linear".to_owned(),
            format!("{major}:{minor} {}", p.offset / 512),
        ));
        start += len;
    }
    Ok(table)
}

/// The `major:minor` of the block device at `path`.
fn block_devnum(path: &str) -> Result<(u32, u32), ActivateError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).map_err(|e| ActivateError::Io {
        device: path.to_owned(),
        why: e.to_string(),
    })?;
    if !m.file_type().is_block_device() {
        return Err(ActivateError::Io {
            device: path.to_owned(),
            why: "not a block device (device-mapper maps block devices only)".into(),
        });
    }
    Ok((libc::major(m.rdev()), libc::minor(m.rdev())))
}

/// LVs as device-mapper devices (see the module documentation).
pub struct DmBackend {
    dm: DM,
}

impl std::fmt::Debug for DmBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DmBackend")
    }
}

fn dm_err(what: &str, e: impl std::fmt::Display) -> ActivateError {
    ActivateError::Io {
        device: format!("{MAPPER_DIR}/control"),
        why: format!("{what}: {e}"),
    }
}

impl DmBackend {
    /// The backend, when this kernel has device-mapper (`/dev/mapper/control` opens).
    pub fn probe() -> Option<Self> {
        DM::new().ok().map(|dm| Self { dm })
    }

    fn node(p: &Placement) -> PathBuf {
        Path::new(MAPPER_DIR).join(dm_name(&p.vg, &p.lv))
    }

    /// The device number of `name` when device-mapper has such a device.
    fn find(&self, name: &str) -> Result<Option<(u32, u32)>, ActivateError> {
        let devices = self
            .dm
            .list_devices()
            .map_err(|e| dm_err("list devices", e))?;
        Ok(devices
            .iter()
            .find(|(n, _, _)| n.to_string() == name)
            .map(|(_, d, _)| (d.major, d.minor)))
    }

    /// Makes the node of `p` for `devnum` unless it is there.
    fn make_node(p: &Placement, devnum: (u32, u32)) -> Result<PathBuf, ActivateError> {
        let node = Self::node(p);
        if !node.exists() {
            std::fs::create_dir_all(MAPPER_DIR).map_err(|e| ActivateError::Io {
                device: MAPPER_DIR.into(),
                why: e.to_string(),
            })?;
            super::ioctl::mknod_block(&node, devnum.0, devnum.1).map_err(|e| {
                ActivateError::Io {
                    device: node.display().to_string(),
                    why: format!("mknod: {e}"),
                }
            })?;
        }
        Ok(node)
    }

    fn table(p: &Placement) -> Result<Vec<(u64, u64, String, String)>, ActivateError> {
        match &p.layout {
            Layout::Linear(pieces) => linear_table(pieces, block_devnum),
            Layout::Other(t) => Err(ActivateError::Unsupported {
                lv: format!("{}/{}", p.vg, p.lv),
                why: format!(
                    "{t} LVs need the dm-{} target, whose tables lvmeta does not build yet \
                     (linear LVs only)",
                    if t.starts_with("thin") {
                        "thin-pool"
                    } else {
                        t
                    }
                ),
            }),
        }
    }
}

impl Backend for DmBackend {
    fn name(&self) -> &'static str {
        "device-mapper"
    }

    fn active(&self, p: &Placement) -> Result<Option<PathBuf>, ActivateError> {
        match self.find(&dm_name(&p.vg, &p.lv))? {
            Some(devnum) => Self::make_node(p, devnum).map(Some),
            None => Ok(None),
        }
    }

    fn activate(&self, p: &Placement, read_only: bool) -> Result<PathBuf, ActivateError> {
        if let Some(node) = self.active(p)? {
            return Ok(node);
        }
        let table = Self::table(p)?;
        let name_s = dm_name(&p.vg, &p.lv);
        let name = DmName::new(&name_s).map_err(|e| dm_err("device name", e))?;
        let uuid = DmUuid::new(&p.dm_uuid).map_err(|e| dm_err("device uuid", e))?;
        let flags = if read_only {
            DmFlags::DM_READONLY
        } else {
            DmFlags::empty()
        };
        let id = DevId::Name(name);
        let info = self
            .dm
            .device_create(name, Some(uuid), DmOptions::default().set_flags(flags))
            .map_err(|e| dm_err(&format!("create {name_s}"), e))?;
        // Load and resume; a failure removes the half-made device again.
        let loaded = self
            .dm
            .table_load(&id, &table, DmOptions::default().set_flags(flags))
            .and_then(|_| self.dm.device_suspend(&id, DmOptions::default()));
        if let Err(e) = loaded {
            let _ = self.dm.device_remove(&id, DmOptions::default());
            return Err(dm_err(&format!("load {name_s}"), e));
        }
        let d = info.device();
        tracing::info!(vg = %p.vg, lv = %p.lv, device = %name_s, targets = table.len(), read_only, "activated with device-mapper");
        Self::make_node(p, (d.major, d.minor))
    }

    fn deactivate(&self, p: &Placement) -> Result<(), ActivateError> {
        let name_s = dm_name(&p.vg, &p.lv);
        if self.find(&name_s)?.is_none() {
            return Ok(());
        }
        let name = DmName::new(&name_s).map_err(|e| dm_err("device name", e))?;
        self.dm
            .device_remove(&DevId::Name(name), DmOptions::default())
            .map_err(|e| dm_err(&format!("remove {name_s} (in use?)"), e))?;
        match std::fs::remove_file(Self::node(p)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ActivateError::Io {
                device: Self::node(p).display().to_string(),
                why: e.to_string(),
            }),
            _ => Ok(()),
        }
    }

    fn refresh(&self, p: &Placement) -> Result<(), ActivateError> {
        let name_s = dm_name(&p.vg, &p.lv);
        if self.find(&name_s)?.is_none() {
            return Ok(());
        }
        let table = Self::table(p)?;
        let name = DmName::new(&name_s).map_err(|e| dm_err("device name", e))?;
        let id = DevId::Name(name);
        // The new table goes live at resume; suspending first flushes what is in flight.
        self.dm
            .table_load(&id, &table, DmOptions::default())
            .and_then(|_| {
                self.dm
                    .device_suspend(&id, DmOptions::default().set_flags(DmFlags::DM_SUSPEND))
            })
            .and_then(|_| self.dm.device_suspend(&id, DmOptions::default()))
            .map_err(|e| dm_err(&format!("reload {name_s}"), e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_double_dashes_as_lvm2_does() {
        assert_eq!(dm_name("vg", "lv"), "vg-lv");
        assert_eq!(dm_name("my-vg", "pvc-1-a"), "my--vg-pvc--1--a");
    }

    #[test]
    fn a_linear_table_maps_each_piece_in_sectors() {
        let pieces = [
            Piece {
                device: "/dev/sdb".into(),
                offset: 1 << 20,
                len: 4 << 20,
            },
            Piece {
                device: "/dev/sdc".into(),
                offset: 9 << 20,
                len: 8 << 20,
            },
        ];
        let table = linear_table(&pieces, |d| {
            Ok(if d == "/dev/sdb" { (8, 16) } else { (8, 32) })
        })
        .expect("table");
        // As `dmsetup table` prints an lvm2 LV of the same layout.
        let lines: Vec<String> = table
            .iter()
            .map(|(s, l, t, p)| format!("{s} {l} {t} {p}"))
            .collect();
        assert_eq!(
            lines,
            ["0 8192 linear 8:16 2048", "8192 16384 linear 8:32 18432"]
        );
        let missing = linear_table(&pieces, |d| {
            Err(ActivateError::Io {
                device: d.into(),
                why: "gone".into(),
            })
        });
        assert!(missing.is_err());
    }

    #[test]
    fn lvm2_gives_the_device_its_uuid_without_dashes() {
        use crate::dev::{BlockDevice, MemDevice};
        use crate::edit::{self, LvSpec, Stamp, VgSpec};
        let s = crate::ops::Session::new(vec![
            Box::new(MemDevice::new("pv0", 64 << 20, 512)) as Box<dyn BlockDevice>
        ]);
        s.vgcreate(
            &VgSpec {
                name: "vg".into(),
                extent_size: 8192,
                tags: vec![],
                shared: None,
            },
            &["pv0"],
        )
        .expect("vgcreate");
        let stamp = Stamp {
            time: 1_800_000_000,
            host: "t".into(),
        };
        s.update("vg", "lvcreate", |v| {
            edit::lv::create(v, &LvSpec::linear("a", 1, stamp)).map(|x| x.0)
        })
        .expect("lvcreate");
        let vg = s.vg("vg").expect("vg");
        let p = super::super::place(&vg, "a", &[Some("pv0".into())]).expect("place");
        let want = format!(
            "LVM-{}{}",
            vg.id.to_string().replace('-', ""),
            vg.lv("a").expect("a").id.to_string().replace('-', "")
        );
        assert_eq!(p.dm_uuid, want);
        assert_eq!(p.dm_uuid.len(), 4 + 64);
    }
}
