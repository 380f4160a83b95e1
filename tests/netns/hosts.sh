#!/usr/bin/env bash
# Two test "hosts" as network namespaces joined by a veth pair, for tests between hosts
# without a second machine; tests/netns/mod.rs drives it.
#
#   hosts.sh up           creates fab-h1-PID and fab-h2-PID, prints their names (one line)
#   hosts.sh down NAME... deletes those namespaces (and the veth pair inside them)
#
# Host 1 has 10.77.0.1/24, host 2 10.77.0.2/24, on the veth ends; lo is up in both.
# The addresses live only inside the namespaces, so concurrent runs do not collide.
# `down` is idempotent: a name that does not exist is not an error. A failed `up` removes
# whatever it had made. Exit status 77 means the prerequisites are missing (root,
# iproute2, network namespace support), with the reason on stderr.
set -euo pipefail

missing() {
    echo "hosts.sh: $*" >&2
    exit 77
}

need() {
    [[ $EUID == 0 ]] || missing "needs root (network namespaces and veth pairs)"
    command -v ip >/dev/null || missing "needs iproute2 ('ip'): apt-get install -y iproute2"
    ip netns list >/dev/null 2>&1 || missing "'ip netns' does not work here"
}

down() {
    local ns
    for ns in "$@"; do
        # Only names this script makes, so a typo cannot delete someone else's namespace.
        [[ $ns =~ ^fab-h[12]-[0-9]+$ ]] || { echo "hosts.sh: refusing to delete '$ns'" >&2; exit 2; }
        if ip netns list | awk '{print $1}' | grep -qx -- "$ns"; then
            # Deleting a namespace destroys its veth end, and with it the peer end.
            ip netns del "$ns"
        fi
    done
}

up() {
    local h1=fab-h1-$$ h2=fab-h2-$$
    # Interface names are at most 15 bytes; a pid has at most 7 digits.
    local v1=fv1-$$ v2=fv2-$$
    trap 'ip link del "$v1" 2>/dev/null || true; down "$h1" "$h2"' ERR
    ip netns add "$h1"
    ip netns add "$h2"
    ip link add "$v1" type veth peer name "$v2"
    ip link set "$v1" netns "$h1"
    ip link set "$v2" netns "$h2"
    ip -n "$h1" addr add 10.77.0.1/24 dev "$v1"
    ip -n "$h2" addr add 10.77.0.2/24 dev "$v2"
    for ns in "$h1" "$h2"; do
        ip -n "$ns" link set lo up
    done
    ip -n "$h1" link set "$v1" up
    ip -n "$h2" link set "$v2" up
    trap - ERR
    echo "$h1 $h2"
}

case "${1:-}" in
up)
    need
    up
    ;;
down)
    shift
    need
    down "$@"
    ;;
*)
    echo "usage: $0 up | down NAME..." >&2
    exit 2
    ;;
esac
