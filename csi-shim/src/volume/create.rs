//! New volumes: empty, or copies of a volume or of a snapshot (thin snapshots in the
//! source's pool, linear copies block by block).

use super::expand::grow_by;
use super::*;

impl<'s> Volumes<'s> {
    /// Creates `name`, or returns it when it exists in this mode with a size in `size`.
    pub fn create(&self, name: &str, mode: Mode, size: SizeRange) -> Result<Volume, VolumeError> {
        self.create_from(name, mode, size, Content::Empty, &PoolOptions::default())
    }

    /// Creates `name` holding `content`: a snapshot's or a thin volume's data become a thin
    /// snapshot of it in the same pool (which grows by the new volume's size, so that the
    /// pool is never overcommitted); a linear volume's data are copied into a new linear
    /// volume (a data copy under both LV leases, see `clone_linear`). A new thin volume's
    /// pool gets `options` (lvm2's defaults, zeroing and `passdown`, for what they leave
    /// out); a copy shares its source's pool, so its `options` must be the pool's. Returns
    /// the volume when it exists already.
    pub fn create_from(
        &self,
        name: &str,
        mode: Mode,
        size: SizeRange,
        content: Content<'_>,
        options: &PoolOptions,
    ) -> Result<Volume, VolumeError> {
        if mode == Mode::Linear && matches!(content, Content::Snapshot(_)) {
            return Err(VolumeError::Invalid(
                "volumes from a snapshot must be thin (mode thin): a snapshot is a thin LV in its volume's pool".into(),
            ));
        }
        if mode == Mode::Linear && !options.is_empty() {
            return Err(VolumeError::Invalid(
                "zeroing and discards are settings of a thin volume's pool; a linear volume has none".into(),
            ));
        }
        // A copy's source is checked on a read before the pipeline: a linear copy is not
        // one edit, and a copy's size follows its source's.
        let copied = match content {
            Content::Snapshot(src) | Content::Volume(src) => {
                Some((src, self.check_copy(src, content, mode, size, options)?))
            }
            Content::Empty => None,
        };
        lvmeta::names::check_new_lv_name(&self.vg, name)
            .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        if mode == Mode::Thin {
            lvmeta::names::check_new_lv_name(&self.vg, &Volume::pool_name(name))
                .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        }
        size.check()?;
        if let Some((src, vg)) = &copied {
            if mode == Mode::Linear {
                return self.clone_linear(vg, name, src, size);
            }
            if let Some(v) = existing(vg, &EditCtx::standalone(), name, mode, size)? {
                return Ok(v);
            }
        }
        let req = NewVolume {
            name,
            mode,
            size,
            content,
            options,
            stamp: Stamp::now(),
        };
        // A new linear volume starts with its first and last MiB zeroed.
        let clear: &[&str] = match (mode, content) {
            (Mode::Linear, Content::Empty) => &[name],
            _ => &[],
        };
        self.update_clearing("lvcreate", clear, |vg, ctx| plan_new(vg, ctx, &req))
            .map_err(VolumeError::from)?
    }

    /// The checks of a copy of `src` (`content`'s source), on a read of the VG it returns.
    fn check_copy(
        &self,
        src: &str,
        content: Content<'_>,
        mode: Mode,
        size: SizeRange,
        options: &PoolOptions,
    ) -> Result<VgView, VolumeError> {
        let vg = self.view()?;
        check_source(&vg, content, mode)?;
        check_shared_pool(&vg, src, options)?;
        let src_bytes = vg.bytes_of(vg.lv(src).map_or(0, |l| l.extents())).0;
        let asked = match size.required {
            0 => src_bytes,
            _ => vg.bytes_of(u64::from(size.extents(vg.extent())?)).0,
        };
        if asked < src_bytes || (size.limit != 0 && src_bytes > size.limit) {
            return Err(VolumeError::OutOfRange(format!(
                "the source {src} has {src_bytes} bytes, more than the size asked for"
            )));
        }
        Ok(vg)
    }

    /// A linear clone: the new linear volume `name` is made tagged [`CLONE_PENDING_TAG`],
    /// the bytes of the linear volume `src` are copied into it through the session's
    /// devices ([`lvmeta::session::Session::copy_lv`], under both LV leases), and the tag is
    /// removed. A copy that fails removes the new volume again; a request that finds the
    /// volume still pending (an earlier attempt was cut short by a crash) copies again; one
    /// whose pending clone has another source is refused.
    pub(super) fn clone_linear(
        &self,
        vg: &Vg,
        name: &str,
        src: &str,
        size: SizeRange,
    ) -> Result<Volume, VolumeError> {
        let pending = format!("{CLONE_PENDING_TAG}{src}");
        if let Some(v) = existing(vg, &EditCtx::standalone(), name, Mode::Linear, size)? {
            match clone_source(vg, name) {
                None => return Ok(v),
                Some(other) if other != src => {
                    return Err(VolumeError::Exists(format!(
                        "volume {name} is a pending clone of {other}, not of {src}"
                    )))
                }
                // Cut short earlier: copy again.
                Some(_) => {}
            }
        }
        let src_bytes = vg.bytes_of(vg.lv(src).map_or(0, |l| l.extents())).0;
        let want = SizeRange {
            required: size.required.max(src_bytes),
            limit: size.limit,
        };
        let extents = want.extents(vg.extent())?;
        let stamp = Stamp::now();
        let (v, copy) = self
            .update_clearing("lvcreate", &[name], |vg, ctx| {
                if let Some(v) = existing(&vg, ctx, name, Mode::Linear, want)? {
                    // Another request finished it meanwhile, or it is still to be copied.
                    let copy = clone_source(&vg, name) == Some(src);
                    return Ok((vg, (v, copy)));
                }
                let mut spec = LvSpec::linear(name, extents, stamp);
                spec.tags = vec![format!("{MODE_TAG}linear"), pending.clone()];
                let vg = edit::lv::create(vg, ctx, &spec)?.0;
                let v = volume_of(&vg, name).ok_or_else(|| {
                    edit::refused(name, "the new LV is not a volume (internal error)")
                })?;
                Ok((vg, (v, true)))
            })
            .map_err(VolumeError::from)?;
        if !copy {
            return Ok(v);
        }
        if let Err(e) = self.session.copy_lv(&self.vg, src, name) {
            // Nothing was handed out yet: take the half-made clone back (a crash instead
            // leaves it tagged, and the next request copies again).
            if let Err(d) = self.delete(name) {
                tracing::warn!(vg = %self.vg, name, error = %d, "removing a clone whose copy failed");
            }
            return Err(match e {
                lvmeta::Error::Lease(lvmeta::lease::LeaseError::Busy { .. }) => {
                    VolumeError::Refused(format!(
                        "the source volume {}/{src} is in use for writing on a node (or {name} is in use): a linear clone copies the source's data and needs it unstaged or staged read-only",
                        self.vg
                    ))
                }
                e => e.into(),
            });
        }
        let done = edit::lv::LvChange {
            del_tags: vec![pending.clone()],
            ..Default::default()
        };
        self.update("lvchange", |vg, ctx| {
            if clone_source(&vg, name) == Some(src) {
                edit::lv::change(vg, ctx, name, &done)
            } else {
                Ok(vg)
            }
        })
        .map_err(VolumeError::from)?;
        tracing::info!(vg = %self.vg, name, src, "linear clone made");
        Ok(v)
    }
}

/// What CreateVolume asks for, as the edit that makes it needs it.
struct NewVolume<'a> {
    name: &'a str,
    mode: Mode,
    size: SizeRange,
    content: Content<'a>,
    /// A new thin volume's pool settings (lvm2's defaults for what they leave out).
    options: &'a PoolOptions,
    stamp: Stamp,
}

/// The edit of CreateVolume, run once under the VG's lease on the VG read there:
/// - the volume exists (this mode, a size in range): `vg` unchanged, the volume;
/// - a size the VG's extents cannot meet: `vg` unchanged, the refusal (OUT_OF_RANGE);
/// - else `vg` with the volume made, and the volume.
///
/// A refusal that changes nothing is a value, not an [`EditError`]: its code is kept.
fn plan_new(
    vg: Vg,
    ctx: &EditCtx,
    req: &NewVolume<'_>,
) -> Result<(Vg, Result<Volume, VolumeError>), EditError> {
    let NewVolume {
        name, mode, size, ..
    } = *req;
    if let Some(v) = existing(&vg, ctx, name, mode, size)? {
        return Ok((vg, Ok(v)));
    }
    let extents = match req.content {
        Content::Empty => match size.extents(vg.extent()) {
            Ok(e) => e,
            Err(e) => return Ok((vg, Err(e))),
        },
        // A copy's size follows its source's: `thin_copy` checks it.
        Content::Snapshot(_) | Content::Volume(_) => 0,
    };
    let tags = vec![format!("{MODE_TAG}{}", mode.as_str())];
    let stamp = req.stamp.clone();
    let vg = match (mode, req.content) {
        (_, Content::Snapshot(src) | Content::Volume(src)) => {
            let source_ok = match req.content {
                Content::Snapshot(_) => snapshot_of(&vg, src).is_some(),
                _ => volume_of(&vg, src).is_some_and(|v| v.mode == Mode::Thin),
            };
            if !source_ok {
                return Err(EditError::NoLv {
                    vg: vg.name.clone(),
                    lv: src.to_owned(),
                });
            }
            thin_copy(vg, ctx, name, src, size, tags, stamp)?
        }
        (Mode::Linear, Content::Empty) => {
            let mut spec = LvSpec::linear(name, extents, stamp);
            spec.tags = tags;
            edit::lv::create(vg, ctx, &spec)?.0
        }
        (Mode::Thin, Content::Empty) => {
            let data = LvSpec::linear(&Volume::pool_name(name), extents, stamp.clone());
            let pool = PoolSpec::new(data, req.options);
            let (vg, pool_name) = edit::thin::create_pool(vg, ctx, &pool)?;
            let thin = ThinSpec {
                name: Some(name.to_owned()),
                pool: pool_name,
                extents,
                origin: None,
                tags,
                activation_skip: Some(false),
                stamp,
            };
            edit::thin::create_thin(vg, ctx, &thin)?.0
        }
    };
    let v = volume_of(&vg, name)
        .ok_or_else(|| edit::refused(name, "the new LV is not a volume (internal error)"))?;
    Ok((vg, Ok(v)))
}

/// A new thin volume `name` holding thin LV `src`'s data: a thin snapshot of it in its pool,
/// at least `size` (and at least `src`'s size), with the pool grown by that much.
/// The source of a new volume must be a snapshot or a thin volume of this VG.
pub(super) fn check_source(vg: &Vg, content: Content<'_>, mode: Mode) -> Result<(), VolumeError> {
    let missing = |kind: &str, n: &str| {
        VolumeError::SourceNotFound(format!("{kind} {}/{n} not found", vg.name))
    };
    match content {
        Content::Empty => Ok(()),
        Content::Snapshot(n) => snapshot_of(vg, n)
            .map(drop)
            .ok_or_else(|| missing("snapshot", n)),
        Content::Volume(n) => match volume_of(vg, n) {
            None => Err(missing("volume", n)),
            Some(v) if v.mode != mode => Err(VolumeError::Invalid(format!(
                "the source volume {}/{n} is {}: a clone has its source's mode, not {}",
                vg.name,
                v.mode.as_str(),
                mode.as_str()
            ))),
            Some(_) if clone_source(vg, n).is_some() => Err(VolumeError::Invalid(format!(
                "the source volume {}/{n} is itself a clone whose data are not copied yet",
                vg.name
            ))),
            Some(_) => Ok(()),
        },
    }
}

/// A copy of thin LV `src` goes into its pool: refused when `options` asks for settings
/// that pool does not have.
pub(super) fn check_shared_pool(
    vg: &Vg,
    src: &str,
    options: &PoolOptions,
) -> Result<(), VolumeError> {
    let pool = pool_of(vg, src);
    match pool.as_deref().and_then(|p| vg.lv(p)?.pool()) {
        Some(p) if !options.met_by(p) => {
            let now = PoolOptions::of(p);
            Err(VolumeError::Invalid(format!(
                "a copy of {}/{src} shares its pool, whose settings are zero={} discards={}; \
                 change them on the source volume, or ask for the same",
                vg.name,
                now.zero.unwrap_or_default(),
                now.discards.unwrap_or_default()
            )))
        }
        _ => Ok(()),
    }
}

pub(super) fn thin_copy(
    vg: Vg,
    ctx: &EditCtx,
    name: &str,
    src: &str,
    size: SizeRange,
    tags: Vec<String>,
    stamp: Stamp,
) -> Result<Vg, EditError> {
    let src_extents = vg.lv(src).map_or(0, |l| l.extents());
    let src_bytes = vg.bytes_of(src_extents).0;
    let want = if size.required == 0 {
        src_extents
    } else {
        u64::from(
            size.extents(vg.extent())
                .map_err(|e| edit::refused(name, e.to_string()))?,
        )
    };
    if want < src_extents || (size.limit != 0 && src_bytes > size.limit) {
        return Err(edit::refused(
            name,
            format!("the source {src} has {src_bytes} bytes, more than the size asked for"),
        ));
    }
    let copy = ThinSpec {
        tags,
        activation_skip: Some(false),
        ..ThinSpec::snapshot_of(&vg, src, Some(name.to_owned()), stamp)?
    };
    let vg = snapshot_in_pool(vg, ctx, want, &copy)?;
    if want > src_extents {
        let to = u32::try_from(want).map_err(|_| edit::refused(name, "too large"))?;
        return edit::lv::resize(vg, ctx, name, to, None, false);
    }
    Ok(vg)
}

/// The thin LV `thin` makes, its pool first grown by `grow` extents (what the new LV may
/// come to use: the pool is never overcommitted).
pub(super) fn snapshot_in_pool(
    vg: Vg,
    ctx: &EditCtx,
    grow: u64,
    thin: &ThinSpec,
) -> Result<Vg, EditError> {
    let vg = grow_by(vg, ctx, &thin.pool, grow)?;
    Ok(edit::thin::create_thin(vg, ctx, thin)?.0)
}
