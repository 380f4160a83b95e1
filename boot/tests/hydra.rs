//! The example under MPICH's `mpiexec.hydra`, a real PMI-2 server: the PMI-2 backend's
//! wire protocol, value chunks, process mapping and fence against a server that is not
//! ours. Needs `mpich` (`.ci/run` installs it). Slurm's `srun --mpi=pmi2` speaks the
//! same protocol; hydra differs in that its kvs-fence is not a barrier, which the
//! backend handles.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{check_lines, exchange, wait_until, LAUNCHER_VARS};

fn hydra(n: u32, timeout_s: &str, args: &[&str]) -> std::process::Output {
    let mut c = Command::new("mpiexec.hydra");
    c.args(["-n", &n.to_string()]).arg(exchange()).args(args);
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("FABRIC_BOOT_TIMEOUT", timeout_s);
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c
        .spawn()
        .expect("mpiexec.hydra not found: install mpich (as .ci/run does)");
    wait_until(child, Instant::now() + Duration::from_secs(120)).expect("mpiexec.hydra hung")
}

#[test]
fn eight_ranks_under_hydra_via_pmi2() {
    let size = 8;
    let out = hydra(size, "60", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    check_lines(&stdout, size, "PMI-2");
    // hydra's one-node process mapping, `(vector,(0,1,1))`, repeats over the job.
    for r in 0..size {
        assert!(
            stdout.contains(&format!("rank {r} of {size} (local {r}/{size})")),
            "{stdout}"
        );
    }
}

#[test]
fn a_hung_rank_makes_the_fence_time_out_under_hydra() {
    // hydra answers kvs-fence at once; the others must still wait for rank 2 and give
    // up after the timeout with an error, not pass the fence without it.
    let out = hydra(4, "3", &["--hang-before-fence", "2"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains("verified"),
        "passed a fence without rank 2:\n{stdout}"
    );
    let timeouts = stderr
        .matches("kvs-fence (waiting for every rank) timed out after 3.0 s")
        .count();
    assert_eq!(timeouts, 3, "{stderr}");
}
