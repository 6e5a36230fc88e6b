//! `csi-demo`: the CSI driver's whole job on one machine, in one command.
//!
//! ```text
//! cargo run --release -p lvmeta-tests --bin csi-demo -- [--dir /var/tmp] [--lun-size MiB]
//!                                                       [--io-timeout S] [--no-sanlock]
//! ```
//!
//! As root it makes a sparse LUN file and a loop device over it, creates a VG with lvmeta
//! (shared, with a private sanlock daemon, when sanlock is installed; otherwise a local VG
//! under lvm2's file locks, and it says which), serves the CSI services on a unix socket and
//! drives a scenario through that socket: a thin volume, its snapshot and a restore; a linear
//! filesystem volume (xfs, or ext4 without xfsprogs) staged, published, written, grown online, unstaged, staged again and read
//! back; stock `lvs` (when installed) judging the volumes; everything deleted. Each step is
//! printed with its time as it ends, then a table of all. Everything made is removed at the
//! end, also after Ctrl-C or SIGTERM (the step running finishes first).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lvmeta::activate::loopdev::{self, LoopBackend};

use csi_shim::driver::Driver;
use csi_shim::node::Node;
use lvmeta_tests::lab::stop_daemon;

mod scenario;
use scenario::scenario;

const MIB: u64 = 1 << 20;
/// The demo's VG.
const VG: &str = "demo";
/// The sanlock host id the demo joins the lockspace with.
const HOST_ID: u64 = 1;
/// What the pod writes and reads back.
const PAYLOAD: &[u8] = b"written through a CSI volume carved from one shared LUN\n";

/// What the demo is told.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    version,
    about = "As root: a LUN file on a loop device, a VG, the CSI server, and a scenario driven \
             through its socket with a table of timings; everything is removed at the end."
)]
struct Options {
    /// Where the scratch directory is made.
    #[arg(long = "dir", default_value = "/var/tmp")]
    parent: PathBuf,
    /// The LUN's size in MiB.
    #[arg(long = "lun-size", default_value_t = 2048)]
    lun_mib: u64,
    /// sanlock io_timeout in seconds written into the lockspace (a join takes about 2.5x).
    #[arg(long, default_value_t = 2)]
    io_timeout: u32,
    /// A local VG under lvm2's file locks even when sanlock is installed.
    #[arg(long)]
    no_sanlock: bool,
}

fn main() -> std::process::ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let o = <Options as clap::Parser>::parse();
    match run(&o) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csi-demo: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs the demo; `Err` says which step failed and why (everything is cleaned up either way).
fn run(o: &Options) -> Result<(), String> {
    preflight()?;
    let dir = o.parent.join(format!("lvmeta-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let sanlock = !o.no_sanlock && on_path("sanlock");
    if sanlock {
        // Before any thread exists: libsanlock reads this to find the private daemon.
        std::env::set_var("SANLOCK_RUN_DIR", dir.join("sanlock"));
    }
    let rt = tokio::runtime::Runtime::new().map_err(|e| format!("tokio runtime: {e}"))?;
    rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        tokio::spawn(watch_signals(stop.clone()));
        let mut steps = Steps {
            rows: Vec::new(),
            stop,
        };
        let mut lab = Lab {
            dir,
            lun: None,
            sanlock: None,
            backend: None,
            node: None,
            server: None,
            activation: lvmeta::activate::best().unwrap_or_else(|| Arc::new(LoopBackend)),
        };
        println!("lvmeta CSI demo in {}", lab.dir.display());
        let result = scenario(&mut lab, &mut steps, o, sanlock).await;
        if let Err(e) = &result {
            println!("stopped: {e}");
        }
        lab.stop_server().await;
        let cleaned = steps
            .step(
                "clean up (VG, lockspace, sanlock, loop devices, files)",
                async { blocking(move || lab.clean()).await },
            )
            .await;
        steps.table();
        result.and(cleaned)
    })
}

/// Root, the loop driver and mkfs.ext4 are needed; say what is missing.
fn preflight() -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("the demo must run as root (it makes loop devices and mounts)".into());
    }
    if LoopBackend::probe().is_none() {
        return Err("the demo needs the loop driver (/dev/loop-control; modprobe loop)".into());
    }
    if !on_path("mkfs.xfs") && !on_path("mkfs.ext4") {
        return Err(
            "the demo needs mkfs.xfs or mkfs.ext4 (apt-get install xfsprogs e2fsprogs)".into(),
        );
    }
    Ok(())
}

/// Whether `tool` is an executable on PATH.
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(tool))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Sets `stop` on Ctrl-C or SIGTERM.
async fn watch_signals(stop: Arc<AtomicBool>) {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        return;
    };
    loop {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        if !stop.swap(true, Ordering::SeqCst) {
            println!("interrupted: finishing the step running, then cleaning up");
        }
    }
}

/// Runs blocking work off the runtime's threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, String> + Send + 'static,
) -> Result<T, String> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| format!("worker thread: {e}"))?
}

/// One line of the table.
struct Row {
    what: String,
    took: Duration,
    outcome: String,
}

/// The steps done so far and whether to stop.
struct Steps {
    rows: Vec<Row>,
    stop: Arc<AtomicBool>,
}

impl Steps {
    /// Runs `f` as the step `what` unless interrupted; prints and records how it went.
    async fn step<T>(
        &mut self,
        what: &str,
        f: impl Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        self.step_with(what, f, |_| "ok".to_owned()).await
    }

    /// As [`Steps::step`], with the outcome said by `say`.
    async fn step_with<T>(
        &mut self,
        what: &str,
        f: impl Future<Output = Result<T, String>>,
        say: impl FnOnce(&T) -> String,
    ) -> Result<T, String> {
        // Cleaning up runs even when interrupted.
        if self.stop.load(Ordering::SeqCst) && !what.starts_with("clean up") {
            return Err("interrupted".into());
        }
        let t = Instant::now();
        let r = f.await;
        let took = t.elapsed();
        let outcome = match &r {
            Ok(v) => say(v),
            Err(e) => format!("FAILED: {e}"),
        };
        println!("{:>10}  {what}: {outcome}", ms(took));
        self.rows.push(Row {
            what: what.to_owned(),
            took,
            outcome,
        });
        r
    }

    /// Prints every step with its time.
    fn table(&self) {
        let w = self.rows.iter().map(|r| r.what.len()).max().unwrap_or(4);
        println!("\n{:<w$}  {:>10}  outcome", "step", "time");
        println!("{}", "-".repeat(w + 22));
        for r in &self.rows {
            let outcome = r.outcome.lines().next().unwrap_or("");
            println!("{:<w$}  {:>10}  {outcome}", r.what, ms(r.took));
        }
        let total: Duration = self.rows.iter().map(|r| r.took).sum();
        println!("{}", "-".repeat(w + 22));
        println!("{:<w$}  {:>10}", "total", ms(total));
    }
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The running CSI server: how to stop it and its task.
type Server = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), csi_shim::server::ServeError>>,
);

/// Everything the demo made, removed by [`Lab::clean`].
struct Lab {
    dir: PathBuf,
    /// The LUN's loop device.
    lun: Option<PathBuf>,
    sanlock: Option<Child>,
    backend: Option<Arc<Driver>>,
    node: Option<Arc<Node>>,
    server: Option<Server>,
    /// How the node makes LVs devices: device-mapper where the kernel has it, else loop.
    activation: Arc<dyn lvmeta::activate::Backend>,
}

impl Lab {
    fn kubelet(&self) -> PathBuf {
        self.dir.join("kubelet")
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("csi.sock")
    }

    /// Stops the CSI server; calls in flight finish first.
    async fn stop_server(&mut self) {
        if let Some((tx, task)) = self.server.take() {
            let _ = tx.send(());
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => println!("CSI server: {e}"),
                Err(e) => println!("CSI server task: {e}"),
            }
        }
    }

    /// Unmounts, deactivates, removes the VG, stops sanlock, detaches the LUN and removes
    /// the directory; goes on past failures and reports them all.
    fn clean(mut self) -> Result<(), String> {
        let mut failed = Vec::new();
        for m in mounts_under(&self.kubelet()) {
            // The demo's own directory: nobody else makes paths there.
            if let Err(e) = nix::mount::umount2(&m, nix::mount::MntFlags::empty()) {
                failed.push(format!("umount {}: {e}", m.display()));
            }
        }
        if let Some(node) = self.node.take() {
            node.release_all();
        }
        if let Some(b) = self.backend.take() {
            let s = b.session();
            if let Ok(vg) = s.vg(VG) {
                for lv in vg.lvs.iter().map(|l| l.name.as_str()) {
                    match s.deactivate(VG, lv, self.activation.as_ref()) {
                        // Gone meanwhile (the wiper removed a deleted volume's extents).
                        Ok(())
                        | Err(lvmeta::Error::Activate(lvmeta::activate::ActivateError::NoLv {
                            ..
                        })) => {}
                        Err(e) => failed.push(format!("deactivate {VG}/{lv}: {e}")),
                    }
                }
                if let Err(e) = s.vgremove(VG, true) {
                    failed.push(format!("vgremove {VG}: {e}"));
                    let _ = s.lockstop(VG);
                }
            }
        }
        if let Some(mut d) = self.sanlock.take() {
            stop_daemon(&mut d);
        }
        if let Some(lun) = self.lun.take() {
            if let Err(e) = loopdev::detach(&lun) {
                failed.push(format!("detach {}: {e}", lun.display()));
            }
        }
        if failed.is_empty() {
            if let Err(e) = std::fs::remove_dir_all(&self.dir) {
                failed.push(format!("remove {}: {e}", self.dir.display()));
            }
        } else {
            failed.push(format!("{} kept for a look", self.dir.display()));
        }
        if failed.is_empty() {
            Ok(())
        } else {
            Err(failed.join("; "))
        }
    }
}

/// Mount points under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = csi_shim::mount::mounts(&info)
        .map(|m| PathBuf::from(m.point))
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    found
}
