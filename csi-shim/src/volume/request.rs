//! Changes to a thin pool that is active on a node, asked of that node through the LUN.
//!
//! A thin pool active on a host is that host's to change: the kernel owns its metadata, and
//! a snapshot must be cut there, with the origin quiet (lvmlockd gives `lvcreate -s` the
//! pool's lease for the same reason). A controller that finds the pool's lease held posts a
//! [`Request`] as a tag on the pool LV (`lvmeta.csi/request=<op>:<args>#<time>`), which changes no
//! pool state and so needs no pool lease; the node, which polls the pools of the volumes it
//! has staged, freezes the filesystem being read, makes the same change holding the pool
//! ([`Volumes::holding`]), delivers it to its kernel pool (`Session::refresh`), thaws, and
//! removes the tag. The controller waits for the tag to go, then makes the same call again,
//! which now finds the work done.

use std::time::{Duration, Instant};

use super::{Content, Mode, SizeRange, VolumeError, Volumes};
use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::EditError;
use lvmeta::lease::LeaseError;
use lvmeta::model::DISCARDS;

/// The tag prefix of a request on a pool LV.
pub const REQUEST_TAG: &str = "lvmeta.csi/request=";

/// How often a waiting controller looks for the request to be done.
const POLL: Duration = Duration::from_millis(50);

/// A request posted longer ago than this is dropped unserved: whoever asked has long given
/// up (it waits 20 s, and every retry posts again), and a stale request must not act later
/// on a name that has since been reused.
pub const MAX_AGE: Duration = Duration::from_secs(300);

/// A change to a thin pool, for the host where the pool is active.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// [`Volumes::snapshot`]: snapshot `name` of thin volume `source`.
    Snapshot {
        /// The snapshot.
        name: String,
        /// The volume.
        source: String,
    },
    /// [`Volumes::delete_snapshot`].
    DeleteSnapshot {
        /// The snapshot.
        name: String,
    },
    /// [`Volumes::create_from`] of a thin volume from a snapshot or thin volume `source`.
    Copy {
        /// The new volume.
        name: String,
        /// Its source.
        source: String,
        /// The source is a snapshot (else a volume, read as it is now).
        from_snapshot: bool,
        /// The size asked for.
        size: SizeRange,
    },
    /// [`Volumes::delete`] of thin volume `name` (a pool shared with a staged volume, as a
    /// restore or a clone shares its source's).
    Delete {
        /// The volume.
        name: String,
    },
    /// [`Volumes::tune`]: new settings for thin volume `name`'s pool.
    Tune {
        /// The volume.
        name: String,
        /// The settings asked for.
        options: PoolOptions,
    },
}

impl std::fmt::Display for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.tag())
    }
}

/// A request as posted on a pool: what it asks, its tag, and when it was posted (unix
/// seconds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posted {
    /// The request.
    pub request: Request,
    /// The tag on the pool LV.
    pub tag: String,
    /// When it was posted.
    pub at: u64,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Request {
    /// The tag that posts it at `at` (unix seconds): `<prefix><op>:<fields>#<at>`. LV names
    /// have no `:` or `#`, so the fields split back.
    pub fn tag_at(&self, at: u64) -> String {
        format!("{}#{at}", self.tag())
    }

    /// The tag without its time: what identifies the request.
    fn tag(&self) -> String {
        let body = match self {
            Self::Snapshot { name, source } => format!("snapshot:{name}:{source}"),
            Self::DeleteSnapshot { name } => format!("delete-snapshot:{name}"),
            Self::Delete { name } => format!("delete:{name}"),
            Self::Copy {
                name,
                source,
                from_snapshot,
                size,
            } => format!(
                "copy:{name}:{source}:{}:{}:{}",
                if *from_snapshot { "snapshot" } else { "volume" },
                size.required,
                size.limit
            ),
            Self::Tune { name, options } => format!(
                "tune:{name}:{}:{}",
                match options.zero {
                    Some(true) => "y",
                    Some(false) => "n",
                    None => "-",
                },
                options.discards.as_deref().unwrap_or("-")
            ),
        };
        format!("{REQUEST_TAG}{body}")
    }

    /// The request a tag asks for, and when it was posted; `None` for any other tag, or a
    /// malformed one.
    pub fn parse(tag: &str) -> Option<(Self, u64)> {
        let (body, at) = tag.strip_prefix(REQUEST_TAG)?.rsplit_once('#')?;
        Some((Self::parse_body(body)?, at.parse().ok()?))
    }

    fn parse_body(body: &str) -> Option<Self> {
        let f: Vec<&str> = body.split(':').collect();
        let name = |s: &str| (!s.is_empty()).then(|| s.to_owned());
        match f.as_slice() {
            ["snapshot", n, s] => Some(Self::Snapshot {
                name: name(n)?,
                source: name(s)?,
            }),
            ["delete-snapshot", n] => Some(Self::DeleteSnapshot { name: name(n)? }),
            ["delete", n] => Some(Self::Delete { name: name(n)? }),
            ["copy", n, s, kind, required, limit] => Some(Self::Copy {
                name: name(n)?,
                source: name(s)?,
                from_snapshot: match *kind {
                    "snapshot" => true,
                    "volume" => false,
                    _ => return None,
                },
                size: SizeRange {
                    required: required.parse().ok()?,
                    limit: limit.parse().ok()?,
                },
            }),
            ["tune", n, zero, discards] => Some(Self::Tune {
                name: name(n)?,
                options: PoolOptions {
                    zero: match *zero {
                        "y" => Some(true),
                        "n" => Some(false),
                        "-" => None,
                        _ => return None,
                    },
                    discards: match *discards {
                        "-" => None,
                        d if DISCARDS.contains(&d) => Some(d.to_owned()),
                        _ => return None,
                    },
                },
            }),
            _ => None,
        }
    }

    /// Does `tag` post this request (at any time)?
    fn is_posted_by(&self, tag: &str) -> bool {
        Request::parse(tag).is_some_and(|(q, _)| q == *self)
    }

    /// The thin LV whose pool the request changes.
    pub fn subject(&self) -> &str {
        match self {
            Self::Snapshot { source, .. } | Self::Copy { source, .. } => source,
            Self::DeleteSnapshot { name } | Self::Delete { name } | Self::Tune { name, .. } => name,
        }
    }

    /// The volume whose data the request takes as they are now (its filesystem is frozen
    /// around the cut).
    pub fn reads_volume(&self) -> Option<&str> {
        match self {
            Self::Snapshot { source, .. } => Some(source),
            Self::Copy {
                source,
                from_snapshot: false,
                ..
            } => Some(source),
            _ => None,
        }
    }
}

impl Volumes<'_> {
    /// The requests posted on pool `pool`, in tag order.
    pub fn requests(&self, pool: &str) -> Result<Vec<Posted>, VolumeError> {
        let vg = self.view()?;
        Ok(vg
            .lv(pool)
            .map(|l| {
                l.tags
                    .iter()
                    .filter_map(|t| {
                        let (request, at) = Request::parse(t)?;
                        Some(Posted {
                            request,
                            tag: t.clone(),
                            at,
                        })
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Is `r` posted on pool `pool` (at any time)?
    fn posted(&self, pool: &str, r: &Request) -> Result<bool, VolumeError> {
        let vg = self.view()?;
        Ok(vg
            .lv(pool)
            .is_some_and(|l| l.tags.iter().any(|t| r.is_posted_by(t))))
    }

    /// The requests on `pool` to serve now; older ones ([`super::REQUEST_MAX_AGE`]) are
    /// removed unserved.
    pub fn fresh_requests(&self, pool: &str) -> Result<Vec<Request>, VolumeError> {
        let now = now_secs();
        let mut fresh = Vec::new();
        for p in self.requests(pool)? {
            if now.saturating_sub(p.at) > MAX_AGE.as_secs() {
                tracing::warn!(vg = %self.vg, pool, request = %p.tag, "dropping a stale request");
                self.finish(pool, &p.request)?;
            } else if !fresh.contains(&p.request) {
                fresh.push(p.request);
            }
        }
        Ok(fresh)
    }

    /// Makes the change `r` asks for (on the node, as the pool's holder).
    pub fn serve(&self, r: &Request) -> Result<(), VolumeError> {
        match r {
            Request::Snapshot { name, source } => self.snapshot(name, source).map(drop),
            Request::DeleteSnapshot { name } => self.delete_snapshot(name).map(drop),
            Request::Delete { name } => self.delete(name).map(drop),
            Request::Copy {
                name,
                source,
                from_snapshot,
                size,
            } => {
                let content = if *from_snapshot {
                    Content::Snapshot(source)
                } else {
                    Content::Volume(source)
                };
                self.create_from(name, Mode::Thin, *size, content, &PoolOptions::default())
                    .map(drop)
            }
            Request::Tune { name, options } => self.tune(name, options).map(drop),
        }
    }

    /// [`Volumes::delete`] of `name`, by the node where its thin pool is live when it is
    /// (a restore or clone beside its staged source); a volume in use on this host is
    /// refused here, before anything is posted.
    pub fn delete_through_holder(&self, name: &str, wait: Duration) -> Result<bool, VolumeError> {
        if self.get(name)?.is_none() {
            return Ok(false);
        }
        self.check_unmapped(name)?;
        let r = Request::Delete {
            name: name.to_owned(),
        };
        match self.through_holder(&r, wait, |v| v.delete(name)) {
            // The pool's holder did not delete it: staged on several nodes says why (a
            // board that does not read leaves the answer as it was).
            Err(VolumeError::Pending(m)) => match self.check_not_shared(name) {
                Err(refused @ VolumeError::Refused(_)) => Err(refused),
                _ => Err(VolumeError::Pending(m)),
            },
            done => done,
        }
    }

    /// Undoes what serving `r` made when the node could not deliver it to its kernel pool:
    /// a snapshot or copy never cut in the kernel must not stand as made (its queued
    /// `create_snap` would cut it later, from other data). Other requests leave nothing
    /// that a later delivery makes wrong.
    pub fn undo(&self, r: &Request) -> Result<(), VolumeError> {
        match r {
            Request::Snapshot { name, .. } => self.delete_snapshot(name).map(drop),
            Request::Copy { name, .. } => self.delete(name).map(drop),
            Request::DeleteSnapshot { .. } | Request::Delete { .. } | Request::Tune { .. } => {
                Ok(())
            }
        }
    }

    /// Whether what `r` asks for is there: what the node makes is undone when it fails
    /// ([`Volumes::undo`]), so a thing there after its request was taken away was made.
    fn is_done(&self, r: &Request) -> Result<bool, VolumeError> {
        Ok(match r {
            Request::Snapshot { name, source } => self
                .get_snapshot(name)?
                .is_some_and(|s| s.source == *source),
            Request::Copy { name, .. } => self.get(name)?.is_some(),
            Request::DeleteSnapshot { name } => self.get_snapshot(name)?.is_none(),
            Request::Delete { name } => self.get(name)?.is_none(),
            Request::Tune { name, options } => {
                let vg = self.view()?;
                super::pool_of(&vg, name)
                    .and_then(|p| vg.lv(&p).and_then(|l| l.pool()).cloned())
                    .is_some_and(|p| options.met_by(&p))
            }
        })
    }

    /// Removes request `r` (every posting of it) from pool `pool`: done, or given up.
    pub fn finish(&self, pool: &str, r: &Request) -> Result<(), VolumeError> {
        self.update("lvchange --deltag", |mut vg, _| {
            if let Some(l) = vg.lv_mut(pool) {
                l.tags.retain(|t| !r.is_posted_by(t));
            }
            Ok(vg)
        })?;
        Ok(())
    }

    /// Runs `op` (the call `r` stands for); when `r`'s pool is active on a host (its lease
    /// held elsewhere, or live in this host's kernel, [`Volumes::on_host`]), posts `r` for
    /// that host's node, waits up to `wait` for it to be served, and runs `op` again.
    /// [`VolumeError::Pending`] when the node does not serve it in time, or drops it.
    /// - a pool live here is changed by the node, never by `op` beside it: only the node
    ///   freezes the filesystem and sends the change to the kernel pool at once (a snapshot
    ///   queued for the next activation would not hold the data at the call).
    pub fn through_holder<T>(
        &self,
        r: &Request,
        wait: Duration,
        op: impl Fn(&Self) -> Result<T, VolumeError>,
    ) -> Result<T, VolumeError> {
        let pool = match super::pool_of(self.view()?.vg(), r.subject()) {
            Some(p) => p,
            None => return op(self),
        };
        let in_use = |e: &VolumeError| {
            matches!(e, VolumeError::Lvmeta(lvmeta::Error::Lease(LeaseError::InUse { lv }))
                if *lv == format!("{}/{pool}", self.vg))
        };
        let live_here = match self.host {
            Some(h) => self.session.live(&self.vg, &pool, h)?,
            None => false,
        };
        if !live_here {
            match op(self) {
                Err(e) if in_use(&e) => {}
                done => {
                    // Made here after all (the pool came free): a request posted by an
                    // earlier attempt must not be served later, when the name may mean
                    // something else.
                    if done.is_ok() && self.posted(&pool, r)? {
                        self.finish(&pool, r)?;
                    }
                    return done;
                }
            }
        }
        // Served already (a retry after the node made it): nothing to post. Only once the
        // node has taken the request away: until then it may still undo what it made.
        if live_here && !self.posted(&pool, r)? && self.is_done(r)? {
            return op(self);
        }
        let tag = r.tag_at(now_secs());
        self.update("lvchange --addtag", |mut vg, _| {
            let name = vg.name.clone();
            let l = vg.lv_mut(&pool).ok_or_else(|| EditError::NoLv {
                vg: name,
                lv: pool.clone(),
            })?;
            if !l.tags.iter().any(|t| r.is_posted_by(t)) {
                l.tags.push(tag.clone());
            }
            Ok(vg)
        })?;
        tracing::info!(vg = %self.vg, pool = %pool, request = %tag, "pool active on a node: request posted");
        let start = Instant::now();
        while self.posted(&pool, r)? {
            if start.elapsed() >= wait {
                return Err(VolumeError::Pending(format!(
                    "thin pool {}/{pool} is active on a node, which has not served the \
                     request {tag:?} within {} s (it stays posted; retry)",
                    self.vg,
                    wait.as_secs()
                )));
            }
            std::thread::sleep(POLL);
        }
        // A pool live here: only a change the node made (and delivered) counts; `op` might
        // otherwise make it beside the kernel.
        if live_here && !self.is_done(r)? {
            return Err(VolumeError::Pending(format!(
                "the node where thin pool {}/{pool} is live dropped the request {tag:?} (its \
                 log says why); retry",
                self.vg
            )));
        }
        match op(self) {
            Err(e) if in_use(&e) => Err(VolumeError::Pending(format!(
                "the node where thin pool {}/{pool} is active dropped the request {tag:?} \
                 (its log says why); retry",
                self.vg
            ))),
            done => done,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_tags_that_read_back() {
        let all = [
            Request::Snapshot {
                name: "snap-1".into(),
                source: "pvc-a".into(),
            },
            Request::DeleteSnapshot {
                name: "snap-1".into(),
            },
            Request::Copy {
                name: "pvc-b".into(),
                source: "snap-1".into(),
                from_snapshot: true,
                size: SizeRange {
                    required: 1 << 30,
                    limit: 0,
                },
            },
            Request::Tune {
                name: "pvc-a".into(),
                options: PoolOptions {
                    zero: Some(false),
                    discards: Some("nopassdown".into()),
                },
            },
            Request::Tune {
                name: "pvc-a".into(),
                options: PoolOptions::default(),
            },
            Request::Delete {
                name: "pvc-c".into(),
            },
        ];
        for r in &all {
            let tag = r.tag_at(1_800_000_000);
            lvmeta::names::check_tag(&tag).expect("lvm2 takes it as a tag");
            assert_eq!(
                Request::parse(&tag),
                Some((r.clone(), 1_800_000_000)),
                "{tag}"
            );
        }
        assert_eq!(all[0].reads_volume(), Some("pvc-a"));
        assert_eq!(all[1].reads_volume(), None);
        assert_eq!(all[2].reads_volume(), None);
        assert_eq!(all[1].subject(), "snap-1");
        assert_eq!(all[3].subject(), "pvc-a");
        assert_eq!(all[3].reads_volume(), None);
        assert_eq!(all[5].subject(), "pvc-c");
        assert_eq!(all[5].reads_volume(), None);
        for bad in [
            "lvmeta.csi/request=snapshot:a:b",
            "lvmeta.csi/request=snapshot:a:b#x",
            "lvmeta.csi/request=snapshot:a#1",
            "lvmeta.csi/request=snapshot::b#1",
            "lvmeta.csi/request=copy:a:b:disk:1:0#1",
            "lvmeta.csi/request=copy:a:b:volume:x:0#1",
            "lvmeta.csi/request=format:a#1",
            "lvmeta.csi/request=tune:a:yes:-#1",
            "lvmeta.csi/request=tune:a:-:trim#1",
            "lvmeta.csi/request=tune:a:y#1",
            "other=snapshot:a:b#1",
        ] {
            assert_eq!(Request::parse(bad), None, "{bad}");
        }
    }
}
