//! The `lvmeta` command against stock lvm2's, as processes, interleaved round by round:
//! `lvmeta lvcreate -an -L 8m -n bench vg` + `lvmeta lvremove -f vg/bench`, and lvm2's
//! `lvcreate -an -Zn` + `lvremove -f` of the same LV on the same loop device, and the floor
//! (one commit's two 4 KiB O_DIRECT|O_DSYNC writes).
//!
//! criterion measures each command pair in its own window of seconds (the `commit` bench); on
//! a shared machine the disk and the CPU change speed between windows. Here each round runs
//! lvm2's pair, lvmeta's pair twice and the floor back to back, so every ratio compares pairs
//! that saw the same machine:
//! - `after lvm2`: lvmeta's first pair, right after lvm2's (which ends waiting on the disk);
//! - `warm`: lvmeta's second pair, right after its first, as criterion runs them.
//!
//! Run: `cargo bench -p lvmeta-benches --bench cli` (`ROUNDS=N` for other than 60 rounds).
#![allow(missing_docs)]

use std::time::{Duration, Instant};

use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    if !lvmeta_tests::privileged("cli benchmark", &["losetup", "lvcreate"]) {
        eprintln!("SKIPPED cli benchmark: needs root, loop devices and lvm2");
        return;
    }
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(60)
        .max(1);
    let sb = Sandbox::new(&[512 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["vg", &sb.loops[0]]);
    let lvmeta = lvmeta_tests::lvmeta_bin();
    let ours = || {
        let t = Instant::now();
        sb.lvmeta_pair(&lvmeta);
        t.elapsed()
    };
    let theirs = || {
        let t = Instant::now();
        sb.lvm2_pair();
        t.elapsed()
    };
    let mut write_floor = lvmeta_tests::commit_floor(&sb.loops[0], 512 * MIB);
    let mut floor = || {
        let t = Instant::now();
        write_floor();
        t.elapsed()
    };
    // Warm-up: page cache, lvm2's caches, the binaries.
    for _ in 0..3 {
        ours();
        theirs();
    }
    let (mut cold, mut warm, mut lvm2, mut fl) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut r_cold, mut r_warm) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let y = theirs();
        let (x1, x2, z) = (ours(), ours(), floor());
        r_cold.push(y.as_secs_f64() / x1.as_secs_f64());
        r_warm.push(y.as_secs_f64() / x2.as_secs_f64());
        cold.push(x1);
        warm.push(x2);
        lvm2.push(y);
        fl.push(z);
    }
    let (cold, warm, lvm2, fl) = (p50(cold), p50(warm), p50(lvm2), p50(fl));
    println!("cli pair, {rounds} interleaved rounds, p50:");
    println!("  lvm2 lvcreate + lvremove          {:8.2} ms", ms(lvm2));
    println!("  floor (one commit's two writes)   {:8.2} ms", ms(fl));
    for (name, ours, mut r) in [("after lvm2", cold, r_cold), ("warm", warm, r_warm)] {
        r.sort_by(f64::total_cmp);
        println!(
            "  lvmeta pair, {name:10} {:8.2} ms: {:.1}x (per round: p10 {:.1}x, p50 {:.1}x, \
             p90 {:.1}x)",
            ms(ours),
            ms(lvm2) / ms(ours),
            r[r.len() / 10],
            r[r.len() / 2],
            r[r.len() * 9 / 10],
        );
    }
}
