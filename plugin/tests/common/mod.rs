//! What the plugin's tests share: the plugin installed under the names libfabric loads
//! it by ([`provider_dir`]), programs compiled against it ([`build`], [`mpi_prog`]),
//! Open MPI's arguments for `mtl ofi` over one of its providers ([`mtl_ofi`]), and
//! running a command with a deadline ([`run`]).
//!
//! Everything lives in fixed directories under the cargo target directory, next to the
//! test binaries: not under /tmp, which the cluster's nodes do not share with this
//! machine, and not once per test process, which piled up copies of the library. A
//! file is replaced through a temporary name and a rename, so test binaries that run at
//! the same time (and the programs they start) see the old file or the new one, never
//! part of one.
#![allow(dead_code)] // each test binary uses its own part of it

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// The providers the one library serves, each by the name of the file it is loaded
/// from (`lib<name>-fi.so`).
pub const PROVIDERS: [&str; 3] = ["fab_shm", "fab_tcp", "fab_hybrid"];

/// How long a compiler may take.
const BUILD_DEADLINE: Duration = Duration::from_secs(120);

/// `target/<profile>`: the test binary is `target/<profile>/deps/<name>`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// A name in `dst`'s directory for writing what will become `dst`, unique among the
/// processes and threads that may write it at the same time. libfabric loads every
/// file whose name ends in `fi.so` from its provider path; this one does not.
fn temp_name(dst: &Path) -> PathBuf {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let mut name = dst.file_name().expect("a file name").to_os_string();
    name.push(format!(
        ".tmp-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ));
    dst.with_file_name(name)
}

/// Copies `src` to `dst` unless `dst` already has `src`'s length and modification
/// time; the copy is given `src`'s modification time, which marks it as current.
fn install(src: &Path, dst: &Path) -> io::Result<()> {
    let want = fs::metadata(src)?;
    let mtime = want.modified()?;
    if let Ok(have) = fs::metadata(dst) {
        if have.len() == want.len() && have.modified()? == mtime {
            return Ok(());
        }
    }
    let tmp = temp_name(dst);
    let copied = fs::copy(src, &tmp)
        .and_then(|_| File::options().write(true).open(&tmp)?.set_modified(mtime))
        .and_then(|()| fs::rename(&tmp, dst));
    if copied.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    copied
}

/// The directory to give libfabric as `FI_PROVIDER_PATH`: `target/<profile>/
/// fabric-ofi-prov`, holding the plugin as `lib<name>-fi.so` for each of
/// [`PROVIDERS`], brought up to date with the built library once per test process.
///
/// Copies, not links: glibc's `dlopen` of a second path to an inode it has loaded
/// returns the object already loaded, and the plugin tells which provider it is from
/// the file name it was loaded under.
pub fn provider_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let profile = profile_dir();
        // Cargo builds the cdylib into deps/ and links it up into the profile dir.
        let so = [
            profile.join("deps/libfabric_ofi.so"),
            profile.join("libfabric_ofi.so"),
        ]
        .into_iter()
        .find(|p| p.exists())
        .expect("libfabric_ofi.so built next to the test binary");
        let dir = profile.join("fabric-ofi-prov");
        fs::create_dir_all(&dir).expect("provider dir");
        for name in PROVIDERS {
            let dst = dir.join(format!("lib{name}-fi.so"));
            install(&so, &dst).unwrap_or_else(|e| panic!("installing {}: {e}", dst.display()));
        }
        dir
    })
    .clone()
}

/// `target/<profile>/fabric-ofi-bin`, where [`build`] puts programs.
fn bin_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = profile_dir().join("fabric-ofi-bin");
        fs::create_dir_all(&dir).expect("program dir");
        dir
    })
    .clone()
}

/// Runs the compiler command `cc` (its flags, sources and libraries), which must
/// succeed, with `-o` added for the program `name`; returns the program's path.
pub fn build(cc: &mut Command, name: &str) -> PathBuf {
    let bin = bin_dir().join(name);
    let tmp = temp_name(&bin);
    let out = run(cc.arg("-o").arg(&tmp), BUILD_DEADLINE, name);
    if !out.status.success() {
        let _ = fs::remove_file(&tmp);
        panic!("building {name} failed:\n{}", text(&out));
    }
    fs::rename(&tmp, &bin).unwrap_or_else(|e| panic!("renaming {}: {e}", tmp.display()));
    bin
}

/// `tests/mpi/<name>.c` compiled with `mpicc` as `mpi_<name>`, once per test process.
pub fn mpi_prog(name: &'static str) -> PathBuf {
    static BINS: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());
    let mut bins = BINS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, b)) = bins.iter().find(|(n, _)| *n == name) {
        return b.clone();
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/mpi/{name}.c"));
    let bin = build(
        Command::new("mpicc")
            .args(["-O1", "-Wall", "-Werror"])
            .arg(&src),
        &format!("mpi_{name}"),
    );
    bins.push((name, bin.clone()));
    bin
}

/// Open MPI's arguments for point-to-point on `mtl ofi` over `prov` alone, loaded from
/// [`provider_dir`] in every rank, verbose enough that each rank names the provider it
/// opened ([`ranks_on`]).
pub fn mtl_ofi(prov: &str) -> Vec<String> {
    let path = format!("FI_PROVIDER_PATH={}", provider_dir().display());
    [
        "--mca",
        "pml",
        "cm",
        "--mca",
        "mtl",
        "ofi",
        "--mca",
        "mtl_ofi_provider_include",
        prov,
        "--mca",
        "mtl_base_verbose",
        "100",
        "-x",
        path.as_str(),
    ]
    .map(str::to_owned)
    .to_vec()
}

/// How many ranks of a job run with [`mtl_ofi`] said that their `mtl ofi` opened
/// `prov`, from the job's output.
pub fn ranks_on(out: &str, prov: &str) -> usize {
    out.matches(&format!("mtl:ofi:provider: {prov}")).count()
}

/// How long the output of a finished or killed command may take to reach its end: a
/// process it started may still hold its pipes.
const DRAIN_GRACE: Duration = Duration::from_secs(10);

/// Reads `pipe` into a buffer shared with the caller, as it comes.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> (Arc<Mutex<Vec<u8>>>, Receiver<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let (done, eof) = mpsc::channel();
    let sink = buf.clone();
    thread::spawn(move || {
        if let Some(mut p) = pipe {
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = p.read(&mut chunk) {
                sink.lock().unwrap().extend_from_slice(&chunk[..n]);
            }
        }
        let _ = done.send(());
    });
    (buf, eof)
}

/// Waits for `child` at most `limit`, killing it (and its process group, when it leads
/// one) past that. Its captured output is read while it runs: a job that writes more
/// than a pipe holds would otherwise block.
pub fn wait_deadline(mut child: Child, limit: Duration, what: &str) -> Output {
    let (stdout, out_eof) = drain(child.stdout.take());
    let (stderr, err_eof) = drain(child.stderr.take());
    let end = Instant::now() + limit;
    let (status, late) = loop {
        match child.try_wait().expect("try_wait") {
            Some(status) => break (status, false),
            None if Instant::now() >= end => {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .stderr(Stdio::null())
                    .status();
                let _ = child.kill();
                break (child.wait().expect("wait"), true);
            }
            None => thread::sleep(Duration::from_millis(20)),
        }
    };
    let grace = Instant::now() + DRAIN_GRACE;
    for eof in [out_eof, err_eof] {
        let _ = eof.recv_timeout(grace.saturating_duration_since(Instant::now()));
    }
    let take = |b: &Arc<Mutex<Vec<u8>>>| std::mem::take(&mut *b.lock().unwrap());
    let out = Output {
        status,
        stdout: take(&stdout),
        stderr: take(&stderr),
    };
    assert!(
        !late,
        "{what} did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `cmd` with its output captured, within `limit`.
pub fn run(cmd: &mut Command, limit: Duration, what: &str) -> Output {
    let child = cmd
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {what}: {e}"));
    wait_deadline(child, limit, what)
}

/// A command's stdout, then its stderr.
pub fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
