//! Group commit: the changes to one VG that arrive while a group of its changes is being
//! written wait, then go together into the next group, which one commit writes (one lease
//! acquire, one text, two ordered writes per area), as a database turns serial fsyncs into
//! throughput.
//!
//! Who does what, per VG:
//! - A caller that finds no leader leads the next group ([`Turn::Lead`]): it takes the
//!   locks, reads the VG, applies its own edit, then opens the group's bench to the callers
//!   waiting at that moment ([`Groups::gather`]) and waits until each has applied its edit.
//! - Each of those members applies its own edit, on its own thread, one at a time in
//!   arrival order (under this module's lock) to the bench ([`Turn::Join`]); an edit that
//!   fails leaves the bench as it was and fails its caller alone.
//! - The leader takes the bench back (end of [`Groups::gather`]), writes it, posts the outcome
//!   ([`Groups::finish`]) and steps down; the members return that outcome with the value of
//!   their own edit. A caller that came after the bench opened waits for the next group.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::Error;

/// What a written group ends with: the committed seqno, or why the group failed (shared by
/// its members).
pub(super) type Outcome = Result<u32, Arc<Error>>;

/// The groups of a session, by VG. `B` is the bench: the group's VG and what its edits
/// need written before and after the commit.
pub(super) struct Groups<B> {
    state: Mutex<HashMap<String, Queue<B>>>,
    turn: Condvar,
}

impl<B> Default for Groups<B> {
    fn default() -> Self {
        Self {
            state: Mutex::new(HashMap::new()),
            turn: Condvar::new(),
        }
    }
}

/// One VG's callers.
struct Queue<B> {
    /// A leader is forming or writing a group.
    leading: bool,
    /// The tickets of the callers waiting to join a group (the leader not counted).
    waiting: BTreeSet<u64>,
    /// The next caller's ticket: callers are served in arrival order.
    next_ticket: u64,
    /// The group open for edits.
    open: Option<Open<B>>,
    /// The next group's number.
    next_group: u64,
    /// Outcomes of groups with members (`None` until written), with the number of members
    /// still to collect them.
    outcomes: HashMap<u64, (Option<Outcome>, usize)>,
}

impl<B> Default for Queue<B> {
    fn default() -> Self {
        Self {
            leading: false,
            waiting: BTreeSet::new(),
            next_ticket: 0,
            open: None,
            next_group: 0,
            outcomes: HashMap::new(),
        }
    }
}

/// A group open for its members' edits.
struct Open<B> {
    group: u64,
    /// The members that have not applied their edit yet, by ticket: they apply in that
    /// order (arrival order).
    pending: BTreeSet<u64>,
    /// Members whose edit went in: they wait for the outcome.
    joined: usize,
    bench: B,
}

/// What a caller does next.
pub(super) enum Turn<'g, B> {
    /// Lead a group: [`Groups::gather`], then [`Groups::finish`].
    Lead,
    /// Apply the edit to the open group's bench (held locked by the guard), then report
    /// with [`Member::applied`].
    Join(Member<'g, B>),
}

/// A member applying its edit: the bench, locked.
pub(super) struct Member<'g, B> {
    groups: &'g Groups<B>,
    state: MutexGuard<'g, HashMap<String, Queue<B>>>,
    vg: String,
    ticket: u64,
    /// Reported with [`Member::applied`]; a member dropped unreported (its edit panicked)
    /// counts as failed, so the leader does not wait for it forever.
    reported: bool,
}

impl<B> Member<'_, B> {
    /// The open group's bench.
    pub(super) fn bench(&mut self) -> &mut B {
        let open = self.state.get_mut(&self.vg).and_then(|q| q.open.as_mut());
        // Invariant: a Member exists only while its VG's group is open (see `Groups::turn`).
        &mut open.expect("an open group while a member applies").bench
    }

    /// Reports the edit: `joined` when it went in (the caller then waits for the outcome
    /// with [`Groups::outcome`], passing the returned group), else it failed alone.
    pub(super) fn applied(mut self, joined: bool) -> Option<u64> {
        self.reported = true;
        self.report(joined)
    }

    fn report(&mut self, joined: bool) -> Option<u64> {
        let q = self.state.entry(self.vg.clone()).or_default();
        let open = q.open.as_mut()?;
        open.pending.remove(&self.ticket);
        let group = open.group;
        if joined {
            open.joined += 1;
        }
        self.groups.turn.notify_all();
        joined.then_some(group)
    }
}

impl<B> Drop for Member<'_, B> {
    fn drop(&mut self) {
        if !self.reported {
            self.report(false);
        }
    }
}

impl<B> Groups<B> {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Queue<B>>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'g>(
        &self,
        g: MutexGuard<'g, HashMap<String, Queue<B>>>,
    ) -> MutexGuard<'g, HashMap<String, Queue<B>>> {
        self.turn.wait(g).unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for this caller's turn on `vg`: to lead a group, or to join the open one.
    /// `alone`: a change that must be its own group (it only ever leads, and nobody joins
    /// it: see [`Groups::gather`]).
    pub(super) fn turn(&self, vg: &str, alone: bool) -> Turn<'_, B> {
        let mut state = self.lock();
        let q = state.entry(vg.to_owned()).or_default();
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        // Only callers that may join count as waiting (a group waits for each of them).
        if !alone {
            q.waiting.insert(ticket);
        }
        loop {
            let q = state.entry(vg.to_owned()).or_default();
            // A member's turn comes when the members before it have applied theirs.
            let turn = q
                .open
                .as_ref()
                .is_some_and(|o| o.pending.first() == Some(&ticket));
            if turn {
                return Turn::Join(Member {
                    groups: self,
                    state,
                    vg: vg.to_owned(),
                    ticket,
                    reported: false,
                });
            }
            let member = q.open.as_ref().is_some_and(|o| o.pending.contains(&ticket));
            if !member && !q.leading && q.open.is_none() {
                q.waiting.remove(&ticket);
                q.leading = true;
                return Turn::Lead;
            }
            state = self.wait(state);
        }
    }

    /// The leader opens its group to the callers waiting now, and waits until each has
    /// applied its edit to `bench` (or failed alone). Returns the bench and, when edits of
    /// members went in, the group's number for [`Groups::finish`]. A leader of a change
    /// that must be alone does not call this.
    pub(super) fn gather(&self, vg: &str, bench: B) -> (B, Option<u64>) {
        let mut state = self.lock();
        let q = state.entry(vg.to_owned()).or_default();
        if q.waiting.is_empty() {
            return (bench, None);
        }
        let group = q.next_group;
        q.next_group += 1;
        q.open = Some(Open {
            group,
            pending: std::mem::take(&mut q.waiting),
            joined: 0,
            bench,
        });
        self.turn.notify_all();
        loop {
            let q = state.entry(vg.to_owned()).or_default();
            if q.open.as_ref().is_some_and(|o| o.pending.is_empty()) {
                // Invariant: only the leader closes the group it opened.
                let open = q.open.take().expect("the open group");
                if open.joined == 0 {
                    return (open.bench, None);
                }
                q.outcomes.insert(open.group, (None, open.joined));
                return (open.bench, Some(group));
            }
            state = self.wait(state);
        }
    }

    /// The leader posts the outcome of its group (`group` as [`Groups::gather`] returned
    /// it) and steps down; the next waiting caller leads.
    pub(super) fn finish(&self, vg: &str, group: Option<u64>, outcome: &Outcome) {
        let mut state = self.lock();
        let q = state.entry(vg.to_owned()).or_default();
        if let Some((o, _)) = group.and_then(|g| q.outcomes.get_mut(&g)) {
            *o = Some(outcome.clone());
        }
        q.leading = false;
        self.turn.notify_all();
    }

    /// A member's wait for the outcome of `group`.
    pub(super) fn outcome(&self, vg: &str, group: u64) -> Outcome {
        let mut state = self.lock();
        loop {
            let q = state.entry(vg.to_owned()).or_default();
            if let Some((Some(o), left)) = q.outcomes.get_mut(&group) {
                let out = o.clone();
                *left -= 1;
                if *left == 0 {
                    q.outcomes.remove(&group);
                }
                return out;
            }
            state = self.wait(state);
        }
    }
}
