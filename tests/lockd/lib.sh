# Shared by tests/lockd/mixed.sh and benches/lockd-bench.sh: simulated hosts on one machine,
# each with its own sanlock daemon, in a private mount namespace. Source it, then call
# `enter_namespace "$0" "$@"` first thing (it re-executes the caller inside the namespace).

# Re-executes the calling script in a private mount namespace with tmpfs over /dev/mapper
# (the lvmlock links lvmlockd opens) and /run (lvmlockd's pid file).
enter_namespace() {
    if [ -z "${LVMETA_LOCKD_NS:-}" ]; then
        mkdir -p /dev/mapper
        exec unshare -m --propagation private env LVMETA_LOCKD_NS=1 "$@"
    fi
    mount -t tmpfs tmpfs /dev/mapper
    mount -t tmpfs tmpfs /run
}

# WORK, LOOPS and DAEMONS are the caller's; cleanup stops and removes everything.
LOOPS=()
DAEMONS=()
cleanup() {
    # sanlock keeps running while it holds lockspaces: stop the daemons the hard way.
    for pid in "${DAEMONS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${DAEMONS[@]}"; do wait "$pid" 2>/dev/null || true; done
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    rm -rf "$WORK"
}

# start_sanlock DIR NAME: a sanlock daemon for one simulated host (SANLOCK_RUN_DIR=DIR, no
# watchdog, unprivileged mode for machines that cannot raise RLIMIT_MEMLOCK, a stable host name).
start_sanlock() {
    mkdir -p "$1"
    SANLOCK_RUN_DIR="$1" SANLOCK_PRIVILEGED=0 sanlock daemon -D -w 0 -U root -G root -L -1 -S -1 \
        -e "$2" >"$1/sanlock.log" 2>&1 &
    DAEMONS+=("$!")
    for _ in $(seq 50); do [ -S "$1/sanlock.sock" ] && break; sleep 0.1; done
}

# start_lvmlockd DIR LOOP...: lvmlockd (io_timeout 2) on the sanlock daemon of DIR, and an lvm2
# configuration in DIR/etc that uses it as host_id 1 and sees only the given loop devices.
start_lvmlockd() {
    local dir=$1
    shift
    SANLOCK_RUN_DIR="$dir" lvmlockd -f -g sanlock -o 2 -s "$dir/lvmlockd.socket" \
        -p "$dir/lvmlockd.pid" --adopt-file "$dir/adopt" >"$dir/lvmlockd.log" 2>&1 &
    DAEMONS+=("$!")
    for _ in $(seq 50); do [ -S "$dir/lvmlockd.socket" ] && break; sleep 0.1; done
    touch /run/lvmlockd.pid
    local accept=""
    for l in "$@"; do accept+="\"a|^$l\$|\", "; done
    mkdir -p "$dir/etc"
    cat >"$dir/etc/lvm.conf" <<CONF
global { activation = 0 use_lvmlockd = 1 system_id_source = "none" locking_dir = "$dir/lock" }
devices { obtain_device_list_from_udev = 0 use_devicesfile = 0 scan_lvs = 0 hints = "none" global_filter = [ $accept "r|.*|" ] }
backup { backup = 0 archive = 0 }
local { host_id = 1 }
CONF
}
