//! Jobs launched for real on a two-node cluster made on this machine (`tests/cluster`,
//! `scripts/cluster`): `mpirun -n 8 --host fnode1:4,fnode2:4` and `srun -N 2 -n 8`
//! (with Slurm's PMIx and PMI-2 plugins) start this test binary's [`probe_entry`] as
//! every rank, which reports its node (network namespace and hostname), its rank and the
//! launcher's environment; the test checks four ranks in each node, ranks 0..7 once each,
//! and the process-management interface each rank needs. Launches on a node that does
//! not exist fail with an error, within a deadline.
//!
//! Needs root, iproute2, `openmpi-bin`, `slurm-wlm` and `munge` (`.ci/run` installs them
//! in CI). Without them the tests fail, unless `FABRIC_TEST_ALLOW_SKIP=1` says that a
//! run without a cluster is acceptable here.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

mod cluster;
use cluster::{Cluster, Launch};

/// Prefix of the probe's report lines (libtest prints around them).
const MARK: &str = "LAUNCH ";
/// Environment variable that makes [`probe_entry`] report.
const PROBE_ENV: &str = "FABRIC_LAUNCH_PROBE";
/// Ranks per node in every job here.
const PER_NODE: usize = 4;
/// Nodes in every job here.
const NODES: usize = 2;
/// A launch that is refused must be refused within this.
const REFUSAL_BOUND: Duration = Duration::from_secs(30);

/// The launcher's variables the probe reports, when set.
const REPORTED: &[&str] = &[
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_FD",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_NODEID",
    "SLURMD_NODENAME",
];

/// The name of the network namespace this process is in (as `ip netns identify` finds
/// it: the entry of /run/netns that is the same namespace), or `root` when none is.
fn netns() -> String {
    let me = std::fs::metadata("/proc/self/ns/net").unwrap();
    let Ok(dir) = std::fs::read_dir("/run/netns") else {
        return "root".into();
    };
    dir.filter_map(|e| e.ok())
        .find(|e| {
            e.metadata()
                .is_ok_and(|m| (m.dev(), m.ino()) == (me.dev(), me.ino()))
        })
        .map_or("root".into(), |e| {
            e.file_name().to_string_lossy().into_owned()
        })
}

/// One rank of a launched job: reports where it runs and what the launcher gave it.
#[test]
#[ignore = "started as every rank by the launches of the other tests"]
fn probe_entry() {
    if std::env::var(PROBE_ENV).as_deref() != Ok("1") {
        return;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let mut line = format!("{MARK}netns={} host={}", netns(), host.trim());
    for k in REPORTED {
        if let Ok(v) = std::env::var(k) {
            line += &format!(" {k}={v}");
        }
    }
    // Which PMIx server URI variable is set depends on the PMIx version.
    let uri = std::env::vars().any(|(k, _)| k.starts_with("PMIX_SERVER_URI"));
    line += &format!(" pmix_uri={uri}");
    println!("\n{line}");
}

/// The command line that runs [`probe_entry`] as a rank.
fn probe() -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    vec![
        exe.to_str().unwrap().to_owned(),
        "--ignored".into(),
        "--exact".into(),
        "probe_entry".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ]
}

/// Checks that `out` reports `NODES * PER_NODE` ranks, `PER_NODE` in each node's
/// namespace (and with its hostname), with ranks (`rank_key`) 0..N once each; returns
/// the reports by rank.
#[track_caller]
fn check_placement(
    c: &Cluster,
    out: &Launch,
    rank_key: &str,
) -> BTreeMap<usize, BTreeMap<String, String>> {
    assert!(out.success(), "the launch failed: {out}");
    let n = NODES * PER_NODE;
    let recs = out.records(MARK);
    assert_eq!(recs.len(), n, "expected {n} reports: {out}");
    let mut by_rank = BTreeMap::new();
    for r in recs {
        let rank: usize = r
            .get(rank_key)
            .unwrap_or_else(|| panic!("a rank without {rank_key}: {r:?}"))
            .parse()
            .unwrap();
        assert!(rank < n, "rank {rank} of {n}: {r:?}");
        assert_eq!(
            r["netns"], r["host"],
            "a rank's hostname is not its node's: {r:?}"
        );
        if let Some(prev) = by_rank.insert(rank, r) {
            panic!("rank {rank} twice: {prev:?}");
        }
    }
    for node in c.nodes() {
        let here: Vec<usize> = by_rank
            .iter()
            .filter(|(_, r)| r["netns"] == node.name)
            .map(|(&k, _)| k)
            .collect();
        assert_eq!(
            here.len(),
            PER_NODE,
            "ranks {here:?} on {}: {out}",
            node.name
        );
    }
    by_rank
}

/// What a node is: its own network (its address, the others' reachable by name), its
/// own hostname, its own /tmp; and a process started in it finds itself there.
#[test]
fn nodes_have_their_own_network_hostname_and_tmp() {
    let Some(c) = Cluster::up(NODES) else { return };
    let deadline = Duration::from_secs(20);
    let mark = format!("/tmp/fabric-launch-{}", std::process::id());
    for (i, node) in c.nodes().iter().enumerate() {
        let other = &c.nodes()[(i + 1) % NODES];
        // `getent` resolves like the launchers do; `ip -o -4 addr` lists this node's.
        let script = format!(
            "hostname; ip -o -4 addr show dev eth0; getent hosts {}; \
             test -e {mark} && echo SEEN; touch {mark}",
            other.name
        );
        let out = c.exec(&node.name, &["/bin/sh", "-c", &script], deadline);
        assert!(out.success(), "{out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines[0], node.name, "{out}");
        assert!(
            lines[1].contains(&format!("inet {}/24", node.addr)),
            "{out}"
        );
        assert!(lines[2].starts_with(&other.addr), "{out}");
        // Each node's /tmp is its own: the mark made in the first is not in the second.
        assert_eq!(lines.len(), 3, "{out}");
    }
    assert!(
        !std::path::Path::new(&mark).exists(),
        "a node wrote the root's /tmp"
    );
    // And the probe, run in a node, names it.
    let mut probe_in_node = vec!["env", "FABRIC_LAUNCH_PROBE=1"];
    let probe = probe();
    probe_in_node.extend(probe.iter().map(String::as_str));
    let out = c.exec(&c.nodes()[1].name, &probe_in_node, deadline);
    let recs = out.records(MARK);
    assert_eq!(recs.len(), 1, "{out}");
    assert_eq!(recs[0]["netns"], c.nodes()[1].name, "{out}");
    assert_eq!(recs[0]["host"], c.nodes()[1].name, "{out}");
}

#[test]
fn mpirun_places_four_ranks_in_each_of_two_nodes() {
    let Some(c) = Cluster::up(NODES) else { return };
    let hosts = c.hosts(PER_NODE);
    let np = (NODES * PER_NODE).to_string();
    let probe = probe();
    let mut args = vec!["-n", &np, "--host", &hosts, "-x", "FABRIC_LAUNCH_PROBE=1"];
    args.extend(probe.iter().map(String::as_str));
    let out = c.mpirun(&args);
    eprintln!("mpirun -n {np} --host {hosts}: {:?}", out.elapsed);
    let ranks = check_placement(&c, &out, "OMPI_COMM_WORLD_RANK");
    for (rank, r) in &ranks {
        // Open MPI 4.1 serves PMIx to every rank: the bootstrap's way in.
        assert_eq!(r.get("PMIX_RANK"), Some(&rank.to_string()), "{r:?}");
        assert!(
            r.get("PMIX_NAMESPACE").is_some_and(|v| !v.is_empty()),
            "{r:?}"
        );
        assert_eq!(r["pmix_uri"], "true", "no PMIx server URI: {r:?}");
        assert_eq!(r["OMPI_COMM_WORLD_SIZE"], "8", "{r:?}");
        // Block mapping: ranks 0-3 on the first node, 4-7 on the second.
        assert_eq!(r["netns"], c.nodes()[rank / PER_NODE].name, "{r:?}");
        assert_eq!(
            r["OMPI_COMM_WORLD_LOCAL_RANK"],
            (rank % PER_NODE).to_string(),
            "{r:?}"
        );
    }
}

#[test]
fn srun_places_four_ranks_in_each_of_two_nodes_with_pmix_and_pmi2() {
    let Some(mut c) = Cluster::up(NODES) else {
        return;
    };
    c.slurm();
    let np = (NODES * PER_NODE).to_string();
    let nodes = NODES.to_string();
    let probe = probe();
    // None: no --mpi, slurm.sh's MpiDefault, which is PMIx.
    for mpi in [None, Some("pmix"), Some("pmi2")] {
        let flag = mpi.map(|m| format!("--mpi={m}"));
        let mut args: Vec<&str> = flag.iter().map(String::as_str).collect();
        args.extend([
            "-N",
            &nodes,
            "-n",
            &np,
            "--export=ALL,FABRIC_LAUNCH_PROBE=1",
        ]);
        args.extend(probe.iter().map(String::as_str));
        let out = c.srun(&args);
        eprintln!(
            "srun {} -N {nodes} -n {np}: {:?}",
            flag.as_deref().unwrap_or(""),
            out.elapsed
        );
        let ranks = check_placement(&c, &out, "SLURM_PROCID");
        for (rank, r) in &ranks {
            assert_eq!(r["SLURMD_NODENAME"], r["netns"], "{r:?}");
            assert_eq!(r["SLURM_NTASKS"], np, "{r:?}");
            match mpi {
                None | Some("pmix") => {
                    assert_eq!(r.get("PMIX_RANK"), Some(&rank.to_string()), "{r:?}");
                    assert!(
                        r.get("PMIX_NAMESPACE").is_some_and(|v| !v.is_empty()),
                        "{r:?}"
                    );
                    assert_eq!(r["pmix_uri"], "true", "no PMIx server URI: {r:?}");
                }
                _ => {
                    assert_eq!(r.get("PMI_RANK"), Some(&rank.to_string()), "{r:?}");
                    assert_eq!(r.get("PMI_SIZE"), Some(&np), "{r:?}");
                    assert!(r.get("PMI_FD").is_some(), "no PMI-2 descriptor: {r:?}");
                    assert!(r.get("PMIX_RANK").is_none(), "PMIx under PMI-2: {r:?}");
                }
            }
        }
    }
}

#[test]
fn mpirun_on_a_missing_node_fails_in_time() {
    let Some(c) = Cluster::up(NODES) else { return };
    let probe = probe();
    let mut args = vec![
        "-n",
        "8",
        "--host",
        "fnode1:4,fnode9:4",
        "-x",
        "FABRIC_LAUNCH_PROBE=1",
    ];
    args.extend(probe.iter().map(String::as_str));
    let out = c.mpirun_within(&args, REFUSAL_BOUND);
    assert!(out.status.is_some(), "mpirun hung on a missing node: {out}");
    assert!(!out.success(), "mpirun succeeded on a missing node: {out}");
    assert!(
        out.stderr.contains("fnode9"),
        "the error does not name the node: {out}"
    );
    assert_eq!(out.records(MARK).len(), 0, "ranks ran: {out}");
}

#[test]
fn srun_on_a_missing_node_or_controller_fails_in_time() {
    let Some(mut c) = Cluster::up(NODES) else {
        return;
    };
    c.slurm();
    let probe = probe();
    let mut args = vec![
        "-w",
        "fnode1,fnode9",
        "-n",
        "2",
        "--export=ALL,FABRIC_LAUNCH_PROBE=1",
    ];
    args.extend(probe.iter().map(String::as_str));
    let out = c.srun_within(&args, REFUSAL_BOUND);
    assert!(out.status.is_some(), "srun hung on a missing node: {out}");
    assert!(!out.success(), "srun succeeded on a missing node: {out}");
    assert!(
        out.stderr.contains("Invalid node name"),
        "unexpected error: {out}"
    );
    assert_eq!(out.records(MARK).len(), 0, "ranks ran: {out}");

    // A controller nobody listens at: srun gives up on its own.
    let conf = std::fs::read_to_string(c.slurm_conf()).unwrap();
    let bad = conf.replace("SlurmctldPort=6917", "SlurmctldPort=6999");
    assert_ne!(bad, conf, "slurm.sh's controller port moved");
    let path = std::env::temp_dir().join(format!("fabric-launch-{}.conf", std::process::id()));
    std::fs::write(&path, bad).unwrap();
    let mut cmd = vec!["-N", "2", "-n", "8"];
    cmd.extend(probe.iter().map(String::as_str));
    let out = cluster::launch_with_env(
        "srun",
        &cmd,
        &[("SLURM_CONF", path.to_str().unwrap())],
        REFUSAL_BOUND,
    );
    std::fs::remove_file(&path).unwrap();
    assert!(
        out.status.is_some(),
        "srun hung on a missing controller: {out}"
    );
    assert!(!out.success(), "srun succeeded without a controller: {out}");
    assert!(
        out.stderr.contains("Unable to contact slurm controller"),
        "unexpected error: {out}"
    );
}
