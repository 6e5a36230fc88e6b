//! The in-memory side of one change to a VG of 10,000 KubeSAN-shaped thin volumes (a thin
//! pool per volume: 40,000 LVs), no I/O: what a change costs besides its two writes.
//! - `kubesan-10000/create-thin-volume`: the edit CreateVolume makes (pool + thin LV), with
//!   the full checks after each step (what the pure edit functions do alone);
//! - `/create-thin-volume-checked-once`: the same as the session runs it: in a group whose
//!   version is indexed, the checks once, on what the edit changed;
//! - `/remove-thin-volume`: the edit DeleteVolume makes (without erasure);
//! - `/validate`: lvm2's read and write checks of the whole VG;
//! - `/print`: the VG's whole text, printed;
//! - `/print-cached`: the text of the VG after a change, as a commit prints it (the LVs the
//!   change did not touch copied from the last print);
//! - `/copy`: a copy of the VG (what each change starts from);
//! - `/index`: the index of the VG's LVs (built once a group commit, then kept up to date).
//!
//! Run: `cargo bench -p lvmeta-benches --bench model`.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use lvmeta::edit::{self, EditCtx, LvSpec, NewPv, PoolSpec, ThinSpec, VgSpec};
use lvmeta::model::index::{Indexed, VgIndex};
use lvmeta::model::{validate, Area, Vg};
use lvmeta::text::Style;
use lvmeta::uuid::Uuid;

const VOLUMES: usize = 10_000;
const TAG: &str = "lvmeta.csi/mode=thin";

fn pool(name: &str) -> PoolSpec {
    PoolSpec {
        data: LvSpec::linear(&format!("{name}-pool"), 1, lvmeta::testing::stamp()),
        chunk_size: None,
        metadata_extents: None,
        discards: "passdown".into(),
        zero: true,
    }
}

fn thin(name: &str, pool: String) -> ThinSpec {
    ThinSpec {
        name: Some(name.to_owned()),
        pool,
        extents: 1,
        origin: None,
        tags: vec![TAG.into()],
        activation_skip: Some(false),
        stamp: lvmeta::testing::stamp(),
    }
}

/// Creates thin volume `name` as CreateVolume does.
fn create(vg: Vg, ctx: &EditCtx, name: &str) -> Vg {
    let (vg, p) = edit::thin::create_pool(vg, ctx, &pool(name)).expect("pool");
    edit::thin::create_thin(vg, ctx, &thin(name, p))
        .expect("thin")
        .0
}

fn name(i: usize) -> String {
    format!("pvc-{i:08x}-0000-4000-8000-{i:012x}")
}

/// A VG of `VOLUMES` thin volumes: one made by the edits, the rest copies of its LVs with
/// new names, ids and extents (building them through the edits would take minutes).
fn kubesan_vg() -> Vg {
    let pv = NewPv {
        id: Uuid::random(),
        device: "/dev/lun".into(),
        dev_size: lvmeta::units::Bytes(2 << 40),
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
    let vg = edit::vg::create(&spec, &[pv], &lvmeta::testing::stamp()).expect("vg");
    let mut vg = create(vg, &EditCtx::default(), &name(0));
    let template: Vec<_> = vg.lvs.iter().map(|l| (**l).clone()).collect();
    let first = name(0);
    // Extents the first volume's LVs (but the pool metadata spare) use.
    let mut next_pe = template
        .iter()
        .flat_map(|l| &l.segments)
        .flat_map(|s| s.kind.areas().iter().map(move |a| (a, s.area_len())))
        .filter_map(|(a, len)| match a {
            Area::Pv { pe, .. } => Some(pe + len),
            Area::Lv { .. } => None,
        })
        .max()
        .unwrap_or(0);
    for i in 1..VOLUMES {
        let new = name(i);
        for t in template.iter().filter(|l| !l.name.contains("_pmspare")) {
            let mut lv = t.clone();
            lv.name = lv.name.replace(&first, &new);
            lv.id = Uuid::random();
            for s in &mut lv.segments {
                let len = s.area_len();
                for a in s.kind.areas_mut() {
                    if let Area::Pv { pe, .. } = a {
                        *pe = next_pe;
                        next_pe += len;
                    }
                }
                s.kind.rename_lv(|n| {
                    if n.contains(&first) {
                        *n = n.replace(&first, &new);
                    }
                });
            }
            vg.lvs.push(Arc::new(lv));
        }
    }
    edit::check(&vg, &EditCtx::default()).expect("a valid VG");
    vg
}

/// This process's resident memory in MB.
fn resident() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1000.0
}

fn model(c: &mut Criterion) {
    let before = resident();
    let vg = kubesan_vg();
    eprintln!(
        "kubesan-{VOLUMES}: the model takes about {:.1} MB",
        resident() - before
    );
    let before = resident();
    let base = Arc::new(Indexed::of(vg.clone()));
    eprintln!(
        "kubesan-{VOLUMES}: its index takes about {:.1} MB",
        resident() - before
    );
    let mut g = c.benchmark_group(format!("kubesan-{VOLUMES}"));
    g.sample_size(20);
    let mut n = 0usize;
    g.bench_function("create-thin-volume", |b| {
        b.iter(|| {
            n += 1;
            create(vg.clone(), &EditCtx::default(), &format!("new-{n}"))
        })
    });
    g.bench_function("create-thin-volume-checked-once", |b| {
        b.iter(|| {
            n += 1;
            let ctx = EditCtx::in_group(base.clone(), Default::default());
            let out = create(base.vg().clone(), &ctx, &format!("new-{n}"));
            validate::check_change(base.vg(), &out, Some(base.index())).expect("checks");
            out
        })
    });
    let victim = name(VOLUMES / 2);
    g.bench_function("remove-thin-volume", |b| {
        let ctx = &EditCtx::default();
        b.iter(|| {
            let v = edit::lv::remove(vg.clone(), ctx, &victim, false).expect("thin");
            edit::lv::remove(v, ctx, &format!("{victim}-pool"), false).expect("pool")
        })
    });
    g.bench_function("validate", |b| {
        b.iter(|| {
            validate::check_read(&vg).expect("read checks");
            validate::check_write(&vg).expect("write checks");
        })
    });
    let mut buf = String::new();
    g.bench_function("print", |b| {
        b.iter(|| {
            buf = vg.write_text(Style::Raw, "bench", std::mem::take(&mut buf));
        })
    });
    eprintln!(
        "kubesan-{VOLUMES}: {} LVs, {} bytes of text",
        vg.lvs.len(),
        buf.len()
    );
    // Two versions a change apart, printed in turn: each print finds the other's LVs cached
    // but for the four the change made.
    let changed = create(vg.clone(), &EditCtx::default(), "changed");
    let mut cache = lvmeta::model::TextCache::aligned(4096, 1024);
    let mut turn = false;
    g.bench_function("print-cached", |b| {
        b.iter(|| {
            turn = !turn;
            let v = if turn { &vg } else { &changed };
            v.write_text_cached("bench", &mut cache).len()
        })
    });
    g.bench_function("copy", |b| b.iter(|| vg.clone()));
    g.bench_function("index", |b| b.iter(|| VgIndex::of(&vg)));
    g.finish();
}

criterion_group!(benches, model);
criterion_main!(benches);
