//! A small cluster on this machine for tests that launch jobs for real: nodes as network
//! namespaces on a bridge (`scripts/cluster/nodes.sh`), Open MPI's `mpirun` starting its
//! daemons in them through an rsh agent (`scripts/cluster/rsh`), and Slurm with a slurmd
//! per node (`scripts/cluster/slurm.sh`).
//!
//! ```ignore
//! mod cluster;
//! let Some(c) = cluster::Cluster::up(2) else { return };   // None: skipping allowed
//! let out = c.mpirun(&["-n", "8", "--host", &c.hosts(4), "/path/to/exe"]);
//! assert!(out.success(), "{out}");
//! c.slurm();
//! let out = c.srun(&["--mpi=pmix", "-N", "2", "-n", "8", "/path/to/exe"]);
//! ```
//!
//! The node names are fixed (`fnode1`..), so one cluster exists at a time on the machine:
//! [`Cluster::up`] waits for a file lock that the cluster holds until it is dropped. On
//! drop (a panic included) Slurm's daemons are stopped, whatever still runs in the nodes
//! is killed and the nodes are removed. Every launch has a deadline after which the
//! launcher is killed and the result says so.
//!
//! Needs root, iproute2, and for the launches `openmpi-bin` and `slurm-wlm munge` (CI
//! installs them, `.ci/run`). Without them [`Cluster::up`] panics, unless
//! `FABRIC_TEST_ALLOW_SKIP=1` says that a run without a cluster is acceptable here.
#![allow(dead_code)] // each test binary uses its own part of it

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a launch may take before its launcher is killed.
pub const LAUNCH_DEADLINE: Duration = Duration::from_secs(60);
/// How long [`Cluster::up`] waits for another cluster on this machine to go away.
const LOCK_WAIT: Duration = Duration::from_secs(300);
/// The nodes' subnet (`nodes.sh`), for the launchers' interface selection.
pub const SUBNET: &str = "10.79.0.0/24";
/// Where the scripts keep their state, the lock included.
const STATE: &str = "/run/fabric-cluster";
/// Exit status of the scripts when the machine lacks what they need.
const MISSING: i32 = 77;

/// The scripts' directory.
pub fn scripts() -> PathBuf {
    // From the workspace's root crate or a member's (the plugin's tests use it too).
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .map(|d| d.join("scripts/cluster"))
        .find(|p| p.is_dir())
        .expect("scripts/cluster in the workspace")
}

/// One node: its name (also its hostname and network namespace) and address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub name: String,
    pub addr: String,
}

/// The nodes, up while this lives; see the module's documentation.
pub struct Cluster {
    nodes: Vec<Node>,
    // Set before slurm.sh up runs, so that a failed start is stopped too.
    slurm_started: bool,
    slurm_conf: Option<String>,
    // Held until the cluster is down: the next cluster waits for it.
    _lock: File,
}

/// Whether a test may pass without running because the machine cannot make a cluster.
fn skip_allowed(why: &str) -> bool {
    let allowed = std::env::var("FABRIC_TEST_ALLOW_SKIP").as_deref() == Ok("1");
    assert!(
        allowed,
        "cannot make the test cluster ({why}); run as root with iproute2, openmpi-bin, \
         slurm-wlm and munge, or set FABRIC_TEST_ALLOW_SKIP=1 to accept not running this test"
    );
    eprintln!("SKIPPED (FABRIC_TEST_ALLOW_SKIP=1): {why}");
    true
}

/// Runs a script to completion, returning its stdout; `Err` carries the reason when the
/// machine lacks the script's prerequisites (status 77). Panics on any other failure.
fn script(name: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(scripts().join(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {name}: {e}"));
    let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    if out.status.code() == Some(MISSING) {
        return Err(err);
    }
    assert!(
        out.status.success(),
        "{name} {} failed ({}): {err}",
        args.join(" "),
        out.status
    );
    Ok(String::from_utf8(out.stdout).unwrap())
}

/// Takes `f`'s exclusive lock if no one holds it (flock(2), released when `f` closes,
/// with the process if it dies); whether it did.
fn try_lock(f: &File) -> bool {
    // SAFETY: flock(2) on a descriptor that `f` keeps open during the call; no memory
    // is passed.
    unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Whether `cmd` is on the PATH.
fn have(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

impl Cluster {
    /// Brings up `n` nodes (waiting for any other cluster on this machine to be dropped),
    /// or returns `None` when the machine cannot and skipping is allowed.
    pub fn up(n: usize) -> Option<Cluster> {
        if let Some(missing) = ["ip", "mpirun", "srun", "slurmd", "munged"]
            .into_iter()
            .find(|c| !have(c))
        {
            skip_allowed(&format!("'{missing}' is not installed"));
            return None;
        }
        // Every node mounts its own /tmp over the machine's, so a launcher's agent or a
        // rank's executable under /tmp is not there inside a node: orted fails to start
        // and mpirun waits for it forever.
        for (what, path) in [
            ("the repository", scripts()),
            ("the test executable", std::env::current_exe().unwrap()),
        ] {
            assert!(
                !path.starts_with("/tmp"),
                "{what} is under /tmp ({}), which each test node hides behind its own /tmp; \
                 run from elsewhere (and with CARGO_TARGET_DIR outside /tmp)",
                path.display()
            );
        }
        // The lock file lives where the scripts keep their state, which needs root.
        let lock = match std::fs::create_dir_all(STATE)
            .and_then(|()| File::create(Path::new(STATE).join("cluster.lock")))
        {
            Ok(f) => f,
            Err(e) => {
                skip_allowed(&format!(
                    "cannot create {STATE}/cluster.lock (not root?): {e}"
                ));
                return None;
            }
        };
        let start = Instant::now();
        while !try_lock(&lock) {
            assert!(
                start.elapsed() < LOCK_WAIT,
                "another test cluster held {STATE}/cluster.lock for {LOCK_WAIT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // A cluster left by a killed run (its lock died with it) goes first.
        let listed = match script("slurm.sh", &["down"])
            .and_then(|_| script("nodes.sh", &["down"]))
            .and_then(|_| script("nodes.sh", &["up", &n.to_string()]))
        {
            Ok(listed) => listed,
            Err(why) => {
                skip_allowed(&why);
                return None;
            }
        };
        let mut c = Cluster {
            nodes: Vec::new(),
            slurm_started: false,
            slurm_conf: None,
            _lock: lock,
        };
        c.nodes = listed
            .lines()
            .map(|l| {
                let (name, addr) = l.split_once(' ').expect("nodes.sh up: NAME ADDRESS lines");
                Node {
                    name: name.to_owned(),
                    addr: addr.to_owned(),
                }
            })
            .collect();
        assert_eq!(c.nodes.len(), n, "nodes.sh up {n} made {:?}", c.nodes);
        Some(c)
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// `mpirun`'s host list with `slots` slots on every node: `fnode1:4,fnode2:4`.
    pub fn hosts(&self, slots: usize) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{}:{slots}", n.name))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Starts Slurm on the nodes (`slurm.sh up`, 4 CPUs per node), once; stopped on drop.
    pub fn slurm(&mut self) {
        if self.slurm_started {
            return;
        }
        self.slurm_started = true;
        let out = script("slurm.sh", &["up", &self.nodes.len().to_string(), "4"])
            .unwrap_or_else(|why| panic!("slurm.sh up: {why}"));
        let conf = out
            .lines()
            .find_map(|l| l.strip_prefix("SLURM_CONF="))
            .unwrap_or_else(|| panic!("slurm.sh up printed no SLURM_CONF: {out}"));
        self.slurm_conf = Some(conf.to_owned());
    }

    /// The config file Slurm's commands need (`SLURM_CONF`), once [`Cluster::slurm`] ran.
    pub fn slurm_conf(&self) -> &str {
        self.slurm_conf
            .as_deref()
            .expect("Cluster::slurm not called")
    }

    /// `CMD ARGS` inside `node` (its network, hostname and /tmp), within `deadline`.
    pub fn exec(&self, node: &str, cmd: &[&str], deadline: Duration) -> Launch {
        let mut c = command("bash");
        c.arg(scripts().join("nodes.sh"))
            .args(["exec", node])
            .args(cmd);
        run(c, deadline)
    }

    /// `mpirun ARGS` from the root namespace, its daemons started in the nodes by the rsh
    /// agent, as root and with more ranks than cores allowed; within [`LAUNCH_DEADLINE`].
    pub fn mpirun(&self, args: &[&str]) -> Launch {
        self.mpirun_within(args, LAUNCH_DEADLINE)
    }

    /// [`Cluster::mpirun`] with another deadline.
    pub fn mpirun_within(&self, args: &[&str], deadline: Duration) -> Launch {
        let agent = scripts().join("rsh");
        let mut c = command("mpirun");
        c.args(["--allow-run-as-root", "--oversubscribe"])
            // The nodes share this machine's cores: each node's daemon binding its ranks
            // from core 0 up would put ranks of different nodes on the same core.
            .args(["--bind-to", "none"])
            // rsh even inside a Slurm allocation, straight from mpirun to every node.
            .args(["--mca", "plm", "rsh", "--mca", "plm_rsh_agent"])
            .arg(agent)
            .args(["--mca", "plm_rsh_no_tree_spawn", "1"])
            .args(["--mca", "oob_tcp_if_include", SUBNET])
            .args(["--mca", "btl_tcp_if_include", SUBNET])
            .args(args);
        run(c, deadline)
    }

    /// `srun ARGS` against this cluster's Slurm (started by [`Cluster::slurm`]); within
    /// [`LAUNCH_DEADLINE`].
    pub fn srun(&self, args: &[&str]) -> Launch {
        self.srun_within(args, LAUNCH_DEADLINE)
    }

    /// [`Cluster::srun`] with another deadline.
    pub fn srun_within(&self, args: &[&str], deadline: Duration) -> Launch {
        let mut c = command("srun");
        c.env("SLURM_CONF", self.slurm_conf()).args(args);
        run(c, deadline)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Best effort, and never a panic while unwinding: report what failed instead.
        for (name, args) in [("slurm.sh", "down"), ("nodes.sh", "down")] {
            if name == "slurm.sh" && !self.slurm_started {
                continue;
            }
            match Command::new("bash")
                .arg(scripts().join(name))
                .arg(args)
                .stdin(Stdio::null())
                .output()
            {
                Ok(o) if o.status.success() => {}
                Ok(o) => eprintln!(
                    "cluster: {name} {args} failed ({}): {}",
                    o.status,
                    String::from_utf8_lossy(&o.stderr).trim()
                ),
                Err(e) => eprintln!("cluster: cannot run {name}: {e}"),
            }
        }
    }
}

/// What a launch did.
pub struct Launch {
    /// The launcher's exit status; `None` when it was killed at the deadline.
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Launch {
    /// Whether the launcher finished in time and succeeded.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The lines of stdout that start with `mark`, without it.
    pub fn marked<'a>(&'a self, mark: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.stdout
            .lines()
            .filter_map(move |l| l.find(mark).map(|at| &l[at + mark.len()..]))
    }

    /// The `KEY=VALUE` words of every line marked with `mark` (see [`Launch::marked`]).
    pub fn records(&self, mark: &str) -> Vec<BTreeMap<String, String>> {
        self.marked(mark)
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|w| w.split_once('='))
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect()
            })
            .collect()
    }
}

impl fmt::Display for Launch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(s) => write!(f, "exited with {s}")?,
            None => write!(f, "killed at its deadline")?,
        }
        write!(
            f,
            " after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.elapsed, self.stdout, self.stderr
        )
    }
}

/// Collects a pipe into a buffer that can be read before the pipe ends: a launcher's
/// leftover daemons may hold it open after the launcher is killed.
fn drain(mut r: impl Read + Send + 'static) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let b = buf.clone();
    let t = std::thread::spawn(move || {
        let mut chunk = [0u8; 4096];
        while let Ok(n) = r.read(&mut chunk) {
            if n == 0 {
                break;
            }
            b.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (buf, t)
}

/// `prog ARGS` with `env` added, run like the launches of [`Cluster`] (to completion or
/// `deadline`), for launches that need no cluster: a launcher pointed at nothing.
pub fn launch_with_env(
    prog: &str,
    args: &[&str],
    env: &[(&str, &str)],
    deadline: Duration,
) -> Launch {
    let mut c = command(prog);
    c.args(args).envs(env.iter().copied());
    run(c, deadline)
}

/// A command for `prog` without the launcher variables of the environment it would
/// inherit: a launcher inside a job of a real cluster would join that job, not ours.
fn command(prog: &str) -> Command {
    let mut c = Command::new(prog);
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| {
            k.starts_with("SLURM_") || k.starts_with("OMPI_") || k.starts_with("PMIX_")
        }) {
            c.env_remove(k);
        }
    }
    c
}

/// Runs `c` to completion or until `deadline`, when it is killed.
fn run(mut c: Command, deadline: Duration) -> Launch {
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let start = Instant::now();
    let mut child = c
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {c:?}: {e}"));
    let (out, tout) = drain(child.stdout.take().unwrap());
    let (err, terr) = drain(child.stderr.take().unwrap());
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    // The pipes end with the launcher, unless something it started outlives it: give the
    // readers a moment, then take what they have.
    let grace = Instant::now();
    while !(tout.is_finished() && terr.is_finished()) && grace.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = |b: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&b.lock().unwrap()).into_owned();
    Launch {
        status,
        stdout: text(&out),
        stderr: text(&err),
        elapsed,
    }
}
