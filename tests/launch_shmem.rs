//! `examples/shmem.rs` as real two-node jobs on the test cluster (`tests/cluster`):
//! `mpirun --host fnode1:4,fnode2:4` and `srun -N 2 -n 8` (PMIx and PMI-2) start 8 ranks,
//! 4 per node, that bootstrap through the launcher, run the all-to-all, fetch-add and
//! lock checks over the fabric, and report one `SHMEM ... ok=true` line each. A rank
//! that kills itself (`SIGKILL`) in the middle makes the others fail with a report
//! naming what failed, within a deadline, under both launchers, told to let the
//! survivors run, or the launcher ends the job where it cannot be told otherwise.
//! Without any launcher the example says so; four ranks over shm on this machine (the
//! bootstrap's TCP fallback in place of a launcher) need no cluster. The ranks print
//! their pattern seed (`seed=` in the output); `FABRIC_SHMEM_SEED` replays one.
//!
//! Needs root, iproute2, `openmpi-bin`, `slurm-wlm` and `munge` (`.ci/run` installs them)
//! for the cluster tests; without them they fail unless `FABRIC_TEST_ALLOW_SKIP=1`.
//! `cargo test` builds the example; alone, run `cargo build --example shmem` first.
//!
//! Figures: `--ignored bench_two_nodes` in a release build prints rank 0's latency and
//! bandwidth to a rank on its node and one on the other node.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod cluster;
use cluster::{Cluster, Launch};

/// The provider (`-p`) every launched job here runs on: `hybrid` (shm to the ranks of
/// the same node, tcp to the others; each node is its own network namespace). `tcp`
/// (everything over the network) is the other one that crosses nodes; this line is
/// all that changes to run the jobs on it.
const PROVIDER: &str = "hybrid";
/// What the ranks need in their environment for [`PROVIDER`]: the nodes' interface
/// for tcp (whose endpoints listen on localhost otherwise).
const RANK_ENV: &str = "FABRIC_TCP_IFACE=eth0";
/// Prefix of the example's per-rank summary lines.
const MARK: &str = "SHMEM ";
/// Prefix of the example's benchmark lines.
const BENCH: &str = "BENCH ";
const PER_NODE: usize = 4;
const NODES: usize = 2;
/// Bytes each rank puts into every rank's heap.
const SLOT: usize = 16 << 10;
/// Fetch-adds and lock rounds per rank.
const ITERS: usize = 8;
/// The example's `-T`: a wait that sees nothing for this long fails.
const RANK_TIMEOUT_S: u64 = 15;
/// `-T` where a rank is killed: survivors whose operations on it completed before it
/// died wait this long at the next barrier.
const KILL_TIMEOUT_S: u64 = 8;
/// The rank that kills itself in the failure tests: the second node's second.
const VICTIM: usize = 5;
/// A job with a killed rank must end within this (the survivors' `-T` plus room).
const FAILURE_BOUND: Duration = Duration::from_secs(50);

/// The example binary of this test's build profile.
fn shmem() -> PathBuf {
    // target/<profile>/deps/launch_shmem-<hash> -> target/<profile>/examples/shmem
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples/shmem");
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds the examples; run `cargo build --example \
         shmem` before `cargo test --test launch_shmem`",
        path.display()
    );
    path
}

/// The rank's command line: the example, [`PROVIDER`], `-T`, the sizes here, `extra`.
fn rank_cmd(timeout_s: u64, extra: &[&str]) -> Vec<String> {
    rank_cmd_on(PROVIDER, timeout_s, extra)
}

/// [`rank_cmd`] on `provider`.
fn rank_cmd_on(provider: &str, timeout_s: u64, extra: &[&str]) -> Vec<String> {
    let mut v = vec![
        shmem().to_str().unwrap().to_owned(),
        "-p".into(),
        provider.into(),
        "-T".into(),
        timeout_s.to_string(),
        "--slot".into(),
        SLOT.to_string(),
        "--iters".into(),
        ITERS.to_string(),
    ];
    // The ranks print their seed; the environment replays one.
    if let Ok(seed) = std::env::var("FABRIC_SHMEM_SEED") {
        v.extend(["--seed".into(), seed]);
    }
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

/// `mpirun -n 8 --host fnode1:4,fnode2:4 -x RANK_ENV <launcher_opts> shmem ...`.
fn mpirun(c: &Cluster, launcher_opts: &[&str], extra: &[&str], deadline: Duration) -> Launch {
    let hosts = c.hosts(PER_NODE);
    let np = (NODES * PER_NODE).to_string();
    let cmd = rank_cmd(
        if extra.contains(&"--kill-rank") {
            KILL_TIMEOUT_S
        } else {
            RANK_TIMEOUT_S
        },
        extra,
    );
    let mut args = vec!["-n", &np, "--host", &hosts, "-x", RANK_ENV];
    args.extend_from_slice(launcher_opts);
    args.extend(cmd.iter().map(String::as_str));
    let out = c.mpirun_within(&args, deadline);
    eprintln!("mpirun {}: {out}", args.join(" "));
    out
}

/// `srun --mpi=MPI -N 2 -n 8 <launcher_opts> shmem ...` (Slurm already up).
fn srun(
    c: &Cluster,
    mpi: &str,
    launcher_opts: &[&str],
    extra: &[&str],
    deadline: Duration,
) -> Launch {
    let np = (NODES * PER_NODE).to_string();
    let nodes = NODES.to_string();
    let mpi = format!("--mpi={mpi}");
    let export = format!("--export=ALL,{RANK_ENV}");
    let cmd = rank_cmd(
        if extra.contains(&"--kill-rank") {
            KILL_TIMEOUT_S
        } else {
            RANK_TIMEOUT_S
        },
        extra,
    );
    let mut args = vec![mpi.as_str(), "-N", &nodes, "-n", &np, &export];
    args.extend_from_slice(launcher_opts);
    args.extend(cmd.iter().map(String::as_str));
    let out = c.srun_within(&args, deadline);
    eprintln!("srun {}: {out}", args.join(" "));
    out
}

/// The summary lines by rank, each rank once.
#[track_caller]
fn by_rank(out: &Launch) -> BTreeMap<usize, BTreeMap<String, String>> {
    let mut m = BTreeMap::new();
    for r in out.records(MARK) {
        let rank: usize = r["rank"].parse().unwrap();
        if let Some(prev) = m.insert(rank, r) {
            panic!("rank {rank} reported twice ({prev:?}): {out}");
        }
    }
    m
}

/// A successful job: every rank verified everything, four ranks on each node, one seed.
#[track_caller]
fn check_all_ok(c: &Cluster, out: &Launch) {
    assert!(out.success(), "the job failed: {out}");
    let n = NODES * PER_NODE;
    let ranks = by_rank(out);
    assert_eq!(
        ranks.keys().copied().collect::<Vec<_>>(),
        (0..n).collect::<Vec<_>>(),
        "not one line per rank: {out}"
    );
    // Every slot received and every slot read back, from and at every rank.
    let bytes = (2 * n * SLOT).to_string();
    let seed = &ranks[&0]["seed"];
    for (rank, r) in &ranks {
        assert_eq!(r["ok"], "true", "rank {rank}: {out}");
        assert_eq!(r["size"], n.to_string(), "{r:?}");
        assert_eq!(r["peers"], n.to_string(), "{r:?}");
        assert_eq!(r["bytes"], bytes, "rank {rank} verified too little: {r:?}");
        assert_eq!(r["fadd"], ITERS.to_string(), "{r:?}");
        assert_eq!(r["lock"], ITERS.to_string(), "{r:?}");
        assert_eq!(&r["seed"], seed, "ranks disagree on the seed: {out}");
        assert_eq!(r["provider"], PROVIDER, "{r:?}");
        assert_eq!(
            r["node"], r["host"],
            "a rank's hostname is not its node's: {r:?}"
        );
    }
    for node in c.nodes() {
        let here = ranks.values().filter(|r| r["node"] == node.name).count();
        assert_eq!(here, PER_NODE, "{here} ranks on {}: {out}", node.name);
    }
}

/// A job in which [`VICTIM`] killed itself: it reported nothing, every other rank
/// reported a failure (naming the phase and the ranks its operations failed on), one
/// of them named the victim, and (if `launcher_exits`) the launcher ended in error
/// within its deadline. The survivors' stderr says what failed. Returns their lines.
#[track_caller]
fn check_victim_failed(
    out: &Launch,
    launcher_exits: bool,
) -> BTreeMap<usize, BTreeMap<String, String>> {
    if launcher_exits {
        assert!(
            out.status.is_some(),
            "the job hung after a rank died: {out}"
        );
    }
    assert!(
        !out.success(),
        "the job succeeded with a killed rank: {out}"
    );
    assert!(
        out.stderr.contains(&format!("rank {VICTIM} kills itself")),
        "the victim did not get to its kill: {out}"
    );
    let ranks = by_rank(out);
    assert!(
        !ranks.contains_key(&VICTIM),
        "the killed rank reported: {out}"
    );
    let survivors: Vec<usize> = (0..NODES * PER_NODE).filter(|&r| r != VICTIM).collect();
    assert_eq!(
        ranks.keys().copied().collect::<Vec<_>>(),
        survivors,
        "not every survivor reported: {out}"
    );
    let mut named = false;
    for (rank, r) in &ranks {
        assert_eq!(
            r["ok"], "false",
            "rank {rank} passed without rank {VICTIM}: {out}"
        );
        assert_ne!(
            r["failed"], "none",
            "rank {rank} names no failed rank: {out}"
        );
        named |= r["failed"].split(',').any(|p| p == VICTIM.to_string());
        assert!(
            out.stderr.contains(&format!("shmem: rank {rank}: ")),
            "rank {rank} said nothing about its failure: {out}"
        );
    }
    assert!(named, "no survivor named rank {VICTIM}: {out}");
    ranks
}

#[test]
fn mpirun_two_nodes_all_to_all_verified() {
    let Some(c) = Cluster::up(NODES) else { return };
    // A short benchmark rides along, so that its mode works under a launcher too.
    let bench = [
        "--bench",
        "--bench-rounds",
        "1",
        "--bench-iters",
        "20",
        "--bench-puts",
        "2",
    ];
    let out = mpirun(&c, &[], &bench, cluster::LAUNCH_DEADLINE);
    check_all_ok(&c, &out);
    let lines = out.records(BENCH);
    assert_eq!(
        lines.len(),
        2,
        "expected a same-node and an other-node line: {out}"
    );
    for (l, (peer, place)) in lines
        .iter()
        .zip([("0-1", "same-node"), ("0-4", "other-node")])
    {
        assert_eq!(l["pair"], peer, "{l:?}");
        assert_eq!(l["where"], place, "{l:?}");
        for k in ["lat_us", "bw_MBps"] {
            let v: f64 = l[k].parse().unwrap();
            assert!(v > 0.0 && v.is_finite(), "{k} {v}: {l:?}");
        }
    }
}

#[test]
fn srun_two_nodes_all_to_all_verified_with_pmix_and_pmi2() {
    let Some(mut c) = Cluster::up(NODES) else {
        return;
    };
    c.slurm();
    for mpi in ["pmix", "pmi2"] {
        let out = srun(&c, mpi, &[], &[], cluster::LAUNCH_DEADLINE);
        check_all_ok(&c, &out);
        let want = if mpi == "pmix" { "PMIx" } else { "PMI-2" };
        for r in by_rank(&out).values() {
            assert_eq!(r["boot"], want, "--mpi={mpi}: {r:?}");
        }
    }
}

#[test]
fn mpirun_rank_killed_mid_job_ends_the_job_or_others_report_it() {
    let Some(c) = Cluster::up(NODES) else { return };
    let victim = VICTIM.to_string();
    let kill = ["--kill-rank", &victim, "--kill-after-phase", "setup"];

    // By default Open MPI 4.1 ends the whole job as soon as a rank dies by a signal:
    // no survivor gets to report, mpirun says which rank died and exits in error.
    let out = mpirun(&c, &[], &kill, FAILURE_BOUND);
    assert!(out.status.is_some(), "mpirun hung after a rank died: {out}");
    assert!(!out.success(), "{out}");
    assert!(
        out.stderr.contains(&format!("process rank {VICTIM} ")) && out.stderr.contains("signal 9"),
        "mpirun did not name the killed rank: {out}"
    );

    // `orte_abort_on_non_zero_status 0` lets the others run: each reports the failure.
    // Open MPI 4.1.4's mpirun itself then does not exit once they have (its daemons
    // wait on), so the launch is ended at a deadline past the survivors' own
    // (`KILL_TIMEOUT_S` plus the linger), and what is checked is their reports.
    let keep = ["--mca", "orte_abort_on_non_zero_status", "0"];
    let bound = Duration::from_secs(3 * KILL_TIMEOUT_S);
    let out = mpirun(&c, &keep, &kill, bound);
    check_victim_failed(&out, false);
}

#[test]
fn srun_rank_killed_mid_job_others_report_it_or_the_step_ends() {
    let Some(mut c) = Cluster::up(NODES) else {
        return;
    };
    c.slurm();
    let victim = VICTIM.to_string();
    let kill = ["--kill-rank", &victim, "--kill-after-phase", "setup"];
    // Under PMI-2, `--kill-on-bad-exit=0` keeps the other tasks running: each reports
    // the failure, and srun exits when they have.
    let keep = ["--kill-on-bad-exit=0"];
    let out = srun(&c, "pmi2", &keep, &kill, FAILURE_BOUND);
    check_victim_failed(&out, true);
    assert!(
        out.stderr.contains(&format!("task {VICTIM}: Killed")),
        "{out}"
    );

    // Slurm's PMIx plugin cancels the step when a task dies, whatever `-K0` or
    // `--no-kill` say: the survivors are killed before they can report.
    let keep = ["--kill-on-bad-exit=0", "--no-kill"];
    let out = srun(&c, "pmix", &keep, &kill, FAILURE_BOUND);
    assert!(out.status.is_some(), "srun hung after a task died: {out}");
    assert!(!out.success(), "{out}");
    assert!(
        out.stderr.contains(&format!("task {VICTIM}: Killed")),
        "{out}"
    );
    assert!(
        out.stderr.contains("CANCELLED"),
        "the step was not cancelled: {out}"
    );
    assert!(
        out.records(MARK).iter().all(|r| r["ok"] != "true"),
        "a rank passed without rank {VICTIM}: {out}"
    );
}

/// Runs the example with no launcher's variables, within a deadline.
fn run_alone(env: &[(&str, &str)]) -> (Option<std::process::ExitStatus>, String) {
    let mut cmd = Command::new(shmem());
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| {
            ["PMIX_", "PMI_", "SLURM_", "OMPI_", "FABRIC_BOOT_"]
                .iter()
                .any(|p| k.starts_with(p))
        }) {
            cmd.env_remove(k);
        }
    }
    let out = std::env::temp_dir().join(format!("shmem-alone-{}.err", std::process::id()));
    let mut child = cmd
        .args(["-p", PROVIDER])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&out).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&out).unwrap();
    std::fs::remove_file(&out).unwrap();
    (status, err)
}

#[test]
fn without_a_launcher_the_example_says_how_to_start_it() {
    let (status, err) = run_alone(&[]);
    let status = status.expect("the example hung without a launcher");
    assert!(!status.success(), "{err}");
    assert!(err.contains("no launcher found"), "{err}");
    assert!(err.contains("mpirun") && err.contains("srun"), "{err}");

    // A fallback pointed at a rank 0 that never comes: an error naming it, in time.
    let (status, err) = run_alone(&[
        ("FABRIC_BOOT_ADDR", "127.0.0.1:9"),
        ("FABRIC_BOOT_RANK", "1"),
        ("FABRIC_BOOT_SIZE", "2"),
        ("FABRIC_BOOT_TIMEOUT", "2"),
    ]);
    let status = status.expect("the example hung on an absent rank 0");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains("shmem: bootstrap:") && err.contains("rank 0"),
        "{err}"
    );
}

/// `n` ranks of the example on this machine through the bootstrap's TCP fallback (no
/// launcher, no cluster), on `provider` and with `extra`; every rank's exit status (`None`: killed
/// at the deadline) and output.
fn fallback_job(
    n: usize,
    provider: &str,
    extra: &[&str],
) -> Vec<(Option<std::process::ExitStatus>, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    let dir = std::env::temp_dir();
    let mut ranks = Vec::new();
    for r in 0..n {
        let log = dir.join(format!("shmem-fallback-{}-{r}.out", std::process::id()));
        let f = std::fs::File::create(&log).unwrap();
        let child = Command::new(shmem())
            .args(&rank_cmd_on(provider, KILL_TIMEOUT_S, extra)[1..])
            .env("FABRIC_BOOT_ADDR", &addr)
            .env("FABRIC_BOOT_RANK", r.to_string())
            .env("FABRIC_BOOT_SIZE", n.to_string())
            .stdin(Stdio::null())
            .stdout(f.try_clone().unwrap())
            .stderr(f)
            .spawn()
            .unwrap();
        ranks.push((child, log));
    }
    let start = Instant::now();
    ranks
        .into_iter()
        .map(|(mut child, log)| {
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break Some(s);
                }
                if start.elapsed() > FAILURE_BOUND {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                std::thread::sleep(Duration::from_millis(20));
            };
            let out = std::fs::read_to_string(&log).unwrap();
            std::fs::remove_file(&log).unwrap();
            (status, out)
        })
        .collect()
}

/// The summary record of one rank's output.
fn record(out: &str) -> Option<BTreeMap<String, String>> {
    let line = out.lines().find_map(|l| l.strip_prefix(MARK))?;
    Some(
        line.split_whitespace()
            .filter_map(|w| w.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

/// Four ranks on one machine over shm (the bootstrap's fallback in place of a
/// launcher): everything verified; then one killed after setup, and the others fail
/// naming what failed, in time.
#[test]
fn shm_four_ranks_without_launcher_verified_and_a_killed_rank_reported() {
    let n = 4;
    let jobs = fallback_job(n, "shm", &[]);
    for (r, (status, out)) in jobs.iter().enumerate() {
        assert!(
            status.is_some_and(|s| s.success()),
            "rank {r}: {status:?}\n{out}"
        );
        let rec = record(out).unwrap_or_else(|| panic!("rank {r} reported nothing: {out}"));
        assert_eq!(rec["ok"], "true", "{out}");
        assert_eq!(rec["rank"], r.to_string(), "{out}");
        assert_eq!(rec["provider"], "shm", "{out}");
        assert_eq!(rec["bytes"], (2 * n * SLOT).to_string(), "{out}");
    }

    let jobs = fallback_job(
        n,
        "shm",
        &["--kill-rank", "2", "--kill-after-phase", "setup"],
    );
    for (r, (status, out)) in jobs.iter().enumerate() {
        let status = status.unwrap_or_else(|| panic!("rank {r} hung: {out}"));
        assert!(!status.success(), "rank {r} passed with rank 2 dead: {out}");
        if r == 2 {
            assert!(out.contains("rank 2 kills itself"), "{out}");
            assert!(record(out).is_none(), "{out}");
            continue;
        }
        let rec = record(out).unwrap_or_else(|| panic!("rank {r} reported nothing: {out}"));
        assert_eq!(rec["ok"], "false", "{out}");
        assert_ne!(rec["failed"], "none", "{out}");
        assert!(out.contains(&format!("shmem: rank {r}: ")), "{out}");
    }
}

/// The measurement: rank 0 against rank 1 (its node) and rank 4 (the other node).
/// `cargo test --release --test launch_shmem -- --ignored --nocapture bench_two_nodes`.
#[test]
#[ignore = "a measurement, run by hand in a release build"]
fn bench_two_nodes() {
    let Some(c) = Cluster::up(NODES) else { return };
    let out = mpirun(
        &c,
        &[],
        &[
            "--bench",
            "--bench-rounds",
            "7",
            "--bench-iters",
            "2000",
            "--bench-puts",
            "32",
        ],
        Duration::from_secs(300),
    );
    check_all_ok(&c, &out);
    let lines: Vec<&str> = out.marked(BENCH).collect();
    assert_eq!(lines.len(), 2, "{out}");
    for l in lines {
        println!("BENCH {l}");
    }
}
