//! Running the `exchange` example as the ranks of a job, with deadlines.

#![allow(dead_code)] // each test file uses its own part of this module

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The variables by which a launcher is detected: cleared so that the test's own
/// environment (a CI job started by some launcher) cannot leak into the job.
pub const LAUNCHER_VARS: &[&str] = &[
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "PMIX_SERVER_URI",
    "PMIX_SERVER_URI2",
    "PMIX_SERVER_URI21",
    "PMIX_SERVER_URI3",
    "PMIX_SERVER_URI4",
    "PMI_FD",
    "PMI_RANK",
    "PMI_SIZE",
    "PMI_JOBID",
    "FABRIC_BOOT_ADDR",
    "FABRIC_BOOT_RANK",
    "FABRIC_BOOT_SIZE",
    "FABRIC_BOOT_KIND",
    "FABRIC_BOOT_TIMEOUT",
];

/// `target/<profile>/examples/exchange`, which `cargo test` builds with the tests.
pub fn exchange() -> PathBuf {
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/examples/exchange
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples")
        .join("exchange");
    assert!(
        path.exists(),
        "{} is missing: `cargo test` builds the examples; run `cargo build -p fabric-boot --examples` \
         before running this test alone",
        path.display()
    );
    path
}

/// A command for the example with no launcher in its environment.
pub fn bare(args: &[&str]) -> Command {
    let mut c = Command::new(exchange());
    c.args(args);
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// A loopback address with a port that was free a moment ago.
pub fn free_addr() -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// Waits for `child` up to `deadline`; kills it past that and returns `None`.
pub fn wait_until(mut child: Child, deadline: Instant) -> Option<Output> {
    loop {
        match child.try_wait().unwrap() {
            Some(_) => return Some(child.wait_with_output().unwrap()),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Starts `size` ranks of the example on the TCP fallback.
pub fn spawn_fallback(size: u32, timeout_s: &str, args: &[&str]) -> Vec<Child> {
    let addr = free_addr();
    (0..size)
        .map(|r| {
            bare(args)
                .env("FABRIC_BOOT_ADDR", &addr)
                .env("FABRIC_BOOT_RANK", r.to_string())
                .env("FABRIC_BOOT_SIZE", size.to_string())
                .env("FABRIC_BOOT_TIMEOUT", timeout_s)
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Checks the success lines of a job: one per rank, each rank once, all verified.
pub fn check_lines(stdout: &str, size: u32, kind: &str) {
    let mut seen = vec![false; size as usize];
    for line in stdout.lines() {
        let rank: usize = line
            .strip_prefix("rank ")
            .and_then(|l| l.split(' ').next())
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("unexpected line {line:?}"));
        assert!(
            line.ends_with(&format!("via {kind}: verified {size} values")),
            "{line:?}"
        );
        assert!(!seen[rank], "rank {rank} reported twice");
        seen[rank] = true;
    }
    let missing: Vec<usize> = (0..size as usize).filter(|&r| !seen[r]).collect();
    assert!(
        missing.is_empty(),
        "no success line from ranks {missing:?}:\n{stdout}"
    );
}
