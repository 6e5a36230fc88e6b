//! A VG's raw text kept from one print to the next in the buffer it is written from, and
//! reprinted there: the LVs an edit did not touch keep their bytes (moved within the buffer
//! when LVs before them grew, shrank or went), only the rest is printed again. Work is
//! proportional to the change, and a large VG's text exists once in memory, never twice.
//!
//! Invariants:
//! - `buf` holds `start` bytes, then the text (`len` bytes), then at least `zeroes` zero bytes;
//!   `buf[start..]` begins at an `align`-aligned address.
//! - `kept` lists the LVs of the text in text order, each with where its piece (the empty line
//!   before it and its section) is, relative to `start`; `by_addr` indexes it by the address
//!   of the LV's allocation.
//! - An entry holds its `Arc<Lv>`: while it is kept, the address is not reused and an edit
//!   copies the LV before changing it ([`super::Vg::lv_mut`]), so an LV at a kept address has
//!   the kept text.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use super::write::{lv_order, pv_keys, write_head, write_lv_piece, write_tail};
use super::{Lv, Vg};
use crate::text::{Emitter, Style};

/// The printed raw text of a VG and of each of its LVs, reprinted in place (see
/// [`Vg::write_text_cached`]).
pub struct TextCache {
    buf: Vec<u8>,
    start: usize,
    len: usize,
    align: usize,
    zeroes: usize,
    kept: Vec<Kept>,
    by_addr: HashMap<usize, usize>,
    /// Working space of a print, kept for the next one: its entries, their sources.
    next: Vec<Kept>,
    sources: Vec<Source>,
}

/// One LV's piece of the text.
struct Kept {
    /// Holds the address the entry is keyed by.
    lv: Arc<Lv>,
    /// Whether it was printed for a write-locked VG (`WRITE` travels as a flag).
    locked: bool,
    /// Where the piece is, relative to the text's start.
    at: usize,
    len: usize,
}

/// Where a piece of the new text comes from.
enum Source {
    /// An LV piece of the last text (index into `kept`).
    Kept(usize),
    /// A range of the side printer's text.
    Fresh(Range<usize>),
}

impl Default for TextCache {
    /// A cache with no alignment and no zero bytes after the text.
    fn default() -> Self {
        Self::aligned(1, 0)
    }
}

impl TextCache {
    /// A cache whose text begins at an `align`-aligned address (a power of two) and is
    /// followed by `zeroes` zero bytes, so that it can be written from where it is.
    pub fn aligned(align: usize, zeroes: usize) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            len: 0,
            align: align.max(1).next_power_of_two(),
            zeroes,
            kept: Vec::new(),
            by_addr: HashMap::new(),
            next: Vec::new(),
            sources: Vec::new(),
        }
    }

    /// The buffer holding the text, with the zero bytes after it.
    pub fn buffer(&self) -> &[u8] {
        &self.buf
    }

    /// Where the text is in [`TextCache::buffer`].
    pub fn text_range(&self) -> Range<usize> {
        self.start..self.start + self.len
    }

    /// The text of the last print.
    pub fn text(&self) -> &str {
        // Only whole printed strings are ever copied in.
        std::str::from_utf8(&self.buf[self.text_range()]).unwrap_or_default()
    }

    /// Prints `vg`'s raw text in place of the last one.
    pub(super) fn print(&mut self, vg: &Vg, generator: &str) {
        let locked = vg.write_locked();
        let keys = pv_keys(vg);
        // The side printer: the head, the LVs that changed, the tail.
        let mut side = Emitter::with_capacity(Style::Raw, 4096);
        write_head(&mut side, vg, generator, &keys);
        let head = 0..side.len();
        // The new entries (in `next`) and where each one's text comes from (in `sources`);
        // both reuse the last print's allocations.
        let mut next = std::mem::take(&mut self.next);
        let mut sources = std::mem::take(&mut self.sources);
        next.clear();
        sources.clear();
        // Kept pieces keep their order, so that they can move in place (see `arrange`).
        let mut next_kept = 0;
        let mut at = head.len();
        for lv in lv_order(vg) {
            let found = self.by_addr.get(&(Arc::as_ptr(lv) as usize)).copied();
            let source = match found.filter(|&i| i >= next_kept && self.kept[i].locked == locked) {
                Some(i) => {
                    next_kept = i + 1;
                    Source::Kept(i)
                }
                None => {
                    let from = side.len();
                    write_lv_piece(&mut side, lv, locked, &keys);
                    Source::Fresh(from..side.len())
                }
            };
            let len = match &source {
                Source::Kept(i) => self.kept[*i].len,
                Source::Fresh(r) => r.len(),
            };
            next.push(Kept {
                lv: Arc::clone(lv),
                locked,
                at,
                len,
            });
            sources.push(source);
            at += len;
        }
        let tail_from = side.len();
        write_tail(&mut side, vg, generator);
        let side = side.finish().into_bytes();
        let new_len = at + side.len() - tail_from;
        self.arrange(&sources, &next, &side, head, tail_from..side.len(), new_len);
        self.by_addr.clear();
        self.by_addr.extend(
            next.iter()
                .enumerate()
                .map(|(i, k)| (Arc::as_ptr(&k.lv) as usize, i)),
        );
        self.next = std::mem::replace(&mut self.kept, next);
        // The old entries let go of their LVs now, not at the next print.
        self.next.clear();
        self.sources = sources;
    }

    /// Lays the new text out: kept pieces moved to their new places within the buffer (or
    /// copied into a new one when it must grow or is far too large), then the head, the
    /// fresh pieces and the tail copied from `side`, then the zero bytes.
    fn arrange(
        &mut self,
        sources: &[Source],
        new: &[Kept],
        side: &[u8],
        head: Range<usize>,
        tail: Range<usize>,
        new_len: usize,
    ) {
        let room = new_len.max(self.len) + self.zeroes;
        let fits = self.buf.capacity() >= self.start + room && self.buf.capacity() / 2 <= room;
        let pieces = || sources.iter().zip(new);
        if fits {
            self.buf.resize(self.start + room, 0);
            let s = self.start;
            let old = &self.kept;
            let moved = |(src, k): (&Source, &Kept)| match src {
                Source::Kept(i) => Some((old[*i].at, k.at, k.len)),
                Source::Fresh(_) => None,
            };
            // Order-preserving moves: leftward ones first, left to right, then rightward ones,
            // right to left; no move overwrites a piece that has yet to move.
            let left = pieces()
                .filter_map(moved)
                .filter(|(from, to, _)| to <= from);
            let right = pieces()
                .rev()
                .filter_map(moved)
                .filter(|(from, to, _)| to > from);
            let buf = &mut self.buf;
            for (from, to, len) in left.chain(right) {
                buf.copy_within(s + from..s + from + len, s + to);
            }
        } else {
            // A new buffer with an eighth to grow into.
            let cap = new_len + new_len / 8 + self.zeroes + self.align;
            let mut buf: Vec<u8> = Vec::with_capacity(cap);
            let start = buf.as_ptr().align_offset(self.align).min(self.align - 1);
            buf.resize(start + new_len + self.zeroes, 0);
            for (src, k) in pieces() {
                if let Source::Kept(i) = src {
                    let from = self.start + self.kept[*i].at;
                    buf[start + k.at..start + k.at + k.len]
                        .copy_from_slice(&self.buf[from..from + k.len]);
                }
            }
            self.buf = buf;
            self.start = start;
        }
        let s = self.start;
        self.buf[s..s + head.len()].copy_from_slice(&side[head.clone()]);
        for (src, k) in pieces() {
            if let Source::Fresh(r) = src {
                self.buf[s + k.at..s + k.at + k.len].copy_from_slice(&side[r.clone()]);
            }
        }
        let tail_at = s + new_len - tail.len();
        self.buf[tail_at..s + new_len].copy_from_slice(&side[tail]);
        self.buf.truncate(s + new_len + self.zeroes);
        self.buf[s + new_len..].fill(0);
        self.len = new_len;
    }
}
