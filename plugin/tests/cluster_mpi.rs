//! Open MPI jobs on two nodes of the one-machine cluster (network namespaces on a
//! bridge, `scripts/cluster`, see docs/cluster.md) over the plugin: `mtl ofi` on
//! fab_tcp and on fab_hybrid, whose same-node pairs take shared memory and the others
//! tcp. Every placement of 4 ranks on 2 nodes runs `tests/mpi/p2p.c`; in each, some
//! ranks send to a peer on the other node before that peer inserted them into its AV
//! (Open MPI inserts a remote peer when it first addresses it).
//!
//! Needs root, iproute2, openmpi-bin and libopenmpi-dev (CI installs them).

#[path = "../../tests/cluster/mod.rs"]
mod cluster;

use std::path::{Path, PathBuf};
use std::process::Command;

/// A directory outside /tmp (each node has its own /tmp) holding the plugin under the
/// names libfabric looks for and the MPI program, made once per test process.
fn job_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("current_exe");
        let deps = exe.parent().expect("deps dir");
        let so = [
            deps.join("libfabric_ofi.so"),
            deps.join("../libfabric_ofi.so"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .expect("libfabric_ofi.so built next to the test binary");
        let dir = deps.join(format!("cluster-mpi-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("job dir");
        for name in ["fab_tcp", "fab_hybrid"] {
            std::fs::copy(&so, dir.join(format!("lib{name}-fi.so"))).expect("copy plugin");
        }
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpi/p2p.c");
        let cc = Command::new("mpicc")
            .args(["-O1", "-Wall", "-Werror", "-o"])
            .arg(dir.join("mpi_p2p"))
            .arg(&src)
            .output()
            .expect("mpicc");
        assert!(
            cc.status.success(),
            "mpicc failed:\n{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        dir
    })
    .clone()
}

/// `mpi_p2p` on 4 ranks placed `hosts` over `prov`: succeeds, and every rank's mtl ofi
/// opened `prov`.
fn p2p_job(c: &cluster::Cluster, prov: &str, hosts: &str) {
    let dir = job_dir();
    let path = format!("FI_PROVIDER_PATH={}", dir.display());
    let prog = dir.join("mpi_p2p");
    let out = c.mpirun(&[
        "-n",
        "4",
        "--host",
        hosts,
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        prov,
        "--mca",
        "mtl_base_verbose",
        "100",
        "-x",
        &path,
        "-x",
        "FABRIC_TCP_IFACE=eth0",
        prog.to_str().unwrap(),
    ]);
    eprintln!("{prov} on {hosts}: {:?}", out.elapsed);
    assert!(out.success(), "{prov} on {hosts}: {out}");
    assert!(out.stdout.contains("ok p2p 4 ranks"), "{out}");
    let opened = format!("{}{}", out.stdout, out.stderr)
        .matches(&format!("mtl:ofi:provider: {prov}"))
        .count();
    assert_eq!(opened, 4, "{out}");
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
            p2p_job(&c, prov, hosts);
        }
    }
}
