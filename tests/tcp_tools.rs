//! The example tools (`pingpong`, `rdm_tagged_bw`, `rma_bw`) on the tcp provider, RDM and MSG
//! endpoints (`-e rdm|msg`), between
//! two hosts: two network namespaces joined by a veth pair (`tests/netns/hosts.sh`), the
//! tool's server in one (`-B port`, listening on its namespace's address through
//! `FABRIC_TCP_IFACE`) and its client in the other (`<srv_addr> -P port`), the way a user
//! runs them on two machines. Each run must exit 0 on both sides and the client's
//! `--json` lines must report the counts asked for; the tools' own checks (`-c` data
//! checks, the server's receive count, RMA data and the fetch-add total) fail the run
//! when they fail.
//!
//! The binaries are the ones cargo builds next to this test: `cargo test` builds every
//! example into `target/<profile>/examples` before running tests; a run of this test
//! alone (`cargo test --test tcp_tools`) needs `cargo build --examples` first, and fails
//! saying so when a binary is missing.
//!
//! Needs root and iproute2, like `tests/tcp_netns.rs`: without them the test fails,
//! unless `FABRIC_TEST_ALLOW_SKIP=1` says that a run without hosts is acceptable here.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fabric_tcp::IFACE_ENV;
use serde_json::Value;

mod netns;
use netns::{Hosts, ADDRS};

/// The control port; each case's server has exited before the next one listens.
const PORT: &str = "47592";
/// Longest a case may take, both sides; past it both are killed and the case fails.
const CASE_DEADLINE: Duration = Duration::from_secs(60);
/// The client's `-T`: seconds without a completion before it gives up.
const CLIENT_IDLE_LIMIT: &str = "10";

/// One run of a tool across the hosts.
struct Case {
    /// Example binary.
    tool: &'static str,
    /// Options both sides get (endpoint type, operation, sizes, counts), besides `-p tcp`
    /// and `--json`.
    args: &'static [&'static str],
    /// Sizes the client must report, one JSON line each, in order.
    sizes: &'static [u64],
    /// The count every line must report: `sent` and `acked` (pingpong) or `iters`.
    count: u64,
}

/// `fabtests`' default sizes, which a run without `-S` goes through.
const DEFAULT_SIZES: &[u64] = &[64, 256, 1 << 10, 4 << 10, 64 << 10, 1 << 20];

/// Every case; an endpoint type is a row of its own (`-e msg` is one more row per tool).
const CASES: &[Case] = &[
    Case {
        tool: "pingpong",
        args: &["-e", "rdm", "-m", "tagged", "-I", "50", "-c"],
        sizes: DEFAULT_SIZES,
        count: 50,
    },
    Case {
        tool: "pingpong",
        args: &["-e", "rdm", "-m", "msg", "-I", "200", "-S", "8", "-c"],
        sizes: &[8],
        count: 200,
    },
    Case {
        tool: "rdm_tagged_bw",
        args: &["-W", "16", "-I", "128", "-w", "16"],
        sizes: DEFAULT_SIZES,
        count: 128,
    },
    Case {
        tool: "rma_bw",
        args: &["-o", "write", "-S", "64k", "-W", "8", "-I", "64"],
        sizes: &[64 << 10],
        count: 64,
    },
    Case {
        tool: "rma_bw",
        args: &["-o", "read", "-S", "4k", "-W", "8", "-I", "64"],
        sizes: &[4 << 10],
        count: 64,
    },
    Case {
        tool: "rma_bw",
        args: &["-o", "fadd", "-W", "1", "-I", "100"],
        sizes: &[8],
        count: 100,
    },
    Case {
        tool: "pingpong",
        args: &["-e", "msg", "-m", "tagged", "-I", "50", "-c"],
        sizes: DEFAULT_SIZES,
        count: 50,
    },
    Case {
        tool: "rdm_tagged_bw",
        args: &["-e", "msg", "-W", "16", "-I", "128", "-w", "16"],
        sizes: DEFAULT_SIZES,
        count: 128,
    },
    Case {
        tool: "rma_bw",
        args: &[
            "-e", "msg", "-o", "write", "-S", "64k", "-W", "8", "-I", "64",
        ],
        sizes: &[64 << 10],
        count: 64,
    },
    Case {
        tool: "rma_bw",
        args: &["-e", "msg", "-o", "read", "-S", "4k", "-W", "8", "-I", "64"],
        sizes: &[4 << 10],
        count: 64,
    },
];

/// The example binary `tool` of this test's build profile.
fn tool_path(tool: &str) -> PathBuf {
    // target/<profile>/deps/tcp_tools-<hash> -> target/<profile>/examples/<tool>
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|d| d.parent()).unwrap();
    let path = profile_dir.join("examples").join(tool);
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds the examples; run `cargo build --examples` \
         before `cargo test --test tcp_tools`",
        path.display()
    );
    path
}

/// A tool process on one host, its output collected by two threads; killed on drop.
struct Side {
    child: Child,
    out: Option<JoinHandle<String>>,
    err: Option<JoinHandle<String>>,
}

/// How a side ended: exit success, stdout, stderr.
struct Ended {
    ok: bool,
    stdout: String,
    stderr: String,
}

fn collect(mut r: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

impl Side {
    /// Runs `tool args...` in namespace `ns`, listening on `addr`.
    fn spawn(ns: &str, addr: &str, tool: &str, args: &[&str]) -> Side {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(tool_path(tool))
            .args(args)
            .env(IFACE_ENV, addr)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = collect(child.stdout.take().unwrap());
        let err = collect(child.stderr.take().unwrap());
        Side {
            child,
            out: Some(out),
            err: Some(err),
        }
    }

    /// Waits until `deadline` for the exit, killing the process past it.
    fn wait(mut self, deadline: Instant) -> Ended {
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let stdout = self.out.take().unwrap().join().unwrap();
        let mut stderr = self.err.take().unwrap().join().unwrap();
        if status.is_none() {
            stderr.push_str("\n[killed: past the case's deadline]");
        }
        Ended {
            ok: status.is_some_and(|s| s.success()),
            stdout,
            stderr,
        }
    }
}

impl Drop for Side {
    fn drop(&mut self) {
        if self.out.is_some() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `case` across the hosts; `Err` says what went wrong, with both sides' output.
fn run(hosts: &Hosts, case: &Case) -> Result<(), String> {
    let mut common = vec!["-p", "tcp", "--json"];
    common.extend_from_slice(case.args);
    let mut server_args = common.clone();
    server_args.extend(["-B", PORT]);
    let mut client_args = common;
    // The server runs on the first host.
    client_args.extend(["-T", CLIENT_IDLE_LIMIT, "-P", PORT, ADDRS[0]]);

    let deadline = Instant::now() + CASE_DEADLINE;
    let server = Side::spawn(hosts.name(0), ADDRS[0], case.tool, &server_args);
    // The client retries a refused control connection while the server starts.
    let client = Side::spawn(hosts.name(1), ADDRS[1], case.tool, &client_args);
    let c = client.wait(deadline);
    let s = server.wait(deadline);
    let both = || {
        format!(
            "client: {}\n{}\nserver: {}\n{}",
            c.stdout.trim(),
            c.stderr.trim(),
            s.stdout.trim(),
            s.stderr.trim()
        )
    };
    if !c.ok || !s.ok {
        return Err(format!(
            "exit: client {}, server {}\n{}",
            if c.ok { "ok" } else { "failed" },
            if s.ok { "ok" } else { "failed" },
            both()
        ));
    }
    let lines: Vec<Value> = c
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| format!("{e}: {l:?}\n{}", both())))
        .collect::<Result<_, _>>()?;
    let sizes: Vec<u64> = lines.iter().filter_map(|v| v["bytes"].as_u64()).collect();
    if sizes != case.sizes {
        return Err(format!(
            "sizes {sizes:?}, expected {:?}\n{}",
            case.sizes,
            both()
        ));
    }
    for v in &lines {
        if v["provider"] != "tcp" {
            return Err(format!("provider {}, not tcp\n{}", v["provider"], both()));
        }
        let counts: &[&str] = if case.tool == "pingpong" {
            &["sent", "acked"]
        } else {
            &["iters"]
        };
        for k in counts {
            if v[k].as_u64() != Some(case.count) {
                return Err(format!("{k} is {}, expected {}: {v}", v[k], case.count));
            }
        }
        let time = v["time_s"].as_f64().unwrap_or(0.0);
        if time <= 0.0 {
            return Err(format!("no positive time_s: {v}"));
        }
    }
    Ok(())
}

#[test]
fn tools_across_a_veth_pair() {
    // Before the hosts: a missing binary fails the test, whatever the machine.
    for case in CASES {
        tool_path(case.tool);
    }
    let Some(hosts) = Hosts::up() else {
        return;
    };
    let mut failed = Vec::new();
    for case in CASES {
        let start = Instant::now();
        let what = format!("{} {}", case.tool, case.args.join(" "));
        match run(&hosts, case) {
            Ok(()) => eprintln!("ok   {what} ({:?})", start.elapsed()),
            Err(e) => {
                eprintln!("FAIL {what}: {e}");
                failed.push(what);
            }
        }
    }
    assert!(failed.is_empty(), "failed across the hosts: {failed:?}");
}
