//! A pool's queued messages sent by lvm2's transaction rule; suspend and resume.

use devicemapper::{DevId, DmFlags, DmOptions};

use super::super::thin::{deliveries, PoolMessage, PoolPlan};
use super::super::ActivateError;
use super::{dm_err, dm_name, dm_name_of, errno, DmBackend};

impl DmBackend {
    /// Sends the kernel pool `tpool_name` the messages lvm2's rule asks for, each thin LV
    /// active here that is the origin of a new snapshot suspended around them (the kernel
    /// needs it quiet for a consistent snapshot), and checks the transaction id after.
    pub(super) fn deliver(&self, pool: &PoolPlan, tpool_name: &str) -> Result<(), ActivateError> {
        let status = self.tpool_status(tpool_name)?;
        let messages = deliveries(pool, status.transaction_id)?;
        if messages.is_empty() {
            return Ok(());
        }
        if status.read_only || status.needs_check {
            return Err(ActivateError::Io {
                device: tpool_name.into(),
                why: "cannot send the queued messages: the pool's metadata is read-only or \
                      needs thin_check first"
                    .into(),
            });
        }
        let vg = &pool.metadata.vg;
        let mut suspended = Vec::new();
        let mut result = Ok(());
        for m in &messages {
            if let PoolMessage::CreateSnap { origin, .. } = m {
                let name = pool
                    .thin_lvs
                    .iter()
                    .find(|(id, _)| id == origin)
                    .map(|(_, lv)| dm_name(vg, lv));
                if let Some(name) = name.filter(|n| !suspended.contains(n)) {
                    if self.find(&name)?.is_some() {
                        result = self.set_suspended(&name, true);
                        if result.is_err() {
                            break;
                        }
                        suspended.push(name);
                    }
                }
            }
        }
        if result.is_ok() {
            result = self.send(tpool_name, &messages);
        }
        for name in &suspended {
            if let Err(e) = self.set_suspended(name, false) {
                tracing::error!(device = %name, error = %e, "could not resume a snapshot origin");
                result = result.and(Err(e));
            }
        }
        result?;
        let now = self.tpool_status(tpool_name)?.transaction_id;
        if now != pool.transaction_id {
            return Err(ActivateError::Io {
                device: tpool_name.into(),
                why: format!(
                    "transaction id is {now} after the messages, expected {}",
                    pool.transaction_id
                ),
            });
        }
        tracing::info!(pool = %tpool_name, messages = messages.len(), transaction_id = now, "delivered the queued thin pool messages");
        Ok(())
    }

    /// Suspends (flushing what is in flight, freezing a filesystem on it) or resumes
    /// device `name`.
    /// - a filesystem frozen already (the node's fsfreeze around a cut) makes the kernel
    ///   refuse the freeze: the suspend is then made without it (`DM_SKIP_LOCKFS`), the
    ///   filesystem being quiet already.
    pub(super) fn set_suspended(&self, name: &str, suspend: bool) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        let id = DevId::Name(n);
        let what = if suspend { "suspend" } else { "resume" };
        let flags = if suspend {
            DmFlags::DM_SUSPEND
        } else {
            DmFlags::empty()
        };
        let first = self
            .dm
            .device_suspend(&id, DmOptions::default().set_flags(flags));
        match first {
            Ok(_) => Ok(()),
            Err(e) if suspend => {
                tracing::info!(device = %name, error = %e, "suspend with a filesystem freeze refused (frozen already?): suspending without it");
                self.dm
                    .device_suspend(
                        &id,
                        DmOptions::default().set_flags(flags | DmFlags::DM_SKIP_LOCKFS),
                    )
                    .map(drop)
                    .map_err(|e| dm_err(&format!("{what} {name}"), e))
            }
            Err(e) => Err(dm_err(&format!("{what} {name}"), e)),
        }
    }

    /// Sends `messages` to pool device `tpool_name`, sector 0, in order.
    pub(super) fn send(
        &self,
        tpool_name: &str,
        messages: &[PoolMessage],
    ) -> Result<(), ActivateError> {
        let n = dm_name_of(tpool_name)?;
        for m in messages {
            let sent = self.dm.target_msg(&DevId::Name(n), Some(0), &m.to_string());
            match (sent, m) {
                (Ok(_), _) => {}
                // A delivery cut short before `set_transaction_id` is sent again whole; a
                // delete it did already leaves what was asked for.
                (Err(e), PoolMessage::Delete(_)) if errno(&e) == Some(libc::ENODATA) => {
                    tracing::warn!(pool = %tpool_name, message = %m, "thin device is gone already: an earlier delivery deleted it");
                }
                // A create of an id the pool has: that device's blocks are not known to be
                // empty (another tool, a lost delete), so it is never handed out as new.
                (Err(e), PoolMessage::CreateThin(id) | PoolMessage::CreateSnap { id, .. })
                    if errno(&e) == Some(libc::EEXIST) =>
                {
                    return Err(ActivateError::Io {
                        device: tpool_name.into(),
                        why: format!(
                            "the pool already has thin device {id}: remove it from the pool \
                             metadata by hand (thin_dump/thin_restore) before this volume \
                             can be used, as lvm2 asks"
                        ),
                    });
                }
                (Err(e), _) => return Err(dm_err(&format!("{tpool_name}: message {m}"), e)),
            }
        }
        Ok(())
    }
}
