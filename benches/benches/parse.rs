//! Parse + model build of metadata text: a generated VG with 10,000 LVs and every fixture.
//! Run: `cargo bench -p lvmeta-benches --bench parse`. Throughput is bytes of metadata text.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use lvmeta::model::Vg;
use lvmeta_tests::{fixtures_dir, scan_all, synthetic_vg_text, Fixture, FIXTURES};

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse+model");
    let big = synthetic_vg_text(10_000);
    g.throughput(Throughput::Bytes(big.len() as u64));
    g.bench_function("synthetic-10000-lvs", |b| {
        b.iter(|| Vg::from_text(std::hint::black_box(&big)).expect("parses"))
    });
    for name in FIXTURES {
        let fx = Fixture::open(&fixtures_dir().join(name));
        let scan = scan_all(&fx.mem_devices());
        let text = scan.vgs[0].text.to_string();
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_function(format!("fixture-{name}"), |b| {
            b.iter(|| Vg::from_text(std::hint::black_box(&text)).expect("parses"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
