//! Volumes and snapshots found in a VG's metadata by their tags.

use super::*;

/// The pool of thin LV `lv`.
pub(super) fn pool_of(vg: &Vg, lv: &str) -> Option<String> {
    vg.lv(lv)?.thin_pool().map(str::to_owned)
}

/// The snapshot `name` of `vg`: a thin LV carrying the snapshot tag.
pub(super) fn snapshot_of(vg: &Vg, name: &str) -> Option<Snapshot> {
    snapshot_in(vg, vg.lv(name)?, |n| vg.lv(n))
}

/// LV `lv` of `vg` as a snapshot, if it is one; `find` looks up other LVs of `vg` by name.
pub(super) fn snapshot_in<'a>(
    vg: &Vg,
    lv: &Lv,
    find: impl Fn(&str) -> Option<&'a Lv>,
) -> Option<Snapshot> {
    let source = lv
        .tags
        .iter()
        .find_map(|t| t.strip_prefix(SNAPSHOT_TAG))?
        .to_owned();
    find(lv.thin_pool()?)?;
    Some(Snapshot {
        vg: vg.name.clone(),
        name: lv.name.clone(),
        source,
        bytes: vg.bytes_of(lv.extents()).0,
        created: lv.creation.as_ref().map(|c| c.0),
    })
}

/// The volumes of `vg`, by name (one index of the LVs, then one pass).
pub(super) fn volumes_in(vg: &Vg) -> Vec<Volume> {
    let index = vg.by_name();
    let mut out: Vec<Volume> = vg
        .lvs
        .iter()
        .filter_map(|l| volume_in(vg, l, |n| index.get(n)))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// The volume `name` of `vg`: an LV carrying the mode tag (a thin one in its own pool).
pub(crate) fn volume_of(vg: &Vg, name: &str) -> Option<Volume> {
    volume_in(vg, vg.lv(name)?, |n| vg.lv(n))
}

/// LV `lv` of `vg` as a volume, if it is one; `find` looks up other LVs of `vg` by name.
pub(super) fn volume_in<'a>(
    vg: &Vg,
    lv: &Lv,
    find: impl Fn(&str) -> Option<&'a Lv>,
) -> Option<Volume> {
    let mode = lv
        .tags
        .iter()
        .find_map(|t| Mode::parse(t.strip_prefix(MODE_TAG)?))?;
    let shape_ok = match (mode, &lv.segments.first()?.kind) {
        (Mode::Linear, SegKind::Striped(_)) => true,
        (Mode::Thin, SegKind::Thin(t)) => find(&t.thin_pool).is_some(),
        _ => false,
    };
    shape_ok.then(|| Volume {
        vg: vg.name.clone(),
        name: lv.name.clone(),
        mode,
        bytes: vg.bytes_of(lv.extents()).0,
    })
}

/// The source named by the pending-clone tag of LV `name`, if it has one.
pub(super) fn clone_source<'a>(vg: &'a Vg, name: &str) -> Option<&'a str> {
    clone_source_of(vg.lv(name)?)
}

/// The source named by the pending-clone tag of `lv`, if it has one.
pub(super) fn clone_source_of(lv: &Lv) -> Option<&str> {
    lv.tags
        .iter()
        .find_map(|t| t.strip_prefix(CLONE_PENDING_TAG))
}

/// The volume `name` when it exists and matches the request; an error when something else
/// holds the name.
pub(super) fn existing(
    vg: &Vg,
    ctx: &EditCtx,
    name: &str,
    mode: Mode,
    size: SizeRange,
) -> Result<Option<Volume>, EditError> {
    if ctx.lacks_lv(vg, name) {
        return Ok(None);
    }
    match volume_of(vg, name) {
        Some(v) if v.mode == mode && size.accepts(v.bytes) => Ok(Some(v)),
        Some(v) => Err(EditError::Exists {
            what: "Volume (of another mode or size)",
            name: format!("{name} ({}, {} bytes)", v.mode.as_str(), v.bytes),
            vg: vg.name.clone(),
        }),
        None if vg.lv(name).is_some() => Err(EditError::Exists {
            what: "Logical Volume (not a volume of this driver)",
            name: name.to_owned(),
            vg: vg.name.clone(),
        }),
        None => Ok(None),
    }
}
