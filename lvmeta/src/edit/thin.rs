//! Thin provisioning edits: pools (with `_tdata`, `_tmeta` and the VG's `_pmspare`), thin LVs
//! and thin snapshots, removal with lvm2's message queue (lvm2's `lib/metadata/thin_manip.c`).
//!
//! lvm2 queues each change for the kernel as a pool message and bumps the pool's
//! `transaction_id` when the first message is queued; whoever activates the pool next
//! delivers the queue (`create_thin`, `create_snap`, `delete`, `set_transaction_id`) and
//! clears it. lvmeta leaves the queue exactly as lvm2 leaves it when no pool is active.

use std::sync::Arc;

use super::add::create_in;
use super::parts::{grow, lv_index, new_lv, new_name, next_lvol_name, users};
use super::slots::{assign_lease, SPARE_LEASE_SLOTS};
use super::{check, refused, EditCtx, EditError, LvSpec, Stamp};
use crate::model::{
    Lv, SegKind, Segment, Thin, ThinMessage, ThinPool, Vg, DISCARDS, MAX_THIN_DEVICE_ID,
};

/// lvm2's default pool chunk size: 64 KiB, in sectors.
pub const DEFAULT_CHUNK_SIZE: u32 = 128;
/// Smallest pool metadata LV: 2 MiB in sectors.
const MIN_METADATA: u64 = 4096;
/// Largest chunk size: 1 GiB in sectors.
const MAX_CHUNK_SIZE: u32 = 2_097_152;
/// Metadata size above which lvm2 doubles the default chunk size: 128 MiB in sectors.
const OPTIMAL_METADATA: u64 = 262_144;

/// What `lvcreate --type thin-pool` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    /// The data LV: name, size in extents, stripes, PVs, tags, stamp.
    pub data: LvSpec,
    /// `--chunksize` in sectors (default: 64 KiB, grown for very large pools).
    pub chunk_size: Option<u32>,
    /// `--poolmetadatasize` in extents (default: lvm2's estimate).
    pub metadata_extents: Option<u32>,
    /// `--discards` (default `passdown`).
    pub discards: String,
    /// `-Z` (default y).
    pub zero: bool,
}

impl PoolSpec {
    /// A pool with data LV `data` and `options`, lvm2's defaults for what they leave out
    /// (zeroing, `passdown`), chunk and metadata sizes estimated.
    pub fn new(data: LvSpec, options: &PoolOptions) -> Self {
        Self {
            data,
            chunk_size: None,
            metadata_extents: None,
            discards: options
                .discards
                .clone()
                .unwrap_or_else(|| "passdown".into()),
            zero: options.zero.unwrap_or(true),
        }
    }
}

fn check_discards(d: &str) -> Result<(), EditError> {
    if DISCARDS.contains(&d) {
        Ok(())
    } else {
        Err(EditError::Option {
            option: "--discards",
            why: format!("{d:?} is not passdown, nopassdown or ignore"),
        })
    }
}

/// What `lvchange -Z` / `--discards` asks of a thin pool (`None`: left as it is).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolOptions {
    /// `-Z`: zero new chunks before their first use.
    pub zero: Option<bool>,
    /// `--discards`: `passdown`, `nopassdown` or `ignore`.
    pub discards: Option<String>,
}

impl PoolOptions {
    /// The options pool `p` has now.
    pub fn of(p: &ThinPool) -> Self {
        Self {
            zero: Some(p.zero_new_blocks),
            discards: Some(p.discards_mode().to_owned()),
        }
    }

    /// Whether nothing is asked.
    pub fn is_empty(&self) -> bool {
        self.zero.is_none() && self.discards.is_none()
    }

    /// Whether pool `p` has every option asked for already.
    pub fn met_by(&self, p: &ThinPool) -> bool {
        let now = Self::of(p);
        self.zero.is_none_or(|z| now.zero == Some(z))
            && self
                .discards
                .as_ref()
                .is_none_or(|d| now.discards.as_ref() == Some(d))
    }

    /// Whether setting them on `p` turns its discard support on or off (to or from
    /// `ignore`), which the kernel refuses for an active pool, and so lvm2 does too.
    pub fn switches_discard_support(&self, p: &ThinPool) -> bool {
        let now = Self::of(p).discards;
        self.discards.as_ref().is_some_and(|d| {
            Some(d) != now.as_ref() && (d == "ignore" || now.as_deref() == Some("ignore"))
        })
    }
}

/// `lvchange -Z y|n --discards ...` of thin pool `name`: sets what `opts` asks. The host
/// where the pool is active delivers it by reloading the pool's table (`lvchange
/// --refresh`); a change of discard support must wait until the pool is inactive.
pub fn change_pool(vg: Vg, ctx: &EditCtx, name: &str, opts: &PoolOptions) -> Result<Vg, EditError> {
    if let Some(d) = &opts.discards {
        check_discards(d)?;
    }
    let mut out = vg;
    let vg_name = out.name.clone();
    let i = lv_index(&out, name)?;
    let Some(p) = pool_mut(Arc::make_mut(&mut out.lvs[i])) else {
        return Err(refused(format!("{vg_name}/{name}"), "is not a thin pool"));
    };
    if let Some(z) = opts.zero {
        p.zero_new_blocks = z;
    }
    if let Some(d) = &opts.discards {
        p.discards = Some(d.clone());
    }
    check(&out, ctx)?;
    Ok(out)
}

/// What `lvcreate -V --thinpool` or a thin `lvcreate -s` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThinSpec {
    /// `-n`; `lvol<N>` when absent.
    pub name: Option<String>,
    /// The pool.
    pub pool: String,
    /// Virtual size in extents (ignored for snapshots: the origin's size).
    pub extents: u32,
    /// Snapshot of this thin LV.
    pub origin: Option<String>,
    /// `--addtag`.
    pub tags: Vec<String>,
    /// `-k`: skip activation (lvm2's default for snapshots).
    pub activation_skip: Option<bool>,
    /// Creation time and host.
    pub stamp: Stamp,
}

impl ThinSpec {
    /// A thin snapshot of thin LV `origin` of `vg` in the origin's pool (`lvcreate -s`):
    /// named `name` (`None`: the next `lvol<N>`), no tags, lvm2's activation skip.
    pub fn snapshot_of(
        vg: &Vg,
        origin: &str,
        name: Option<String>,
        stamp: Stamp,
    ) -> Result<Self, EditError> {
        let pool = match vg
            .lv(origin)
            .and_then(|l| l.segments.first())
            .map(|s| &s.kind)
        {
            Some(SegKind::Thin(t)) => t.thin_pool.clone(),
            _ => {
                return Err(refused(
                    format!("{}/{origin}", vg.name),
                    "lvmeta makes snapshots of thin LVs only",
                ))
            }
        };
        Ok(Self {
            name,
            pool,
            extents: 0,
            origin: Some(origin.to_owned()),
            tags: Vec::new(),
            activation_skip: None,
            stamp,
        })
    }
}

/// lvm2's metadata size estimate, in sectors: 64 bytes per chunk, at least 2 MiB.
fn estimate_metadata(data_sectors: u64, chunk: u32) -> u64 {
    (data_sectors / (u64::from(chunk) * 8)).max(MIN_METADATA)
}

fn check_chunk(chunk: u32) -> Result<(), EditError> {
    if !(DEFAULT_CHUNK_SIZE..=MAX_CHUNK_SIZE).contains(&chunk)
        || !chunk.is_multiple_of(DEFAULT_CHUNK_SIZE)
    {
        return Err(EditError::Option {
            option: "--chunksize",
            why: format!(
                "{} KiB is not a multiple of 64 KiB between 64 KiB and 1 GiB",
                chunk / 2
            ),
        });
    }
    Ok(())
}

/// The VG's pool metadata spare, if any.
fn spare(vg: &Vg) -> Option<usize> {
    vg.lvs
        .iter()
        .position(|l| crate::model::validate::is_spare(l))
}

fn hidden(vg: &mut Vg, index: usize) {
    Arc::make_mut(&mut vg.lvs[index])
        .status
        .retain(|s| s != "VISIBLE");
}

/// `lvcreate --type thin-pool`. Returns the VG and the pool's name.
pub fn create_pool(vg: Vg, ctx: &EditCtx, spec: &PoolSpec) -> Result<(Vg, String), EditError> {
    let mut out = vg;
    let name = new_name(&out, ctx, spec.data.name.as_deref(), false)?;
    check_discards(&spec.discards)?;
    let data_sectors = u64::from(spec.data.extents) * u64::from(out.extent_size);
    let chunk = match spec.chunk_size {
        Some(c) => c,
        None => {
            let mut c = DEFAULT_CHUNK_SIZE;
            while estimate_metadata(data_sectors, c) > OPTIMAL_METADATA && c < MAX_CHUNK_SIZE {
                c *= 2;
            }
            c
        }
    };
    check_chunk(chunk)?;
    let meta_extents = match spec.metadata_extents {
        Some(e) => e,
        None => {
            let sectors = estimate_metadata(data_sectors, chunk);
            u32::try_from(sectors.div_ceil(u64::from(out.extent_size))).unwrap_or(u32::MAX)
        }
    };
    // Data first, then metadata, then the spare (sized like the largest pool metadata).
    let tdata = format!("{name}_tdata");
    let tmeta = format!("{name}_tmeta");
    let sub = |n: &str, extents: u32| LvSpec {
        name: Some(n.to_owned()),
        extents,
        tags: Vec::new(),
        internal: true,
        activation_skip: false,
        ..spec.data.clone()
    };
    let di = create_in(&mut out, ctx, &sub(&tdata, spec.data.extents))?;
    hidden(&mut out, di);
    let mut meta = sub(&tmeta, meta_extents);
    meta.stripes = 1;
    let mi = create_in(&mut out, ctx, &meta)?;
    hidden(&mut out, mi);
    match spare(&out) {
        Some(s) if out.lvs[s].extents() < u64::from(meta_extents) => {
            let more = meta_extents - u32::try_from(out.lvs[s].extents()).unwrap_or(0);
            grow(&mut out, ctx, s, more, None)?;
        }
        Some(_) => {}
        None => {
            let spare_name = format!("{}_pmspare", next_lvol_name(&out));
            let mut sp = sub(&spare_name, meta_extents);
            sp.stripes = 1;
            let si = create_in(&mut out, ctx, &sp)?;
            hidden(&mut out, si);
        }
    }
    let mut pool = new_lv(&name, &spec.data, true);
    pool.segments.push(Segment {
        start_extent: 0,
        extent_count: spec.data.extents,
        reshape_count: None,
        data_copies: None,
        type_flags: Vec::new(),
        tags: Vec::new(),
        kind: SegKind::ThinPool(ThinPool {
            metadata: tmeta,
            pool: tdata,
            transaction_id: 0,
            chunk_size: chunk,
            discards: Some(spec.discards.clone()),
            zero_new_blocks: spec.zero,
            crop_metadata: None,
            messages: Vec::new(),
        }),
    });
    // lvm2 puts a new thin pool first among the LVs (its sub-LVs were added last): lists in
    // metadata order (`vgs -o lv_name`, `lvremove VG`) come out as lvm2's.
    out.lvs.insert(0, Arc::new(pool));
    let pi = 0;
    if out.is_shared() {
        assign_lease(&mut out, ctx, pi, ctx.lease_align(), &[], SPARE_LEASE_SLOTS)?;
    }
    check(&out, ctx)?;
    Ok((out, name))
}

fn pool_mut(lv: &mut Lv) -> Option<&mut ThinPool> {
    match &mut lv.segments.first_mut()?.kind {
        SegKind::ThinPool(p) => Some(p),
        _ => None,
    }
}

fn thin_of(lv: &Lv) -> Option<&Thin> {
    match &lv.segments.first()?.kind {
        SegKind::Thin(t) => Some(t),
        _ => None,
    }
}

/// Queues `msg` on the pool; the first queued message advances the transaction id.
fn queue(pool: &mut ThinPool, msg: ThinMessage) {
    if pool.messages.is_empty() {
        pool.transaction_id += 1;
    }
    pool.messages.push(msg);
}

/// `lvcreate -V --thinpool` and thin snapshots (`lvcreate -s` of a thin LV). Returns the VG
/// and the new LV's name.
pub fn create_thin(vg: Vg, ctx: &EditCtx, spec: &ThinSpec) -> Result<(Vg, String), EditError> {
    let (out, mut names) = create_thins(vg, ctx, std::slice::from_ref(spec))?;
    Ok((out, names.pop().unwrap_or_default()))
}

/// Several thin LVs (or snapshots) in one change: one seqno, one commit.
pub fn create_thins(
    vg: Vg,
    ctx: &EditCtx,
    specs: &[ThinSpec],
) -> Result<(Vg, Vec<String>), EditError> {
    let mut out = vg;
    let names = specs
        .iter()
        .map(|s| add_thin(&mut out, ctx, s))
        .collect::<Result<Vec<_>, _>>()?;
    check(&out, ctx)?;
    Ok((out, names))
}

fn add_thin(out: &mut Vg, ctx: &EditCtx, spec: &ThinSpec) -> Result<String, EditError> {
    let vg_name = out.name.clone();
    let pi = lv_index(out, &spec.pool)?;
    let Some(pool) = out.lvs[pi].pool() else {
        return Err(refused(
            format!("{vg_name}/{}", spec.pool),
            "is not a thin pool",
        ));
    };
    let transaction_id = pool.transaction_id;
    let extents = match &spec.origin {
        Some(o) => {
            let origin = &out.lvs[lv_index(out, o)?];
            match thin_of(origin) {
                Some(t) if t.thin_pool == spec.pool => {}
                _ => {
                    return Err(refused(
                        format!("{vg_name}/{o}"),
                        format!("is not a thin LV of pool {}", spec.pool),
                    ))
                }
            }
            u32::try_from(origin.extents()).unwrap_or(u32::MAX)
        }
        None => spec.extents,
    };
    if extents == 0 {
        return Err(EditError::Option {
            option: "-V",
            why: "virtual size must be positive".into(),
        });
    }
    let name = new_name(out, ctx, spec.name.as_deref(), false)?;
    let max_id = out
        .lvs
        .iter()
        .filter_map(|l| thin_of(l))
        .filter(|t| t.thin_pool == spec.pool)
        .map(|t| t.device_id)
        .max()
        .unwrap_or(0);
    let device_id = max_id + 1;
    if device_id > MAX_THIN_DEVICE_ID {
        return Err(refused(
            format!("{vg_name}/{}", spec.pool),
            "Cannot find free device_id",
        ));
    }
    let mut base = LvSpec::linear(&name, extents, spec.stamp.clone());
    base.tags = spec.tags.clone();
    base.activation_skip = spec.activation_skip.unwrap_or(spec.origin.is_some());
    let mut lv = new_lv(&name, &base, true);
    lv.segments.push(Segment {
        start_extent: 0,
        extent_count: extents,
        reshape_count: None,
        data_copies: None,
        type_flags: Vec::new(),
        tags: Vec::new(),
        kind: SegKind::Thin(Thin {
            thin_pool: spec.pool.clone(),
            transaction_id,
            device_id,
            origin: spec.origin.clone(),
            external_origin: None,
            merge: None,
        }),
    });
    out.lvs.push(Arc::new(lv));
    if let Some(p) = pool_mut(Arc::make_mut(&mut out.lvs[pi])) {
        queue(p, ThinMessage::Create(name.clone()));
    }
    Ok(name)
}

/// Removes a thin LV: drops its queued `create`, or queues a `delete` of its device id.
pub(crate) fn remove_thin(vg: &mut Vg, name: &str) -> Result<(), EditError> {
    let i = lv_index(vg, name)?;
    let Some(t) = thin_of(&vg.lvs[i]).cloned() else {
        return Err(refused(name.to_owned(), "is not a thin LV"));
    };
    // Snapshots of it keep their data (the pool shares blocks); only the reference goes.
    for lv in &mut vg.lvs {
        let of_it = matches!(lv.segments.first().map(|s| &s.kind),
            Some(SegKind::Thin(s)) if s.origin.as_deref() == Some(name));
        if !of_it {
            continue;
        }
        if let Some(SegKind::Thin(s)) = Arc::make_mut(lv).segments.first_mut().map(|s| &mut s.kind)
        {
            s.origin = None;
        }
    }
    vg.lvs.remove(i);
    let pi = lv_index(vg, &t.thin_pool)?;
    if let Some(p) = pool_mut(Arc::make_mut(&mut vg.lvs[pi])) {
        let queued = p
            .messages
            .iter()
            .position(|m| matches!(m, ThinMessage::Create(n) if n == name));
        match queued {
            Some(q) => {
                p.messages.remove(q);
            }
            None if t.device_id != 0 => queue(p, ThinMessage::Delete(t.device_id)),
            None => {}
        }
    }
    Ok(())
}

/// After the kernel pool took the queued messages (its transaction id is now the metadata's
/// `transaction_id`): clears the queue of pool `name`, as lvm2's `update_pool_lv` does. A
/// pool whose transaction id is no longer `transaction_id` is refused: its queue holds
/// messages not delivered.
pub fn delivered(vg: Vg, ctx: &EditCtx, name: &str, transaction_id: u64) -> Result<Vg, EditError> {
    let mut out = vg;
    let vg_name = out.name.clone();
    let i = lv_index(&out, name)?;
    let Some(p) = pool_mut(Arc::make_mut(&mut out.lvs[i])) else {
        return Err(refused(format!("{vg_name}/{name}"), "is not a thin pool"));
    };
    if p.transaction_id != transaction_id {
        return Err(refused(
            format!("{vg_name}/{name}"),
            format!(
                "transaction id is {}, not the delivered {transaction_id}",
                p.transaction_id
            ),
        ));
    }
    p.messages.clear();
    check(&out, ctx)?;
    Ok(out)
}

/// Removes a pool with its `_tdata` and `_tmeta` (and its thin LVs when `force`); the spare
/// goes with the VG's last pool.
pub(crate) fn remove_pool(vg: &mut Vg, name: &str, force: bool) -> Result<(), EditError> {
    let i = lv_index(vg, name)?;
    let Some(p) = vg.lvs[i].pool().cloned() else {
        return Err(refused(name.to_owned(), "is not a thin pool"));
    };
    let thins: Vec<String> = vg
        .lvs
        .iter()
        .filter(|l| thin_of(l).is_some_and(|t| t.thin_pool == name))
        .map(|l| l.name.clone())
        .collect();
    if !thins.is_empty() && !force {
        return Err(refused(
            format!("{}/{name}", vg.name),
            format!(
                "pool has {} thin volume(s) ({}); remove them first or use -f",
                thins.len(),
                thins.join(", ")
            ),
        ));
    }
    let gone =
        |n: &str| n == name || n == p.pool || n == p.metadata || thins.iter().any(|t| t == n);
    let outside: Vec<&str> = [name, p.pool.as_str(), p.metadata.as_str()]
        .iter()
        .flat_map(|n| users(vg, n))
        .filter(|u| !gone(u))
        .collect();
    if !outside.is_empty() {
        return Err(refused(
            format!("{}/{name}", vg.name),
            format!("in use by {}", outside.join(", ")),
        ));
    }
    vg.lvs.retain(|l| !gone(&l.name));
    if !vg.lvs.iter().any(|l| l.pool().is_some()) {
        if let Some(s) = spare(vg) {
            vg.lvs.remove(s);
        }
    }
    Ok(())
}

/// Grows a pool's data LV (pools do not shrink).
pub(crate) fn resize_pool(
    vg: &mut Vg,
    ctx: &EditCtx,
    index: usize,
    extents: u32,
    pvs: Option<&[usize]>,
) -> Result<(), EditError> {
    let current = u32::try_from(vg.lvs[index].extents()).unwrap_or(u32::MAX);
    let Some(p) = vg.lvs[index].pool().cloned() else {
        return Err(refused(vg.lvs[index].name.clone(), "is not a thin pool"));
    };
    if extents < current {
        return Err(refused(
            vg.lvs[index].name.clone(),
            "Thin pool volumes cannot be reduced in size yet.",
        ));
    }
    let di = lv_index(vg, &p.pool)?;
    grow(vg, ctx, di, extents - current, pvs)?;
    Arc::make_mut(&mut vg.lvs[index]).segments[0].extent_count = extents;
    Ok(())
}
