//! Reprinting a VG's text in place ([`TextCache`]) gives exactly the text a full print gives,
//! whatever sequence of edits came between: LVs created, changed, renamed, hidden and removed
//! anywhere in the text, the VG's own fields growing and shrinking (so kept LV text moves both
//! ways in the buffer), the text growing past its buffer and shrinking far below it.

use lvmeta::edit::{self, LvSpec, NewPv, VgSpec};
use lvmeta::model::{TextCache, Vg};
use lvmeta::testing::stamp;
use lvmeta::text::Style;
use proptest::prelude::*;

/// One edit of the sequence; indexes pick an existing LV modulo their number.
#[derive(Debug, Clone)]
enum Op {
    Create(u8),
    Remove(usize),
    Tag(usize, u8),
    Rename(usize),
    Hide(usize),
    VgTag(u8),
    VgUntag,
    Many(u8),
    RemoveHalf,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u8>().prop_map(Op::Create),
        3 => any::<usize>().prop_map(Op::Remove),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(i, n)| Op::Tag(i, n)),
        1 => any::<usize>().prop_map(Op::Rename),
        1 => any::<usize>().prop_map(Op::Hide),
        1 => any::<u8>().prop_map(Op::VgTag),
        1 => Just(Op::VgUntag),
        1 => any::<u8>().prop_map(Op::Many),
        1 => Just(Op::RemoveHalf),
    ]
}

fn new_vg() -> Vg {
    let pv = NewPv {
        id: lvmeta::uuid::Uuid::random(),
        device: "/dev/x".into(),
        dev_size: lvmeta::units::Bytes(64 << 30),
        pe_start: lvmeta::units::Bytes(1 << 20),
        tail: lvmeta::units::Bytes(0),
        bootloader: None,
    };
    let spec = VgSpec {
        name: "vg".into(),
        extent_size: 8192,
        tags: vec![],
        shared: None,
    };
    edit::vg::create(&spec, &[pv], &stamp()).expect("vgcreate")
}

/// Applies `op` to `v` (an edit the model refuses leaves it as it was).
fn apply(v: Vg, op: &Op, serial: &mut u32) -> Vg {
    let ctx = &lvmeta::edit::EditCtx::default();
    let names: Vec<String> = v.lvs.iter().map(|l| l.name.clone()).collect();
    let pick = |i: usize| names.get(i % names.len().max(1)).cloned();
    let mut fresh = || {
        *serial += 1;
        format!("lv{serial}")
    };
    let out = match op {
        Op::Create(n) => {
            let spec = LvSpec::linear(&fresh(), 1 + u32::from(*n % 3), stamp());
            edit::lv::create(v.clone(), ctx, &spec).map(|r| r.0)
        }
        Op::Many(n) => {
            let mut w = v.clone();
            for _ in 0..(*n % 40) {
                let spec = LvSpec::linear(&fresh(), 1, stamp());
                w = edit::lv::create(w, ctx, &spec).expect("create").0;
            }
            Ok(w)
        }
        Op::Remove(i) => match pick(*i) {
            Some(n) => edit::lv::remove(v.clone(), ctx, &n, false),
            None => Ok(v.clone()),
        },
        Op::RemoveHalf => {
            let mut w = v.clone();
            for n in names.iter().step_by(2) {
                // Hidden LVs are refused: kept.
                w = edit::lv::remove(w.clone(), ctx, n, false).unwrap_or(w);
            }
            Ok(w)
        }
        Op::Tag(i, t) => match pick(*i) {
            Some(n) => {
                let change = edit::lv::LvChange {
                    add_tags: vec![format!("tag{}", "x".repeat(usize::from(*t % 50)))],
                    ..Default::default()
                };
                edit::lv::change(v.clone(), ctx, &n, &change)
            }
            None => Ok(v.clone()),
        },
        Op::Rename(i) => match pick(*i) {
            Some(n) => edit::lv::rename(v.clone(), ctx, &n, &fresh()),
            None => Ok(v.clone()),
        },
        Op::Hide(i) => {
            let mut w = v.clone();
            if let Some(l) = pick(*i).and_then(|n| w.lv_mut(&n)) {
                l.status.retain(|s| s != "VISIBLE");
            }
            Ok(w)
        }
        Op::VgTag(t) => {
            let mut w = v.clone();
            w.tags.push(format!("t{}", "y".repeat(usize::from(*t))));
            Ok(w)
        }
        Op::VgUntag => {
            let mut w = v.clone();
            w.tags.clear();
            Ok(w)
        }
    };
    out.unwrap_or(v)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn reprinted_text_is_the_full_text(ops in proptest::collection::vec(op(), 1..40)) {
        let mut cache = TextCache::aligned(4096, 1024);
        let mut v = new_vg();
        let mut serial = 0;
        for (i, op) in ops.iter().enumerate() {
            v = apply(v, op, &mut serial);
            v.seqno += 1;
            let text = v.write_text_cached("t", &mut cache).to_owned();
            prop_assert_eq!(&text, &v.to_text(Style::Raw, "t"), "after op {} {:?}", i, op);
            let at = cache.text_range();
            prop_assert_eq!(cache.buffer()[at.start..].as_ptr().align_offset(4096), 0);
            prop_assert!(cache.buffer()[at.end..at.end + 1024].iter().all(|&b| b == 0));
        }
    }
}
