//! Before serving: what the admin no longer does by hand on each node.
//!
//! - Kernel modules loaded ([`load_modules`]): `dm_thin_pool` for thin pools, `nbd` where
//!   thin volumes are attached over NBD.
//! - The VG waited for; with `--create-vg` (the controller), made on LUNs that carry nothing,
//!   by one controller however many start at once, and grown by LUNs added to the list later
//!   ([`lvmeta::session::Session::create_vg_once`]). A LUN that carries anything is left
//!   alone; the reason is logged until it changes.
//! - This host's sanlock host id chosen from the VG's lockspace when none is given
//!   (`--host-id`, lvmlocal.conf, or a lockspace this host joined), and the lockspaces of
//!   the served shared VGs joined.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::{SharedVg, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::lease::{self, LeaseManager};
use lvmeta::session::{Provision, Session};
use lvmeta::units::Bytes;

/// The metadata area of a PV the driver makes: 256 MiB (room for about 80,000 volumes'
/// metadata, which lvm2 keeps twice while it commits), or a sixteenth of a smaller LUN.
pub fn metadata_size(lun_bytes: u64) -> Bytes {
    const MIB: u64 = 1 << 20;
    Bytes((256 * MIB).min(lun_bytes / 16 / MIB * MIB).max(MIB))
}

/// How long a waiting plugin sleeps between looks at the LUN.
pub const WAIT_EVERY: Duration = Duration::from_secs(5);

/// Loads each of `modules` that `sys_module` (normally `/sys/module`) does not list, with
/// `modprobe`. The error names the module and where the host keeps modules.
pub fn load_modules(
    modules: &[&str],
    sys_module: &Path,
    modprobe: impl Fn(&str) -> Result<(), String>,
) -> Result<(), String> {
    for m in modules {
        if sys_module.join(m).exists() {
            continue;
        }
        modprobe(m).map_err(|why| {
            let release = std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|r| r.trim().to_owned())
                .unwrap_or_else(|_| "$(uname -r)".into());
            format!(
                "kernel module {m} is not loaded and cannot be loaded here ({why}); load it on \
                 the host (`modprobe {m}`, and `echo {m} > /etc/modules-load.d/lvmeta.conf`), \
                 or give the plugin the host's /lib/modules/{release}"
            )
        })?;
        tracing::info!(module = m, "kernel module loaded");
    }
    Ok(())
}

/// Runs `modprobe NAME`.
pub fn modprobe(name: &str) -> Result<(), String> {
    let out = std::process::Command::new("modprobe")
        .arg(name)
        .output()
        .map_err(|e| format!("modprobe: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
}

/// What the VG step needs.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The LUNs.
    pub devices: Vec<PathBuf>,
    /// The served VGs.
    pub vgs: Vec<String>,
    /// Make the VG (exactly one is served) when it does not exist.
    pub create: bool,
    /// sanlock io_timeout for lockspaces made or joined.
    pub io_timeout: u32,
    /// How long a lease held by another host is waited for.
    pub lock_wait: Duration,
    /// lvm2's lock file directory.
    pub locking_dir: PathBuf,
    /// This host's names in lockspaces (the Kubernetes node name, the kernel's host name).
    pub names: Vec<String>,
    /// The creation claim's timing.
    pub claim: lvmeta::claim::Timing,
}

/// This host's lease manager with host id `id` (1 when it only makes leases or chooses).
fn lease_host(s: &Setup, id: u64) -> lease::Host {
    lease::Host::new(
        Arc::new(lease::sanlock::SanlockLeases::new()),
        id,
        s.io_timeout,
        s.lock_wait,
    )
}

/// A session over the LUNs `devices`, read-write, taking lvm2's file locks in `lock_dir`
/// (what the serving process and the steps before it both use).
pub fn open_session(devices: &[PathBuf], lock_dir: &Path) -> Result<Session, String> {
    let mut devs: Vec<Box<dyn BlockDevice>> = Vec::new();
    for p in devices {
        devs.push(Box::new(
            FileDevice::open_rw(p).map_err(|e| format!("{}: {e}", p.display()))?,
        ));
    }
    Ok(Session::new(devs).with_lock_dir(lock_dir.to_owned()))
}

fn session(s: &Setup) -> Result<Session, String> {
    open_session(&s.devices, &s.locking_dir)
}

fn names(s: &Setup) -> Vec<String> {
    s.devices.iter().map(|p| p.display().to_string()).collect()
}

/// Waits until a served VG is on the LUNs; with `create`, makes the VG on blank LUNs when
/// it is not (`host_id`: this host's, when known). Does not wait where this host may have
/// volumes live: its sanlock daemon is in a served VG's lockspace (healthy or failed), or a
/// LUN does not read; the start-up fencing sweep must not wait behind the LUN.
pub fn wait_for_vgs(s: &Setup, host_id: Option<u64>) -> Result<(), String> {
    if s.create && s.vgs.len() != 1 {
        return Err("--create-vg makes one VG: give exactly one --vg".into());
    }
    if let Ok(standing) = lease::sanlock::SanlockLeases::new().standing() {
        let names: Vec<String> = s
            .vgs
            .iter()
            .map(|v| lease::layout::lockspace_name(v))
            .collect();
        if standing.lockspaces.iter().any(|l| names.contains(&l.name)) {
            return Ok(());
        }
    }
    let mut last = String::new();
    loop {
        let session = session(s)?;
        for d in session.devices() {
            let mut first = [0u8; 4096];
            if let Err(e) = d.read_at(0, &mut first[..d.size().min(4096) as usize]) {
                tracing::warn!(device = d.name(), error = %e, "a LUN does not read: serving without waiting for the VG");
                return Ok(());
            }
        }
        let devices = names(s);
        let refs: Vec<&str> = devices.iter().map(String::as_str).collect();
        let scan = session.scan();
        if s.vgs.iter().any(|v| scan.vg(v).is_ok()) {
            return Ok(());
        }
        let Some(vg) = s.vgs.first() else {
            return Ok(());
        };
        let held = held(s);
        let why = if !held.is_empty() && s.create {
            refused(&held)
        } else if s.create {
            let p = provision(s, &session, vg, &refs, None);
            // The id only names this host in sanlock's records; making leases needs none.
            let made = session
                .with_host(lease_host(s, host_id.unwrap_or(1)))
                .create_vg_once(&p, &refs);
            match made {
                Ok(m) if m.created => continue,
                Ok(m) if m.refused.is_empty() => continue,
                Ok(m) => refused(&m.refused),
                // Another maker's claim, a LUN that does not answer: looked at again.
                Err(e) => format!("making VG {vg}: {e}"),
            }
        } else {
            format!(
                "waiting for VG {} to be made on {devices:?} (by the controller)",
                s.vgs.join(" or ")
            )
        };
        if why != last {
            tracing::warn!(vg = %vg, why = %why, "the VG is not there yet");
            last = why;
        }
        std::thread::sleep(WAIT_EVERY);
    }
}

/// Adds LUNs listed but not in the VG to it when they carry nothing (the controller, after
/// it joined the lockspace as `host_id`); logs the ones left alone. An error is the
/// caller's to log: the VG serves on without them.
pub fn extend(s: &Setup, host_id: Option<u64>) -> Result<(), String> {
    let Some(vg) = s.vgs.first().filter(|_| s.create) else {
        return Ok(());
    };
    let mut session = session(s)?;
    if let Some(id) = host_id {
        session = session.with_host(lease_host(s, id));
    }
    // A LUN another device sits on (multipath, md, device-mapper) is not added; the VG's
    // own PVs carry this host's LVs.
    let scan = session.scan();
    let mut held = held(s);
    held.retain(|(d, _)| {
        scan.pvs
            .iter()
            .position(|p| &p.device == d)
            .and_then(|i| scan.vg_of_pv(i))
            .is_none()
    });
    if !held.is_empty() {
        tracing::warn!(vg = %vg, refused = %refused(&held), "LUNs left out of the VG");
    }
    let devices: Vec<String> = names(s)
        .into_iter()
        .filter(|d| !held.iter().any(|(h, _)| h == d))
        .collect();
    let refs: Vec<&str> = devices.iter().map(String::as_str).collect();
    // New PVs get the metadata area of the VG's largest: every area holds the whole text.
    let largest = scan.vg(vg).ok().and_then(|sv| {
        sv.pv_devices
            .iter()
            .flatten()
            .flat_map(|&i| scan.pvs[i].mdas.iter().map(|m| m.locn.size))
            .max()
    });
    let p = provision(s, &session, vg, &refs, largest.map(Bytes));
    let out = session.extend_blank(&p, &refs).map_err(|e| e.to_string())?;
    if !out.refused.is_empty() {
        tracing::warn!(vg = %vg, refused = %refused(&out.refused), "LUNs left out of the VG");
    }
    if !out.extended.is_empty() {
        tracing::info!(vg = %vg, added = ?out.extended, "LUNs added to the VG");
    }
    Ok(())
}

/// The LUNs other devices are stacked on, each with what `lun_path::holders` names.
fn held(s: &Setup) -> Vec<(String, String)> {
    let sys = Path::new("/sys/class/block");
    s.devices
        .iter()
        .filter_map(|p| {
            let h = crate::lun_path::holders(p, sys);
            (!h.is_empty()).then(|| {
                let why = format!("devices stacked on it ({})", h.join(", "));
                (p.display().to_string(), why)
            })
        })
        .collect()
}

fn refused(r: &[(String, String)]) -> String {
    let each: Vec<String> = r
        .iter()
        .map(|(d, why)| format!("{d} carries {why}: it is left untouched"))
        .collect();
    each.join("; ")
}

/// The shared VG the driver makes: 4 MiB extents, metadata areas of `mda` or from
/// [`metadata_size`].
fn provision(
    s: &Setup,
    session: &Session,
    vg: &str,
    devices: &[&str],
    mda: Option<Bytes>,
) -> Provision {
    let smallest = session
        .devices()
        .iter()
        .map(|d| d.size())
        .min()
        .unwrap_or(0);
    Provision {
        spec: VgSpec {
            name: vg.to_owned(),
            extent_size: lvmeta::edit::vg::DEFAULT_EXTENT_SIZE,
            tags: vec![],
            shared: Some(SharedVg::for_sector(session.sector_size(devices))),
        },
        pv: PvOptions {
            metadata_size: Some(mda.unwrap_or_else(|| metadata_size(smallest))),
            ..PvOptions::default()
        },
        timing: s.claim,
        host_name: s.names.first().cloned().unwrap_or_default(),
    }
}

/// This host's id: `known` when given, else one chosen from the first served shared VG's
/// lockspace (joining it). Then every served shared VG's lockspace is joined. `None`: no
/// served VG is shared.
pub fn join(s: &Setup, known: Option<u64>) -> Result<Option<u64>, String> {
    let session = session(s)?;
    let scan = session.scan();
    let shared: Vec<&String> = s
        .vgs
        .iter()
        .filter(|v| scan.vg(v).is_ok_and(|sv| sv.vg.is_shared()))
        .collect();
    let Some(first) = shared.first() else {
        return Ok(known);
    };
    let id = match known {
        Some(id) => id,
        None => {
            let names: Vec<&str> = s.names.iter().map(String::as_str).collect();
            session
                .lockstart_choosing(first, &names, &lease_host(s, 1))
                .map_err(|e| format!("choosing a host id in VG {first}'s lockspace: {e}"))?
        }
    };
    let session = session.with_host(lease_host(s, id));
    for vg in shared {
        session
            .lockstart(vg)
            .map_err(|e| format!("joining VG {vg}'s lockspace as host id {id}: {e}"))?;
        // sanlock answers a join of a lockspace it is in "joined", whatever the id.
        let name = lease::layout::lockspace_name(vg);
        let standing = lease::sanlock::SanlockLeases::new()
            .standing()
            .map_err(|e| e.to_string())?;
        match standing.lockspace(&name).map(|l| l.host_id) {
            Some(joined) if joined != id => {
                return Err(format!(
                    "this host is in VG {vg}'s lockspace as host id {joined}, not {id}: give \
                     --host-id {joined} or leave the lockspace first"
                ))
            }
            _ => {}
        }
    }
    tracing::info!(host_id = id, "lockspaces joined");
    Ok(Some(id))
}

/// Whether this host's sanlock daemon arms its watchdog; `None` when no daemon answers
/// (the VGs are then local: nothing to join).
pub fn watchdog() -> Option<bool> {
    lease::sanlock::SanlockLeases::new()
        .standing()
        .ok()
        .map(|s| s.watchdog)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_area_grows_with_the_lun_up_to_256_mib() {
        assert_eq!(metadata_size(1 << 40), Bytes(256 << 20));
        assert_eq!(metadata_size(1 << 30), Bytes(64 << 20));
        assert_eq!(metadata_size(1 << 20), Bytes(1 << 20));
    }

    #[test]
    fn loaded_modules_are_not_probed_and_failures_name_the_module() {
        let dir = std::env::temp_dir().join(format!("sysmod-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("nbd")).expect("mkdir");
        let probed = std::sync::Mutex::new(Vec::new());
        let ok = load_modules(&["nbd", "dm_thin_pool"], &dir, |m| {
            probed.lock().expect("lock").push(m.to_owned());
            Ok(())
        });
        assert!(ok.is_ok());
        assert_eq!(*probed.lock().expect("lock"), ["dm_thin_pool"]);
        let e = load_modules(&["dm_thin_pool"], &dir, |_| Err("not found".into()))
            .expect_err("cannot load");
        assert!(e.contains("kernel module dm_thin_pool"), "{e}");
        assert!(e.contains("/lib/modules/"), "{e}");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
