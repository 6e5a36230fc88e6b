//! Thin pools on this host, planned (pure): what a kernel thin pool needs from the metadata
//! (its `_tmeta` and `_tdata` devices, chunk size, features), the messages lvm2 queued in the
//! pool for the kernel, and lvm2's rule for delivering them (lvm2's `lib/thin/thin.c`, `libdm/libdm-deptree.c`):
//!
//! * kernel transaction id K equal to the metadata's T: the queue was delivered already;
//! * K + 1 == T: send the queue in order, then `set_transaction_id K T`;
//! * anything else: refuse, the kernel pool and the metadata disagree.
//!
//! Also the kernel's thin-pool status line, of which the transaction id and the health
//! words are read.

use crate::model::{SegKind, ThinMessage, Vg};
use crate::units::{Extents, Sectors};

use super::placement::{Layout, Placement};
pub use super::placement::{PoolMessage, PoolPlan};
use super::runs::{dm_uuid, runs};
use super::ActivateError;

fn unsupported(vg: &Vg, lv: &str, why: String) -> ActivateError {
    ActivateError::Unsupported {
        lv: format!("{}/{lv}", vg.name),
        why,
    }
}

/// The plan of thin pool `pool` of `vg`; `paths[i]` is the device of PV `i` here.
pub fn plan_pool(vg: &Vg, pool: &str, paths: &[Option<String>]) -> Result<PoolPlan, ActivateError> {
    let lv = vg.lv(pool).ok_or_else(|| ActivateError::NoLv {
        vg: vg.name.clone(),
        lv: pool.into(),
    })?;
    let Some(p) = lv.pool() else {
        return Err(unsupported(vg, pool, "is not a thin pool".into()));
    };
    let linear = |sub: &str| -> Result<Placement, ActivateError> {
        let placed = runs(vg, sub, paths)?;
        match placed.layout {
            Layout::Linear(_) | Layout::Striped(_) => Ok(placed),
            _ => Err(unsupported(
                vg,
                sub,
                "thin pool sub-LVs other than linear or striped ones are not activated by \
                 lvmeta"
                    .into(),
            )),
        }
    };
    let device_of = |name: &str| -> Result<(u32, Option<&str>), ActivateError> {
        match vg
            .lv(name)
            .and_then(|l| l.segments.first())
            .map(|s| &s.kind)
        {
            Some(SegKind::Thin(t)) if t.thin_pool == pool => Ok((t.device_id, t.origin.as_deref())),
            _ => Err(unsupported(
                vg,
                pool,
                format!("a queued message creates {name:?}, which is not a thin LV of the pool"),
            )),
        }
    };
    let mut messages = Vec::with_capacity(p.messages.len());
    for m in &p.messages {
        messages.push(match m {
            ThinMessage::Delete(id) => PoolMessage::Delete(*id),
            ThinMessage::Create(name) => match device_of(name)? {
                (id, None) => PoolMessage::CreateThin(id),
                (id, Some(origin)) => PoolMessage::CreateSnap {
                    id,
                    origin: device_of(origin)?.0,
                },
            },
        });
    }
    Ok(PoolPlan {
        name: pool.into(),
        dm_uuid: dm_uuid(vg, lv),
        bytes: Extents(lv.extents()).bytes(vg.extent()),
        metadata: linear(&p.metadata)?,
        data: linear(&p.pool)?,
        chunk_size: Sectors(u64::from(p.chunk_size)),
        zero_new_blocks: p.zero_new_blocks,
        discards: p.discards_mode().to_owned(),
        error_if_no_space: lv.status.iter().any(|s| s == "ERROR_WHEN_FULL"),
        transaction_id: p.transaction_id,
        messages,
        thin_lvs: vg
            .lvs
            .iter()
            .filter_map(|l| match &l.segments.first()?.kind {
                SegKind::Thin(t) if t.thin_pool == pool => Some((t.device_id, l.name.clone())),
                _ => None,
            })
            .collect(),
    })
}

/// The messages that bring a kernel pool at transaction id `kernel` to `pool`'s, by lvm2's
/// rule (see the module documentation); empty when it is there already.
pub fn deliveries(pool: &PoolPlan, kernel: u64) -> Result<Vec<PoolMessage>, ActivateError> {
    let t = pool.transaction_id;
    if kernel == t {
        return Ok(Vec::new());
    }
    if kernel.checked_add(1) != Some(t) {
        return Err(ActivateError::Unsupported {
            lv: format!("{}/{}", pool.metadata.vg, pool.name),
            why: format!(
                "the kernel thin pool has transaction id {kernel}, the metadata {t}: \
                 expected {t} or {} (the pool metadata was changed by another tool, or \
                 needs repair)",
                t.saturating_sub(1)
            ),
        });
    }
    // lvm2 accepts one less with nothing queued, and sends nothing.
    if pool.messages.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = pool.messages.clone();
    out.push(PoolMessage::SetTransactionId {
        from: kernel,
        to: t,
    });
    Ok(out)
}

/// What the kernel's thin-pool status line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolStatus {
    /// The transaction id in the kernel's pool metadata.
    pub transaction_id: u64,
    /// Metadata is read-only (`ro`): no messages can be sent.
    pub read_only: bool,
    /// Out of data space.
    pub out_of_data_space: bool,
    /// `needs_check`: the metadata must be checked (`thin_check`) first.
    pub needs_check: bool,
    /// Metadata blocks used and in all.
    pub metadata: (u64, u64),
    /// Data blocks (chunks) used and in all.
    pub data: (u64, u64),
}

impl PoolStatus {
    /// What keeps the pool from working as it should, as a sentence; `None` when nothing
    /// does.
    pub fn problem(&self) -> Option<&'static str> {
        if self.out_of_data_space {
            Some("is out of data space: writes to unprovisioned chunks wait or fail")
        } else if self.read_only {
            Some("has read-only metadata (an error or a full metadata LV): nothing new can be provisioned")
        } else if self.needs_check {
            Some("needs its metadata checked (thin_check) before its next activation")
        } else {
            None
        }
    }

    /// How full the pool's data and metadata are, e.g. `data 12% used, metadata 3% used`.
    pub fn usage(&self) -> String {
        let pct = |(used, all): (u64, u64)| used.saturating_mul(100).checked_div(all).unwrap_or(0);
        format!(
            "data {}% used, metadata {}% used",
            pct(self.data),
            pct(self.metadata)
        )
    }
}

/// Parses a thin-pool status line (`<transaction id> <used>/<total metadata blocks>
/// <used>/<total data blocks> <held root> ro|rw|out_of_data_space ... needs_check|-`);
/// `Fail` and anything unreadable are errors naming `device`.
pub fn parse_pool_status(device: &str, line: &str) -> Result<PoolStatus, ActivateError> {
    let bad = |why: &str| ActivateError::Io {
        device: device.into(),
        why: format!("thin-pool status {line:?}: {why}"),
    };
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.first() {
        Some(&"Fail") => return Err(bad("the pool has failed")),
        Some(&"Error") => return Err(bad("the kernel reports an error")),
        _ => {}
    }
    let transaction_id = words
        .first()
        .and_then(|w| w.parse().ok())
        .ok_or_else(|| bad("no transaction id"))?;
    let blocks = |i: usize, what: &str| {
        words
            .get(i)
            .and_then(|w| w.split_once('/'))
            .and_then(|(u, a)| Some((u.parse::<u64>().ok()?, a.parse::<u64>().ok()?)))
            .ok_or_else(|| bad(&format!("no used/total {what} blocks")))
    };
    let metadata = blocks(1, "metadata")?;
    let data = blocks(2, "data")?;
    let mode = *words.get(4).ok_or_else(|| bad("no metadata mode"))?;
    if !["rw", "ro", "out_of_data_space"].contains(&mode) {
        return Err(bad("unknown metadata mode"));
    }
    Ok(PoolStatus {
        transaction_id,
        read_only: mode == "ro",
        out_of_data_space: mode == "out_of_data_space",
        needs_check: words.contains(&"needs_check"),
        metadata,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::{self, LvSpec, PoolSpec, ThinSpec};
    use crate::session::Session;
    use crate::testing::{session_with_vg, stamp};

    fn thin(name: &str, origin: Option<&str>) -> ThinSpec {
        ThinSpec {
            name: Some(name.into()),
            pool: "pool".into(),
            extents: 1,
            origin: origin.map(Into::into),
            tags: vec![],
            activation_skip: None,
            stamp: stamp(),
        }
    }

    /// A pool with thin LV `a` (id 1), snapshot `s` of it (id 2) and thin LV `b` (id 3),
    /// never activated: the queue lvm2 leaves for an inactive pool.
    fn session() -> Session {
        let s = session_with_vg(1);
        s.update("vg", "lvcreate", |v, ctx| {
            let pool = PoolSpec {
                data: LvSpec::linear("pool", 2, stamp()),
                chunk_size: None,
                metadata_extents: None,
                discards: "nopassdown".into(),
                zero: false,
            };
            let v = edit::thin::create_pool(v, ctx, &pool)?.0;
            let v = edit::thin::create_thin(v, ctx, &thin("a", None))?.0;
            let v = edit::thin::create_thin(v, ctx, &thin("s", Some("a")))?.0;
            Ok(edit::thin::create_thin(v, ctx, &thin("b", None))?.0)
        })
        .expect("thin LVs");
        s
    }

    #[test]
    fn queued_creates_become_device_ids() {
        let vg = session().vg("vg").expect("vg");
        let plan = plan_pool(&vg, "pool", &[Some("d".into())]).expect("plan");
        assert_eq!(plan.transaction_id, 1);
        assert_eq!(
            plan.messages,
            [
                PoolMessage::CreateThin(1),
                PoolMessage::CreateSnap { id: 2, origin: 1 },
                PoolMessage::CreateThin(3),
            ]
        );
        assert_eq!(
            (plan.chunk_size, plan.discards.as_str()),
            (Sectors(128), "nopassdown")
        );
        assert!(!plan.zero_new_blocks && !plan.error_if_no_space);
        assert_eq!(plan.bytes.0, 8 << 20);
        let names: Vec<(u32, &str)> = plan
            .thin_lvs
            .iter()
            .map(|(i, n)| (*i, n.as_str()))
            .collect();
        assert_eq!(names, [(1, "a"), (2, "s"), (3, "b")]);
        assert_eq!(plan.data.bytes, plan.bytes);
        assert!(plan.dm_uuid.starts_with("LVM-") && plan.dm_uuid.len() == 68);
        // Strings as libdevmapper sends them.
        let text: Vec<String> = plan.messages.iter().map(|m| m.to_string()).collect();
        assert_eq!(text, ["create_thin 1", "create_snap 2 1", "create_thin 3"]);
        assert!(matches!(
            plan_pool(&vg, "a", &[Some("d".into())]),
            Err(ActivateError::Unsupported { .. })
        ));
    }

    #[test]
    fn a_pool_whose_data_is_one_of_its_thin_lvs_is_refused_not_recursed() {
        // Hostile metadata: `pool_tdata` made thin LV `a` of `pool` itself. Planning the pool
        // places its sub-LVs as linear or striped only (once, this recursed without end).
        let mut vg = session().vg("vg").expect("vg");
        let thin = vg.lv("a").expect("a").segments.clone();
        vg.lv_mut("pool_tdata").expect("_tdata").segments = thin;
        let e = plan_pool(&vg, "pool", &[Some("d".into())]).expect_err("a thin sub-LV");
        assert!(
            matches!(&e, ActivateError::Unsupported { lv, why } if lv == "vg/pool_tdata" && why.contains("sub-LVs")),
            "{e}"
        );
        assert!(crate::activate::place(&vg, "a", &[Some("d".into())]).is_err());
    }

    #[test]
    fn lvm2s_transaction_rule_decides_what_is_sent() {
        let vg = session().vg("vg").expect("vg");
        let plan = plan_pool(&vg, "pool", &[Some("d".into())]).expect("plan");
        // A new pool: the kernel formats metadata at transaction 0.
        let sent = deliveries(&plan, 0).expect("deliver");
        assert_eq!(sent.len(), 4);
        assert_eq!(
            sent.last().map(|m| m.to_string()).as_deref(),
            Some("set_transaction_id 0 1")
        );
        // Delivered before (a crash before the queue was cleared): nothing again.
        assert_eq!(deliveries(&plan, 1).expect("skip"), []);
        // Disagreement either way is refused, naming both ids.
        for k in [2, 5] {
            let err = deliveries(&plan, k).expect_err("mismatch").to_string();
            assert!(err.contains(&format!("transaction id {k}")), "{err}");
        }
        let mut later = plan.clone();
        later.transaction_id = 3;
        assert!(deliveries(&later, 0).is_err());
        // One less with nothing queued: accepted, nothing sent (as libdevmapper).
        let mut quiet = plan;
        quiet.messages.clear();
        assert_eq!(deliveries(&quiet, 0).expect("quiet"), []);
    }

    #[test]
    fn deletes_keep_their_place_in_the_queue() {
        let s = session();
        // Delivered and cleared, then b removed and a new thin LV made: delete 3, create 3.
        s.update("vg", "delivered", |v, ctx| {
            edit::thin::delivered(v, ctx, "pool", 1)
        })
        .expect("clear");
        s.update("vg", "lvremove", |v, ctx| {
            edit::lv::remove(v, ctx, "b", false)
        })
        .expect("remove b");
        s.update("vg", "lvcreate", |v, ctx| {
            edit::thin::create_thin(v, ctx, &thin("c", None)).map(|x| x.0)
        })
        .expect("c");
        let vg = s.vg("vg").expect("vg");
        let plan = plan_pool(&vg, "pool", &[Some("d".into())]).expect("plan");
        let sent: Vec<String> = deliveries(&plan, 1)
            .expect("deliver")
            .iter()
            .map(|m| m.to_string())
            .collect();
        assert_eq!(
            sent,
            ["delete 3", "create_thin 3", "set_transaction_id 1 2"]
        );
    }

    #[test]
    fn pool_status_lines_are_read_as_the_kernel_writes_them() {
        let ok = parse_pool_status(
            "vg-pool-tpool",
            "7 12/1024 0/160 - rw no_discard_passdown queue_if_no_space - 1024",
        )
        .expect("status");
        assert_eq!(
            ok,
            PoolStatus {
                transaction_id: 7,
                read_only: false,
                out_of_data_space: false,
                needs_check: false,
                metadata: (12, 1024),
                data: (0, 160),
            }
        );
        assert_eq!(ok.problem(), None);
        assert_eq!(ok.usage(), "data 0% used, metadata 1% used");
        let ro = parse_pool_status(
            "p",
            "3 12/1024 5/160 - ro discard_passdown error_if_no_space needs_check 1024",
        )
        .expect("ro");
        assert!(ro.read_only && ro.needs_check);
        assert!(ro.problem().is_some_and(|p| p.contains("read-only")));
        let full = parse_pool_status("p", "3 12/1024 160/160 - out_of_data_space - - - 1024")
            .expect("full");
        assert!(full
            .problem()
            .is_some_and(|p| p.contains("out of data space")));
        assert_eq!(full.usage(), "data 100% used, metadata 1% used");
        for bad in [
            "Fail",
            "",
            "x 1/2 1/2 - rw",
            "1 1/2 1/2 - zz",
            "1 1/2",
            "1 1/x 1/2 - rw",
            "1 1/2 12 - rw",
        ] {
            let err = parse_pool_status("vg-pool-tpool", bad).expect_err(bad);
            assert!(err.to_string().contains("vg-pool-tpool"), "{err}");
        }
    }
}
