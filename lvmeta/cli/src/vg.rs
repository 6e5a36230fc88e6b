//! `vgcreate`, `vgextend`, `vgreduce`, `vgremove`, `vgchange`.

use std::path::PathBuf;

use clap::Args;

use lvmeta::edit::{self, SharedVg, VgSpec};
use lvmeta::session::Session;

use crate::args::{
    activation, current, failed, hold, lease_host, names, open, refs, sectors_arg, session,
    HostIdArg, WriteArgs,
};
use crate::CmdResult;

/// `vgcreate`'s options.
#[derive(Args, Clone)]
pub struct VgcreateArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Extent size (default 4 MiB).
    #[arg(short = 's', long = "physicalextentsize")]
    extent_size: Option<String>,
    /// Tags.
    #[arg(long = "addtag")]
    tags: Vec<String>,
    /// A shared (lvmlockd, sanlock) VG.
    #[arg(long = "shared")]
    shared: bool,
    /// Accepted for lvm2 compatibility.
    #[arg(short = 'f', long = "force")]
    force: bool,
    /// VG name.
    vg: String,
    /// Devices (labelled as PVs if they are not yet).
    #[arg(required = true)]
    pvs: Vec<PathBuf>,
}

impl VgcreateArgs {
    /// Creates the VG on the devices.
    pub fn run(&self) -> CmdResult {
        let ext =
            sectors_arg(&self.extent_size, "-s", 'm')?.unwrap_or(edit::vg::DEFAULT_EXTENT_SIZE);
        let s = session(&self.w, &self.pvs)?;
        let devices = names(&self.pvs);
        let spec = VgSpec {
            name: self.vg.clone(),
            extent_size: ext,
            tags: self.tags.clone(),
            shared: self
                .shared
                .then(|| SharedVg::for_sector(s.sector_size(&refs(&devices)))),
        };
        s.vgcreate(&spec, &refs(&devices)).map_err(failed)?;
        println!("  Volume group \"{}\" successfully created", self.vg);
        Ok(())
    }
}

/// `vgextend`'s options.
#[derive(Args, Clone)]
pub struct VgextendArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// VG name.
    vg: String,
    /// Devices.
    #[arg(required = true)]
    pvs: Vec<PathBuf>,
}

impl VgextendArgs {
    /// Adds the devices to the VG.
    pub fn run(&self) -> CmdResult {
        let s = session(&self.w, &self.pvs)?;
        s.vgextend(&self.vg, &refs(&names(&self.pvs)))
            .map_err(failed)?;
        println!("  Volume group \"{}\" successfully extended", self.vg);
        Ok(())
    }
}

/// `vgreduce`'s options.
#[derive(Args, Clone)]
pub struct VgreduceArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// VG name.
    vg: String,
    /// Devices.
    #[arg(required = true)]
    pvs: Vec<PathBuf>,
}

impl VgreduceArgs {
    /// Takes the unused PVs out of the VG.
    pub fn run(&self) -> CmdResult {
        let s = session(&self.w, &self.pvs)?;
        s.vgreduce(&self.vg, &refs(&names(&self.pvs)))
            .map_err(failed)?;
        for p in names(&self.pvs) {
            println!("  Removed \"{p}\" from volume group \"{}\"", self.vg);
        }
        Ok(())
    }
}

/// `vgremove`'s options.
#[derive(Args, Clone)]
pub struct VgremoveArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Also when LVs remain.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
    force: u8,
    /// VG names.
    #[arg(required = true)]
    vgs: Vec<String>,
}

impl VgremoveArgs {
    /// Removes each VG.
    pub fn run(&self) -> CmdResult {
        let s = session(&self.w, &[])?;
        for vg in &self.vgs {
            s.vgremove(vg, self.force > 0).map_err(failed)?;
            println!("  Volume group \"{vg}\" successfully removed");
        }
        Ok(())
    }
}

/// `vgchange`'s options.
#[derive(Args, Clone)]
pub struct VgchangeArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Join the VG's sanlock lockspace (needs --host-id or lvmlocal.conf host_id; with
    /// `--host-id auto`, under an id chosen from the lockspace: the one this host held
    /// before, else one no host ever held).
    #[arg(long = "lockstart")]
    lockstart: bool,
    /// Leave the VG's sanlock lockspace.
    #[arg(long = "lockstop")]
    lockstop: bool,
    /// y or ey (exclusive), sy (shared): activate the VG's LVs (but those with activation
    /// skip); n: deactivate them (thin LVs before their pools).
    #[arg(short = 'a', long = "activate")]
    activate: Option<String>,
    /// Tags to add.
    #[arg(long = "addtag")]
    add: Vec<String>,
    /// Tags to remove.
    #[arg(long = "deltag")]
    del: Vec<String>,
    /// VG names.
    #[arg(required = true)]
    vgs: Vec<String>,
}

impl VgchangeArgs {
    /// Starts the lockspace, changes the tags, stops the lockspace, as asked, VG by VG.
    pub fn run(&self) -> CmdResult {
        let mode = activation(&self.activate)?;
        let s = open(&self.w, &[])?;
        let (add, del) = (&self.add, &self.del);
        for vg in &self.vgs {
            // Joining and leaving a lockspace take seconds: not under the VG's file lock.
            s.unhold();
            // lvmlocal.conf's host_id still wins over auto.
            let auto = self.w.lock.host_id == Some(HostIdArg::Auto)
                && lvmeta::lease::lvmlocal_host_id().is_none();
            if self.lockstart && auto {
                let node = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
                let template = lease_host(1, &self.w.lock)?;
                let chosen = s
                    .lockstart_choosing(vg, &[node.trim()], &template)
                    .map_err(failed)?;
                println!("  VG {vg} lockspace started (host id {chosen})");
            } else if self.lockstart {
                s.lockstart(vg).map_err(failed)?;
                println!("  VG {vg} lockspace started");
            }
            // Read once, under the VG's file lock kept while its tags and LVs change.
            hold(&s, vg)?;
            if !add.is_empty() || !del.is_empty() {
                s.update(vg, "vgchange", |v, ctx| {
                    edit::vg::change_tags(v, ctx, add, del)
                })
                .map_err(failed)?;
                println!("  Volume group \"{vg}\" successfully changed");
            }
            if let Some(mode) = mode {
                activate_all(&s, vg, mode)?;
            }
            if self.lockstop {
                s.unhold();
                s.lockstop(vg).map_err(failed)?;
                println!("  VG {vg} lockspace stopped");
            }
        }
        Ok(())
    }
}

/// `vgchange -a`: every visible LV of `vg` up (`Some(shared)`) or down (`None`), then how
/// many are active, as lvm2 says it.
fn activate_all(s: &Session, vg: &str, mode: Option<bool>) -> CmdResult {
    let backend = lvmeta::activate::best().ok_or_else(|| {
        failed("no activation backend: neither /dev/mapper/control nor /dev/loop-control")
    })?;
    let cur = current(s, vg)?;
    let mut lvs: Vec<&lvmeta::model::Lv> = cur
        .lvs
        .iter()
        .map(|l| l.as_ref())
        .filter(|l| l.is_visible())
        .collect();
    // Pools come up before their thin LVs (a thin LV would bring up only the pool's inner
    // device), and go down after them.
    lvs.sort_by_key(|l| l.thin_pool().is_some() == mode.is_some());
    let b = backend.as_ref();
    // Its own device (a thin LV's pool being up does not make the thin LV active).
    let active = |lv: &str| {
        s.active_device(vg, lv, b)
            .map(|d| d.is_some())
            .map_err(failed)
    };
    // Each LV's state is asked once: whether it is up once this command is done with it.
    let mut count = 0;
    for lv in &lvs {
        let up = match mode {
            None => {
                // A pool up only under its thin LVs goes down too.
                if s.live(vg, &lv.name, b).map_err(failed)? {
                    s.deactivate(vg, &lv.name, b).map_err(failed)?;
                }
                false
            }
            Some(_) if active(&lv.name)? => true,
            Some(_) if lv.has_flag("ACTIVATION_SKIP") => false,
            Some(shared) => {
                s.activate(vg, &lv.name, shared, false, b)
                    .map_err(failed)?
                    // The LV stays active after this process: so does its lease.
                    .keep_lease();
                true
            }
        };
        count += usize::from(up);
    }
    println!("  {count} logical volume(s) in volume group \"{vg}\" now active");
    Ok(())
}
