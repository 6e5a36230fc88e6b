//! The settings of a thin volume that can change while it lives: its pool's zeroing of new
//! chunks and its discard handling ([`PoolOptions`], lvm2's `lvchange -Z` and
//! `lvchange --discards`). They are the pool's, so a volume and the clones and snapshots
//! in its pool share them.
//!
//! A change is one commit. When the pool is active on a node, that node makes it (a
//! [`Request::Tune`]) and reloads its kernel pool's table, so the kernel and the metadata
//! agree. Turning discard support on or off (to or from `ignore`) the kernel allows only
//! while the pool is inactive, as lvm2 does: such a change is refused while the volume is
//! staged.

use std::time::Duration;

use super::{pool_of, volume_of, Mode, Request, VolumeError, Volumes};
use lvmeta::edit::thin::{self, PoolOptions};
use lvmeta::lease::LeaseError;
use lvmeta::model::Vg;

impl Volumes<'_> {
    /// The settings of thin volume `name`'s pool.
    pub fn tuning(&self, name: &str) -> Result<PoolOptions, VolumeError> {
        let vg = self.view()?;
        let (_, p) = thin_pool(&vg, name)?;
        Ok(PoolOptions::of(p))
    }

    /// Sets what `opts` asks on thin volume `name`'s pool, here (the pool inactive, or held
    /// by this caller, see [`Volumes::holding`]); returns the pool's settings. Settings the
    /// pool has already change nothing.
    pub fn tune(&self, name: &str, opts: &PoolOptions) -> Result<PoolOptions, VolumeError> {
        let vg = self.view()?;
        let (pool, p) = thin_pool(&vg, name)?;
        if opts.met_by(p) {
            return Ok(PoolOptions::of(p));
        }
        if opts.switches_discard_support(p) && self.holding.contains(&pool) {
            return Err(switch_refused(&self.vg, name));
        }
        self.update("lvchange", |vg, ctx| {
            let vg = thin::change_pool(vg, ctx, &pool, opts)?;
            let now = vg.lv(&pool).and_then(|l| l.pool()).map(PoolOptions::of);
            Ok((vg, now.unwrap_or_default()))
        })
        .map_err(VolumeError::from)
    }

    /// [`Volumes::tune`], made by the node where the pool is active when it is (waiting up
    /// to `wait`, see [`Volumes::through_holder`]). A change of discard support is refused
    /// while the pool is active anywhere.
    pub fn retune(
        &self,
        name: &str,
        opts: &PoolOptions,
        wait: Duration,
    ) -> Result<PoolOptions, VolumeError> {
        let vg = self.view()?;
        let (pool, p) = thin_pool(&vg, name)?;
        if opts.switches_discard_support(p) {
            return self.tune(name, opts).map_err(|e| match e {
                VolumeError::Lvmeta(lvmeta::Error::Lease(LeaseError::InUse { lv }))
                    if lv == format!("{}/{pool}", self.vg) =>
                {
                    switch_refused(&self.vg, name)
                }
                e => e,
            });
        }
        let r = Request::Tune {
            name: name.to_owned(),
            options: opts.clone(),
        };
        self.through_holder(&r, wait, |v| v.tune(name, opts))
    }
}

fn switch_refused(vg: &str, name: &str) -> VolumeError {
    VolumeError::Refused(format!(
        "volume {vg}/{name} is staged on a node: the kernel turns a thin pool's discard \
         support on or off (to or from ignore) only while the pool is inactive; unstage \
         the volume first"
    ))
}

/// The pool of thin volume `name` and its segment; NOT_FOUND for no volume, INVALID for a
/// linear one.
fn thin_pool<'v>(
    vg: &'v Vg,
    name: &str,
) -> Result<(String, &'v lvmeta::model::ThinPool), VolumeError> {
    let v = volume_of(vg, name).ok_or_else(|| VolumeError::NotFound(name.to_owned()))?;
    if v.mode != Mode::Thin {
        return Err(VolumeError::Invalid(format!(
            "volume {}/{name} is linear: zeroing and discards are settings of a thin volume's pool",
            vg.name
        )));
    }
    let pool = pool_of(vg, name).unwrap_or_default();
    let p = vg.lv(&pool).and_then(|l| l.pool()).ok_or_else(|| {
        VolumeError::Refused(format!(
            "the pool {}/{pool} of volume {name} is not a thin pool",
            vg.name
        ))
    })?;
    Ok((pool, p))
}
