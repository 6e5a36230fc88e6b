//! A shared VG's LV create + remove with leases, beside stock lvm2 + lvmlockd on the same VG:
//! lvmeta (VG lease acquire, LV lease init, commit, value block, release; then the same for the
//! removal) against `lvcreate -an -Zn` + `lvremove -f` through lvmlockd.
//!
//! Needs the daemons `benches/lockd-bench.sh` starts (run that script as root; it passes the
//! places in LVMETA_BENCH_*); prints SKIPPED otherwise.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::lease::{sanlock::SanlockLeases, Host};
use lvmeta::ops::Session;

fn bench(c: &mut Criterion) {
    let (Ok(lun), Ok(h1), Ok(h2)) = (
        std::env::var("LVMETA_BENCH_LUN"),
        std::env::var("LVMETA_BENCH_H1"),
        std::env::var("LVMETA_BENCH_H2"),
    ) else {
        eprintln!(
            "SKIPPED lease benchmark: run benches/lockd-bench.sh (root) to start the daemons"
        );
        return;
    };
    let dev = FileDevice::open_rw(std::path::Path::new(&lun)).expect("open LUN");
    let host = Host {
        manager: Arc::new(SanlockLeases::new()),
        host_id: 2,
        io_timeout: 2,
        wait: Duration::from_secs(60),
    };
    let s = Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>])
        .with_lock_dir(format!("{h2}/lock").into())
        .with_host(host);
    let lvm = |args: &[&str]| {
        let out = Command::new("lvm")
            .args(args)
            .env("SANLOCK_RUN_DIR", &h1)
            .output()
            .expect("lvm");
        assert!(
            out.status.success(),
            "lvm {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let mut g = c.benchmark_group("shared-lv-create-remove");
    g.sample_size(10);
    g.bench_function("lvmeta", |b| {
        b.iter(|| lvmeta_tests::create_remove_lv(&s, "vgbench", 1))
    });
    g.bench_function("lvm2-lvmlockd", |b| {
        b.iter(|| {
            lvm(&[
                "lvcreate", "-q", "-an", "-Zn", "-l", "1", "-n", "bench2", "vgbench",
            ]);
            lvm(&["lvremove", "-q", "-f", "vgbench/bench2"]);
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
