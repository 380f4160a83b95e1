//! The example as an 8-rank job of Open MPI's `mpirun`, bootstrapped through PMIx.
//! Needs `openmpi-bin` and `libpmix2` (`.ci/run` installs them). `mpirun.openmpi` by
//! name: with MPICH installed too, `mpirun` is whichever the alternatives system chose.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{check_lines, exchange, wait_until, LAUNCHER_VARS};

#[test]
fn eight_ranks_under_mpirun_via_pmix() {
    let size = 8;
    let mut c = Command::new("mpirun.openmpi");
    // Root in CI; more ranks than the machine's cores.
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-n",
        &size.to_string(),
    ])
    .arg(exchange());
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c
        .spawn()
        .expect("mpirun not found: install openmpi-bin (as .ci/run does)");
    let out = wait_until(child, Instant::now() + Duration::from_secs(180)).expect("mpirun hung");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mpirun: {:?}\n{stdout}\n{stderr}",
        out.status
    );
    check_lines(&stdout, size, "PMIx");
    // One node: mpirun tells every rank its local rank and the local size.
    for r in 0..size {
        assert!(
            stdout.contains(&format!("rank {r} of {size} (local {r}/{size})")),
            "{stdout}"
        );
    }
}

#[test]
fn a_rank_dying_under_mpirun_ends_the_job() {
    // mpirun aborts the job when a rank exits without finalizing: nobody hangs in the
    // fence, and the job's status is a failure.
    let mut c = Command::new("mpirun.openmpi");
    c.args(["--allow-run-as-root", "--oversubscribe", "-n", "4"])
        .arg(exchange())
        .args(["--die-before-fence", "2"]);
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.env("FABRIC_BOOT_TIMEOUT", "30");
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = c.spawn().expect("mpirun not found: install openmpi-bin");
    let out = wait_until(child, Instant::now() + Duration::from_secs(120)).expect("mpirun hung");
    assert!(!out.status.success(), "a job with a dead rank succeeded");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("verified"), "{stdout}");
}
