//! `vgck` (and its repair) and `vgcfgrestore`.

use std::path::PathBuf;

use clap::Args;

use lvmeta::model::Vg;

use crate::args::{failed, session, usage, WriteArgs};
use crate::CmdResult;

/// `vgck`'s options.
#[derive(Args, Clone)]
pub struct VgckArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Write the newest version again, as a new seqno, to every area.
    #[arg(long = "updatemetadata")]
    update: bool,
    /// VG name.
    vg: String,
}

impl VgckArgs {
    /// Checks the VG's areas and copies, or mends them.
    pub fn run(&self) -> CmdResult {
        let (s, vg) = (session(&self.w, &[])?, &self.vg);
        if self.update {
            let out = s.repair(vg).map_err(failed)?;
            println!(
                "  Volume group \"{vg}\" metadata updated (seqno {}).",
                out.seqno
            );
            return Ok(());
        }
        let problems = s.check(vg).map_err(failed)?;
        if problems.is_empty() {
            return Ok(());
        }
        Err(failed(format!(
            "{}\n  See lvmeta vgck --updatemetadata to correct them.",
            problems.join("\n  ")
        )))
    }
}

/// `vgcfgrestore`'s options.
#[derive(Args, Clone)]
pub struct VgcfgrestoreArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// The backup file.
    #[arg(short = 'f', long = "file", conflicts_with_all = ["seqno", "list"])]
    file: Option<PathBuf>,
    /// Restore the copy with this seqno from the metadata areas.
    #[arg(long = "seqno")]
    seqno: Option<u32>,
    /// List the versions still in the metadata areas.
    #[arg(short = 'l', long = "list")]
    list: bool,
    /// Accepted for lvm2 compatibility (needed there for thin pools).
    #[arg(long = "force")]
    force: bool,
    /// VG name.
    vg: String,
}

impl VgcfgrestoreArgs {
    /// Lists the copies on disk, or writes a backup or a copy as the VG's next version.
    pub fn run(&self) -> CmdResult {
        let (s, vg) = (session(&self.w, &[])?, &self.vg);
        if self.list {
            for v in s.history(vg).map_err(failed)? {
                println!(
                    "  seqno {:>6}  {} LVs  {}",
                    v.seqno,
                    v.lvs.len(),
                    v.header.description.as_deref().unwrap_or("")
                );
            }
            return Ok(());
        }
        let from = match (&self.file, self.seqno) {
            (Some(f), None) => {
                let text = std::fs::read_to_string(f)
                    .map_err(|e| failed(format!("{}: {e}", f.display())))?;
                Vg::from_text(&text).map_err(failed)?.vg
            }
            (None, Some(n)) => s
                .history(vg)
                .map_err(failed)?
                .into_iter()
                .find(|v| v.seqno == n)
                .ok_or_else(|| {
                    failed(format!(
                        "no copy with seqno {n} left in the metadata areas of {vg}"
                    ))
                })?,
            _ => return Err(usage("vgcfgrestore needs -f FILE, --seqno N or --list")),
        };
        let out = s.restore(vg, &from).map_err(failed)?;
        println!("  Restored volume group {vg} (seqno {}).", out.seqno);
        Ok(())
    }
}
