//! Open MPI jobs on two nodes of the one-machine cluster (network namespaces on a
//! bridge, `scripts/cluster`, see docs/cluster.md) over the plugin: `mtl ofi` on
//! fab_tcp and on fab_hybrid, whose same-node pairs take shared memory and the others
//! tcp. Every placement of 4 ranks on 2 nodes, and 12 ranks on each, runs
//! `tests/mpi/p2p.c`; in each, some ranks send to a peer on the other node before that
//! peer inserted them into its AV (Open MPI inserts a remote peer when it first
//! addresses it).
//!
//! Needs root, iproute2, openmpi-bin and libopenmpi-dev (CI installs them).

#[path = "../../tests/cluster/mod.rs"]
mod cluster;

mod common;
use std::time::Duration;

/// Oversubscribed jobs of the debug plugin between namespaces take tens of seconds.
const JOB_DEADLINE: Duration = Duration::from_secs(240);

use common::{mpi_prog, mtl_ofi, ranks_on};

/// `mpi_p2p` on `n` ranks placed `hosts` over `prov`, its blocking sizes up to `max`
/// bytes: succeeds, and every rank's mtl ofi opened `prov`.
fn p2p_job(c: &cluster::Cluster, prov: &str, n: usize, hosts: &str, max: usize) {
    // The program and the plugin are under the target dir, which the nodes share.
    let prog = mpi_prog("p2p");
    let ofi = mtl_ofi(prov);
    let ranks = n.to_string();
    let mut args = vec!["--oversubscribe", "-n", &ranks, "--host", hosts];
    args.extend(ofi.iter().map(String::as_str));
    let max = max.to_string();
    args.extend(["-x", "FABRIC_TCP_IFACE=eth0", prog.to_str().unwrap(), &max]);
    let out = c.mpirun_within(&args, JOB_DEADLINE);
    eprintln!("{prov} on {hosts}: {:?}", out.elapsed);
    assert!(out.success(), "{prov} on {hosts}: {out}");
    assert!(out.stdout.contains(&format!("ok p2p {n} ranks")), "{out}");
    let opened = ranks_on(&format!("{}{}", out.stdout, out.stderr), prov);
    assert_eq!(opened, n, "{out}");
}

#[test]
fn open_mpi_two_nodes_over_fab_tcp_and_fab_hybrid() {
    let Some(c) = cluster::Cluster::up(2) else {
        return;
    };
    for prov in ["fab_tcp", "fab_hybrid"] {
        for hosts in [
            "fnode1:3,fnode2:1",
            "fnode1:2,fnode2:2",
            "fnode1:1,fnode2:3",
        ] {
            p2p_job(&c, prov, 4, hosts, 4 << 20);
        }
    }
}

/// 24 ranks on 2 nodes, 12 each (oversubscribed), every rank a live peer of every
/// other: fab_hybrid's endpoints carry 11 peers over shared memory and 12 over tcp at
/// once.
#[test]
fn open_mpi_two_nodes_24_ranks() {
    let Some(c) = cluster::Cluster::up(2) else {
        return;
    };
    for prov in ["fab_tcp", "fab_hybrid"] {
        p2p_job(&c, prov, 24, "fnode1:12,fnode2:12", 64 << 10);
    }
}
