//! Deleted data is erased before its extents can be handed out again.
//!
//! A deletion that frees extents (a linear volume; a thin pool with its last thin LV) gives
//! them, in the same commit, to a new linear LV `csi-wipe-<hex>` tagged
//! `lvmeta.csi/wipe-of=<volume>` and skipped by activation: the volume is gone at once (not
//! listed, its name free, a repeat of the deletion a no-op) while nothing can allocate its
//! extents. A wiper then erases that LV's extents ([`lvmeta::session::Session::erase_lv`]) and
//! removes it. The state is the LV itself, in the metadata every host reads, so a wipe cut
//! short by a crash, a kill or a failover is found and done again by the next wiper; stock
//! lvm2 sees an ordinary LV (Proxmox's shared-LVM `saferemove` works the same way).
//!
//! Invariants:
//! - every extent a deletion frees belongs to a wipe LV from the commit that frees it;
//! - a wipe LV is removed only after its erasure checked out, never activated by the driver.

use super::{VolumeError, Volumes};
use lvmeta::edit::{self, EditCtx, EditError, LvSpec, Stamp};
use lvmeta::model::extents::UsedMap;
use lvmeta::model::Vg;
use lvmeta::session::EraseWith;
use lvmeta::uuid::Uuid;

/// The tag prefix of a wipe LV, naming the volume (or snapshot) whose extents it holds.
pub const WIPE_TAG: &str = "lvmeta.csi/wipe-of=";

/// The name prefix of wipe LVs (names the driver maps CSI names to never start with it).
pub const WIPE_PREFIX: &str = "csi-wipe-";

/// Gives the extents `vg` holds no more, compared with `before` (the same VG before a
/// removal), to a new wipe LV for what was `of`; its lease (shared VG) takes none of the
/// slots in `leases_before`. Nothing freed: `vg` unchanged.
pub(super) fn hold_freed(
    vg: Vg,
    ctx: &EditCtx,
    before: &UsedMap,
    leases_before: &[u64],
    of: &str,
    stamp: Stamp,
) -> Result<Vg, EditError> {
    let freed = before.freed_in(&ctx.used(&vg));
    if freed.is_empty() {
        return Ok(vg);
    }
    let id = Uuid::random();
    let name = format!("{WIPE_PREFIX}{}", String::from_utf8_lossy(id.raw()));
    let mut spec = LvSpec::linear(&name, 0, stamp);
    spec.tags = vec![format!("{WIPE_TAG}{of}")];
    spec.activation_skip = true;
    let (vg, name) = edit::lv::hold(vg, ctx, &freed, &spec, leases_before)?;
    tracing::info!(vg = %vg.name, of, wipe = %name, pieces = freed.len(), "extents held for erasure");
    Ok(vg)
}

/// Is `lv` a wipe LV (carries [`WIPE_TAG`])?
pub fn is_wipe(lv: &lvmeta::model::Lv) -> bool {
    lv.tags.iter().any(|t| t.starts_with(WIPE_TAG))
}

impl Volumes<'_> {
    /// The wipe LVs of the VG (extents of deleted volumes waiting for erasure), by name.
    pub fn wipes(&self) -> Result<Vec<String>, VolumeError> {
        let vg = self.view()?;
        let mut out: Vec<String> = vg
            .lvs
            .iter()
            .filter(|l| is_wipe(l))
            .map(|l| l.name.clone())
            .collect();
        out.sort();
        Ok(out)
    }

    /// How many wipe LVs wait for the wiper, and how many bytes they hold.
    pub fn wipe_backlog(&self) -> Result<(usize, u64), VolumeError> {
        let vg = self.view()?;
        let extents: Vec<u64> = vg
            .lvs
            .iter()
            .filter(|l| is_wipe(l))
            .map(|l| l.extents())
            .collect();
        Ok((extents.len(), vg.bytes_of(extents.iter().sum::<u64>()).0))
    }

    /// Erases wipe LV `name` as `with` says ([`lvmeta::session::Session::erase_lv`]), then
    /// removes it; returns the bytes erased (0 when it is gone already). Refused while a
    /// device of `with.host` maps its extents or, in a shared VG, while a host holds its
    /// lease; erasing again after a crash or a stop is harmless.
    pub fn wipe(&self, name: &str, with: EraseWith<'_>) -> Result<u64, VolumeError> {
        let mut done = self.wipe_all(&[name], with)?;
        done.pop().unwrap_or(Ok(0))
    }

    /// [`Volumes::wipe`] of each of `names`, the erased ones removed in one commit (a wiper
    /// that frees many deleted volumes pays one commit, not one each). Returns each one's
    /// bytes erased or why it was not; an error of the removal fails the call.
    pub fn wipe_all(
        &self,
        names: &[&str],
        with: EraseWith<'_>,
    ) -> Result<Vec<Result<u64, VolumeError>>, VolumeError> {
        let vg = self.view()?;
        let mut out = Vec::with_capacity(names.len());
        let mut erased: Vec<&str> = Vec::new();
        for name in names {
            if !vg.lv(name).is_some_and(is_wipe) {
                out.push(Ok(0));
                continue;
            }
            let bytes = self.session.erase_lv(&self.vg, name, with);
            if bytes.is_ok() {
                erased.push(name);
            }
            out.push(bytes.map_err(VolumeError::from));
        }
        drop(vg);
        if erased.is_empty() {
            return Ok(out);
        }
        self.update("lvremove", |mut vg, ctx| {
            for name in &erased {
                if vg.lv(name).is_some_and(is_wipe) {
                    vg = edit::lv::remove(vg, ctx, name, false)?;
                }
            }
            Ok(vg)
        })?;
        tracing::info!(vg = %self.vg, wipes = erased.len(), "erased and removed");
        Ok(out)
    }

    /// Bytes held by wipe LVs (not free yet).
    pub fn wiping_bytes(&self) -> Result<u64, VolumeError> {
        let vg = self.view()?;
        let extents = vg.lvs.iter().filter(|l| is_wipe(l)).map(|l| l.extents());
        Ok(vg.bytes_of(extents.sum()).0)
    }
}
