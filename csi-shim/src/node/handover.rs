//! A served thin pool handed to a node that attached it, without an I/O error on any node
//! (KubeVirt's migration: the target stages, the source unstages, and the pool ends on the
//! target with no NBD hop left).
//!
//! The server S0, unstaging the pool's last LV while clients are connected:
//! 1. picks the successor (the lowest host id among the LV's STAGED slots written in their
//!    hosts' current lives: [`lvmeta::lease::board::Slot::is_stale`]) and writes the
//!    record PAUSING(epoch e, successor);
//! 2. waits (at most [`DRAIN_WAIT`]) until every such slot says DRAINED(e): each client's
//!    watch ([`Node::watch_shared`]) held its wrapper, so its I/O in flight finished
//!    through S0 and new I/O queues in its wrapper;
//! 3. closes the export, deactivates, writes RELEASED(e, successor) and releases the lease.
//!
//! The successor's watch sees RELEASED naming it: it activates the LV (the pool's lease
//! now its own), serves it (SERVING, epoch e+1), switches its wrapper's lower device from
//! the NBD device to the thin LV, releases the wrapper and disconnects. Every other
//! client's watch sees the new SERVING record: it re-marks its slot STAGED, connects to the
//! new server, hands the sockets to its NBD device (RECONFIGURE) and releases its wrapper.
//! A PAUSING or RELEASED record older than [`STALL`] (its server or successor died or failed) lets any held
//! client take the pool once the lease is free; the lease decides who wins.
//!
//! A server that dies or loses its path to the LUN: each client checks every
//! [`PROBE_EVERY`] that its server opens the volume's export to it (a server that fences
//! the volume closes the export first). When it does not, the client tries to activate the
//! LV; sanlock grants the pool's lease only once the server's host is dead (fenced or
//! reset) or has let the lease go, and to one client.
//! That client serves the next epoch, hands its own NBD device a connection to the new
//! export inside its process (RECONFIGURE: the I/O queued there completes), then holds,
//! switches and releases its wrapper as above; the others reconnect. Until then the
//! clients' I/O waits in their NBD devices (up to `--nbd-dead-timeout`).

use std::time::{Duration, Instant};

use lvmeta::activate::Activation;
use lvmeta::lease::board::{ServeRecord, ServeState, SlotState};
use lvmeta::lease::LeaseError;
use lvmeta::session::PoolBoard;
use lvmeta::units::Sectors;
use tonic::Status;

use crate::attach::{self, netlink::NbdNetlink};
use crate::serve::{export_name, Serving};
use crate::status::from_activation;

use super::shared::{clients_of, identifier, now_ms, Attached, Remote};
use super::Node;

/// How long a server waits for its clients to drain before it closes the export anyway
/// (a late client then waits out its NBD request timeout, never an error).
pub const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// How often each node looks at the records of the pools it attached.
pub const SHARED_POLL: Duration = Duration::from_millis(100);

/// How often a client checks that its server answers.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

/// How long a server has for each step of a probe (connect, handshake).
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a PAUSING or RELEASED record may stand before clients stop waiting for the
/// node it names.
const STALL: Duration = Duration::from_secs(30);

/// Has `r` stood longer than [`STALL`]?
fn stalled(r: &ServeRecord) -> bool {
    super::shared::now_ms().saturating_sub(r.written_ms) > STALL.as_millis() as u64
}

/// What one look at a record asks of an attached volume.
enum Step {
    /// PAUSING: hold the wrapper, report drained.
    Hold,
    /// RELEASED to this node, or a dead server: take the pool.
    TakeOver,
    /// SERVING by another server: connect to it.
    Reconnect,
    /// SERVING by the same server while held (a handover it gave up, or a hold this
    /// process took before it restarted): release.
    Resume,
}

impl Node {
    /// Step 1 and 2 above for the pool of `board`, which `act` holds.
    pub(super) fn hand_over(
        &self,
        nbd: &Serving,
        act: &Activation,
        board: &PoolBoard,
    ) -> Result<(), Status> {
        let session = self.backend.session();
        let me = nbd.setup().host_id;
        // Hosts whose life ended since they staged are neither waited for nor chosen.
        let found = session.read_board_live(board).map_err(from_activation)?;
        let clients = clients_of(&found, board, me);
        let Some(successor) = clients.iter().map(|c| c.1).min() else {
            return Err(Status::unavailable(
                "other nodes are connected to this volume without a slot of their current \
                 lives naming them: not handed over",
            ));
        };
        let Some(serving) = found.record.filter(|r| r.host == me) else {
            return Err(Status::unavailable(
                "the pool's serve record is not this node's: not handed over",
            ));
        };
        let pausing = ServeRecord {
            state: ServeState::Pausing,
            successor,
            written_ms: now_ms(),
            ..serving.clone()
        };
        session
            .write_serve_record(board, act, &pausing)
            .map_err(from_activation)?;
        tracing::info!(vg = %board.vg, pool = %board.pool, successor, epoch = pausing.epoch, "handing the pool over");
        let drained = self.wait_drained(board, &clients, pausing.epoch);
        if !drained {
            tracing::warn!(vg = %board.vg, pool = %board.pool, "clients did not all drain in time: handing over anyway");
        }
        // The successor is one that drained (it is alive and following), when one did.
        let after = session.read_board(board).map_err(from_activation)?;
        let live = after
            .slots
            .iter()
            .filter(|(i, s)| {
                clients.iter().any(|c| c.0 == *i)
                    && s.state == SlotState::Drained
                    && s.epoch == pausing.epoch
            })
            .map(|(_, s)| s.host)
            .min();
        if let Some(host) = live.filter(|h| *h != successor) {
            let again = ServeRecord {
                successor: host,
                written_ms: now_ms(),
                ..pausing
            };
            session
                .write_serve_record(board, act, &again)
                .map_err(from_activation)?;
        }
        Ok(())
    }

    /// Waits until every slot of `clients` says DRAINED for `epoch`, at most
    /// [`DRAIN_WAIT`]; whether they did.
    fn wait_drained(&self, board: &PoolBoard, clients: &[(usize, u64)], epoch: u64) -> bool {
        let session = self.backend.session();
        let until = Instant::now() + DRAIN_WAIT;
        while Instant::now() < until {
            let all = session.read_board(board).is_ok_and(|b| {
                clients.iter().all(|(i, _)| {
                    b.slots
                        .iter()
                        .any(|(j, s)| j == i && s.state == SlotState::Drained && s.epoch == epoch)
                })
            });
            if all {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Does this node attach thin volumes over NBD (so [`Node::watch_shared`] has work)?
    pub fn shares(&self) -> bool {
        self.nbd.is_some()
    }

    /// Follows the serve records of the pools this node attached (every [`SHARED_POLL`]):
    /// holds, takes over, reconnects or releases as the module's steps say.
    pub fn watch_shared(&self) {
        let Some(nbd) = self.nbd.as_deref() else {
            return;
        };
        let attached: Vec<(String, Attached)> = self
            .staged()
            .iter()
            .filter_map(|(id, s)| match &s.remote {
                Some(Remote::Attached(a)) => Some((id.clone(), a.clone())),
                _ => None,
            })
            .collect();
        if nbd.stamp_due(PROBE_EVERY) {
            for (id, a) in &attached {
                if let Err(e) = self.keep_slot(nbd, id, a) {
                    tracing::warn!(volume_id = %id, error = %e, "keeping this node's board slot");
                }
            }
        }
        for (id, a) in attached {
            if let Err(e) = self.follow(nbd, &id, a) {
                tracing::warn!(volume_id = %id, error = %e, "following the pool's server");
            }
        }
    }

    /// One look at the record of attached volume `id`: read without the volume's in-flight
    /// mark (kubelet's calls are not turned away every tick), acted on under it.
    fn follow(&self, nbd: &Serving, id: &str, a: Attached) -> Result<(), String> {
        let session = self.backend.session();
        let me = nbd.setup().host_id;
        let Some(r) = session
            .read_board(&a.board)
            .map_err(|e| e.to_string())?
            .record
        else {
            return Ok(());
        };
        let same = (r.host, r.epoch) == a.server;
        let step = match r.state {
            ServeState::Pausing if same && (!a.held || !reported(&a, SlotState::Drained, &r)) => {
                Step::Hold
            }
            ServeState::Released if r.successor == me => Step::TakeOver,
            ServeState::Serving if !same && r.host != me => Step::Reconnect,
            // A takeover of this node's that did not finish: finish it.
            ServeState::Serving if r.host == me => Step::TakeOver,
            ServeState::Serving if same && !a.held && self.unanswered(nbd, id, &a, &r) => {
                Step::TakeOver
            }
            ServeState::Serving if same && (a.held || !reported(&a, SlotState::Staged, &r)) => {
                Step::Resume
            }
            // A handover that stalled (its server or its successor died or failed): any
            // client may take the pool, once the lease is free.
            ServeState::Pausing | ServeState::Released
                if a.held && stalled(&r) && self.due(id, &a) =>
            {
                tracing::warn!(volume_id = %id, epoch = r.epoch, "the pool's handover stalled: taking the pool once its lease is free");
                Step::TakeOver
            }
            _ => return Ok(()),
        };
        // A call on the volume in flight (its unstage) goes first; the next look retries.
        let Ok(_g) = self.backend.inflight().enter(id) else {
            return Ok(());
        };
        let Some(a) = self.attached(id) else {
            return Ok(());
        };
        match step {
            Step::Hold => self.set_held(id, a, true, r.epoch),
            Step::TakeOver => self.take_over(nbd, id, &a),
            Step::Reconnect => self.reconnect(nbd, id, a, &r),
            Step::Resume => self.set_held(id, a, false, r.epoch),
        }
    }

    /// Holds attached volume `id`'s wrapper and reports DRAINED for `epoch`, or releases it
    /// and reports STAGED; a report that failed is made again by the next look (the
    /// wrapper is not held or released twice).
    fn set_held(&self, id: &str, mut a: Attached, hold: bool, epoch: u64) -> Result<(), String> {
        let backend = self.config.activation.as_ref();
        let state = match hold {
            true => SlotState::Drained,
            false => SlotState::Staged,
        };
        if a.held != hold {
            let done = match hold {
                true => backend.hold(&a.wrap),
                false => backend.release(&a.wrap),
            };
            done.map_err(|e| e.to_string())?;
            a.held = hold;
            self.update(id, &a);
        }
        self.write_slot(&a, state, epoch)
            .map_err(|e| e.to_string())?;
        (a.slot.1.state, a.slot.1.epoch) = (state, epoch);
        self.update(id, &a);
        tracing::info!(volume_id = %id, epoch, held = hold, "wrapper held for the pool's handover, or released as its server serves");
        Ok(())
    }

    /// Every [`PROBE_EVERY`]: does the server of attached volume `id` fail to open the
    /// volume's export to this node (down, unreachable, or up without the export: it lost
    /// the pool's lease and closed it)? A server that serves it but refuses it to this
    /// node for now (`ERR_POLICY`) is up. Then this node tries to take the pool, which
    /// sanlock allows only once the server's host is dead (fenced or reset) or has let the
    /// lease go: the server writes nothing after that.
    fn unanswered(&self, nbd: &Serving, id: &str, a: &Attached, r: &ServeRecord) -> bool {
        if !self.due(id, a) {
            return false;
        }
        let setup = nbd.setup();
        let to = super::shared::reach(r.addr, setup.addr);
        let name = export_name(&a.board.lv_id, setup.host_id, &r.secret);
        let e = match attach::probe(to, Some(setup.addr), name.as_bytes(), PROBE_TIMEOUT) {
            Ok(()) => return false,
            // Up, just not serving this node now (its slot is being claimed again, the
            // export is full): the pool's lease would refuse a takeover.
            Err(e @ attach::ProbeError::TurnedAway(_)) => {
                tracing::debug!(volume_id = %id, error = %e, "the pool's server is up but refuses this node for now");
                return false;
            }
            Err(attach::ProbeError::Gone(e)) => e,
        };
        tracing::info!(volume_id = %id, server = %to, error = %e, "the pool's server does not serve the volume: taking the pool once its lease is free");
        true
    }

    /// Is a check of attached volume `id` due (one every [`PROBE_EVERY`])? Marks it done
    /// in the entry when it still is `a`'s device (nothing else of the entry is written).
    fn due(&self, id: &str, a: &Attached) -> bool {
        if a.probed.is_some_and(|t| t.elapsed() < PROBE_EVERY) {
            return false;
        }
        if let Some(s) = self.staged().get_mut(id) {
            if let Some(Remote::Attached(now)) = &mut s.remote {
                if now.index == a.index && now.slot.0 == a.slot.0 {
                    now.probed = Some(Instant::now());
                }
            }
        }
        true
    }

    /// This node takes the pool: activate (once the lease is free), serve, switch the
    /// wrapper to the thin LV. A wrapper not held yet (the server died, or this node missed
    /// the pause) first has its NBD device's queued I/O sent to the new local export.
    fn take_over(&self, nbd: &Serving, id: &str, a: &Attached) -> Result<(), String> {
        let session = self.backend.session();
        let backend = self.config.activation.as_ref();
        let act = match session.activate(&a.board.vg, &a.board.lv, false, false, backend) {
            Ok(act) => act,
            // The old server has not released yet: the next look tries again.
            Err(lvmeta::Error::Lease(LeaseError::Busy { .. })) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        };
        let size = match self.start_serving(nbd, &act, &a.board) {
            Ok(size) => size,
            Err(e) => {
                if act.deactivate(backend).is_err() {
                    act.keep_lease();
                }
                return Err(e.message().to_owned());
            }
        };
        if !a.held {
            // The dead server's connections may look alive to the kernel still.
            a.sockets.end();
            let local = nbd
                .local_stream(&a.board.lv_id)
                .and_then(|sock| {
                    let fd = std::os::fd::AsFd::as_fd(&sock);
                    NbdNetlink::open()
                        .and_then(|nl| nl.reconfigure(a.index, &identifier(&a.board), &[fd], None))
                })
                .and_then(|()| backend.hold(&a.wrap).map_err(std::io::Error::other));
            if let Err(e) = local {
                // Serving goes on and the pool stays held (the activation kept in the
                // entry); this node's own device is moved on the next look.
                if let Some(s) = self.staged().get_mut(id) {
                    s.activation = Some(act);
                }
                return Err(format!(
                    "cannot move this node's NBD device to the local export: {e}"
                ));
            }
        }
        let thin = act.device.to_string_lossy().into_owned();
        let switched = backend
            .switch(&a.wrap, &thin, Sectors(size / 512), a.slot.1.read_only)
            .and_then(|()| backend.release(&a.wrap));
        if let Err(e) = switched {
            // Still over the NBD device of a server that is gone: serving goes on, and
            // the wrapper stays held until an unstage removes it.
            tracing::error!(volume_id = %id, error = %e, "cannot switch the wrapper to the thin LV");
        }
        if let Err(e) = NbdNetlink::open().and_then(|nl| nl.disconnect(a.index)) {
            tracing::warn!(volume_id = %id, nbd = a.index, error = %e, "cannot disconnect the NBD device");
        }
        if let Err(e) = self.leave_slot(a) {
            tracing::warn!(volume_id = %id, error = %e, "cannot leave the board slot");
        }
        if let Some(s) = self.staged().get_mut(id) {
            s.activation = Some(act);
            s.remote = Some(Remote::Served {
                wrap: a.wrap.clone(),
                board: a.board.clone(),
                read_only: a.slot.1.read_only,
            });
        }
        tracing::info!(volume_id = %id, "took the pool over: served from here");
        Ok(())
    }

    /// Another node serves now: connect to it and release the wrapper.
    fn reconnect(
        &self,
        nbd: &Serving,
        id: &str,
        mut a: Attached,
        r: &ServeRecord,
    ) -> Result<(), String> {
        let backend = self.config.activation.as_ref();
        // Not held (the old server died, or this node missed the pause): no hold now, its
        // I/O in flight is stuck in the NBD device until the new sockets take it.
        // The new server admits this node only with its slot STAGED for the new epoch.
        self.write_slot(&a, SlotState::Staged, r.epoch)
            .map_err(|e| e.to_string())?;
        let setup = nbd.setup();
        let to = super::shared::reach(r.addr, setup.addr);
        let name = export_name(&a.board.lv_id, setup.host_id, &r.secret);
        // The old connections are ended first: the kernel fills dead slots only.
        a.sockets.end();
        let (socks, _) =
            attach::handshake_sockets(to, Some(setup.addr), name.as_bytes(), setup.connections)
                .map_err(|e| e.to_string())?;
        let fds: Vec<_> = socks.iter().map(std::os::fd::AsFd::as_fd).collect();
        NbdNetlink::open()
            .and_then(|nl| nl.reconfigure(a.index, &identifier(&a.board), &fds, None))
            .map_err(|e| e.to_string())?;
        // Recorded before the release: a release that fails is retried by the next look
        // (Resume) with these sockets, not by another reconnect.
        a.sockets = attach::Sockets::new(socks);
        a.server = (r.host, r.epoch);
        a.slot.1.epoch = r.epoch;
        a.slot.1.state = SlotState::Staged;
        self.update(id, &a);
        if a.held {
            backend.release(&a.wrap).map_err(|e| e.to_string())?;
            a.held = false;
            self.update(id, &a);
        }
        tracing::info!(volume_id = %id, server = %to, epoch = r.epoch, "reconnected to the pool's new server");
        Ok(())
    }
}

/// Has `a`'s slot reported `state` for record `r`'s epoch (or can it report nothing: it
/// has no slot)?
fn reported(a: &Attached, state: SlotState, r: &ServeRecord) -> bool {
    a.slot.0 == super::slot::NO_SLOT || (a.slot.1.state, a.slot.1.epoch) == (state, r.epoch)
}
