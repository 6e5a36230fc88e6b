//! lvcreate (linear, striped, thin pools, thin LVs and snapshots) and lvextend, lvreduce,
//! lvresize.

use clap::Args;

use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, LvSpec, PoolSpec, Stamp, ThinSpec};
use lvmeta::session::Session;

use super::super::{failed, CmdResult};
use super::common::*;
use super::WriteArgs;

/// `lvcreate`'s options.
#[derive(Args, Clone)]
pub struct LvcreateArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// LV name.
    #[arg(short = 'n', long = "name")]
    name: Option<String>,
    /// Size (default unit MiB; suffixes b s k m g t p e).
    #[arg(short = 'L', long = "size")]
    size: Option<String>,
    /// Size in extents, or N%FREE, N%VG.
    #[arg(short = 'l', long = "extents")]
    extents: Option<String>,
    /// Stripes.
    #[arg(short = 'i', long = "stripes")]
    stripes: Option<u32>,
    /// Stripe size.
    #[arg(short = 'I', long = "stripesize")]
    stripe_size: Option<String>,
    /// linear, striped, thin-pool, thin, snapshot.
    #[arg(long = "type")]
    segtype: Option<String>,
    /// Virtual size of a thin LV.
    #[arg(short = 'V', long = "virtualsize")]
    virtual_size: Option<String>,
    /// The pool of a thin LV (`POOL` or `VG/POOL`).
    #[arg(long = "thinpool")]
    thinpool: Option<String>,
    /// Thin LV or pool (`-T VG/POOL`).
    #[arg(short = 'T', long = "thin")]
    thin: bool,
    /// Snapshot (of a thin LV).
    #[arg(short = 's', long = "snapshot")]
    snapshot: bool,
    /// Tags.
    #[arg(long = "addtag")]
    tags: Vec<String>,
    /// r or rw.
    #[arg(short = 'p', long = "permission")]
    permission: Option<String>,
    /// Skip activation: y or n.
    #[arg(short = 'k', long = "setactivationskip")]
    skip: Option<String>,
    /// Pool chunk size.
    #[arg(short = 'c', long = "chunksize")]
    chunk_size: Option<String>,
    /// Pool metadata size.
    #[arg(long = "poolmetadatasize")]
    pool_metadata_size: Option<String>,
    /// passdown, nopassdown, ignore.
    #[arg(long = "discards")]
    discards: Option<String>,
    /// y or n: zero new pool blocks (thin pools); other LVs are never zeroed here.
    #[arg(short = 'Z', long = "zero")]
    zero: Option<String>,
    /// Only n: lvcreate does not activate (lvchange -ay does).
    #[arg(short = 'a', long = "activate")]
    activate: Option<String>,
    /// VG, VG/POOL or VG/ORIGIN, then PVs to allocate from.
    #[arg(required = true)]
    args: Vec<String>,
}

/// `lvextend`/`lvreduce`/`lvresize` options.
#[derive(Args, Clone)]
pub struct ResizeArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// New size or `+SIZE`/`-SIZE`.
    #[arg(short = 'L', long = "size", allow_hyphen_values = true)]
    size: Option<String>,
    /// New size in extents (`+N`, `-N`, `N%FREE`, `N%VG`).
    #[arg(short = 'l', long = "extents", allow_hyphen_values = true)]
    extents: Option<String>,
    /// Allow shrinking.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
    force: u8,
    /// VG/LV, then PVs to allocate from.
    #[arg(required = true)]
    args: Vec<String>,
}

pub(super) fn lvcreate(a: &LvcreateArgs) -> CmdResult {
    if let Some(act) = a.activate.as_deref() {
        if !matches!(act, "n" | "no") {
            return Err(usage(
                "-a: lvcreate does not activate; create with -an, then lvchange -ay",
            ));
        }
    }
    let (target, pv_names) = a.args.split_first().ok_or_else(|| usage("VG needed"))?;
    let s = session(&a.w, &[])?;
    let stamp = Stamp::now();
    let segtype = a.segtype.as_deref();
    let thin_like = a.virtual_size.is_some() || a.thinpool.is_some() || segtype == Some("thin");
    let perm = permission(&a.permission)?.unwrap_or_default();
    let skip = yes_no(&a.skip, "--setactivationskip")?;
    // Thin snapshot: lvcreate -s VG/ORIGIN [-n NAME].
    if a.snapshot || segtype == Some("snapshot") {
        let (vg, origin) = vg_lv(target)?;
        let cur = current(&s, vg)?;
        let pool = match cur
            .lv(origin)
            .and_then(|l| l.segments.first())
            .map(|s| &s.kind)
        {
            Some(lvmeta::model::SegKind::Thin(t)) => t.thin_pool.clone(),
            _ => {
                return Err(failed(format!(
                    "{vg}/{origin}: lvmeta makes snapshots of thin LVs only"
                )))
            }
        };
        let spec = ThinSpec {
            name: a.name.clone(),
            pool,
            extents: 0,
            origin: Some(origin.to_owned()),
            tags: a.tags.clone(),
            activation_skip: skip,
            stamp,
        };
        return create_thin(&s, vg, &spec);
    }
    let (vg, in_target) = match target.split_once('/') {
        Some((v, l)) => (v, Some(l)),
        None => (target.as_str(), None),
    };
    let cur = current(&s, vg)?;
    let pvs = pv_list(&cur, &s, pv_names)?;
    if thin_like && segtype != Some("thin-pool") {
        let pool = match (&a.thinpool, in_target) {
            (Some(p), _) => p.rsplit('/').next().unwrap_or(p).to_owned(),
            (None, Some(p)) if a.thin => p.to_owned(),
            _ => return Err(usage("a thin LV needs --thinpool POOL (or -T VG/POOL)")),
        };
        let bytes =
            size_arg(&a.virtual_size, "-V", 'm')?.ok_or_else(|| usage("-V SIZE is needed"))?;
        let spec = ThinSpec {
            name: a.name.clone(),
            pool,
            extents: extents_of(&cur, Some(bytes), None)?,
            origin: None,
            tags: a.tags.clone(),
            activation_skip: skip,
            stamp,
        };
        return create_thin(&s, vg, &spec);
    }
    let stripes = a.stripes.unwrap_or(1);
    let mut extents = extents_of(&cur, size_arg(&a.size, "-L", 'm')?, a.extents.as_deref())?;
    if extents % stripes != 0 {
        extents += stripes - extents % stripes;
    }
    let stripe_size = sectors_arg(&a.stripe_size, "-I", 'k')?;
    let name = if segtype == Some("thin-pool") || (a.thin && in_target.is_some()) {
        a.name.clone().or(in_target.map(str::to_owned))
    } else {
        a.name.clone()
    };
    let spec = LvSpec {
        name,
        extents,
        stripes,
        stripe_size,
        pvs,
        tags: a.tags.clone(),
        permission: perm,
        activation_skip: skip.unwrap_or(false),
        stamp,
        lease_align: lease_align(&s, &cur),
        internal: false,
    };
    let made = match segtype {
        Some("thin-pool") => {
            let pool = PoolSpec {
                data: spec,
                chunk_size: sectors_arg(&a.chunk_size, "--chunksize", 'k')?,
                metadata_extents: size_arg(&a.pool_metadata_size, "--poolmetadatasize", 'm')?
                    .map(|b| extents_of(&cur, Some(b), None))
                    .transpose()?,
                discards: a.discards.clone().unwrap_or_else(|| "passdown".into()),
                zero: yes_no(&a.zero, "-Z")?.unwrap_or(true),
            };
            s.update(vg, "lvcreate", |v, ctx| {
                edit::thin::create_pool(v, ctx, &pool)
            })
            .map_err(failed)?
        }
        None | Some("linear" | "striped") => {
            if segtype == Some("linear") && stripes > 1 {
                return Err(usage("--type linear with -i > 1"));
            }
            s.update(vg, "lvcreate", |v, ctx| edit::lv::create(v, ctx, &spec))
                .map_err(failed)?
        }
        Some(t) => {
            return Err(usage(format!(
                "--type {t}: lvmeta creates linear, striped, thin-pool and thin LVs"
            )))
        }
    };
    if stripes > 1 && a.stripe_size.is_none() {
        println!("  Using default stripesize 64.00 KiB.");
    }
    println!("  Logical volume \"{made}\" created.");
    Ok(())
}

/// Creates a thin LV or thin snapshot and says so as lvm2 does.
pub(super) fn create_thin(s: &Session, vg: &str, spec: &ThinSpec) -> CmdResult {
    let made = s
        .update(vg, "lvcreate", |v, ctx| {
            edit::thin::create_thin(v, ctx, spec)
        })
        .map_err(failed)?;
    println!("  Logical volume \"{made}\" created.");
    deliver_if_active(s, vg, &spec.pool);
    Ok(())
}

/// The kernel turns a thin pool's discard support on or off (to or from `ignore`) only while
/// the pool is inactive, so lvm2 refuses that for a pool active here, and so does this. (A
/// pool active on another host is refused by its lease.)
pub(super) fn refuse_live_discard_switch(
    s: &Session,
    vg: &str,
    lv: &str,
    opts: &PoolOptions,
) -> CmdResult {
    let v = s.vg(vg).map_err(failed)?;
    let Some(p) = v.lv(lv).and_then(|l| l.pool()) else {
        return Ok(());
    };
    if !opts.switches_discard_support(p) {
        return Ok(());
    }
    let Some(backend) = lvmeta::activate::best() else {
        return Ok(());
    };
    match s.live(vg, lv, backend.as_ref()) {
        Ok(false) => Ok(()),
        Ok(true) => Err(failed(format!(
            "Cannot change support for discards while pool volume {vg}/{lv} is active."
        ))),
        Err(e) => Err(failed(format!(
            "cannot tell whether thin pool {vg}/{lv} is active: {e}"
        ))),
    }
}

/// After a change to thin pool `pool` (its thin LVs or its settings): when the pool is active
/// on this host (a VG without leases, or its lease free), reloads its table and sends it the
/// queued messages now, as lvm2 does; otherwise they wait for the pool's next activation. A
/// failure is a warning: the change is committed, and the next activation delivers it.
pub(super) fn deliver_if_active(s: &Session, vg: &str, pool: &str) {
    let Some(backend) = lvmeta::activate::best() else {
        return;
    };
    // The delivered queue is cleared by a commit (lvm2's update_pool_lv).
    if let Err(e) = s.refresh(vg, pool, backend.as_ref()) {
        eprintln!("  WARNING: thin pool {vg}/{pool} did not take its messages now: {e}");
    }
}

pub(super) fn resize(a: &ResizeArgs, grow: Option<bool>) -> CmdResult {
    let (target, pv_names) = a.args.split_first().ok_or_else(|| usage("VG/LV needed"))?;
    let (vg, lv) = vg_lv(target)?;
    let s = session(&a.w, &[])?;
    let cur = current(&s, vg)?;
    let now = cur
        .lv(lv)
        .map(|l| u32::try_from(l.extents()).unwrap_or(u32::MAX))
        .ok_or_else(|| {
            failed(lvmeta::Error::LvNotFound {
                vg: vg.into(),
                lv: lv.into(),
            })
        })?;
    let (sign, size, ext) = match (&a.size, &a.extents) {
        (Some(sz), None) => {
            let (sign, rest) = split_sign(sz);
            (
                sign,
                Some(parse_size(rest, 'm').map_err(|e| usage(format!("-L: {e}")))?),
                None,
            )
        }
        (None, Some(e)) => {
            let (sign, rest) = split_sign(e);
            (sign, None, Some(rest))
        }
        _ => return Err(usage("exactly one of -L and -l is needed")),
    };
    let n = extents_of(&cur, size, ext)?;
    let target_extents = match sign {
        Some('+') => now
            .checked_add(n)
            .ok_or_else(|| usage("size is too large"))?,
        Some(_) => now
            .checked_sub(n)
            .ok_or_else(|| usage("cannot shrink below 0"))?,
        None => n,
    };
    match grow {
        Some(true) if target_extents < now => {
            return Err(usage("lvextend cannot shrink; use lvreduce"))
        }
        Some(false) if target_extents > now => {
            return Err(usage("lvreduce cannot grow; use lvextend"))
        }
        _ => {}
    }
    let pvs = pv_list(&cur, &s, pv_names)?;
    s.update(vg, "lvresize", |v, ctx| {
        edit::lv::resize(v, ctx, lv, target_extents, pvs.as_deref(), a.force > 0)
    })
    .map_err(failed)?;
    println!("  Logical volume {vg}/{lv} successfully resized.");
    Ok(())
}

pub(super) fn split_sign(s: &str) -> (Option<char>, &str) {
    match s.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
        _ => (None, s),
    }
}
