//! Metadata commits on a real loop device, side by side in one run (needs root, losetup and
//! lvm2; prints SKIPPED otherwise):
//! - `lv-create-remove`: lvmeta's LV create + remove through the library and as two
//!   `lvmeta` processes, stock `lvcreate -an -Zn` + `lvremove -f` (activation off) on the
//!   same device, and the floor: two 4 KiB O_DIRECT|O_DSYNC writes.
//! - `thin-10k`: one more thin LV in a VG that already has 10,000 thin LVs, in a 64 MiB
//!   metadata area (criterion's median is the p50).
//!
//! Run: `cargo bench -p lvmeta-benches --bench commit`.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::sync::atomic::{AtomicUsize, Ordering};

use criterion::{criterion_group, criterion_main, Criterion};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::{self, LvSpec, PoolSpec, ThinSpec};
use lvmeta::session::Session;
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;

fn ready() -> bool {
    let ok = lvmeta_tests::privileged("commit benchmark", &["losetup", "lvcreate"]);
    if !ok {
        eprintln!("SKIPPED commit benchmark: needs root, loop devices and lvm2");
    }
    ok
}

fn session(sb: &Sandbox, i: usize) -> Session {
    let dev = FileDevice::open_rw(std::path::Path::new(&sb.loops[i])).expect("open loop");
    Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_lock_dir(sb.lock_dir())
}

fn create_remove(c: &mut Criterion) {
    if !ready() {
        return;
    }
    let sb = Sandbox::new(&[512 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["vg", &sb.loops[0]]);
    let s = session(&sb, 0);
    let mut g = c.benchmark_group("lv-create-remove");
    g.sample_size(20);
    g.bench_function("lvmeta", |b| {
        b.iter(|| lvmeta_tests::create_remove_lv(&s, "vg", 2))
    });
    // The `lvmeta` command as processes, as an admin runs it: what lvm2's pair is up against.
    let lvmeta = lvmeta_tests::lvmeta_bin();
    g.bench_function("lvmeta-cli", |b| b.iter(|| sb.lvmeta_pair(&lvmeta)));
    g.bench_function("lvm2", |b| b.iter(|| sb.lvm2_pair()));
    let mut w = lvmeta_tests::commit_floor(&sb.loops[0], 512 * MIB);
    g.bench_function("floor-2x4k-dsync", |b| b.iter(&mut w));
    g.finish();
}

fn thin_10k(c: &mut Criterion) {
    if !ready() {
        return;
    }
    let sb = Sandbox::new(&[1024 * MIB], 512);
    sb.lvmeta_ok("pvcreate", &["--metadatasize", "64m", &sb.loops[0]]);
    sb.lvmeta_ok("vgcreate", &["vg", &sb.loops[0]]);
    let s = session(&sb, 0);
    let pool = PoolSpec {
        data: LvSpec::linear("pool", 100, lvmeta::testing::stamp()),
        chunk_size: None,
        metadata_extents: None,
        discards: "passdown".into(),
        zero: true,
    };
    s.update("vg", "lvcreate", |v, ctx| {
        edit::thin::create_pool(v, ctx, &pool).map(|x| x.0)
    })
    .expect("pool");
    let thin = |name: String| ThinSpec {
        name: Some(name),
        pool: "pool".into(),
        extents: 256,
        origin: None,
        tags: vec!["kubesan.gitlab.io/managed=yes".into()],
        activation_skip: None,
        stamp: lvmeta::testing::stamp(),
    };
    let specs: Vec<ThinSpec> = (0..10_000).map(|i| thin(format!("pvc-{i:06}"))).collect();
    s.update("vg", "lvcreate", |v, ctx| {
        edit::thin::create_thins(v, ctx, &specs).map(|x| x.0)
    })
    .expect("10,000 thin LVs");
    let n = AtomicUsize::new(0);
    let mut g = c.benchmark_group("thin-10k");
    g.sample_size(20);
    g.bench_function("lvmeta-create", |b| {
        b.iter(|| {
            let name = format!("new-{}", n.fetch_add(1, Ordering::Relaxed));
            s.update("vg", "lvcreate", |v, ctx| {
                edit::thin::create_thin(v, ctx, &thin(name)).map(|x| x.0)
            })
            .expect("create");
        })
    });
    g.finish();
}

criterion_group!(benches, create_remove, thin_10k);
criterion_main!(benches);
