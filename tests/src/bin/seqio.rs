//! A write log on a block device for the fencing tests: which host's writes landed, and in
//! what order. Every block (4 KiB, O_DIRECT and O_DSYNC: acknowledged means on the LUN)
//! holds a header `LVMSEQIO`, the writer's id, its sequence number and the writer's clock.
//!
//! ```text
//! seqio write DEV ID BLOCKS STATUS   write blocks round robin, seq 1, 2, ..., for ever; a
//!                                    failed write is tried again (as an application or
//!                                    the page cache would); STATUS gets `acked=N failed=N
//!                                    longest_ms=N error=...` as it goes (longest_ms: the
//!                                    slowest write so far, a pause's length)
//! seqio mark DEV ID BLOCKS           write every block once (seq 1..=BLOCKS)
//! seqio scan DEV BLOCKS              per writer: blocks holding its writes, highest seq
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use lvmeta::dev::{BlockDevice, FileDevice};

const BLOCK: usize = 4096;
const MAGIC: &[u8; 8] = b"LVMSEQIO";

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Writes for ever, retrying failed writes.
    Write {
        dev: PathBuf,
        id: char,
        blocks: u64,
        status: PathBuf,
    },
    /// Writes every block once.
    Mark { dev: PathBuf, id: char, blocks: u64 },
    /// Counts the blocks of each writer.
    Scan { dev: PathBuf, blocks: u64 },
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn block(id: char, seq: u64) -> Vec<u8> {
    let mut b = vec![id as u8; BLOCK];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&u64::from(id).to_le_bytes());
    b[16..24].copy_from_slice(&seq.to_le_bytes());
    b[24..32].copy_from_slice(&now_ns().to_le_bytes());
    b
}

fn status(path: &Path, acked: u64, failed: u64, longest_ms: u128, error: &str) {
    let tmp = path.with_extension("tmp");
    let text = format!(
        "acked={acked} failed={failed} at={} longest_ms={longest_ms} error={error}\n",
        now_ns()
    );
    if std::fs::write(&tmp, text).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let open = |p: &Path| {
        FileDevice::open_rw(p).unwrap_or_else(|e| {
            eprintln!("seqio: {}: {e}", p.display());
            std::process::exit(2)
        })
    };
    match args.cmd {
        Cmd::Write {
            dev,
            id,
            blocks,
            status: st,
        } => {
            let d = open(&dev);
            let (mut seq, mut failed, mut error) = (0u64, 0u64, String::from("none"));
            let mut longest = 0u128;
            loop {
                let next = seq + 1;
                let at = (next - 1) % blocks.max(1) * BLOCK as u64;
                let t = std::time::Instant::now();
                let wrote = d.write_at(at, &block(id, next));
                longest = longest.max(t.elapsed().as_millis());
                match wrote {
                    Ok(()) => seq = next,
                    Err(e) => {
                        failed += 1;
                        error = e.to_string().replace(' ', "_");
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                }
                if (seq + failed) % 32 == 0 {
                    status(&st, seq, failed, longest, &error);
                }
            }
        }
        Cmd::Mark { dev, id, blocks } => {
            let d = open(&dev);
            for seq in 1..=blocks {
                if let Err(e) = d.write_at((seq - 1) * BLOCK as u64, &block(id, seq)) {
                    eprintln!("seqio mark: block {seq}: {e}");
                    return std::process::ExitCode::FAILURE;
                }
            }
            println!("marked={blocks}");
        }
        Cmd::Scan { dev, blocks } => {
            let d = FileDevice::open(&dev).unwrap_or_else(|e| {
                eprintln!("seqio: {}: {e}", dev.display());
                std::process::exit(2)
            });
            let mut seen: BTreeMap<char, (u64, u64)> = BTreeMap::new();
            let mut other = 0u64;
            let mut b = vec![0u8; BLOCK];
            for i in 0..blocks {
                if let Err(e) = d.read_at(i * BLOCK as u64, &mut b) {
                    eprintln!("seqio scan: block {i}: {e}");
                    return std::process::ExitCode::FAILURE;
                }
                let id = u64::from_le_bytes(b[8..16].try_into().unwrap_or_default());
                let seq = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
                match char::from_u32(u32::try_from(id).unwrap_or(0)) {
                    Some(c) if &b[..8] == MAGIC => {
                        let e = seen.entry(c).or_default();
                        e.0 += 1;
                        e.1 = e.1.max(seq);
                    }
                    _ => other += 1,
                }
            }
            for (c, (n, max)) in seen {
                println!("{c} count={n} max={max}");
            }
            println!("other count={other}");
        }
    }
    std::process::ExitCode::SUCCESS
}
