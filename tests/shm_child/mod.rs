//! The child-process harness of the shm tests that span processes: a test re-runs its
//! own binary as `child_entry` (an ignored test) with a role, and parent and child talk
//! in lines over the child's stdin/stdout, the child's reports marked "@@ ".
// Each test crate uses only part of it.
#![allow(dead_code)]

pub mod node;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// The child's role.
pub const ROLE: &str = "FABRIC_SHM_ROLE";
/// The child's stack (a name the test crate maps to a `Stack` type).
pub const STACK: &str = "FABRIC_SHM_STACK";
/// Longest any single wait may take before the test fails instead of hanging.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A child process of the test binary running a role.
pub struct Kid {
    /// The process.
    pub child: Child,
    stdin: ChildStdin,
    /// Its reports (the text after "@@ ").
    pub lines: Receiver<String>,
}

impl Kid {
    /// Re-runs this test binary as `child_entry` with `role` on `stack` (and `env`).
    pub fn spawn(role: &str, stack: &str, env: &[(&str, &str)]) -> Kid {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "child_entry",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, role)
        .env(STACK, stack)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn child");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                // libtest may have printed "test child_entry ... " on the same line.
                if let Some(at) = line.find("@@ ") {
                    if tx.send(line[at + 3..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        Kid {
            child,
            stdin,
            lines,
        }
    }

    /// The next line the child reports (without the "@@ " marker).
    #[track_caller]
    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("child reported nothing in time")
    }

    /// The next report, which must start with `word`; returns the rest.
    #[track_caller]
    pub fn expect(&self, word: &str) -> String {
        let l = self.line();
        match l.strip_prefix(word) {
            Some(rest) => rest.trim().to_string(),
            None => panic!("child said {l:?}, expected {word}"),
        }
    }

    /// Sends the child one line.
    pub fn say(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to child");
        self.stdin.flush().unwrap();
    }

    /// Waits for a clean exit.
    #[track_caller]
    pub fn finish(mut self) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "child failed: {st}");
                return;
            }
            assert!(Instant::now() < deadline, "child did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The child's end: lines from the parent, reports to it.
pub struct Ctl {
    lines: Receiver<String>,
}

impl Ctl {
    /// Starts reading the parent's lines.
    pub fn new() -> Ctl {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::stdin().lock().lines().map_while(|l| l.ok()) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Ctl { lines }
    }

    /// Reports one line to the parent.
    pub fn report(&self, s: &str) {
        println!("@@ {s}");
        std::io::stdout().flush().unwrap();
    }

    /// The parent's next line.
    pub fn line(&self) -> String {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("parent said nothing")
    }

    /// The parent's next line, which must start with `word`; returns the rest.
    pub fn expect(&self, word: &str) -> String {
        let l = self.line();
        l.strip_prefix(word)
            .unwrap_or_else(|| panic!("parent said {l:?}, expected {word}"))
            .trim()
            .to_string()
    }

    /// The parent's next line, if one is there.
    pub fn try_line(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The bytes of a [`hex`] string.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}
