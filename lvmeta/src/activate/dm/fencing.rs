//! Fencing on device-mapper: `error` tables loaded in place, and found again.

use devicemapper::{DevId, DmFlags, DmOptions};

use super::super::{fence, ActivateError, Placement};
use super::{dm_err, dm_name_of, DmBackend};

impl DmBackend {
    /// Has any device of `p`'s stack a table of `error` targets only ([`Backend::fence`])?
    pub(super) fn fenced(&self, p: &Placement) -> Result<bool, ActivateError> {
        for t in fence::stack(p) {
            // Only this LV's own devices: another VG's or tool's device of the same name,
            // error table or not, says nothing about this stack.
            let Some(info) = self.info(&t.name)? else {
                continue;
            };
            if !t
                .uuid
                .matches(&info.uuid().map(|u| u.to_string()).unwrap_or_default())
            {
                continue;
            }
            let n = dm_name_of(&t.name)?;
            let flags = DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE);
            let (_, table) = self
                .dm
                .table_status(&DevId::Name(n), flags)
                .map_err(|e| dm_err(&format!("table of {}", t.name), e))?;
            // All of it: lvm2's partial activation puts error segments in live tables.
            if !table.is_empty() && table.iter().all(|(_, _, target, _)| target == "error") {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Makes device `name` fail every I/O: an `error` table of its current size, made live
    /// without freezing a filesystem on it or waiting for queued I/O to be flushed (a
    /// suspend still waits for I/O in flight: one hung on a dead path keeps this waiting,
    /// and the lease with it, which is what the watchdog is for).
    pub(super) fn load_error(&self, name: &str) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        let id = DevId::Name(n);
        let (_, table) = self
            .dm
            .table_status(
                &id,
                DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE),
            )
            .map_err(|e| dm_err(&format!("table of {name}"), e))?;
        let sectors = table.iter().map(|(s, l, _, _)| s + l).max().unwrap_or(0);
        if sectors == 0 || table.iter().all(|(_, _, t, _)| t == "error") {
            return Ok(());
        }
        self.dm
            .table_load(&id, &[fence::error_table(sectors)], DmOptions::default())
            .map_err(|e| dm_err(&format!("load an error table into {name}"), e))?;
        let quick = DmFlags::DM_SUSPEND | DmFlags::DM_NOFLUSH | DmFlags::DM_SKIP_LOCKFS;
        self.dm
            .device_suspend(&id, DmOptions::default().set_flags(quick))
            .map_err(|e| dm_err(&format!("suspend {name} to fence it"), e))?;
        self.dm
            .device_suspend(&id, DmOptions::default())
            .map_err(|e| dm_err(&format!("resume {name} fenced"), e))?;
        Ok(())
    }
}
