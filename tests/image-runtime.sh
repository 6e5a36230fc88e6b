#!/usr/bin/env bash
# Checks the runtime stage of Containerfile without a container engine or registry: a chroot
# of the stage's Debian release (debootstrap, minbase) with the packages the stage installs,
# the workspace's binaries where the stage puts them, and each run there: every shared
# library resolves, csi-shim (the entrypoint) and lvmeta start, and every tool the node
# plugin runs is on the PATH. As root, after `cargo build -p lvmeta-cli -p csi-shim --bins`:
#
#   tests/image-runtime.sh [DIR]     (DIR: where the chroot is made; default a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
root=${1:-$(mktemp -d)}
runtime=$(awk '/^FROM docker.io\/library\/debian:/ {on = 1} on' Containerfile)
release=$(sed -n 's|^FROM docker.io/library/debian:\([a-z]*\)-slim$|\1|p' <<<"$runtime")
pkgs=$(tr '\n' ' ' <<<"$runtime" | sed 's/\\ */ /g' |
    sed -n 's/.*apt-get install -y --no-install-recommends \([^&]*\)&&.*/\1/p' | xargs)
entry=$(sed -n 's|^ENTRYPOINT \["\([^"]*\)"\]$|\1|p' <<<"$runtime")
[ -n "$release" ] && [ -n "$pkgs" ] && [ -n "$entry" ] ||
    { echo "image-runtime: cannot read the runtime stage of Containerfile" >&2; exit 2; }
echo "--- image runtime: debian $release with: $pkgs"
debootstrap --variant=minbase --include="${pkgs// /,}" "$release" "$root" \
    http://deb.debian.org/debian >"$root.log" 2>&1 ||
    { tail -n 20 "$root.log"; exit 1; }
install -D -m 0755 -t "$root/usr/local/bin" target/debug/lvmeta target/debug/csi-shim
fail=0
for b in /usr/local/bin/csi-shim /usr/local/bin/lvmeta; do
    if chroot "$root" ldd "$b" | grep -q "not found"; then
        chroot "$root" ldd "$b" | grep "not found"; fail=1
    fi
done
chroot "$root" "$entry" --help >/dev/null || { echo "the entrypoint $entry does not start"; fail=1; }
chroot "$root" /usr/local/bin/lvmeta --version >/dev/null || { echo "lvmeta does not start"; fail=1; }
# What csi-shim's node runs (csi-shim/src/mount.rs).
for t in blkid fsfreeze mkfs.ext4 mkfs.xfs resize2fs xfs_growfs; do
    chroot "$root" sh -c "command -v $t" >/dev/null || { echo "missing in the image: $t"; fail=1; }
done
[ -n "${1:-}" ] || rm -rf "$root" "$root.log"
[ $fail -eq 0 ] && echo "--- image runtime: ok"
exit $fail
