#!/usr/bin/env bash
# A mixed cluster on one machine: simulated host 1 runs stock lvm2 + lvmlockd + sanlock,
# simulated host 2 runs lvmeta + its own sanlock daemon (SANLOCK_RUN_DIR). Both share VGs on
# one loop device: a VG made by lvm2 and one made by lvmeta; each side changes them and must
# see the other's changes; lvm2's vgck must stay clean and both sides' reports must agree.
#
# usage: mixed.sh LVMETA_BINARY     (root; run by tests/tests/lvm2_lockd.rs)
set -euo pipefail
if [ -z "${LVMETA_MIXED_NS:-}" ]; then
    mkdir -p /dev/mapper
    exec unshare -m --propagation private env LVMETA_MIXED_NS=1 "$0" "$@"
fi
mount -t tmpfs tmpfs /dev/mapper
mount -t tmpfs tmpfs /run
LVMETA=$(realpath "$1")
WORK=$(mktemp -d /var/tmp/lvmeta-mixed.XXXXXX)
LOOPS=()
DAEMONS=()
cleanup() {
    # sanlock keeps running while it holds lockspaces: stop the daemons the hard way.
    for pid in "${DAEMONS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${DAEMONS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
say() { echo "mixed: $*" >&2; }

truncate -s 700M "$WORK/lun.img"
LUN=$(losetup -f --show "$WORK/lun.img")
LOOPS+=("$LUN")

# Host 1: sanlock + lvmlockd (io_timeout 2) + stock lvm2 with host_id 1.
H1="$WORK/h1"
mkdir -p "$H1/etc"
SANLOCK_RUN_DIR="$H1" SANLOCK_PRIVILEGED=0 sanlock daemon -D -w 0 -U root -G root -L -1 -S -1 \
    -e mixed-host-1 >"$H1/sanlock.log" 2>&1 &
DAEMONS+=("$!")
for _ in $(seq 50); do [ -S "$H1/sanlock.sock" ] && break; sleep 0.1; done
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
lvm1() {
    SANLOCK_RUN_DIR="$H1" LVM_SYSTEM_DIR="$H1/etc" LVM_SUPPRESS_FD_WARNINGS=1 \
        LVM_LVMLOCKD_SOCKET="$H1/lvmlockd.socket" lvm "$@"
}

# Host 2: its own sanlock daemon; lvmeta with host id 2.
H2="$WORK/h2"
mkdir -p "$H2"
SANLOCK_RUN_DIR="$H2" SANLOCK_PRIVILEGED=0 sanlock daemon -D -w 0 -U root -G root -L -1 -S -1 \
    -e mixed-host-2 >"$H2/sanlock.log" 2>&1 &
DAEMONS+=("$!")
for _ in $(seq 50); do [ -S "$H2/sanlock.sock" ] && break; sleep 0.1; done
lvmeta2() {
    local verb=$1
    shift
    SANLOCK_RUN_DIR="$H2" "$LVMETA" "$verb" --devices "$LUN" --host-id 2 --io-timeout 2 \
        --lockingdir "$H2/lock" --rundir "$H2/run" "$@"
}
lvmeta_report() {
    SANLOCK_RUN_DIR="$H2" "$LVMETA" "$@" --devices "$LUN" 2>/dev/null
}

FIELDS=lv_name,lv_uuid,lv_size,lv_attr,segtype,devices,lv_lock_args
# same VG: lvm2's and lvmeta's `lvs -a` JSON hold the same rows, lvm2's vgck is clean.
same() {
    lvm1 lvs -a --reportformat json --units b --nosuffix -o "$FIELDS" "$1" 2>/dev/null >"$WORK/a.json"
    lvmeta_report lvs -a --reportformat json --units b --nosuffix -o "$FIELDS" "$1" >"$WORK/b.json"
    python3 - "$WORK/a.json" "$WORK/b.json" <<'PY'
import json, sys
rows = lambda p: sorted(json.dumps(r, sort_keys=True) for r in json.load(open(p))["report"][0]["lv"])
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if a != b:
    sys.exit(f"lvm2 and lvmeta disagree:\n lvm2:   {a}\n lvmeta: {b}")
PY
    lvm1 vgck "$1" 2>"$WORK/vgck.err" || { cat "$WORK/vgck.err" >&2; exit 1; }
    if grep -v -e "Activation disabled" "$WORK/vgck.err" | grep -q .; then
        cat "$WORK/vgck.err" >&2
        exit 1
    fi
}
has_lv() { lvmeta_report lvs --noheadings -o lv_name "$1" | grep -qw "$2"; }
lvm_has_lv() { lvm1 lvs --noheadings -o lv_name "$1" 2>/dev/null | grep -qw "$2"; }
# lockloop VG OFFSET: what lvmlockd on host 1 opens as /dev/mapper/VG-lvmlock.
lockloop() {
    local l
    l=$(losetup -f --show -o "$2" --sizelimit 268435456 "$WORK/lun.img")
    LOOPS+=("$l")
    ln -sf "$l" "/dev/mapper/$1-lvmlock"
}

say "A: lvm2 makes a shared VG, lvmeta joins it"
lockloop vga 1048576
lvm1 vgcreate -q --shared vga "$LUN"
lvm1 vgchange -q --lockstart vga
start=$(date +%s%N)
lvmeta2 vgchange --lockstart vga
say "A: lvmeta joined lvm_vga in $(( ($(date +%s%N) - start) / 1000000 )) ms"
lvmeta2 lvcreate -an -n bylvmeta -L 8m vga
lvm_has_lv vga bylvmeta
lvm1 lvcreate -q -an -Zn -n bylvm -L 8m vga
has_lv vga bylvm
same vga
# lvmeta's LV lease is on disk under the LV's uuid, where its lock_args say.
uuid=$(lvmeta_report lvs --noheadings -o lv_uuid vga/bylvmeta | tr -d ' ')
off=$(lvmeta_report lvs --noheadings -o lv_lock_args vga/bylvmeta | tr -d ' ' | cut -d: -f2)
SANLOCK_RUN_DIR="$H1" sanlock direct dump "/dev/mapper/vga-lvmlock:$off:1048576" >"$WORK/dump" 2>&1
grep -q "lvm_vga.*$uuid" "$WORK/dump" || { say "no lease named $uuid at $off:"; cat "$WORK/dump" >&2; exit 1; }
lvmeta2 lvextend -L +4m vga/bylvm
lvm1 lvextend -q -L +4m vga/bylvmeta
lvmeta2 lvrename vga/bylvmeta renamed
lvm1 lvremove -q -f vga/renamed
lvmeta2 lvremove vga/bylvm
same vga
lvm1 lvcreate -q -an -Zn -n again -L 4m vga
same vga
lvmeta2 vgchange --lockstop vga
lvm1 vgchange -q --lockstop vga

say "B: lvmeta makes a shared VG, lvm2 joins it"
truncate -s 400M "$WORK/lun2.img"
LUN2=$(losetup -f --show "$WORK/lun2.img")
LOOPS+=("$LUN2")
sed -i "s#\"a|^$LUN\\\$|\"#\"a|^$LUN\\\$|\", \"a|^$LUN2\\\$|\"#" "$H1/etc/lvm.conf"
lvmeta2b() { SANLOCK_RUN_DIR="$H2" "$LVMETA" "$1" --devices "$LUN2" --host-id 2 --io-timeout 2 \
    --lockingdir "$H2/lock" --rundir "$H2/run" "${@:2}"; }
lvmeta2b vgcreate --shared vgb "$LUN2"
lvmeta2b vgchange --lockstart vgb
lvmeta2b lvcreate -an -n first -L 8m vgb
losetup -d "$(readlink /dev/mapper/vga-lvmlock)" 2>/dev/null || true
l2=$(losetup -f --show -o 1048576 --sizelimit 268435456 "$WORK/lun2.img")
LOOPS+=("$l2")
ln -sf "$l2" /dev/mapper/vgb-lvmlock
lvm1 vgchange -q --lockstart vgb
lvm1 lvcreate -q -an -Zn -n fromlvm -L 8m vgb
SANLOCK_RUN_DIR="$H2" "$LVMETA" lvs --devices "$LUN2" --noheadings -o lv_name vgb 2>/dev/null | grep -qw fromlvm
lvmeta2b lvcreate -an -n second -L 4m vgb
lvm1 lvs --noheadings -o lv_name vgb 2>/dev/null | grep -qw second
lvm1 lvs -a --reportformat json --units b --nosuffix -o "$FIELDS" vgb 2>/dev/null >"$WORK/a.json"
SANLOCK_RUN_DIR="$H2" "$LVMETA" lvs -a --devices "$LUN2" --reportformat json --units b --nosuffix -o "$FIELDS" vgb 2>/dev/null >"$WORK/b.json"
python3 - "$WORK/a.json" "$WORK/b.json" <<'PY'
import json, sys
rows = lambda p: sorted(json.dumps(r, sort_keys=True) for r in json.load(open(p))["report"][0]["lv"])
if rows(sys.argv[1]) != rows(sys.argv[2]):
    sys.exit("vgb: lvm2 and lvmeta disagree")
PY
lvm1 vgck vgb 2>/dev/null
lvm1 vgchange -q --lockstop vgb
lvmeta2b vgchange --lockstop vgb
say "ok"
