//! What the verbs share: the device, locking and writing options, sizes and yes/no options
//! parsed as lvm2 does, names, the session over the devices, extents and PV lists.

use std::path::{Path, PathBuf};

use clap::Args;

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::Permission;
use lvmeta::model::Vg;
use lvmeta::scan::{self, Scan};
use lvmeta::session::{ReadLocks, Session};
use lvmeta::units::Bytes;

use crate::{ECMD_FAILED, EINVALID_CMD_LINE};

/// Which devices to look at.
#[derive(Args, Clone)]
pub struct DeviceArgs {
    /// Only these devices or image files (comma separated or repeated); default: every block
    /// device of this machine.
    #[arg(long = "devices", value_delimiter = ',')]
    pub devices: Vec<PathBuf>,
}

/// Opens the given devices (or every block device) read-only, saying why one that was named
/// does not open.
pub fn open_devices(args: &DeviceArgs) -> Vec<Box<dyn BlockDevice>> {
    let explicit = !args.devices.is_empty();
    let paths = if explicit {
        args.devices.clone()
    } else {
        system_block_devices()
    };
    let mut devs: Vec<Box<dyn BlockDevice>> = Vec::new();
    for p in &paths {
        match FileDevice::open(p) {
            Ok(d) if d.size() > 0 => devs.push(Box::new(d)),
            Ok(_) => {}
            Err(e) if explicit => eprintln!("  WARNING: {e}"),
            Err(e) => tracing::debug!(device = %p.display(), error = %e, "skipping device"),
        }
    }
    devs
}

/// Opens and scans the given devices (or every block device), prints the warnings.
pub fn scan_devices(args: &DeviceArgs) -> Scan {
    let devs = open_devices(args);
    let refs: Vec<&dyn BlockDevice> = devs.iter().map(|d| d.as_ref()).collect();
    let scan = scan::scan(&refs);
    print_warnings(&scan);
    scan
}

/// Reads the devices as lvm2's reporting verbs do ([`Session::read_locked`]): the shared VGs
/// among `vgs` (every VG when empty) under shared leases where this host can take them. Prints
/// the scan's warnings and names each shared VG read without a lock. The leases are kept
/// until the returned [`ReadLocks`] is dropped.
pub fn read_for_report(
    dev: &DeviceArgs,
    lock: &LockArgs,
    vgs: &[&str],
) -> Result<(std::sync::Arc<Scan>, ReadLocks), (u8, String)> {
    let mut session = Session::new(open_devices(dev));
    if let Some(h) = lock.host()? {
        session = session.with_host(h);
    }
    // Without a host id nothing is locked, and every shared VG read is named below.
    let (scan, locks) = session.read_locked(vgs).map_err(failed)?;
    print_warnings(&scan);
    for vg in &locks.unlocked {
        eprintln!("  WARNING: Reading VG {vg} without a lock; the view may be stale.");
    }
    Ok((scan, locks))
}

/// Prints a scan's warnings as lvm2 does.
pub fn print_warnings(scan: &Scan) {
    for w in &scan.warnings {
        eprintln!("  WARNING: {w}");
    }
}

/// [`print_warnings`] for the first read of a command only: a command that reads the devices
/// again (another VG held, a lease taken) says what it found once, as lvm2 does.
fn warn_once(scan: &Scan) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        print_warnings(scan);
    }
}

/// `/dev/<name>` for every block device the kernel lists.
pub fn system_block_devices() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir("/sys/class/block")
        .map(|d| {
            d.flatten()
                .map(|e| Path::new("/dev").join(e.file_name()))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// This host's id in shared VGs' lockspaces, as given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostIdArg {
    /// This id.
    Id(u64),
    /// lvmlocal.conf's host_id when set; else chosen from the lockspace by `vgchange
    /// --lockstart`, and other verbs use the id this host's sanlock daemon joined under.
    Auto,
}

fn parse_host_id(s: &str) -> Result<HostIdArg, String> {
    match s {
        "auto" => Ok(HostIdArg::Auto),
        n => n
            .parse()
            .map(HostIdArg::Id)
            .map_err(|_| format!("{n:?}: a number 1..2000, or auto")),
    }
}

/// How this host takes leases in shared VGs (writing verbs and reports).
#[derive(Args, Clone)]
pub struct LockArgs {
    /// This host's id in shared VGs' lockspaces, or `auto` (default: lvmlocal.conf
    /// `local/host_id`).
    #[arg(long = "host-id", env = "LVMETA_HOST_ID", value_parser = parse_host_id)]
    pub host_id: Option<HostIdArg>,
    /// Seconds to wait for a lease held by another host.
    #[arg(long = "lock-wait", default_value_t = 60)]
    pub lock_wait: u64,
    /// io_timeout of lockspaces this host creates or joins (sanlock's default: 10).
    #[arg(long = "io-timeout", default_value_t = 10)]
    pub io_timeout: u32,
}

impl LockArgs {
    /// This host's lease manager, when a host id is given (or in lvmlocal.conf), or with
    /// `auto` once this host's sanlock daemon joined a lockspace.
    pub fn host(&self) -> Result<Option<lvmeta::lease::Host>, (u8, String)> {
        let id = match self.host_id {
            Some(HostIdArg::Id(id)) => Some(id),
            Some(HostIdArg::Auto) => match lvmeta::lease::lvmlocal_host_id() {
                Some(id) => Some(id),
                None => joined_host_id()?,
            },
            None => lvmeta::lease::lvmlocal_host_id(),
        };
        id.map(|id| lease_host(id, self)).transpose()
    }
}

/// Options every writing verb shares.
#[derive(Args, Clone)]
pub struct WriteArgs {
    #[command(flatten)]
    pub dev: DeviceArgs,
    /// Directory of lvm2's lock files (lvm.conf `global/locking_dir`).
    #[arg(long = "lockingdir", env = "LVMETA_LOCKING_DIR", default_value = lvmeta::lockfile::DEFAULT_LOCK_DIR)]
    pub locking_dir: PathBuf,
    /// lvm2's run directory, where `newhints` tells lvm2 to rescan for PVs.
    #[arg(long = "rundir", env = "LVMETA_RUN_DIR", default_value = "/run/lvm")]
    pub run_dir: PathBuf,
    #[command(flatten)]
    pub lock: LockArgs,
    /// Change shared VGs without taking leases (only safe when no other host uses them).
    #[arg(long = "nolocking")]
    pub nolocking: bool,
    /// Answer yes to every question (lvmeta never asks; accepted for lvm2 compatibility).
    #[arg(short = 'y', long = "yes")]
    pub yes: bool,
}

/// A failed command: lvm2's exit code 5 and the error.
pub fn failed(e: impl std::fmt::Display) -> (u8, String) {
    (ECMD_FAILED, e.to_string())
}

/// A bad command line: lvm2's exit code 3 and why.
pub fn usage(msg: impl Into<String>) -> (u8, String) {
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
pub fn size_arg(s: &Option<String>, opt: &str, unit: char) -> Result<Option<Bytes>, (u8, String)> {
    s.as_deref()
        .map(|v| parse_size(v, unit).map_err(|e| usage(format!("{opt}: {e}"))))
        .transpose()
}

/// Size option `opt` in the 512-byte sectors lvm2 keeps it in (`-I`, `--chunksize`, `-s`),
/// rounded down, if given.
pub fn sectors_arg(s: &Option<String>, opt: &str, unit: char) -> Result<Option<u32>, (u8, String)> {
    size_arg(s, opt, unit)?
        .map(|b| u32::try_from(b.sectors_floor().0).map_err(|_| usage(format!("{opt}: too large"))))
        .transpose()
}

pub fn yes_no(v: &Option<String>, opt: &str) -> Result<Option<bool>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("y" | "yes") => Ok(Some(true)),
        Some("n" | "no") => Ok(Some(false)),
        Some(o) => Err(usage(format!("{opt}: {o:?} is not y or n"))),
    }
}

/// `-a`: `None` when not given; else `Some(None)` to deactivate (`n`), `Some(Some(shared))`
/// to activate (`y`/`ey`, or `sy` shared).
pub fn activation(v: &Option<String>) -> Result<Option<Option<bool>>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("n") => Ok(Some(None)),
        Some("y" | "ey") => Ok(Some(Some(false))),
        Some("sy") => Ok(Some(Some(true))),
        Some(other) => Err(usage(format!("-a {other}: y, ey, sy or n"))),
    }
}

pub fn permission(v: &Option<String>) -> Result<Option<Permission>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("rw") => Ok(Some(Permission::ReadWrite)),
        Some("r") => Ok(Some(Permission::ReadOnly)),
        Some(o) => Err(usage(format!("-p: {o:?} is not r or rw"))),
    }
}

/// Opens the session ([`open`]) and prints the scan's warnings.
pub fn session(w: &WriteArgs, extra: &[PathBuf]) -> Result<Session, (u8, String)> {
    let s = open(w, extra)?;
    warn_once(&s.cached_scan());
    Ok(s)
}

/// Opens the session over `--devices` (plus any device named on the command line), or every
/// block device that opens read-write; reads nothing yet.
pub fn open(w: &WriteArgs, extra: &[PathBuf]) -> Result<Session, (u8, String)> {
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
    Ok(s)
}

#[cfg(feature = "sanlock")]
pub fn lease_host(host_id: u64, w: &LockArgs) -> Result<lvmeta::lease::Host, (u8, String)> {
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

/// The one host id under which this host's sanlock daemon joined lvm2 lockspaces.
#[cfg(feature = "sanlock")]
fn joined_host_id() -> Result<Option<u64>, (u8, String)> {
    use lvmeta::lease::LeaseManager;
    let standing = lvmeta::lease::sanlock::SanlockLeases::new()
        .standing()
        .map_err(failed)?;
    let mut ids: Vec<u64> = standing
        .lockspaces
        .iter()
        .filter(|l| l.name.starts_with(lvmeta::lease::LOCKSPACE_PREFIX) && !l.failed)
        .map(|l| l.host_id)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    match ids[..] {
        [] => Ok(None),
        [id] => Ok(Some(id)),
        _ => Err(failed(format!(
            "--host-id auto: this host joined lockspaces under several host ids {ids:?}; give one"
        ))),
    }
}

#[cfg(not(feature = "sanlock"))]
fn joined_host_id() -> Result<Option<u64>, (u8, String)> {
    Ok(None)
}

#[cfg(not(feature = "sanlock"))]
pub fn lease_host(_host_id: u64, _w: &LockArgs) -> Result<lvmeta::lease::Host, (u8, String)> {
    Err(usage(
        "this lvmeta was built without the sanlock feature: shared VGs need --nolocking",
    ))
}

pub fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

pub fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `VG/LV` into its parts.
pub fn vg_lv(s: &str) -> Result<(&str, &str), (u8, String)> {
    s.strip_prefix("/dev/")
        .unwrap_or(s)
        .split_once('/')
        .ok_or_else(|| usage(format!("{s:?}: expected VG/LV")))
}

/// A size as lvm2's messages print it: `16.00 MiB`, `<15.88 TiB`.
pub fn long_size(bytes: u64) -> String {
    let short = lvmeta::report::Units::default().format(bytes);
    let unit = match short.chars().last() {
        Some('k') => "KiB",
        Some('m') => "MiB",
        Some('g') => "GiB",
        Some('t') => "TiB",
        Some('p') => "PiB",
        Some('e') => "EiB",
        _ => return format!("{bytes} B"),
    };
    format!("{} {unit}", &short[..short.len() - 1])
}

/// Whether `-L SIZE` is not a whole number of `vg`'s extents: then the extents it rounds up
/// to, in bytes (lvm2 says so).
pub fn rounded_up(vg: &Vg, size: Option<Bytes>) -> Option<u64> {
    let b = size?;
    let ext = vg.extent_bytes();
    (ext > 0 && !b.0.is_multiple_of(ext)).then(|| b.extents_ceil(vg.extent()).0 * ext)
}

/// Extents for `-L`/`-l`: sizes round up to whole extents.
pub fn extents_of(
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

/// PV indices of the VG for device names given after the LV (`None`: any PV).
pub fn pv_list(vg: &Vg, s: &Session, devs: &[String]) -> Result<Option<Vec<usize>>, (u8, String)> {
    if devs.is_empty() {
        return Ok(None);
    }
    s.pv_indexes(vg, &refs(devs)).map(Some).map_err(failed)
}

/// VG `vg`, read once under lvm2's VG file lock, which the session keeps for the rest of
/// the command ([`Session::hold`]); the first read's warnings are printed.
pub fn current(s: &Session, vg: &str) -> Result<Vg, (u8, String)> {
    hold(s, vg)?;
    s.vg(vg).map_err(failed)
}

/// Takes and keeps VG `vg`'s file lock for the rest of the command ([`Session::hold`]);
/// reads the devices under it and prints the warnings when it was not held yet.
pub fn hold(s: &Session, vg: &str) -> Result<(), (u8, String)> {
    if s.hold(vg).map_err(failed)? {
        warn_once(&s.cached_scan());
    }
    Ok(())
}

/// The major and minor numbers of the block device node at `path`.
pub fn device_numbers(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let rdev = std::fs::metadata(path).ok()?.rdev();
    Some((
        ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff),
        ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff),
    ))
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
