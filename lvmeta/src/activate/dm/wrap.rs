//! Wrappers ([`super::super::wrap`]) on device-mapper: made, held, switched, released,
//! removed.
//!
//! - A hold is a suspend without flush and without a filesystem freeze: device-mapper waits
//!   for I/O in flight through the upper device and queues new I/O until the release.
//! - A switch loads the lower device's new table and makes it live; it is meant between a
//!   hold and a release, so no I/O is in flight through the lower device.

use std::path::PathBuf;

use devicemapper::{DevId, DmFlags, DmOptions};

use super::super::wrap::{backing_of, linear_over, Wrap};
use super::super::ActivateError;
use super::nodes::block_devnum;
use super::{dm_err, dm_name_of, table_flags, Dev, DmBackend, MAPPER_DIR};
use crate::units::Sectors;

impl DmBackend {
    /// Makes `w` over `backing` (a block device path) for `sectors`, read-only when asked;
    /// the upper device's path. A wrapper already there is kept as it is.
    pub fn wrap(
        &self,
        w: &Wrap,
        backing: &str,
        sectors: Sectors,
        read_only: bool,
    ) -> Result<PathBuf, ActivateError> {
        let want = block_devnum(backing)?;
        // A wrapper left over another backing (a crash between steps) is not taken as is.
        if let Some(found) = self.wrapped_backing(w)? {
            if found != want {
                return Err(ActivateError::Io {
                    device: format!("{MAPPER_DIR}/{}", w.lower_name()),
                    why: format!(
                        "wraps {}:{} already, not {backing} ({}:{}): switch it instead",
                        found.0, found.1, want.0, want.1
                    ),
                });
            }
        }
        let lower = Dev {
            name: w.lower_name(),
            uuid: w.lower_uuid(),
            table: linear_over(sectors, want),
            read_only,
        };
        let lower_num = self.ensure(&lower)?;
        let upper = Dev {
            name: w.upper_name(),
            uuid: w.upper_uuid(),
            table: linear_over(sectors, lower_num),
            read_only,
        };
        let upper_num = self.ensure(&upper)?;
        tracing::info!(device = %upper.name, backing, "volume wrapped");
        Self::make_named_node(&upper.name, upper_num)
    }

    /// Holds `w`'s upper device: I/O in flight completes, new I/O waits for the release.
    pub fn hold(&self, w: &Wrap) -> Result<(), ActivateError> {
        let name = w.upper_name();
        self.mine_or_missing(&name, &w.upper_uuid())?;
        let quiet = DmFlags::DM_SUSPEND | DmFlags::DM_NOFLUSH | DmFlags::DM_SKIP_LOCKFS;
        self.dm
            .device_suspend(
                &DevId::Name(dm_name_of(&name)?),
                DmOptions::default().set_flags(quiet),
            )
            .map(drop)
            .map_err(|e| dm_err(&format!("hold {name}"), e))
    }

    /// Is `w` held now: its upper device suspended, or its lower one (a process that died
    /// inside a switch leaves the lower device suspended, and I/O through the upper device
    /// waits there just the same)? False when `w` is not made.
    pub fn is_held(&self, w: &Wrap) -> Result<bool, ActivateError> {
        Ok(self.suspended(&w.upper_name(), &w.upper_uuid())?
            || self.suspended(&w.lower_name(), &w.lower_uuid())?)
    }

    /// Whether device `name` is this wrapper's (`uuid`) and suspended.
    fn suspended(&self, name: &str, uuid: &str) -> Result<bool, ActivateError> {
        if self.mine(name, uuid)?.is_none() {
            return Ok(false);
        }
        Ok(self
            .info(name)?
            .is_some_and(|i| i.flags().contains(DmFlags::DM_SUSPEND)))
    }

    /// Points `w`'s lower device at `backing` (same size, read-only when asked), to be done
    /// while held. A table that cannot be made live is cleared again.
    pub fn switch(
        &self,
        w: &Wrap,
        backing: &str,
        sectors: Sectors,
        read_only: bool,
    ) -> Result<(), ActivateError> {
        let name = w.lower_name();
        self.mine_or_missing(&name, &w.lower_uuid())?;
        let table = linear_over(sectors, block_devnum(backing)?);
        let id = DevId::Name(dm_name_of(&name)?);
        let flags = table_flags(read_only);
        self.dm
            .table_load(&id, &table, DmOptions::default().set_flags(flags))
            .map_err(|e| dm_err(&format!("load {name}"), e))?;
        let live = self
            .set_suspended(&name, true)
            .and_then(|()| self.set_suspended(&name, false));
        if let Err(e) = live {
            // Nothing half-loaded is left for a later resume to make live by surprise.
            let _ = self.dm.table_clear(&id);
            let _ = self.set_suspended(&name, false);
            return Err(e);
        }
        tracing::info!(device = %w.upper_name(), backing, "wrapper switched");
        Ok(())
    }

    /// Gives `w` a new size over the same `backing` (grown under it): held, the lower and
    /// then the upper table reloaded, released. I/O pauses, never fails.
    pub fn resize(
        &self,
        w: &Wrap,
        backing: &str,
        sectors: Sectors,
        read_only: bool,
    ) -> Result<(), ActivateError> {
        self.hold(w)?;
        let resized = self.switch(w, backing, sectors, read_only).and_then(|()| {
            let lower = self
                .mine(&w.lower_name(), &w.lower_uuid())?
                .ok_or_else(|| ActivateError::Io {
                    device: format!("{MAPPER_DIR}/{}", w.lower_name()),
                    why: "no such wrapper device".into(),
                })?;
            let upper = w.upper_name();
            let flags = table_flags(read_only);
            self.dm
                .table_load(
                    &DevId::Name(dm_name_of(&upper)?),
                    &linear_over(sectors, lower),
                    DmOptions::default().set_flags(flags),
                )
                .map(drop)
                .map_err(|e| dm_err(&format!("load {upper}"), e))
        });
        // Released whatever happened: the release makes a loaded table live.
        let released = self.release(w);
        resized.and(released)?;
        tracing::info!(device = %w.upper_name(), sectors = sectors.0, "wrapper resized");
        Ok(())
    }

    /// Releases `w`'s upper device: queued I/O goes on, to the lower device's backing now.
    /// - A lower device left suspended (a switch cut short) is resumed first, on the table
    ///   it had live: a table loaded but not made live is dropped, not made live by surprise;
    ///   [`DmBackend::wrapped_backing`] then says where it points.
    /// - Callers serialise the steps on one wrapper (csi-shim: one request per volume at a
    ///   time): a release beside another process's switch would drop that switch's table.
    pub fn release(&self, w: &Wrap) -> Result<(), ActivateError> {
        let name = w.upper_name();
        self.mine_or_missing(&name, &w.upper_uuid())?;
        let lower = w.lower_name();
        if self.suspended(&lower, &w.lower_uuid())? {
            let id = DevId::Name(dm_name_of(&lower)?);
            self.dm
                .table_clear(&id)
                .map_err(|e| dm_err(&format!("clear the loaded table of {lower}"), e))?;
            self.set_suspended(&lower, false)?;
            tracing::warn!(device = %lower, "a wrapper's lower device was left suspended: resumed");
        }
        self.set_suspended(&name, false)
    }

    /// The `major:minor` `w`'s lower device maps now; None when `w` is not made.
    pub fn wrapped_backing(&self, w: &Wrap) -> Result<Option<(u32, u32)>, ActivateError> {
        let name = w.lower_name();
        if self.mine(&name, &w.lower_uuid())?.is_none() {
            return Ok(None);
        }
        let flags = DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE);
        let (_, table) = self
            .dm
            .table_status(&DevId::Name(dm_name_of(&name)?), flags)
            .map_err(|e| dm_err(&format!("table of {name}"), e))?;
        Ok(backing_of(&table))
    }

    /// Removes `w` (upper, then lower); refused while the upper device is open.
    pub fn unwrap(&self, w: &Wrap) -> Result<(), ActivateError> {
        let upper = w.upper_name();
        if self.open_count(&upper)? > 0 {
            return Err(ActivateError::Io {
                device: format!("{MAPPER_DIR}/{upper}"),
                why: "still open: unwrap refused".into(),
            });
        }
        self.remove(&upper, &w.upper_uuid())?;
        self.remove(&w.lower_name(), &w.lower_uuid())
    }

    /// Ok when device-mapper has `name` with `uuid`; an error naming it otherwise.
    fn mine_or_missing(&self, name: &str, uuid: &str) -> Result<(), ActivateError> {
        match self.mine(name, uuid)? {
            Some(_) => Ok(()),
            None => Err(ActivateError::Io {
                device: format!("{MAPPER_DIR}/{name}"),
                why: "no such wrapper device".into(),
            }),
        }
    }
}
