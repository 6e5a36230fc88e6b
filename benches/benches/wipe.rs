//! Erasing deleted volumes on a real loop device, side by side in one run (needs root,
//! losetup, lvm2 and blkdiscard; prints SKIPPED otherwise):
//! - `wipe-erase-256m`: the wiper's erasure of a 256 MiB volume that holds data
//!   (`Session::erase_lv`: BLKZEROOUT, which the loop driver turns into a zeroed range of
//!   its file, as a SAN turns it into WRITE SAME / UNMAP), util-linux's `blkdiscard -z`
//!   over the same bytes (the same ioctl from a stock tool), and the floor without offload:
//!   writing the zeroes (1 MiB O_DIRECT|O_DSYNC writes).
//! - `delete-volume`: DeleteVolume's work (`Volumes::delete`: the LV gone and its extents
//!   held for erasure in one commit) for volumes of 64 MiB, 1 GiB and 8 GiB, which must not
//!   grow with the size, and stock `lvremove -f` of a 1 GiB LV (which erases nothing).
//!
//! Run: `cargo bench -p lvmeta-benches --bench wipe`.
#![allow(missing_docs)] // criterion's macros generate undocumented items

/// The allocator the `lvmeta` and `csi-shim` binaries use, so the numbers are theirs.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::process::Command;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use csi_shim::volume::{Mode, SizeRange, Volumes};
use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::session::{Erase, EraseWith, Session};
use lvmeta_tests::sandbox::Sandbox;

const MIB: u64 = 1 << 20;

fn ready() -> bool {
    let ok = lvmeta_tests::privileged("wipe benchmark", &["losetup", "lvcreate", "blkdiscard"]);
    if !ok {
        eprintln!("SKIPPED wipe benchmark: needs root, loop devices, lvm2 and blkdiscard");
    }
    ok
}

fn session(sb: &Sandbox) -> Session {
    let dev = FileDevice::open_rw(std::path::Path::new(&sb.loops[0])).expect("open loop");
    Session::new(vec![Box::new(dev) as Box<dyn BlockDevice>]).with_lock_dir(sb.lock_dir())
}

fn size(bytes: u64) -> SizeRange {
    SizeRange {
        required: bytes,
        limit: 0,
    }
}

/// Erases and removes every wipe LV (outside the timed part).
fn wipe_all(v: &Volumes<'_>) {
    for w in v.wipes().expect("wipes") {
        v.wipe(&w, EraseWith::plain(Erase::ZeroOut)).expect("wipe");
    }
}

/// The byte range of the LUN under linear volume `name`.
fn range(s: &Session, lun: &str, name: &str) -> (u64, u64) {
    let vg = s.vg("vg").expect("vg");
    let p = lvmeta::activate::place(&vg, name, &[Some(lun.to_owned())]).expect("place");
    let piece = p.single().expect("one piece");
    (piece.offset.0, piece.len.0)
}

/// Fills `len` bytes at `offset` of the LUN with data (what a tenant left there).
fn fill(dev: &std::fs::File, offset: u64, len: u64, chunk: &[u8]) {
    let mut at = 0;
    while at < len {
        dev.write_all_at(chunk, offset + at).expect("fill");
        at += chunk.len() as u64;
    }
}

fn erase(c: &mut Criterion) {
    if !ready() {
        return;
    }
    let sb = Sandbox::new(&[1024 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &sb.loops[0]]);
    let s = session(&sb);
    let v = Volumes::new(&s, "vg");
    v.create("victim", Mode::Linear, size(256 * MIB))
        .expect("volume");
    let (offset, len) = range(&s, &sb.loops[0], "victim");
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_DSYNC)
        .open(&sb.loops[0])
        .expect("open O_DIRECT|O_DSYNC");
    let mut buf = vec![0u8; 2 * MIB as usize];
    let start = buf.as_ptr().align_offset(4096);
    let data = start..start + MIB as usize;
    buf[data.clone()].fill(0x5a);
    let mut g = c.benchmark_group("wipe-erase-256m");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(len));
    // The wiper's erasure of the LV (a wipe LV in the wiper; the same call for any LV).
    g.bench_function("lvmeta-erase", |b| {
        b.iter_batched(
            || fill(&direct, offset, len, &buf[data.clone()]),
            |()| {
                s.erase_lv("vg", "victim", EraseWith::plain(Erase::ZeroOut))
                    .expect("erase")
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("blkdiscard-z", |b| {
        b.iter_batched(
            || fill(&direct, offset, len, &buf[data.clone()]),
            |()| {
                let st = Command::new("blkdiscard")
                    .args(["-z", "-o", &offset.to_string(), "-l", &len.to_string()])
                    .arg(&sb.loops[0])
                    .status()
                    .expect("blkdiscard");
                assert!(st.success());
            },
            BatchSize::PerIteration,
        )
    });
    let zeros = vec![0u8; 2 * MIB as usize];
    let zstart = zeros.as_ptr().align_offset(4096);
    g.bench_function("floor-write-zeroes", |b| {
        b.iter_batched(
            || fill(&direct, offset, len, &buf[data.clone()]),
            |()| fill(&direct, offset, len, &zeros[zstart..zstart + MIB as usize]),
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn delete(c: &mut Criterion) {
    if !ready() {
        return;
    }
    let sb = Sandbox::new(&[20 * 1024 * MIB], 512);
    sb.lvmeta_ok("vgcreate", &["-s", "4m", "vg", &sb.loops[0]]);
    let s = session(&sb);
    let v = Volumes::new(&s, "vg");
    let mut g = c.benchmark_group("delete-volume");
    g.sample_size(20);
    for (label, bytes) in [("64m", 64 * MIB), ("1g", 1024 * MIB), ("8g", 8192 * MIB)] {
        g.bench_function(format!("lvmeta-{label}"), |b| {
            b.iter_batched(
                || {
                    wipe_all(&v);
                    v.create("pvc-bench", Mode::Linear, size(bytes))
                        .expect("create");
                },
                |()| assert!(v.delete("pvc-bench").expect("delete")),
                BatchSize::PerIteration,
            )
        });
    }
    wipe_all(&v);
    g.bench_function("lvm2-lvremove-1g", |b| {
        b.iter_batched(
            || {
                sb.lvm_ok(
                    &[
                        "lvcreate", "-q", "-an", "-Zn", "-L", "1g", "-n", "bench", "vg",
                    ],
                    None,
                );
            },
            |()| {
                sb.lvm_ok(&["lvremove", "-q", "-f", "vg/bench"], None);
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

criterion_group!(benches, erase, delete);
criterion_main!(benches);
