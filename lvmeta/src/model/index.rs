//! What the LVs of one VG version hold that no other LV may, counted, so that a change of a
//! few LVs is checked and allocated in work proportional to the change, not to the VG.
//!
//! - `diff` finds what a change did by the identity of the LVs' allocations: an edit copies
//!   an LV it changes ([`crate::model::Vg::lv_mut`]), so an LV both versions share is
//!   untouched.
//! - [`VgIndex`] counts names, ids, lease offsets, thin device ids, references and spares by
//!   their hash, and keeps the used extents. Hashes only ever report a conflict that is not
//!   there (a collision), never miss one: a caller that sees a possible conflict looks again
//!   the slow, exact way.
//! - [`Indexed`] is a version with its index: what the edits of a group commit start from.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use super::{Lv, SegKind, Vg};
use crate::model::extents::{extents_of, PeRun, UsedMap};

/// Below this many LVs a change is looked at the plain way. Debug builds (the tests) take
/// the indexed way at every size but the empty VG, and check it against the full checks.
const SMALL: usize = if cfg!(debug_assertions) { 1 } else { 64 };

/// Above this many LVs added, replaced or removed, the plain way is cheaper.
const MANY: usize = 32;

/// What a change did to the LVs, found by [`diff`].
pub(crate) struct Diff<'b, 'a> {
    /// LVs of the new version not in the old one (added, or copied and changed), with their
    /// positions in the new version.
    pub placed: Vec<(usize, &'a Lv)>,
    /// LVs of the old version not in the new one (removed, or the old copies of changed ones).
    pub removed: Vec<&'b Lv>,
}

/// What `after`, a change of `before`, changed; `None` when the change is not a small
/// change of the LVs alone (small VGs, the VG's own fields changed, many LVs changed, or one
/// LV twice in the new version): the caller then looks at everything.
pub(crate) fn diff<'b, 'a>(before: &'b Vg, after: &'a Vg) -> Option<Diff<'b, 'a>> {
    if after.lvs.len() < SMALL || !before.same_fields(after) {
        return None;
    }
    // Edits append, remove and replace in place: the LVs both versions share at the start
    // and at the end need no lookup.
    let (b, a) = (&before.lvs, &after.lvs);
    let head = b
        .iter()
        .zip(a)
        .take_while(|(x, y)| Arc::ptr_eq(x, y))
        .count();
    let tail = b[head..]
        .iter()
        .rev()
        .zip(a[head..].iter().rev())
        .take_while(|(x, y)| Arc::ptr_eq(x, y))
        .count();
    let (b_end, a_end) = (b.len() - tail, a.len() - tail);
    // Walk both middles in step; where they part, the nearest point (within MANY LVs)
    // where they meet again says what was removed or inserted there; else an LV was
    // replaced in place. What the walk sets apart are candidates, by position.
    let (mut bi, mut ai) = (head, head);
    let (mut b_cand, mut a_cand) = (Vec::new(), Vec::new());
    while bi < b_end && ai < a_end {
        if Arc::ptr_eq(&b[bi], &a[ai]) {
            bi += 1;
            ai += 1;
            continue;
        }
        let meets = |from: usize, end: usize, on: &[Arc<Lv>], other: &Arc<Lv>| {
            (1..=MANY)
                .take_while(|k| from + k < end)
                .find(|&k| Arc::ptr_eq(&on[from + k], other))
        };
        match (meets(bi, b_end, b, &a[ai]), meets(ai, a_end, a, &b[bi])) {
            (Some(k), s) if s.is_none_or(|s| k <= s) => {
                b_cand.extend(bi..bi + k);
                bi += k;
            }
            (_, Some(k)) => {
                a_cand.extend(ai..ai + k);
                ai += k;
            }
            _ => {
                b_cand.push(bi);
                a_cand.push(ai);
                bi += 1;
                ai += 1;
            }
        }
        if b_cand.len() + a_cand.len() > 2 * MANY {
            return None;
        }
    }
    b_cand.extend(bi..b_end);
    a_cand.extend(ai..a_end);
    if b_cand.len() + a_cand.len() > 2 * MANY {
        return None;
    }
    type Set<T> = std::collections::HashSet<T, foldhash::fast::RandomState>;
    let old: Set<*const Lv> = b_cand.iter().map(|&i| Arc::as_ptr(&b[i])).collect();
    let new: Set<*const Lv> = a_cand.iter().map(|&i| Arc::as_ptr(&a[i])).collect();
    // The same LV twice among the candidates (moved, or copied): the caller looks at all.
    if new.len() != a_cand.len() || old.len() != b_cand.len() {
        return None;
    }
    let placed: Vec<(usize, &Lv)> = a_cand
        .iter()
        .filter(|&&i| !old.contains(&Arc::as_ptr(&a[i])))
        .map(|&i| (i, &*a[i]))
        .collect();
    let removed: Vec<&Lv> = b_cand
        .iter()
        .filter(|&&i| !new.contains(&Arc::as_ptr(&b[i])))
        .map(|&i| &*b[i])
        .collect();
    (placed.len() + removed.len() <= MANY).then_some(Diff { placed, removed })
}

/// Counts by hash; a key whose count drops to 0 is removed.
type Counts = HashMap<u64, u32, foldhash::fast::RandomState>;

/// What one VG version's LVs hold, counted (see the module's notes).
#[derive(Debug, Clone)]
pub struct VgIndex {
    /// Seeded at random per index: hostile names cannot aim at collisions.
    hasher: foldhash::fast::RandomState,
    names: Counts,
    ids: Counts,
    /// Lease offsets in `lvmlock` (the offset itself, hashed again by the map).
    leases: Counts,
    /// (thin pool name, device id).
    thins: Counts,
    /// The names LVs refer to, once per reference.
    refs: Counts,
    spares: u32,
    used: UsedMap,
    /// The number of LVs indexed: an index used with a version of another size is not used.
    lvs: usize,
    /// A change took away what was not counted: the index no longer matches its version
    /// and is not used (every question then gets the plain answer).
    drifted: bool,
}

/// Which count a key is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Id,
    Lease,
    Thin,
    Ref,
}

/// A change of an [`VgIndex`], computed while the versions are at hand and applied later
/// ([`VgIndex::apply`]).
#[derive(Debug, Default)]
pub struct IndexChange {
    counts: Vec<(Field, u64, bool)>,
    spares: i64,
    released: Vec<PeRun>,
    taken: Vec<PeRun>,
    /// LVs added less LVs removed.
    lvs: isize,
}

impl VgIndex {
    /// The index of `vg`.
    pub fn of(vg: &Vg) -> Self {
        Self::with_hasher(vg, foldhash::fast::RandomState::default())
    }

    fn with_hasher(vg: &Vg, hasher: foldhash::fast::RandomState) -> Self {
        let n = vg.lvs.len();
        let counts = |n: usize| Counts::with_capacity_and_hasher(n, Default::default());
        let mut ix = Self {
            hasher,
            names: counts(n),
            ids: counts(n),
            leases: counts(if vg.is_shared() { n } else { 0 }),
            thins: counts(n / 4),
            refs: counts(n),
            spares: 0,
            used: UsedMap::of(vg),
            lvs: vg.lvs.len(),
            drifted: false,
        };
        let h = ix.hasher.clone();
        for lv in &vg.lvs {
            each_key(&h, vg, lv, |f, k| ix.add(f, k));
            ix.spares += u32::from(super::validate::is_spare(lv));
        }
        ix
    }

    fn hash(&self, x: impl std::hash::Hash) -> u64 {
        self.hasher.hash_one(x)
    }

    fn counts(&self, f: Field) -> &Counts {
        match f {
            Field::Name => &self.names,
            Field::Id => &self.ids,
            Field::Lease => &self.leases,
            Field::Thin => &self.thins,
            Field::Ref => &self.refs,
        }
    }

    fn counts_mut(&mut self, f: Field) -> &mut Counts {
        match f {
            Field::Name => &mut self.names,
            Field::Id => &mut self.ids,
            Field::Lease => &mut self.leases,
            Field::Thin => &mut self.thins,
            Field::Ref => &mut self.refs,
        }
    }

    fn count(&self, f: Field, k: u64) -> u32 {
        self.counts(f).get(&k).copied().unwrap_or(0)
    }

    fn add(&mut self, f: Field, k: u64) {
        *self.counts_mut(f).entry(k).or_default() += 1;
    }

    fn sub(&mut self, f: Field, k: u64) {
        let c = self.counts_mut(f);
        match c.get_mut(&k) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    c.remove(&k);
                }
            }
            None => self.drifted = true,
        }
    }

    /// Whether this index may answer for `vg` (its version, as far as a cheap look tells).
    fn fits(&self, vg: &Vg) -> bool {
        !self.drifted && self.lvs == vg.lvs.len()
    }

    /// The keys `lv` (of `vg`) adds to the counts.
    fn keys_of(&self, vg: &Vg, lv: &Lv) -> Vec<(Field, u64)> {
        let mut out = Vec::new();
        each_key(&self.hasher, vg, lv, |f, k| out.push((f, k)));
        out
    }

    /// Whether the LVs `d` places in `after` (a change of `before`, this index's version)
    /// certainly share nothing exclusive with an LV outside the change (name, id, lease, thin
    /// device id, extents, the one pool metadata spare), and no LV outside the change refers
    /// to an LV the change touched. `false` means: look the exact way.
    pub(crate) fn clear_of(&self, before: &Vg, after: &Vg, d: &Diff<'_, '_>) -> bool {
        if !self.fits(before) {
            return false;
        }
        let removed: Vec<(Field, u64)> = d
            .removed
            .iter()
            .flat_map(|l| self.keys_of(before, l))
            .collect();
        let outside = |f: Field, k: u64| {
            let gone = removed.iter().filter(|&&(g, x)| g == f && x == k).count() as u32;
            self.count(f, k).saturating_sub(gone)
        };
        for (_, lv) in &d.placed {
            for (f, k) in self.keys_of(after, lv) {
                // A changed LV's references are checked with it; what others refer to is
                // looked at below.
                if !matches!(f, Field::Ref) && outside(f, k) > 0 {
                    return false;
                }
            }
        }
        let touched = d
            .placed
            .iter()
            .map(|(_, l)| *l)
            .chain(d.removed.iter().copied());
        for lv in touched {
            if outside(Field::Ref, self.hash(lv.name.as_str())) > 0 {
                return false;
            }
        }
        let spares = |lvs: &mut dyn Iterator<Item = &Lv>| {
            lvs.filter(|l| super::validate::is_spare(l)).count() as i64
        };
        let now = i64::from(self.spares) - spares(&mut d.removed.iter().copied())
            + spares(&mut d.placed.iter().map(|(_, l)| *l));
        if now > 1 {
            return false;
        }
        let mut used = self.used.clone();
        for e in d.removed.iter().flat_map(|l| extents_of(l)) {
            used.release(e);
        }
        let mine: Vec<PeRun> = d.placed.iter().flat_map(|(_, l)| extents_of(l)).collect();
        // Overlaps among the changed LVs are the caller's pairwise check.
        !mine.iter().any(|e| used.overlaps(*e))
    }

    /// What the change of `before` (this index's version) into `after` does to the index,
    /// given the LVs it `removed` and `changed` ([`super::validate::Delta`]); `None` when
    /// the VG's own fields changed too (index `after` afresh).
    pub fn change(
        &self,
        before: &Vg,
        after: &Vg,
        removed: &[&Lv],
        changed: &[&Lv],
    ) -> Option<IndexChange> {
        if !before.same_fields(after) {
            return None;
        }
        let mut c = IndexChange {
            lvs: changed.len() as isize - removed.len() as isize,
            ..Default::default()
        };
        for lv in removed {
            c.counts.extend(
                self.keys_of(before, lv)
                    .into_iter()
                    .map(|(f, k)| (f, k, false)),
            );
            c.spares -= i64::from(super::validate::is_spare(lv));
            c.released.extend(extents_of(lv));
        }
        for lv in changed {
            c.counts.extend(
                self.keys_of(after, lv)
                    .into_iter()
                    .map(|(f, k)| (f, k, true)),
            );
            c.spares += i64::from(super::validate::is_spare(lv));
            c.taken.extend(extents_of(lv));
        }
        Some(c)
    }

    /// Applies a change [`VgIndex::change`] computed: the index is then the new version's.
    pub fn apply(&mut self, c: IndexChange) {
        for (f, k, added) in c.counts {
            match added {
                true => self.add(f, k),
                false => self.sub(f, k),
            }
        }
        self.spares = u32::try_from(i64::from(self.spares) + c.spares).unwrap_or(0);
        for e in c.released {
            self.used.release(e);
        }
        for e in c.taken {
            self.used.take(e);
        }
        match self.lvs.checked_add_signed(c.lvs) {
            Some(n) => self.lvs = n,
            None => self.drifted = true,
        }
    }

    /// Whether this index and `other` count the same things (for tests: indexes with
    /// different hashers never do).
    pub fn same_as(&self, other: &Self) -> bool {
        self.names == other.names
            && self.ids == other.ids
            && self.leases == other.leases
            && self.thins == other.thins
            && self.refs == other.refs
            && self.spares == other.spares
            && self.used == other.used
            && self.lvs == other.lvs
            && !self.drifted
            && !other.drifted
    }

    /// A fresh index of `vg` with this one's hasher (for tests, with [`VgIndex::same_as`]).
    pub fn rebuilt(&self, vg: &Vg) -> Self {
        Self::with_hasher(vg, self.hasher.clone())
    }
}

/// Calls `f` with each key `lv` (of `vg`) adds to the counts, hashed with `h`.
fn each_key(h: &foldhash::fast::RandomState, vg: &Vg, lv: &Lv, mut f: impl FnMut(Field, u64)) {
    f(Field::Name, h.hash_one(lv.name.as_str()));
    f(Field::Id, h.hash_one(lv.id));
    // A lease the full checks would refuse is theirs to report (the index only counts).
    if let Ok(Some(o)) = super::validate::lease_of(vg, lv) {
        f(Field::Lease, o);
    }
    if let Some(SegKind::Thin(t)) = lv.segments.first().map(|s| &s.kind) {
        f(Field::Thin, h.hash_one((t.thin_pool.as_str(), t.device_id)));
    }
    for seg in &lv.segments {
        seg.kind
            .each_lv_ref(|_, target| f(Field::Ref, h.hash_one(target)));
    }
}

/// A VG version with its index: what the edits of a group commit start from (see
/// [`crate::edit::EditCtx::in_group`]). The two change only together ([`Indexed::advance`]).
#[derive(Debug, Clone)]
pub struct Indexed {
    vg: Vg,
    index: VgIndex,
}

impl Indexed {
    /// `vg` with its index.
    pub fn of(vg: Vg) -> Self {
        let index = VgIndex::of(&vg);
        Self { vg, index }
    }

    /// `vg` with `index`, kept from when `vg` was committed; indexed afresh when the index
    /// does not fit it.
    pub fn resume(vg: Vg, index: VgIndex) -> Self {
        match index.fits(&vg) {
            true => Self { vg, index },
            false => Self::of(vg),
        }
    }

    /// The version.
    pub fn vg(&self) -> &Vg {
        &self.vg
    }

    /// Its index.
    pub fn index(&self) -> &VgIndex {
        &self.index
    }

    /// The version's change into `vg`, with what [`VgIndex::change`] made of it (`None`:
    /// index `vg` afresh).
    pub fn advance(&mut self, vg: Vg, change: Option<IndexChange>) {
        match change {
            Some(c) => self.index.apply(c),
            None => self.index = VgIndex::of(&vg),
        }
        self.vg = vg;
    }

    /// The version and its index, taken apart.
    pub fn into_parts(self) -> (Vg, VgIndex) {
        (self.vg, self.index)
    }

    /// The extents `vg`'s LVs hold, when `vg` is a small change of this version (`None`:
    /// compute them the plain way).
    pub(crate) fn used_of(&self, vg: &Vg) -> Option<UsedMap> {
        if !self.index.fits(&self.vg) {
            return None;
        }
        let d = diff(&self.vg, vg)?;
        let mut used = self.index.used.clone();
        for e in d.removed.iter().flat_map(|l| extents_of(l)) {
            used.release(e);
        }
        for e in d.placed.iter().flat_map(|(_, l)| extents_of(l)) {
            used.take(e);
        }
        Some(used)
    }

    /// Whether `vg`, a change of this version, certainly has no LV named `name` (`false`:
    /// look the plain way).
    pub(crate) fn lacks(&self, vg: &Vg, name: &str) -> bool {
        if !self.index.fits(&self.vg) {
            return false;
        }
        let Some(d) = diff(&self.vg, vg) else {
            return false;
        };
        let before = self.index.count(Field::Name, self.index.hash(name));
        let gone = d.removed.iter().filter(|l| l.name == name).count() as u32;
        before.saturating_sub(gone) == 0 && !d.placed.iter().any(|(_, l)| l.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::{self, EditCtx, LvSpec, PoolSpec, ThinSpec};
    use crate::model::validate::{check_change, check_read, check_write};
    use crate::model::Area;
    use crate::testing::{stamp, vg_in_memory as vg};

    /// A thin volume with a pool of its own, as the CSI driver makes them.
    fn thin_volume(vg: Vg, ctx: &EditCtx, name: &str) -> Result<Vg, edit::EditError> {
        let pool = PoolSpec {
            data: LvSpec::linear(&format!("{name}-pool"), 1, stamp()),
            chunk_size: None,
            metadata_extents: None,
            discards: "passdown".into(),
            zero: true,
        };
        let (vg, p) = edit::thin::create_pool(vg, ctx, &pool)?;
        let thin = ThinSpec {
            name: Some(name.to_owned()),
            pool: p,
            extents: 1,
            origin: None,
            tags: vec![],
            activation_skip: None,
            stamp: stamp(),
        };
        Ok(edit::thin::create_thin(vg, ctx, &thin)?.0)
    }

    fn remove_volume(vg: Vg, ctx: &EditCtx, name: &str) -> Result<Vg, edit::EditError> {
        let vg = edit::lv::remove(vg, ctx, name, false)?;
        edit::lv::remove(vg, ctx, &format!("{name}-pool"), false)
    }

    /// A VG of 20 thin volumes t0..t19 (80 LVs and the spare).
    fn twenty_thin_volumes() -> Vg {
        let mut v = vg();
        for i in 0..20 {
            v = thin_volume(v, &EditCtx::default(), &format!("t{i}")).expect("thin volume");
        }
        v
    }

    /// A small deterministic generator (xorshift).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Random creates and removes of thin and linear volumes as group edits: the checks
    /// through the index agree with the checks without it, the index follows each change
    /// exactly, and allocation through it finds the extents the plain way finds.
    #[test]
    fn the_index_follows_changes_and_agrees_with_the_plain_checks() {
        let v = twenty_thin_volumes();
        let mut base = Arc::new(Indexed::of(v));
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let (mut made, mut fast, mut walked) = (20, 0, 0);
        for step in 0..300 {
            let names: Vec<String> = base
                .vg
                .lvs
                .iter()
                .filter(|l| l.is_visible())
                .map(|l| l.name.clone())
                .collect();
            let pick = names[rng.below(names.len())].clone();
            let op = rng.below(5);
            let ctx = &EditCtx::in_group(base.clone(), Default::default());
            let v = base.vg.clone();
            let out = match op {
                0 => {
                    made += 1;
                    thin_volume(v, ctx, &format!("t{made}"))
                }
                1 => {
                    made += 1;
                    edit::lv::create(v, ctx, &LvSpec::linear(&format!("l{made}"), 2, stamp()))
                        .map(|r| r.0)
                }
                2 if pick.starts_with('t') && !pick.ends_with("-pool") => {
                    remove_volume(v, ctx, &pick)
                }
                3 if pick.starts_with('t') && !pick.ends_with("-pool") => {
                    // A removal and an append in one change (DeleteVolume's hold LV).
                    made += 1;
                    let spec = LvSpec::linear(&format!("l{made}"), 1, stamp());
                    remove_volume(v, ctx, &pick)
                        .and_then(|v| edit::lv::create(v, ctx, &spec).map(|r| r.0))
                }
                _ if pick.starts_with('l') => edit::lv::remove(v, ctx, &pick, false),
                // A name taken: refused through the index as without it.
                _ => thin_volume(v, ctx, &names[0]),
            };
            let Ok(out) = out else { continue };
            check_read(&out).expect("valid");
            check_write(&out).expect("valid");
            let plain = check_change(&base.vg, &out, None).expect("plain checks");
            let d = check_change(&base.vg, &out, Some(&base.index)).expect("indexed checks");
            let names = |l: &[&Lv]| l.iter().map(|l| l.name.clone()).collect::<Vec<_>>();
            assert_eq!(names(&plain.changed), names(&d.changed), "step {step}");
            assert_eq!(names(&plain.removed), names(&d.removed), "step {step}");
            if let Some(di) = diff(&base.vg, &out) {
                // What the walk found is what comparing every LV finds.
                let ptrs = |v: &Vg| v.lvs.iter().map(Arc::as_ptr).collect::<Vec<_>>();
                let (bp, ap) = (ptrs(&base.vg), ptrs(&out));
                let placed: Vec<String> = out
                    .lvs
                    .iter()
                    .filter(|l| !bp.contains(&Arc::as_ptr(l)))
                    .map(|l| l.name.clone())
                    .collect();
                let removed: Vec<String> = base
                    .vg
                    .lvs
                    .iter()
                    .filter(|l| !ap.contains(&Arc::as_ptr(l)))
                    .map(|l| l.name.clone())
                    .collect();
                assert_eq!(
                    placed,
                    di.placed
                        .iter()
                        .map(|(_, l)| l.name.clone())
                        .collect::<Vec<_>>(),
                    "step {step}"
                );
                assert_eq!(removed, names(&di.removed), "step {step}");
                walked += 1;
                fast += usize::from(base.index.clear_of(&base.vg, &out, &di));
                assert_eq!(base.used_of(&out), Some(UsedMap::of(&out)), "step {step}");
            }
            let change = base
                .index
                .change(&base.vg, &out, &d.removed, &d.changed)
                .expect("the same VG fields");
            let mut next = (*base).clone();
            next.index.apply(change);
            next.vg = out;
            assert!(
                next.index.same_as(&next.index.rebuilt(&next.vg)),
                "step {step}"
            );
            base = Arc::new(next);
        }
        assert!(fast > 100, "the index cleared only {fast} changes");
        assert!(walked > 150, "only {walked} changes were walked");
    }

    /// What the index must not let through: each change is refused with it as without it.
    #[test]
    fn conflicts_outside_the_change_are_found_through_the_index() {
        let v = twenty_thin_volumes();
        let ix = VgIndex::of(&v);
        type Breakage = (&'static str, Box<dyn Fn(&mut Vg)>);
        let broken: Vec<Breakage> = vec![
            (
                "a second spare",
                Box::new(|v| {
                    let spare = v.lvs.iter().find(|l| l.name.contains("_pmspare"));
                    let mut lv = (**spare.expect("a spare")).clone();
                    lv.name = "lvol9_pmspare".into();
                    lv.id = crate::uuid::Uuid::random();
                    let SegKind::Striped(s) = &mut lv.segments[0].kind else {
                        panic!("a linear spare")
                    };
                    s.areas[0] = Area::Pv { pv: 0, pe: 60_000 };
                    v.lvs.push(Arc::new(lv));
                }),
            ),
            (
                "a pool removed under its thin LV",
                Box::new(|v| v.lvs.retain(|l| l.name != "t3-pool")),
            ),
            (
                "a thin device id used twice in a pool",
                Box::new(|v| {
                    let mut lv = v.lv("t4").expect("t4").clone();
                    lv.name = "again".into();
                    lv.id = crate::uuid::Uuid::random();
                    v.lvs.push(Arc::new(lv));
                }),
            ),
        ];
        for (what, f) in broken {
            let mut after = v.clone();
            f(&mut after);
            assert!(
                check_read(&after)
                    .and_then(|()| check_write(&after))
                    .is_err(),
                "{what}: the full checks pass it"
            );
            assert!(check_change(&v, &after, None).is_err(), "{what}");
            assert!(check_change(&v, &after, Some(&ix)).is_err(), "{what}");
            let d = diff(&v, &after).expect("a small change");
            assert!(!ix.clear_of(&v, &after, &d), "{what}: cleared");
        }
    }

    /// An index used with a version it does not describe answers nothing: the plain way.
    #[test]
    fn an_index_of_another_version_is_not_used() {
        let v = twenty_thin_volumes();
        let old = VgIndex::of(&v);
        let v2 = thin_volume(v, &EditCtx::default(), "t20").expect("thin volume");
        let v3 = thin_volume(v2.clone(), &EditCtx::default(), "t21").expect("thin volume");
        let d = diff(&v2, &v3).expect("a small change");
        assert!(
            !old.clear_of(&v2, &v3, &d),
            "a stale index cleared a change"
        );
        assert!(VgIndex::of(&v2).clear_of(&v2, &v3, &d));
        let resumed = Indexed::resume(v2.clone(), old.clone());
        assert!(resumed.index().same_as(&resumed.index().rebuilt(&v2)));
        let stale = Indexed {
            vg: v2.clone(),
            index: old,
        };
        assert_eq!(stale.used_of(&v3), None);
        assert!(!stale.lacks(&v3, "t99"));
        // Taking away what was never counted marks the index drifted.
        let mut ix = VgIndex::of(&v2);
        ix.sub(Field::Name, 1);
        assert!(!ix.clear_of(&v2, &v3, &d));
    }

    /// Runs taken and released keep the map as [`UsedMap::of`] builds it.
    #[test]
    fn used_runs_merge_and_split() {
        let e = |pe, len| PeRun { pv: 0, pe, len };
        let mut v = vg();
        for i in 0..4 {
            v = edit::lv::create(
                v,
                &EditCtx::default(),
                &LvSpec::linear(&format!("l{i}"), 3, stamp()),
            )
            .expect("lv")
            .0;
        }
        let mut used = UsedMap::of(&v);
        assert!(used.overlaps(e(11, 1)) && !used.overlaps(e(12, 4)));
        used.release(e(3, 3));
        assert!(!used.overlaps(e(3, 3)) && used.overlaps(e(2, 2)));
        used.take(e(3, 3));
        assert_eq!(used, UsedMap::of(&v));
        used.take(e(20, 2));
        used.take(e(12, 8));
        used.release(e(12, 10));
        assert_eq!(used, UsedMap::of(&v));
    }
}
