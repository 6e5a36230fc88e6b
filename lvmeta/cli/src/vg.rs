//! `vgcreate`, `vgextend`, `vgreduce`, `vgremove`, `vgchange`.

use std::path::PathBuf;

use clap::Args;

use lvmeta::edit::{self, SharedVg, VgSpec};

use crate::args::{failed, lease_host, names, refs, sectors_arg, session, HostIdArg, WriteArgs};
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
        let s = session(&self.w, &[])?;
        let (add, del) = (&self.add, &self.del);
        for vg in &self.vgs {
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
            if !add.is_empty() || !del.is_empty() {
                s.update(vg, "vgchange", |v, ctx| {
                    edit::vg::change_tags(v, ctx, add, del)
                })
                .map_err(failed)?;
                println!("  Volume group \"{vg}\" successfully changed");
            }
            if self.lockstop {
                s.lockstop(vg).map_err(failed)?;
                println!("  VG {vg} lockspace stopped");
            }
        }
        Ok(())
    }
}
