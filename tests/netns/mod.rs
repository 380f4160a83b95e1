//! Two test hosts on this machine for tests between hosts: network namespaces joined by a
//! veth pair (`tests/netns/hosts.sh`), and processes in them. A test binary re-runs
//! itself inside a host as a child (its ignored test `child_entry`, which acts on
//! [`CHILD_ENV`]); the child [`report`]s lines to the parent, which reads them with
//! [`Kid::expect`] and can answer on the child's stdin ([`Kid::tell`], [`told`]).
//!
//! ```ignore
//! mod netns;
//! let Some(mut hosts) = netns::Hosts::up() else { return };   // None: skipping allowed
//! let (srv, cli) = hosts.pair(("server", "client"), 1, &[]);
//! cli.expect("VERIFIED");
//! hosts.finish(&cli);
//! ```
//!
//! Each [`Hosts`] has namespaces of its own (named after the pid of the `hosts.sh` that
//! made them), so tests run in parallel. On drop (a panic included) the children are
//! killed and the namespaces deleted.
//!
//! Needs root and iproute2 (CI runs as root; `.ci/run` installs iproute2). Without them
//! [`Hosts::up`] panics, unless `FABRIC_TEST_ALLOW_SKIP=1` says that a run without hosts
//! is acceptable here.
#![allow(dead_code)] // each test binary uses its own part of it

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use fabric_tcp::IFACE_ENV;

/// The two hosts' addresses (`hosts.sh`), on their veth ends.
pub const ADDRS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
/// How long the parent waits for a child's line or exit, unless told otherwise.
pub const DEADLINE: Duration = Duration::from_secs(20);
/// Environment variable that makes a child's `child_entry` act: its role.
pub const CHILD_ENV: &str = "FABRIC_NETNS_CHILD";
/// A server's endpoint name in hex, for its client ([`Hosts::pair`]).
pub const SERVER_ENV: &str = "FABRIC_NETNS_SERVER";
/// A server's region as `remote address:key`, for its client ([`Hosts::pair`]).
pub const REGION_ENV: &str = "FABRIC_NETNS_REGION";
/// Prefix of the lines children report on stdout: libtest prints around them.
const MARK: &str = "NETNS ";
/// Exit status of `hosts.sh` when the machine lacks what it needs.
const MISSING: i32 = 77;

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/netns/hosts.sh")
}

/// Reports a line to the parent, in a child.
pub fn report(what: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "\n{MARK}{what}").unwrap();
    out.flush().unwrap();
}

/// Waits, in a child, for the parent's next line on stdin, which must be `what`.
pub fn told(what: &str) {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), what);
}

/// The two namespaces, and the children running in them: see the module's
/// documentation.
pub struct Hosts {
    names: Vec<String>,
    children: Vec<Child>,
}

/// A child started by [`Hosts::spawn`]: its stdin and the lines it reports.
pub struct Kid {
    idx: usize,
    role: &'static str,
    stdin: ChildStdin,
    lines: Receiver<String>,
}

impl Kid {
    /// The role the child was started as.
    pub fn role(&self) -> &str {
        self.role
    }

    /// The next line the child reports, which must start with `what`, within
    /// [`DEADLINE`]; returns the rest.
    pub fn expect(&self, what: &str) -> String {
        self.expect_within(what, DEADLINE)
    }

    /// [`Kid::expect`] within `d`.
    pub fn expect_within(&self, what: &str, d: Duration) -> String {
        let line = self
            .lines
            .recv_timeout(d)
            .unwrap_or_else(|e| panic!("{} did not report {what}: {e}", self.role));
        line.strip_prefix(what)
            .unwrap_or_else(|| panic!("{} reported {line:?}, not {what}", self.role))
            .trim()
            .to_owned()
    }

    /// Writes `what` as a line to the child's stdin (see [`told`]).
    pub fn tell(&mut self, what: &str) {
        writeln!(self.stdin, "{what}").unwrap();
    }
}

impl Hosts {
    /// The hosts, or `None` when the machine cannot make them and skipping is allowed.
    pub fn up() -> Option<Hosts> {
        let out = Command::new("bash")
            .arg(script())
            .arg("up")
            .output()
            .unwrap();
        let why = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(MISSING) {
            let allowed = std::env::var("FABRIC_TEST_ALLOW_SKIP").as_deref() == Ok("1");
            assert!(
                allowed,
                "cannot make test hosts ({}); run as root with iproute2, or set \
                 FABRIC_TEST_ALLOW_SKIP=1 to accept not running this test",
                why.trim()
            );
            eprintln!("SKIPPED (FABRIC_TEST_ALLOW_SKIP=1): {}", why.trim());
            return None;
        }
        assert!(out.status.success(), "hosts.sh up failed: {why}");
        let names: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        assert_eq!(names.len(), 2, "hosts.sh up printed {names:?}");
        Some(Hosts {
            names,
            children: Vec::new(),
        })
    }

    /// The namespace of host `h`.
    pub fn name(&self, h: usize) -> &str {
        &self.names[h]
    }

    /// Runs `args` inside host `h`; panics if it fails, else returns its stdout.
    pub fn run(&self, h: usize, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.names[h]])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert!(
            out.status.success(),
            "{args:?} in {} failed: {}",
            self.names[h],
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The veth end of host `h`.
    pub fn veth(&self, h: usize) -> String {
        let out = self.run(h, &["ip", "-o", "link", "show", "type", "veth"]);
        // "2: fv1-123@if3: <...> ..."
        let name = out
            .split(':')
            .nth(1)
            .and_then(|s| s.trim().split('@').next())
            .unwrap_or_else(|| panic!("no veth in {}: {out:?}", self.names[h]));
        name.to_owned()
    }

    /// Starts this binary's `child_entry` as `role` on host `h`, listening on its
    /// address, with `env` besides; it is killed when the hosts are dropped.
    pub fn spawn(&mut self, h: usize, role: &'static str, env: &[(&str, String)]) -> Kid {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.names[h]])
            .arg(exe)
            .args(["--ignored", "--exact", "child_entry", "--nocapture"])
            .env(CHILD_ENV, role)
            .env(IFACE_ENV, ADDRS[h])
            // The hybrid provider's node identity comes from the host (its network
            // namespace); an override inherited from this process's environment would
            // put both hosts on one node.
            .env_remove(fabric_hybrid::NODE_ENV)
            .envs(env.iter().cloned())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(MARK) {
                    eprintln!("{role}: {}", &line[at + MARK.len()..]);
                    if tx.send(line[at + MARK.len()..].to_owned()).is_err() {
                        break;
                    }
                }
            }
        });
        self.children.push(child);
        Kid {
            idx: self.children.len() - 1,
            role,
            stdin,
            lines: rx,
        }
    }

    /// Starts the server `roles.0` on host 0 and, once it reported `NAME <hex>` and
    /// `REGION <addr:key>`, its client `roles.1` on host `client_host` with them in
    /// [`SERVER_ENV`] and [`REGION_ENV`]; both get `env`.
    pub fn pair(
        &mut self,
        roles: (&'static str, &'static str),
        client_host: usize,
        env: &[(&str, String)],
    ) -> (Kid, Kid) {
        let srv = self.spawn(0, roles.0, env);
        let name = srv.expect("NAME");
        let region = srv.expect("REGION");
        let mut env = env.to_vec();
        env.extend([(SERVER_ENV, name), (REGION_ENV, region)]);
        let cli = self.spawn(client_host, roles.1, &env);
        (srv, cli)
    }

    /// The process id of `kid`: `ip netns exec` execs the command, so it is the child's
    /// own.
    pub fn pid(&self, kid: &Kid) -> u32 {
        self.children[kid.idx].id()
    }

    /// Kills `kid` and waits for it.
    pub fn kill(&mut self, kid: &Kid) {
        let c = &mut self.children[kid.idx];
        c.kill().unwrap();
        c.wait().unwrap();
    }

    /// Waits for `kid` to exit, within [`DEADLINE`]; panics unless it succeeded.
    pub fn finish(&mut self, kid: &Kid) {
        let start = Instant::now();
        loop {
            if let Some(s) = self.children[kid.idx].try_wait().unwrap() {
                assert!(s.success(), "{} failed", kid.role);
                return;
            }
            assert!(start.elapsed() < DEADLINE, "{} did not exit", kid.role);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let ok = Command::new("bash")
            .arg(script())
            .arg("down")
            .args(&self.names)
            .status()
            .is_ok_and(|s| s.success());
        // Not an assert: a panic while unwinding from another would abort.
        if !ok {
            eprintln!("hosts.sh down {:?} failed", self.names);
        }
    }
}
