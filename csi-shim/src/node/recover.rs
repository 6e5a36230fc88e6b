//! Thin volumes shared over NBD, found again when a node plugin starts (a restart, an
//! upgrade): their wrappers and NBD devices outlived the process, their data path must not
//! stop with it.
//!
//! - A wrapper over this host's thin LV: this node served it. The LV is activated again
//!   (the lease the ended process left as an orphan is adopted) and served under a new
//!   epoch and secret; its clients see the new record and reconnect.
//! - A wrapper over one of this volume's NBD devices: this node attached it. It is watched
//!   again, from its slot on the board; a server that changed meanwhile is reconnected to.
//! - Either way the volume is staged again with no staging path, which kubelet's next
//!   NodeStage sets and its NodeUnstage tears down as usual.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use lvmeta::activate::wrap::Wrap;
use lvmeta::lease::board::{Slot, SlotState};
use lvmeta::session::PoolBoard;

use crate::attach;
use crate::serve::Serving;
use crate::volume::Mode;

use super::shared::{identifier, Attached, Remote};
use super::slot::NO_SLOT;
use super::{Node, Staged};

/// `major:minor` of the block device at `path`, when there is one.
fn devnum(path: &Path) -> Option<(u32, u32)> {
    let rdev = std::fs::metadata(path).ok()?.rdev();
    let major = u32::try_from(nix::sys::stat::major(rdev)).ok()?;
    let minor = u32::try_from(nix::sys::stat::minor(rdev)).ok()?;
    Some((major, minor))
}

impl Node {
    /// Finds the thin volumes of the served VGs that this host shares over NBD and takes
    /// them up again (see the module); returns how many. Called once, before serving.
    pub fn recover_shared(&self) -> usize {
        let Some(nbd) = self.nbd.as_deref() else {
            return 0;
        };
        let mut found = 0;
        for vg in self.backend.vgs().to_vec() {
            let view = match self.backend.session().vg(&vg) {
                Ok(v) => v,
                Err(e) => {
                    tracing::warn!(vg, error = %e, "cannot read the VG to find shared volumes");
                    continue;
                }
            };
            let host = nbd.setup().host_id;
            let vg_id = view.id.to_string();
            for lv in view.lvs.iter().filter(|l| l.thin_pool().is_some()) {
                // One device-mapper lookup per thin LV; the board (a read under the VG
                // lease) only for those this host has a wrapper of.
                let wrap = Wrap::new(host, &vg_id, &lv.id.to_string());
                let backing = match self.config.activation.wrapped(&wrap) {
                    Ok(Some(b)) => b,
                    Ok(None) => continue,
                    Err(e) => {
                        tracing::error!(vg, lv = %lv.name, error = %e, "cannot look for the volume's wrapper");
                        continue;
                    }
                };
                match self.recover_one(nbd, &vg, &lv.name, wrap, backing) {
                    Ok(true) => found += 1,
                    Ok(false) => {}
                    Err(e) => {
                        tracing::error!(vg, lv = %lv.name, error = %e, "a volume shared over NBD could not be taken up again")
                    }
                }
            }
        }
        if found > 0 {
            tracing::info!(volumes = found, "volumes shared over NBD taken up again");
        }
        found
    }

    /// Takes thin LV `lv` of `vg` up again: this host has `wrap` of it over `backing`.
    fn recover_one(
        &self,
        nbd: &Serving,
        vg: &str,
        lv: &str,
        wrap: Wrap,
        backing: (u32, u32),
    ) -> Result<bool, String> {
        let session = self.backend.session();
        let backend = self.config.activation.as_ref();
        let Some(board) = session.pool_board(vg, lv).map_err(|e| e.to_string())? else {
            return Ok(false);
        };
        let id = format!("{vg}/{lv}");
        let nbds = attach::devices_of(&identifier(&board)).map_err(|e| e.to_string())?;
        let attached = nbds
            .into_iter()
            .find(|i| devnum(&attach::device_path(*i)) == Some(backing));
        let (activation, remote) = match attached {
            Some(index) => (None, self.attached_again(nbd, &board, wrap.clone(), index)?),
            None => {
                let act = session
                    .activate(vg, lv, false, false, backend)
                    .map_err(|e| e.to_string())?;
                let served = match devnum(&act.device) == Some(backing) {
                    true => self
                        .start_serving(nbd, &act, &board)
                        .map(drop)
                        .map_err(|e| e.message().to_owned()),
                    false => Err(format!(
                        "wrapper {} maps {}:{}, neither this LV nor its NBD device",
                        wrap.upper_name(),
                        backing.0,
                        backing.1
                    )),
                };
                if let Err(e) = served {
                    // The LV stays active under a wrapper pods may write through: its lease
                    // stays held (an orphan once this process ends), never released.
                    act.keep_lease();
                    return Err(e);
                }
                let remote = Remote::Served {
                    wrap: wrap.clone(),
                    board,
                    read_only: false,
                };
                (Some(act), remote)
            }
        };
        tracing::info!(volume_id = %id, served = activation.is_some(), "shared volume taken up again");
        self.staged().insert(
            id,
            Staged {
                activation,
                device: wrap.upper_path(),
                remote: Some(remote),
                staging: None,
                fs: None,
                mode: Mode::Thin,
                targets: Vec::new(),
            },
        );
        Ok(true)
    }

    /// The attached volume of `board` on NBD device `index`, from this host's slot.
    fn attached_again(
        &self,
        nbd: &Serving,
        board: &PoolBoard,
        wrap: Wrap,
        index: u32,
    ) -> Result<Remote, String> {
        let me = nbd.setup().host_id;
        let found = self
            .backend
            .session()
            .read_board(board)
            .map_err(|e| e.to_string())?;
        // None: another host took it while none was free; the watch claims one
        // (`keep_slot`), and until then this node writes none.
        let slot = found
            .slots_of(&board.lv_id)
            .find(|(_, s)| s.host == me && s.state != SlotState::Leaving)
            .cloned()
            .unwrap_or_else(|| {
                tracing::warn!(lv = %board.lv, "no board slot of this host: claiming one");
                (NO_SLOT, slot_without_place(board, me, index, nbd))
            });
        // Whether the last process's reconnect reached the kernel is unknown (it writes
        // the slot first): the watch reconnects to the serving host at its first look.
        // The kernel takes the new sockets only where its own are dead; the others are
        // this process's to end on the next reconnect.
        // - Held when the last process stopped mid-handover: that reconnect releases it.
        //   Unknown counts as held (a needless release is harmless, a missed one hangs I/O).
        let held = self.config.activation.held(&wrap).unwrap_or(true);
        let server = (0, slot.1.epoch);
        Ok(Remote::Attached(Attached {
            wrap,
            index,
            board: board.clone(),
            server,
            held,
            probed: None,
            slot,
            sockets: attach::Sockets::default(),
        }))
    }
}

/// The slot an attachment on NBD device `index` stands for, when the board has none of
/// this host's: STAGED, read-only as the device is (or when that cannot be read).
fn slot_without_place(board: &PoolBoard, me: u64, index: u32, nbd: &Serving) -> Slot {
    let ro = std::fs::read_to_string(format!("/sys/block/nbd{index}/ro"));
    Slot {
        lv_id: board.lv_id.replace('-', ""),
        host: me,
        generation: 0,
        state: SlotState::Staged,
        read_only: ro.map_or(true, |r| r.trim() != "0"),
        epoch: 0,
        written_ms: super::shared::now_ms(),
        addr: nbd.setup().addr.ip(),
    }
}
