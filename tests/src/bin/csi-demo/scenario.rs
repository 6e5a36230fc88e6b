//! The demo's scenario: the VG, the CSI server on a unix socket, and the volumes driven
//! through it, each step timed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use csi_shim::csi::controller_client::ControllerClient;
use csi_shim::csi::identity_client::IdentityClient;
use csi_shim::csi::node_client::NodeClient;
use csi_shim::csi::volume_capability::access_mode::Mode as Access;
use csi_shim::csi::volume_content_source::{SnapshotSource, Type as Source};
use csi_shim::csi::*;
use csi_shim::driver::Driver;
use csi_shim::node::{Node, NodeConfig};
use csi_shim::testing::cap;
use lvmeta::activate::loopdev;
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::{SharedVg, VgSpec};
use lvmeta::session::Session;
use lvmeta_tests::lab::{private_lvm_conf, start_sanlock};
use tonic::transport::Channel;

use crate::{blocking, on_path, Lab, Options, Steps, HOST_ID, MIB, PAYLOAD, VG};

fn create_request(name: &str, mode: &str, bytes: u64, c: &VolumeCapability) -> CreateVolumeRequest {
    CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(CapacityRange {
            required_bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
            limit_bytes: 0,
        }),
        volume_capabilities: vec![c.clone()],
        parameters: HashMap::from([
            (csi_shim::params::VG.to_owned(), VG.to_owned()),
            (csi_shim::params::MODE.to_owned(), mode.to_owned()),
        ]),
        ..Default::default()
    }
}

fn grpc(what: &str) -> impl FnOnce(tonic::Status) -> String + '_ {
    move |s| format!("{what}: {:?}: {}", s.code(), s.message())
}

/// The gRPC clients of the demo's socket.
struct Clients {
    identity: IdentityClient<Channel>,
    controller: ControllerClient<Channel>,
    node: NodeClient<Channel>,
}

/// Where kubelet would stage and publish a volume.
struct Paths {
    staging: PathBuf,
    target: PathBuf,
}

impl Paths {
    /// The paths, with the directories kubelet makes before it calls the driver (the
    /// staging directory, the target's parent).
    fn of(kubelet: &Path, name: &str) -> Self {
        let p = Self {
            staging: kubelet
                .join("plugins/kubernetes.io/csi")
                .join(csi_shim::DRIVER_NAME)
                .join(name)
                .join("globalmount"),
            target: kubelet
                .join("pods/demo-pod/volumes/kubernetes.io~csi")
                .join(name)
                .join("mount"),
        };
        for dir in [Some(p.staging.as_path()), p.target.parent()]
            .into_iter()
            .flatten()
        {
            if let Err(e) = std::fs::create_dir_all(dir) {
                println!("            {}: {e}", dir.display());
            }
        }
        p
    }
}

pub(crate) async fn scenario(
    lab: &mut Lab,
    steps: &mut Steps,
    o: &Options,
    sanlock: bool,
) -> Result<(), String> {
    let image = lab.dir.join("lun.img");
    let lun_mib = o.lun_mib;
    let lun = steps
        .step_with(
            &format!("make a {lun_mib} MiB sparse LUN file and a loop device"),
            blocking(move || {
                let f = std::fs::File::create(&image)
                    .map_err(|e| format!("{}: {e}", image.display()))?;
                f.set_len(lun_mib * MIB)
                    .map_err(|e| format!("{}: {e}", image.display()))?;
                loopdev::attach(&image).map_err(|e| e.to_string())
            }),
            |p: &PathBuf| p.display().to_string(),
        )
        .await?;
    lab.lun = Some(lun.clone());
    let lun_name = lun.display().to_string();

    let mut session = {
        let dev = FileDevice::open_rw(&lun).map_err(|e| format!("{lun_name}: {e}"))?;
        let devs: Vec<Box<dyn BlockDevice>> = vec![Box::new(dev)];
        Session::new(devs).with_lock_dir(lab.dir.join("lock"))
    };
    if sanlock {
        let run = lab.dir.join("sanlock");
        let d = steps
            .step_with(
                "start a private sanlock daemon (sanlock is installed: shared VG)",
                blocking(move || start_sanlock(&run, "lvmeta-demo")),
                |d: &Child| format!("pid {}", d.id()),
            )
            .await?;
        lab.sanlock = Some(d);
        session = session.with_host(
            lvmeta::lease::Host::new(
                Arc::new(lvmeta::lease::sanlock::SanlockLeases::new()),
                HOST_ID,
                o.io_timeout,
                Duration::from_secs(30),
            )
            .with_linger(csi_shim::VG_LEASE_LINGER, csi_shim::VG_LEASE_MAX_HOLD),
        );
    } else {
        println!(
            "            {}: a local VG under lvm2's file locks",
            if !o.no_sanlock {
                "sanlock is not installed"
            } else {
                "--no-sanlock"
            }
        );
    }
    let session = Arc::new(session);

    let s = session.clone();
    let name = lun_name.clone();
    steps
        .step(
            &format!("pvcreate {lun_name}"),
            blocking(move || {
                s.pvcreate(&name, &lvmeta::layout::PvOptions::default(), false)
                    .map(drop)
                    .map_err(|e| e.to_string())
            }),
        )
        .await?;
    let s = session.clone();
    let name = lun_name.clone();
    steps
        .step(
            &format!(
                "vgcreate {}{VG} {lun_name}",
                if sanlock { "--shared " } else { "" }
            ),
            blocking(move || {
                let sector = s.devices().first().map_or(512, |d| d.logical_sector_size());
                let spec = VgSpec {
                    name: VG.into(),
                    extent_size: lvmeta::edit::vg::DEFAULT_EXTENT_SIZE,
                    tags: Vec::new(),
                    shared: sanlock.then(|| SharedVg::for_sector(sector)),
                };
                s.vgcreate(&spec, &[name.as_str()])
                    .map(drop)
                    .map_err(|e| e.to_string())
            }),
        )
        .await?;
    if sanlock {
        let s = session.clone();
        steps
            .step(
                &format!("vgchange --lockstart {VG} (join lockspace lvm_{VG} as host {HOST_ID})"),
                blocking(move || s.lockstart(VG).map_err(|e| e.to_string())),
            )
            .await?;
    }
    let session = Arc::try_unwrap(session).map_err(|_| "session still shared".to_owned())?;

    let mut c = serve(lab, session).await?;
    let n = steps
        .step_with(
            "Probe",
            async {
                let r = c
                    .identity
                    .probe(ProbeRequest {})
                    .await
                    .map_err(grpc("Probe"))?;
                Ok(r.into_inner().ready == Some(true))
            },
            |ready| format!("ready: {ready}"),
        )
        .await?;
    if !n {
        return Err("the driver is not ready".into());
    }
    volumes(lab, steps, &mut c).await
}

/// Starts the CSI server (Identity, Controller, Node) in this process on the demo's socket.
async fn serve(lab: &mut Lab, session: Session) -> Result<Clients, String> {
    let backend = Arc::new(
        Driver::new(session, vec![VG.to_owned()]).with_host_devices(lab.activation.clone()),
    );
    let node = Arc::new(
        Node::new(
            backend.clone(),
            NodeConfig {
                node_id: "demo-node".into(),
                kubelet_dir: lab.kubelet(),
                max_volumes: 0,
                activation: lab.activation.clone(),
                system: Arc::new(csi_shim::mount::Real),
            },
        )
        .map_err(|e| format!("kubelet directory: {e}"))?,
    );
    let socket = lab.socket();
    let listener = csi_shim::server::listen(&socket).map_err(|e| e.to_string())?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(csi_shim::server::serve(
        backend.clone(),
        Some(node.clone()),
        listener,
        async {
            let _ = rx.await;
        },
    ));
    lab.backend = Some(backend);
    lab.node = Some(node);
    lab.server = Some((tx, task));
    println!("            CSI server on {}", socket.display());
    let ch = csi_shim::client::connect(&socket)
        .await
        .map_err(|e| format!("connect {}: {e}", socket.display()))?;
    Ok(Clients {
        identity: IdentityClient::new(ch.clone()),
        controller: ControllerClient::new(ch.clone()),
        node: NodeClient::new(ch),
    })
}

/// The volume scenario, all through the socket.
async fn volumes(lab: &Lab, steps: &mut Steps, c: &mut Clients) -> Result<(), String> {
    let block = cap(Access::SingleNodeWriter, None);
    // xfs where it is installed (it grows online with fewer privileges than ext4's
    // resize2fs, which needs CAP_SYS_RESOURCE), in its smallest size; ext4 otherwise.
    let (fs_type, small, big) = if on_path("mkfs.xfs") {
        ("xfs", 320 * MIB, 384 * MIB)
    } else {
        ("ext4", 64 * MIB, 128 * MIB)
    };
    let fs_cap = cap(Access::SingleNodeWriter, Some(fs_type));
    let id = |r: tonic::Response<CreateVolumeResponse>| {
        r.into_inner()
            .volume
            .map(|v| v.volume_id)
            .unwrap_or_default()
    };

    // Thin volumes first: the linear volume made last can grow in place (the loop backend
    // exposes one-piece LVs only).
    let thin = steps
        .step_with(
            "CreateVolume demo-thin (thin, 256 MiB, block)",
            async {
                let r = c.controller.create_volume(create_request(
                    "demo-thin",
                    "thin",
                    256 * MIB,
                    &block,
                ));
                r.await.map(id).map_err(grpc("CreateVolume"))
            },
            Clone::clone,
        )
        .await?;
    let snap = steps
        .step_with(
            "CreateSnapshot demo-snap of demo-thin",
            async {
                let r = c.controller.create_snapshot(CreateSnapshotRequest {
                    source_volume_id: thin.clone(),
                    name: "demo-snap".into(),
                    ..Default::default()
                });
                r.await
                    .map(|r| {
                        r.into_inner()
                            .snapshot
                            .map(|s| s.snapshot_id)
                            .unwrap_or_default()
                    })
                    .map_err(grpc("CreateSnapshot"))
            },
            Clone::clone,
        )
        .await?;
    let restored = steps
        .step_with(
            "CreateVolume demo-restore from demo-snap",
            async {
                let mut req = create_request("demo-restore", "thin", 256 * MIB, &block);
                req.volume_content_source = Some(VolumeContentSource {
                    r#type: Some(Source::Snapshot(SnapshotSource {
                        snapshot_id: snap.clone(),
                    })),
                });
                c.controller
                    .create_volume(req)
                    .await
                    .map(id)
                    .map_err(grpc("CreateVolume"))
            },
            Clone::clone,
        )
        .await?;
    steps
        .step_with(
            "NodeStageVolume demo-thin",
            async {
                let p = Paths::of(&lab.kubelet(), "demo-thin");
                let r = c.node.node_stage_volume(csi_shim::testing::stage_request(
                    &thin,
                    &p.staging.display().to_string(),
                    block.clone(),
                ));
                match r.await {
                    Ok(_) => Ok("staged (this kernel has device-mapper)".to_owned()),
                    Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                        Ok(format!("refused as it must be here: {}", s.message()))
                    }
                    Err(s) => Err(grpc("NodeStageVolume")(s)),
                }
            },
            Clone::clone,
        )
        .await?;
    // Nothing to undo when it was refused; a kernel with device-mapper staged it.
    unstage(c, lab, &thin).await?;

    let fs = steps
        .step_with(
            &format!(
                "CreateVolume demo-fs (linear, {} MiB, {fs_type})",
                small / MIB
            ),
            async {
                let r = c
                    .controller
                    .create_volume(create_request("demo-fs", "linear", small, &fs_cap));
                r.await.map(id).map_err(grpc("CreateVolume"))
            },
            Clone::clone,
        )
        .await?;
    let p = Paths::of(&lab.kubelet(), "demo-fs");
    steps
        .step(
            &format!("NodeStageVolume demo-fs (activate, mkfs.{fs_type}, mount)"),
            stage(c, &fs, &p, &fs_cap),
        )
        .await?;
    steps
        .step(
            "NodePublishVolume demo-fs (bind mount into the pod)",
            publish(c, &fs, &p, &fs_cap),
        )
        .await?;
    let file = p.target.join("hello.txt");
    let f2 = file.clone();
    steps
        .step(
            "write and fsync a file through the pod's mount",
            blocking(move || write_synced(&f2)),
        )
        .await?;
    let before = size_of(c, &fs, &p).await?;
    steps
        .step_with(
            &format!("ControllerExpandVolume demo-fs to {} MiB", big / MIB),
            async {
                let r = c
                    .controller
                    .controller_expand_volume(ControllerExpandVolumeRequest {
                        volume_id: fs.clone(),
                        capacity_range: Some(CapacityRange {
                            required_bytes: i64::try_from(big).unwrap_or(i64::MAX),
                            limit_bytes: 0,
                        }),
                        volume_capability: Some(fs_cap.clone()),
                        ..Default::default()
                    });
                r.await
                    .map(|r| r.into_inner())
                    .map_err(grpc("ControllerExpandVolume"))
            },
            |r| {
                format!(
                    "{} MiB, node expansion required: {}",
                    r.capacity_bytes as u64 / MIB,
                    r.node_expansion_required
                )
            },
        )
        .await?;
    let after = steps
        .step_with(
            &format!(
                "NodeExpandVolume demo-fs ({} online)",
                if fs_type == "xfs" {
                    "xfs_growfs"
                } else {
                    "resize2fs"
                }
            ),
            async {
                let r = c.node.node_expand_volume(NodeExpandVolumeRequest {
                    volume_id: fs.clone(),
                    volume_path: p.target.display().to_string(),
                    staging_target_path: p.staging.display().to_string(),
                    capacity_range: Some(CapacityRange {
                        required_bytes: i64::try_from(big).unwrap_or(i64::MAX),
                        limit_bytes: 0,
                    }),
                    volume_capability: Some(fs_cap.clone()),
                    ..Default::default()
                });
                r.await.map_err(grpc("NodeExpandVolume"))?;
                size_of(c, &fs, &p).await
            },
            |after| format!("filesystem {} -> {} MiB", before / MIB, after / MIB),
        )
        .await?;
    if after <= before {
        return Err(format!(
            "the filesystem did not grow ({before} -> {after} bytes)"
        ));
    }
    steps
        .step(
            "NodeUnpublishVolume + NodeUnstageVolume demo-fs (umount, deactivate, release)",
            async {
                unpublish(c, &fs, &p).await?;
                unstage(c, lab, &fs).await
            },
        )
        .await?;
    steps
        .step("NodeStageVolume + NodePublishVolume demo-fs again", async {
            stage(c, &fs, &p, &fs_cap).await?;
            publish(c, &fs, &p, &fs_cap).await
        })
        .await?;
    let f3 = file.clone();
    steps
        .step("read the file back", blocking(move || read_back(&f3)))
        .await?;
    steps
        .step("NodeUnpublishVolume + NodeUnstageVolume demo-fs", async {
            unpublish(c, &fs, &p).await?;
            unstage(c, lab, &fs).await
        })
        .await?;

    let listed = steps
        .step_with(
            "ListVolumes",
            async {
                let r = c.controller.list_volumes(ListVolumesRequest::default());
                let r = r.await.map_err(grpc("ListVolumes"))?.into_inner();
                Ok(r.entries
                    .into_iter()
                    .filter_map(|e| e.volume)
                    .map(|v| (v.volume_id, v.capacity_bytes))
                    .collect::<Vec<_>>())
            },
            |v: &Vec<(String, i64)>| {
                v.iter()
                    .map(|(id, b)| format!("{id} {} MiB", *b as u64 / MIB))
                    .collect::<Vec<_>>()
                    .join(", ")
            },
        )
        .await?;
    let lun = lab.lun.clone().unwrap_or_default();
    let sys = lab.dir.join("lvm");
    let lock = lab.dir.join("lock");
    let shared = lab.sanlock.is_some();
    if on_path("lvs") {
        steps
            .step_with(
                "stock lvm2: lvs",
                blocking(move || stock_lvs(&sys, &lock, &lun, shared, &listed)),
                |_| "sees every volume".to_owned(),
            )
            .await
            .map(|out| println!("{out}"))?;
    } else {
        println!("            lvm2 is not installed: no stock lvs to compare with");
    }

    for (what, gone) in [
        ("DeleteVolume demo-restore", &restored),
        ("DeleteVolume demo-fs", &fs),
    ] {
        steps.step(what, delete(c, gone)).await?;
    }
    steps
        .step("DeleteSnapshot demo-snap", async {
            let r = c.controller.delete_snapshot(DeleteSnapshotRequest {
                snapshot_id: snap.clone(),
                ..Default::default()
            });
            r.await.map(drop).map_err(grpc("DeleteSnapshot"))
        })
        .await?;
    steps
        .step("DeleteVolume demo-thin (and its pool)", delete(c, &thin))
        .await
}

async fn delete(c: &mut Clients, id: &str) -> Result<(), String> {
    let r = c.controller.delete_volume(DeleteVolumeRequest {
        volume_id: id.into(),
        ..Default::default()
    });
    r.await.map(drop).map_err(grpc("DeleteVolume"))
}

async fn stage(c: &mut Clients, id: &str, p: &Paths, cap: &VolumeCapability) -> Result<(), String> {
    c.node
        .node_stage_volume(csi_shim::testing::stage_request(
            id,
            &p.staging.display().to_string(),
            cap.clone(),
        ))
        .await
        .map(drop)
        .map_err(grpc("NodeStageVolume"))
}

async fn publish(
    c: &mut Clients,
    id: &str,
    p: &Paths,
    cap: &VolumeCapability,
) -> Result<(), String> {
    c.node
        .node_publish_volume(csi_shim::testing::publish_request(
            id,
            &p.staging.display().to_string(),
            &p.target.display().to_string(),
            cap.clone(),
        ))
        .await
        .map(drop)
        .map_err(grpc("NodePublishVolume"))
}

async fn unpublish(c: &mut Clients, id: &str, p: &Paths) -> Result<(), String> {
    c.node
        .node_unpublish_volume(NodeUnpublishVolumeRequest {
            volume_id: id.into(),
            target_path: p.target.display().to_string(),
        })
        .await
        .map(drop)
        .map_err(grpc("NodeUnpublishVolume"))
}

async fn unstage(c: &mut Clients, lab: &Lab, id: &str) -> Result<(), String> {
    let name = id.rsplit('/').next().unwrap_or(id);
    let p = Paths::of(&lab.kubelet(), name);
    c.node
        .node_unstage_volume(NodeUnstageVolumeRequest {
            volume_id: id.into(),
            staging_target_path: p.staging.display().to_string(),
        })
        .await
        .map(drop)
        .map_err(grpc("NodeUnstageVolume"))
}

/// The filesystem's size as NodeGetVolumeStats reports it.
async fn size_of(c: &mut Clients, id: &str, p: &Paths) -> Result<u64, String> {
    let r = c
        .node
        .node_get_volume_stats(NodeGetVolumeStatsRequest {
            volume_id: id.into(),
            volume_path: p.target.display().to_string(),
            staging_target_path: p.staging.display().to_string(),
        })
        .await
        .map_err(grpc("NodeGetVolumeStats"))?
        .into_inner();
    r.usage
        .iter()
        .find(|u| u.unit == volume_usage::Unit::Bytes as i32)
        .map(|u| u.total as u64)
        .ok_or_else(|| "NodeGetVolumeStats: no byte usage".to_owned())
}

fn write_synced(file: &Path) -> Result<(), String> {
    let err = |e: std::io::Error| format!("{}: {e}", file.display());
    let mut f = std::fs::File::create(file).map_err(err)?;
    std::io::Write::write_all(&mut f, PAYLOAD).map_err(err)?;
    f.sync_all().map_err(err)
}

fn read_back(file: &Path) -> Result<(), String> {
    let got = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if got == PAYLOAD {
        Ok(())
    } else {
        Err(format!(
            "{}: read {} bytes that differ from what was written",
            file.display(),
            got.len()
        ))
    }
}

/// Stock `lvs` in a private lvm2 system directory that sees only the LUN; every listed
/// volume must be among the LVs it reports.
fn stock_lvs(
    sys: &Path,
    lock: &Path,
    lun: &Path,
    shared: bool,
    listed: &[(String, i64)],
) -> Result<String, String> {
    std::fs::create_dir_all(sys).map_err(|e| format!("{}: {e}", sys.display()))?;
    let conf = private_lvm_conf(lock, &[lun]);
    std::fs::write(sys.join("lvm.conf"), conf).map_err(|e| format!("lvm.conf: {e}"))?;
    let mut lvs = Command::new("lvs");
    if shared {
        // Without lvmlockd on this host, lvm2 reads a shared VG only when told to use it; it
        // then reads without a lock, which a report may.
        lvs.args(["--config", "global/use_lvmlockd=1"]);
    }
    let out = lvs
        .args([
            "-a",
            "-o",
            "lv_name,lv_size,pool_lv,origin,lv_attr",
            "--units",
            "m",
            VG,
        ])
        .env("LVM_SYSTEM_DIR", sys)
        .env("LVM_SUPPRESS_FD_WARNINGS", "1")
        .output()
        .map_err(|e| format!("lvs: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "lvs: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let names: Vec<&str> = text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    match listed
        .iter()
        .map(|(id, _)| id.rsplit('/').next().unwrap_or(id))
        .find(|lv| !names.contains(lv))
    {
        Some(lv) => Err(format!("lvs does not show {lv}:\n{text}")),
        None => Ok(text.trim_end().to_owned()),
    }
}
