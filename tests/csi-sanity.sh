#!/usr/bin/env bash
# Runs kubernetes-csi's csi-sanity against csi-shim on a scratch LUN, as root:
#
#   tests/csi-sanity.sh CSI_SANITY_BINARY linear|thin
#
# The LUN: $LUN_DEV when set (a VM's /dev/vda, see below), else a 64 GiB sparse file on a
# loop device. Thin node specs need device-mapper; on a kernel without it, run inside the VM:
#
#   truncate -s 64G /var/tmp/sanity.img
#   tests/vm/run --lun /var/tmp/sanity.img -- env LUN_DEV=/dev/vda \
#       tests/csi-sanity.sh /path/to/csi-sanity thin
#
# csi-sanity v5.3.1 does not know capability MODIFY_VOLUME, so its capability spec is skipped.
# The binaries are the workspace's debug builds (cargo build -p lvmeta-cli -p csi-shim --bins).
set -euo pipefail
sanity=$1 mode=$2
bin=$(cd "$(dirname "$0")/.." && pwd)/target/debug
w=$(mktemp -d /tmp/csi-sanity.XXXXXX)
mkdir -p "$w"/kubelet/pods "$w"/kubelet/plugins "$w"/lock
if [ -n "${LUN_DEV:-}" ]; then
    lun=$LUN_DEV
else
    truncate -s 64G "$w/lun.img"
    lun=$(losetup -f --show "$w/lun.img")
fi
cleanup() {
    [ -z "${pid:-}" ] || { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
    grep -o "$w/kubelet[^ ]*" /proc/mounts | sort -r | while read -r m; do umount "$m" || true; done
    [ -n "${LUN_DEV:-}" ] || losetup -d "$lun"
    rm -rf "$w"
}
trap cleanup EXIT
"$bin/lvmeta" pvcreate -f --metadatasize 16m "$lun" >/dev/null
LVMETA_LOCKING_DIR=$w/lock "$bin/lvmeta" vgcreate vgs "$lun" >/dev/null
printf 'vg: vgs\nmode: %s\n' "$mode" >"$w/params.yaml"
"$bin/csi-shim" --endpoint "$w/csi.sock" --devices "$lun" --vg vgs --node-id n1 \
    --kubelet-dir "$w/kubelet" --locking-dir "$w/lock" --wiper true >"$w/shim.log" 2>&1 &
pid=$!
for _ in $(seq 50); do [ -S "$w/csi.sock" ] && break; sleep 0.1; done
set +e
"$sanity" --csi.endpoint="$w/csi.sock" --csi.mountdir="$w/kubelet/pods/target" \
    --csi.stagingdir="$w/kubelet/plugins/staging" --csi.testvolumeparameters="$w/params.yaml" \
    --csi.testvolumesize=8388608 --ginkgo.skip='should return appropriate capabilities'
rc=$?
[ $rc -eq 0 ] || tail -n 40 "$w/shim.log"
exit $rc
