//! `csi-shim`: the CSI driver's endpoint on a unix socket (Identity, Controller and, with
//! `--node-id`, Node).
//!
//! ```text
//! csi-shim --endpoint /csi/csi.sock --devices /dev/mapper/lun0 --vg vg0 [--host-id N]
//!          [--node-id NODE --kubelet-dir /var/lib/kubelet] [--metrics-address :9810]
//! ```
//! `cargo run -p lvmeta-tests --bin csi-demo` runs the driver's whole job on this machine.
//!
//! Before serving it waits for the VGs on the devices given (with `--create-vg`, makes the
//! VG on blank devices) and joins the shared VGs' lockspaces under this host's sanlock host
//! id (`--host-id`, lvm2's lvmlocal.conf, the id this host's sanlock joined under, else one
//! chosen from the lockspace): `csi_shim::prepare`.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;
use csi_shim::driver::Driver;

/// Serving the CSI endpoint.
#[derive(Debug, Parser)]
#[command(version, about = "Kubernetes CSI driver over lvmeta")]
struct Args {
    /// The unix socket to serve on.
    #[arg(long, default_value = "/csi/csi.sock")]
    endpoint: PathBuf,
    /// The devices holding the VGs' PVs (the shared LUN).
    #[arg(long, value_delimiter = ',', required = true)]
    devices: Vec<PathBuf>,
    /// A VG whose volumes are served (repeat for several).
    #[arg(long = "vg", required = true)]
    vgs: Vec<String>,
    /// This host's sanlock host id (1..2000) for shared VGs (default: lvm2's lvmlocal.conf
    /// `local/host_id`, in `LVM_SYSTEM_DIR` or /etc/lvm; else the id this host's sanlock
    /// daemon joined a served VG's lockspace under).
    #[arg(long, env = "LVMETA_HOST_ID")]
    host_id: Option<u64>,
    /// sanlock io_timeout in seconds when joining a lockspace.
    #[arg(long, default_value_t = 10)]
    io_timeout: u32,
    /// Seconds to wait for a VG lease held by another host.
    #[arg(long, default_value_t = 30)]
    lock_wait: u64,
    /// Milliseconds an unused VG lease stays held after a change, so that back-to-back
    /// changes pay one sanlock acquire (0: released at once, as lvmlockd does).
    #[arg(long, default_value_t = csi_shim::VG_LEASE_LINGER.as_millis() as u64)]
    vg_lease_linger_ms: u64,
    /// Milliseconds one acquire of a VG lease is reused at most, so other hosts get a turn.
    #[arg(long, default_value_t = csi_shim::VG_LEASE_MAX_HOLD.as_millis() as u64)]
    vg_lease_max_hold_ms: u64,
    /// Serve the Node service as this Kubernetes node (its name).
    #[arg(long, env = "KUBE_NODE_NAME")]
    node_id: Option<String>,
    /// The kubelet directory; staging and target paths must be under it.
    #[arg(long, default_value = "/var/lib/kubelet")]
    kubelet_dir: PathBuf,
    /// Most volumes staged on this node at once (0: no limit).
    #[arg(long, default_value_t = 0)]
    max_volumes: i64,
    /// How the extents of deleted volumes are erased before they are freed: `zeroout`
    /// (BLKZEROOUT, offloaded by SANs), `discard` (BLKDISCARD, for LUNs that read back
    /// zeroes after it; checked) or `none` (freed at once: the next volume there may read the
    /// deleted one's data).
    #[arg(long, default_value = "zeroout", value_parser = ["zeroout", "discard", "none"])]
    wipe: String,
    /// Run the wiper, which erases deleted volumes' extents, in this process (default: when
    /// the Node service is not served, i.e. in the controller).
    #[arg(long)]
    wiper: Option<bool>,
    /// lvm2's lock file directory, shared with lvm commands on this host.
    #[arg(long, env = "LVMETA_LOCKING_DIR", default_value = "/run/lock/lvm")]
    locking_dir: PathBuf,
    /// UNSAFE, for labs and tests: use shared VGs even where this host cannot be fenced (the
    /// sanlock daemon runs without its watchdog, or this node's volumes cannot fail their
    /// I/O in place). A host that loses its leases but keeps running may then corrupt
    /// volumes another host took over; the driver warns, and the metric
    /// `lvmeta_fencing_required` is 0.
    #[arg(long)]
    unsafe_without_fencing: bool,
    /// Serve Prometheus metrics at http://ADDRESS/metrics (`HOST:PORT`, or `:PORT` for
    /// every address).
    #[arg(long, value_parser = metrics_address)]
    metrics_address: Option<std::net::SocketAddr>,
    /// This node's address for NBD (`IP`, or `IPV6%INTERFACE` for a link-local one): thin
    /// volumes staged on several nodes are served from here and attached from here. In
    /// Kubernetes: the pod's IP (`status.podIP`). Without it, multi-node thin staging is
    /// refused.
    #[arg(long, env = "NBD_IP")]
    nbd_ip: Option<String>,
    /// The TCP port of this node's NBD server.
    #[arg(long, default_value_t = 10809)]
    nbd_port: u16,
    /// Connections per volume attached over NBD.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=16))]
    nbd_connections: u64,
    /// Make the VG (one `--vg`, shared) on the `--devices` when it does not exist and they
    /// all carry nothing, and add to it devices listed later that carry nothing: one
    /// process makes it however many start at once. A device that carries anything (a
    /// label, a filesystem, a partition table, data in its first MiB) is left untouched and
    /// the reason logged. The controller's job; without it the process waits for the VG.
    #[arg(long)]
    create_vg: bool,
    /// Seconds before a late NBD request is retried on another connection.
    #[arg(long, default_value_t = 30)]
    nbd_timeout: u64,
    /// Seconds I/O to a volume attached over NBD waits with no live connection before it
    /// fails (default: 8 x io_timeout + 180, longer than sanlock takes to count a dead
    /// serving node out).
    #[arg(long)]
    nbd_dead_timeout: Option<u64>,
}

/// How long an idle blocking thread (lvmeta's disk I/O, lease waits, mkfs) is kept: each
/// one that ran a commit holds allocator pages of its own, so they go soon after a burst of
/// calls (tokio's default keeps them 10 s). Their number is not capped: a call waiting for
/// another host's lease must not hold up Probe or the node's request server.
const BLOCKING_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a SIGTERM waits for the fencing sweep that tells whether sanlock sent it.
const STOP_SWEEP: std::time::Duration = std::time::Duration::from_secs(10);

/// Before serving (csi_shim::prepare): the LUN paths checked, kernel modules loaded on a
/// node, the VGs waited for (made, with `--create-vg`), this host's id chosen when none is
/// given and the shared VGs' lockspaces joined, where this host can be fenced. The host id.
fn prepare(args: &Args) -> Result<Option<u64>, String> {
    let stable: Vec<&std::path::Path> = csi_shim::lun_path::STABLE_DIRS
        .iter()
        .map(std::path::Path::new)
        .collect();
    for p in &args.devices {
        csi_shim::lun_path::check(p, &stable).map_err(|e| format!("--devices {e}"))?;
    }
    if args.node_id.is_some() {
        let mut modules = vec!["dm_thin_pool"];
        if args.nbd_ip.is_some() {
            modules.push("nbd");
        }
        let sys = std::path::Path::new("/sys/module");
        if let Err(e) = csi_shim::prepare::load_modules(&modules, sys, csi_shim::prepare::modprobe)
        {
            tracing::error!(error = %e, "thin volumes cannot be activated on this node");
        }
    }
    let mut names: Vec<String> = args.node_id.iter().cloned().collect();
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        names.push(h.trim().to_owned());
    }
    let setup = csi_shim::prepare::Setup {
        devices: args.devices.clone(),
        vgs: args.vgs.clone(),
        create: args.create_vg,
        io_timeout: args.io_timeout,
        lock_wait: std::time::Duration::from_secs(args.lock_wait),
        locking_dir: args.locking_dir.clone(),
        names,
        claim: lvmeta::claim::Timing::default(),
    };
    let known = host_id(args);
    if let Some(id) = known.filter(|id| !(1..=2000).contains(id)) {
        return Err(format!("--host-id {id}: must be 1..2000"));
    }
    csi_shim::prepare::wait_for_vgs(&setup, known)?;
    let Some(watchdog) = csi_shim::prepare::watchdog() else {
        tracing::info!("no sanlock daemon answers: no lockspace is joined (local VGs only)");
        return Ok(known);
    };
    if !watchdog && !args.unsafe_without_fencing {
        tracing::warn!("the sanlock daemon runs without its watchdog: no lockspace is joined here");
        return Ok(known);
    }
    let id = csi_shim::prepare::join(&setup, known)?;
    if let Err(e) = csi_shim::prepare::extend(&setup, id) {
        tracing::error!(error = %e, "adding LUNs to the VG failed; it serves on without them");
    }
    Ok(id)
}

/// This host's sanlock host id: `--host-id` (or `LVMETA_HOST_ID`), else lvm2's
/// lvmlocal.conf, else the id under which this host's sanlock daemon joined a served VG's
/// lockspace (`lvmeta vgchange --lockstart --host-id auto` chose it).
fn host_id(args: &Args) -> Option<u64> {
    use lvmeta::lease::LeaseManager;
    args.host_id
        .or_else(lvmeta::lease::lvmlocal_host_id)
        .or_else(|| {
            let standing = lvmeta::lease::sanlock::SanlockLeases::new()
                .standing()
                .ok()?;
            // A failed lockspace's id is still this host's.
            args.vgs
                .iter()
                .filter_map(|vg| standing.lockspace(&lvmeta::lease::layout::lockspace_name(vg)))
                .map(|l| l.host_id)
                .find(|&id| id > 0)
        })
}

/// This node's NBD server, when `--nbd-ip` is given (it needs a host id).
fn nbd_serving(
    args: &Args,
    host_id: Option<u64>,
    backend: &Arc<Driver>,
) -> Result<Option<Arc<csi_shim::serve::Serving>>, String> {
    let Some(ip) = &args.nbd_ip else {
        return Ok(None);
    };
    let host_id = host_id.ok_or("--nbd-ip needs this host's sanlock host id (--host-id)")?;
    let addr =
        csi_shim::attach::scoped_addr(ip, args.nbd_port).map_err(|e| format!("--nbd-ip: {e}"))?;
    let setup = csi_shim::serve::NbdSetup {
        addr,
        host_id,
        connections: usize::try_from(args.nbd_connections).unwrap_or(4),
        timeout: args.nbd_timeout,
        dead_timeout: args
            .nbd_dead_timeout
            .unwrap_or(8 * u64::from(args.io_timeout) + 180),
        io_error_hold: io_error_hold(args.io_timeout),
    };
    let serving = csi_shim::serve::Serving::start(setup, backend.clone())
        .map_err(|e| format!("--nbd-ip {ip} --nbd-port {}: {e}", args.nbd_port))?;
    Ok(Some(Arc::new(serving)))
}

/// How long a served request the thin LV fails with EIO is held: longer than sanlock takes
/// to count this host's renewals failed after its path is cut (8 io_timeouts), after which
/// the sweep fences and closes the export within a second or two. A client's kernel that
/// times a held request out meanwhile requeues it on another connection, and once all are
/// gone waits `--nbd-dead-timeout` for a new server: a pause either way.
fn io_error_hold(io_timeout: u32) -> std::time::Duration {
    std::time::Duration::from_secs(8 * u64::from(io_timeout) + 10)
}

/// `HOST:PORT`, or `:PORT` for 0.0.0.0.
fn metrics_address(s: &str) -> Result<std::net::SocketAddr, String> {
    let full = if s.starts_with(':') {
        format!("0.0.0.0{s}")
    } else {
        s.to_owned()
    };
    full.parse()
        .map_err(|e| format!("{s:?}: {e} (want HOST:PORT or :PORT)"))
}

fn main() -> std::process::ExitCode {
    // Info by default (RUST_LOG overrides): calls and their failures are in the log.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    // glibc's malloc tuned for a large VG (csi_shim::malloc): start again under it once.
    if let Some(e) = csi_shim::malloc::restart_tuned() {
        tracing::warn!(error = %e, tunables = csi_shim::malloc::TUNABLES, "running with glibc's default malloc settings");
    }
    let args = Args::parse();
    // A node plugin that uses sanlock runs as two processes: the lease keeper, then this
    // program again as its child, which serves (csi_shim::keeper).
    let holder = std::env::var(csi_shim::keeper::HOLDER_ENV)
        .ok()
        .and_then(|v| v.parse::<u32>().ok());
    let id = match holder {
        Some(_) => host_id(&args),
        None => match prepare(&args) {
            Ok(id) => id,
            Err(e) => {
                eprintln!("csi-shim: {e}");
                return std::process::ExitCode::FAILURE;
            }
        },
    };
    if args.node_id.is_some() && id.is_some() && holder.is_none() {
        return csi_shim::keeper::run(id);
    }
    if let Some(h) = holder {
        if let Err(e) = csi_shim::keeper::serving(h) {
            eprintln!("csi-shim: serving for the lease keeper {h}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    }
    let result = run(args, holder, id);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csi-shim: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Serves with this host's id `host_id` (resolved once, in `main`).
fn run(args: Args, holder: Option<u32>, host_id: Option<u64>) -> Result<(), String> {
    let metrics = Arc::new(csi_shim::metrics::Metrics::default());
    let mut session = csi_shim::prepare::open_session(&args.devices, &args.locking_dir)?;
    let host_devices = lvmeta::activate::best();
    let manager: Option<Arc<dyn lvmeta::lease::LeaseManager>> = host_id.map(|_| {
        let m = match holder.and_then(|h| i32::try_from(h).ok()) {
            Some(pid) => lvmeta::lease::sanlock::SanlockLeases::with_holder(pid),
            None => lvmeta::lease::sanlock::SanlockLeases::new(),
        };
        Arc::new(m) as Arc<_>
    });
    if let Some(h) = holder {
        tracing::info!(keeper = h, "volumes' leases are held by the lease keeper");
    }
    // A node plugin's volumes must fail their I/O in place when their lease is lost.
    let devices = match (&args.node_id, &host_devices) {
        (Some(_), Some(h)) if !h.can_fence() => Some(format!(
            "this node's activation backend ({}) cannot fence volumes: it needs \
             device-mapper (/dev/mapper/control, the dm_mod module)",
            h.name()
        )),
        _ => None,
    };
    let fencing = Arc::new(csi_shim::fencing::Fencing::new(
        manager.clone(),
        !args.unsafe_without_fencing,
        devices,
    ));
    if args.unsafe_without_fencing {
        tracing::warn!("--unsafe-without-fencing: shared VGs are used even where this host cannot be fenced; a host that loses its leases may corrupt volumes another host took over");
    }
    if let (Some(host_id), Some(manager)) = (host_id, manager) {
        if !(1..=2000).contains(&host_id) {
            return Err(format!("--host-id {host_id}: must be 1..2000"));
        }
        session = session.with_host(
            lvmeta::lease::Host::new(
                manager,
                host_id,
                args.io_timeout,
                std::time::Duration::from_secs(args.lock_wait),
            )
            .with_gate(Arc::new(csi_shim::fencing::Gate(fencing.clone())))
            .with_linger(
                std::time::Duration::from_millis(args.vg_lease_linger_ms),
                std::time::Duration::from_millis(args.vg_lease_max_hold_ms),
            )
            .with_observer(metrics.clone()),
        );
    }
    let erase = lvmeta::session::Erase::parse(&args.wipe);
    if erase.is_none() {
        tracing::warn!("--wipe none: deleted volumes' extents are freed without erasing them");
    }
    let mut backend = Driver::new(session, args.vgs.clone())
        .with_metrics(metrics)
        .with_fencing(fencing)
        .with_erase(erase)
        .with_wiper(args.wiper.unwrap_or(args.node_id.is_none()));
    if let Some(h) = &host_devices {
        backend = backend.with_host_devices(h.clone());
    }
    let backend = Arc::new(backend);
    let node = match &args.node_id {
        Some(id) => {
            let activation = host_devices.ok_or(
                "the Node service needs device-mapper (/dev/mapper/control) or the loop driver \
                 (/dev/loop-control)",
            )?;
            tracing::info!(node_id = %id, backend = activation.name(), "serving the Node service");
            Some(Arc::new(
                csi_shim::node::Node::new(
                    backend.clone(),
                    csi_shim::node::NodeConfig {
                        node_id: id.clone(),
                        kubelet_dir: args.kubelet_dir.clone(),
                        max_volumes: args.max_volumes,
                        activation,
                        system: Arc::new(csi_shim::mount::Real),
                    },
                )
                .map_err(|e| format!("{}: {e}", args.kubelet_dir.display()))?
                .with_nbd_opt(nbd_serving(&args, host_id, &backend)?),
            ))
        }
        None => None,
    };
    // A restarted node plugin first fences what is live here without its lease, from the
    // metadata as it reads now (a LUN that does not answer: from the lost leases).
    for vg in backend.vgs() {
        if let Err(e) = backend.session().view(vg) {
            tracing::warn!(vg, error = %e, "cannot read the VG at start");
        }
    }
    match csi_shim::fencing::sweep(&backend, node.as_deref(), true) {
        Ok(s) if !s.fenced.is_empty() => {
            tracing::error!(fenced = ?s.fenced, failed = ?s.failed, "volumes live here without their leases were fenced at start")
        }
        Ok(s) if !s.failed.is_empty() => {
            tracing::error!(failed = ?s.failed, "volumes live here without their leases could not be fenced at start")
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(error = %e, "cannot ask the lock manager at start; the fencing sweep tries again every second")
        }
    }
    // Volumes this node shared over NBD before it restarted: served and watched again.
    if let Some(n) = &node {
        n.recover_shared();
    }
    let watch = csi_shim::fencing::watch(backend.clone(), node.clone())
        .map_err(|e| format!("starting the fencing thread: {e}"))?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .build()
        .map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let listener = csi_shim::server::listen(&args.endpoint).map_err(|e| e.to_string())?;
        tracing::info!(endpoint = %args.endpoint.display(), "serving CSI");
        let metrics = match args.metrics_address {
            Some(addr) => {
                let l = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| format!("--metrics-address {addr}: {e}"))?;
                tracing::info!(%addr, "serving metrics at /metrics");
                let endpoint = csi_shim::metrics::http::Endpoint::new(
                    backend.clone(),
                    node.is_none(),
                    node.clone(),
                );
                let serve = csi_shim::metrics::http::serve(l, endpoint, std::future::pending());
                Some(tokio::spawn(serve))
            }
            None => None,
        };
        let keeper_gone = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let gone = keeper_gone.clone();
        let shutdown = async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (mut term, mut usr1) = match (
                signal(SignalKind::terminate()),
                signal(SignalKind::user_defined1()),
            ) {
                (Ok(t), Ok(u)) => (t, u),
                (Err(e), _) | (_, Err(e)) => {
                    tracing::error!(error = %e, "no SIGTERM handler; stopping on Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
            if let Err(e) = csi_shim::keeper::handling() {
                tracing::error!(error = %e, "cannot unblock SIGTERM");
            }
            loop {
                let keeper = tokio::select! {
                    _ = tokio::signal::ctrl_c() => break,
                    _ = term.recv() => false,
                    _ = usr1.recv() => true,
                };
                // sanlock asks a lease holder to stop with SIGTERM when a lockspace fails:
                // then the volumes there are fenced and the process goes on serving. The
                // keeper gone (SIGUSR1): what a failed lockspace left is fenced, then stop.
                let w = watch.clone();
                let lost = tokio::task::spawn_blocking(move || w.sweep_now(STOP_SWEEP))
                    .await
                    .ok()
                    .flatten();
                if keeper {
                    tracing::error!(lost = ?lost, "the lease keeper is gone: stopping");
                    gone.store(true, std::sync::atomic::Ordering::SeqCst);
                    break;
                }
                match lost {
                    Some(l) if l.is_empty() => break,
                    Some(l) => tracing::error!(lost = ?l, "SIGTERM with lockspaces lost (sanlock's request): their volumes are fenced; serving on"),
                    None => tracing::error!("SIGTERM, but the lock manager cannot say whether a lockspace was lost: serving on (the next SIGTERM asks again)"),
                }
            }
            tracing::info!("shutting down: letting calls in flight finish");
        };
        let served = csi_shim::server::serve(backend, node.clone(), listener, shutdown).await;
        if let Some(m) = metrics {
            m.abort();
        }
        // Volumes stay staged across a restart of the node plugin: their leases stay held
        // by this host (as orphans) until the next process adopts or releases them.
        if let Some(n) = &node {
            n.keep_all();
        }
        served.map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&args.endpoint);
        if keeper_gone.load(std::sync::atomic::Ordering::SeqCst) {
            return Err("the lease keeper is gone".into());
        }
        Ok(())
    })
}
