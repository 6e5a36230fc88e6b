//! `lvremove`, `lvrename`, `lvchange` (activation included) and `lvextend`, `lvreduce`,
//! `lvresize`.

use clap::Args;

use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, LvChange};
use lvmeta::session::Session;

use crate::args::{
    activation, current, extents_of, failed, hold, long_size, open, parse_size, permission,
    pv_list, usage, vg_lv, yes_no, WriteArgs,
};
use crate::CmdResult;

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
    /// Resize the filesystem on the (active) LV with it: ext2/3/4 or xfs (grow only).
    #[arg(short = 'r', long = "resizefs")]
    resizefs: bool,
    /// VG/LV, then PVs to allocate from.
    #[arg(required = true)]
    args: Vec<String>,
}

/// After a change to thin pool `pool` (its thin LVs or its settings): when the pool is active
/// on this host (a VG without leases, or its lease free), reloads its table and sends it the
/// queued messages now, as lvm2 does; otherwise they wait for the pool's next activation. A
/// failure is a warning: the change is committed, and the next activation delivers it.
pub fn deliver_if_active(s: &Session, vg: &str, pool: &str) {
    let Some(backend) = lvmeta::activate::best() else {
        return;
    };
    // The delivered queue is cleared by a commit (lvm2's update_pool_lv).
    if let Err(e) = s.refresh(vg, pool, backend.as_ref()) {
        eprintln!("  WARNING: thin pool {vg}/{pool} did not take its messages now: {e}");
    }
}

impl ResizeArgs {
    /// `lvextend` (`grow` true), `lvreduce` (false) or `lvresize` (`None`).
    pub fn run(&self, grow: Option<bool>) -> CmdResult {
        let a = self;
        let (target, pv_names) = a.args.split_first().ok_or_else(|| usage("VG/LV needed"))?;
        let (vg, lv) = vg_lv(target)?;
        let s = open(&a.w, &[])?;
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
        let ext_bytes = cur.extent_bytes();
        // lvm2 rounds a size to whole extents: down when it is taken off, else up, and says so.
        let n = match (sign, size) {
            (Some('-'), Some(b)) if ext_bytes > 0 => {
                u32::try_from(b.0 / ext_bytes).map_err(|_| usage("size is too large"))?
            }
            _ => extents_of(&cur, size, ext)?,
        };
        if size.is_some_and(|b| ext_bytes > 0 && !b.0.is_multiple_of(ext_bytes)) {
            println!(
                "  Rounding size to boundary between physical extents: {}.",
                long_size(u64::from(n) * ext_bytes)
            );
        }
        let target_extents = match sign {
            Some('+') => now
                .checked_add(n)
                .ok_or_else(|| usage("size is too large"))?,
            Some(_) => now
                .checked_sub(n)
                .ok_or_else(|| usage("cannot shrink below 0"))?,
            None => n,
        };
        // lvm2 counts these as failed commands (5), not bad command lines.
        match grow {
            Some(true) if target_extents < now => {
                return Err(failed(format!(
                    "New size given ({target_extents} extents) not larger than existing size \
                     ({now} extents)"
                )))
            }
            Some(false) if target_extents > now => {
                return Err(failed(format!(
                    "New size given ({target_extents} extents) not less than existing size \
                     ({now} extents)"
                )))
            }
            _ => {}
        }
        let pvs = pv_list(&cur, &s, pv_names)?;
        // -r: the filesystem, found on the active LV, shrinks before it and grows after it.
        let fs = match a.resizefs {
            true => Some(filesystem(&s, vg, lv)?),
            false => None,
        };
        if let Some((dev, fs)) = &fs {
            if target_extents < now {
                crate::resizefs::shrink(dev, *fs, u64::from(target_extents) * ext_bytes)?;
            }
        }
        s.update(vg, "lvresize", |v, ctx| {
            // `target_extents` and the PV indexes were planned from the read before the
            // VG's lease: refused if another host changed the LV or the VG's PVs since.
            edit::lv::expect_size(&v, lv, now)?;
            let ids = |g: &lvmeta::model::Vg| g.pvs.iter().map(|p| p.id).collect::<Vec<_>>();
            if pvs.is_some() && ids(&v) != ids(&cur) {
                return Err(edit::refused(
                    format!("{vg}/{lv}"),
                    "the VG's PVs changed while this command ran; run the command again",
                ));
            }
            edit::lv::resize(
                v,
                ctx,
                lv,
                target_extents,
                pvs.as_deref(),
                a.force > 0 || fs.is_some(),
            )
        })
        .map_err(failed)?;
        // An active LV's device takes the new size now, as lvm2 reloads it.
        if let Some(backend) = lvmeta::activate::best() {
            if s.live(vg, lv, backend.as_ref()).unwrap_or(false) {
                s.refresh(vg, lv, backend.as_ref()).map_err(failed)?;
            }
        }
        if let Some((dev, fs)) = &fs {
            if target_extents > now {
                crate::resizefs::grow(dev, *fs)?;
            }
        }
        println!(
            "  Size of logical volume {vg}/{lv} changed from {} ({now} extents) to {} \
             ({target_extents} extents).",
            long_size(u64::from(now) * ext_bytes),
            long_size(u64::from(target_extents) * ext_bytes)
        );
        println!("  Logical volume {vg}/{lv} successfully resized.");
        Ok(())
    }
}

/// The device of active LV `vg/lv` and the filesystem on it (`-r`).
fn filesystem(
    s: &Session,
    vg: &str,
    lv: &str,
) -> Result<(std::path::PathBuf, crate::resizefs::Fs), (u8, String)> {
    let backend = lvmeta::activate::best()
        .ok_or_else(|| failed("-r: no activation backend to find the LV's device"))?;
    let dev = s
        .active_device(vg, lv, backend.as_ref())
        .map_err(failed)?
        .ok_or_else(|| {
            failed(format!(
                "-r: {vg}/{lv} must be active to resize its filesystem"
            ))
        })?;
    let fs = crate::resizefs::detect(&dev)?;
    Ok((dev, fs))
}

fn split_sign(s: &str) -> (Option<char>, &str) {
    match s.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
        _ => (None, s),
    }
}

/// `lvremove`'s options.
#[derive(Args, Clone)]
pub struct LvremoveArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Remove a thin pool with its thin LVs.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
    force: u8,
    /// VG/LV names; a VG name alone: every LV of it (thin LVs first), as lvm2 does.
    #[arg(required = true)]
    lvs: Vec<String>,
}

impl LvremoveArgs {
    /// Removes each LV (a thin LV's pool takes its message now when it is active here).
    pub fn run(&self) -> CmdResult {
        let s = open(&self.w, &[])?;
        let names = removal_order(&s, &self.lvs, self.force > 0)?;
        for name in &names {
            let (vg, lv) = vg_lv(name)?;
            let pool = current(&s, vg)
                .ok()
                .and_then(|v| v.lv(lv).and_then(|l| l.thin_pool().map(str::to_owned)));
            s.update(vg, "lvremove", |v, ctx| {
                edit::lv::remove(v, ctx, lv, self.force > 0)
            })
            .map_err(failed)?;
            println!("  Logical volume \"{lv}\" successfully removed.");
            if let Some(pool) = pool {
                deliver_if_active(&s, vg, &pool);
            }
        }
        Ok(())
    }
}

/// `VG/LV` names of the LVs `args` name (a VG alone: its visible LVs), in the order lvm2
/// removes them: VG by VG in name order, each VG's in metadata order, a thin pool's thin
/// LVs right before it (those not named only with `force`). A name no VG holds comes last,
/// where its removal fails.
fn removal_order(s: &Session, args: &[String], force: bool) -> Result<Vec<String>, (u8, String)> {
    let mut by_vg: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    for a in args {
        let a = a.strip_prefix("/dev/").unwrap_or(a);
        let (vg, lv) = a.split_once('/').unwrap_or((a, ""));
        by_vg.entry(vg).or_default().push(lv);
    }
    let (mut out, mut missing) = (Vec::new(), Vec::new());
    for (vg, wanted) in by_vg {
        let cur = current(s, vg)?;
        let named = |l: &lvmeta::model::Lv| {
            wanted.contains(&l.name.as_str()) || (wanted.contains(&"") && l.is_visible())
        };
        let push = |name: &str, out: &mut Vec<String>| {
            let full = format!("{vg}/{name}");
            if !out.contains(&full) {
                out.push(full);
            }
        };
        for lv in cur.lvs.iter().filter(|l| named(l)) {
            if lv.pool().is_some() {
                // Unnamed thin LVs only with -f, as lvm2 removes them with their pool.
                let of_pool = |t: &&std::sync::Arc<lvmeta::model::Lv>| {
                    t.thin_pool() == Some(&lv.name) && (force || named(t))
                };
                for thin in cur.lvs.iter().filter(of_pool) {
                    push(&thin.name, &mut out);
                }
            }
            push(&lv.name, &mut out);
        }
        missing.extend(
            wanted
                .iter()
                .filter(|w| !w.is_empty() && cur.lv(w).is_none())
                .map(|w| format!("{vg}/{w}")),
        );
    }
    out.extend(missing);
    Ok(out)
}

/// `lvrename`'s options.
#[derive(Args, Clone)]
pub struct LvrenameArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Names.
    #[arg(num_args = 2..=3, required = true)]
    names: Vec<String>,
}

impl LvrenameArgs {
    /// Renames `VG/OLD NEW` or `VG OLD NEW`.
    pub fn run(&self) -> CmdResult {
        let (vg, from, to) = match self.names.as_slice() {
            [a, b] => {
                let (vg, from) = vg_lv(a)?;
                let to = b.rsplit('/').next().unwrap_or(b);
                (vg.to_owned(), from.to_owned(), to.to_owned())
            }
            [v, a, b] => (v.clone(), a.clone(), b.clone()),
            _ => return Err(usage("lvrename VG/OLD NEW or VG OLD NEW")),
        };
        let s = open(&self.w, &[])?;
        hold(&s, &vg)?;
        s.update(&vg, "lvrename", |v, ctx| {
            edit::lv::rename(v, ctx, &from, &to)
        })
        .map_err(failed)?;
        println!("  Renamed \"{from}\" to \"{to}\" in volume group \"{vg}\"");
        Ok(())
    }
}

/// `lvchange`'s options.
#[derive(Args, Clone)]
pub struct LvchangeArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// y or ey (exclusive), sy (shared), n (deactivate). In a shared VG the LV's lease
    /// stays held by this host (as a sanlock orphan) while the LV is active.
    #[arg(short = 'a', long = "activate")]
    activate: Option<String>,
    /// Tags to add.
    #[arg(long = "addtag")]
    add: Vec<String>,
    /// Tags to remove.
    #[arg(long = "deltag")]
    del: Vec<String>,
    /// r or rw.
    #[arg(short = 'p', long = "permission")]
    permission: Option<String>,
    /// y or n.
    #[arg(short = 'k', long = "setactivationskip")]
    skip: Option<String>,
    /// y or n: a thin pool zeroes new chunks before their first use.
    #[arg(short = 'Z', long = "zero")]
    zero: Option<String>,
    /// passdown, nopassdown or ignore: what a thin pool does with discards. To or from
    /// ignore only while the pool is inactive.
    #[arg(long = "discards")]
    discards: Option<String>,
    /// VG/LV names.
    #[arg(required = true)]
    lvs: Vec<String>,
}

impl LvchangeArgs {
    /// Changes each LV's settings, then activates or deactivates them.
    pub fn run(&self) -> CmdResult {
        let change = LvChange {
            add_tags: self.add.clone(),
            del_tags: self.del.clone(),
            permission: permission(&self.permission)?,
            activation_skip: yes_no(&self.skip, "--setactivationskip")?,
        };
        let pool = PoolOptions {
            zero: yes_no(&self.zero, "-Z")?,
            discards: self.discards.clone(),
        };
        let mode = activation(&self.activate)?;
        let s = open(&self.w, &[])?;
        if change != LvChange::default() || !pool.is_empty() || self.activate.is_none() {
            for name in &self.lvs {
                let (vg, lv) = vg_lv(name)?;
                hold(&s, vg)?;
                if let (false, Some(backend)) = (pool.is_empty(), lvmeta::activate::best()) {
                    s.check_discard_switch(vg, lv, &pool, backend.as_ref())
                        .map_err(failed)?;
                }
                s.update(vg, "lvchange", |v, ctx| {
                    let v = edit::lv::change(v, ctx, lv, &change)?;
                    if pool.is_empty() {
                        return Ok(v);
                    }
                    edit::thin::change_pool(v, ctx, lv, &pool)
                })
                .map_err(failed)?;
                println!("  Logical volume {vg}/{lv} changed.");
                if !pool.is_empty() {
                    // The pool's table carries these settings: reload it where it is up.
                    deliver_if_active(&s, vg, lv);
                }
            }
        }
        let Some(mode) = mode else {
            return Ok(());
        };
        let backend = lvmeta::activate::best().ok_or_else(|| {
            failed("no activation backend: neither /dev/mapper/control nor /dev/loop-control")
        })?;
        for name in &self.lvs {
            let (vg, lv) = vg_lv(name)?;
            hold(&s, vg)?;
            let Some(shared) = mode else {
                s.deactivate(vg, lv, backend.as_ref()).map_err(failed)?;
                continue;
            };
            // lvm2's update_pool_lv: a thin pool's delivered queue is cleared, a commit.
            let a = s
                .activate(vg, lv, shared, false, backend.as_ref())
                .map_err(failed)?;
            println!(
                "  Logical volume {vg}/{lv} is active at {}.",
                a.device.display()
            );
            // The LV stays active after this process: so does its lease.
            a.keep_lease();
        }
        Ok(())
    }
}
