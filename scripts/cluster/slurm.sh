#!/usr/bin/env bash
# Slurm on the one-machine cluster of nodes.sh: munged and slurmctld in the root network
# namespace, one slurmd per node inside the node (its network and hostname).
#
#   slurm.sh up [N [CPUS]]  makes the nodes (nodes.sh up N, default 2), writes the config
#                     (CPUS per node, default 4: `srun -N 2 -n 8` puts 4 tasks on each),
#                     starts munged, slurmctld and the slurmds, waits until the nodes are idle
#   slurm.sh down     stops the daemons this script started, removes their state
#   slurm.sh env      prints "SLURM_CONF=PATH", what srun/sinfo/scontrol need
#
# Everything lives in /run/fabric-cluster/slurm (config, munge key and socket, spool,
# pid and log files), never in /etc/slurm, /etc/munge or the repository. The daemons run
# as root, without cgroups (proctrack/linuxproc, task/none), on ports 6917/6918 so that
# they do not meet a system Slurm. The controller runs with the hostname "fctl" (its own
# UTS namespace) and listens on the bridge's address. MpiDefault is pmix (Debian's
# Slurm has the plugin); --mpi=pmi2 asks for PMI-2 instead.
# Exit status 77 means the prerequisites are missing (slurm-wlm, munge, root), reason on
# stderr.
set -Eeuo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
STATE=/run/fabric-cluster
DIR=$STATE/slurm
CONF=$DIR/slurm.conf
CTL_ADDR=10.79.0.254
CTL_PORT=6917
SLURMD_PORT=6918
# How long `up` waits for the nodes to register as idle.
READY_SECS=60

missing() {
    echo "slurm.sh: $*" >&2
    exit 77
}

need() {
    [[ $EUID == 0 ]] || missing "needs root (daemons inside network namespaces)"
    local c
    for c in slurmctld slurmd srun sinfo munged mungekey; do
        command -v "$c" >/dev/null || missing "needs '$c': apt-get install -y slurm-wlm munge"
    done
}

lock() {
    mkdir -p "$STATE"
    exec 8>"$STATE/slurm.lock"
    flock -w 120 8 || { echo "slurm.sh: another slurm.sh holds $STATE/slurm.lock" >&2; exit 1; }
}

# Whether the process of pid file $1 runs (a zombie does not: init may be slow to reap).
alive() {
    local pid state
    [[ -s $1 ]] && pid=$(<"$1") && [[ $pid =~ ^[0-9]+$ ]] || return 1
    # The state follows the command name, which ends at the last ')'.
    state=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
    state=${state##*) }
    [[ $state != Z* ]]
}

# Stops the daemon whose pid file is $1: TERM, then KILL after 5 s.
stop() {
    local f=$1 pid
    [[ -s $f ]] || return 0
    pid=$(<"$f")
    if alive "$f"; then
        kill -TERM "$pid" 2>/dev/null || true
        for _ in $(seq 50); do
            alive "$f" || break
            sleep 0.1
        done
        alive "$f" && kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$f"
}

nodes() { "$here/nodes.sh" list | awk '{print $1}'; }

# The slurm.conf for the nodes that exist now, on stdout.
conf_text() {
    local n
    {
        cat <<CONF
# Written by scripts/cluster/slurm.sh: a one-machine cluster of network namespaces.
ClusterName=fabric
SlurmctldHost=fctl($CTL_ADDR)
SlurmctldPort=$CTL_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/ctld
SlurmctldPidFile=$DIR/ctld/slurmctld.pid
SlurmctldLogFile=$DIR/ctld/slurmctld.log
SlurmdSpoolDir=$DIR/%n/spool
SlurmdPidFile=$DIR/%n/slurmd.pid
SlurmdLogFile=$DIR/%n/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
MpiDefault=pmix
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# The nodes share this machine's cores: the configured CPUs win over what slurmd sees.
SlurmdParameters=config_overrides
ReturnToService=2
SlurmdTimeout=30
MessageTimeout=10
KillWait=2
InactiveLimit=0
MinJobAge=5
CONF
        for n in $(nodes); do
            echo "NodeName=$n NodeAddr=$("$here/nodes.sh" list | awk -v n="$n" '$1 == n {print $2}') CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
        done
        echo "PartitionName=fabric Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
    }
}

write_conf() {
    mkdir -p "$DIR/ctld"
    printf '%s\n' "$1" >"$CONF"
    # slurmd (22.05) loads a cgroup plugin whatever the other plugins are, and the
    # autodetection fails inside `ip netns exec`, whose fresh /sys has no cgroup mounts.
    # The v1 plugin pointed at an empty directory loads and is never used: nothing here
    # (linuxproc, task/none, no accounting) asks it for a cgroup.
    mkdir -p "$DIR/cgroup"
    cat >"$DIR/cgroup.conf" <<CONF
CgroupPlugin=cgroup/v1
CgroupMountpoint=$DIR/cgroup
CgroupAutomount=no
CONF
}

start_munge() {
    mkdir -p "$DIR/munge"
    chmod 0700 "$DIR/munge"
    [[ -s $DIR/munge/munge.key ]] || mungekey --create --keyfile="$DIR/munge/munge.key"
    chmod 0600 "$DIR/munge/munge.key"
    alive "$DIR/munge/munged.pid" && return 0
    # Daemons must not inherit the lock's descriptor, or they would hold it forever.
    munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" \
        --seed-file="$DIR/munge/munged.seed" 8>&-
}

start_ctld() {
    alive "$DIR/ctld/slurmctld.pid" && return 0
    # Its own hostname, so that SlurmctldHost does not depend on this machine's name.
    unshare --uts /bin/sh -c 'hostname fctl && exec slurmctld -c -f "$1"' sh "$CONF" 8>&-
}

start_slurmd() {
    local n=$1
    mkdir -p "$DIR/$n/spool"
    alive "$DIR/$n/slurmd.pid" && return 0
    "$here/nodes.sh" exec "$n" slurmd -f "$CONF" -N "$n" 8>&-
}

wait_ready() {
    local want have
    want=$(nodes | wc -l)
    for _ in $(seq $((READY_SECS * 5))); do
        have=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 == "idle"' | sort -u | wc -l)
        ((have == want)) && return 0
        sleep 0.2
    done
    echo "slurm.sh: the nodes did not become idle within ${READY_SECS}s:" >&2
    SLURM_CONF=$CONF sinfo -N -l >&2 || true
    tail -n 5 "$DIR"/ctld/slurmctld.log "$DIR"/*/slurmd.log >&2 || true
    return 1
}

up() {
    local n=${1:-2} node
    CPUS=${2:-4}
    "$here/nodes.sh" up "$n" >/dev/null
    local conf
    conf=$(conf_text)
    # A cluster running on another config (other nodes or CPUs) is restarted on this one.
    if [[ -s $CONF && $(<"$CONF") != "$conf" ]]; then
        down
    fi
    trap 'echo "slurm.sh: up failed, stopping what it started" >&2; down' ERR
    mkdir -p "$DIR"
    write_conf "$conf"
    start_munge
    start_ctld
    for node in $(nodes); do
        start_slurmd "$node"
    done
    wait_ready
    trap - ERR
    echo "SLURM_CONF=$CONF"
}

down() {
    local f
    # slurmds first: they hold the jobs' steps, which they end as they stop.
    for f in "$DIR"/*/slurmd.pid; do
        [[ -e $f ]] && stop "$f"
    done
    stop "$DIR/ctld/slurmctld.pid"
    stop "$DIR/munge/munged.pid"
    rm -rf "$DIR"
}

case "${1:-}" in
up)
    need
    lock
    up "${2:-2}" "${3:-4}"
    ;;
down)
    need
    lock
    down
    ;;
env)
    echo "SLURM_CONF=$CONF"
    ;;
*)
    echo "usage: $0 up [N] | down | env" >&2
    exit 2
    ;;
esac
