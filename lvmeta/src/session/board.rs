//! A thin pool's serve board ([`crate::lease::board`]) through a session: where it lies,
//! read, its record written by the pool's holder, and a slot claimed under the VG lease.
//!
//! - The record is written only with the pool's lease held exclusively here (the caller
//!   passes the [`Activation`] that holds it).
//! - A slot is chosen and written with the VG lease held exclusively, so two hosts never
//!   take one slot; afterwards only its host writes it.
//! - Every write is one sector, durable on return.

use std::path::Path;

use super::{places, Session};
use crate::activate::Activation;
use crate::dev::FileDevice;
use crate::lease::board::{Board, ServeRecord, Slot};
use crate::lease::{self, board_io, ResourceSpec};
use crate::Error;

/// Where the board of the pool under one thin LV lies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolBoard {
    /// The VG.
    pub vg: String,
    /// The VG's id.
    pub vg_id: String,
    /// The thin LV.
    pub lv: String,
    /// The thin LV's id.
    pub lv_id: String,
    /// The pool LV.
    pub pool: String,
    /// The pool LV's id (the board's entries name it).
    pub pool_lv_id: String,
    /// The pool's lease (the board is in its area).
    pub spec: ResourceSpec,
}

impl Session {
    /// The board of the pool under thin LV `lv` of shared VG `vg`, read under the VG lease;
    /// `None` when `lv` is not a thin LV of a shared VG (it has no board).
    pub fn pool_board(&self, vg: &str, lv: &str) -> Result<Option<PoolBoard>, Error> {
        let (scan, _locks) = self.read_locked(&[vg])?;
        let sv = scan.vg(vg)?;
        let l = sv.vg.lv(lv).ok_or_else(|| Error::LvNotFound {
            vg: vg.to_owned(),
            lv: lv.to_owned(),
        })?;
        let Some(pool) = l.thin_pool() else {
            return Ok(None);
        };
        let at = places(&scan, sv);
        let Some(spec) = lease::layout::lv_lease(&sv.vg, &at.paths, pool, at.geometry) else {
            return Ok(None);
        };
        Ok(Some(PoolBoard {
            vg: vg.to_owned(),
            vg_id: sv.vg.id.to_string(),
            lv: lv.to_owned(),
            lv_id: l.id.to_string(),
            pool: pool.to_owned(),
            pool_lv_id: spec.name.clone(),
            spec,
        }))
    }

    /// The board as it is on the lock device now.
    pub fn read_board(&self, b: &PoolBoard) -> Result<Board, Error> {
        let dev = lock_device(&b.spec)?;
        Ok(board_io::read(&dev, &b.spec, &b.pool_lv_id)?)
    }

    /// Writes the pool's serve record, stamped with this host's generation; `held` must be
    /// this host's exclusive hold of the pool (an activation of one of its thin LVs).
    pub fn write_serve_record(
        &self,
        b: &PoolBoard,
        held: &Activation,
        record: &ServeRecord,
    ) -> Result<(), Error> {
        let pool_held = matches!(&held.placement.layout,
            crate::activate::Layout::Thin { pool, .. } if pool.name == b.pool)
            && held.placement.vg == b.vg
            && held.mode == Some(lease::Mode::Exclusive);
        if !pool_held {
            return Err(lease::LeaseError::Manager {
                what: format!("serve record of {}/{}", b.vg, b.pool),
                why: "written only by the holder of the pool's lease".into(),
            }
            .into());
        }
        let record = ServeRecord {
            generation: self.own_generation(b).unwrap_or(record.generation),
            ..record.clone()
        };
        let dev = lock_device(&b.spec)?;
        Ok(board_io::write_record(
            &dev,
            &b.spec,
            &b.pool_lv_id,
            &record,
        )?)
    }

    /// Claims a slot for `slot` (this host's own for its LV, else a free one, else one of
    /// another host's ended life) and writes it, stamped with this host's generation in
    /// the lockspace, under the VG lease held exclusively; the slot's index
    /// ([`lease::board::BoardError::Full`] when every slot is taken).
    pub fn claim_board_slot(&self, b: &PoolBoard, slot: &mut Slot) -> Result<usize, Error> {
        slot.generation = self.own_generation(b).unwrap_or(slot.generation);
        let view = |id| self.host_view(b, id);
        let slot = &*slot;
        self.under_vg_lease(b, |dev| {
            Ok(board_io::claim(dev, &b.spec, &b.pool_lv_id, slot, &view)?)
        })
    }

    /// Writes LEAVING over every slot of host `host` for the board's LV that is not
    /// LEAVING yet, under the VG lease held exclusively (so none that another host reused
    /// meanwhile); how many.
    pub fn leave_board_slots(
        &self,
        b: &PoolBoard,
        host: u64,
        written_ms: u64,
    ) -> Result<usize, Error> {
        let generation = self.own_generation(b);
        self.under_vg_lease(b, |dev| {
            let board = board_io::read(dev, &b.spec, &b.pool_lv_id)?;
            let mut left = 0;
            for (i, s) in board.slots_of(&b.lv_id) {
                if s.host != host || s.state == lease::board::SlotState::Leaving {
                    continue;
                }
                let leaving = Slot {
                    state: lease::board::SlotState::Leaving,
                    generation: generation.unwrap_or(s.generation),
                    written_ms,
                    ..s.clone()
                };
                board_io::write_slot(dev, &b.spec, &b.pool_lv_id, *i, &leaving)?;
                left += 1;
            }
            Ok(left)
        })
    }

    /// Writes `slot` over slot `index` under the VG lease held exclusively, stamped with
    /// this host's generation, only while that slot is still `slot.host`'s for the same LV
    /// (another host may have reused it); whether it was.
    pub fn rewrite_own_board_slot(
        &self,
        b: &PoolBoard,
        index: usize,
        slot: &Slot,
    ) -> Result<bool, Error> {
        let slot = Slot {
            generation: self.own_generation(b).unwrap_or(slot.generation),
            ..slot.clone()
        };
        self.under_vg_lease(b, |dev| {
            let board = board_io::read(dev, &b.spec, &b.pool_lv_id)?;
            let own = board
                .slots
                .iter()
                .any(|(i, s)| *i == index && s.host == slot.host && s.lv_id == slot.lv_id);
            if own {
                board_io::write_slot(dev, &b.spec, &b.pool_lv_id, index, &slot)?;
            }
            Ok(own)
        })
    }

    /// Runs `f` on the pool's lock device with the VG lease held exclusively: no other
    /// host claims or leaves board slots meanwhile. The lease goes back without a value
    /// block (the VG is unchanged); what `f` did stands whatever the release says.
    fn under_vg_lease<T>(
        &self,
        b: &PoolBoard,
        f: impl FnOnce(&FileDevice) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let scan = self.current();
        let sv = scan.vg(&b.vg)?;
        let at = places(&scan, sv);
        let h = self
            .host_for(&sv.vg)?
            .ok_or_else(|| Error::SharedWithoutLeases(b.vg.clone()))?;
        let (vg_lease, _) = h.lock_vg(&sv.vg, &at, lease::Mode::Exclusive)?;
        let done = lock_device(&b.spec).and_then(|dev| f(&dev));
        if let Err(e) = h.unlock_vg(&vg_lease, None) {
            tracing::warn!(vg = %b.vg, error = %e, "releasing the VG lease after a board slot change");
        }
        done
    }

    /// Rewrites slot `index`, which this host claimed, stamped with this host's generation.
    pub fn write_board_slot(&self, b: &PoolBoard, index: usize, slot: &Slot) -> Result<(), Error> {
        let slot = Slot {
            generation: self.own_generation(b).unwrap_or(slot.generation),
            ..slot.clone()
        };
        let dev = lock_device(&b.spec)?;
        Ok(board_io::write_slot(
            &dev,
            &b.spec,
            &b.pool_lv_id,
            index,
            &slot,
        )?)
    }

    /// The board as [`Session::read_board`] reads it, without the slots of host lives
    /// that have ended ([`Slot::is_stale`]): the hosts that may still have the LV staged.
    /// A slot whose host the lock manager cannot say anything of counts.
    pub fn read_board_live(&self, b: &PoolBoard) -> Result<Board, Error> {
        let board = self.read_board(b)?;
        let views = board.host_views(&|id| self.host_view(b, id));
        Ok(board.without_stale(&views))
    }

    /// This host's generation in the pool's lockspace (None when the manager cannot say).
    pub fn own_generation(&self, b: &PoolBoard) -> Option<u64> {
        let id = self.host.as_ref()?.host_id;
        self.host_view(b, id).map(|h| h.generation)
    }

    /// Host `id` of the pool's lockspace as this host's lock manager sees it now (None when
    /// it cannot say: not joined here, not read yet, or no manager).
    fn host_view(&self, b: &PoolBoard, id: u64) -> Option<lease::HostView> {
        let h = self.host.as_ref()?;
        match h.manager.host(&b.spec.lockspace, id) {
            Ok(view) => view,
            Err(e) => {
                tracing::debug!(vg = %b.vg, pool = %b.pool, host_id = id, error = %e, "no view of the host in the lockspace");
                None
            }
        }
    }
}

/// The device holding lease `r`, opened for direct, durable sector I/O.
fn lock_device(r: &ResourceSpec) -> Result<FileDevice, Error> {
    FileDevice::open_rw(Path::new(&r.path)).map_err(|source| {
        lease::LeaseError::Manager {
            what: format!("lock device {} of lease {}", r.path, r.name),
            why: source.to_string(),
        }
        .into()
    })
}
