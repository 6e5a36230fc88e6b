//! Privileged: the driver attacked as a hostile tenant and a careless admin would, through its
//! gRPC socket, on a loop-device LUN with real mounts (a local VG; device-mapper is not
//! needed). Each test is an attack that once worked:
//! - a new volume on a deleted volume's extents showed its data (filesystem, block, thin
//!   pool data), or could not be staged over a stale filesystem;
//! - a volume staged on this node was deleted;
//! - staging and target paths followed symlinks out of the kubelet directory;
//! - NodeUnpublish removed files no publish made;
//! - a call naming one volume unmounted another; the stage cache trusted a vanished mount;
//! - node calls touched LVs the driver did not make.
//!
//! Stock lvm2 judges the VG at the end of each (`vgck` clean, reports equal to lvmeta's).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::node_client::NodeClient;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::*;
use csi_shim::driver::Driver;
use csi_shim::node::{Node, NodeConfig};
use csi_shim::testing::cap;
use csi_shim::volume::Volumes;
use lvmeta::activate::Piece;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::session::Session;
use lvmeta_tests::sandbox::Sandbox;
use lvmeta_tests::{privileged, UnbindOver};
use tonic::transport::Channel;
use tonic::Code;

const MIB: u64 = 1 << 20;
const TOOLS: &[&str] = &["losetup", "vgck", "lvs", "mkfs.ext4", "mkfs.xfs", "blkid"];

/// Unmounts everything below the kubelet directory when dropped (also when a test fails).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<String> = csi_shim::mount::mounts(&info)
            .map(|m| m.point)
            .filter(|p| Path::new(p).starts_with(&self.0))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in points {
            let _ = nix::mount::umount2(p.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

/// csi-shim (Controller and Node, loop activation, real mounts) in this process, serving a
/// local VG `vg` on a 1 GiB (sparse) loop-device LUN.
struct Harness {
    controller: ControllerClient<Channel>,
    node: NodeClient<Channel>,
    backend: Arc<Driver>,
    kubelet: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<()>>,
    _unmount: Unmount,
    _unbind: UnbindOver,
    sb: Sandbox,
}

async fn driver(wiper: bool) -> Harness {
    let sb = Sandbox::new(&[1024 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &sb.loops[0]]);
    let dev = FileDevice::open_rw(Path::new(&sb.loops[0])).expect("open loop");
    let session =
        Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_lock_dir(sb.lock_dir());
    // The backend the driver picks on this host: device-mapper where the kernel has it (the
    // VM stage), loop devices elsewhere.
    let host: Arc<dyn lvmeta::activate::Backend> =
        lvmeta::activate::best().expect("an activation backend");
    let backend = Arc::new(
        Driver::new(session, vec!["vg".into()])
            .with_host_devices(host.clone())
            .with_wiper(wiper),
    );
    let kubelet = sb.path("kubelet");
    let node = Arc::new(
        Node::new(
            backend.clone(),
            NodeConfig {
                node_id: "node-1".into(),
                kubelet_dir: kubelet.clone(),
                max_volumes: 0,
                activation: host,
                system: Arc::new(csi_shim::mount::Real),
            },
        )
        .expect("node"),
    );
    let socket = sb.path("csi.sock");
    let listener = csi_shim::server::listen(&socket).expect("listen");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let served = backend.clone();
    let server = tokio::spawn(async move {
        csi_shim::server::serve(served, Some(node), listener, async {
            let _ = rx.await;
        })
        .await
        .expect("serve");
    });
    let channel = csi_shim::client::connect(&socket).await.expect("connect");
    Harness {
        controller: ControllerClient::new(channel.clone()),
        node: NodeClient::new(channel),
        backend,
        _unmount: Unmount(kubelet.clone()),
        _unbind: UnbindOver(sb.loops[0].clone()),
        kubelet,
        stop: Some(tx),
        server: Some(server),
        sb,
    }
}

impl Harness {
    /// Stops the server, then has stock lvm2 judge the VG.
    async fn finish(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(s) = self.server.take() {
            s.await.expect("server");
        }
        self.sb.vgck_clean("vg", None);
        self.sb.reports_match("at the end", None);
    }

    /// A path below the kubelet directory, its parent made as the kubelet makes it.
    fn path(&self, rel: &str) -> PathBuf {
        let p = self.kubelet.join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("parent dir");
        p
    }

    fn vols(&self) -> Volumes<'_> {
        Volumes::new(self.backend.session(), "vg")
    }

    /// Where volume `name`'s bytes are on the LUN.
    fn extents(&self, name: &str) -> Vec<Piece> {
        let vg = self.backend.session().vg("vg").expect("vg");
        let p =
            lvmeta::activate::place(&vg, name, &[Some(self.sb.loops[0].clone())]).expect("place");
        p.pieces().into_iter().cloned().collect()
    }

    /// Waits until the wiper has erased every deleted volume's extents.
    async fn wiped(&self) {
        let t = Instant::now();
        while !self.vols().wipes().expect("wipes").is_empty() {
            assert!(t.elapsed() < Duration::from_secs(30), "the wiper is stuck");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn create(&mut self, name: &str, mode: &str, mib: u64) -> String {
        let req = CreateVolumeRequest {
            name: name.into(),
            capacity_range: Some(CapacityRange {
                required_bytes: (mib * MIB) as i64,
                limit_bytes: 0,
            }),
            volume_capabilities: vec![cap(Access::SingleNodeWriter, Some("ext4"))],
            parameters: HashMap::from([
                ("vg".to_owned(), "vg".to_owned()),
                ("mode".to_owned(), mode.to_owned()),
            ]),
            ..Default::default()
        };
        self.controller
            .create_volume(req)
            .await
            .expect("create")
            .into_inner()
            .volume
            .expect("volume")
            .volume_id
    }

    async fn delete(&mut self, id: &str) -> Result<(), tonic::Status> {
        self.controller
            .delete_volume(DeleteVolumeRequest {
                volume_id: id.into(),
                ..Default::default()
            })
            .await
            .map(drop)
    }

    async fn stage(
        &mut self,
        id: &str,
        staging: &Path,
        fs: Option<&str>,
    ) -> Result<(), tonic::Status> {
        self.node
            .node_stage_volume(csi_shim::testing::stage_request(
                id,
                &staging.display().to_string(),
                cap(Access::SingleNodeWriter, fs),
            ))
            .await
            .map(drop)
    }

    async fn unstage(&mut self, id: &str, staging: &Path) -> Result<(), tonic::Status> {
        self.node
            .node_unstage_volume(NodeUnstageVolumeRequest {
                volume_id: id.into(),
                staging_target_path: staging.display().to_string(),
            })
            .await
            .map(drop)
    }

    async fn publish(
        &mut self,
        id: &str,
        staging: &Path,
        target: &Path,
        fs: Option<&str>,
    ) -> Result<(), tonic::Status> {
        self.node
            .node_publish_volume(csi_shim::testing::publish_request(
                id,
                &staging.display().to_string(),
                &target.display().to_string(),
                cap(Access::SingleNodeWriter, fs),
            ))
            .await
            .map(drop)
    }

    async fn unpublish(&mut self, id: &str, target: &Path) -> Result<(), tonic::Status> {
        self.node
            .node_unpublish_volume(NodeUnpublishVolumeRequest {
                volume_id: id.into(),
                target_path: target.display().to_string(),
            })
            .await
            .map(drop)
    }

    /// Stages and publishes `id` (`fs`: a filesystem; `None`: block) at `<pod>/t`.
    async fn use_volume(&mut self, id: &str, pod: &str, fs: Option<&str>) -> (PathBuf, PathBuf) {
        let staging = self.path(&format!("staging/{pod}"));
        let target = self.path(&format!("pods/{pod}/t"));
        self.stage(id, &staging, fs).await.expect("stage");
        self.publish(id, &staging, &target, fs)
            .await
            .expect("publish");
        (staging, target)
    }

    async fn release(&mut self, id: &str, staging: &Path, target: &Path) {
        self.unpublish(id, target).await.expect("unpublish");
        self.unstage(id, staging).await.expect("unstage");
    }
}

fn code<T>(r: Result<T, tonic::Status>) -> Code {
    match r {
        Ok(_) => Code::Ok,
        Err(s) => s.code(),
    }
}

fn overlaps(a: &[Piece], b: &[Piece]) -> bool {
    a.iter().any(|x| b.iter().any(|y| x.overlaps(y)))
}

/// The mount points of the machine.
fn mount_points() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    csi_shim::mount::mounts(&info).map(|m| m.point).collect()
}

fn is_mount(p: &Path) -> bool {
    mount_points().iter().any(|m| Path::new(m) == p)
}

/// Every byte of a block volume published at `target`.
fn read_all(target: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    std::fs::File::open(target)
        .and_then(|mut f| f.read_to_end(&mut out))
        .expect("read the block volume");
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The bytes of the LUN under `runs`.
fn read_runs(d: &Harness, runs: &[Piece]) -> Vec<u8> {
    let lun = FileDevice::open(Path::new(&d.sb.loops[0])).expect("lun");
    let mut out = Vec::new();
    for r in runs {
        let mut b = vec![0u8; r.len.0 as usize];
        lun.read_at(r.offset.0, &mut b).expect("read");
        out.extend(b);
    }
    out
}

const SECRET: &[u8] = b"tenant A's secret: 4242-4242-4242";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_a_deleted_filesystem_never_shows_in_the_next_volume() {
    if !privileged(
        "loop_a_deleted_filesystem_never_shows_in_the_next_volume",
        TOOLS,
    ) {
        return;
    }
    let mut d = driver(true).await;
    // Tenant A: an ext4 volume with a file, then deleted.
    let a = d.create("pvc-a", "linear", 32).await;
    let (st, t) = d.use_volume(&a, "a", Some("ext4")).await;
    std::fs::File::create(t.join("secret.txt"))
        .and_then(|mut f| f.write_all(SECRET).and_then(|()| f.sync_all()))
        .expect("write");
    d.release(&a, &st, &t).await;
    let old = d.extents("pvc-a");
    d.delete(&a).await.expect("delete");
    d.wiped().await;
    assert!(
        read_runs(&d, &old).iter().all(|&x| x == 0),
        "the deleted volume's extents were not erased"
    );
    // Tenant B: a block volume of the same size gets the same extents and reads zeroes.
    let b = d.create("pvc-b", "linear", 32).await;
    assert!(overlaps(&old, &d.extents("pvc-b")), "not the same extents");
    let (sb_, tb) = d.use_volume(&b, "b", None).await;
    let bytes = read_all(&tb);
    assert_eq!(bytes.len() as u64, 32 * MIB);
    assert!(bytes.iter().all(|&x| x == 0), "B reads A's bytes");
    d.release(&b, &sb_, &tb).await;
    d.delete(&b).await.expect("delete b");
    d.wiped().await;
    // A new xfs volume there (xfs needs 300 MB): blank, so made, not "holds ext4".
    let c = d.create("pvc-c", "linear", 320).await;
    assert!(overlaps(&old, &d.extents("pvc-c")));
    let (sc, tc) = d.use_volume(&c, "c", Some("xfs")).await;
    assert!(!tc.join("secret.txt").exists());
    d.release(&c, &sc, &tc).await;
    d.delete(&c).await.expect("delete c");
    d.wiped().await;
    // A smaller volume over the bigger old filesystem stages (made, not mounted stale).
    let e = d.create("pvc-e", "linear", 16).await;
    assert!(overlaps(&old, &d.extents("pvc-e")));
    let (se, te) = d.use_volume(&e, "e", Some("ext4")).await;
    assert!(!te.join("secret.txt").exists());
    d.release(&e, &se, &te).await;
    d.delete(&e).await.expect("delete e");
    d.wiped().await;
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_deleted_block_and_thin_pool_data_is_erased_before_reuse() {
    if !privileged(
        "loop_deleted_block_and_thin_pool_data_is_erased_before_reuse",
        TOOLS,
    ) {
        return;
    }
    // No wiper thread here: the extents must stay out of reach until a wiper runs.
    let mut d = driver(false).await;
    let a = d.create("pvc-a", "linear", 16).await;
    let (sa, ta) = d.use_volume(&a, "a", None).await;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&ta)
        .and_then(|mut f| {
            for _ in 0..(16 * MIB as usize / SECRET.len()) {
                f.write_all(SECRET)?;
            }
            f.sync_all()
        })
        .expect("fill the block volume");
    d.release(&a, &sa, &ta).await;
    // A thin volume's pool data, written as a node would (no dm-thin here: on the LUN).
    let t = d.create("pvc-t", "thin", 16).await;
    let thin_extents = d.extents("pvc-t");
    let lun = FileDevice::open_rw(Path::new(&d.sb.loops[0])).expect("lun");
    for p in &thin_extents {
        lun.write_at(
            p.offset.0,
            &SECRET.repeat((p.len.0 as usize) / SECRET.len()),
        )
        .expect("pool data");
    }
    let old: Vec<Piece> = d.extents("pvc-a").into_iter().chain(thin_extents).collect();
    d.delete(&a).await.expect("delete a");
    d.delete(&t).await.expect("delete t (its pool goes too)");
    assert_eq!(d.vols().wipes().expect("wipes").len(), 2);
    // Deleted at once (not listed; a repeat is fine), but nothing allocates those extents.
    let listed = d
        .controller
        .list_volumes(ListVolumesRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert!(listed.entries.is_empty(), "{listed:?}");
    d.delete(&a).await.expect("delete again");
    let b = d.create("pvc-b", "linear", 32).await;
    assert!(
        !overlaps(&old, &d.extents("pvc-b")),
        "allocated before being erased"
    );
    d.delete(&b).await.expect("delete b");
    // The wiper (as after a restart) erases and frees them; the next volume reads zeroes.
    let (done, failed) = csi_shim::wiper::pass(&d.backend, &|| false);
    assert_eq!((done, failed), (3, 0));
    let erased = read_runs(&d, &old);
    assert!(!contains(&erased, SECRET) && erased.iter().all(|&x| x == 0));
    let c = d.create("pvc-c", "linear", 64).await;
    assert!(overlaps(&old, &d.extents("pvc-c")));
    let (sc, tc) = d.use_volume(&c, "c", None).await;
    assert!(read_all(&tc).iter().all(|&x| x == 0));
    d.release(&c, &sc, &tc).await;
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_a_volume_in_use_here_is_never_deleted() {
    if !privileged("loop_a_volume_in_use_here_is_never_deleted", TOOLS) {
        return;
    }
    let mut d = driver(true).await;
    let a = d.create("pvc-a", "linear", 16).await;
    let b = d.create("pvc-b", "linear", 16).await;
    let (sa, ta) = d.use_volume(&a, "a", Some("ext4")).await;
    let sb_ = d.path("staging/b");
    d.stage(&b, &sb_, None).await.expect("stage block");
    let seqno = d.backend.session().vg("vg").expect("vg").seqno;
    for id in [&a, &b] {
        let e = d.delete(id).await.expect_err("in use");
        assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
        assert!(e.message().contains("in use on this host"), "{e:?}");
    }
    let vg = d.backend.session().vg("vg").expect("vg");
    assert_eq!(vg.seqno, seqno, "something was written");
    assert!(d.vols().get("pvc-a").expect("get").is_some());
    std::fs::write(ta.join("still-here"), b"x").expect("A still works");
    d.release(&a, &sa, &ta).await;
    d.unstage(&b, &sb_).await.expect("unstage b");
    d.delete(&a).await.expect("delete a");
    d.delete(&b).await.expect("delete b");
    d.wiped().await;
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_paths_are_resolved_never_followed() {
    if !privileged("loop_paths_are_resolved_never_followed", TOOLS) {
        return;
    }
    let mut d = driver(true).await;
    let a = d.create("pvc-a", "linear", 16).await;
    let outside = d.sb.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::os::unix::fs::symlink("/etc", d.path("link")).expect("link");
    std::os::unix::fs::symlink(&outside, d.path("outlink")).expect("outlink");
    std::os::unix::fs::symlink(&outside, d.path("staging/last")).expect("last");
    let before = mount_points();
    let fs = Some("ext4");
    // Staging: through a symlink, at a symlink, or the kubelet directory itself.
    for bad in [
        d.path("outlink/st"),
        d.path("staging/last"),
        d.kubelet.clone(),
    ] {
        let r = d.stage(&a, &bad, fs).await;
        assert_eq!(code(r), Code::InvalidArgument, "staging {}", bad.display());
    }
    assert!(!outside.join("st").exists());
    let (st, t) = d.use_volume(&a, "a", fs).await;
    // Targets: a symlink to /etc, a directory made through a symlink, a symlinked parent.
    for bad in [d.path("link"), d.path("outlink/newdir"), d.path("link/x")] {
        let r = d.publish(&a, &st, &bad, fs).await;
        assert_eq!(code(r), Code::InvalidArgument, "target {}", bad.display());
    }
    assert!(!outside.join("newdir").exists(), "a directory made outside");
    let new: Vec<String> = mount_points()
        .into_iter()
        .filter(|m| !before.contains(m))
        .collect();
    let ours: Vec<&String> = new
        .iter()
        .filter(|m| Path::new(m).starts_with(&d.kubelet))
        .collect();
    assert_eq!(ours.len(), 2, "only staging and target: {ours:?}");
    assert!(!new.iter().any(|m| m == "/etc"), "a mount over /etc");
    assert!(!new.iter().any(|m| Path::new(m).starts_with(&outside)));
    d.release(&a, &st, &t).await;
    d.delete(&a).await.expect("delete");
    d.wiped().await;
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_unpublish_removes_only_what_a_publish_made() {
    if !privileged("loop_unpublish_removes_only_what_a_publish_made", TOOLS) {
        return;
    }
    let mut d = driver(true).await;
    let a = d.create("pvc-a", "linear", 16).await;
    let b = d.create("pvc-b", "linear", 16).await;
    let outside = d.sb.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    let victim = outside.join("victim.txt");
    std::fs::write(&victim, b"mine").expect("victim");
    std::os::unix::fs::symlink(&outside, d.path("outlink")).expect("outlink");
    let plain = d.path("pods/p/plain.txt");
    std::fs::write(&plain, b"kubelet's").expect("plain");
    let (sb_, tb) = d.use_volume(&b, "b", Some("ext4")).await;
    let (sa, ta) = d.use_volume(&a, "a", Some("ext4")).await;
    // A file outside, through a symlink: refused, left.
    let r = d.unpublish(&a, &d.kubelet.join("outlink/victim.txt")).await;
    assert_eq!(code(r), Code::InvalidArgument);
    assert!(victim.exists());
    // A file no publish made, and another volume's target: left alone (nothing of A there).
    d.unpublish(&a, &plain).await.expect("nothing of A there");
    assert!(plain.exists());
    d.unpublish(&a, &tb).await.expect("nothing of A there");
    assert!(is_mount(&tb), "B's target unmounted by a call for A");
    // A's own target goes after its unmount.
    d.unpublish(&a, &ta).await.expect("unpublish");
    assert!(!ta.exists() && !is_mount(&ta));
    d.unstage(&a, &sa).await.expect("unstage a");
    d.release(&b, &sb_, &tb).await;
    for id in [&a, &b] {
        d.delete(id).await.expect("delete");
    }
    d.wiped().await;
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_a_call_for_one_volume_never_acts_on_another() {
    if !privileged("loop_a_call_for_one_volume_never_acts_on_another", TOOLS) {
        return;
    }
    let mut d = driver(true).await;
    let a = d.create("pvc-a", "linear", 16).await;
    let b = d.create("pvc-b", "linear", 16).await;
    let (sa, ta) = d.use_volume(&a, "a", Some("ext4")).await;
    d.unpublish(&b, &ta).await.expect("B is not there");
    d.unstage(&b, &sa).await.expect("B is not staged there");
    assert!(is_mount(&ta) && is_mount(&sa), "A unmounted by calls for B");
    // The same with B active here (staged as a block volume elsewhere).
    let sb_ = d.path("staging/b");
    d.stage(&b, &sb_, None).await.expect("stage b");
    d.unpublish(&b, &ta).await.expect("B is not there");
    d.unstage(&b, &sa).await.expect("B is not staged there");
    assert!(is_mount(&ta) && is_mount(&sa), "A unmounted by calls for B");
    d.unstage(&b, &sb_).await.expect("unstage b");
    let r = d.unstage("vg/pvc-nothing", &sa).await;
    assert_eq!(code(r), Code::NotFound);
    assert!(is_mount(&sa));
    // Mounts gone behind the driver's back: staging again mounts again (the cache is
    // checked against the real mounts).
    for p in [&ta, &sa] {
        nix::mount::umount2(p.as_path(), nix::mount::MntFlags::empty()).expect("umount");
    }
    d.stage(&a, &sa, Some("ext4")).await.expect("stage again");
    assert!(is_mount(&sa), "NodeStage answered OK with nothing mounted");
    d.publish(&a, &sa, &ta, Some("ext4"))
        .await
        .expect("publish again");
    assert!(is_mount(&ta));
    d.release(&a, &sa, &ta).await;
    for id in [&a, &b] {
        d.delete(id).await.expect("delete");
    }
    d.wiped().await;
    d.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loop_lvs_the_driver_did_not_make_are_never_touched() {
    if !privileged("loop_lvs_the_driver_did_not_make_are_never_touched", TOOLS) {
        return;
    }
    let mut d = driver(false).await;
    d.sb.lvmeta_ok("lvcreate", &["-an", "-n", "foreign", "-L", "8m", "vg"]);
    d.sb.lvmeta_ok("lvchange", &["-ay", "vg/foreign"]);
    // A wipe LV (a deleted volume's extents) is not the driver's volume either.
    let w = d.create("pvc-w", "linear", 8).await;
    d.delete(&w).await.expect("delete");
    let wipe = d.vols().wipes().expect("wipes").pop().expect("a wipe LV");
    let host = lvmeta::activate::best().expect("an activation backend");
    let active = |d: &Harness| {
        d.backend
            .session()
            .active_device("vg", "foreign", host.as_ref())
            .expect("active?")
    };
    let dev = active(&d).expect("foreign is active");
    let st = d.path("staging/f");
    let t = d.path("pods/f/t");
    for id in ["vg/foreign".to_owned(), format!("vg/{wipe}")] {
        assert_eq!(code(d.unstage(&id, &st).await), Code::NotFound, "{id}");
        assert_eq!(code(d.stage(&id, &st, None).await), Code::NotFound, "{id}");
        assert_eq!(
            code(d.publish(&id, &st, &t, None).await),
            Code::NotFound,
            "{id}"
        );
        assert_eq!(code(d.unpublish(&id, &t).await), Code::NotFound, "{id}");
        let stats = d
            .node
            .node_get_volume_stats(NodeGetVolumeStatsRequest {
                volume_id: id.clone(),
                volume_path: t.display().to_string(),
                ..Default::default()
            })
            .await;
        assert_eq!(code(stats), Code::NotFound, "{id}");
        // DeleteVolume of an id that is no volume of the driver: nothing to delete.
        d.delete(&id).await.expect("no such volume");
    }
    assert_eq!(active(&d), Some(dev), "foreign deactivated");
    assert!(d
        .backend
        .session()
        .vg("vg")
        .expect("vg")
        .lv("foreign")
        .is_some());
    d.sb.lvmeta_ok("lvchange", &["-an", "vg/foreign"]);
    let (done, _) = csi_shim::wiper::pass(&d.backend, &|| false);
    assert_eq!(done, 1);
    d.finish().await;
}
