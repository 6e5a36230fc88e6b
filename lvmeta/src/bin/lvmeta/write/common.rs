//! What the writing verbs share: sizes and yes/no options parsed as lvm2 does, names,
//! the session over the devices, extents and PV lists.

use std::path::PathBuf;

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::Permission;
use lvmeta::model::Vg;
use lvmeta::session::Session;
use lvmeta::units::Bytes;

use super::super::{failed, system_block_devices, EINVALID_CMD_LINE};
use super::{LockArgs, WriteArgs};

pub(super) fn usage(msg: impl Into<String>) -> (u8, String) {
    (EINVALID_CMD_LINE, msg.into())
}

/// Parses a size with lvm2's suffixes (binary multiples whatever the case), rounded up to a
/// whole byte; `default_unit` applies to bare numbers.
pub fn parse_size(s: &str, default_unit: char) -> Result<Bytes, String> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let unit = unit
        .chars()
        .next()
        .unwrap_or(default_unit)
        .to_ascii_lowercase();
    let mult: u64 = match unit {
        'b' => 1,
        's' => 512,
        'k' => 1 << 10,
        'm' => 1 << 20,
        'g' => 1 << 30,
        't' => 1 << 40,
        'p' => 1 << 50,
        'e' => 1 << 60,
        _ => return Err(format!("invalid size {s:?}: unknown unit")),
    };
    let v: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("invalid size {s:?}"));
    }
    let bytes = (v * mult as f64).ceil();
    if bytes > u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(Bytes(bytes as u64))
}

/// Size option `opt`, if given.
pub(super) fn size_arg(
    s: &Option<String>,
    opt: &str,
    unit: char,
) -> Result<Option<Bytes>, (u8, String)> {
    s.as_deref()
        .map(|v| parse_size(v, unit).map_err(|e| usage(format!("{opt}: {e}"))))
        .transpose()
}

/// Size option `opt` in the 512-byte sectors lvm2 keeps it in (`-I`, `--chunksize`, `-s`),
/// rounded down, if given.
pub(super) fn sectors_arg(
    s: &Option<String>,
    opt: &str,
    unit: char,
) -> Result<Option<u32>, (u8, String)> {
    size_arg(s, opt, unit)?
        .map(|b| u32::try_from(b.sectors_floor().0).map_err(|_| usage(format!("{opt}: too large"))))
        .transpose()
}

pub(super) fn yes_no(v: &Option<String>, opt: &str) -> Result<Option<bool>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("y" | "yes") => Ok(Some(true)),
        Some("n" | "no") => Ok(Some(false)),
        Some(o) => Err(usage(format!("{opt}: {o:?} is not y or n"))),
    }
}

pub(super) fn permission(v: &Option<String>) -> Result<Option<Permission>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("rw") => Ok(Some(Permission::ReadWrite)),
        Some("r") => Ok(Some(Permission::ReadOnly)),
        Some(o) => Err(usage(format!("-p: {o:?} is not r or rw"))),
    }
}

/// Opens the session: `--devices` (plus any device named on the command line), or every
/// block device that opens read-write.
pub(super) fn session(w: &WriteArgs, extra: &[PathBuf]) -> Result<Session, (u8, String)> {
    let explicit = !w.dev.devices.is_empty();
    let mut paths = if explicit {
        w.dev.devices.clone()
    } else {
        system_block_devices()
    };
    for p in extra {
        if !paths.contains(p) {
            paths.push(p.clone());
        }
    }
    let mut devs: Vec<Box<dyn BlockDevice>> = Vec::new();
    for p in &paths {
        match FileDevice::open_rw(p) {
            Ok(d) if d.size() > 0 => devs.push(Box::new(d)),
            Ok(_) => {}
            Err(e) if explicit || extra.contains(p) => return Err(failed(e)),
            Err(e) => tracing::debug!(device = %p.display(), error = %e, "skipping device"),
        }
    }
    let mut s = Session::new(devs)
        .with_lock_dir(w.locking_dir.clone())
        .with_run_dir(w.run_dir.clone());
    if w.nolocking {
        s = s.without_locking();
    }
    if let Some(host) = w.lock.host()? {
        s = s.with_host(host);
    }
    for warn in &s.scan().warnings {
        eprintln!("  WARNING: {warn}");
    }
    Ok(s)
}

#[cfg(feature = "sanlock")]
pub(super) fn lease_host(host_id: u64, w: &LockArgs) -> Result<lvmeta::lease::Host, (u8, String)> {
    if !(1..=2000).contains(&host_id) {
        return Err(usage(format!("--host-id {host_id}: must be 1..2000")));
    }
    Ok(lvmeta::lease::Host::new(
        std::sync::Arc::new(lvmeta::lease::sanlock::SanlockLeases::new()),
        host_id,
        w.io_timeout,
        std::time::Duration::from_secs(w.lock_wait),
    ))
}

#[cfg(not(feature = "sanlock"))]
pub(super) fn lease_host(
    _host_id: u64,
    _w: &LockArgs,
) -> Result<lvmeta::lease::Host, (u8, String)> {
    Err(usage(
        "this lvmeta was built without the sanlock feature: shared VGs need --nolocking",
    ))
}

pub(super) fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

pub(super) fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `VG/LV` into its parts.
pub(super) fn vg_lv(s: &str) -> Result<(&str, &str), (u8, String)> {
    s.split_once('/')
        .map(|(v, l)| (v.trim_start_matches("/dev/"), l))
        .ok_or_else(|| usage(format!("{s:?}: expected VG/LV")))
}

/// Extents for `-L`/`-l`: sizes round up to whole extents.
pub(super) fn extents_of(
    vg: &Vg,
    size: Option<Bytes>,
    extents: Option<&str>,
) -> Result<u32, (u8, String)> {
    let n = match (size, extents) {
        (Some(b), None) => b.extents_ceil(vg.extent()).0,
        (None, Some(e)) => {
            let (num, pct) = match e.split_once('%') {
                Some((n, p)) => (n, Some(p)),
                None => (e, None),
            };
            let n: u64 = num
                .parse()
                .map_err(|_| usage(format!("-l: invalid {e:?}")))?;
            match pct.map(str::to_ascii_uppercase).as_deref() {
                None => n,
                Some("FREE") => vg.free_count() * n.min(100) / 100,
                Some("VG") => vg.extent_count() * n.min(100) / 100,
                Some(p) => return Err(usage(format!("-l: unknown %{p}"))),
            }
        }
        _ => return Err(usage("exactly one of -L and -l is needed")),
    };
    u32::try_from(n).map_err(|_| usage("size is too large"))
}

/// PV indices of the VG for device names given after the LV.
pub(super) fn pv_list(
    vg: &Vg,
    s: &Session,
    devs: &[String],
) -> Result<Option<Vec<usize>>, (u8, String)> {
    if devs.is_empty() {
        return Ok(None);
    }
    let scan = s.scan();
    devs.iter()
        .map(|d| {
            let label = scan
                .pvs
                .iter()
                .find(|p| p.device == *d)
                .ok_or_else(|| failed(format!("{d}: not a PV")))?;
            vg.pvs
                .iter()
                .position(|p| p.id == label.label.pv_uuid)
                .ok_or_else(|| failed(format!("{d}: not a PV of volume group \"{}\"", vg.name)))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

pub(super) fn current(s: &Session, vg: &str) -> Result<Vg, (u8, String)> {
    s.scan().vg(vg).map(|v| v.vg.clone()).map_err(failed)
}

/// Lease alignment of the VG's lvmlock device: 1 MiB for 512-byte sectors, else 8 MiB.
pub(super) fn lease_align(s: &Session, vg: &Vg) -> u64 {
    let scan = s.scan();
    let big = vg.pvs.iter().any(|p| {
        scan.pvs
            .iter()
            .any(|d| d.label.pv_uuid == p.id && d.sector_size > 512)
    });
    if big {
        8 << 20
    } else {
        1 << 20
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10", 'm'), Ok(Bytes(10 << 20)));
        assert_eq!(parse_size("1G", 'm'), Ok(Bytes(1 << 30)));
        assert_eq!(parse_size("1.5k", 'm'), Ok(Bytes(1536)));
        assert_eq!(parse_size("8s", 'm'), Ok(Bytes(4096)));
        assert!(parse_size("x", 'm').is_err());
        assert!(parse_size("-1", 'm').is_err());
        assert!(parse_size("1q", 'm').is_err());
    }
}
