//! Thin volumes staged on several nodes at once (RWX/ROX Block): the node that holds the
//! pool's lease serves the thin LV over NBD ([`crate::serve`]); the others attach it with
//! the kernel's NBD client ([`crate::attach`]). Every node's device is the upper device of
//! a wrapper ([`lvmeta::activate::wrap`]), so its backing can be switched under the pod.
//!
//! - The first node to stage takes the pool's lease (as any thin staging does), writes the
//!   pool's serve record (its address and a new secret) and serves.
//! - A node that finds the lease held reads the record, claims a slot on the board under
//!   the VG lease (its host id, the LV, its address), then connects and attaches.
//! - A client unstages by removing its wrapper, disconnecting and leaving its slot. The
//!   server's unstage hands the pool to a staged client first (`handover.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;

use lvmeta::activate::wrap::Wrap;
use lvmeta::activate::Activation;
use lvmeta::dev::FileDevice;
use lvmeta::lease::board::{Board, ServeRecord, ServeState, Slot, SlotState};
use lvmeta::lease::LeaseError;
use lvmeta::session::{ActivationRead, PoolBoard};
use lvmeta::units::Sectors;
use tonic::Status;

use crate::attach::{self, netlink::NbdNetlink, AttachOptions};
use crate::params;
use crate::serve::{export_name, new_secret, Served, Serving};
use crate::status::from_activation;

use super::want::Want;
use super::Node;

/// How a staged volume is shared with other nodes.
#[derive(Clone)]
pub(super) enum Remote {
    /// This node holds the pool and serves the LV.
    Served {
        /// The wrapper over the thin LV.
        wrap: Wrap,
        /// The pool's board.
        board: PoolBoard,
        /// Is the wrapper read-only (a reader-only mode)?
        read_only: bool,
    },
    /// Another node serves the LV; this node attached it.
    Attached(Attached),
}

/// A volume another node serves, attached here.
#[derive(Clone)]
pub(super) struct Attached {
    /// The wrapper over the NBD device.
    pub wrap: Wrap,
    /// The kernel NBD device's index.
    pub index: u32,
    /// This node's slot on the board, and what it holds.
    pub slot: (usize, Slot),
    /// The pool's board.
    pub board: PoolBoard,
    /// The serving host and its record's epoch, as attached.
    pub server: (u64, u64),
    /// Is the wrapper held (the server is pausing or changing)?
    pub held: bool,
    /// When the server was last checked to answer.
    pub probed: Option<std::time::Instant>,
    /// This process's handles on the NBD device's sockets (none after a restart).
    pub sockets: attach::Sockets,
}

/// What a shared staging made.
pub(super) struct SharedStage {
    pub activation: Option<Activation>,
    pub device: PathBuf,
    pub remote: Remote,
}

pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

pub(super) fn io_status(what: &str) -> impl Fn(std::io::Error) -> Status + '_ {
    move |e| Status::unavailable(format!("{what}: {e}"))
}

/// The slots (index, host) of hosts other than `me` with `board`'s LV staged, or drained
/// for a handover: the clients a server has.
pub(super) fn clients_of(found: &Board, board: &PoolBoard, me: u64) -> Vec<(usize, u64)> {
    found
        .slots_of(&board.lv_id)
        .filter(|(_, s)| s.host != me && matches!(s.state, SlotState::Staged | SlotState::Drained))
        .map(|(i, s)| (*i, s.host))
        .collect()
}

/// `server` as this node reaches it from `me`: a link-local server through this node's own
/// interface (the record carries the server's).
pub(super) fn reach(server: SocketAddr, me: SocketAddr) -> SocketAddr {
    match (server, me) {
        (SocketAddr::V6(mut t), SocketAddr::V6(me)) if t.ip().is_unicast_link_local() => {
            t.set_scope_id(me.scope_id());
            SocketAddr::V6(t)
        }
        _ => server,
    }
}

/// The backend identifier of the kernel NBD device of thin LV `lv_id` of VG `vg_id`.
pub(super) fn identifier(b: &PoolBoard) -> String {
    format!("lvmeta:{}/{}", b.vg_id, b.lv_id)
}

impl Node {
    fn nbd(&self) -> Result<&Serving, Status> {
        self.nbd.as_deref().ok_or_else(|| {
            Status::failed_precondition(
                "a thin volume on several nodes is served over NBD: this node plugin runs \
                 without --nbd-ip",
            )
        })
    }

    /// Stages thin LV `lv` of `vg` for several nodes, on `read` (the VG read under its
    /// lease): served from here when this node gets the pool's lease, attached otherwise.
    pub(super) fn stage_shared(
        &self,
        read: ActivationRead<'_>,
        vg: &str,
        lv: &str,
        want: &Want,
    ) -> Result<SharedStage, Status> {
        let nbd = self.nbd()?;
        let backend = self.config.activation.as_ref();
        match read.activate(lv, false, false, backend) {
            Ok(act) => {
                let session = self.backend.session();
                let served = session
                    .clear_delivered(&act.placement, "lvchange -ay")
                    .map_err(from_activation)
                    .and_then(|()| self.serve(nbd, &act, vg, lv, want));
                match served {
                    Ok((device, remote)) => Ok(SharedStage {
                        activation: Some(act),
                        device,
                        remote,
                    }),
                    Err(e) => {
                        if let Err(d) = act.deactivate(backend) {
                            // Still live: the lease stays held (an orphan once this
                            // process ends), never released under a device that may write.
                            tracing::warn!(vg, lv, error = %d, "deactivating after a failed stage; the lease stays held");
                            act.keep_lease();
                        }
                        Err(e)
                    }
                }
            }
            Err(lvmeta::Error::Lease(LeaseError::Busy { .. })) => self.attach(nbd, vg, lv, want),
            Err(e) => Err(from_activation(e)),
        }
    }

    /// Serves `act` (this node holds the pool) with a wrapper over it for this node's
    /// pods: the wrapper's device and the staging's remote part.
    fn serve(
        &self,
        nbd: &Serving,
        act: &Activation,
        vg: &str,
        lv: &str,
        want: &Want,
    ) -> Result<(PathBuf, Remote), Status> {
        let board = self
            .backend
            .session()
            .pool_board(vg, lv)
            .map_err(from_activation)?
            .ok_or_else(|| Status::internal(format!("{vg}/{lv} has no serve board")))?;
        let size = self.start_serving(nbd, act, &board)?;
        let wrap = Wrap::new(nbd.setup().host_id, &board.vg_id, &board.lv_id);
        let upper = self.config.activation.wrap(
            &wrap,
            &act.device.to_string_lossy(),
            Sectors(size / 512),
            want.read_only,
        );
        match upper {
            Ok(upper) => Ok((
                upper,
                Remote::Served {
                    wrap,
                    board,
                    read_only: want.read_only,
                },
            )),
            Err(e) => {
                nbd.remove(&board.lv_id);
                Err(from_activation(e.into()))
            }
        }
    }

    /// Exports `act`'s thin LV, writing a SERVING record (next epoch, a new secret) when
    /// this node serves no LV of the pool yet; the LV's size in bytes.
    pub(super) fn start_serving(
        &self,
        nbd: &Serving,
        act: &Activation,
        board: &PoolBoard,
    ) -> Result<u64, Status> {
        let session = self.backend.session();
        // Opened before any record names this node: a record never points at nothing.
        let dev = FileDevice::open_data(&act.device)
            .map_err(io_status(&act.device.display().to_string()))?;
        let _records = nbd.records();
        let (secret, epoch) = match nbd.pool_secret(&board.pool_lv_id) {
            Some(known) => known,
            None => {
                let old = session.read_board(board).map_err(from_activation)?;
                let secret = new_secret().map_err(io_status("random secret"))?;
                let record = ServeRecord {
                    epoch: old.record.map_or(0, |r| r.epoch) + 1,
                    host: nbd.setup().host_id,
                    generation: 0,
                    state: ServeState::Serving,
                    addr: nbd.local_addr(),
                    successor: 0,
                    written_ms: now_ms(),
                    secret,
                };
                session
                    .write_serve_record(board, act, &record)
                    .map_err(from_activation)?;
                tracing::info!(vg = %board.vg, pool = %board.pool, epoch = record.epoch, addr = %record.addr, "serving the pool over NBD");
                (secret, record.epoch)
            }
        };
        let export = nbd.new_export(Box::new(dev));
        let size = export.size();
        nbd.add(
            &board.lv_id,
            Served {
                export,
                secret,
                epoch,
                board: board.clone(),
            },
        );
        Ok(size)
    }

    /// Attaches thin LV `lv` of `vg`, which the pool's holder serves.
    fn attach(
        &self,
        nbd: &Serving,
        vg: &str,
        lv: &str,
        want: &Want,
    ) -> Result<SharedStage, Status> {
        let session = self.backend.session();
        let host = nbd.setup().host_id;
        let board = session
            .pool_board(vg, lv)
            .map_err(from_activation)?
            .ok_or_else(|| Status::internal(format!("{vg}/{lv} has no serve board")))?;
        let found = session.read_board(&board).map_err(from_activation)?;
        let record = found
            .record
            .filter(|r| r.state == ServeState::Serving && r.host != host)
            .ok_or_else(|| {
                Status::failed_precondition(format!(
                    "the lease of pool {vg}/{} is held by another node, which does not serve \
                     it over NBD (a volume of it is staged there for that node only)",
                    board.pool
                ))
            })?;
        let source = nbd.setup().addr.ip();
        let mut slot = Slot {
            lv_id: board.lv_id.clone(),
            host,
            generation: 0,
            state: SlotState::Staged,
            read_only: want.read_only,
            epoch: record.epoch,
            written_ms: now_ms(),
            addr: source,
        };
        let index = session
            .claim_board_slot(&board, &mut slot)
            .map_err(from_activation)?;
        let leave = || {
            if let Err(e) = session.leave_board_slots(&board, host, now_ms()) {
                tracing::warn!(vg, lv, error = %e, "cannot leave the board slot");
            }
        };
        let to = reach(record.addr, nbd.setup().addr);
        let opts = AttachOptions {
            connections: nbd.setup().connections.max(1),
            timeout: nbd.setup().timeout,
            dead_timeout: nbd.setup().dead_timeout,
            identifier: identifier(&board),
            source: Some(nbd.setup().addr),
        };
        let name = export_name(&board.lv_id, host, &record.secret);
        let attached = NbdNetlink::open()
            .and_then(|nl| attach::attach(&nl, to, name.as_bytes(), &opts).map(|a| (nl, a)));
        let (nl, made) = match attached {
            Ok(a) => a,
            Err(e) => {
                leave();
                return Err(Status::unavailable(format!(
                    "attaching {vg}/{lv} from the node serving it at {to}: {e}"
                )));
            }
        };
        let wrap = Wrap::new(host, &board.vg_id, &board.lv_id);
        let dev = attach::device_path(made.index);
        let upper = self.config.activation.wrap(
            &wrap,
            &dev.to_string_lossy(),
            Sectors(made.negotiated.size / 512),
            want.read_only,
        );
        let upper = match upper {
            Ok(u) => u,
            Err(e) => {
                if let Err(d) = nl.disconnect(made.index) {
                    tracing::warn!(vg, lv, error = %d, "disconnecting after a failed stage");
                }
                leave();
                return Err(from_activation(e.into()));
            }
        };
        tracing::info!(vg, lv, server = %to, nbd = made.index, device = %upper.display(), "attached over NBD");
        Ok(SharedStage {
            activation: None,
            device: upper,
            remote: Remote::Attached(Attached {
                wrap,
                index: made.index,
                slot: (index, slot),
                board,
                server: (record.host, record.epoch),
                held: false,
                probed: None,
                sockets: made.sockets,
            }),
        })
    }

    /// Undoes a shared staging's own part (the activation, if any, is the caller's). A
    /// volume served here that other nodes attached is handed to one of them first
    /// ([`Node::hand_over`]).
    pub(super) fn unstage_remote(
        &self,
        id: &str,
        remote: &Remote,
        act: Option<&Activation>,
    ) -> Result<(), Status> {
        let backend = self.config.activation.as_ref();
        match remote {
            Remote::Served { wrap, board, .. } => {
                let nbd = self.nbd()?;
                // Refused while this node's pods have it open: nothing paused yet.
                backend
                    .unwrap(wrap)
                    .map_err(|e| from_activation(e.into()))?;
                // Other nodes staged it (connected or about to): the pool goes to one.
                let connected = nbd.get(&board.lv_id).map_or(0, |s| s.export.connections());
                if connected > 0 || self.staged_elsewhere(nbd, board)? {
                    // The record and the lease are the pool's: it moves only with the last
                    // of its LVs active here.
                    if self.pool_in_use_here(id, board) {
                        return Err(Status::unavailable(format!(
                            "volume {} is attached on other nodes and other volumes of its \
                             pool are staged here: unstage them first, or unstage it on the \
                             other nodes",
                            params::shown(id)
                        )));
                    }
                    let act = act.ok_or_else(|| {
                        Status::internal(format!(
                            "volume {} is served without an activation",
                            params::shown(id)
                        ))
                    })?;
                    self.hand_over(nbd, act, board)?;
                }
                nbd.remove(&board.lv_id);
                Ok(())
            }
            Remote::Attached(a) => {
                backend
                    .unwrap(&a.wrap)
                    .map_err(|e| from_activation(e.into()))?;
                // Only while the index is still this volume's (a retry may find it reused).
                let index = a.index;
                let ours = attach::devices_of(&identifier(&a.board))
                    .map_err(io_status("listing NBD devices"))?;
                if ours.contains(&index) {
                    NbdNetlink::open()
                        .and_then(|nl| nl.disconnect(index))
                        .map_err(io_status(&format!("disconnecting /dev/nbd{index}")))?;
                }
                self.leave_slot(a).map_err(from_activation)
            }
        }
    }

    /// NodeExpandVolume's part for a volume served here, after the thin LV grew: the
    /// export serves the new size and the wrapper shows it (a pause, no error).
    pub(super) fn grow_served(
        &self,
        thin: &std::path::Path,
        remote: &Remote,
    ) -> Result<(), Status> {
        let Remote::Served {
            wrap,
            board,
            read_only,
        } = remote
        else {
            return Ok(());
        };
        let dev = FileDevice::open_data(thin).map_err(io_status(&thin.display().to_string()))?;
        let bytes = lvmeta::dev::BlockDevice::size(&dev);
        if let Some(s) = self.nbd()?.get(&board.lv_id) {
            s.export.replace_device(Box::new(dev));
        }
        self.config
            .activation
            .resize_wrap(
                wrap,
                &thin.to_string_lossy(),
                Sectors(bytes / 512),
                *read_only,
            )
            .map_err(|e| from_activation(e.into()))
    }

    /// NodeExpandVolume's part for a volume attached here: once the server exports at
    /// least `bytes` (UNAVAILABLE until it does), the NBD device and the wrapper take it.
    pub(super) fn grow_attached(&self, a: &Attached, bytes: u64) -> Result<(), Status> {
        let nbd = self.nbd()?;
        let session = self.backend.session();
        let record = session
            .read_board(&a.board)
            .map_err(from_activation)?
            .record
            .filter(|r| r.state == ServeState::Serving && (r.host, r.epoch) == a.server)
            .ok_or_else(|| Status::unavailable("the pool's server is changing: try again"))?;
        let setup = nbd.setup();
        let to = reach(record.addr, setup.addr);
        let name = export_name(&a.board.lv_id, setup.host_id, &record.secret);
        let (_sock, neg) = attach::handshake_sockets(to, Some(setup.addr), name.as_bytes(), 1)
            .map_err(io_status(&format!("asking {to} for the size")))?;
        if neg.size < bytes {
            return Err(Status::unavailable(format!(
                "the node serving the volume exports {} bytes, not yet {bytes}: it grows it on \
                 its own NodeExpandVolume",
                neg.size
            )));
        }
        let index = a.index;
        NbdNetlink::open()
            .and_then(|nl| nl.reconfigure(index, &identifier(&a.board), &[], Some(bytes)))
            .map_err(io_status(&format!("growing /dev/nbd{index}")))?;
        let dev = attach::device_path(index);
        self.config
            .activation
            .resize_wrap(
                &a.wrap,
                &dev.to_string_lossy(),
                Sectors(bytes / 512),
                a.slot.1.read_only,
            )
            .map_err(|e| from_activation(e.into()))
    }

    /// Is another volume staged here active in `board`'s pool?
    fn pool_in_use_here(&self, id: &str, board: &PoolBoard) -> bool {
        self.staged().iter().any(|(other, s)| {
            other != id
                && s.activation.as_ref().is_some_and(|a| {
                    a.placement.vg == board.vg
                        && matches!(&a.placement.layout,
                            lvmeta::activate::Layout::Thin { pool, .. } if pool.name == board.pool)
                })
        })
    }

    /// Does the board name another host with `board`'s LV staged (or drained) in its
    /// current life ([`lvmeta::lease::board::Slot::is_stale`])?
    fn staged_elsewhere(&self, nbd: &Serving, board: &PoolBoard) -> Result<bool, Status> {
        let found = self
            .backend
            .session()
            .read_board_live(board)
            .map_err(from_activation)?;
        Ok(!clients_of(&found, board, nbd.setup().host_id).is_empty())
    }

    /// After the pool's last served LV went: the record says RELEASED, written while
    /// `act` still holds the pool.
    pub(super) fn release_record(&self, act: &Activation, remote: &Remote) {
        let (Remote::Served { board, .. }, Some(nbd)) = (remote, self.nbd.as_deref()) else {
            return;
        };
        let _records = nbd.records();
        if nbd.pool_secret(&board.pool_lv_id).is_some() {
            return;
        }
        let session = self.backend.session();
        let released = session.read_board(board).and_then(|b| {
            let Some(mut r) = b.record.filter(|r| r.host == nbd.setup().host_id) else {
                return Ok(());
            };
            r.state = ServeState::Released;
            r.written_ms = now_ms();
            session.write_serve_record(board, act, &r)
        });
        if let Err(e) = released {
            tracing::warn!(vg = %board.vg, pool = %board.pool, error = %e, "cannot mark the serve record released");
        }
    }

    /// What a node plugin that ended left of thin LV `lv` of `vg` on this node: its wrapper
    /// and kernel NBD devices are removed and its board slot left.
    pub(super) fn unstage_leftover(&self, vg: &str, lv: &str) -> Result<(), Status> {
        let Some(nbd) = self.nbd.as_deref() else {
            return Ok(());
        };
        let session = self.backend.session();
        let board = match session.pool_board(vg, lv) {
            Ok(Some(b)) => b,
            // Not a thin LV of a shared VG, or gone: nothing of it is shared.
            Ok(None) | Err(lvmeta::Error::VgNotFound(_) | lvmeta::Error::LvNotFound { .. }) => {
                return Ok(())
            }
            Err(e) => return Err(from_activation(e)),
        };
        let host = nbd.setup().host_id;
        let wrap = Wrap::new(host, &board.vg_id, &board.lv_id);
        match self.config.activation.unwrap(&wrap) {
            Ok(()) | Err(lvmeta::activate::ActivateError::Unsupported { .. }) => {}
            Err(e) => return Err(from_activation(e.into())),
        }
        let devices =
            attach::devices_of(&identifier(&board)).map_err(io_status("listing NBD devices"))?;
        if !devices.is_empty() {
            let nl = NbdNetlink::open().map_err(io_status("NBD netlink"))?;
            for i in devices {
                nl.disconnect(i)
                    .map_err(io_status(&format!("disconnecting /dev/nbd{i}")))?;
            }
        }
        session
            .leave_board_slots(&board, host, now_ms())
            .map_err(from_activation)?;
        Ok(())
    }
}
