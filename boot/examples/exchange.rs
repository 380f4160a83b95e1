//! Every rank publishes a value derived from its rank, fences, reads every rank's value
//! back and checks it, then meets the others at a barrier. Prints one line per rank on
//! success; the exit code is the result (0 verified, 1 wrong data, 2 bootstrap error).
//!
//! ```text
//! mpirun -n 8 target/debug/examples/exchange
//! srun -n 8 --mpi=pmix target/debug/examples/exchange
//! FABRIC_BOOT_ADDR=127.0.0.1:7000 FABRIC_BOOT_SIZE=2 FABRIC_BOOT_RANK=0 target/debug/examples/exchange &
//! FABRIC_BOOT_ADDR=127.0.0.1:7000 FABRIC_BOOT_SIZE=2 FABRIC_BOOT_RANK=1 target/debug/examples/exchange
//! ```
//!
//! For failure tests, `--die-before-fence R` makes rank R exit (without finalizing)
//! right before the fence, and `--hang-before-fence R` makes it stop there for
//! `HANG` (longer than the tests' timeouts) and then exit, so that a launcher that waits
//! for every rank still ends.

use std::process::ExitCode;

use fabric_boot::{Boot, BootError};

/// How long `--hang-before-fence` stops its rank.
const HANG: std::time::Duration = std::time::Duration::from_secs(10);

/// The value rank `r` publishes: its rank in text, then bytes whose length and content
/// depend on `r`, so that a value delivered to the wrong key or rank is caught.
fn value_of(r: u32) -> Vec<u8> {
    let mut v = format!("endpoint-of-rank-{r}:").into_bytes();
    v.extend((0..(r * 37 % 300)).map(|i| (i * 31 + r) as u8));
    v
}

fn flag(name: &str) -> Option<u32> {
    let args: Vec<String> = std::env::args().collect();
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1).and_then(|s| s.parse().ok())
}

fn run() -> Result<bool, BootError> {
    let mut boot = Boot::init()?;
    let (rank, size) = (boot.rank(), boot.size());
    boot.put("ep", &value_of(rank))?;
    boot.commit()?;
    if flag("--die-before-fence") == Some(rank) {
        std::process::exit(3);
    }
    if flag("--hang-before-fence") == Some(rank) {
        std::thread::sleep(HANG);
        std::process::exit(3);
    }
    boot.fence()?;
    let mut wrong = Vec::new();
    for peer in 0..size {
        if boot.get(peer, "ep")? != value_of(peer) {
            wrong.push(peer);
        }
    }
    // A key nobody committed is reported absent, not waited for.
    let next = (rank + 1) % size;
    match boot.get(next, "absent") {
        Err(BootError::NotFound { .. }) => {}
        Err(e) => return Err(e),
        Ok(v) => {
            eprintln!("rank {rank}: a value {v:?} under a key rank {next} never put");
            return Ok(false);
        }
    }
    boot.barrier()?;
    if !wrong.is_empty() {
        eprintln!("rank {rank}: wrong values from rank(s) {wrong:?}");
        return Ok(false);
    }
    let local = match (boot.local_rank(), boot.local_size()) {
        (Some(r), Some(n)) => format!("{r}/{n}"),
        _ => "unknown".into(),
    };
    println!(
        "rank {rank} of {size} (local {local}) via {}: verified {size} values",
        boot.kind()
    );
    boot.finalize()?;
    Ok(true)
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("exchange: {e}");
            ExitCode::from(2)
        }
    }
}
