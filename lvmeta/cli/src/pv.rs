//! `pvcreate` and `pvremove`.

use std::path::PathBuf;

use clap::Args;

use lvmeta::layout::PvOptions;

use crate::args::{failed, names, session, size_arg, WriteArgs};
use crate::CmdResult;

/// `pvcreate`'s options.
#[derive(Args, Clone)]
pub struct PvcreateArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Re-initialise a device that is already an orphan PV.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
    force: u8,
    /// Number of metadata areas: 0, 1 or 2.
    #[arg(long = "pvmetadatacopies", default_value_t = 1)]
    copies: u8,
    /// Size of each metadata area.
    #[arg(long = "metadatasize")]
    metadata_size: Option<String>,
    /// Alignment of the first extent.
    #[arg(long = "dataalignment")]
    data_alignment: Option<String>,
    /// Shift of the alignment.
    #[arg(long = "dataalignmentoffset")]
    data_alignment_offset: Option<String>,
    /// Bootloader area after the first metadata area.
    #[arg(long = "bootloaderareasize")]
    bootloader: Option<String>,
    /// The devices.
    #[arg(required = true)]
    pvs: Vec<PathBuf>,
}

impl PvcreateArgs {
    /// Labels each device as a PV.
    pub fn run(&self) -> CmdResult {
        let opts = PvOptions {
            metadata_copies: self.copies,
            metadata_size: size_arg(&self.metadata_size, "--metadatasize", 'm')?,
            data_alignment: size_arg(&self.data_alignment, "--dataalignment", 'k')?,
            data_alignment_offset: size_arg(
                &self.data_alignment_offset,
                "--dataalignmentoffset",
                'k',
            )?
            .unwrap_or_default(),
            bootloader_area_size: size_arg(&self.bootloader, "--bootloaderareasize", 'm')?
                .unwrap_or_default(),
        };
        let s = session(&self.w, &self.pvs)?;
        for d in names(&self.pvs) {
            s.pvcreate(&d, &opts, self.force > 0).map_err(failed)?;
            println!("  Physical volume \"{d}\" successfully created.");
        }
        Ok(())
    }
}

/// `pvremove`'s options.
#[derive(Args, Clone)]
pub struct PvremoveArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// Accepted for lvm2 compatibility.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
    force: u8,
    /// The devices.
    #[arg(required = true)]
    pvs: Vec<PathBuf>,
}

impl PvremoveArgs {
    /// Wipes the label of each orphan PV.
    pub fn run(&self) -> CmdResult {
        let s = session(&self.w, &self.pvs)?;
        for d in names(&self.pvs) {
            s.pvremove(&d).map_err(failed)?;
            println!("  Labels on physical volume \"{d}\" successfully wiped.");
        }
        Ok(())
    }
}
