#!/usr/bin/env bash
# A small cluster on one machine: N "nodes", each a network namespace with its own
# hostname (a UTS namespace), joined by a Linux bridge in the root namespace.
#
#   nodes.sh up N          makes fnode1..fnodeN (and removes higher-numbered ones)
#   nodes.sh down          kills what runs in the nodes, removes them, the bridge, the
#                          /etc/hosts entries
#   nodes.sh list          prints "NAME ADDRESS" per node
#   nodes.sh exec NODE CMD...  runs CMD inside NODE (its network and hostname)
#
# Node i has 10.79.0.i/24 on its eth0 (a veth end whose peer is enslaved to the bridge
# fnbr0); the bridge has 10.79.0.254, so the root namespace reaches every node and every
# node reaches the root namespace (where mpirun and slurmctld run). /etc/hosts gets a
# line per node (marked "# fabric-cluster"), so "--host fnode1:4,fnode2:4" resolves from
# any namespace (they share /etc). Each node has its own /tmp (commands started by
# `exec`), the rest of the file system is shared, /dev/shm included. State lives in
# /run/fabric-cluster, never in the repo.
#
# Every step checks before it acts, so `up` and `down` can be run any number of times;
# a failed `up` removes what it made. Calls are serialized with a lock. Exit status 77
# means the prerequisites are missing (root, iproute2, util-linux), reason on stderr.
# tests/netns/hosts.sh uses fab-h*-PID names and 10.77.0.0/24: no overlap.
set -Eeuo pipefail

PREFIX=fnode
BRIDGE=fnbr0
NET=10.79.0
MARK="# fabric-cluster"
STATE=/run/fabric-cluster
MAX=250

missing() {
    echo "nodes.sh: $*" >&2
    exit 77
}

need() {
    [[ $EUID == 0 ]] || missing "needs root (network namespaces, veth pairs, a bridge)"
    command -v ip >/dev/null || missing "needs iproute2 ('ip'): apt-get install -y iproute2"
    command -v nsenter >/dev/null && command -v unshare >/dev/null && command -v flock >/dev/null ||
        missing "needs util-linux (nsenter, unshare, flock)"
    ip netns list >/dev/null 2>&1 || missing "'ip netns' does not work here"
}

lock() {
    mkdir -p "$STATE"
    exec 9>"$STATE/lock"
    flock -w 60 9 || { echo "nodes.sh: another nodes.sh holds $STATE/lock" >&2; exit 1; }
}

has_ns() { ip netns list | awk '{print $1}' | grep -qx -- "$1"; }
has_link() { ip link show "$1" >/dev/null 2>&1; }

# The node numbers that exist now, ascending.
existing() {
    ip netns list | awk '{print $1}' | sed -n "s/^${PREFIX}\([0-9]\{1,3\}\)\$/\1/p" | sort -n
}

uts_file() { echo "$STATE/uts/$PREFIX$1"; }

rm_node() {
    local i=$1 ns=$PREFIX$1 pids uts
    uts=$(uts_file "$i")
    if has_ns "$ns"; then
        # A namespace lives as long as a process in it does: end them, then delete it.
        pids=$(ip netns pids "$ns" || true)
        if [[ -n $pids ]]; then
            kill -TERM $pids 2>/dev/null || true
            for _ in $(seq 20); do
                pids=$(ip netns pids "$ns" || true)
                [[ -z $pids ]] && break
                sleep 0.1
            done
            [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
        fi
        ip netns del "$ns"
    fi
    # The kernel removes a deleted namespace's veth pair asynchronously: remove the root
    # end now so that a quick `up` can reuse the name.
    has_link "fnv$i" && ip link del "fnv$i" 2>/dev/null || true
    if [[ -e $uts ]]; then
        umount "$uts" 2>/dev/null || true
        rm -f "$uts"
    fi
    rm -rf "${STATE:?}/tmp/$ns"
}

write_hosts() {
    # /etc/hosts may be a bind mount (containers): rewrite it in place, never rename.
    local keep
    keep=$(grep -vF -- "$MARK" /etc/hosts || true)
    {
        [[ -n $keep ]] && printf '%s\n' "$keep"
        local i
        for i in $(existing); do
            printf '%s.%s\t%s%s\t%s\n' "$NET" "$i" "$PREFIX" "$i" "$MARK"
        done
    } >"$STATE/hosts.new"
    cat "$STATE/hosts.new" >/etc/hosts
    rm -f "$STATE/hosts.new"
}

mk_node() {
    local i=$1 ns=$PREFIX$1 uts
    uts=$(uts_file "$i")
    has_ns "$ns" || ip netns add "$ns"
    ip -n "$ns" link set lo up
    if ! ip -n "$ns" link show eth0 >/dev/null 2>&1; then
        has_link "fnv$i" && ip link del "fnv$i"
        ip link add "fnv$i" type veth peer name "fnp$i"
        ip link set "fnp$i" netns "$ns"
        ip -n "$ns" link set "fnp$i" name eth0
    fi
    ip -n "$ns" addr replace "$NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip link set "fnv$i" master "$BRIDGE"
    ip link set "fnv$i" up
    # Its own hostname, so that launchers and session directories tell nodes apart.
    mkdir -p "$STATE/uts"
    if ! nsenter --uts="$uts" true 2>/dev/null; then
        touch "$uts"
        unshare --uts="$uts" hostname "$ns"
    fi
}

up() {
    local n=$1 i
    [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= MAX)) || { echo "nodes.sh: N must be 1..$MAX" >&2; exit 2; }
    trap 'echo "nodes.sh: up failed, removing the nodes" >&2; down' ERR
    if ! has_link "$BRIDGE"; then
        ip link add "$BRIDGE" type bridge
    fi
    ip addr replace "$NET.254/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(existing); do
        ((i > n)) && rm_node "$i"
    done
    for ((i = 1; i <= n; i++)); do
        mk_node "$i"
    done
    write_hosts
    trap - ERR
    list
}

down() {
    local i
    for i in $(existing); do
        rm_node "$i"
    done
    # Leftovers of an interrupted run: root veth ends and UTS files without a namespace.
    for i in $(ip -o link show | sed -n 's/^[0-9]*: fnv\([0-9]*\)[@:].*/\1/p'); do
        ip link del "fnv$i" 2>/dev/null || true
    done
    if [[ -d $STATE/uts ]]; then
        for f in "$STATE"/uts/*; do
            [[ -e $f ]] || continue
            umount "$f" 2>/dev/null || true
            rm -f "$f"
        done
    fi
    rm -rf "${STATE:?}/tmp"
    has_link "$BRIDGE" && ip link del "$BRIDGE"
    write_hosts
}

list() {
    local i
    for i in $(existing); do
        echo "$PREFIX$i $NET.$i"
    done
}

node_exec() {
    local node=${1:?nodes.sh exec NODE CMD...}
    shift
    [[ $node =~ ^${PREFIX}[0-9]+$ ]] && has_ns "$node" || { echo "nodes.sh: no node '$node'" >&2; exit 2; }
    [[ $# -gt 0 ]] || { echo "nodes.sh: exec $node: no command" >&2; exit 2; }
    # A private /tmp, as on separate machines: launchers name their per-job files there
    # by job id alone (Slurm's PMIx directories), which would collide between nodes.
    # `ip netns exec` makes a mount namespace that does not propagate back, so the bind
    # mount is seen by CMD and its descendants only.
    local tmp=$STATE/tmp/$node
    mkdir -p "$tmp"
    chmod 1777 "$tmp"
    exec ip netns exec "$node" nsenter --uts="$(uts_file "${node#"$PREFIX"}")" -- \
        /bin/sh -c 'mount --bind "$0" /tmp && exec "$@"' "$tmp" "$@"
}

case "${1:-}" in
up)
    need
    lock
    up "${2:?usage: nodes.sh up N}"
    ;;
down)
    need
    lock
    down
    ;;
list)
    need
    list
    ;;
exec)
    shift
    need
    node_exec "$@"
    ;;
*)
    echo "usage: $0 up N | down | list | exec NODE CMD..." >&2
    exit 2
    ;;
esac
