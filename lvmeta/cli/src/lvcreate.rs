//! `lvcreate`: linear, striped, thin pools, thin LVs and thin snapshots.

use clap::Args;

use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, LvSpec, PoolSpec, Stamp, ThinSpec};
use lvmeta::session::Session;

use crate::args::{
    current, extents_of, failed, long_size, permission, pv_list, rounded_up, sectors_arg, session,
    size_arg, usage, vg_lv, yes_no, WriteArgs,
};
use crate::lv::deliver_if_active;
use crate::CmdResult;

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

impl LvcreateArgs {
    /// Creates the LV lvm2 would, and says so as lvm2 does.
    pub fn run(&self) -> CmdResult {
        let a = self;
        if let Some(act) = a.activate.as_deref() {
            if !matches!(act, "n" | "no") {
                return Err(usage(
                    "-a: lvcreate does not activate; create with -an, then lvchange -ay",
                ));
            }
        }
        let (target, pv_names) = a.args.split_first().ok_or_else(|| usage("VG needed"))?;
        if let Some(n) = &a.name {
            lvmeta::names::check_lv_name(n)
                .map_err(|e| usage(format!("Logical volume name \"{n}\" is invalid: {e}")))?;
        }
        let s = session(&a.w, &[])?;
        let stamp = Stamp::now();
        // lvm2: -T with a size and no -V makes a thin pool (`-T -L 40M VG/POOL`, or `-n POOL`).
        let sized = a.size.is_some() || a.extents.is_some();
        let segtype = match a.segtype.as_deref() {
            None if a.thin && sized && a.virtual_size.is_none() => Some("thin-pool"),
            t => t,
        };
        let thin_like = a.virtual_size.is_some() || a.thinpool.is_some() || segtype == Some("thin");
        let perm = permission(&a.permission)?.unwrap_or_default();
        let skip = yes_no(&a.skip, "--setactivationskip")?;
        // Thin snapshot: lvcreate -s VG/ORIGIN [-n NAME].
        if a.snapshot || segtype == Some("snapshot") {
            let (vg, origin) = vg_lv(target)?;
            let cur = current(&s, vg)?;
            let spec = ThinSpec {
                tags: a.tags.clone(),
                activation_skip: skip,
                ..ThinSpec::snapshot_of(&cur, origin, a.name.clone(), stamp).map_err(failed)?
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
            if let Some(up) = rounded_up(&cur, Some(bytes)) {
                println!(
                    "  Rounding up size to full physical extent {}",
                    long_size(up)
                );
            }
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
        let size = size_arg(&a.size, "-L", 'm')?;
        if let Some(up) = rounded_up(&cur, size) {
            println!(
                "  Rounding up size to full physical extent {}",
                long_size(up)
            );
        }
        let mut extents = extents_of(&cur, size, a.extents.as_deref())?;
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
            internal: false,
        };
        let made = match segtype {
            Some("thin-pool") => {
                let options = PoolOptions {
                    zero: yes_no(&a.zero, "-Z")?,
                    discards: a.discards.clone(),
                };
                let pool = PoolSpec {
                    chunk_size: sectors_arg(&a.chunk_size, "--chunksize", 'k')?,
                    metadata_extents: size_arg(&a.pool_metadata_size, "--poolmetadatasize", 'm')?
                        .map(|b| extents_of(&cur, Some(b), None))
                        .transpose()?,
                    ..PoolSpec::new(spec, &options)
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
        if segtype == Some("thin-pool") {
            let chunk = current(&s, vg)?
                .lv(&made)
                .and_then(|l| l.pool().map(|p| p.chunk_size))
                .unwrap_or(0);
            println!(
                "  Thin pool volume with chunk size {} can address at most {} of data.",
                long_size(u64::from(chunk) * 512),
                long_size(max_pool_data(chunk))
            );
        }
        println!("  Logical volume \"{made}\" created.");
        Ok(())
    }
}

/// The most data a thin pool of `chunk`-sector chunks can address, in bytes, as lvm2
/// estimates it: one 64-byte mapping per chunk in the largest metadata lvm2 makes
/// (255 x (2^14 - 64) x 4 KiB, cropped).
fn max_pool_data(chunk: u32) -> u64 {
    const MAX_METADATA_SECTORS: u64 = 2 * 255 * ((1 << 14) - 64) * 4;
    MAX_METADATA_SECTORS * u64::from(chunk) * 512 / 64 * 512
}

/// Creates a thin LV or thin snapshot and says so as lvm2 does.
fn create_thin(s: &Session, vg: &str, spec: &ThinSpec) -> CmdResult {
    let made = s
        .update(vg, "lvcreate", |v, ctx| {
            edit::thin::create_thin(v, ctx, spec)
        })
        .map_err(failed)?;
    println!("  Logical volume \"{made}\" created.");
    deliver_if_active(s, vg, &spec.pool);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What stock lvm2 2.03.16 printed for these chunk sizes.
    #[test]
    fn pool_reach_is_lvm2s() {
        for (chunk, want) in [
            (128, "<15.88 TiB"),
            (256, "31.75 TiB"),
            (384, "<47.63 TiB"),
            (4096, "<508.01 TiB"),
            (2_097_152, "254.00 PiB"),
        ] {
            assert_eq!(long_size(max_pool_data(chunk)), want, "chunk {chunk}");
        }
        assert_eq!(long_size(16 << 20), "16.00 MiB");
    }
}
