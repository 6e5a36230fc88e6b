//! This node's slots on the pools' serve boards, for the volumes it attached over NBD.
//!
//! - A slot is claimed under the VG lease ([`lvmeta::session::Session::claim_board_slot`]);
//!   another host may reuse it once this host's life has ended (DEAD or FREE).
//! - So a slot is written without the VG lease only in the generation it was claimed or
//!   last checked in; a slot of an earlier life of this host may be another's by now.
//! - Every [`super::handover::PROBE_EVERY`], [`Node::keep_slot`] checks each slot under
//!   the VG lease: written again in this host's new generation, or claimed anew when
//!   another host took it. With none free, the attachment has no slot ([`NO_SLOT`]) and
//!   writes nothing until one is.

use lvmeta::lease::board::{Slot, SlotState, SLOTS};

use crate::serve::Serving;

use super::shared::{now_ms, Attached, Remote};
use super::Node;

/// The slot index of an attachment whose slot another host took when none was free.
pub(super) const NO_SLOT: usize = SLOTS;

impl Node {
    /// Rewrites this node's slot of `a` in `state` for `epoch`:
    /// - at once when this host is in the lockspace in the generation the slot was written
    ///   in;
    /// - under the VG lease, and only while the slot is still this host's, when the lock
    ///   manager cannot say (just after a join);
    /// - not at all when it has none, or was written in an earlier life of this host (it
    ///   may be another host's now; [`Node::keep_slot`] sees to it).
    pub(super) fn write_slot(
        &self,
        a: &Attached,
        state: SlotState,
        epoch: u64,
    ) -> Result<(), lvmeta::Error> {
        let session = self.backend.session();
        let slot = Slot {
            state,
            epoch,
            written_ms: now_ms(),
            ..a.slot.1.clone()
        };
        let refused = |why: String| -> lvmeta::Error {
            lvmeta::lease::LeaseError::Manager {
                what: format!("board slot {} of {}/{}", a.slot.0, a.board.vg, a.board.lv),
                why,
            }
            .into()
        };
        match session.own_generation(&a.board) {
            _ if a.slot.0 == NO_SLOT => Err(refused("this node has none".into())),
            Some(g) if g == a.slot.1.generation => {
                session.write_board_slot(&a.board, a.slot.0, &slot)
            }
            Some(g) => Err(refused(format!(
                "written in generation {} of this host, which is now {g}: written again \
                 once checked under the VG lease",
                a.slot.1.generation
            ))),
            None => match session.rewrite_own_board_slot(&a.board, a.slot.0, &slot)? {
                true => Ok(()),
                false => Err(refused("another host's now".into())),
            },
        }
    }

    /// Writes LEAVING over this node's slots of `a`'s LV, under the VG lease (never over a
    /// slot another host reused).
    pub(super) fn leave_slot(&self, a: &Attached) -> Result<(), lvmeta::Error> {
        let session = self.backend.session();
        session
            .leave_board_slots(&a.board, a.slot.1.host, now_ms())
            .map(drop)
    }

    /// Keeps attached volume `id`'s slot this host's, under the VG lease:
    /// - written again, as it stands, when it was written in an earlier generation of
    ///   this host (the lockspace was joined again since): servers count only slots of
    ///   their hosts' current lives;
    /// - claimed anew when another host took it (it saw this host's life end), or left
    ///   without one ([`NO_SLOT`]) when none is free.
    pub(super) fn keep_slot(&self, nbd: &Serving, id: &str, a: &Attached) -> Result<(), String> {
        let session = self.backend.session();
        let Some(generation) = session.own_generation(&a.board) else {
            return Ok(());
        };
        // Under the volume's in-flight mark, and only while it is still attached through
        // the same slot: an unstage frees the slot (LEAVING), and another host may claim it.
        let Ok(_g) = self.backend.inflight().enter(id) else {
            return Ok(());
        };
        let Some(mut now) = self.attached(id).filter(|now| now.slot.0 == a.slot.0) else {
            return Ok(());
        };
        let me = nbd.setup().host_id;
        let found = session.read_board(&a.board).map_err(|e| e.to_string())?;
        let own = found
            .slots_of(&a.board.lv_id)
            .find(|(i, s)| *i == a.slot.0 && s.host == me)
            .map(|(_, s)| s);
        if own.is_some_and(|s| s.generation == generation || s.state == SlotState::Leaving) {
            return Ok(());
        }
        let mut slot = Slot {
            written_ms: now_ms(),
            ..now.slot.1.clone()
        };
        let lost = own.is_none();
        match session.claim_board_slot(&a.board, &mut slot) {
            Ok(index) if lost => {
                tracing::warn!(volume_id = %id, lost = a.slot.0, claimed = index, "this node's board slot was taken by another host; claimed another");
                now.slot = (index, slot);
            }
            Ok(index) => {
                tracing::info!(volume_id = %id, generation, slot = index, "slot written in this host's new generation");
                now.slot = (index, slot);
            }
            Err(e) if lost => {
                now.slot.0 = NO_SLOT;
                self.update(id, &now);
                return Err(format!(
                    "this node's board slot was taken by another host, and no other is free: {e}"
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
        self.update(id, &now);
        Ok(())
    }

    /// Attached volume `id` as staged now.
    pub(super) fn attached(&self, id: &str) -> Option<Attached> {
        match &self.staged().get(id)?.remote {
            Some(Remote::Attached(a)) => Some(a.clone()),
            _ => None,
        }
    }

    /// Replaces attached volume `id`'s entry (when it is still attached).
    pub(super) fn update(&self, id: &str, a: &Attached) {
        if let Some(s) = self.staged().get_mut(id) {
            if matches!(s.remote, Some(Remote::Attached(_))) {
                s.remote = Some(Remote::Attached(a.clone()));
            }
        }
    }
}
