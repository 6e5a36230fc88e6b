//! A thin pool's stack: `_tmeta`, `_tdata`, the `-tpool` device and the pool LV's own.

use devicemapper::{DevId, DmOptions};

use super::super::thin::{parse_pool_status, PoolPlan, PoolStatus};
use super::super::ActivateError;
use super::tables::{over, pool_table};
use super::{dm_err, dm_layer_name, dm_name, dm_name_of, Dev, DmBackend};

impl DmBackend {
    pub(super) fn tpool_name(pool: &PoolPlan) -> String {
        dm_layer_name(&pool.metadata.vg, &pool.name, "tpool")
    }

    /// The kernel status of pool device `tpool`.
    pub(super) fn tpool_status(&self, tpool: &str) -> Result<PoolStatus, ActivateError> {
        let n = dm_name_of(tpool)?;
        let (_, lines) = self
            .dm
            .table_status(&DevId::Name(n), DmOptions::default())
            .map_err(|e| dm_err(&format!("status of {tpool}"), e))?;
        match lines.first() {
            Some((_, _, target, status)) if target == "thin-pool" => {
                parse_pool_status(tpool, status)
            }
            other => Err(ActivateError::Io {
                device: tpool.into(),
                why: format!("expected a thin-pool target, found {other:?}"),
            }),
        }
    }

    /// Brings pool `pool`'s stack up as lvm2 does for a thin LV (its sub-LVs and the tpool;
    /// not the pool LV's own device), delivers the messages queued for it, and returns the
    /// tpool's device number.
    pub(super) fn ensure_pool(&self, pool: &PoolPlan) -> Result<(u32, u32), ActivateError> {
        let meta = self.ensure(&Self::sub_dev(&pool.metadata, "tmeta")?)?;
        let data = self.ensure(&Self::sub_dev(&pool.data, "tdata")?)?;
        let tpool_name = Self::tpool_name(pool);
        let tpool = self.ensure(&Dev {
            name: tpool_name.clone(),
            uuid: format!("{}-tpool", pool.dm_uuid),
            table: vec![pool_table(pool, meta, data)],
            read_only: false,
        })?;
        self.deliver(pool, &tpool_name)?;
        Ok(tpool)
    }

    /// Takes pool `pool`'s stack down unless something still uses it: the pool LV's own
    /// device (the pool is active itself) or a thin LV (the tpool is open). With `pool_too`
    /// the pool LV's own device goes first (`lvchange -an` of the pool).
    pub(super) fn release_pool(
        &self,
        pool: &PoolPlan,
        pool_too: bool,
    ) -> Result<(), ActivateError> {
        let vg = &pool.metadata.vg;
        let pool_dev = dm_name(vg, &pool.name);
        if pool_too {
            self.remove(&pool_dev, &pool.dm_uuid)?;
        } else if self.find(&pool_dev)?.is_some() {
            return Ok(());
        }
        let tpool = Self::tpool_name(pool);
        if self.open_count(&tpool)? > 0 {
            return Ok(());
        }
        self.remove(&tpool, &format!("{}-tpool", pool.dm_uuid))?;
        let (name, uuid) = Self::sub_id(&pool.data, "tdata");
        self.remove(&name, &uuid)?;
        let (name, uuid) = Self::sub_id(&pool.metadata, "tmeta");
        self.remove(&name, &uuid)
    }

    /// Reloads an active pool's data LV, tpool and pool device with their current sizes;
    /// returns the tpool's device number.
    pub(super) fn refresh_pool(&self, pool: &PoolPlan) -> Result<(u32, u32), ActivateError> {
        let vg = &pool.metadata.vg;
        let tpool_name = Self::tpool_name(pool);
        let (Some(meta), Some(data), Some(tpool)) = (
            self.find(&dm_name(vg, &pool.metadata.lv))?,
            self.find(&dm_name(vg, &pool.data.lv))?,
            self.find(&tpool_name)?,
        ) else {
            return Err(ActivateError::Io {
                device: tpool_name,
                why: "the pool is not fully active on this host".into(),
            });
        };
        self.reload(
            &dm_name(vg, &pool.data.lv),
            &Self::mapped_dev(&pool.data)?.table,
        )?;
        self.reload(&tpool_name, &[pool_table(pool, meta, data)])?;
        let pool_dev = dm_name(vg, &pool.name);
        if self.find(&pool_dev)?.is_some() {
            self.reload(&pool_dev, &[over(pool.bytes, tpool)])?;
        }
        Ok(tpool)
    }
}
