//! `lvcreate`: linear, striped, thin pools, thin LVs and thin snapshots.

use clap::Args;

use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, LvSpec, PoolSpec, Stamp, ThinSpec};
use lvmeta::model::Vg;
use lvmeta::session::Session;

use crate::args::{
    current, extents_of, failed, long_size, open, permission, pv_list, rounded_up, sectors_arg,
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
    /// VG, VG/POOL or VG/ORIGIN, then PVs to allocate from (the VG may come from
    /// `--thinpool VG/POOL` instead).
    args: Vec<String>,
}

/// What one `lvcreate` makes, as lvm2 reads its options.
struct Plan<'a> {
    /// `-s`: a thin snapshot of `VG/ORIGIN`.
    snapshot: bool,
    /// A thin pool (`--type thin-pool`; or a size with `-T`, `--thinpool` or `--type thin`).
    pool: bool,
    /// A thin LV (`-V` or `--type thin`), in the pool made here or an existing one.
    thin: bool,
    /// The pool's name: `--thinpool [VG/]POOL`, `-T VG/POOL`, or `-n` when no thin LV is made.
    pool_name: Option<String>,
    /// The other LV's name: `-n`, or the `VG/LV` argument.
    name: Option<String>,
    /// The VG.
    vg: &'a str,
}

impl LvcreateArgs {
    /// Reads the options as lvm2 does (see [`Plan`]).
    fn plan<'a>(&self, target: &'a str) -> Result<Plan<'a>, (u8, String)> {
        let a = self;
        let sized = a.size.is_some() || a.extents.is_some();
        let segtype = a.segtype.as_deref();
        let (vg, in_target) = match target.split_once('/') {
            Some((v, l)) => (v.trim_start_matches("/dev/"), Some(l.to_owned())),
            None => (target, None),
        };
        let snapshot = a.snapshot || segtype == Some("snapshot");
        let thin = !snapshot && (a.virtual_size.is_some() || segtype == Some("thin"));
        let pool = !snapshot
            && match segtype {
                Some("thin-pool") => true,
                Some("thin") => sized,
                None => sized && (a.thin || a.thinpool.is_some()),
                Some(_) => false,
            };
        if segtype == Some("thin-pool") && a.virtual_size.is_some() {
            return Err(usage(
                "-V: --type thin-pool makes a pool; its thin LVs take -V",
            ));
        }
        if let Some(t) = segtype {
            if !matches!(t, "linear" | "striped" | "thin-pool" | "thin" | "snapshot") {
                return Err(usage(format!(
                    "--type {t}: lvmeta creates linear, striped, thin-pool and thin LVs"
                )));
            }
        }
        let named_pool = match &a.thinpool {
            Some(p) => Some(p.rsplit('/').next().unwrap_or(p).to_owned()),
            None if a.thin || pool => in_target.clone(),
            None => None,
        };
        let (pool_name, name) = if pool && !thin {
            (named_pool.or(a.name.clone()), None)
        } else if snapshot || thin {
            (named_pool, a.name.clone())
        } else {
            (None, a.name.clone().or(in_target))
        };
        if thin && !pool && pool_name.is_none() {
            return Err(usage("a thin LV needs --thinpool POOL (or -T VG/POOL)"));
        }
        Ok(Plan {
            snapshot,
            pool,
            thin,
            pool_name,
            name,
            vg,
        })
    }

    /// Creates the LVs lvm2 would, and says so as lvm2 does.
    pub fn run(&self) -> CmdResult {
        let a = self;
        if let Some(act) = a.activate.as_deref() {
            if !matches!(act, "n" | "no") {
                return Err(usage(
                    "-a: lvcreate does not activate; create with -an, then lvchange -ay",
                ));
            }
        }
        let (target, pv_names) = match a.args.split_first() {
            Some((t, rest)) => (t.as_str(), rest),
            // lvm2: `lvcreate -V SIZE --thinpool VG/POOL` names no VG on its own.
            None => match a.thinpool.as_deref().and_then(|p| p.split_once('/')) {
                Some((vg, _)) => (vg, &[][..]),
                None => return Err(usage("Please specify a logical volume name or a VG.")),
            },
        };
        if let Some(n) = &a.name {
            lvmeta::names::check_lv_name(n)
                .map_err(|e| usage(format!("Logical volume name \"{n}\" is invalid: {e}")))?;
        }
        let plan = self.plan(target)?;
        let s = open(&a.w, &[])?;
        let stamp = Stamp::now();
        let skip = yes_no(&a.skip, "--setactivationskip")?;
        let vg = plan.vg;
        // Thin snapshot: lvcreate -s VG/ORIGIN [-n NAME].
        if plan.snapshot {
            let (vg, origin) = vg_lv(target)?;
            let cur = current(&s, vg)?;
            let spec = ThinSpec {
                tags: a.tags.clone(),
                activation_skip: skip,
                ..ThinSpec::snapshot_of(&cur, origin, a.name.clone(), stamp).map_err(failed)?
            };
            return create_thin(&s, vg, &spec);
        }
        let cur = current(&s, vg)?;
        let pool = match plan.pool {
            true => Some(self.create_pool(&s, &cur, &plan, pv_names, stamp.clone())?),
            false => None,
        };
        if !plan.thin {
            return match pool {
                Some(made) => {
                    println!("  Logical volume \"{made}\" created.");
                    Ok(())
                }
                None => self.create_lv(&s, &cur, &plan, pv_names, stamp),
            };
        }
        let bytes =
            size_arg(&a.virtual_size, "-V", 'm')?.ok_or_else(|| usage("-V SIZE is needed"))?;
        if let Some(up) = rounded_up(&cur, Some(bytes)) {
            println!(
                "  Rounding up size to full physical extent {}",
                long_size(up)
            );
        }
        let spec = ThinSpec {
            name: plan.name.clone(),
            pool: pool.or(plan.pool_name.clone()).unwrap_or_default(),
            extents: extents_of(&cur, Some(bytes), None)?,
            origin: None,
            tags: a.tags.clone(),
            activation_skip: skip,
            stamp,
        };
        create_thin(&s, vg, &spec)
    }

    /// The data LV's spec: `-L`/`-l` (rounded up to whole extents and stripes, as lvm2 says),
    /// `-i`, `-I`, the PVs, tags, `-p`, `-k`.
    fn lv_spec(
        &self,
        s: &Session,
        cur: &Vg,
        name: Option<String>,
        pv_names: &[String],
        stamp: Stamp,
    ) -> Result<LvSpec, (u8, String)> {
        let a = self;
        let stripes = a.stripes.unwrap_or(1);
        let size = size_arg(&a.size, "-L", 'm')?;
        if let Some(up) = rounded_up(cur, size) {
            println!(
                "  Rounding up size to full physical extent {}",
                long_size(up)
            );
        }
        let mut extents = extents_of(cur, size, a.extents.as_deref())?;
        if extents % stripes != 0 {
            extents += stripes - extents % stripes;
        }
        Ok(LvSpec {
            name,
            extents,
            stripes,
            stripe_size: sectors_arg(&a.stripe_size, "-I", 'k')?,
            pvs: pv_list(cur, s, pv_names)?,
            tags: if a.virtual_size.is_some() {
                Vec::new()
            } else {
                a.tags.clone()
            },
            permission: permission(&a.permission)?.unwrap_or_default(),
            activation_skip: yes_no(&a.skip, "--setactivationskip")?.unwrap_or(false),
            stamp,
            internal: false,
        })
    }

    /// A linear or striped LV.
    fn create_lv(
        &self,
        s: &Session,
        cur: &Vg,
        plan: &Plan,
        pv_names: &[String],
        stamp: Stamp,
    ) -> CmdResult {
        let spec = self.lv_spec(s, cur, plan.name.clone(), pv_names, stamp)?;
        if self.segtype.as_deref() == Some("linear") && spec.stripes > 1 {
            return Err(usage("--type linear with -i > 1"));
        }
        let made = s
            .update(plan.vg, "lvcreate", |v, ctx| {
                edit::lv::create(v, ctx, &spec)
            })
            .map_err(failed)?;
        if spec.stripes > 1 && self.stripe_size.is_none() {
            println!("  Using default stripesize 64.00 KiB.");
        }
        println!("  Logical volume \"{made}\" created.");
        Ok(())
    }

    /// A thin pool; says how much data it can address, as lvm2 does. Returns its name.
    fn create_pool(
        &self,
        s: &Session,
        cur: &Vg,
        plan: &Plan,
        pv_names: &[String],
        stamp: Stamp,
    ) -> Result<String, (u8, String)> {
        let a = self;
        let spec = self.lv_spec(s, cur, plan.pool_name.clone(), pv_names, stamp)?;
        let options = PoolOptions {
            zero: yes_no(&a.zero, "-Z")?,
            discards: a.discards.clone(),
        };
        let pool = PoolSpec {
            chunk_size: sectors_arg(&a.chunk_size, "--chunksize", 'k')?,
            metadata_extents: size_arg(&a.pool_metadata_size, "--poolmetadatasize", 'm')?
                .map(|b| extents_of(cur, Some(b), None))
                .transpose()?,
            ..PoolSpec::new(spec, &options)
        };
        let made = s
            .update(plan.vg, "lvcreate", |v, ctx| {
                edit::thin::create_pool(v, ctx, &pool)
            })
            .map_err(failed)?;
        let chunk = current(s, plan.vg)?
            .lv(&made)
            .and_then(|l| l.pool().map(|p| p.chunk_size))
            .unwrap_or(0);
        println!(
            "  Thin pool volume with chunk size {} can address at most {} of data.",
            long_size(u64::from(chunk) * 512),
            long_size(max_pool_data(chunk))
        );
        Ok(made)
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
    use clap::{Command, FromArgMatches};

    /// (pool, thin, pool name, other name, VG).
    type Made = (bool, bool, Option<String>, Option<String>, String);

    /// What `lvcreate ARGS` makes, or the exit code.
    fn plan(args: &[&str]) -> Result<Made, u8> {
        let m = LvcreateArgs::augment_args(Command::new("lvcreate"))
            .try_get_matches_from(std::iter::once("lvcreate").chain(args.iter().copied()))
            .map_err(|_| 3)?;
        let a = LvcreateArgs::from_arg_matches(&m).map_err(|_| 3)?;
        let target = a.args.first().cloned().unwrap_or_default();
        let p = a.plan(&target).map_err(|e| e.0)?;
        Ok((p.pool, p.thin, p.pool_name, p.name, p.vg.to_owned()))
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    /// lvm2's readings of pool and thin options (lvcreate(8)).
    #[test]
    fn pools_and_thin_lvs_are_read_as_lvm2_reads_them() {
        let vg0 = || "vg0".to_owned();
        assert_eq!(
            plan(&["-T", "-L", "40M", "vg0/pool"]),
            Ok((true, false, some("pool"), None, vg0()))
        );
        assert_eq!(
            plan(&["-T", "-L", "40M", "-n", "pool", "vg0"]),
            Ok((true, false, some("pool"), None, vg0()))
        );
        assert_eq!(
            plan(&["-T", "-L", "8M", "-V", "20M", "-n", "t2", "vg0/pool2"]),
            Ok((true, true, some("pool2"), some("t2"), vg0()))
        );
        assert_eq!(
            plan(&["--type", "thin-pool", "-L", "8M", "--thinpool", "p3", "vg0"]),
            Ok((true, false, some("p3"), None, vg0()))
        );
        assert_eq!(
            plan(&["-L", "4M", "--thinpool", "p4", "vg0"]),
            Ok((true, false, some("p4"), None, vg0()))
        );
        assert_eq!(
            plan(&["-V", "20M", "-T", "vg0/pool", "-n", "t1"]),
            Ok((false, true, some("pool"), some("t1"), vg0()))
        );
        assert_eq!(
            plan(&["-L", "10m", "vg0/lin"]),
            Ok((false, false, None, some("lin"), vg0()))
        );
        assert_eq!(
            plan(&["--type", "thin-pool", "-L", "8M", "-V", "1G", "vg0"]),
            Err(3)
        );
        assert_eq!(plan(&["-V", "1G", "vg0"]), Err(3));
        assert_eq!(plan(&["--type", "raid1", "-L", "8M", "vg0"]), Err(3));
    }

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
