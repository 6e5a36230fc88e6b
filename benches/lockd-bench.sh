#!/usr/bin/env bash
# Runs the `lease` benchmark beside a real lvmlockd: a private mount namespace, one loop device,
# simulated host 1 = sanlock + lvmlockd + stock lvm2, host 2 = sanlock for lvmeta; a shared VG
# started on both. Then `cargo bench --bench lease` with the places in its environment.
#
# usage (root): benches/lockd-bench.sh [criterion options...]
set -euo pipefail
if [ -z "${LVMETA_BENCH_NS:-}" ]; then
    mkdir -p /dev/mapper
    exec unshare -m --propagation private env LVMETA_BENCH_NS=1 "$0" "$@"
fi
mount -t tmpfs tmpfs /dev/mapper
mount -t tmpfs tmpfs /run
top=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d /var/tmp/lvmeta-lease-bench.XXXXXX)
LOOPS=()
DAEMONS=()
cleanup() {
    for pid in "${DAEMONS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${DAEMONS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
truncate -s 1G "$WORK/lun.img"
LUN=$(losetup -f --show "$WORK/lun.img")
LOOPS+=("$LUN")
lock=$(losetup -f --show -o 1048576 --sizelimit 268435456 "$WORK/lun.img")
LOOPS+=("$lock")
ln -sf "$lock" /dev/mapper/vgbench-lvmlock
for h in 1 2; do
    mkdir -p "$WORK/h$h/etc"
    SANLOCK_RUN_DIR="$WORK/h$h" SANLOCK_PRIVILEGED=0 sanlock daemon -D -w 0 -U root -G root -L -1 \
        -S -1 -e "bench-host-$h" >"$WORK/h$h/sanlock.log" 2>&1 &
    DAEMONS+=("$!")
done
for h in 1 2; do for _ in $(seq 50); do [ -S "$WORK/h$h/sanlock.sock" ] && break; sleep 0.1; done; done
H1="$WORK/h1"
SANLOCK_RUN_DIR="$H1" lvmlockd -f -g sanlock -o 2 -s "$H1/lvmlockd.socket" -p "$H1/lvmlockd.pid" \
    --adopt-file "$H1/adopt" >"$H1/lvmlockd.log" 2>&1 &
DAEMONS+=("$!")
for _ in $(seq 50); do [ -S "$H1/lvmlockd.socket" ] && break; sleep 0.1; done
touch /run/lvmlockd.pid
cat >"$H1/etc/lvm.conf" <<CONF
global { activation = 0 use_lvmlockd = 1 system_id_source = "none" locking_dir = "$H1/lock" }
devices { obtain_device_list_from_udev = 0 use_devicesfile = 0 scan_lvs = 0 hints = "none" global_filter = [ "a|^$LUN\$|", "r|.*|" ] }
backup { backup = 0 archive = 0 }
local { host_id = 1 }
CONF
export LVM_SYSTEM_DIR="$H1/etc" LVM_SUPPRESS_FD_WARNINGS=1 LVM_LVMLOCKD_SOCKET="$H1/lvmlockd.socket"
SANLOCK_RUN_DIR="$H1" lvm vgcreate -q --shared vgbench "$LUN" >/dev/null 2>&1
SANLOCK_RUN_DIR="$H1" lvm vgchange -q --lockstart vgbench >/dev/null 2>&1
cargo build -q --release -p lvmeta --bin lvmeta
start=$(date +%s%N)
SANLOCK_RUN_DIR="$WORK/h2" "$top/target/release/lvmeta" vgchange --lockstart --devices "$LUN" \
    --host-id 2 --io-timeout 2 --lockingdir "$WORK/h2/lock" --rundir "$WORK/h2/run" vgbench >/dev/null
echo "lockspace join (io_timeout 2): $(( ($(date +%s%N) - start) / 1000000 )) ms"
cd "$top"
LVMETA_BENCH_LUN="$LUN" LVMETA_BENCH_H1="$H1" LVMETA_BENCH_H2="$WORK/h2" SANLOCK_RUN_DIR="$WORK/h2" \
    cargo bench -p lvmeta-benches --bench lease -- "$@"
