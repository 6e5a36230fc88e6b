//! `pvdisplay`, `vgdisplay`, `lvdisplay`: lvm2's labelled blocks, one per object.
//!
//! - Every line is lvm2's label padded to its column, then the value; a block ends with a
//!   line of one space (`log_print(" ")`).
//! - Sizes are lvm2's long form (`40.00 MiB`, `<124.00 MiB`, `0   ` for zero).
//! - Times are printed in this host's time zone, as lvm2 prints them.

use clap::Args;

use lvmeta::activate::dm_names::dm_name;
use lvmeta::model::{Lv, SegKind, Vg};
use lvmeta::report::{lv_opens, lv_time_text, DmState};
use lvmeta::scan::{Scan, ScannedVg};

use crate::args::{device_numbers, failed, long_size, read_for_report, DeviceArgs, LockArgs};
use crate::CmdResult;

/// The options of the display verbs.
#[derive(Args, Clone)]
pub struct DisplayArgs {
    #[command(flatten)]
    dev: DeviceArgs,
    #[command(flatten)]
    lock: LockArgs,
    /// lvdisplay: internal LVs too.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// pvdisplay: PV devices; vgdisplay: VG names; lvdisplay: VG, VG/LV or /dev/VG/LV.
    names: Vec<String>,
}

/// A size as lvm2's display verbs print it.
fn size(bytes: u64) -> String {
    if bytes == 0 {
        return "0   ".into();
    }
    long_size(bytes)
}

/// Prints a block: lvm2's two-space indent on each line, then the closing line.
fn block(lines: &[String]) {
    for l in lines {
        println!("  {l}");
    }
    println!("   ");
}

impl DisplayArgs {
    /// `pvdisplay`.
    pub fn pvdisplay(&self) -> CmdResult {
        let (scan, _locks) = read_for_report(&self.dev, &self.lock, &[])?;
        for name in &self.names {
            if !scan.pvs.iter().any(|p| &p.device == name) {
                return Err(failed(format!(
                    "Failed to find physical volume \"{name}\"."
                )));
            }
        }
        let mut order: Vec<usize> = (0..scan.pvs.len())
            .filter(|&i| self.names.is_empty() || self.names.contains(&scan.pvs[i].device))
            .collect();
        order.sort_by(|&a, &b| scan.pvs[a].device.cmp(&scan.pvs[b].device));
        for i in order {
            pv_block(&scan, i);
        }
        Ok(())
    }

    /// `vgdisplay`.
    pub fn vgdisplay(&self) -> CmdResult {
        let (scan, _locks) = read_for_report(&self.dev, &self.lock, &self.vg_names())?;
        let dm = DmState::probe();
        for svg in self.vgs(&scan)? {
            vg_block(&scan, svg, &dm);
        }
        Ok(())
    }

    /// `lvdisplay`.
    pub fn lvdisplay(&self) -> CmdResult {
        let (scan, _locks) = read_for_report(&self.dev, &self.lock, &self.vg_names())?;
        let dm = DmState::probe();
        let names: Vec<&str> = self
            .names
            .iter()
            .map(|n| n.strip_prefix("/dev/").unwrap_or(n))
            .collect();
        for svg in self.vgs(&scan)? {
            let vg = &svg.vg;
            for lv in &vg.lvs {
                let named = names.iter().any(|n| {
                    *n == vg.name || n.split_once('/') == Some((&vg.name, lv.name.as_str()))
                });
                let wanted = if names.is_empty() {
                    self.all || lv.is_visible()
                } else {
                    named
                };
                if wanted {
                    lv_block(vg, lv, &dm);
                }
            }
        }
        for n in &names {
            if let Some((vg, lv)) = n.split_once('/') {
                if scan.vg(vg).map_err(failed)?.vg.lv(lv).is_none() {
                    return Err(failed(format!(
                        "Failed to find logical volume \"{vg}/{lv}\""
                    )));
                }
            }
        }
        Ok(())
    }

    /// The VG part of each name (`VG`, `VG/LV`, `/dev/VG/LV`): the VGs read under a lease.
    fn vg_names(&self) -> Vec<&str> {
        self.names
            .iter()
            .map(|n| n.strip_prefix("/dev/").unwrap_or(n))
            .map(|n| n.split('/').next().unwrap_or(n))
            .collect()
    }

    /// The VGs named (by `VG` or `VG/LV`), or every VG, by name.
    fn vgs<'s>(&self, scan: &'s Scan) -> Result<Vec<&'s ScannedVg>, (u8, String)> {
        let mut out: Vec<&ScannedVg> = Vec::new();
        if self.names.is_empty() {
            out.extend(scan.vgs.iter());
        }
        for vg in self.vg_names() {
            let found = scan
                .vg(vg)
                .map_err(|_| failed(format!("Volume group \"{vg}\" not found")))?;
            if !out.iter().any(|v| v.vg.name == found.vg.name) {
                out.push(found);
            }
        }
        out.sort_by(|a, b| a.vg.name.cmp(&b.vg.name));
        Ok(out)
    }
}

/// One PV's block (an orphan's as lvm2 shows a new PV).
fn pv_block(scan: &Scan, i: usize) {
    let spv = &scan.pvs[i];
    let uuid = spv.label.pv_uuid.to_string();
    let Some((svg, p)) = scan.vg_of_pv(i) else {
        let dev_size = spv.label.device_size;
        println!(
            "  \"{}\" is a new physical volume of \"{}\"",
            spv.device,
            size(dev_size)
        );
        block(&[
            "--- NEW Physical volume ---".into(),
            format!("PV Name               {}", spv.device),
            "VG Name               ".into(),
            format!("PV Size               {}", size(dev_size)),
            "Allocatable           NO".into(),
            format!("PE Size               {}", size(0)),
            "Total PE              0".into(),
            "Free PE               0".into(),
            "Allocated PE          0".into(),
            format!("PV UUID               {uuid}"),
        ]);
        return;
    };
    let vg = &svg.vg;
    let pv = &vg.pvs[p];
    let ext = vg.extent_bytes();
    let alloc = vg.allocated_per_pv()[p];
    let count = u64::from(pv.pe_count);
    let data = count * ext;
    let pv_size = pv.dev_size.map_or(spv.dev_size, |s| s * 512);
    let start = pv.data_start().0;
    let (shown, unusable) = if pv_size > data + start {
        (pv_size, pv_size - data)
    } else {
        (data + start, data + start - pv_size)
    };
    let allocatable = pv.status.iter().any(|s| s == "ALLOCATABLE");
    let free = count - alloc;
    block(&[
        "--- Physical volume ---".into(),
        format!("PV Name               {}", spv.device),
        format!("VG Name               {}", vg.name),
        match data {
            0 => format!("PV Size               {}", size(shown)),
            _ => format!(
                "PV Size               {} / not usable {}",
                size(shown),
                size(unusable)
            ),
        },
        match (count > 0 && allocatable, free) {
            (true, 0) => "Allocatable           yes (but full)".into(),
            (true, _) => "Allocatable           yes ".into(),
            (false, _) => "Allocatable           NO".into(),
        },
        format!("PE Size               {}", size(ext)),
        format!("Total PE              {count}"),
        format!("Free PE               {free}"),
        format!("Allocated PE          {alloc}"),
        format!("PV UUID               {uuid}"),
    ]);
}

/// One VG's block.
fn vg_block(scan: &Scan, svg: &ScannedVg, dm: &DmState) {
    let vg = &svg.vg;
    let ext = vg.extent_bytes();
    let (total, free) = (vg.extent_count(), vg.free_count());
    let visible = vg.lvs.iter().filter(|l| l.is_visible()).count();
    let open = vg
        .lvs
        .iter()
        .filter(|l| l.is_visible() && lv_opens(vg, l, dm).is_some_and(|n| n > 0))
        .count();
    let mdas: usize = svg
        .pv_devices
        .iter()
        .flatten()
        .map(|&i| scan.pvs[i].mdas.len())
        .sum();
    let missing = svg.pv_devices.iter().filter(|d| d.is_none()).count();
    let writable = vg.status.iter().any(|s| s == "WRITE");
    let resizeable = vg.status.iter().any(|s| s == "RESIZEABLE");
    block(&[
        "--- Volume group ---".into(),
        format!("VG Name               {}", vg.name),
        format!(
            "System ID             {}",
            vg.system_id.as_deref().unwrap_or("")
        ),
        "Format                lvm2".into(),
        format!("Metadata Areas        {mdas}"),
        format!("Metadata Sequence No  {}", vg.seqno),
        format!(
            "VG Access             {}",
            if writable { "read/write" } else { "read" }
        ),
        format!(
            "VG Status             {}resizable",
            if resizeable { "" } else { "NOT " }
        ),
        format!("MAX LV                {}", vg.max_lv),
        format!("Cur LV                {visible}"),
        format!("Open LV               {open}"),
        format!("Max PV                {}", vg.max_pv),
        format!("Cur PV                {}", vg.pvs.len()),
        format!("Act PV                {}", vg.pvs.len() - missing),
        format!("VG Size               {}", size(total * ext)),
        format!("PE Size               {}", size(ext)),
        format!("Total PE              {total}"),
        format!(
            "Alloc PE / Size       {} / {}",
            total - free,
            size((total - free) * ext)
        ),
        format!("Free  PE / Size       {free} / {}", size(free * ext)),
        format!("VG UUID               {}", vg.id),
    ]);
}

/// One LV's block.
fn lv_block(vg: &Vg, lv: &Lv, dm: &DmState) {
    let mut lines = vec!["--- Logical volume ---".to_owned()];
    let pool = lv.pool();
    if lv.is_visible() {
        if pool.is_none() {
            lines.push(format!(
                "LV Path                /dev/{}/{}",
                vg.name, lv.name
            ));
        }
        lines.push(format!("LV Name                {}", lv.name));
    } else {
        lines.push(format!("Internal LV Name       {}", lv.name));
    }
    let (when, host) = match &lv.creation {
        Some((t, h)) => (lv_time_text(*t), h.as_str()),
        None => (String::new(), ""),
    };
    lines.extend([
        format!("VG Name                {}", vg.name),
        format!("LV UUID                {}", lv.id),
        format!(
            "LV Write Access        {}",
            if lv.is_writable() {
                "read/write"
            } else {
                "read only"
            }
        ),
        format!("LV Creation host, time {host}, {when}"),
    ]);
    match lv.segments.first().map(|s| &s.kind) {
        Some(SegKind::Thin(t)) => {
            lines.push(format!("LV Pool name           {}", t.thin_pool));
            if let Some(o) = &t.origin {
                lines.push(format!("LV Thin origin name    {o}"));
            }
        }
        Some(SegKind::ThinPool(p)) => {
            lines.push(format!("LV Pool metadata       {}", p.metadata));
            lines.push(format!("LV Pool data           {}", p.pool));
        }
        _ => {}
    }
    let opens = lv_opens(vg, lv, dm);
    lines.push(format!(
        "LV Status              {}available",
        if opens.is_some() { "" } else { "NOT " }
    ));
    if let Some(n) = opens {
        lines.push(format!("# open                 {n}"));
    }
    lines.extend([
        format!(
            "LV Size                {}",
            size(lv.extents() * vg.extent_bytes())
        ),
        format!("Current LE             {}", lv.extents()),
        format!("Segments               {}", lv.segments.len()),
        format!(
            "Allocation             {}",
            lv.allocation_policy.as_deref().unwrap_or("inherit")
        ),
        match lv.read_ahead {
            None | Some(-1) => "Read ahead sectors     auto".into(),
            Some(n) => format!("Read ahead sectors     {n}"),
        },
    ]);
    if opens.is_some() {
        let node = format!("/dev/mapper/{}", dm_name(&vg.name, &lv.name));
        if let Some((major, minor)) = device_numbers(std::path::Path::new(&node)) {
            lines.push(format!("Block device           {major}:{minor}"));
        }
    }
    block(&lines);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_lvm2s_long_ones() {
        assert_eq!(size(0), "0   ");
        assert_eq!(size(40 << 20), "40.00 MiB");
    }
}
