#!/usr/bin/env bash
# Runs the `lease` benchmark beside a real lvmlockd: a private mount namespace, one loop device,
# simulated host 1 = sanlock + lvmlockd + stock lvm2, host 2 = sanlock for lvmeta; a shared VG
# started on both. Then `cargo bench --bench lease` with the places in its environment.
#
# usage (root): benches/lockd-bench.sh [criterion options...]
set -euo pipefail
. "$(dirname "$0")/../tests/lockd/lib.sh"
enter_namespace "$0" "$@"
top=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /var/tmp/lvmeta-lease-bench.XXXXXX)
trap cleanup EXIT
truncate -s 1G "$WORK/lun.img"
LUN=$(losetup -f --show "$WORK/lun.img")
LOOPS+=("$LUN")
lock=$(losetup -f --show -o 1048576 --sizelimit 268435456 "$WORK/lun.img")
LOOPS+=("$lock")
ln -sf "$lock" /dev/mapper/vgbench-lvmlock
for h in 1 2; do start_sanlock "$WORK/h$h" "bench-host-$h"; done
H1="$WORK/h1"
start_lvmlockd "$H1" "$LUN"
export LVM_SYSTEM_DIR="$H1/etc" LVM_SUPPRESS_FD_WARNINGS=1 LVM_LVMLOCKD_SOCKET="$H1/lvmlockd.socket"
SANLOCK_RUN_DIR="$H1" lvm vgcreate -q --shared vgbench "$LUN" >/dev/null 2>&1
SANLOCK_RUN_DIR="$H1" lvm vgchange -q --lockstart vgbench >/dev/null 2>&1
cargo build -q --release -p lvmeta-cli --bin lvmeta
start=$(date +%s%N)
SANLOCK_RUN_DIR="$WORK/h2" "$top/target/release/lvmeta" vgchange --lockstart --devices "$LUN" \
    --host-id 2 --io-timeout 2 --lockingdir "$WORK/h2/lock" --rundir "$WORK/h2/run" vgbench >/dev/null
echo "lockspace join (io_timeout 2): $(( ($(date +%s%N) - start) / 1000000 )) ms"
cd "$top"
LVMETA_BENCH_LUN="$LUN" LVMETA_BENCH_H1="$H1" LVMETA_BENCH_H2="$WORK/h2" SANLOCK_RUN_DIR="$WORK/h2" \
    cargo bench -p lvmeta-benches --bench lease -- "$@"
