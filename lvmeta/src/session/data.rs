//! The data plane of a session: bytes of LVs copied or erased through the session's own
//! devices, never through an activation.
//!
//! - [`Session::copy_lv`]: a linear LV's bytes into another (linear clones).
//! - [`Session::erase_lv`]: every byte of an LV made to read back as zeroes (the extents of
//!   deleted volumes, before they are freed).
//! - before a commit: new thin pools' metadata zeroed, and the first and last MiB of new LVs
//!   the caller names, so that nothing new starts with a deleted LV's signatures.
//!
//! Invariants:
//! - only extents the committed VG leaves free, or that belong to the LV named, are written;
//! - a write here is durable before the call returns (devices are O_DSYNC, then flushed).

use std::collections::BTreeSet;

use super::activation::covering_lease;
use super::{places, Session, COPY_CHUNK};
use crate::activate::{self, Backend, Layout, Piece};
use crate::commit::{flush, io_err, write};
use crate::lease;
use crate::model::Vg;
use crate::units::Bytes;
use crate::uuid::Uuid;
use crate::Error;

/// How much of each end of a new LV is cleared, and how much of each end of an erased range
/// is read back to check it.
pub const END_BYTES: Bytes = Bytes(1 << 20);

/// The largest range erased in one call to the device (a SAN's WRITE SAME of 1 GiB is still
/// short; progress is logged between calls).
const ERASE_CHUNK: u64 = 1 << 30;

/// How erased extents are made to read back as zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Erase {
    /// `BLKZEROOUT` (a SAN offloads it as WRITE SAME / WRITE ZEROES / UNMAP; a loop device
    /// punches a hole), zeroes written where the device offers nothing better.
    ZeroOut,
    /// `BLKDISCARD`, for LUNs that read back zeroes after a discard; checked, and zeroed
    /// anyway where the check finds data.
    Discard,
}

impl Erase {
    /// The spelling of options and logs (`zeroout`, `discard`).
    pub fn as_str(self) -> &'static str {
        match self {
            Erase::ZeroOut => "zeroout",
            Erase::Discard => "discard",
        }
    }

    /// Reads the spelling of [`Erase::as_str`].
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "zeroout" => Some(Erase::ZeroOut),
            "discard" => Some(Erase::Discard),
            _ => None,
        }
    }
}

/// How [`Session::erase_lv`] goes about it.
#[derive(Clone, Copy)]
pub struct EraseWith<'a> {
    /// How the bytes are made to read back as zeroes.
    pub how: Erase,
    /// This host's activations: the erasure is refused while one maps the LV.
    pub host: Option<&'a dyn Backend>,
    /// Asked before each chunk: true stops the erasure there (an error; whoever erases the
    /// LV next starts again).
    pub stop: &'a dyn Fn() -> bool,
}

impl<'a> EraseWith<'a> {
    /// `how`, with no host activations to ask and never stopped.
    pub fn plain(how: Erase) -> Self {
        Self {
            how,
            host: None,
            stop: &|| false,
        }
    }
}

impl Session {
    /// Copies the bytes of linear LV `src` of `vg` into the start of linear LV `dst` (at
    /// least as large) through this session's devices, as `dd` from one LV to the other
    /// would, without activating either; returns the bytes copied. In a shared VG the copy
    /// holds `src`'s LV lease shared and `dst`'s exclusively, taken at once
    /// ([`lease::LeaseError::Busy`] while a host holds one in a conflicting mode: `src`
    /// staged for writing, `dst` anywhere) and released when done, never left as orphans.
    pub fn copy_lv(&self, vg: &str, src: &str, dst: &str) -> Result<u64, Error> {
        let (scan, locks) = self.read_locked(&[vg])?;
        let sv = scan.vg(vg)?;
        let at = places(&scan, sv);
        let from = activate::place(&sv.vg, src, &at.paths)?;
        let to = activate::place(&sv.vg, dst, &at.paths)?;
        let (Layout::Linear(a), Layout::Linear(b)) = (&from.layout, &to.layout) else {
            return Err(Error::Device {
                device: format!("{vg}/{src}"),
                why: format!("copying to {dst}: only linear LVs are copied"),
            });
        };
        let runs =
            activate::plan::copy_runs(a, b, from.bytes, Bytes(COPY_CHUNK)).ok_or_else(|| {
                Error::Device {
                    device: format!("{vg}/{dst}"),
                    why: format!("smaller than {src} ({})", from.bytes),
                }
            })?;
        let _leases = match self.host_for(&sv.vg)? {
            Some(h) => {
                h.check_joined(&sv.vg, &at)?;
                let ((_, rs), (_, rd)) = (
                    covering_lease(&sv.vg, &at, src)?,
                    covering_lease(&sv.vg, &at, dst)?,
                );
                h.acquire_gated(&rs, lease::Mode::Shared)?;
                let held_src = lease::Held::new(h.clone(), rs, "copy source");
                h.acquire_gated(&rd, lease::Mode::Exclusive)?;
                Some((held_src, lease::Held::new(h.clone(), rd, "copy target")))
            }
            None => None,
        };
        drop(locks);
        let mut buf = vec![0u8; COPY_CHUNK as usize];
        let mut written = BTreeSet::new();
        for (f, t) in &runs {
            // Runs are at most COPY_CHUNK long.
            let chunk = &mut buf[..f.len.0 as usize];
            let (fd, td) = (self.dev(&f.device)?, self.dev(&t.device)?);
            fd.read_at(f.offset.0, chunk)
                .map_err(io_err(fd, f.offset.0))?;
            write(td, t.offset.0, chunk)?;
            written.insert(t.device.as_str());
        }
        for d in written {
            flush(self.dev(d)?)?;
        }
        tracing::info!(vg, src, dst, bytes = from.bytes.0, "copied");
        Ok(from.bytes.0)
    }

    /// Makes every byte of linear LV `lv` of `vg` read back as zeroes, as `with` says, and
    /// checks the first and last MiB of each piece; returns the bytes erased. Refused while
    /// a device of this host maps any of its extents (`with.host`) and, in a shared VG, while
    /// another host holds its lease (taken exclusively at once and released when done).
    pub fn erase_lv(&self, vg: &str, lv: &str, with: EraseWith<'_>) -> Result<u64, Error> {
        let (scan, locks) = self.read_locked(&[vg])?;
        let sv = scan.vg(vg)?;
        let at = places(&scan, sv);
        let placement = activate::place(&sv.vg, lv, &at.paths)?;
        let Layout::Linear(pieces) = &placement.layout else {
            return Err(Error::Device {
                device: format!("{vg}/{lv}"),
                why: "only linear LVs are erased".into(),
            });
        };
        if let Some(h) = with.host {
            check_unmapped(h, &format!("{vg}/{lv}"), &placement.pieces())?;
        }
        let _lease = match self.host_for(&sv.vg)? {
            Some(h) => {
                h.check_joined(&sv.vg, &at)?;
                let (_, r) = covering_lease(&sv.vg, &at, lv)?;
                h.acquire_gated(&r, lease::Mode::Exclusive)?;
                Some(lease::Held::new(h.clone(), r, "erased LV"))
            }
            None => None,
        };
        drop(locks);
        let started = std::time::Instant::now();
        for p in pieces {
            self.erase_piece(p, with)?;
        }
        tracing::info!(
            vg,
            lv,
            bytes = placement.bytes.0,
            how = with.how.as_str(),
            ms = started.elapsed().as_millis() as u64,
            "erased"
        );
        Ok(placement.bytes.0)
    }

    /// Erases one piece and checks its ends; a discard that left data is followed by zeroing.
    fn erase_piece(&self, p: &Piece, with: EraseWith<'_>) -> Result<(), Error> {
        let dev = self.dev(&p.device)?;
        let (offset, len) = (p.offset.0, p.len.0);
        let fail = |what: &str, at: u64, e: std::io::Error| Error::Device {
            device: p.device.clone(),
            why: format!("{what} at byte {at}: {e}"),
        };
        let mut discarded = with.how == Erase::Discard;
        let mut done = 0;
        while done < len {
            if (with.stop)() {
                return Err(Error::Device {
                    device: p.device.clone(),
                    why: format!("erasure stopped at byte {}", offset + done),
                });
            }
            let n = (len - done).min(ERASE_CHUNK);
            let at = offset + done;
            if discarded {
                discarded = dev.discard(at, n).map_err(|e| fail("discard", at, e))?;
            }
            if !discarded {
                dev.write_zeroes(at, n)
                    .map_err(|e| fail("zeroing", at, e))?;
            }
            done += n;
        }
        if self.ends_are_zero(p)? {
            return Ok(());
        }
        if discarded {
            tracing::warn!(device = %p.device, offset, len, "a discarded range still reads data; zeroing it");
            dev.write_zeroes(offset, len)
                .map_err(|e| fail("zeroing", offset, e))?;
            if self.ends_are_zero(p)? {
                return Ok(());
            }
        }
        Err(Error::Device {
            device: p.device.clone(),
            why: format!(
                "bytes {}..{} do not read back as zeroes after erasing them",
                offset,
                offset + len
            ),
        })
    }

    /// Do the first and last [`END_BYTES`] of `p` read back as zeroes?
    fn ends_are_zero(&self, p: &Piece) -> Result<bool, Error> {
        let dev = self.dev(&p.device)?;
        let n = p.len.min(END_BYTES).0;
        let mut buf = vec![0u8; n as usize];
        for at in [p.offset.0, p.offset.0 + p.len.0 - n] {
            dev.read_at(at, &mut buf).map_err(io_err(dev, at))?;
            if buf.iter().any(|&b| b != 0) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Before the commit that adds them, zeroes (all with one flush per device):
    /// - the metadata LV of every thin pool of `out` whose id is in `new_pools`, as lvm2
    ///   does (`allocation/zero_metadata`), so that the kernel formats fresh pool metadata at
    ///   the first activation instead of finding a deleted pool's (never for a restore: a
    ///   restored pool's metadata holds its thin devices);
    /// - the first and last [`END_BYTES`] of the linear LVs named in `clears` that `out` has
    ///   under another id than the one given (new LVs; an LV that was there already is never
    ///   touched), so that no stale filesystem or partition signature shows through (lvm2's
    ///   `wipe_signatures_when_zeroing_new_lvs`).
    ///
    /// The extents are still free in the committed VG, so a crash here loses nothing.
    pub(super) fn zero_new_lvs(
        &self,
        out: &Vg,
        new_pools: &[Uuid],
        clears: &[(String, Option<Uuid>)],
        paths: &[Option<String>],
    ) -> Result<(), Error> {
        let mut runs = Vec::new();
        let new_meta = out
            .lvs
            .iter()
            .filter(|l| new_pools.contains(&l.id))
            .filter_map(|l| Some(l.pool()?.metadata.as_str()));
        for meta in new_meta {
            let Layout::Linear(pieces) = activate::place(out, meta, paths)?.layout else {
                return Err(Error::Device {
                    device: format!("{}/{meta}", out.name),
                    why: "thin pool metadata LVs are linear".into(),
                });
            };
            runs.extend(pieces);
            tracing::debug!(vg = %out.name, lv = meta, "zeroing new thin pool metadata");
        }
        for (name, old) in clears {
            let Some(lv) = out.lv(name) else { continue };
            if Some(lv.id) == *old {
                continue;
            }
            let p = activate::place(out, name, paths)?;
            let Layout::Linear(pieces) = &p.layout else {
                return Err(Error::Device {
                    device: format!("{}/{name}", out.name),
                    why: "only a new linear LV's ends are cleared".into(),
                });
            };
            let n = p.bytes.min(END_BYTES);
            runs.extend(activate::plan::byte_runs(pieces, Bytes(0), n));
            runs.extend(activate::plan::byte_runs(
                pieces,
                p.bytes.saturating_sub(n),
                n,
            ));
            tracing::debug!(vg = %out.name, lv = %name, "clearing the ends of a new LV");
        }
        self.zero_runs(&runs)
    }

    /// Zeroes every run, durably.
    fn zero_runs(&self, runs: &[Piece]) -> Result<(), Error> {
        for r in runs {
            let d = self.dev(&r.device)?;
            d.write_zeroes(r.offset.0, r.len.0)
                .map_err(io_err(d, r.offset.0))?;
        }
        let devices: BTreeSet<&str> = runs.iter().map(|r| r.device.as_str()).collect();
        for d in devices {
            flush(self.dev(d)?)?;
        }
        Ok(())
    }

    /// Refuses while LV `lv` of `vg` is in use on this host (`host`'s activations): a thin
    /// LV while its own device is active (its pool may be active for another thin LV), any
    /// other LV while a device maps a byte of it.
    pub fn check_unmapped_lv(&self, vg: &str, lv: &str, host: &dyn Backend) -> Result<(), Error> {
        let scan = self.current();
        let result = scan.vg(vg).and_then(|sv| {
            let placement = activate::place(&sv.vg, lv, &places(&scan, sv).paths)?;
            let name = format!("{vg}/{lv}");
            match &placement.layout {
                Layout::Thin { .. } => match host.active(&placement)? {
                    Some(dev) => Err(activate::ActivateError::InUse {
                        lv: name,
                        by: dev.display().to_string(),
                    }
                    .into()),
                    None => Ok(()),
                },
                _ => check_unmapped(host, &name, &placement.pieces()),
            }
        });
        result
    }
}

/// [`activate::ActivateError::InUse`] when a device of `host` maps a byte of `pieces`.
fn check_unmapped(host: &dyn Backend, lv: &str, pieces: &[&Piece]) -> Result<(), Error> {
    match host.users(pieces)?.first() {
        Some(by) => Err(activate::ActivateError::InUse {
            lv: lv.to_owned(),
            by: by.display().to_string(),
        }
        .into()),
        None => Ok(()),
    }
}
