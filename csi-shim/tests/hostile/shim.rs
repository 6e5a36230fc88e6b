//! The driver under attack: the real `csi-shim` binary on a file-backed VG and what /proc
//! says of it, a Probe caller timing every answer, and an in-process server with short
//! limits.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::ProbeRequest;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::VgSpec;
use lvmeta::layout::PvOptions;
use lvmeta::session::Session;

/// A csi-shim process serving VG `vg` of an image file, killed when dropped.
pub struct Shim {
    pub child: Child,
    pub socket: PathBuf,
    pub metrics: std::net::SocketAddr,
    pub log: PathBuf,
    /// Holds the image, the socket and the log until the process is gone.
    _dir: tempfile::TempDir,
}

impl Shim {
    /// Makes a 64 MiB image holding VG `vg` and starts csi-shim (controller only) on it,
    /// with metrics on the loopback; returns once its socket is there.
    pub fn start() -> Shim {
        let dir = tempfile::tempdir().expect("temp dir");
        let image = dir.path().join("lun.img");
        let lock = dir.path().join("lock");
        std::fs::create_dir_all(&lock).expect("lock dir");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(64 << 20))
            .expect("image");
        {
            let dev = FileDevice::open_rw(&image).expect("open image");
            let name = image.display().to_string();
            let session = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>])
                .with_lock_dir(lock.clone());
            session
                .pvcreate(&name, &PvOptions::default(), false)
                .expect("pvcreate");
            let spec = VgSpec {
                name: "vg".into(),
                extent_size: 8192,
                tags: vec![],
                shared: None,
            };
            session.vgcreate(&spec, &[&name]).expect("vgcreate");
        }
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port");
        let socket = dir.path().join("csi.sock");
        let log = dir.path().join("csi-shim.log");
        let child = Command::new(env!("CARGO_BIN_EXE_csi-shim"))
            .arg("--endpoint")
            .arg(&socket)
            .arg("--devices")
            .arg(&image)
            .args(["--vg", "vg", "--wipe", "none", "--locking-dir"])
            .arg(&lock)
            .arg("--metrics-address")
            .arg(metrics.to_string())
            // No lvmlocal.conf: no host id, a local VG.
            .env("LVM_SYSTEM_DIR", dir.path())
            .env("RUST_LOG", "info")
            .env_remove("LVMETA_HOST_ID")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("start csi-shim");
        let shim = Shim {
            child,
            socket,
            metrics,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !shim.socket.exists() {
            assert!(Instant::now() < deadline, "no socket: {}", shim.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
        shim
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process still runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// What it logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// How many descriptors it has open.
    pub fn open_fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

impl Drop for Shim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The resident memory of `pid` in bytes (VmRSS), 0 when it cannot be read.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Samples the resident memory of `pid` every 20 ms until stopped; the peak seen.
pub struct RssPeak {
    pub peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssPeak {
    pub fn start(pid: u32) -> RssPeak {
        let peak = Arc::new(AtomicU64::new(rss(pid)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (peak.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                p.fetch_max(rss(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        RssPeak {
            peak,
            stop,
            thread: Some(thread),
        }
    }

    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }
}

impl Drop for RssPeak {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `tool` runs here.
pub fn has(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The soft descriptor limit of `pid` (from /proc/PID/limits).
pub fn nofile(pid: u32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/limits"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("Max open files in /proc/PID/limits")
}

/// Sets the soft descriptor limit of `pid` with util-linux's prlimit (the hard limit stays:
/// raising it again would take CAP_SYS_RESOURCE).
pub fn set_nofile(pid: u32, n: usize) {
    let out = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--nofile={n}:")])
        .output()
        .expect("run prlimit");
    assert!(
        out.status.success(),
        "prlimit: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether `path` is a socket.
pub fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
}

/// Calls Probe every 50 ms on its own connection until stopped: the slowest answer and
/// how many calls failed (or got no answer within 10 s).
pub struct Prober {
    worst_ms: Arc<AtomicU64>,
    failed: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    pub async fn start(socket: &std::path::Path) -> Prober {
        let channel = csi_shim::client::connect(socket).await.expect("connect");
        let (worst_ms, failed, calls, stop) = (
            Arc::new(AtomicU64::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (w, f, c, s) = (
            worst_ms.clone(),
            failed.clone(),
            calls.clone(),
            stop.clone(),
        );
        let task = tokio::spawn(async move {
            let client = IdentityClient::new(channel);
            while !s.load(Ordering::Relaxed) {
                let started = Instant::now();
                let answer = tokio::time::timeout(
                    Duration::from_secs(10),
                    client.clone().probe(ProbeRequest {}),
                )
                .await;
                w.fetch_max(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                c.fetch_add(1, Ordering::Relaxed);
                if !matches!(answer, Ok(Ok(_))) {
                    f.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Prober {
            worst_ms,
            failed,
            calls,
            stop,
            task,
        }
    }

    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::Relaxed)
    }

    pub async fn stop(self) -> (Duration, usize, usize) {
        self.stop.store(true, Ordering::Relaxed);
        let (worst, failed, calls) = (
            self.worst_ms.clone(),
            self.failed.clone(),
            self.calls.clone(),
        );
        self.task.await.expect("prober");
        (
            Duration::from_millis(worst.load(Ordering::Relaxed)),
            failed.load(Ordering::Relaxed),
            calls.load(Ordering::Relaxed),
        )
    }
}

/// Serves a controller over a 16 MiB in-memory VG within `limits`, in this process: its
/// socket, what keeps it (the server stops when the sender is sent to or dropped), and the
/// server's task.
pub async fn in_process(
    limits: csi_shim::connections::Limits,
) -> (
    std::path::PathBuf,
    tempfile::TempDir,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), csi_shim::server::ServeError>>,
) {
    use lvmeta::dev::{BlockDevice, MemDevice};
    let lun = Arc::new(MemDevice::new("lun", 16 << 20, 512));
    let session = lvmeta::session::Session::new(vec![Box::new(lun) as Box<dyn BlockDevice>]);
    session
        .pvcreate("lun", &lvmeta::layout::PvOptions::default(), false)
        .expect("pvcreate");
    let spec = lvmeta::edit::VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: None,
    };
    session.vgcreate(&spec, &["lun"]).expect("vgcreate");
    let backend = Arc::new(csi_shim::driver::Driver::new(session, vec!["vg".into()]));
    let dir = tempfile::tempdir().expect("temp dir");
    let socket = dir.path().join("csi.sock");
    let listener = csi_shim::server::listen(&socket).expect("listen");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(csi_shim::server::serve_within(
        backend,
        None,
        listener,
        limits,
        async {
            let _ = stopped.await;
        },
    ));
    (socket, dir, stop, task)
}
