#!/usr/bin/env bash
# A mixed cluster on one machine: simulated host 1 runs stock lvm2 + lvmlockd + sanlock,
# simulated host 2 runs lvmeta + its own sanlock daemon (SANLOCK_RUN_DIR). Both share VGs on
# one loop device: a VG made by lvm2 and one made by lvmeta; each side changes them and must
# see the other's changes; lvm2's vgck must stay clean and both sides' reports must agree.
#
# Then four hosts (lvm2 + three lvmeta hosts) change one VG concurrently, a process killed
# while holding the VG lease does not block the others, and the lease of a host whose sanlock
# daemon died is taken over after sanlock's host-dead time, never earlier.
#
# usage: mixed.sh LVMETA_BINARY HOLD_VG_LEASE_BINARY   (root; run by tests/tests/lvm2_lockd.rs)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
enter_namespace "$0" "$@"
LVMETA=$(realpath "$1")
HOLD=$(realpath "$2")
WORK=$(mktemp -d /var/tmp/lvmeta-mixed.XXXXXX)
trap cleanup EXIT
say() { echo "mixed: $*" >&2; }

truncate -s 1200M "$WORK/lun.img"
LUN=$(losetup -f --show "$WORK/lun.img")
LOOPS+=("$LUN")

# Host 1: sanlock + lvmlockd (io_timeout 2) + stock lvm2 with host_id 1.
H1="$WORK/h1"
start_sanlock "$H1" mixed-host-1
start_lvmlockd "$H1" "$LUN"
lvm1() {
    SANLOCK_RUN_DIR="$H1" LVM_SYSTEM_DIR="$H1/etc" LVM_SUPPRESS_FD_WARNINGS=1 \
        LVM_LVMLOCKD_SOCKET="$H1/lvmlockd.socket" lvm "$@"
}

# Host 2: its own sanlock daemon; lvmeta with host id 2.
H2="$WORK/h2"
start_sanlock "$H2" mixed-host-2
lvmeta2() {
    local verb=$1
    shift
    SANLOCK_RUN_DIR="$H2" "$LVMETA" "$verb" --devices "$LUN" --host-id 2 --io-timeout 2 \
        --lockingdir "$H2/lock" --rundir "$H2/run" "$@"
}
lvmeta_report() {
    SANLOCK_RUN_DIR="$H2" "$LVMETA" "$@" --devices "$LUN" 2>/dev/null
}

# Hosts 3 and 4: more lvmeta hosts, each with its own sanlock daemon.
for h in 3 4; do start_sanlock "$WORK/h$h" "mixed-host-$h"; done
# lvmeta_on HOST VERB ARGS...: lvmeta as simulated host HOST (2, 3 or 4).
lvmeta_on() {
    local h=$1 verb=$2
    shift 2
    SANLOCK_RUN_DIR="$WORK/h$h" "$LVMETA" "$verb" --devices "$LUN" --host-id "$h" --io-timeout 2 \
        --lockingdir "$WORK/h$h/lock" --rundir "$WORK/h$h/run" "$@"
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
# lvm_has_lv VG LV: lvm2's lvs lists LV. Tried for up to 5 s: lvs run while another host
# holds the VG lease can fail to take it shared and list nothing (its error then goes to
# $WORK/has.err).
lvm_has_lv() {
    local i
    for i in $(seq 25); do
        lvm1 lvs --noheadings -o lv_name "$1" 2>"$WORK/has.err" | grep -qw "$2" && return 0
        sleep 0.2
    done
    return 1
}
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
# lvmeta names a never-held slot in place (one sector, paxos.rs): host 1's sanlock daemon must
# acquire the lease under the LV's uuid (and refuse another name).
acquire1() { SANLOCK_RUN_DIR="$H1" sanlock client command -r "lvm_vga:$1:/dev/mapper/vga-lvmlock:$2" -c /bin/true; }
acquire1 "$uuid" "$off" >"$WORK/acq" 2>&1 || { say "host 1 cannot acquire $uuid at $off:"; cat "$WORK/acq" >&2; exit 1; }
if acquire1 "#unused" "$off" >"$WORK/acq" 2>&1; then say "host 1 acquired $off as #unused"; exit 1; fi
# Sectors 2003-2047 of an LV's lease area (after sanlock's LVB sector, 2002) hold lvmeta's
# serve board (lvmeta/src/lease/board.rs): sanlock acquiring and releasing the lease (host 1's
# daemon) and lvmeta activating the LV (host 2) must leave them as they are.
board_sectors() { dd if=/dev/mapper/vga-lvmlock bs=512 skip=$(( off / 512 + 2003 )) count=45 iflag=direct status=none; }
head -c $(( 45 * 512 )) /dev/urandom >"$WORK/board"
dd if="$WORK/board" of=/dev/mapper/vga-lvmlock bs=512 seek=$(( off / 512 + 2003 )) conv=notrunc,fsync oflag=direct status=none
acquire1 "$uuid" "$off" >"$WORK/acq" 2>&1 || { say "host 1 cannot acquire $uuid beside a board:"; cat "$WORK/acq" >&2; exit 1; }
board_sectors | cmp -s - "$WORK/board" || { say "sanlock changed sectors 2003-2047 of $uuid's lease"; exit 1; }
lvmeta2 lvchange -ay vga/bylvmeta >/dev/null
lvmeta2 lvchange -an vga/bylvmeta >/dev/null
board_sectors | cmp -s - "$WORK/board" || { say "lvmeta's activation changed sectors 2003-2047"; exit 1; }
say "A: sanlock's and lvmeta's acquire and release of an LV lease leave its sectors 2003-2047 as they were"
# A lease that was held is written whole when lvmeta frees it; a never-held one in place.
lvmeta2 lvcreate -an -n held -L 4m vga
hoff=$(lvmeta_report lvs --noheadings -o lv_lock_args vga/held | tr -d ' ' | cut -d: -f2)
acquire1 "$(lvmeta_report lvs --noheadings -o lv_uuid vga/held | tr -d ' ')" "$hoff" >"$WORK/acq" 2>&1 ||
    { cat "$WORK/acq" >&2; exit 1; }
lvmeta2 lvremove vga/held
SANLOCK_RUN_DIR="$H1" sanlock direct dump "/dev/mapper/vga-lvmlock:$hoff:1048576" >"$WORK/dump" 2>&1
grep -Eq "lvm_vga +#unused +0+ +0000 +0000 +0$" "$WORK/dump" ||
    { say "slot $hoff not a fresh #unused after lvremove:"; cat "$WORK/dump" >&2; exit 1; }
lvmeta2 lvextend -L +4m vga/bylvm
lvm1 lvextend -q -L +4m vga/bylvmeta
lvmeta2 lvrename vga/bylvmeta renamed
lvm1 lvremove -q -f vga/renamed
lvmeta2 lvremove vga/bylvm
same vga
lvm1 lvcreate -q -an -Zn -n again -L 4m vga
same vga

say "C: four hosts change vga at the same time"
t0=$(date +%s)
lvmeta_on 3 vgchange --lockstart vga &
j3=$!
lvmeta_on 4 vgchange --lockstart vga &
j4=$!
wait "$j3" "$j4"
t0=$(date +%s)
# Each host creates ROUNDS LVs and removes every other one: 4 * 1.5 * ROUNDS changes.
ROUNDS=${MIXED_ROUNDS:-60}
# Round i of a host: create h<host>-i; every third round also extend it by one extent and tag
# it; every fifth rename it r<host>-i; every second remove the LV of the round before.
lv_of() { if [ $(($2 % 5)) -eq 0 ]; then echo "r$1-$2"; else echo "h$1-$2"; fi; }
work_lvm() {
    for i in $(seq "$ROUNDS"); do
        lvm1 lvcreate -q -an -Zn -n "h1-$i" -l 1 vga >/dev/null 2>&1
        if [ $((i % 3)) -eq 0 ]; then
            lvm1 lvextend -q -l +1 "vga/h1-$i" >/dev/null 2>&1
            lvm1 lvchange -q --addtag "t$i" "vga/h1-$i" >/dev/null 2>&1
        fi
        [ $((i % 5)) -eq 0 ] && lvm1 lvrename -q "vga/h1-$i" "r1-$i" >/dev/null 2>&1
        [ $((i % 2)) -eq 0 ] && lvm1 lvremove -q -f "vga/$(lv_of 1 $((i - 1)))" >/dev/null 2>&1
    done
}
work_lvmeta() {
    local h=$1
    for i in $(seq "$ROUNDS"); do
        lvmeta_on "$h" lvcreate -an -n "h$h-$i" -l 1 vga >/dev/null
        if [ $((i % 3)) -eq 0 ]; then
            lvmeta_on "$h" lvextend -l +1 "vga/h$h-$i" >/dev/null
            lvmeta_on "$h" lvchange --addtag "t$i" "vga/h$h-$i" >/dev/null
        fi
        [ $((i % 5)) -eq 0 ] && lvmeta_on "$h" lvrename "vga/h$h-$i" "r$h-$i" >/dev/null
        [ $((i % 2)) -eq 0 ] && lvmeta_on "$h" lvremove "vga/$(lv_of "$h" $((i - 1)))" >/dev/null
    done
}
seq_start=$(lvmeta_report vgs --noheadings -o vg_seqno vga | tr -d ' ')
work_lvm & p1=$!
work_lvmeta 2 & p2=$!
work_lvmeta 3 & p3=$!
work_lvmeta 4 & p4=$!
fail=0
for p in $p1 $p2 $p3 $p4; do wait "$p" || fail=1; done
[ $fail -eq 0 ] || { say "a concurrent worker failed"; exit 1; }
say "C: the concurrent changes took $(( $(date +%s) - t0 )) s"
same vga
# Expected: every even round's LV (renamed where the round is a multiple of 5), two extents
# and a tag where the round is a multiple of 3.
lvmeta_report lvs --noheadings --units b --nosuffix -o lv_name,lv_size,lv_tags vga \
    | awk '{print $1, $2, $3}' | sort >"$WORK/have"
ext=$(lvmeta_report vgs --noheadings --units b --nosuffix -o vg_extent_size vga | tr -d ' ')
for h in 1 2 3 4; do
    for i in $(seq 2 2 "$ROUNDS"); do
        n=$(lv_of "$h" "$i")
        if [ $((i % 3)) -eq 0 ]; then echo "$n $((2 * ext)) t$i"; else echo "$n $ext "; fi
    done
done | sort >"$WORK/want"
grep '^[hr][1-4]-' "$WORK/have" | sed 's/ $//' | diff - <(sed 's/ $//' "$WORK/want") >&2 \
    || { say "lost or extra changes"; exit 1; }
seq_end=$(lvmeta_report vgs --noheadings -o vg_seqno vga | tr -d ' ')
changes=$((4 * (ROUNDS + ROUNDS / 2 + 2 * (ROUNDS / 3) + ROUNDS / 5)))
# Each change is one commit: the seqno moved by exactly their number.
[ $((seq_end - seq_start)) -eq "$changes" ] ||
    { say "seqno went from $seq_start to $seq_end for $changes changes"; exit 1; }
say "C: $changes concurrent changes (create, extend, tag, rename, remove) by lvm2 and 3 lvmeta hosts, none lost, vgck clean (seqno $seq_end)"

say "D: a writer killed while holding the VG lease; a writer and a report wait for it"
SANLOCK_RUN_DIR="$WORK/h3" "$HOLD" "$LUN" vga 3 >"$WORK/hold.out" 2>"$WORK/hold.err" &
holder=$!
for _ in $(seq 100); do grep -q held "$WORK/hold.out" && break; sleep 0.1; done
grep -q held "$WORK/hold.out" || { cat "$WORK/hold.err" >&2; exit 1; }
lvmeta_on 2 lvcreate -an -n afterkill -L 4m vga >/dev/null &
waiter=$!
# A report with a host id reads under the VG lease shared, as lvmlockd's lvs does: it waits too.
SANLOCK_RUN_DIR="$H2" "$LVMETA" lvs --devices "$LUN" --host-id 2 --noheadings -o lv_name vga \
    >"$WORK/reader.out" 2>"$WORK/reader.err" &
reader=$!
sleep 2
kill -0 "$waiter" 2>/dev/null || { say "the writer did not wait for the held VG lease"; exit 1; }
kill -0 "$reader" 2>/dev/null || { say "the report did not wait for the held VG lease"; exit 1; }
kill -9 "$holder"
wait "$waiter" || { say "the writer failed after the holder died"; exit 1; }
wait "$reader" || { cat "$WORK/reader.err" >&2; say "the report failed after the holder died"; exit 1; }
grep -q . "$WORK/reader.out" || { say "the locked report is empty"; exit 1; }
if grep -q "without a lock" "$WORK/reader.err"; then say "a locked report warned"; exit 1; fi
has_lv vga afterkill
same vga

say "D: a host keeps its VG lease 1.5 s after its changes (csi-shim's linger); lvmlockd waits, then sees them"
SANLOCK_RUN_DIR="$WORK/h3" "$HOLD" "$LUN" vga 3 1500 3 >"$WORK/kept.out" 2>"$WORK/kept.err" &
keeper=$!
for _ in $(seq 100); do grep -q changed "$WORK/kept.out" && break; sleep 0.1; done
grep -q changed "$WORK/kept.out" || { cat "$WORK/kept.err" >&2; exit 1; }
start=$(date +%s%N)
lvm1 lvcreate -an -Zn -n afterkept -l 1 vga >/dev/null 2>"$WORK/afterkept.err" \
    || { cat "$WORK/afterkept.err" >&2; say "lvmlockd gave up on the kept VG lease"; exit 1; }
took=$(( ($(date +%s%N) - start) / 1000000 ))
# lvm2 retries a busy VG lock after 1 s (2.03.16 logs the retry only with -v); an lvcreate
# that did not wait takes about 60 ms here.
[ "$took" -ge 900 ] || { say "lvcreate took $took ms: the VG lease was not kept"; exit 1; }
say "D: lvm2's lvcreate waited $took ms for the kept VG lease"
wait "$keeper" || { cat "$WORK/kept.err" >&2; exit 1; }
for lv in kept-1 kept-2 kept-3 afterkept; do
    lvm_has_lv vga "$lv" || {
        # Seen once (2026-12-04, not reproduced): say what lvm2 and lvmeta read then.
        cat "$WORK/has.err" >&2
        lvm1 lvs -a -o lv_name,seg_count vga >&2 || true
        SANLOCK_RUN_DIR="$WORK/h2" "$LVMETA" lvs --devices "$LUN" --host-id 2 -a vga >&2 || true
        say "lvm2 does not see $lv"
        exit 1
    }
done
same vga

say "D: lvchange -ay leaves the LV's lease held by its host; other hosts can neither activate nor remove it until -an"
dev=$(lvmeta_on 2 lvchange -ay vga/afterkill | sed -n 's/.* is active at \(.*\)\.$/\1/p')
[ -b "$dev" ] || { say "lvchange -ay made no device (got '$dev')"; exit 1; }
if lvmeta_on 3 lvchange -ay vga/afterkill >/dev/null 2>"$WORK/act3.err"; then
    say "host 3 activated an LV active on host 2"; exit 1
fi
grep -q "held by another host" "$WORK/act3.err" || { cat "$WORK/act3.err" >&2; exit 1; }
if lvmeta_on 3 lvremove vga/afterkill >/dev/null 2>"$WORK/rm3.err"; then
    say "host 3 removed an LV active on host 2"; exit 1
fi
grep -q "is active on this or another host" "$WORK/rm3.err" || { cat "$WORK/rm3.err" >&2; exit 1; }
lvmeta_on 2 lvchange -an vga/afterkill
lvmeta_on 3 lvchange -ay vga/afterkill >/dev/null
lvmeta_on 3 lvchange -an vga/afterkill
has_lv vga afterkill

say "E: a host whose sanlock daemon dies while it holds the VG lease"
SANLOCK_RUN_DIR="$WORK/h4" "$HOLD" "$LUN" vga 4 >"$WORK/hold4.out" 2>"$WORK/hold4.err" &
holder=$!
for _ in $(seq 100); do grep -q held "$WORK/hold4.out" && break; sleep 0.1; done
grep -q held "$WORK/hold4.out" || { cat "$WORK/hold4.err" >&2; exit 1; }
kill -9 "$(cat "$WORK/h4/sanlock.pid")"
killed=$(date +%s)
kill -9 "$holder" 2>/dev/null || true
lvmeta_on 2 lvcreate -an -n afterdeath -l 1 --lock-wait 300 vga >/dev/null
took=$(( $(date +%s) - killed ))
# io_timeout 2: host_dead_seconds = 8 * 2 + 60 = 76, counted from host 4's last renewal,
# which was at most one renewal interval (2 * 2 s) before the kill.
[ "$took" -ge 70 ] || { say "host 4's lease was taken after $took s, before it could be dead"; exit 1; }
has_lv vga afterdeath
same vga
say "E: host 4's VG lease was taken over $took s after its daemon died (host_dead_seconds 76)"
for h in 2 3; do lvmeta_on "$h" vgchange --lockstop vga >/dev/null; done
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
# lvmeta removes the shared VG under its VG lease (leaving it marked removed) and leaves the
# lockspace; lvm2 no longer finds the VG.
lvmeta2b vgremove -f vgb
if lvm1 vgs vgb >/dev/null 2>&1; then say "vgb still exists for lvm2"; exit 1; fi
say "ok"
